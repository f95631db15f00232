"""The operators of a view's expressions on values (NULL is None), with Spark's semantics in the mode
they are evaluated in (:mod:`cbp.views.mode`): ``+ - * / %`` of numbers (a decimal exact, an int past 64
bits wrapped in non-ANSI mode), of a date or timestamp and an interval or days; a division by zero
fails (ANSI) or is NULL; comparisons with Spark's implicit casts (:func:`cbp.views.vtypes.coerce_pair`);
``AND``/``OR`` with SQL's three values. :mod:`cbp.views.exprs` and :mod:`cbp.views.compiled` use them.

    >>> _div(1, 0) is None
    Traceback (most recent call last):
    ...
    ZeroDivisionError: division by zero (Spark's ANSI mode fails the query too)
    >>> _cmp(1, "1", lambda x, y: x == y), _and(None, False)
    (True, False)
"""

from __future__ import annotations

import datetime
import decimal
import math
from collections.abc import Callable
from typing import Any

from . import datefns
from .mode import ansi, int_result
from .vtypes import coerce_pair

__all__ = ["_num", "_div", "_mod", "_cmp", "_and", "_or", "_EXACT"]

_EXACT = decimal.Context(prec=200, rounding=decimal.ROUND_DOWN)
_TIMES = (datetime.date, datefns.Interval)


def _num(a: Any, b: Any, op: Callable[[Any, Any], Any], sign: int = 0) -> Any:
    if a is None or b is None:
        return None
    if sign and (isinstance(a, _TIMES) or isinstance(b, _TIMES)):
        return datefns.shift(a, b, sign)  # a date or timestamp plus or minus an interval or days
    if isinstance(a, decimal.Decimal) or isinstance(b, decimal.Decimal):
        if isinstance(a, float) or isinstance(b, float):
            return op(float(a), float(b))
        with decimal.localcontext(_EXACT):
            return op(decimal.Decimal(a), decimal.Decimal(b))
    r = op(a, b)
    return int_result(r) if type(r) is int else r  # non-ANSI: a long wraps


def _div(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if b == 0:
        if not ansi():  # Spark's non-ANSI mode: NULL
            return None
        raise ZeroDivisionError("division by zero (Spark's ANSI mode fails the query too)")
    if (
        isinstance(a, float)
        or isinstance(b, float)
        or not (isinstance(a, decimal.Decimal) or isinstance(b, decimal.Decimal))
    ):
        return float(a) / float(b)
    return _EXACT.divide(decimal.Decimal(a), decimal.Decimal(b))  # rounded to its type by cbp_decimal


def _mod(a: Any, b: Any) -> Any:
    if a is None or b is None:
        return None
    if b == 0:
        if not ansi():
            return None
        raise ZeroDivisionError("remainder of a division by zero (Spark's ANSI mode fails the query too)")
    if isinstance(a, int) and isinstance(b, int):  # Spark's % keeps the sign of the dividend
        r = abs(a) % abs(b)
        return r if a >= 0 else -r
    if isinstance(a, decimal.Decimal) or isinstance(b, decimal.Decimal):
        if not (isinstance(a, float) or isinstance(b, float)):
            return _EXACT.remainder(decimal.Decimal(a), decimal.Decimal(b))  # the dividend's sign too
    return math.fmod(a, b)


def _cmp(a: Any, b: Any, op: Callable[[Any, Any], bool]) -> Any:
    if a is None or b is None:
        return None
    x, y = coerce_pair(a, b)
    return None if x is None or y is None else op(x, y)  # (non-ANSI: a string that is not a value: NULL)


def _and(a: Any, b: Any) -> Any:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or(a: Any, b: Any) -> Any:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False
