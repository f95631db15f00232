"""Int arithmetic in Spark's widths: Spark computes ``int + int`` in 32 bits (``smallint`` in 16,
``tinyint`` in 8), a view's ints are 64-bit values. So an arithmetic whose operands are all narrower
than ``bigint`` (a cast to ``int``/``smallint``/``tinyint``, an int literal, ``length()``,
``year()``, ...) is wrapped in ``cbp_int(expr, bits, view)`` when the view is compiled, and its value
checked against that width: past it, Spark's ANSI mode fails the query (``view-overflow``, naming the
view and the row) and its non-ANSI mode wraps as Java's ``int`` does.

A flow's int column is a ``bigint`` (64 bits), so ``x + 1`` of a column is never narrowed.

    >>> from sqlglot import parse_one
    >>> bits(parse_one("CAST(a AS INT) + 1", read="spark")), bits(parse_one("a + 1", read="spark"))
    (32, 64)
    >>> from .mode import semantics
    >>> with semantics(False):
    ...     checked(2**31, 32, "v", {})
    -2147483648
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from ..errors import UserCodeError
from .casts import cast_target
from .mode import ansi, wrap_bits

__all__ = ["INT_FN", "bits", "narrowed", "int_value", "checked"]

#: The internal function an int arithmetic narrower than 64 bits is checked with: ``cbp_int(e, 32, 'view')``.
INT_FN = "cbp_int"
_CAST_BITS = {"int8": 8, "int16": 16, "int32": 32}
#: Functions Spark types ``int`` (32 bits).
_INT32_FNS = tuple(
    getattr(exp, name)
    for name in (
        "Length",
        "Year",
        "Month",
        "Day",
        "DayOfMonth",
        "DayOfWeek",
        "DayOfYear",
        "WeekOfYear",
        "Quarter",
        "Hour",
        "Minute",
        "Second",
        "DateDiff",
        "Extract",
        "StrPosition",
    )
    if hasattr(exp, name)
)
_ARITH = (exp.Add, exp.Sub, exp.Mul, exp.Mod, exp.Neg, exp.Abs)
_BRANCHES = (exp.Paren, exp.Coalesce, exp.Greatest, exp.Least, exp.Nullif, exp.If, exp.Case)


def _children(node: exp.Expr) -> list[exp.Expr]:
    """The operands whose type is the node's (a CASE's results, not its conditions)."""
    if isinstance(node, exp.Case):
        out = [b.args["true"] for b in node.args.get("ifs") or []]
        return out + ([node.args["default"]] if node.args.get("default") is not None else [])
    if isinstance(node, exp.If):
        return [node.args[k] for k in ("true", "false") if node.args.get(k) is not None]
    args = [node.this, node.args.get("expression"), *node.expressions]
    return [a for a in args if isinstance(a, exp.Expr)]


def bits(node: exp.Expr) -> int:
    """The width Spark computes an int expression in: 8, 16, 32 or 64 (a column, ``count``, anything
    else: 64). A NULL takes the other operands' width."""
    if isinstance(node, exp.Literal) and not node.is_string:
        text = str(node.this)
        if text.isdigit():
            return 32 if int(text) < 2**31 else 64
        return 64
    if isinstance(node, exp.Null):
        return 0
    if isinstance(node, (exp.Cast, exp.TryCast)):
        return _CAST_BITS.get(cast_target(node.args.get("to")) or "", 64)
    if isinstance(node, exp.DateDiff) and node.args.get("unit") is not None:
        return 64  # datediff(unit, a, b) is Spark's timestampdiff: a bigint
    if isinstance(node, _INT32_FNS):
        return 32
    if isinstance(node, _ARITH + _BRANCHES):
        widths = [bits(c) for c in _children(node)]
        return max(widths) if widths else 64
    return 64


def narrowed(node: exp.Expr, out: exp.Expr, t: str | None, view: str) -> exp.Expr:
    """``out`` (``node`` compiled) wrapped in ``cbp_int(out, bits, view)`` when ``node`` is int
    arithmetic Spark computes in fewer than 64 bits."""
    if t != "int" or not isinstance(node, _ARITH):
        return out
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):  # a negative literal (round(x, -1))
        return out
    width = bits(node)
    if not 0 < width < 64:
        return out
    return exp.Anonymous(this=INT_FN, expressions=[out, exp.Literal.number(width), exp.Literal.string(view)])


def checked(v: Any, width: int, view: str, row: Mapping[str, Any]) -> Any:
    """``v`` as an int of ``width`` bits: as it is when it fits; past it ``view-overflow`` (ANSI) or
    wrapped (non-ANSI), as Spark's ``int``, ``smallint`` or ``tinyint`` arithmetic."""
    if type(v) is not int or -(2 ** (width - 1)) <= v < 2 ** (width - 1):
        return v
    if not ansi():
        return wrap_bits(v, width)
    shown = {k: x for k, x in row.items() if k != "_diff"}
    kind = {8: "tinyint", 16: "smallint"}.get(width, "int")
    raise UserCodeError(
        f"view '{view}': the value {v} does not fit a {width}-bit {kind} (Spark computes {kind} arithmetic "
        f"in {width} bits; its ANSI mode fails the query: ARITHMETIC_OVERFLOW; CAST an operand to BIGINT "
        f"to compute in 64 bits); the row: {str(shown)[:1000]}",
        code="view-overflow",
    )


def int_value(node: exp.Expr, row: Mapping[str, Any], ev: Callable[[exp.Expr, Mapping[str, Any]], Any]) -> Any:
    """The value of ``cbp_int(expr, bits, view)`` on ``row``."""
    width, view = int(node.expressions[1].this), str(node.expressions[2].this)
    return checked(ev(node.expressions[0], row), width, view, row)
