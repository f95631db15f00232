"""Ints and floats in Spark's widths: Spark computes ``int + int`` in 32 bits (``smallint`` in 16,
``tinyint`` in 8) and ``float + float`` in 32-bit floats, a view's ints are 64-bit values and its floats
doubles. So an arithmetic whose operands are all narrower than ``bigint`` (a cast to
``int``/``smallint``/``tinyint``, an int literal, ``length()``, ``year()``, a column of type ``int32``,
``int16`` or ``int8``: a Delta source's narrow column, another view's narrow column, ...) is wrapped in
``cbp_int(expr, bits, view)`` when the view is compiled, and its value checked against that width: past
it, Spark's ANSI mode fails the query (``view-overflow``, naming the view and the row) and its non-ANSI
mode wraps as Java's ``int`` does. An arithmetic (``+ - * %``, minus, ``abs``) whose floats are all
``float32`` (a ``float32`` column, ``CAST(x AS FLOAT)``) and whose other operands are ints is wrapped in
``cbp_float32(expr)``: each operand rounded to 32 bits, the operation, its result rounded again, as Java
computes a ``float`` (``/`` is a double in Spark, as it is here).

A flow's ``int`` column is a ``bigint`` (64 bits), so ``x + 1`` of such a column is never narrowed.

    >>> from sqlglot import parse_one
    >>> bits(parse_one("CAST(a AS INT) + 1", read="spark")), bits(parse_one("a + 1", read="spark"))
    (32, 64)
    >>> bits(parse_one("a + b", read="spark"), {"a": "int16", "b": "int8"})
    16
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
from ..spec.schema import float32
from .casts import cast_target, java_float
from .mode import ansi, wrap_bits
from .vtypes import NARROW

__all__ = ["INT_FN", "FLOAT_FN", "bits", "float_bits", "narrowed", "int_value", "float_value", "checked", "typed"]
__all__ += ["from_columns", "float_operands", "float_apply", "rounded_arg", "FLOAT_TEXT_FN", "float_text"]
__all__ += ["float_text_value"]

#: The internal function an int arithmetic narrower than 64 bits is checked with: ``cbp_int(e, 32, 'view')``.
INT_FN = "cbp_int"
#: The internal function an arithmetic of 32-bit floats is rounded with: ``cbp_float32(e)``.
FLOAT_FN = "cbp_float32"
#: The internal function a 32-bit float is cast to a string with, as Java's ``Float.toString``: ``cbp_float_text(e)``.
FLOAT_TEXT_FN = "cbp_float_text"
_Types = Mapping[str, "str | None"]
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


def _column_bits(node: exp.Column, types: _Types | None, kind: str) -> int:
    """A column's width: its type's (``int32``: 32), 64 for any other."""
    t = (types or {}).get(node.name)
    return NARROW[t][1] if t in NARROW and NARROW[t][0] == kind else 64


def bits(node: exp.Expr, types: _Types | None = None) -> int:
    """The width Spark computes an int expression in: 8, 16, 32 or 64 (a column of type ``int``,
    ``count``, anything else: 64; ``types``: field -> view type, ``int32`` ...). A NULL takes the other
    operands' width."""
    if isinstance(node, exp.Column):
        return _column_bits(node, types, "int")
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
        widths = [bits(c, types) for c in _children(node)]
        return max(widths) if widths else 64
    return 64


def float_bits(node: exp.Expr, types: _Types | None, infer: Callable[[exp.Expr, _Types], Any]) -> int:
    """The width Spark computes a float expression in: 32 when its floats are all ``float``s (a
    ``float32`` column, ``CAST(x AS FLOAT)``), through ``+ - * %``, minus, ``abs`` and the branches of
    ``CASE``, ``coalesce``, ...; 64 (a double) for any other (``/``, a function, a decimal or double
    operand). An int operand: a float in non-ANSI mode, a double in ANSI mode (Spark's ANSI coercion
    widens an int and a float to a double). ``infer``: an operand's view type. A NULL: 0."""
    if isinstance(node, exp.Column) and (types or {}).get(node.name) == "float32":
        return 32
    if isinstance(node, (exp.Cast, exp.TryCast)) and cast_target(node.args.get("to")) == "float32":
        return 32
    if isinstance(node, exp.Null):
        return 0
    if isinstance(node, exp.Literal):
        is_int = not node.is_string and str(node.this).isdigit()
        return (64 if ansi() else 0) if is_int else 64
    if isinstance(node, _ARITH + _BRANCHES):
        widths = [float_bits(c, types, infer) for c in _children(node)]
        return max(widths) if widths else 64
    arg = rounded_arg(node)
    if arg is not None:  # round(f, s), bround(f, s) of a float: a float (Spark's RoundBase)
        return 32 if float_bits(arg, types, infer) == 32 else 64
    return 0 if infer(node, types or {}) == "int" and not ansi() else 64


def rounded_arg(node: exp.Expr) -> exp.Expr | None:
    """The value ``round(x, s)`` or ``bround(x, s)`` rounds (None: ``node`` is neither)."""
    if isinstance(node, exp.Round):
        return node.this
    if isinstance(node, exp.Anonymous) and node.name.lower() == "bround" and node.expressions:
        return node.expressions[0]
    return None


def from_columns(node: exp.Expr) -> bool:
    """Whether ``node``'s width comes from a column (an ``int32`` column of a flow, stored as a ``bigint``:
    Spark SQL over the stored table would compute it in 64 bits), not only from casts, literals and
    functions Spark types narrow itself."""
    if isinstance(node, exp.Column):
        return True
    return isinstance(node, _ARITH + _BRANCHES) and any(from_columns(c) for c in _children(node))


def typed(node: exp.Expr, t: str | None, types: _Types, infer: Callable[[exp.Expr, _Types], Any]) -> str | None:
    """The type of a view's column ``node`` (of view type ``t``) with its width: ``int32`` for
    ``CAST(x AS INT)``, ``year(d)`` or an ``int32`` column, ``float32`` for ``CAST(x AS FLOAT)``, ..."""
    if t == "int":
        return {8: "int8", 16: "int16", 32: "int32"}.get(bits(node, types), t)
    if t == "float" and float_bits(node, types, infer) == 32:
        return "float32"
    return t


def narrowed(
    node: exp.Expr, out: exp.Expr, t: str | None, view: str, types: _Types | None = None, infer: Any = None
) -> exp.Expr:
    """``out`` (``node`` compiled) wrapped in ``cbp_int(out, bits, view)`` when ``node`` is int
    arithmetic Spark computes in fewer than 64 bits, in ``cbp_float32(out)`` when it is float arithmetic
    Spark computes in 32 bits."""
    if rounded_arg(node) is not None:  # a float's round: the double's, narrowed to 32 bits (as Spark's toFloat)
        if t == "float" and infer is not None and float_bits(node, types, infer) == 32:
            return exp.Anonymous(this=FLOAT_FN, expressions=[out])
        return out
    if not isinstance(node, _ARITH):
        return out
    if isinstance(node, exp.Neg) and isinstance(node.this, exp.Literal):  # a negative literal (round(x, -1))
        return out
    if t == "float" and infer is not None and float_bits(node, types, infer) == 32:
        return exp.Anonymous(this=FLOAT_FN, expressions=[out])
    if t != "int":
        return out
    width = bits(node, types)
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


def float_value(
    node: exp.Expr,
    row: Mapping[str, Any],
    ev: Callable[[exp.Expr, Mapping[str, Any]], Any],
    ops: Mapping[type[exp.Expr], Callable[..., Any]],
) -> Any:
    """The value of ``cbp_float32(expr)`` on ``row``: ``expr``'s operands rounded to 32-bit floats (an int
    operand too, as Java widens it to a ``float``), its operation (``ops``: by node type), the result
    rounded to 32 bits."""
    inner = node.expressions[0]
    if rounded_arg(inner) is not None:  # round/bround: computed on the float's double, the result narrowed
        return float_apply(lambda v: v, [ev(inner, row)])
    return float_apply(ops[type(inner)], [ev(c, row) for c in float_operands(inner)])


def float_operands(inner: exp.Expr) -> list[exp.Expr]:
    """The operands of the arithmetic ``cbp_float32`` wraps."""
    return [c for c in (inner.this, inner.args.get("expression")) if isinstance(c, exp.Expr)]


def float_apply(op: Callable[..., Any], args: list[Any]) -> Any:
    """``op`` of ``args`` as Java's ``float`` arithmetic: each rounded to 32 bits, the result too."""
    if None in args:
        return None
    v = op(*[float32(float(a)) for a in args])
    return None if v is None else float32(float(v))


def float_text(node: exp.Expr, out: exp.Expr, types: _Types, infer: Callable[[exp.Expr, _Types], Any]) -> exp.Expr:
    """``out`` (``node`` compiled) as ``cbp_float_text(x)`` when ``node`` is ``CAST(x AS STRING)`` of a 32-bit float:
    Spark prints the float (``0.1``), not the double it is held as (``0.10000000149011612``)."""
    if not isinstance(node, (exp.Cast, exp.TryCast)) or cast_target(node.args.get("to")) != "string":
        return out
    arg = node.this
    if infer(arg, types) != "float" or float_bits(arg, types, infer) != 32:
        return out
    return exp.Anonymous(this=FLOAT_TEXT_FN, expressions=[out.this])


def float_text_value(v: Any) -> Any:
    """The value of ``cbp_float_text(x)``: ``x`` as Java's ``Float.toString`` (:func:`cbp.views.casts.java_float`)."""
    return None if v is None else java_float(float(v))
