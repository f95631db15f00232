"""A view's scalar expressions compiled once into Python closures, so that the generated stages do not
walk the sqlglot tree of each expression for every row (:func:`cbp.views.exprs.ev` does).

A closure computes exactly what :func:`~cbp.views.exprs.ev` does on the same row: each node kind it
knows becomes a closure over its children's closures (literals, columns and time literals resolved
once; the common cases of arithmetic and comparison on two values of one type taken directly), and
any other node is evaluated by ``ev`` itself, so a node kind added there works here too.

    >>> expr_fn("CASE WHEN x > 1 THEN upper(s) ELSE 'no' END")({"x": 2, "s": "ab"})
    'AB'
    >>> expr_fn("x + NULL")({"x": 1}) is None
    True
"""

from __future__ import annotations

import decimal
import functools
import operator
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from . import exprs, intwidth
from .dates import DATE_NODES, date_value
from .mode import LAX_FN, enter, int_result, leave
from .ops import _EXACT
from .strings import LIKE_NODES, like_value, substring
from .vtypes import conform, decimal_of

__all__ = ["expr_fn", "node_fn", "conformer", "Fn"]

#: A compiled expression: the value on one row (field name -> value).
Fn = Callable[[Mapping[str, Any]], Any]
_D = decimal.Decimal
_ARITH_OPS: dict[type[exp.Expr], tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any]]] = {
    exp.Add: (operator.add, _EXACT.add),
    exp.Sub: (operator.sub, _EXACT.subtract),
    exp.Mul: (operator.mul, _EXACT.multiply),
}
_CMP_OPS: dict[type[exp.Expr], Callable[[Any, Any], Any]] = {
    exp.EQ: operator.eq,
    exp.NEQ: operator.ne,
    exp.GT: operator.gt,
    exp.GTE: operator.ge,
    exp.LT: operator.lt,
    exp.LTE: operator.le,
}
_NODES: dict[tuple[int, str], tuple[exp.Expr, Fn]] = {}
_LAX = [0]  # > 0 while compiling the inside of cbp_lax(...) (cbp.views.mode)


@functools.lru_cache(maxsize=4096)
def expr_fn(text: str, prefix: str = "") -> Fn:
    """The closure of an expression's Spark SQL text (cached: a worker compiles each expression once);
    ``prefix``: the expression's columns are the row's fields with this prefix.

    >>> expr_fn("coalesce(a, 3) * 2")({"a": None})
    6
    >>> expr_fn("l__a + 1", "l__")({"a": 1})
    2
    """
    return node_fn(exprs.parse_expr(text), prefix)


def node_fn(node: exp.Expr, prefix: str = "") -> Fn:
    """The closure of a parsed expression (cached per node).

    >>> node_fn(exprs.parse_expr("a BETWEEN 1 AND 3"))({"a": 2})
    True
    """
    got = _NODES.get((id(node), prefix))
    if got is None or got[0] is not node:
        if len(_NODES) > 100_000:
            _NODES.clear()
        got = (node, _compile(node, prefix))
        _NODES[(id(node), prefix)] = got
    return got[1]


def _by_ev(node: exp.Expr, prefix: str) -> Fn:
    """``node`` evaluated by :func:`cbp.views.exprs.ev` (on the row's fields with ``prefix``)."""
    if not prefix:
        return lambda row: exprs.ev(node, row)
    return lambda row: exprs.ev(node, {prefix + k: v for k, v in row.items()})


def _via(prefix: str) -> Callable[[exp.Expr, Mapping[str, Any]], Any]:
    """``ev``'s signature over compiled children (for the helpers that take an evaluator)."""
    return lambda n, row: node_fn(n, prefix)(row)


@functools.lru_cache(maxsize=4096)
def conformer(t: str | None, view: str) -> Callable[[Any], Any]:
    """:func:`cbp.views.vtypes.conform` to type ``t`` with the type read once.

    >>> conformer("decimal(5,2)", "v")(decimal.Decimal("1.005"))
    Decimal('1.01')
    """
    ps = decimal_of(t) if t is not None else None
    if ps is None:
        return (lambda v: v) if t is None else (lambda v: conform(v, t, view))
    p, s = ps
    quantum = _D(1).scaleb(-s)
    context = _EXACT

    def to_decimal(v: Any) -> Any:
        if type(v) is not _D:
            return conform(v, t, view)
        q = v.quantize(quantum, rounding=decimal.ROUND_HALF_UP, context=context)
        if q and q.adjusted() + 1 > p - s:
            return conform(v, t, view)  # raises view-overflow
        return q

    return to_decimal


def _constant(node: exp.Expr) -> Fn:
    """A node without columns: ``ev``'s value, computed at the first call (an error raised when
    evaluated, as ``ev`` raises it)."""
    done: list[Any] = []

    def value(row: Mapping[str, Any]) -> Any:
        if not done:
            done.append(exprs.ev(node, {}))
        return done[0]

    return value


def _compile(node: exp.Expr, prefix: str) -> Fn:
    t = type(node)
    if t is exp.Column:
        name = node.name
        return operator.itemgetter(name[len(prefix) :] if prefix and name.startswith(prefix) else name)
    if t in (exp.Literal, exp.Boolean, exp.Null) or (isinstance(node, exp.Cast) and not any(node.find_all(exp.Column))):
        return _constant(node)
    if t is exp.Paren:
        return node_fn(node.this, prefix)
    if t in _ARITH_OPS and t in exprs._BINARY:
        return _arith(node, prefix)
    if t in _CMP_OPS and t in exprs._BINARY:
        return _compare(node, prefix)
    if t in exprs._BINARY:
        f2, a, b = exprs._BINARY[t], node_fn(node.this, prefix), node_fn(node.expression, prefix)
        return lambda row: f2(a(row), b(row))
    if t in exprs._UNARY:
        f1, a = exprs._UNARY[t], node_fn(node.this, prefix)
        return lambda row: f1(a(row))
    if t is exp.Is:
        a = node_fn(node.this, prefix)
        return lambda row: a(row) is None
    if t is exp.In:
        a, items = node_fn(node.this, prefix), [node_fn(e, prefix) for e in node.expressions]
        return lambda row: exprs._in(a(row), [i(row) for i in items])
    if t is exp.Between:
        a, lo, hi = node_fn(node.this, prefix), node_fn(node.args["low"], prefix), node_fn(node.args["high"], prefix)
        return lambda row: _between(a(row), lo(row), hi(row))
    return _compile_special(node, prefix)


def _arith(node: exp.Expr, prefix: str) -> Fn:
    """``+ - *``: two ints as ints, decimals (or a decimal and an int) in ``ev``'s exact context, anything
    else by ``ev``'s operator."""
    plain, exact = _ARITH_OPS[type(node)]
    slow, a, b = exprs._BINARY[type(node)], node_fn(node.this, prefix), node_fn(node.expression, prefix)

    def arith(row: Mapping[str, Any]) -> Any:
        x, y = a(row), b(row)
        tx, ty = type(x), type(y)
        if tx is int and ty is int:
            return plain(x, y)
        if (tx is _D or tx is int) and (ty is _D or ty is int):
            return exact(x, y)  # a decimal and an int: the int read exactly as a decimal, as ev does
        return slow(x, y)

    def wrapping(row: Mapping[str, Any]) -> Any:  # non-ANSI: an int past 64 bits wraps
        r = arith(row)
        return r if type(r) is not int or -9223372036854775808 <= r <= 9223372036854775807 else int_result(r)

    return wrapping if _LAX[0] else arith


def _compare(node: exp.Expr, prefix: str) -> Fn:
    """A comparison: two non-NULL values of one type compared directly, others by ``ev``'s operator."""
    op, slow, a, b = (
        _CMP_OPS[type(node)],
        exprs._BINARY[type(node)],
        node_fn(node.this, prefix),
        node_fn(node.expression, prefix),
    )

    def compare(row: Mapping[str, Any]) -> Any:
        x, y = a(row), b(row)
        if x is not None and type(x) is type(y):
            return op(x, y)
        return slow(x, y)

    return compare


def _between(v: Any, lo: Any, hi: Any) -> Any:
    return exprs._and(exprs._cmp(v, lo, operator.ge), exprs._cmp(v, hi, operator.le))


def _compile_special(node: exp.Expr, prefix: str) -> Fn:
    """CASE, IF, COALESCE, the string and date functions, the decimal rounding; any other node by ``ev``."""
    if isinstance(node, exp.Case):
        return _case(node, prefix)
    if isinstance(node, exp.If):
        cond, yes = node_fn(node.this, prefix), node_fn(node.args["true"], prefix)
        no = node_fn(node.args["false"], prefix) if node.args.get("false") is not None else None
        return lambda row: yes(row) if cond(row) is True else (no(row) if no is not None else None)
    if isinstance(node, exp.Coalesce):
        return _coalesce([node_fn(e, prefix) for e in [node.this, *node.expressions]])
    if isinstance(node, exp.Substring):
        s, start = node_fn(node.this, prefix), node_fn(node.args["start"], prefix)
        n = node_fn(node.args["length"], prefix) if node.args.get("length") else None
        return lambda row: substring(s(row), start(row), n(row) if n is not None else None)
    if isinstance(node, exp.Anonymous) and node.name.lower() == exprs.DECIMAL_FN:
        inner = node_fn(node.expressions[0], prefix)
        to = conformer(node.expressions[1].this, node.expressions[2].this)
        return lambda row: to(inner(row))
    if isinstance(node, exp.Anonymous) and node.name.lower() == intwidth.INT_FN:
        inner, width, view = (
            node_fn(node.expressions[0], prefix),
            int(node.expressions[1].this),
            node.expressions[2].this,
        )
        return lambda row: intwidth.checked(inner(row), width, view, row)
    if isinstance(node, exp.Anonymous) and node.name.lower() == intwidth.FLOAT_TEXT_FN:  # a float as Java prints it
        value = node_fn(node.expressions[0], prefix)
        return lambda row: intwidth.float_text_value(value(row))
    if isinstance(node, exp.Anonymous) and node.name.lower() == intwidth.FLOAT_FN:  # 32-bit float arithmetic
        if intwidth.rounded_arg(node.expressions[0]) is not None:  # a float's round: its double's, narrowed
            whole = node_fn(node.expressions[0], prefix)
            return lambda row: intwidth.float_apply(lambda v: v, [whole(row)])
        op, args = exprs.OPS[type(node.expressions[0])], intwidth.float_operands(node.expressions[0])
        fns = [node_fn(a, prefix) for a in args]
        return lambda row: intwidth.float_apply(op, [f(row) for f in fns])
    if isinstance(node, exp.Anonymous) and node.name.lower() == LAX_FN:
        _LAX[0] += 1  # its arithmetic compiled to wrap (an ANSI expression's does not check)
        try:
            return _lax(node_fn(node.expressions[0], prefix))
        finally:
            _LAX[0] -= 1
    if isinstance(node, exp.Cast):
        return _by_ev(node, prefix)
    if type(node) in LIKE_NODES:
        via = _via(prefix)
        return lambda row: like_value(node, row, via)
    if type(node) in DATE_NODES and not isinstance(node, (exp.Var, exp.TsOrDsToDate)):  # (to_date: datefns)
        via = _via(prefix)
        return lambda row: date_value(node, row, via)
    return _by_ev(node, prefix)


def _lax(inner: Fn) -> Fn:
    """``cbp_lax(e)``: ``e`` evaluated with Spark's non-ANSI semantics (:mod:`cbp.views.mode`)."""

    def lax(row: Mapping[str, Any]) -> Any:
        token = enter(False)
        try:
            return inner(row)
        finally:
            leave(token)

    return lax


def _case(node: exp.Case, prefix: str) -> Fn:
    subject = node_fn(node.this, prefix) if node.this is not None else None
    branches = [(node_fn(b.this, prefix), node_fn(b.args["true"], prefix)) for b in node.args.get("ifs") or []]
    default = node_fn(node.args["default"], prefix) if node.args.get("default") is not None else None

    def case(row: Mapping[str, Any]) -> Any:
        s = subject(row) if subject is not None else None
        for cond, then in branches:
            c = cond(row)
            if (c is True) if subject is None else (s is not None and _equal(s, c)):
                return then(row)
        return default(row) if default is not None else None

    return case


def _equal(s: Any, c: Any) -> bool:
    """A simple CASE's subject equal to a WHEN value (of another type: Spark's implicit cast)."""
    return bool(c == s) if type(c) is type(s) else exprs._cmp(s, c, operator.eq) is True


def _coalesce(fns: list[Fn]) -> Fn:
    def coalesce(row: Mapping[str, Any]) -> Any:
        for f in fns:
            v = f(row)
            if v is not None:
                return v
        return None

    return coalesce
