"""Time functions of a view's expressions with Spark's semantics in the session time zone cbp's
sessions have, UTC: ``unix_timestamp(x [, fmt])`` and ``to_unix_timestamp`` (the epoch seconds of a
timestamp, of a date's midnight, of a string parsed as ``to_timestamp(s, fmt)`` does, default
``yyyy-MM-dd HH:mm:ss``), ``from_unixtime(n [, fmt])`` (epoch seconds written as ``date_format``
does), ``make_date(y, m, d)`` and ``next_day(d, dow)``. A value Spark's ANSI mode fails on (text that
does not parse, a day that does not exist, a day of week that is not one) fails the epoch with
``view-cast``; without ANSI it is NULL.

    >>> from cbp.views.exprs import ev, parse_expr
    >>> ev(parse_expr("unix_timestamp('2024-01-05 10:00:00')"), {})
    1704448800
    >>> ev(parse_expr("from_unixtime(0, 'yyyy-MM-dd')"), {}), ev(parse_expr("make_date(2024, 2, 29)"), {})
    ('1970-01-01', datetime.date(2024, 2, 29))
    >>> ev(parse_expr("next_day(DATE '2024-01-05', 'mon')"), {})
    datetime.date(2024, 1, 8)
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from . import datefmt
from .casts import CastFailure, cast_value
from .mode import ansi
from .viewerror import ViewError

__all__ = ["TYPES", "VALUES", "NAMED", "FALLIBLE"]

_Infer = Callable[[exp.Expr, Mapping[str, str | None]], Any]
_Ev = Callable[[exp.Expr, Mapping[str, Any]], Any]
_Types = Mapping[str, str | None]
_UTC = datetime.timezone.utc
_EPOCH = datetime.datetime(1970, 1, 1, tzinfo=_UTC)
_DEFAULT = "yyyy-MM-dd HH:mm:ss"
_DAYS = ["MO", "TU", "WE", "TH", "FR", "SA", "SU"]
_DAY_NAMES = {
    **{d: i for i, d in enumerate(_DAYS)},
    **{n: i for i, n in enumerate(["MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"])},
    **{n: i for i, n in enumerate(["MONDAY", "TUESDAY", "WEDNESDAY", "THURSDAY", "FRIDAY", "SATURDAY", "SUNDAY"])},
}


def _refuse(message: str, node: exp.Expr) -> ViewError:
    return ViewError("view-unsupported", message, node=node)


def _want(node: exp.Expr, name: str, t: str | None, allowed: tuple[str, ...]) -> None:
    if t is not None and t not in allowed:
        raise _refuse(f"{name}() of a {t} (it takes {' or '.join(allowed)})", node)


def _fail_or_null(message: str, spark: str) -> None:
    """NULL without ANSI; with it the failure Spark's ANSI mode has (``view-cast``)."""
    if ansi():
        raise CastFailure(message, spark)


def _with_format(node: exp.Expr, key: str, build: Callable[[exp.Expr], exp.Expr]) -> exp.Expr:
    """``build(fmt)`` of ``node``'s format (Spark's default when it has none), made once and kept on
    the node under ``key``."""
    got = node.meta.get(key)
    if got is None:
        fmt = node.args.get("format")
        got = node.meta[key] = build(exp.Literal.string(_DEFAULT) if fmt is None else fmt.copy())
    return got


def _parse_node(node: exp.Expr) -> exp.Expr:
    """``to_timestamp(s, fmt)`` of a ``unix_timestamp(s, fmt)`` (kept on the node)."""
    return _with_format(node, "cbp_parse", lambda fmt: exp.StrToTime(this=node.this, format=fmt))


def _unix_type(node: exp.Expr, infer: _Infer, types: _Types) -> str:
    if node.this is None:
        raise _refuse("unix_timestamp() without an argument (the current time: not a function of the inputs)", node)
    t = infer(node.this, types)
    _want(node, "unix_timestamp", t, ("timestamp", "date", "string"))
    if t == "string":
        datefmt.TYPES[exp.StrToTime](_parse_node(node), infer, types)
    return "int"


def _unix_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    v = ev(node.this, row)
    if isinstance(v, str):
        v = datefmt.VALUES[exp.StrToTime](_parse_node(node), row, ev)
    if v is None:
        return None
    if not isinstance(v, datetime.datetime):
        v = datetime.datetime(v.year, v.month, v.day, tzinfo=_UTC)  # a date: its midnight in UTC
    return (v - _EPOCH) // datetime.timedelta(seconds=1)


def _format_node(node: exp.Expr) -> exp.Expr:
    """``date_format(cbp__t, fmt)`` of a ``from_unixtime(x, fmt)`` (kept on the node)."""
    return _with_format(node, "cbp_format_node", lambda fmt: exp.TimeToStr(this=exp.column("cbp__t"), format=fmt))


def _from_unix_type(node: exp.Expr, infer: _Infer, types: _Types) -> str:
    _want(node, "from_unixtime", infer(node.this, types), ("int",))
    datefmt.TYPES[exp.TimeToStr](_format_node(node), infer, {"cbp__t": "timestamp"})
    return "string"


def _from_unix_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    n = ev(node.this, row)
    if n is None:
        return None
    t = _EPOCH + datetime.timedelta(seconds=n)
    return datefmt.VALUES[exp.TimeToStr](_format_node(node), {"cbp__t": t}, ev)


def _next_day_type(node: exp.Expr, infer: _Infer, types: _Types) -> str:
    _want(node, "next_day", infer(node.this, types), ("date", "timestamp", "string"))
    _want(node, "next_day", infer(node.expression, types), ("string",))
    return "date"


def _next_day_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    v, dow = ev(node.this, row), ev(node.expression, row)
    if v is None or dow is None:
        return None
    d = cast_value(v, "date")  # a timestamp's UTC date, a string as CAST reads it (non-ANSI: NULL)
    if d is None:
        return None
    want = _DAY_NAMES.get(dow.upper())
    if want is None:
        _fail_or_null(f"{dow!r} is not a day of the week", "ILLEGAL_DAY_OF_WEEK")
        return None
    return d + datetime.timedelta(days=(want - d.weekday() - 1) % 7 + 1)


def _make_date_type(node: exp.Expr, infer: _Infer, types: _Types) -> str:
    if len(node.expressions) != 3:
        raise _refuse("make_date() of other than three arguments", node)
    for a in node.expressions:
        _want(node, "make_date", infer(a, types), ("int",))
    return "date"


def _make_date_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    y, m, d = (ev(a, row) for a in node.expressions)
    if y is None or m is None or d is None:
        return None
    try:
        return datetime.date(y, m, d)
    except (ValueError, OverflowError):
        _fail_or_null(f"make_date({y}, {m}, {d}) is not a date", "DATETIME_FIELD_OUT_OF_BOUNDS")
        return None


#: The type of each function node (its arguments checked).
TYPES: dict[type[exp.Expr], Callable[[exp.Expr, _Infer, _Types], str | None]] = {
    exp.StrToUnix: _unix_type,
    exp.UnixToStr: _from_unix_type,
    exp.NextDay: _next_day_type,
}
#: The value of each function node on a row.
VALUES: dict[type[exp.Expr], Callable[[exp.Expr, Mapping[str, Any], _Ev], Any]] = {
    exp.StrToUnix: _unix_value,
    exp.UnixToStr: _from_unix_value,
    exp.NextDay: _next_day_value,
}
#: Functions sqlglot parses as anonymous: name -> (type, value).
NAMED: dict[str, tuple[Callable[[exp.Expr, _Infer, _Types], str | None], Callable[..., Any]]] = {
    "make_date": (_make_date_type, _make_date_value),
}
#: The nodes that may fail at run time on a value (a cbp_view around them names the view and the row).
FALLIBLE: tuple[type[exp.Expr], ...] = (exp.StrToUnix, exp.NextDay)
FALLIBLE_NAMES = frozenset({"make_date"})
