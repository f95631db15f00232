"""``date_format(x, fmt)`` and ``months_between(a, b [, roundOff])`` of a view's expressions, with
Spark's semantics (UTC). A format is a string literal of Spark's datetime pattern letters ``y``, ``M``
(``MMM`` ``Jan``, ``MMMM`` ``January``), ``d``, ``D``, ``H``, ``h``, ``m``, ``s``, ``S`` (fraction),
``a`` (AM/PM), ``E`` (``Mon``, ``EEEE`` ``Monday``), text in ``'...'`` and other characters as they
are; any other letter is refused (``view-unsupported``). :mod:`cbp.views.exprs` types them with
:data:`TYPES` and evaluates them with :data:`VALUES`.

    >>> import datetime
    >>> from cbp.views.exprs import ev, parse_expr
    >>> ev(parse_expr("date_format(d, 'EEE, d MMM yyyy')"), {"d": datetime.date(2024, 2, 29)})
    'Thu, 29 Feb 2024'
    >>> ev(parse_expr("months_between(DATE '2024-03-31', DATE '2024-02-29')"), {})
    1.0
"""

from __future__ import annotations

import calendar
import datetime
import math
import re
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from .casts import CastFailure, cast_value
from .mode import ansi
from .viewerror import ViewError

__all__ = ["TYPES", "VALUES", "date_format", "months_between"]

_Infer = Callable[[exp.Expr, Mapping[str, str | None]], Any]
_Ev = Callable[[exp.Expr, Mapping[str, Any]], Any]
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October"]
_MONTHS += ["November", "December"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_TOKEN = re.compile(r"'(?:[^']|'')*'?|([A-Za-z])\1*|[^A-Za-z']+")
_LETTERS = set("yMdDHhmsSaE")


def _refuse(message: str, node: exp.Expr | None = None) -> ViewError:
    return ViewError("view-unsupported", message, node=node)


def _tokens(fmt: str, what: str = "date_format") -> list[str]:
    """A pattern's tokens: quoted text, runs of one letter, other characters (:class:`ViewError` for a
    letter that is not supported, an unclosed quote)."""
    out = [m[0] for m in _TOKEN.finditer(fmt)]
    for t in out:
        if t.startswith("'") and (len(t) < 2 or not t.endswith("'")):
            raise _refuse(f"{what} pattern '{fmt}' with an unclosed quote")
        if t[0].isalpha() and (t[0] not in _LETTERS or (t[0] == "a" and len(t) > 1) or len(t) > 9):
            raise _refuse(f"{what} pattern letter '{t}' in '{fmt}' (y, M, d, D, H, h, m, s, S, a, E are)")
    return out


def _field(t: str, v: datetime.datetime) -> str:
    c, n = t[0], len(t)
    if c == "y":
        return f"{v.year % 100:02d}" if n == 2 else str(v.year).zfill(n)
    if c == "M":
        return _MONTHS[v.month - 1][:3] if n == 3 else _MONTHS[v.month - 1] if n >= 4 else str(v.month).zfill(n)
    if c == "E":
        return _DAYS[v.weekday()] if n >= 4 else _DAYS[v.weekday()][:3]
    if c == "a":
        return "AM" if v.hour < 12 else "PM"
    if c == "S":
        return f"{v.microsecond:06d}000"[:n]
    value = {"d": v.day, "D": v.timetuple().tm_yday, "H": v.hour, "h": (v.hour - 1) % 12 + 1}
    value |= {"m": v.minute, "s": v.second}
    return str(value[c]).zfill(n)


def date_format(v: datetime.datetime, fmt: str) -> str:
    """``v`` (UTC) written with Spark's pattern ``fmt``.

    >>> date_format(datetime.datetime(2024, 1, 5, 13, 4, 5, 120000), "yy/M/d h:mm:ss.SS a 'at' DDD")
    '24/1/5 1:04:05.12 PM at 005'
    """
    out = []
    for t in _tokens(fmt):
        if t.startswith("'"):
            out.append(t[1:-1].replace("''", "'") if t != "''" else "'")
        else:
            out.append(_field(t, v) if t[0].isalpha() else t)
    return "".join(out)


def _spark_format(node: exp.Expr) -> str:
    """The pattern as written in Spark SQL (sqlglot's tree holds it in strftime's codes)."""
    fmt = node.args.get("format")
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        raise _refuse("date_format with a pattern that is not a string literal", node)
    m = re.search(r", '((?:[^'\\]|\\.)*)'\)$", node.sql(dialect="spark"))
    if m is None:
        raise _refuse("date_format with this pattern", node)
    return re.sub(r"\\(.)", r"\1", m[1])


def _time_arg(node: exp.Expr, arg: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> None:
    t = infer(arg, types)
    if t not in ("date", "timestamp", "string", None):
        name = "months_between" if isinstance(node, exp.MonthsBetween) else "date_format"
        raise _refuse(f"{name}() of a {t} (it takes a date, a timestamp or a string)", node)


def _format_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    try:
        _tokens(_spark_format(node))
    except ViewError as e:
        raise _refuse(e.message, node) from None
    _time_arg(node, node.this, infer, types)
    return "string"


def _format_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    v = ev(node.this, row)
    t = None if v is None else cast_value(v, "timestamp")  # (a string that is not one: as CAST)
    if t is None:
        return None
    if "cbp_format" not in node.meta:
        node.meta["cbp_format"] = _spark_format(node)
    return date_format(t.astimezone(datetime.timezone.utc), node.meta["cbp_format"])


def months_between(a: datetime.datetime, b: datetime.datetime, round_off: bool = True) -> float:
    """Spark's ``months_between``: whole months when the days of month are equal or both the last,
    else the months plus the difference of day and time over 31 days (rounded to 8 digits).

    >>> months_between(datetime.datetime(1997, 2, 28, 10, 30), datetime.datetime(1996, 10, 30))
    3.94959677
    """
    last_a = a.day == calendar.monthrange(a.year, a.month)[1]
    last_b = b.day == calendar.monthrange(b.year, b.month)[1]
    months = float((a.year * 12 + a.month) - (b.year * 12 + b.month))
    if a.day == b.day or (last_a and last_b):
        return months
    seconds_a = a.hour * 3600 + a.minute * 60 + a.second
    seconds_b = b.hour * 3600 + b.minute * 60 + b.second
    diff = months + ((a.day - b.day) * 86400 + seconds_a - seconds_b) / (31 * 86400)
    return math.floor(diff * 1e8 + 0.5) / 1e8 if round_off else diff


def _between_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    r = node.args.get("roundoff")
    if r is not None and not isinstance(r, exp.Boolean):
        raise _refuse("months_between() with a roundOff that is not TRUE or FALSE", node)
    _time_arg(node, node.this, infer, types)
    _time_arg(node, node.expression, infer, types)
    return "float"


def _between_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    a, b = ev(node.this, row), ev(node.expression, row)
    a = None if a is None else cast_value(a, "timestamp")
    b = None if b is None else cast_value(b, "timestamp")
    if a is None or b is None:
        return None
    r = node.args.get("roundoff")
    utc = datetime.timezone.utc
    return months_between(a.astimezone(utc), b.astimezone(utc), r is None or bool(r.this))


def _timestamp_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    """sqlglot's reading of date_format's argument (``TimeStrToTime``): a timestamp."""
    _time_arg(node, node.this, infer, types)
    return "timestamp"


def _timestamp_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    v = ev(node.this, row)
    return None if v is None else cast_value(v, "timestamp")


_PARSED = {"yyyy": r"(?P<y>\d{4})", "MM": r"(?P<M>\d{2})", "M": r"(?P<M>\d{1,2})", "dd": r"(?P<d>\d{2})"}
_PARSED |= {"d": r"(?P<d>\d{1,2})", "HH": r"(?P<H>\d{2})", "H": r"(?P<H>\d{1,2})", "mm": r"(?P<m>\d{2})"}
_PARSED |= {"m": r"(?P<m>\d{1,2})", "ss": r"(?P<s>\d{2})", "s": r"(?P<s>\d{1,2})"}


def _parser(fmt: str) -> re.Pattern[str]:
    """``to_timestamp``'s pattern as a regular expression: ``yyyy``, ``MM``/``M``, ``dd``/``d`` (each
    once), ``HH``/``H``, ``mm``/``m``, ``ss``/``s``, ``S...`` (that many digits), quoted text, separators."""
    out, seen = [], set()
    for t in _tokens(fmt, "to_timestamp"):
        if t.startswith("'"):
            out.append(re.escape(t[1:-1].replace("''", "'") if t != "''" else "'"))
        elif not t[0].isalpha():
            out.append(re.escape(t))
        elif t in _PARSED or t[0] == "S":
            if t[0] in seen:
                raise _refuse(f"to_timestamp format '{fmt}' naming '{t[0]}' twice")
            seen.add(t[0])
            out.append(_PARSED.get(t) or rf"(?P<S>\d{{{len(t)}}})")
        else:
            raise _refuse(
                f"to_timestamp format letter '{t}' in '{fmt}' (yyyy, MM, M, dd, d, HH, H, mm, m, ss, s, S are)"
            )
    if not {"y", "M", "d"} <= seen:
        raise _refuse(f"to_timestamp format '{fmt}' without yyyy, M and d")
    return re.compile("".join(out))


def _parse_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    try:
        _parser(_spark_format(node))
    except ViewError as e:
        raise _refuse(e.message.replace("date_format with", "to_timestamp with"), node) from None
    if infer(node.this, types) not in ("string", None):
        raise _refuse(f"to_timestamp() of a {infer(node.this, types)} with a format (it takes a string)", node)
    return "timestamp"


def _parse_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    v = ev(node.this, row)
    if v is None:
        return None
    if "cbp_parser" not in node.meta:
        fmt = _spark_format(node)
        node.meta["cbp_parser"] = (fmt, _parser(fmt))
    fmt, rx = node.meta["cbp_parser"]
    m = rx.fullmatch(v)
    try:
        if m is None:
            raise ValueError(v)
        g = {k: int(x) for k, x in m.groupdict().items() if k != "S" and x is not None}
        micros = int((m["S"] or "")[:6].ljust(6, "0")) if "S" in m.groupdict() else 0
        utc = datetime.timezone.utc
        return datetime.datetime(g["y"], g["M"], g["d"], g.get("H", 0), g.get("m", 0), g.get("s", 0), micros, utc)
    except ValueError:
        if not ansi():  # Spark's non-ANSI mode: NULL
            return None
        raise CastFailure(f"the text {v!r} could not be parsed with '{fmt}'", "CANNOT_PARSE_TIMESTAMP") from None


#: The type of each function node (its arguments checked).
TYPES: dict[type[exp.Expr], Callable[[exp.Expr, _Infer, Mapping[str, str | None]], str]] = {
    exp.TimeStrToTime: _timestamp_type,
    exp.StrToTime: _parse_type,
    exp.TimeToStr: _format_type,
    exp.MonthsBetween: _between_type,
}
#: The value of each function node on a row.
VALUES: dict[type[exp.Expr], Callable[[exp.Expr, Mapping[str, Any], _Ev], Any]] = {
    exp.TimeStrToTime: _timestamp_value,
    exp.StrToTime: _parse_value,
    exp.TimeToStr: _format_value,
    exp.MonthsBetween: _between_value,
}
