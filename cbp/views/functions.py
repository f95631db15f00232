"""Scalar functions of a view's expressions beyond the operators, with Spark's semantics: ``round``
(HALF_UP; a decimal's result precision and scale as Spark's), ``floor``, ``ceil``, ``greatest``,
``least`` (NULLs skipped), ``nullif``, ``concat_ws`` (NULLs skipped), ``lpad``, ``rpad``, ``replace``,
``split_part``, ``left``, ``right``, ``trim``, ``ltrim``, ``rtrim`` (of spaces). :mod:`cbp.views.exprs`
types them with :data:`TYPES` and evaluates them with :data:`VALUES`.

    >>> from cbp.views.exprs import ev, parse_expr
    >>> ev(parse_expr("round(x, 2)"), {"x": 2.675}), ev(parse_expr("lpad(s, 5, 'xy')"), {"s": "hi"})
    (2.68, 'xyxhi')
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from ..spec.typedvalues import decimal_of
from .casts import to_text
from .viewerror import ViewError
from .vtypes import coerce_pair, is_numeric, wider

__all__ = ["TYPES", "VALUES", "rounded"]

_Infer = Callable[[exp.Expr, Mapping[str, str | None]], Any]
_Ev = Callable[[exp.Expr, Mapping[str, Any]], Any]
_Types = Mapping[str, str | None]
_EXACT = decimal.Context(prec=200, rounding=decimal.ROUND_HALF_UP)


def _refuse(message: str, node: exp.Expr) -> ViewError:
    return ViewError("view-unsupported", message, node=node)


def _name(node: exp.Expr) -> str:
    return node.sql_name().lower() if isinstance(node, exp.Func) else type(node).__name__.lower()


def _want(node: exp.Expr, t: str | None, ok: Callable[[str], bool], what: str) -> None:
    if t is not None and not ok(t):
        raise _refuse(f"{_name(node)}() of a {t} (it takes {what})", node)


def _int_literal(node: exp.Expr, e: exp.Expr | None, default: int | None) -> int:
    """An argument that must be an int literal (``round``'s scale, ``split_part``'s index)."""
    if e is None and default is not None:
        return default
    neg = isinstance(e, exp.Neg)
    lit = e.this if neg and e is not None else e
    if not (isinstance(lit, exp.Literal) and not lit.is_string and str(lit.this).isdigit()):
        raise _refuse(f"{_name(node)}() with an argument that is not an int literal", node)
    return -int(lit.this) if neg else int(lit.this)


def _round_type(node: exp.Expr, infer: _Infer, types: _Types) -> str | None:
    t = infer(node.this, types)
    _want(node, t, is_numeric, "a number")
    scale = _int_literal(node, node.args.get("decimals"), 0)
    ps = decimal_of(t) if t is not None else None
    if ps is None:
        return t
    p, s = ps
    if scale < 0:
        return f"decimal({min(max(p - s + 1, -scale + 1), 38)},0)"
    return f"decimal({min(p - s + 1 + min(s, scale), 38)},{min(s, scale)})"


def _round_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    return rounded(ev(node.this, row), _int_literal(node, node.args.get("decimals"), 0), _EXACT)


def rounded(x: Any, scale: int, context: decimal.Context) -> Any:
    """``x`` rounded to ``scale`` digits after the point (before it if negative) by ``context``'s
    rounding (``round``: HALF_UP, ``bround``: HALF_EVEN), a double by its shortest digits, as Spark's.

        >>> rounded(2.5, 0, _EXACT), rounded(125, -1, _EXACT)
        (3.0, 130)
    """
    if x is None or (isinstance(x, int) and scale >= 0) or (isinstance(x, float) and not math.isfinite(x)):
        return x
    d = decimal.Decimal(repr(x)) if isinstance(x, float) else decimal.Decimal(x)
    q = d.quantize(decimal.Decimal(1).scaleb(-scale), context=context)
    if scale < 0:
        q = q.quantize(decimal.Decimal(1), context=context)
    if isinstance(x, float):
        return float(q) or 0.0  # (Java's BigDecimal has no -0: round(-0.04, 1) is 0.0, as in Spark)
    return int(q) if isinstance(x, int) else q


def _floor_type(node: exp.Expr, infer: _Infer, types: _Types) -> str | None:
    if node.args.get("decimals") is not None:
        raise _refuse(f"{_name(node)}() with a scale (not yet)", node)
    t = infer(node.this, types)
    _want(node, t, is_numeric, "a number")
    if t is None:
        return None
    ps = decimal_of(t)
    return "int" if ps is None else f"decimal({min(ps[0] - ps[1] + 1, 38)},0)"


def _floor_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    x = ev(node.this, row)
    if x is None or isinstance(x, int):
        return x
    up = isinstance(node, exp.Ceil)
    if isinstance(x, float):  # a long as Java's toLong gives it: saturated, NaN 0
        if not math.isfinite(x):
            return 0 if math.isnan(x) else (2**63 - 1 if x > 0 else -(2**63))
        return max(-(2**63), min(2**63 - 1, math.ceil(x) if up else math.floor(x)))
    return x.to_integral_value(rounding=decimal.ROUND_CEILING if up else decimal.ROUND_FLOOR)


def _family(t: str) -> str:
    return "number" if is_numeric(t) else t


def _common(node: exp.Expr, types: list[str | None]) -> str | None:
    known = [t for t in types if t is not None]
    if len({_family(t) for t in known}) > 1:
        raise _refuse(f"{_name(node)}() of {' and '.join(sorted(set(known)))} (Spark wants one type)", node)
    out = known[0] if known else None
    for t in known[1:]:
        out = wider(str(out), t)
    return out


def _args(node: exp.Expr) -> list[exp.Expr]:
    return [node.this, *node.expressions] if node.this is not None else list(node.expressions)


def _extreme_type(node: exp.Expr, infer: _Infer, types: _Types) -> str | None:
    return _common(node, [infer(a, types) for a in _args(node)])


def _extreme_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    values = [v for v in (ev(a, row) for a in _args(node)) if v is not None]
    if not values:
        return None
    out = values[0]
    for v in values[1:]:
        a, b = coerce_pair(out, v)
        if (b > a) if isinstance(node, exp.Greatest) else (b < a):
            out = v
    return out


def _nullif_type(node: exp.Expr, infer: _Infer, types: _Types) -> str | None:
    t = infer(node.this, types)
    _common(node, [t, infer(node.expression, types)])
    return t


def _nullif_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    a, b = ev(node.this, row), ev(node.expression, row)
    if a is None or b is None:
        return a
    x, y = coerce_pair(a, b)
    return None if x == y else a


def _strings_type(*specs: tuple[str, str]) -> Callable[[exp.Expr, _Infer, _Types], str]:
    """A string function's type checker: ``specs`` its arguments (arg name, ``string`` or ``int``)."""

    def type_of(node: exp.Expr, infer: _Infer, types: _Types) -> str:
        for arg, want in specs:
            t = infer(node.args[arg], types) if node.args.get(arg) is not None else None
            if t is not None and t != want:
                raise _refuse(f"{_name(node)}() of a {t} (it takes {want}s)", node)
        return "string"

    return type_of


def _concat_ws_type(node: exp.Expr, infer: _Infer, types: _Types) -> str:
    parts = list(node.expressions)
    _want(node, infer(parts[0], types), lambda t: t == "string", "a string separator")
    for p in parts[1:]:
        _want(node, infer(p, types), lambda t: t != "binary", "scalars")
    return "string"


def _concat_ws_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    sep, *values = [ev(e, row) for e in node.expressions]
    return None if sep is None else sep.join(to_text(v) for v in values if v is not None)


def _pad_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    s, n = ev(node.this, row), ev(node.expression, row)
    fill = ev(node.args["fill_pattern"], row) if node.args.get("fill_pattern") is not None else " "
    if s is None or n is None or fill is None:
        return None
    if n <= len(s) or not fill:
        return s[: max(n, 0)]
    pad = (fill * (n // len(fill) + 1))[: n - len(s)]
    return pad + s if node.args.get("is_left") else s + pad


def _replace_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    s, search = ev(node.this, row), ev(node.expression, row)
    rep = ev(node.args["replacement"], row) if node.args.get("replacement") is not None else ""
    if s is None or search is None or rep is None:
        return None
    return s if search == "" else s.replace(search, rep)


def _split_part_type(node: exp.Expr, infer: _Infer, types: _Types) -> str:
    if _int_literal(node, node.args.get("part_index"), None) == 0:
        raise _refuse("split_part() of part 0 (Spark fails the query: parts count from 1, or -1 from the end)", node)
    return _strings_type(("this", "string"), ("delimiter", "string"))(node, infer, types)


def _split_part_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    s, sep = ev(node.this, row), ev(node.args["delimiter"], row)
    i = _int_literal(node, node.args.get("part_index"), None)
    if s is None or sep is None:
        return None
    parts = s.split(sep) if sep else [s]
    k = i - 1 if i > 0 else len(parts) + i
    return parts[k] if 0 <= k < len(parts) else ""


def _side_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    s, n = ev(node.this, row), ev(node.expression, row)
    if s is None or n is None:
        return None
    if n <= 0:
        return ""
    return s[:n] if isinstance(node, exp.Left) else s[-n:]


def _trim_type(node: exp.Expr, infer: _Infer, types: _Types) -> str:
    if node.args.get("expression") is not None:
        raise _refuse("trim() of characters other than spaces (not yet)", node)
    return _strings_type(("this", "string"))(node, infer, types)


def _trim_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    s = ev(node.this, row)
    if s is None:
        return None
    position = str(node.args.get("position") or "BOTH").upper()
    return s.lstrip(" ") if position == "LEADING" else s.rstrip(" ") if position == "TRAILING" else s.strip(" ")


#: The type of each function node (its arguments checked).
TYPES: dict[type[exp.Expr], Callable[[exp.Expr, _Infer, _Types], str | None]] = {
    exp.Round: _round_type,
    exp.Floor: _floor_type,
    exp.Ceil: _floor_type,
    exp.Greatest: _extreme_type,
    exp.Least: _extreme_type,
    exp.Nullif: _nullif_type,
    exp.ConcatWs: _concat_ws_type,
    exp.Pad: _strings_type(("this", "string"), ("expression", "int"), ("fill_pattern", "string")),
    exp.Replace: _strings_type(("this", "string"), ("expression", "string"), ("replacement", "string")),
    exp.SplitPart: _split_part_type,
    exp.Left: _strings_type(("this", "string"), ("expression", "int")),
    exp.Right: _strings_type(("this", "string"), ("expression", "int")),
    exp.Trim: _trim_type,
}
#: The value of each function node on a row.
VALUES: dict[type[exp.Expr], Callable[[exp.Expr, Mapping[str, Any], _Ev], Any]] = {
    exp.Round: _round_value,
    exp.Floor: _floor_value,
    exp.Ceil: _floor_value,
    exp.Greatest: _extreme_value,
    exp.Least: _extreme_value,
    exp.Nullif: _nullif_value,
    exp.ConcatWs: _concat_ws_value,
    exp.Pad: _pad_value,
    exp.Replace: _replace_value,
    exp.SplitPart: _split_part_value,
    exp.Left: _side_value,
    exp.Right: _side_value,
    exp.Trim: _trim_value,
}
