"""Date and time in a view's scalar expressions: ``DATE '...'`` and ``TIMESTAMP '...'`` literals, and
``EXTRACT(f FROM d)`` (every field Spark has: :mod:`cbp.views.dateparts`), ``year(d)``, ``month(d)``,
``day(d)`` and ``dayofmonth(d)`` of a date or timestamp (UTC), each an int as in Spark;
:mod:`cbp.views.exprs` types and evaluates them through :func:`date_type` and :func:`date_value`.

    >>> import datetime
    >>> from cbp.views.exprs import ev, parse_expr
    >>> ev(parse_expr("EXTRACT(YEAR FROM d) * 100 + month(d)"), {"d": datetime.date(1995, 3, 7)})
    199503
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from .casts import to_date, to_timestamp
from .dateparts import extract_type, extract_value
from .viewerror import ViewError

__all__ = ["DATE_NODES", "date_type", "date_value", "time_literal", "time_literal_type"]

_PARTS: dict[type[exp.Expr], str] = {exp.Year: "year", exp.Month: "month", exp.Day: "day", exp.DayOfMonth: "day"}
#: The sqlglot nodes of the date functions (``year(d)`` is ``Year(TsOrDsToDate(d))`` in sqlglot's tree).
DATE_NODES: frozenset[type[exp.Expr]] = frozenset({exp.Extract, exp.TsOrDsToDate, exp.Var, *_PARTS})
_TIME_LITERALS = {exp.DataType.Type.DATE: "date", exp.DataType.Type.TIMESTAMP: "timestamp"}
_TIME_LITERALS[exp.DataType.Type.TIMESTAMPTZ] = "timestamp"


def _refuse(message: str, node: exp.Expr) -> Exception:
    return ViewError("view-unsupported", message, node=node)


def _part(node: exp.Expr) -> tuple[str, exp.Expr]:
    """``(year | month | day, the argument)`` of a date function node."""
    arg = node.this
    if isinstance(arg, exp.TsOrDsToDate):
        arg = arg.this
    return _PARTS[type(node)], arg


def date_type(node: exp.Expr, infer: Callable[[exp.Expr, Mapping[str, str | None]], Any], types: Any) -> str:
    """The type of a date function (``int``), its argument checked to be a date or timestamp."""
    if isinstance(node, (exp.TsOrDsToDate, exp.Var)):
        raise _refuse(f"{type(node).__name__} outside year(), month(), day()", node)
    if isinstance(node, exp.Extract):  # every field Spark has (cbp.views.dateparts)
        return extract_type(node, infer, types)
    _, arg = _part(node)
    t = infer(arg, types)
    if t not in ("date", "timestamp", None):
        name = node.sql(dialect="spark").split("(")[0].lower()
        raise _refuse(f"{name}() of a {t} (it takes a date or timestamp)", node)
    return "int"


def date_value(node: exp.Expr, row: Mapping[str, Any], ev: Callable[[exp.Expr, Mapping[str, Any]], Any]) -> Any:
    """The value of a date function on ``row`` (NULL of NULL).

    >>> import datetime
    >>> from cbp.views.exprs import parse_expr
    >>> date_value(parse_expr("day(d)"), {"d": datetime.date(2024, 2, 29)}, lambda n, r: r["d"])
    29
    """
    if isinstance(node, exp.Extract):
        return extract_value(node, row, ev)
    part, arg = _part(node)
    v = ev(arg, row)
    return None if v is None else int(getattr(v, part))


def time_literal(node: exp.Expr) -> Any:
    """The value of ``DATE '2024-01-01'`` or ``TIMESTAMP '2024-01-01 10:00:00'`` (UTC)."""
    text = node.this.this  # not a value: refused in either mode (Spark's parser refuses the literal)
    return to_timestamp(text) if _TIME_LITERALS.get(node.args["to"].this) == "timestamp" else to_date(text)


def time_literal_type(node: exp.Expr) -> str:
    """``date`` or ``timestamp``: the type of a time literal (a CAST of anything else is refused)."""
    to = node.args.get("to")
    t = _TIME_LITERALS.get(to.this) if isinstance(to, exp.DataType) else None
    if t is None or not (isinstance(node.this, exp.Literal) and node.this.is_string):
        raise _refuse("CAST (only DATE '...' and TIMESTAMP '...' literals)", node)
    try:
        time_literal(node)
    except ValueError:
        raise _refuse(f"a {t} literal '{node.this.this}' that is not one", node) from None
    return t
