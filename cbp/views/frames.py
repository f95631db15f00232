"""Window frames of a view's window functions (:mod:`cbp.views.windows`) and the rows each row's frame
holds when a partition is recomputed (:mod:`cbp.views.winrun`), with Spark's semantics.

A frame is written in a stage's plan as text: ``all`` (the whole partition), ``range`` (up to the
current row's last peer: Spark's default with ORDER BY), ``rows`` (up to the current row),
``rows:<lo>:<hi>`` (offsets in rows from the current row, ``u`` unbounded) and ``range:<JSON>`` (a
RANGE frame with offsets, or starting at CURRENT ROW: ``[lo, hi]``, each None for unbounded, 0 for
the current row's peers, or a signed offset of the ORDER BY value, ``PRECEDING`` negative:
``["int", "-1"]``, ``["dec", "1.5"]``, ``["float", "0.5"]``, ``["iv", months, days, micros, unit]``),
numbers cast to the ORDER BY's type as Spark casts them.

A RANGE bound is the current row's ORDER BY value plus the offset (minus it when the ORDER BY is
``DESC``); a row whose value is NULL has the bound NULL, so its frame holds its NULL peers only.

    >>> spans("range:" + json.dumps([["int", "-1"], 0]), [((1, 1),), ((1, 2),), ((1, 2),), ((1, 4),)], False)
    [(0, 1), (0, 3), (0, 3), (3, 4)]
"""

from __future__ import annotations

import bisect
import decimal
import json
from typing import Any

from sqlglot import exp

from .datefns import Interval, interval_value, shift
from .exprs import ev
from .intwidth import bits
from .viewerror import ViewError

__all__ = ["frame_of", "range_problem", "typed", "spans", "constant_int", "Desc"]

_INT32 = 2**31
_DATE_UNITS = ("YEAR", "MONTH", "DAY", "YEAR TO MONTH")  # a date's RANGE offsets: no time field (Spark's rule)


def constant_int(node: exp.Expr | None) -> int | None:
    """The value of a constant int expression (``2``, ``1 + 1``, ``-1``: Spark folds them); None: not one."""
    if node is None or isinstance(node, exp.Interval) or node.find(exp.Column) is not None:
        return None
    try:
        v = ev(node, {})
    except (ViewError, ArithmeticError, TypeError, ValueError):
        return None
    return v if isinstance(v, int) and not isinstance(v, bool) and -_INT32 <= v < _INT32 else None


def _offset(node: exp.Expr, sign: int) -> list[Any] | None:
    """A RANGE bound's offset, signed (``["int", "-1"]``, ..., see the module); None: not a constant."""
    if isinstance(node, exp.Interval):
        try:
            iv = interval_value(node)
        except ViewError:
            return None
        unit = node.args.get("unit")
        name = (unit.name if unit is not None else "").upper().rstrip("S")
        if isinstance(unit, exp.IntervalSpan):  # its type: '1-2' YEAR TO MONTH, '1 12:00:00' DAY TO SECOND, ...
            name = f"{unit.this.name} TO {unit.expression.name}".upper()
        return ["iv", sign * iv.months, sign * iv.days, sign * iv.micros, "DAY" if name == "WEEK" else name]
    if node.find(exp.Column) is not None:
        return None
    try:
        v = ev(node, {})
    except (ViewError, ArithmeticError, TypeError, ValueError):
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float, decimal.Decimal)):
        return None
    kind = "int" if isinstance(v, int) else "dec" if isinstance(v, decimal.Decimal) else "float"
    return [kind, str(sign * v)]


def _bound(value: Any, side: Any, kind: str) -> Any:
    """A frame bound: None unbounded, 0 the current row, an int (ROWS) or an offset (RANGE); False: one
    not read (not a constant)."""
    if value == "UNBOUNDED":
        return None
    if value == "CURRENT ROW":
        return 0
    sign = -1 if side == "PRECEDING" else 1
    if kind == "ROWS":  # a constant of type int, as Spark requires (not CAST(2 AS BIGINT), 2L, a smallint)
        n = constant_int(value)
        return False if n is None or bits(value) != 32 else sign * n
    got = _offset(value, sign)
    return False if got is None else got


def frame_of(spec: exp.Expr | None, ordered: bool) -> str | None:
    """The frame a window function is computed over (see the module); None: a frame not supported, or
    one Spark refuses (an upper bound before the lower one, UNBOUNDED on the wrong side)."""
    if not ordered:  # the whole partition; any other frame is over an arbitrary order (ROWS) or refused (RANGE)
        whole = spec is None or (spec.args.get("start") == "UNBOUNDED" and spec.args.get("end") == "UNBOUNDED")
        return "all" if whole and (spec is None or spec.args.get("end_side") == "FOLLOWING") else None
    if spec is None:
        return "range"
    a = spec.args
    if a.get("exclude"):
        return None
    kind = str(a.get("kind")).upper()
    lo = _bound(a.get("start"), a.get("start_side"), kind)
    hi = 0 if a.get("end") is None else _bound(a.get("end"), a.get("end_side"), kind)
    if lo is False or hi is False or (lo is None and a.get("start_side") != "PRECEDING"):
        return None
    if hi is None and a.get("end_side") != "FOLLOWING":
        return None
    if lo is None and hi is None:
        return "all"
    if lo is None and hi == 0:
        return "rows" if kind == "ROWS" else "range"
    if kind == "ROWS":
        if lo is not None and hi is not None and lo > hi:
            return None  # Spark refuses it
        return f"rows:{'u' if lo is None else lo}:{'u' if hi is None else hi}"
    if _after(lo, hi):
        return None
    return "range:" + json.dumps([lo, hi])


def _comparable(b: Any) -> tuple[str, Any] | None:
    """A RANGE bound as something ordered with the bounds of its kind (None: not comparable)."""
    if b == 0:
        return ("", 0)
    if b[0] == "iv":
        if b[1] and (b[2] or b[3]):
            return None
        return ("m", b[1]) if b[1] else ("", b[2] * 86_400_000_000 + b[3])
    return ("", decimal.Decimal(b[1]))


def _after(lo: Any, hi: Any) -> bool:
    """Whether a RANGE frame's lower bound is past its upper one (Spark refuses such a frame)."""
    if lo is None or hi is None:
        return False
    a, b = _comparable(lo), _comparable(hi)
    if a is None or b is None or (a[0] != b[0] and 0 not in (a[1], b[1])):
        return False
    return bool(a[1] > b[1])


def range_problem(frame: str, terms: int, order_type: str | None) -> str | None:
    """Why a ``range:`` frame cannot be computed over the window's ORDER BY (``terms`` of them, the first
    of type ``order_type``), as Spark refuses it; None: it can."""
    if not frame.startswith("range:"):
        return None
    offsets = [b for b in json.loads(frame[6:]) if b not in (None, 0)]
    if not offsets:
        return None  # CURRENT ROW and UNBOUNDED bounds: by peers, any ORDER BY
    if terms != 1:
        return "a RANGE frame with offsets over more than one ORDER BY term (Spark refuses it too)"
    units = {b[4] if b[0] == "iv" else "number" for b in offsets}
    if len(units) > 1:  # (an INTERVAL's type is its fields: DAY, HOUR, DAY TO SECOND, ... differ)
        return "a RANGE frame whose two offsets are not of the same type (INTERVAL units included; Spark refuses it)"
    t = str(order_type)
    kinds = {b[0] for b in offsets}
    if t in ("int", "float") or t.startswith("decimal"):
        ok = "iv" not in kinds
    elif t == "date":
        ok = kinds <= {"int", "iv"} and all(b[4] in _DATE_UNITS for b in offsets if b[0] == "iv")
    elif t == "timestamp":
        ok = kinds == {"iv"}
    else:
        ok = False
    if ok:
        return None
    return (
        f"a RANGE frame with offsets over an ORDER BY of type {t} (numbers take a number; a date, days or "
        "an INTERVAL of days, weeks, months or years; a timestamp, an INTERVAL)"
    )


def typed(frame: str, order_type: str | None) -> str:
    """A ``range:`` frame's numeric offsets cast to the type of its ORDER BY, as Spark casts them (an int
    truncated toward zero, a decimal rounded half up to its scale): ``1.5 PRECEDING`` over an int is 1."""
    if not frame.startswith("range:"):
        return frame
    t = str(order_type)

    def cast(b: Any) -> Any:
        if b in (None, 0) or b[0] == "iv":
            return b
        v = decimal.Decimal(b[1])
        if t == "int":
            return ["int", str(int(v))]
        if t == "float":
            return ["float", repr(float(v))]
        if t.startswith("decimal(") and t.endswith(")"):
            scale = int(t[8:-1].split(",")[1])
            q = v.quantize(decimal.Decimal(1).scaleb(-scale), rounding=decimal.ROUND_HALF_UP)
            return ["dec", str(q)]
        return b

    return "range:" + json.dumps([cast(b) for b in json.loads(frame[6:])])


def _value(b: list[Any]) -> Any:
    if b[0] == "iv":
        return Interval(months=b[1], days=b[2], micros=b[3])
    return int(b[1]) if b[0] == "int" else decimal.Decimal(b[1]) if b[0] == "dec" else float(b[1])


def _plus(v: Any, off: Any, sign: int) -> Any:
    """The ORDER BY value ``v`` moved by ``sign * off`` (a date or timestamp by days or an interval)."""
    if isinstance(off, Interval) or hasattr(v, "year"):
        return shift(v, off, sign)
    if isinstance(v, float) and isinstance(off, decimal.Decimal):
        off = float(off)
    elif isinstance(v, decimal.Decimal) and isinstance(off, float):
        off = decimal.Decimal(repr(off))
    return v + sign * off


class Desc:
    """A value ordered the other way round (a DESC term of an ORDER BY)."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, other: Desc) -> bool:
        return bool(other.v < self.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Desc) and bool(self.v == other.v)

    def __hash__(self) -> int:
        return hash(self.v)


def _target(key: tuple[Any, ...], bound: Any, desc: bool) -> tuple[Any, ...]:
    """The sort key (as :func:`cbp.views.winrun.order_key` makes them) of a RANGE bound of the row of
    sort key ``key``: the key itself for CURRENT ROW (its peers), else its one term's value moved."""
    if bound == 0:
        return key
    if len(key[0]) == 1:  # a NULL ORDER BY value: its NULL peers
        return key
    v = key[0][1].v if desc else key[0][1]
    b = _plus(v, _value(bound), -1 if desc else 1)
    return ((1, Desc(b) if desc else b),)


def spans(frame: str, keys: list[tuple[Any, ...]], desc: bool) -> list[tuple[int, int]]:
    """Each row's ``range:`` frame as ``[start, end)`` over a partition sorted by the window's ORDER BY
    (``keys``: the sort keys; ``desc``: whether its one term is descending, for a frame with offsets)."""
    lo, hi = json.loads(frame[6:])
    n, out = len(keys), []
    for k in keys:
        start = 0 if lo is None else bisect.bisect_left(keys, _target(k, lo, desc))
        end = n if hi is None else bisect.bisect_right(keys, _target(k, hi, desc))
        out.append((start, max(start, end)))
    return out
