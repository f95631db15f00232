"""The error a view's SQL is refused with (:class:`ViewError`), in a module of its own so that every
module of :mod:`cbp.views` may raise it (:mod:`cbp.views.exprs` re-exports it).

    >>> ViewError("view-unsupported", "rand()", 2, 3).line
    2
"""

from __future__ import annotations

from sqlglot import exp

__all__ = ["ViewError", "construct_name"]


class ViewError(Exception):
    """A view's SQL refused: the error code, the message, and its place (the line and column in the
    SQL, or the node it is at until it is placed); :func:`cbp.views.expand_views` makes it a
    :class:`cbp.errors.SpecError`."""

    def __init__(self, code: str, message: str, line: int = 1, col: int = 1, node: exp.Expr | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.line, self.col, self.node = code, message, line, col, node


_NAMES = {
    "Order": "ORDER BY",
    "StrToTime": "to_timestamp() with a format",
    "Limit": "LIMIT",
    "Offset": "OFFSET",
    "Distinct": "DISTINCT",
    "Window": "a window function",
    "Subquery": "a subquery",
    "Select": "a subquery",
    "Exists": "EXISTS",
    "Min": "MIN",
    "Max": "MAX",
    "With": "WITH (a CTE)",
    "Lateral": "LATERAL",
    "Qualify": "QUALIFY",
    "Cast": "CAST",
    "TryCast": "CAST",
    "EQ": "=",
    "NEQ": "<>",
    "GT": ">",
    "GTE": ">=",
    "LT": "<",
    "LTE": "<=",
    "Rand": "rand() (not deterministic)",
    "Randn": "randn() (not deterministic)",
    "CurrentDate": "current_date() (not deterministic)",
    "CurrentTimestamp": "current_timestamp() (not deterministic)",
    "Anonymous": "the function",
}


def construct_name(node: exp.Expr) -> str:
    """How a message names the SQL construct ``node``.

    >>> import sqlglot
    >>> construct_name(sqlglot.parse_one("rand()", read="spark"))
    'rand() (not deterministic)'
    """
    name = type(node).__name__
    if name == "Anonymous":
        return f"function {node.name}()"
    if name in _NAMES:
        return _NAMES[name]
    if isinstance(node, exp.Func):
        return f"function {node.sql_name().lower()}()"
    return name.upper()
