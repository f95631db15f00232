"""Scalar SQL expressions of a view: their type (checked when the pipeline is loaded) and their value
on one row (in the view's generated stages), with Spark's semantics for the operators a view may use.

An expression is a sqlglot tree whose columns were renamed to the row's field names
(:mod:`cbp.views.plan`); it travels to the workers as Spark SQL text, parsed once per process.

    >>> ev(parse_expr("CASE WHEN x > 1 THEN upper(s) ELSE 'no' END"), {"x": 2, "s": "ab"})
    'AB'
    >>> ev(parse_expr("x + NULL"), {"x": 1}) is None
    True
"""

from __future__ import annotations

import decimal
import functools
from collections.abc import Callable, Mapping
from typing import Any

import sqlglot
from sqlglot import exp

from . import datefmt, datefns, dateparts, functions, intwidth, morefns, regex, unixtime
from .casts import cast_target, cast_type, cast_value, comparable, in_view, to_text
from .dates import DATE_NODES, date_type, date_value, time_literal, time_literal_type
from .mode import LAX_FN, ansi, int_result, semantics
from .ops import _and, _cmp, _div, _mod, _num, _or
from .strings import LIKE_NODES, like_operands, like_value, substring
from .viewerror import ViewError, construct_name
from .vtypes import arith, conform, family, is_numeric, literal_type, wider

__all__ = ["ev", "parse_expr", "infer", "ViewError", "SCALAR_NODES", "NUMERIC", "with_decimal_types", "column_type"]

NUMERIC = frozenset({"int", "float"})
#: The internal function a decimal result is rounded to its type with: ``cbp_decimal(expr, 'decimal(P,S)')``.
DECIMAL_FN = "cbp_decimal"
#: The internal function naming the view around an expression that may fail at run time (a cast):
#: ``cbp_view(expr, 'view')``, whose failure is ``view-cast`` naming the view and the row.
VIEW_FN = "cbp_view"
#: The function nodes of :mod:`cbp.views.functions` and :mod:`cbp.views.datefns` (type, value).
_FN_TYPES = {**functions.TYPES, **datefns.TYPES, **datefmt.TYPES, **morefns.TYPES, **regex.TYPES, **unixtime.TYPES}
_FN_TYPES |= dateparts.TYPES  # (its DateDiff: datediff(unit, a, b) too)
_FN_VALUES = {**functions.VALUES, **datefns.VALUES, **datefmt.VALUES, **morefns.VALUES, **regex.VALUES}
_FN_VALUES |= unixtime.VALUES | dateparts.VALUES
#: Functions sqlglot leaves anonymous: name -> (type, value).
_NAMED = {**morefns.NAMED, **unixtime.NAMED}


@functools.lru_cache(maxsize=4096)
def parse_expr(text: str) -> exp.Expr:
    """An expression's Spark SQL text parsed (cached: a worker parses each expression once).

    >>> type(parse_expr("a + 1")).__name__
    'Add'
    """
    return sqlglot.parse_one(text, read="spark")


_BINARY: dict[type[exp.Expr], Callable[[Any, Any], Any]] = {
    exp.Add: lambda a, b: _num(a, b, lambda x, y: x + y, 1),
    exp.Sub: lambda a, b: _num(a, b, lambda x, y: x - y, -1),
    exp.Mul: lambda a, b: _num(a, b, lambda x, y: x * y),
    exp.Div: _div,
    exp.Mod: _mod,
    exp.EQ: lambda a, b: _cmp(a, b, lambda x, y: x == y),
    exp.NEQ: lambda a, b: _cmp(a, b, lambda x, y: x != y),
    exp.GT: lambda a, b: _cmp(a, b, lambda x, y: x > y),
    exp.GTE: lambda a, b: _cmp(a, b, lambda x, y: x >= y),
    exp.LT: lambda a, b: _cmp(a, b, lambda x, y: x < y),
    exp.LTE: lambda a, b: _cmp(a, b, lambda x, y: x <= y),
    exp.And: _and,
    exp.Or: _or,
    exp.DPipe: lambda a, b: None if a is None or b is None else _text(a) + _text(b),
}
_UNARY: dict[type[exp.Expr], Callable[[Any], Any]] = {
    exp.Neg: lambda a: None if a is None else int_result(-a) if type(a) is int else -a,
    exp.Not: lambda a: None if a is None else not a,
    exp.Paren: lambda a: a,
    exp.Upper: lambda a: None if a is None else a.upper(),
    exp.Lower: lambda a: None if a is None else a.lower(),
    exp.Length: lambda a: None if a is None else len(a),
    exp.Abs: lambda a: None if a is None else int_result(abs(a)) if type(a) is int else abs(a),
}
OPS: dict[type[exp.Expr], Callable[..., Any]] = {
    **_BINARY,
    **_UNARY,
}  # an arithmetic's operation on its operands' values (cbp_float32's)
#: The sqlglot node types a view's scalar expressions may use.
SCALAR_NODES = frozenset(
    set(_BINARY)
    | set(_UNARY)
    | {exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Is, exp.In, exp.Between, exp.Case}
    | {exp.If, exp.Coalesce, exp.Substring, exp.Concat, exp.Cast, exp.TryCast, exp.Interval}
    | {exp.DataTypeParam}
    | set(_FN_TYPES)
    | LIKE_NODES
    | DATE_NODES
)


def _text(v: Any) -> str:
    return to_text(v)  # Spark's string of a value (a double as Java prints it)


def _literal(node: exp.Expr) -> Any:
    if node.is_string:
        return node.this
    text = str(node.this)
    if any(c in text for c in "eE"):
        return float(text)
    return decimal.Decimal(text) if "." in text else int(text)  # 1.5 is a decimal in Spark


def ev(node: exp.Expr, row: Mapping[str, Any]) -> Any:
    """The value of expression ``node`` on ``row`` (field name -> value); NULL is None.

    >>> ev(parse_expr("coalesce(a, 3) * 2"), {"a": None})
    6
    """
    t = type(node)
    if t is exp.Column:
        return row[node.name]
    if t in _BINARY:
        return _BINARY[t](ev(node.this, row), ev(node.expression, row))
    if t in _UNARY:
        return _UNARY[t](ev(node.this, row))
    if t is exp.Literal:  # its value kept on the node (a worker's nodes are parse_expr's, cached)
        meta = node.meta
        if "cbp_value" not in meta:
            meta["cbp_value"] = _literal(node)
        return meta["cbp_value"]
    if t is exp.Boolean:
        return bool(node.this)
    if t is exp.Null:
        return None
    if t is exp.Is:
        return ev(node.this, row) is None
    if t is exp.In:
        return _in(ev(node.this, row), [ev(e, row) for e in node.expressions])
    if t is exp.Between:
        v = ev(node.this, row)
        return _and(
            _cmp(v, ev(node.args["low"], row), lambda x, y: x >= y),
            _cmp(v, ev(node.args["high"], row), lambda x, y: x <= y),
        )
    return _special(node, row)


def _in(v: Any, items: list[Any]) -> Any:
    if v is None:
        return None
    if any(i is not None and _cmp(v, i, lambda x, y: x == y) for i in items):
        return True
    return None if any(i is None for i in items) else False


def _target(node: exp.Expr) -> str:
    return cast_target(node.args.get("to")) or ""


def _cast_args(node: exp.Expr) -> tuple[str, bool]:
    return _target(node), node.args.get("safe") is True


def _is_time_literal(node: exp.Expr) -> bool:
    """``DATE '...'`` or ``TIMESTAMP '...'`` (sqlglot's Cast of a string literal)."""
    lit = isinstance(node.this, exp.Literal) and node.this.is_string
    return type(node) is exp.Cast and lit and _target(node) in ("date", "timestamp")


def _special(node: exp.Expr, row: Mapping[str, Any]) -> Any:
    """CASE, IF, COALESCE and the string functions of several arguments."""
    if isinstance(node, exp.Case):
        subject = ev(node.this, row) if node.this is not None else None
        for branch in node.args.get("ifs") or []:
            cond = ev(branch.this, row)
            hit = (cond is True) if node.this is None else _cmp(subject, cond, lambda x, y: x == y) is True
            if hit:
                return ev(branch.args["true"], row)
        default = node.args.get("default")
        return ev(default, row) if default is not None else None
    if isinstance(node, exp.If):
        if ev(node.this, row) is True:
            return ev(node.args["true"], row)
        other = node.args.get("false")
        return ev(other, row) if other is not None else None
    if isinstance(node, exp.Coalesce):
        for e in [node.this, *node.expressions]:
            v = ev(e, row)
            if v is not None:
                return v
        return None
    if type(node) is exp.Concat:  # not ConcatWs (a subclass)
        parts = [ev(e, row) for e in node.expressions]
        return None if any(p is None for p in parts) else "".join(_text(p) for p in parts)
    if isinstance(node, exp.Substring):
        length = node.args.get("length")
        return substring(ev(node.this, row), ev(node.args["start"], row), ev(length, row) if length else None)
    return _function(node, row)


def _function(node: exp.Expr, row: Mapping[str, Any]) -> Any:
    """The internal functions, casts, and the functions of :mod:`~cbp.views.functions`, :mod:`~cbp.views.datefns`."""
    if isinstance(node, exp.Anonymous) and node.name.lower() == DECIMAL_FN:  # a decimal result rounded to its type
        return conform(ev(node.expressions[0], row), node.expressions[1].this, node.expressions[2].this)
    if isinstance(node, exp.Anonymous) and node.name.lower() == VIEW_FN:
        return in_view(node, row, ev)
    if isinstance(node, exp.Anonymous) and node.name.lower() == intwidth.INT_FN:
        return intwidth.int_value(node, row, ev)
    if isinstance(node, exp.Anonymous) and node.name.lower() == intwidth.FLOAT_FN:
        return intwidth.float_value(node, row, ev, OPS)
    if isinstance(node, exp.Anonymous) and node.name.lower() == intwidth.FLOAT_TEXT_FN:
        return intwidth.float_text_value(ev(node.expressions[0], row))
    if isinstance(node, exp.Anonymous) and node.name.lower() == LAX_FN:  # non-ANSI semantics (cbp.views.mode)
        with semantics(False):
            return ev(node.expressions[0], row)
    if isinstance(node, exp.Anonymous) and node.name.lower() == datefns.TO_DATE_FN:
        return datefns.to_date_call_value(node, row, ev)
    if isinstance(node, exp.Anonymous) and node.name.lower() in _NAMED:  # pmod(), bround(), make_date()
        return _NAMED[node.name.lower()][1](node, row, ev)
    if isinstance(node, exp.Cast):  # DATE '...', TIMESTAMP '...' (its value kept on the node), CAST, TRY_CAST
        if "cbp_value" in node.meta:
            return node.meta["cbp_value"]
        if _is_time_literal(node):
            node.meta["cbp_value"] = time_literal(node)
            return node.meta["cbp_value"]
        return cast_value(ev(node.this, row), *_cast_args(node))
    if type(node) in _FN_VALUES:
        return _FN_VALUES[type(node)](node, row, ev)
    if isinstance(node, exp.Interval):
        return datefns.interval_value(node)
    if type(node) in DATE_NODES:
        return date_value(node, row, ev)
    if type(node) in LIKE_NODES:
        return like_value(node, row, ev)
    raise ViewError("view-unsupported", f"{type(node).__name__} is not evaluated", node=node)


def _literal_type(node: exp.Expr) -> str:
    if node.is_string:
        return "string"
    v = _literal(node)
    return (
        "float"
        if isinstance(v, float)
        else "int"
        if isinstance(v, int)
        else "decimal({},{})".format(*literal_type(str(v)))
    )


def with_decimal_types(node: exp.Expr, types: Mapping[str, str | None], view: str) -> exp.Expr:
    """``node`` with each arithmetic whose result is a decimal wrapped in ``cbp_decimal(e, 'decimal(P,S)',
    view)``: rounded HALF_UP to Spark's result type, ``view-overflow`` when it does not fit; and, when it
    may fail to convert a value (a CAST), wrapped in ``cbp_view(e, view)`` (:data:`VIEW_FN`)."""

    def wrap(n: exp.Expr) -> exp.Expr:
        args = {
            k: (
                wrap(v)
                if isinstance(v, exp.Expr)
                else [wrap(x) if isinstance(x, exp.Expr) else x for x in v]
                if isinstance(v, list)
                else v
            )
            for k, v in n.args.items()
        }
        out = n.__class__(**args)
        out.meta.update(n.meta)
        if type(n) is exp.TsOrDsToDate and n.args.get("format") is not None:
            return datefns.to_date_call(out, n)
        if type(n) in (exp.Add, exp.Sub) and not any(isinstance(c, exp.Column) for c in n.walk()):
            if infer(n, types) in ("date", "timestamp"):  # DATE '1998-12-01' - INTERVAL '90' DAY: folded once
                return datefns.literal(ev(n, {}))
        if type(n) in _ARITH:
            t = infer(n, types)
            if t is not None and t.startswith("decimal("):
                lits = [exp.Literal.string(t), exp.Literal.string(view)]
                return exp.Anonymous(this=DECIMAL_FN, expressions=[out, *lits])
        if type(n) in _ARITH or type(n) in (exp.Neg, exp.Abs):  # int arithmetic in Spark's 8/16/32 bits
            return intwidth.narrowed(n, out, infer(n, types), view, types, infer)
        if intwidth.rounded_arg(n) is not None:  # round/bround of a float: a float
            return intwidth.narrowed(n, out, infer(n, types), view, types, infer)
        return intwidth.float_text(n, out, types, infer)  # a float's CAST to a string: Java's Float.toString

    out = wrap(node)
    if _fallible(node, types):  # a runtime failure names the view
        out = exp.Anonymous(this=VIEW_FN, expressions=[out, exp.Literal.string(view)])
    if not ansi() and not isinstance(node, (exp.Column, exp.Literal, exp.Null, exp.Boolean)):
        out = exp.Anonymous(this=LAX_FN, expressions=[out])  # evaluated with Spark's non-ANSI semantics
    return out


def infer(node: exp.Expr, types: Mapping[str, str | None]) -> str | None:
    """The type (int, float, string, bool; None: NULL) of ``node`` over fields of ``types``, or
    :class:`ViewError` naming the construct that is not supported or does not type.

    >>> infer(parse_expr("x / 2"), {"x": "int"})
    'float'
    """
    t = type(node)
    if t is exp.Anonymous and node.name.lower() in _NAMED:  # pmod(), bround(), make_date()
        return _NAMED[node.name.lower()][0](node, infer, types)
    if t not in SCALAR_NODES:
        raise ViewError("view-unsupported", construct_name(node), node=node)
    if t is exp.Column:
        ct = types[node.name]
        return None if ct is None else family(ct)  # int32 ... computes as an int, in its width (intwidth)
    if t is exp.Literal:
        return _literal_type(node)
    if t is exp.Boolean:
        return "bool"
    if t is exp.Null:
        return None
    if t in (exp.Cast, exp.TryCast):
        return time_literal_type(node) if _is_time_literal(node) else cast_type(node, infer(node.this, types))
    if t in (exp.Add, exp.Sub):
        shifted = datefns.shift_type(node, infer, types)  # a date or timestamp ± an interval or days
        if shifted is not None:
            return shifted
    if t in _ARITH or t in (exp.Neg, exp.Abs):
        return _arith_type(node, types)
    if t in (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between):
        comparable(node, [infer(a, types) for a in _operands(node)], _operands(node))
        return "bool"
    if t in (exp.And, exp.Or, exp.Not):
        _want(node, [infer(a, types) for a in _operands(node)], {"bool"}, "a boolean")
        return "bool"
    if t is exp.Is:
        if not isinstance(node.expression, exp.Null):
            raise ViewError("view-unsupported", "IS other than IS NULL", node=node)
        infer(node.this, types)
        return "bool"
    return _infer_special(node, types)


_ARITH: dict[type[exp.Expr], str] = {exp.Add: "+", exp.Sub: "-", exp.Mul: "*", exp.Div: "/", exp.Mod: "%"}


def _arith_type(node: exp.Expr, types: Mapping[str, str | None]) -> str | None:
    """Spark's result type of ``+ - * / %``, unary minus and ``abs``: a float if one side is, a decimal
    (its precision and scale by Spark's rules) if one side is, ``/`` of ints a float."""
    operands = [a for a in (node.this, node.args.get("expression")) if a is not None]
    args = [infer(a, types) for a in operands]
    for a in args:
        if a is not None and not is_numeric(a):
            raise ViewError("view-unsupported", f"{construct_name(node)} of a {a} (it takes a number)", node=node)
    known = [a for a in args if a is not None]
    if "float" in known or (type(node) is exp.Div and all(a == "int" for a in known)):
        return "float"
    if not any(a.startswith("decimal(") for a in known):
        return "int" if known else None
    lits = [
        int(o.this) if isinstance(o, exp.Literal) and not o.is_string and str(o.this).isdigit() else None
        for o in operands
    ]
    if len(known) < len(args):  # NULL's type is the other side's
        return known[0]
    if len(args) == 1:
        return args[0]
    widths = [str(intwidth.typed(o, a, types, infer)) for o, a in zip(operands, args)]  # an int32 is decimal(10,0)
    return arith(_ARITH[type(node)], widths[0], widths[1], lits[0], lits[1])


def column_type(node: exp.Expr, types: Mapping[str, str | None]) -> str | None:
    """:func:`infer`'s type of a view's column with its width, as the view's flow declares it: ``int32``
    for ``CAST(x AS INT)``, ``year(d)``, an ``int32`` column or arithmetic of them (:mod:`.intwidth`),
    ``float32`` for ``CAST(x AS FLOAT)`` ...

    >>> column_type(parse_expr("CAST(x AS INT) + 1"), {"x": "string"}), column_type(parse_expr("x"), {"x": "int16"})
    ('int32', 'int16')
    """
    return intwidth.typed(node, infer(node, types), types, infer)


def _operands(node: exp.Expr) -> list[exp.Expr]:
    out = [node.this] if node.this is not None else []
    for k in ("expression", "low", "high"):
        if node.args.get(k) is not None:
            out.append(node.args[k])
    return out + list(node.expressions)


def _want(node: exp.Expr, types: list[str | None], allowed: set[str] | frozenset[str], what: str) -> None:
    for t in types:
        if t is not None and t not in allowed:
            raise ViewError("view-unsupported", f"{construct_name(node)} of a {t} (it takes {what})", node=node)


def _family(t: str) -> str:
    """What a type compares with: numbers with numbers, a date or timestamp with either or a string."""
    if is_numeric(t):
        return "number"
    return "time" if t in ("date", "timestamp") else t


def _fallible(node: exp.Expr, types: Mapping[str, str | None]) -> bool:
    """Whether ``node`` may fail at run time on a value Spark's ANSI mode cannot convert: a CAST, a
    string compared with another type, a date function of a string."""
    for n in node.walk():
        if isinstance(n, exp.Cast) and not _is_time_literal(n) and n.args.get("safe") is not True:
            return True
        if dateparts.fallible(n, infer, types):  # EXTRACT, date_part, timestampdiff of a string
            return True
        if isinstance(n, unixtime.FALLIBLE + dateparts.FALLIBLE) or (
            type(n) is exp.Anonymous and n.name.lower() in unixtime.FALLIBLE_NAMES
        ):
            return True
        compared = isinstance(n, (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between, exp.Nullif))
        if compared or type(n) in datefns.TYPES or type(n) in datefmt.TYPES:
            kinds = {infer(a, types) for a in _operands(n)} - {None}
            if "string" in kinds and (len(kinds) > 1 or not compared):
                return True
    return False


def _common(node: exp.Expr, types: list[str | None]) -> str | None:
    """The type of branches that must agree (CASE, IF, COALESCE): int and float give float."""
    known = [t for t in types if t is not None]
    if len({_family(t) for t in known}) > 1:
        comparable(node, [None, *known, "bool"])  # refused: branches of different kinds
    if not known:
        return None
    out = known[0]
    for t in known[1:]:
        out = wider(out, t)
    return out


def _infer_special(node: exp.Expr, types: Mapping[str, str | None]) -> str | None:
    if type(node) in _FN_TYPES:
        return _FN_TYPES[type(node)](node, infer, types)
    if isinstance(node, exp.Paren):
        return infer(node.this, types)
    if isinstance(node, (exp.Upper, exp.Lower, exp.Length)):
        _want(node, [infer(node.this, types)], {"string"}, "a string")
        return "int" if isinstance(node, exp.Length) else "string"
    if type(node) in DATE_NODES:
        return date_type(node, infer, types)
    if type(node) in LIKE_NODES:
        _want(node, [infer(a, types) for a in like_operands(node)], {"string"}, "strings")
        return "bool"
    if isinstance(node, (exp.Concat, exp.DPipe)):
        for a in _operands(node):
            infer(a, types)
        return "string"
    if isinstance(node, exp.Substring):
        _want(node, [infer(node.this, types)], {"string"}, "a string")
        args = [node.args[k] for k in ("start", "length") if node.args.get(k) is not None]
        _want(node, [infer(a, types) for a in args], {"int"}, "int positions")
        return "string"
    if isinstance(node, exp.Case):
        subject = [infer(node.this, types)] if node.this is not None else []
        results = []
        for branch in node.args.get("ifs") or []:
            cond = infer(branch.this, types)
            if node.this is None:
                _want(branch, [cond], {"bool"}, "a boolean condition")
            else:
                comparable(node, subject + [cond])
            results.append(infer(branch.args["true"], types))
        if node.args.get("default") is not None:
            results.append(infer(node.args["default"], types))
        return _common(node, results)
    if isinstance(node, exp.If):
        _want(node, [infer(node.this, types)], {"bool"}, "a boolean condition")
        branches = [node.args[k] for k in ("true", "false") if node.args.get(k) is not None]
        return _common(node, [infer(b, types) for b in branches])
    if isinstance(node, exp.Coalesce):
        return _common(node, [infer(a, types) for a in [node.this, *node.expressions]])
    raise ViewError("view-unsupported", construct_name(node), node=node)
