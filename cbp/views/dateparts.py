"""The fields of a date or timestamp and differences in a unit, with Spark 4's semantics (UTC):
``EXTRACT(field FROM x)``, ``date_part('field', x)`` and ``datepart('field', x)`` for every field
Spark has (``YEAR``, ``YEAROFWEEK``, ``QUARTER``, ``MONTH``, ``WEEK``, ``DAY``, ``DAYOFWEEK``/``DOW``,
``DAYOFWEEK_ISO``/``DOW_ISO``, ``DOY``, ``HOUR``, ``MINUTE``, ``SECOND`` and Spark's aliases; an int,
``SECOND`` a ``decimal(8,6)`` with the microseconds), ``timestampdiff(unit, a, b)`` (also written
``datediff(unit, a, b)``: a ``bigint``, whole units from ``a`` to ``b`` truncated toward zero as Java's
``ChronoUnit.between``) and ``timestampadd(unit, n, x)`` (``dateadd``, ``date_add(unit, n, x)``: a
timestamp); of a date, a timestamp, or a string cast as Spark casts it (ANSI: one that is not a date
fails the epoch, ``view-cast``). :mod:`cbp.views.dates` and :mod:`cbp.views.exprs` type and evaluate them.

    >>> import datetime
    >>> from cbp.views.exprs import ev, parse_expr
    >>> ev(parse_expr("EXTRACT(DOW FROM d) * 100 + date_part('week', d)"), {"d": datetime.date(2021, 1, 3)})
    153
    >>> ev(parse_expr("timestampdiff(MONTH, DATE '2024-01-31', DATE '2024-02-29')"), {})
    0
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from . import datefns
from .casts import CastFailure, cast_value
from .datefns import add_months
from .viewerror import ViewError

__all__ = ["TYPES", "VALUES", "NAMED", "FALLIBLE", "extract_type", "extract_value"]

_Infer = Callable[[exp.Expr, Mapping[str, str | None]], Any]
_Ev = Callable[[exp.Expr, Mapping[str, Any]], Any]
_Types = Mapping[str, str | None]
_ALIASES = {
    "YEAR": ("Y", "YEARS", "YR", "YRS"),
    "YEAROFWEEK": (),
    "QUARTER": ("QTR",),
    "MONTH": ("MON", "MONS", "MONTHS"),
    "WEEK": ("W", "WEEKS"),
    "DAY": ("D", "DAYS"),
    "DAYOFWEEK": ("DOW",),
    "DAYOFWEEK_ISO": ("DOW_ISO",),
    "DOY": (),
    "HOUR": ("H", "HOURS", "HR", "HRS"),
    "MINUTE": ("M", "MIN", "MINS", "MINUTES"),
    "SECOND": ("S", "SEC", "SECONDS", "SECS"),
}
#: Each field name Spark's EXTRACT takes -> its canonical name.
FIELDS = {alias: name for name, aliases in _ALIASES.items() for alias in (name, *aliases)}
_OF_DATE: dict[str, Callable[[datetime.date], int]] = {
    "YEAR": lambda d: d.year,
    "YEAROFWEEK": lambda d: d.isocalendar()[0],
    "QUARTER": lambda d: (d.month - 1) // 3 + 1,
    "MONTH": lambda d: d.month,
    "WEEK": lambda d: d.isocalendar()[1],
    "DAY": lambda d: d.day,
    "DAYOFWEEK": lambda d: d.isoweekday() % 7 + 1,
    "DAYOFWEEK_ISO": lambda d: d.isoweekday(),
    "DOY": lambda d: d.timetuple().tm_yday,
}
_MICROS = {"MICROSECOND": 1, "MILLISECOND": 1_000, "SECOND": 1_000_000, "MINUTE": 60_000_000}
_MICROS |= {"HOUR": 3_600_000_000, "DAY": 86_400_000_000, "WEEK": 7 * 86_400_000_000}
_MONTHS = {"MONTH": 1, "QUARTER": 3, "YEAR": 12}
_DIFF_UNITS = frozenset(_MICROS) | frozenset(_MONTHS)
_ADD_UNITS = _DIFF_UNITS | {"DAYOFYEAR"}
_UTC = datetime.timezone.utc


def _refuse(message: str, node: exp.Expr) -> ViewError:
    return ViewError("view-unsupported", message, node=node)


def _field(node: exp.Expr) -> tuple[str, exp.Expr]:
    """``(canonical field, argument)`` of ``EXTRACT(f FROM x)`` or ``date_part('f', x)``."""
    if isinstance(node, exp.Extract):
        unit = node.this.name.upper() if isinstance(node.this, (exp.Var, exp.Identifier, exp.Column)) else ""
        text, arg = unit or node.this.sql(), node.expression
    else:
        if len(node.expressions) != 2:
            raise _refuse(f"{node.name.lower()}() of other than two arguments", node)
        f, arg = node.expressions
        if not (isinstance(f, exp.Literal) and f.is_string):
            raise _refuse(f"{node.name.lower()}() with a field that is not a string literal", node)
        text = unit = f.this.upper()
    if unit not in FIELDS:
        raise _refuse(f"EXTRACT({text} FROM ...) (Spark has no such field: INVALID_EXTRACT_FIELD)", node)
    return FIELDS[unit], arg


def extract_type(node: exp.Expr, infer: _Infer, types: _Types) -> str:
    """``int``, or ``decimal(8,6)`` for ``SECOND``: the type of a field, its argument checked."""
    field, arg = _field(node)
    t = infer(arg, types)
    if t not in ("date", "timestamp", "string", None):
        raise _refuse(f"EXTRACT({field} FROM ...) of a {t} (it takes a date, a timestamp or a string)", node)
    return "decimal(8,6)" if field == "SECOND" else "int"


def extract_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    """A field's value on ``row`` (NULL of NULL); a date's time fields are its midnight's (0); a string
    is cast to a date (the date fields) or a timestamp (the time fields), as Spark casts it.

    >>> from cbp.views.exprs import parse_expr
    >>> t = datetime.datetime(2024, 12, 30, 13, 4, 5, 123456, tzinfo=_UTC)
    >>> extract_value(parse_expr("date_part('SECS', t)"), {"t": t}, lambda n, r: r[n.name])
    Decimal('5.123456')
    """
    field, arg = _field(node)
    v = ev(arg, row)
    if v is None:
        return None
    if field in _OF_DATE:
        d = cast_value(v, "date")  # (a string that is not a date: NULL in non-ANSI mode)
        return None if d is None else _OF_DATE[field](d)
    t = cast_value(v, "timestamp")
    if t is None:
        return None
    if field == "SECOND":
        return decimal.Decimal(t.second * 1_000_000 + t.microsecond).scaleb(-6)
    return t.hour if field == "HOUR" else t.minute


def _unit(node: exp.Expr, units: frozenset[str]) -> str:
    u = node.args.get("unit")
    text = u.name.upper() if isinstance(u, exp.Var) else (u.sql() if u is not None else "")
    if text not in units:
        name = "timestampadd" if isinstance(node, exp.TimestampAdd) else "timestampdiff"
        raise _refuse(f"{name}() in '{text}' (units: {', '.join(sorted(units))})", node)
    return text


def _time_arg(node: exp.Expr, arg: exp.Expr, infer: _Infer, types: _Types) -> None:
    if isinstance(arg, exp.TsOrDsToDate) and arg.args.get("format") is None:
        arg = arg.this
    t = infer(arg, types)
    if t not in ("date", "timestamp", "string", None):
        name = "timestampadd" if isinstance(node, exp.TimestampAdd) else "timestampdiff"
        raise _refuse(f"{name}() of a {t} (it takes a date, a timestamp or a string)", node)


def _ends(node: exp.Expr) -> tuple[exp.Expr, exp.Expr]:
    """``(start, end)`` of ``timestampdiff(unit, start, end)`` (``datediff(unit, ...)``'s unwrapped)."""
    out = []
    for a in (node.expression, node.this):
        out.append(a.this if isinstance(a, exp.TsOrDsToDate) and a.args.get("format") is None else a)
    return out[0], out[1]


def _diff_type(node: exp.Expr, infer: _Infer, types: _Types) -> str:
    _unit(node, _DIFF_UNITS)
    for a in _ends(node):
        _time_arg(node, a, infer, types)
    return "int"


def _trunc_div(a: int, b: int) -> int:
    """``a / b`` truncated toward zero, as Java's long division."""
    q = abs(a) // b
    return q if a >= 0 else -q


def _months_between(a: datetime.datetime, b: datetime.datetime) -> int:
    """Whole months from ``a`` to ``b``, as Java's ``LocalDateTime.until(b, MONTHS)``."""
    end = b.date()
    if end > a.date() and b.time() < a.time():
        end -= datetime.timedelta(days=1)
    elif end < a.date() and b.time() > a.time():
        end += datetime.timedelta(days=1)
    packed = [(d.year * 12 + d.month - 1) * 32 + d.day for d in (a.date(), end)]
    return _trunc_div(packed[1] - packed[0], 32)


def timestamp_diff(unit: str, a: Any, b: Any) -> Any:
    """Whole ``unit``s from ``a`` to ``b`` (dates or timestamps), truncated toward zero.

    >>> timestamp_diff("DAY", datetime.date(2024, 1, 2), datetime.date(2023, 12, 30))
    -3
    """
    if a is None or b is None:
        return None
    a, b = cast_value(a, "timestamp"), cast_value(b, "timestamp")
    if a is None or b is None:  # (a string that is not a timestamp, non-ANSI)
        return None
    if unit in _MONTHS:
        return _trunc_div(_months_between(a, b), _MONTHS[unit])
    delta = b - a
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if unit == "WEEK":  # Java: whole days, then whole weeks of them
        return _trunc_div(_trunc_div(micros, _MICROS["DAY"]), 7)
    return _trunc_div(micros, _MICROS[unit])


def _diff_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    start, end = _ends(node)
    return timestamp_diff(_unit(node, _DIFF_UNITS), ev(start, row), ev(end, row))


def _add_type(node: exp.Expr, infer: _Infer, types: _Types) -> str:
    _unit(node, _ADD_UNITS)
    n = infer(node.expression, types)
    if n not in ("int", None):
        raise _refuse(f"timestampadd() of a {n} quantity (it takes an int)", node)
    _time_arg(node, node.this, infer, types)
    return "timestamp"


def timestamp_add(unit: str, n: Any, v: Any) -> Any:
    """``v`` (a date or timestamp) ``n`` ``unit``s later, a timestamp; a month's last day when the day
    does not exist. Past what a timestamp holds (Python's: year 9999) a :class:`CastFailure`.

    >>> timestamp_add("MONTH", 1, datetime.date(2024, 1, 31))
    datetime.datetime(2024, 2, 29, 0, 0, tzinfo=datetime.timezone.utc)
    """
    if n is None or v is None:
        return None
    t = cast_value(v, "timestamp")
    if t is None:
        return None
    try:
        if unit in _MONTHS:
            return add_months(t, n * _MONTHS[unit])
        scale = _MICROS["DAY" if unit == "DAYOFYEAR" else unit]
        return t + datetime.timedelta(microseconds=n * scale)
    except (OverflowError, ValueError):
        raise CastFailure(f"{t} plus {n} {unit} is past year 9999", "DATETIME_OVERFLOW") from None


def _add_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    return timestamp_add(_unit(node, _ADD_UNITS), ev(node.expression, row), ev(node.this, row))


def _datediff_type(node: exp.Expr, infer: _Infer, types: _Types) -> str:
    """``datediff(unit, a, b)`` is Spark's ``timestampdiff``; ``datediff(end, start)`` days (datefns)."""
    if node.args.get("unit") is not None:
        return _diff_type(node, infer, types)
    return datefns.TYPES[exp.DateDiff](node, infer, types)


def _datediff_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    if node.args.get("unit") is not None:
        return _diff_value(node, row, ev)
    return datefns.VALUES[exp.DateDiff](node, row, ev)


#: The type of each node (its arguments checked); they replace :mod:`cbp.views.datefns`' ``DateDiff``.
TYPES: dict[type[exp.Expr], Callable[[exp.Expr, _Infer, _Types], str]] = {
    exp.TimestampDiff: _diff_type,
    exp.TimestampAdd: _add_type,
    exp.DateDiff: _datediff_type,
}
#: The value of each node on a row.
VALUES: dict[type[exp.Expr], Callable[[exp.Expr, Mapping[str, Any], _Ev], Any]] = {
    exp.TimestampDiff: _diff_value,
    exp.TimestampAdd: _add_value,
    exp.DateDiff: _datediff_value,
}
#: ``date_part`` and ``datepart``, which sqlglot leaves anonymous: name -> (type, value).
NAMED: dict[str, tuple[Callable[[exp.Expr, _Infer, _Types], str | None], Callable[..., Any]]] = {
    "date_part": (extract_type, extract_value),
    "datepart": (extract_type, extract_value),
}
#: The nodes that may fail at run time (a timestamp past year 9999).
FALLIBLE: tuple[type[exp.Expr], ...] = (exp.TimestampAdd,)


def fallible(node: exp.Expr, infer: _Infer, types: _Types) -> bool:
    """Whether ``node`` is a field or difference of a string, which may not cast (ANSI: ``view-cast``)."""
    if isinstance(node, exp.Extract) or (isinstance(node, exp.Anonymous) and node.name.lower() in NAMED):
        return infer(_field(node)[1], types) == "string"
    if isinstance(node, exp.TimestampDiff) or (isinstance(node, exp.DateDiff) and node.args.get("unit")):
        return "string" in [infer(a, types) for a in _ends(node)]
    return False
