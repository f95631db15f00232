"""The column types of a view beyond int, float, string and bool: ``date``, ``timestamp``,
``decimal(P,S)`` and ``binary``, with Spark's rules: the precision and scale of decimal arithmetic
and of ``sum``/``avg``, the coercions of a comparison (a string compared with a date is read as a
date, a decimal with a float as a float), values rounded HALF_UP to their type, and a decimal that
overflows its type failing the epoch (``view-overflow``, as Spark's ANSI mode fails the query).

    >>> arith("*", "decimal(10,2)", "int")
    'decimal(31,2)'
    >>> conform(decimal.Decimal("1.005"), "decimal(5,2)", "v")
    Decimal('1.01')
"""

from __future__ import annotations

import datetime
import decimal
import json
from typing import Any

from ..errors import UserCodeError
from ..spec.typedvalues import decimal_of, from_json, to_json
from .casts import cast_value
from .mode import ansi, wrap64

__all__ = ["is_numeric", "is_typed_view_type", "dec_type", "arith", "wider", "literal_type", "conform"]
__all__ += ["coerce_pair", "key_text", "decode_key", "sum_type", "avg_value", "VIEW_TYPES", "family", "NARROW"]

#: The narrow numbers a view's column may be (a Delta source's ``int``/``smallint``/``tinyint``/``float``
#: column, a view's ``CAST(x AS INT)``, ``year(d)``): their family type and width (:mod:`cbp.views.intwidth`).
NARROW = {"int32": ("int", 32), "int16": ("int", 16), "int8": ("int", 8), "float32": ("float", 32)}
#: The scalar types a view reads (besides ``decimal(P,S)``).
VIEW_TYPES = frozenset({"int", "float", "string", "bool", "date", "timestamp", "binary", *NARROW})
_MAX = 38
_EXACT = decimal.Context(prec=200, rounding=decimal.ROUND_DOWN)
_UTC = datetime.timezone.utc


def family(t: str) -> str:
    """The type a view's expressions compute with: ``int`` for ``int32``, ``int16``, ``int8``, ``float`` for
    ``float32`` (their width is :mod:`cbp.views.intwidth`'s), any other type itself."""
    return NARROW[t][0] if t in NARROW else t


def is_numeric(t: str | None) -> bool:
    """int, float (of any width) or a decimal.

    >>> is_numeric("decimal(5,2)"), is_numeric("date"), is_numeric("int16")
    (True, False, True)
    """
    return t in ("int", "float") or t in NARROW or (t is not None and decimal_of(t) is not None)


def is_typed_view_type(t: str) -> bool:
    """A type a view column may have."""
    return t in VIEW_TYPES or decimal_of(t) is not None


def _decimal(p: int, s: int) -> str:
    return f"decimal({p},{s})"


def _adjust(p: int, s: int) -> tuple[int, int]:
    """Spark's ``adjustPrecisionScale`` (allowPrecisionLoss): a result wider than 38 digits keeps its
    integral digits and at least 6 (or its scale) after the point."""
    if p <= _MAX:
        return p, s
    int_digits = p - s
    return _MAX, max(_MAX - int_digits, min(s, 6))


def literal_type(text: str) -> tuple[int, int]:
    """``(P, S)`` of a decimal literal as Spark reads it (``1.5`` is decimal(2,1), ``0.05`` decimal(2,2))."""
    t = decimal.Decimal(text).as_tuple()
    s = max(-int(t.exponent), 0)
    return max(len(t.digits), s, 1), s


def dec_type(t: str, literal: int | None = None) -> tuple[int, int]:
    """``(P, S)`` of an operand in decimal arithmetic: a decimal's own, a bigint's (20,0), an int
    literal's fewest digits."""
    ps = decimal_of(t)
    if ps is not None:
        return ps
    if literal is not None:
        return max(len(str(abs(literal))), 1), 0
    if t in NARROW and NARROW[t][0] == "int":  # Spark's int is decimal(10,0), smallint (5,0), tinyint (3,0)
        return {8: 3, 16: 5, 32: 10}[NARROW[t][1]], 0
    return 20, 0


def arith(op: str, a: str, b: str | None, lit_a: int | None = None, lit_b: int | None = None) -> str:
    """The result type of ``a op b`` (``op`` one of ``+ - * / %``, or ``neg``) when one side is a
    decimal and neither is a float."""
    p1, s1 = dec_type(a, lit_a)
    if b is None:
        return _decimal(p1, s1)
    p2, s2 = dec_type(b, lit_b)
    if op in "+-":
        s = max(s1, s2)
        p, s = _adjust(max(p1 - s1, p2 - s2) + s + 1, s)
    elif op == "*":
        p, s = _adjust(p1 + p2 + 1, s1 + s2)
    elif op == "/":
        s = max(6, s1 + p2 + 1)
        p, s = _adjust(p1 - s1 + s2 + s, s)
    else:  # %
        s = max(s1, s2)
        p, s = _adjust(min(p1 - s1, p2 - s2) + s, s)
    return _decimal(p, s)


def wider(a: str, b: str) -> str:
    """The type two CASE branches (or a UNION's columns) share: float over anything numeric, the wider
    decimal of two decimals (or a decimal and an int), a timestamp over a date."""
    if a == b:
        return a
    if a in NARROW or b in NARROW:
        return _wider_narrow(a, b)
    if "float" in (a, b):
        return "float"
    if {a, b} == {"date", "timestamp"}:
        return "timestamp"
    p1, s1 = dec_type(a)
    p2, s2 = dec_type(b)
    s = max(s1, s2)
    return _decimal(min(_MAX, max(p1 - s1, p2 - s2) + s), s)


def _wider_narrow(a: str, b: str) -> str:
    """:func:`wider` of two numbers, one narrow: the wider int; a float32 over any int (in non-ANSI mode;
    a double in ANSI mode), a double over a float32 and a decimal or double (Spark's ``findWiderTypeForTwo``).

    >>> _wider_narrow("int16", "int32"), _wider_narrow("int", "float32"), _wider_narrow("float32", "decimal(5,2)")
    ('int32', 'float', 'float')
    """
    fa, fb = family(a), family(b)
    if fa == fb == "int":
        return max(a, b, key=lambda t: NARROW.get(t, ("int", 64))[1])
    if "float32" in (a, b) and {fa, fb} <= {"int", "float"} and "float" not in (a, b):
        return "float32" if a == b or not ansi() else "float"
    return wider(fa, fb)


def sum_type(t: str) -> str:
    """``sum`` of a decimal(P,S): decimal(min(38, P+10), S); of an int an int (a ``bigint``, whatever the
    int's width), of a float a float (a ``double``)."""
    ps = decimal_of(t)
    return _decimal(min(_MAX, ps[0] + 10), ps[1]) if ps else family(t)


def avg_type(t: str) -> str:
    """``avg`` of a decimal(P,S): decimal(min(38, P+4), min(38, S+4)); of an int or a float a float."""
    ps = decimal_of(t)
    return _decimal(min(_MAX, ps[0] + 4), min(_MAX, ps[1] + 4)) if ps else "float"


def avg_value(total: Any, count: int, arg_type: str, view: str) -> Any:
    """``avg`` as Spark computes it: a float's mean, or a decimal sum divided by the count as
    decimal(20,0) (Spark's division type), then rounded HALF_UP to the average's type.

    >>> avg_value(decimal.Decimal("1.00"), 3, "decimal(5,2)", "v")
    Decimal('0.333333')
    """
    if decimal_of(arg_type) is None:
        return total / count
    if conform(total, sum_type(arg_type), view) is None:  # its sum overflows (non-ANSI: NULL), as Spark's
        return None
    divided = arith("/", sum_type(arg_type), "int")
    quotient = _EXACT.divide(decimal.Decimal(total), decimal.Decimal(count))
    return conform(conform(quotient, divided, view), avg_type(arg_type), view)


def conform(v: Any, t: str | None, view: str) -> Any:
    """``v`` as a value of type ``t``: a decimal rounded HALF_UP to the type's scale (``view-overflow``
    when it has more digits before the point than the type holds, or an int past 64 bits), a number
    read as a float."""
    if v is None or t is None:
        return v
    t = family(t)
    if t == "int" and type(v) is int and not -(2**63) <= v < 2**63:
        if not ansi():  # Spark's non-ANSI mode: a long wraps
            return wrap64(v)
        raise UserCodeError(
            f"view '{view}': the value {v} does not fit a 64-bit int (Spark's ANSI mode fails the query: overflow)",
            code="view-overflow",
        )
    if t == "float":
        return float(v) if isinstance(v, (decimal.Decimal, int)) and not isinstance(v, bool) else v
    ps = decimal_of(t)
    if ps is None:
        return v
    p, s = ps
    d = decimal.Decimal(v) if isinstance(v, int) else v
    q = d.quantize(decimal.Decimal(1).scaleb(-s), rounding=decimal.ROUND_HALF_UP, context=_EXACT)
    if q != 0 and q.adjusted() + 1 > p - s:
        if not ansi():  # Spark's non-ANSI mode: NULL
            return None
        raise UserCodeError(
            f"view '{view}': the value {d} does not fit {t} (Spark's ANSI mode fails the query: decimal overflow)",
            code="view-overflow",
        )
    return q


def _as_time(v: Any, like: Any) -> Any:
    """A string compared with a date or timestamp read as one (Spark casts the string)."""
    if not isinstance(v, str):
        return v
    return cast_value(v, "timestamp" if isinstance(like, datetime.datetime) else "date")


def _as_other(v: str, like: Any) -> Any:
    """A string compared with a number or boolean read as one, as Spark 4 (ANSI) casts it: a bigint
    for an int, a double for a float or decimal (:class:`~cbp.views.casts.CastFailure` if it is not one)."""
    if type(like) is bool:
        return cast_value(v, "bool")
    return cast_value(v, "int64" if type(like) is int else "double")


def _midnight(v: Any) -> Any:
    if isinstance(v, datetime.date) and not isinstance(v, datetime.datetime):
        return datetime.datetime(v.year, v.month, v.day, tzinfo=_UTC)
    return v


def coerce_pair(a: Any, b: Any) -> tuple[Any, Any]:
    """Two non-NULL values made comparable as Spark compares them: a decimal with a float as floats,
    a string with a date or timestamp as that type, a date with a timestamp as timestamps.

    >>> coerce_pair(datetime.date(2024, 1, 2), "2024-01-01")
    (datetime.date(2024, 1, 2), datetime.date(2024, 1, 1))
    """
    ta, tb = type(a), type(b)
    if ta is tb:
        return a, b
    if ta is str and tb in (int, float, bool, decimal.Decimal):
        a, ta = _as_other(a, b), (float if tb is decimal.Decimal else tb)
    elif tb is str and ta in (int, float, bool, decimal.Decimal):
        b, tb = _as_other(b, a), (float if ta is decimal.Decimal else ta)
    if a is None or b is None:  # a string that is not a value of the other type (non-ANSI: NULL)
        return a, b
    if (ta is float and tb is decimal.Decimal) or (ta is decimal.Decimal and tb is float):
        return float(a), float(b)
    if isinstance(a, datetime.date):
        b = _as_time(b, a)
    elif isinstance(b, datetime.date):
        a = _as_time(a, b)
    if a is None or b is None:
        return a, b
    if isinstance(a, datetime.datetime) or isinstance(b, datetime.datetime):
        return _midnight(a), _midnight(b)
    return a, b


def _key_value(v: Any, cast: str | None) -> Any:
    if v is None:
        return None
    if cast == "float":
        return float(v)
    if cast == "timestamp":  # a date key joined with a timestamp key
        v = _midnight(v)
    if isinstance(v, decimal.Decimal) or cast == "decimal":
        return format(decimal.Decimal(v).normalize(), "f")
    return to_json(v) if isinstance(v, (datetime.date, bytes)) else v


def key_text(values: list[Any], casts: list[str | None] | None = None) -> str:
    """The JSON text of a group's or join key's values (a decimal as its normalized digits, a date,
    timestamp or binary as its JSON form; ``casts``: a key read as a float or decimal).

    >>> key_text([decimal.Decimal("1.50"), datetime.date(2024, 1, 1)])
    '["1.5", "2024-01-01"]'
    >>> key_text([2, datetime.date(2024, 1, 1)], ["decimal", "timestamp"])
    '["2", "2024-01-01T00:00:00.000000Z"]'
    """
    casts = casts or [None] * len(values)
    return json.dumps([_key_value(v, c) for v, c in zip(values, casts, strict=True)])


def decode_key(text: str, types: list[str]) -> list[Any]:
    """The values of :func:`key_text` read back as values of ``types``."""
    out = []
    for v, t in zip(json.loads(text), types, strict=True):
        if v is not None and (decimal_of(t) is not None or t in ("date", "timestamp", "binary")):
            v = conform(decimal.Decimal(v), t, "") if decimal_of(t) else from_json(t, v)
        out.append(v)
    return out
