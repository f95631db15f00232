"""Date arithmetic and date functions of a view's expressions, with Spark's semantics (UTC):
``d ± INTERVAL 'n' DAY | MONTH | YEAR`` (``HOUR``, ``MINUTE``, ``SECOND`` make a timestamp), of two
units (``'1-2' YEAR TO MONTH``, ``'1 12:00:00' DAY TO SECOND``, ``INTERVAL 1 DAY 2 HOURS``), ``d ± n``
days, ``date_add``, ``date_sub``, ``datediff``, ``add_months`` (the month's last day when the day does
not exist), ``to_date(s [, fmt])``, ``date_trunc``, ``trunc``, ``dayofweek``, ``dayofyear``,
``weekofyear``, ``quarter``, ``last_day``, ``hour``, ``minute``, ``second``. :mod:`cbp.views.exprs`
types them with :data:`TYPES` and evaluates them with :data:`VALUES`.

    >>> from cbp.views.exprs import ev, parse_expr
    >>> ev(parse_expr("DATE '1998-12-01' - INTERVAL '90' DAY"), {})
    datetime.date(1998, 9, 2)
    >>> ev(parse_expr("add_months(d, 1)"), {"d": datetime.date(2024, 1, 31)})
    datetime.date(2024, 2, 29)
    >>> ev(parse_expr("DATE '2024-02-29' + INTERVAL '1-2' YEAR TO MONTH"), {})
    datetime.date(2025, 4, 29)
"""

from __future__ import annotations

import calendar
import datetime
import decimal
import re
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from .casts import CastFailure, cast_value
from .mode import ansi
from .viewerror import ViewError

__all__ = ["TYPES", "VALUES", "Interval", "shift", "shift_type", "folded_intervals"]

_UTC = datetime.timezone.utc
#: The plan's function for ``to_date(s, fmt)`` (:func:`to_date_call`).
TO_DATE_FN = "cbp_to_date"
_UNITS = {"YEAR": ("months", 12), "MONTH": ("months", 1), "WEEK": ("days", 7), "DAY": ("days", 1)}
_UNITS |= {"HOUR": ("micros", 3_600_000_000), "MINUTE": ("micros", 60_000_000), "SECOND": ("micros", 1_000_000)}
_TRUNC_TS = {"YEAR": "year", "YYYY": "year", "YY": "year", "QUARTER": "quarter", "MONTH": "month", "MM": "month"}
_TRUNC_TS |= {"MON": "month", "WEEK": "week", "DAY": "day", "DD": "day", "HOUR": "hour", "MINUTE": "minute"}
_TRUNC_TS |= {"SECOND": "second"}
_TRUNC_DATE = {k: v for k, v in _TRUNC_TS.items() if v in ("year", "quarter", "month", "week")}
_TRUNC_DATE.pop("QUARTER")  # Spark's trunc() has no quarter (it gives NULL): refused
_FORMAT = re.compile(r"yyyy|MM|M|dd|d|[^A-Za-z]")
_Infer = Callable[[exp.Expr, Mapping[str, str | None]], Any]
_Ev = Callable[[exp.Expr, Mapping[str, Any]], Any]


class Interval:
    """An interval literal's value: months, days and microseconds, each signed; ``timed``: a day-time
    interval with an hour, minute or second field (a date plus it is a timestamp, as in Spark)."""

    def __init__(self, months: int = 0, days: int = 0, micros: int = 0, timed: bool = False) -> None:
        self.months, self.days, self.micros = months, days, micros
        self.timed = timed or micros != 0


def _name(node: exp.Expr) -> str:
    if isinstance(node, (exp.TimestampTrunc, exp.DateTrunc)):
        return "date_trunc" if isinstance(node, exp.TimestampTrunc) else "trunc"
    return node.sql_name().lower() if isinstance(node, exp.Func) else type(node).__name__.lower()


def _refuse(message: str, node: exp.Expr) -> ViewError:
    return ViewError("view-unsupported", message, node=node)


def _interval(node: exp.Expr) -> Interval:
    unit = node.args.get("unit")
    if isinstance(unit, exp.IntervalSpan):
        return _span(node, unit.this.name.upper(), unit.expression.name.upper())
    name = (unit.name if unit is not None else "").upper().rstrip("S")
    if name not in _UNITS or not isinstance(node.this, exp.Literal):
        raise _refuse(f"INTERVAL {node.this.sql()} {name} (YEAR, MONTH, WEEK, DAY, HOUR, MINUTE, SECOND are)", node)
    text = str(node.this.this).strip()
    if name == "SECOND" and re.fullmatch(r"[+-]?\d+\.\d{1,6}", text):  # INTERVAL '1.5' SECOND: microseconds
        return Interval(micros=int(decimal.Decimal(text) * 1_000_000), timed=True)
    try:
        n = int(text)
    except ValueError:
        raise _refuse(f"INTERVAL '{node.this.this}' (a whole number of {name} is)", node) from None
    field, scale = _UNITS[name]
    return Interval(**{field: n * scale}, timed=field == "micros")


_SECONDS = r"(\d+(?:\.\d{1,6})?)"
#: A two-unit interval's text (Spark's forms, a sign before them): its pattern and its fields' units.
_SPANS = {
    ("YEAR", "MONTH"): (r"(\d+)-(\d+)", ("YEAR", "MONTH")),
    ("DAY", "HOUR"): (r"(\d+) (\d+)", ("DAY", "HOUR")),
    ("DAY", "MINUTE"): (r"(\d+) (\d+):(\d+)", ("DAY", "HOUR", "MINUTE")),
    ("DAY", "SECOND"): (r"(\d+) (\d+):(\d+):" + _SECONDS, ("DAY", "HOUR", "MINUTE", "SECOND")),
    ("HOUR", "MINUTE"): (r"(\d+):(\d+)", ("HOUR", "MINUTE")),
    ("HOUR", "SECOND"): (r"(\d+):(\d+):" + _SECONDS, ("HOUR", "MINUTE", "SECOND")),
    ("MINUTE", "SECOND"): (r"(\d+):" + _SECONDS, ("MINUTE", "SECOND")),
}
_LIMITS = {"MONTH": 12, "HOUR": 24, "MINUTE": 60, "SECOND": 60}  # a field after the first is below it
_MICROS = {"HOUR": 3_600_000_000, "MINUTE": 60_000_000, "SECOND": 1_000_000}


def _span(node: exp.Expr, first: str, last: str) -> Interval:
    """``INTERVAL '1-2' YEAR TO MONTH``, ``INTERVAL '-1 12:00:00.5' DAY TO SECOND``, ...: Spark's
    year-month or day-time interval of two units (the sign applies to the whole)."""
    spec = _SPANS.get((first, last))
    text = str(node.this.this).strip() if isinstance(node.this, exp.Literal) else ""
    m = re.fullmatch(r"([+-]?)" + spec[0], text) if spec is not None else None
    if spec is None or m is None:
        raise _refuse(
            f"INTERVAL '{text}' {first} TO {last} (Spark's forms: '1-2' YEAR TO MONTH, '1 12' DAY TO "
            "HOUR, '1 12:30' DAY TO MINUTE, '1 12:30:00.5' DAY TO SECOND, '12:30' HOUR TO MINUTE, ...)",
            node,
        )
    sign, out = -1 if m.group(1) == "-" else 1, Interval(timed=first != "YEAR")
    for i, (field, v) in enumerate(zip(spec[1], m.groups()[1:])):
        if i and decimal.Decimal(v) >= _LIMITS[field]:
            raise _refuse(f"INTERVAL '{text}' {first} TO {last}: {field} {v} out of range (Spark refuses it)", node)
        if field in ("YEAR", "MONTH"):
            out.months += sign * int(v) * (12 if field == "YEAR" else 1)
        elif field == "DAY":
            out.days = sign * int(v)
        else:
            out.micros += sign * int(decimal.Decimal(v) * _MICROS[field])
    return out


_ORDER = ("YEAR", "MONTH", "DAY", "HOUR", "MINUTE", "SECOND")
_SIZES = {"DAY": 86_400_000_000, **_MICROS}


def _units(node: exp.Expr) -> list[str]:
    """The fields of an interval literal (``WEEK``: days)."""
    unit = node.args.get("unit")
    if isinstance(unit, exp.IntervalSpan):
        return list(_SPANS.get((unit.this.name.upper(), unit.expression.name.upper()), ((), []))[1])
    name = (unit.name if unit is not None else "").upper().rstrip("S")
    return ["DAY" if name == "WEEK" else name]


def _text(months: int, micros: int, first: str, last: str) -> str:
    """An interval's text in Spark's form for fields ``first`` to ``last``."""
    total, sign = (abs(months), "-" if months < 0 else "") if first in ("YEAR", "MONTH") else (abs(micros), "")
    sign = sign or ("-" if micros < 0 else "")
    if first in ("YEAR", "MONTH"):
        return (
            f"{sign}{total // 12}-{total % 12}" if first != last else f"{sign}{total // (12 if first == 'YEAR' else 1)}"
        )
    fields = _ORDER[_ORDER.index(first) : _ORDER.index(last) + 1]
    parts = []
    for f in fields:
        v, total = divmod(total, _SIZES[f])
        parts.append(str(v) if f != "SECOND" else str(v) + (f".{total:06d}" if total else ""))
    head = parts[0] + (" " if fields[0] == "DAY" and len(parts) > 1 else (":" if len(parts) > 1 else ""))
    return sign + head + ":".join(parts[1:])


def folded_intervals(tree: exp.Expr) -> exp.Expr:
    """``INTERVAL 1 DAY 2 HOURS`` (read by sqlglot as ``INTERVAL '1' DAY + INTERVAL '2' HOURS``) as one
    interval of Spark's type, ``INTERVAL '1 2' DAY TO HOUR`` (a date plus it is a timestamp); months with
    days or time (``INTERVAL 1 MONTH 2 DAYS``) are left as they are: refused, as Spark refuses a date
    plus such an interval."""
    for n in reversed(list(tree.find_all(exp.Add, exp.Sub))):  # the innermost first
        if not (isinstance(n.this, exp.Interval) and isinstance(n.expression, exp.Interval)):
            continue
        try:
            a, b = _interval(n.this), _interval(n.expression)
        except ViewError:
            continue
        units = _units(n.this) + _units(n.expression)
        ym = [u for u in units if u in ("YEAR", "MONTH")]
        if ym and len(ym) != len(units):
            continue
        sign = -1 if isinstance(n, exp.Sub) else 1
        months = a.months + sign * b.months
        micros = (a.days + sign * b.days) * _SIZES["DAY"] + a.micros + sign * b.micros
        first, last = min(units, key=_ORDER.index), max(units, key=_ORDER.index)
        span = exp.IntervalSpan(this=exp.var(first), expression=exp.var(last)) if first != last else exp.var(first)
        n.replace(exp.Interval(this=exp.Literal.string(_text(months, micros, first, last)), unit=span))
    return tree


def add_months(d: datetime.date, n: int) -> datetime.date:
    """``d`` ``n`` months later, on the month's last day when ``d``'s day is past it (Spark's rule).

    >>> add_months(datetime.date(2024, 3, 31), -1)
    datetime.date(2024, 2, 29)
    """
    m = d.year * 12 + d.month - 1 + n
    y, mo = divmod(m, 12)
    day = min(d.day, calendar.monthrange(y, mo + 1)[1])
    return d.replace(year=y, month=mo + 1, day=day)


def shift(a: Any, b: Any, sign: int) -> Any:
    """``a + b`` (``sign`` 1) or ``a - b`` (-1) where ``a`` is a date or timestamp and ``b`` an
    :class:`Interval` or a number of days (or ``b`` the date: ``n + d``).

    >>> shift(datetime.date(2024, 1, 31), Interval(months=1), 1), shift(datetime.date(2024, 1, 1), 1, -1)
    (datetime.date(2024, 2, 29), datetime.date(2023, 12, 31))
    """
    if a is None or b is None:
        return None
    if not isinstance(a, datetime.date):
        a, b = b, a
    if not isinstance(b, Interval):
        b = Interval(days=b)
    out = add_months(a, sign * b.months) if b.months else a
    if b.timed and not isinstance(out, datetime.datetime):
        out = datetime.datetime(out.year, out.month, out.day, tzinfo=_UTC)
    return out + datetime.timedelta(days=sign * b.days, microseconds=sign * b.micros)


def shift_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str | None:
    """The type of ``+``/``-`` with a date or timestamp side (``date``, or ``timestamp`` for a timestamp or
    an interval of hours, minutes or seconds); None when neither side is one (numeric arithmetic)."""
    left, right = node.this, node.expression
    lt = "interval" if isinstance(left, exp.Interval) else infer(left, types)
    rt = "interval" if isinstance(right, exp.Interval) else infer(right, types)
    if not ({lt, rt} & {"date", "timestamp", "interval"}):
        return None
    if isinstance(node, exp.Sub) and lt in ("date", "timestamp") and rt in ("date", "timestamp"):
        kind = "day" if lt == rt == "date" else "day to second"
        raise _refuse(
            f"{node.sql(dialect='spark')} (Spark gives an interval {kind}, a type a view's column cannot "
            "hold: datediff(end, start) or timestampdiff(unit, start, end) give a number)",
            node,
        )
    time, other = (lt, right) if lt in ("date", "timestamp") else (rt, left)
    ot = rt if other is right else lt
    if time not in ("date", "timestamp") or (isinstance(node, exp.Sub) and other is left):
        raise _refuse(f"{node.sql(dialect='spark')} (a date or timestamp ± an interval or days is)", node)
    if ot == "interval":
        return "timestamp" if time == "timestamp" or _interval(other).timed else "date"
    if ot in ("int", None) and time == "date":
        return "date"
    raise _refuse(f"{node.sql(dialect='spark')} (a date ± an int of days, or ± INTERVAL, is)", node)


def _date_arg(node: exp.Expr, arg: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> None:
    if isinstance(arg, exp.TsOrDsToDate) and arg.args.get("format") is None:
        arg = arg.this
    t = infer(arg, types)
    if t not in ("date", "timestamp", "string", None):
        raise _refuse(f"{_name(node)}() of a {t} (it takes a date, a timestamp or a string)", node)


def _as_date(v: Any) -> Any:
    return None if v is None else cast_value(v, "date")


def _fmt_regex(fmt: str, node: exp.Expr) -> re.Pattern[str]:
    parts = _FORMAT.findall(fmt)
    fields = [p for p in parts if p[0] in "yMd"]
    if "".join(parts) != fmt or sorted({p[0] for p in fields}) != ["M", "d", "y"] or len(fields) != 3:
        raise _refuse(f"to_date format '{fmt}' (yyyy, MM or M, dd or d and separators are)", node)
    groups = {"yyyy": r"(?P<y>\d{4})", "MM": r"(?P<m>\d{2})", "M": r"(?P<m>\d{1,2})"}
    groups |= {"dd": r"(?P<d>\d{2})", "d": r"(?P<d>\d{1,2})"}
    return re.compile("".join(groups.get(p, re.escape(p)) for p in parts))


def _spark_format(node: exp.Expr) -> str | None:
    """``to_date``'s format as written in Spark SQL (sqlglot's tree holds it in strftime's codes)."""
    fmt = node.args.get("format")
    if fmt is None:
        return None
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        raise _refuse("to_date with a format that is not a string literal", node)
    m = re.search(r", '((?:[^'\\]|\\.)*)'\)$", node.sql(dialect="spark"))
    return m[1] if m is not None else "yyyy-MM-dd"  # sqlglot writes no format for Spark's default


def to_date_call(out: exp.Expr, node: exp.Expr) -> exp.Expr:
    """``to_date(s, fmt)`` as the plan's ``cbp_to_date(s, fmt)``, its format as written (sqlglot's Spark
    SQL text leaves out ``'yyyy-MM-dd'``, which would make it a lenient cast)."""
    fmt = _spark_format(node)
    return out if fmt is None else exp.Anonymous(this=TO_DATE_FN, expressions=[out.this, exp.Literal.string(fmt)])


def to_date_call_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    """The value of ``cbp_to_date(s, fmt)`` (:func:`to_date_call`)."""
    call = exp.TsOrDsToDate(this=node.expressions[0], format=node.expressions[1])
    if "cbp_format" not in node.meta:
        fmt = node.expressions[1].this
        node.meta["cbp_format"] = (fmt, _fmt_regex(fmt, node))
    call.meta["cbp_format"] = node.meta["cbp_format"]
    return _to_date_value(call, row, ev)


def _to_date_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    fmt = _spark_format(node)
    if fmt is not None:
        _fmt_regex(fmt, node)
    _date_arg(node, node.this, infer, types)
    return "date"


def _to_date_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    v = ev(node.this, row)
    if "cbp_format" not in node.meta:  # parsed once per worker (the node is parse_expr's, cached)
        fmt = _spark_format(node)
        node.meta["cbp_format"] = (fmt, _fmt_regex(fmt, node) if fmt is not None else None)
    fmt, rx = node.meta["cbp_format"]
    if v is None or rx is None or not isinstance(v, str):
        return _as_date(v)
    m = rx.fullmatch(v)
    try:
        if m is None:
            raise ValueError(v)
        return datetime.date(int(m["y"]), int(m["m"]), int(m["d"]))
    except ValueError:
        if not ansi():  # Spark's non-ANSI mode: NULL
            return None
        raise CastFailure(f"the text {v!r} could not be parsed with '{fmt}'", "CANNOT_PARSE_TIMESTAMP") from None


def _unit(node: exp.Expr, units: dict[str, str]) -> str:
    u = node.args.get("unit")
    text = (u.name if isinstance(u, (exp.Var, exp.Literal)) else "").upper()
    if text not in units:
        raise _refuse(f"{_name(node)}() to '{text}' (units: {', '.join(sorted(units))})", node)
    return units[text]


def _trunc(v: datetime.datetime, unit: str) -> datetime.datetime:
    if unit == "week":
        v = v - datetime.timedelta(days=v.weekday())
    keep = ["year", "quarter", "month", "week", "day", "hour", "minute", "second"].index(unit)
    month = v.month if keep >= 2 else (v.month - 1) // 3 * 3 + 1 if keep == 1 else 1
    return v.replace(
        month=month,
        day=v.day if keep >= 3 else 1,
        hour=v.hour if keep >= 5 else 0,
        minute=v.minute if keep >= 6 else 0,
        second=v.second if keep >= 7 else 0,
        microsecond=0,
    )


def _ts(v: Any) -> Any:
    return None if v is None else cast_value(v, "timestamp")


def _part(fn: Callable[[datetime.date], Any]) -> Callable[[exp.Expr, Mapping[str, Any], _Ev], Any]:
    def value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
        d = _as_date(ev(node.this, row))
        return None if d is None else fn(d)

    return value


def _int_of(name: str) -> Callable[[exp.Expr, _Infer, Mapping[str, str | None]], str]:
    def type_of(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
        _date_arg(node, node.this, infer, types)
        return name

    return type_of


def _add_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    _date_arg(node, node.this, infer, types)
    n = infer(node.expression, types)
    if n not in ("int", None):
        raise _refuse(f"{_name(node)}() by a {n} (it takes an int)", node)
    return "date"


def _time_part(attr: str) -> Callable[[exp.Expr, Mapping[str, Any], _Ev], Any]:
    def value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
        t = _ts(ev(node.this, row))
        return None if t is None else int(getattr(t, attr))

    return value


def _add_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    d, n = _as_date(ev(node.this, row)), ev(node.expression, row)
    return None if d is None or n is None else d + datetime.timedelta(days=n)


def _months_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    d, n = _as_date(ev(node.this, row)), ev(node.expression, row)
    return None if d is None or n is None else add_months(d, n)


def _diff_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    a, b = _as_date(ev(node.this, row)), _as_date(ev(node.expression, row))
    return None if a is None or b is None else (a - b).days


def _diff_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    _date_arg(node, node.this, infer, types)
    _date_arg(node, node.expression, infer, types)
    return "int"


def _trunc_ts_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    _unit(node, _TRUNC_TS)
    _date_arg(node, node.this, infer, types)
    return "timestamp"


def _trunc_date_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    _unit(node, _TRUNC_DATE)
    _date_arg(node, node.this, infer, types)
    return "date"


def _trunc_ts_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    t = _ts(ev(node.this, row))
    return None if t is None else _trunc(t, _unit(node, _TRUNC_TS))


def _trunc_date_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    t = _ts(_as_date(ev(node.this, row)))
    return None if t is None else _trunc(t, _unit(node, _TRUNC_DATE)).date()


def _date_add(node: exp.Expr) -> bool:
    unit = node.args.get("unit")
    return unit is None or unit.name.upper() == "DAY"


def _add_checked(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    if not _date_add(node):
        raise _refuse(f"{node.sql(dialect='spark')} (date_add and date_sub of days are)", node)
    return _add_type(node, infer, types)


#: The type of each date function node (its arguments checked).
TYPES: dict[type[exp.Expr], Callable[[exp.Expr, _Infer, Mapping[str, str | None]], str]] = {
    exp.TsOrDsAdd: _add_checked,
    exp.AddMonths: _add_type,
    exp.DateDiff: _diff_type,
    exp.TsOrDsToDate: _to_date_type,
    exp.TimestampTrunc: _trunc_ts_type,
    exp.DateTrunc: _trunc_date_type,
    exp.DayOfWeek: _int_of("int"),
    exp.DayOfYear: _int_of("int"),
    exp.WeekOfYear: _int_of("int"),
    exp.Quarter: _int_of("int"),
    exp.LastDay: _int_of("date"),
    exp.Hour: _int_of("int"),
    exp.Minute: _int_of("int"),
    exp.Second: _int_of("int"),
}
#: The value of each date function node on a row.
VALUES: dict[type[exp.Expr], Callable[[exp.Expr, Mapping[str, Any], _Ev], Any]] = {
    exp.TsOrDsAdd: _add_value,
    exp.AddMonths: _months_value,
    exp.DateDiff: _diff_value,
    exp.TsOrDsToDate: _to_date_value,
    exp.TimestampTrunc: _trunc_ts_value,
    exp.DateTrunc: _trunc_date_value,
    exp.DayOfWeek: _part(lambda d: d.isoweekday() % 7 + 1),
    exp.DayOfYear: _part(lambda d: d.timetuple().tm_yday),
    exp.WeekOfYear: _part(lambda d: d.isocalendar()[1]),
    exp.Quarter: _part(lambda d: (d.month - 1) // 3 + 1),
    exp.LastDay: _part(lambda d: d.replace(day=calendar.monthrange(d.year, d.month)[1])),
    exp.Hour: _time_part("hour"),
    exp.Minute: _time_part("minute"),
    exp.Second: _time_part("second"),
}


def literal(v: datetime.date) -> exp.Expr:
    """The ``DATE '...'`` or ``TIMESTAMP '...'`` literal of a value (UTC).

    >>> literal(datetime.date(1998, 9, 2)).sql(dialect="spark")
    "CAST('1998-09-02' AS DATE)"
    """
    kind = "timestamp" if isinstance(v, datetime.datetime) else "date"
    text = v.astimezone(_UTC).isoformat(sep=" ") if isinstance(v, datetime.datetime) else v.isoformat()
    return exp.Cast(this=exp.Literal.string(text), to=exp.DataType.build(kind))


def interval_value(node: exp.Expr) -> Interval:
    """The value of an ``INTERVAL 'n' UNIT`` node."""
    return _interval(node)
