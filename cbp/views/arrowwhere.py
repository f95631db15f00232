"""A view input's route ``WHERE`` evaluated with Arrow over a whole batch of stored records, before any
record becomes a Python dict (:class:`cbp.views.run.RouteKey`, :func:`cbp.engine.task.translate.route_batches`).

A filter that keeps few of its input's records (TPC-H Q19's ``OR`` of brands, sizes, quantities and ship
modes keeps about 2% of lineitems) cost most of a small epoch's routing when each record was turned into a
dict and the condition evaluated on it in Python. Only conditions whose Arrow result is exactly the row-wise
one are compiled; anything else makes :func:`batch_where` return None, and the records go the row-wise way:

- ``AND``, ``OR`` (Kleene logic: NULL as SQL has it), ``NOT``, parentheses, ``CBP_VIEW(x, view)``;
- ``= <> != < <= > >=`` and ``BETWEEN`` of a column with a constant or with a column of the same type,
  ``IN`` of a column and constants (none NULL), ``IS [NOT] NULL`` of a column;
- columns declared ``int``, ``decimal(p,s)``, ``date`` or ``string`` and stored as such (not as JSON text),
  compared with a constant of the same kind (an int constant with a decimal column too);
- a constant is any part without a column (``CAST('1995-09-01' AS DATE)``, ``CBP_INT(1 + 10, 32, 'q19')``),
  evaluated once by the row-wise code itself (:func:`cbp.views.compiled.node_fn` on an empty row).

A record kept by the mask is the record the row-wise ``WHERE`` returns ``TRUE`` for; a NULL or ``FALSE`` drops it,
as :data:`cbp.views.joinrun.SKIP` would. No evaluation here can fail (no arithmetic on columns), so a row-wise
error (ANSI) is never hidden: an expression that could fail is not compiled.

    >>> import pyarrow as pa
    >>> b = pa.record_batch({"q": pa.array([1, 5, None]), "m": pa.array(["AIR", "MAIL", "AIR"])})
    >>> types = (("q", "int"), ("m", "string"))
    >>> batch_where("`l__q` >= 2 OR `l__m` IN ('AIR')", "l__", b, types).to_pylist()
    [True, True, True]
    >>> batch_where("NOT (`q` BETWEEN 0 AND 2)", "", b, types).to_pylist()
    [False, True, None]
    >>> batch_where("upper(`m`) = 'AIR'", "", b, types), batch_where("`m` = 'AIR'", "", b, (("m", "json"),))
    (None, None)
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from . import exprs
from .compiled import node_fn

__all__ = ["batch_where"]

Mask = Callable[[pa.RecordBatch], pa.Array]
_CMP: dict[type[exp.Expr], str] = {
    exp.EQ: "equal",
    exp.NEQ: "not_equal",
    exp.LT: "less",
    exp.LTE: "less_equal",
    exp.GT: "greater",
    exp.GTE: "greater_equal",
}
_SWAPPED = {"less": "greater", "less_equal": "greater_equal", "greater": "less", "greater_equal": "less_equal"}
#: (where, prefix, schema, declared types) -> its compiled mask, or None when it cannot be compiled
_CACHE: dict[tuple[str, str, pa.Schema, tuple[tuple[str, str], ...]], Mask | None] = {}


class _Unsupported(Exception):
    """A part of the condition whose Arrow evaluation would not be the row-wise one (or is not written)."""


def batch_where(where: str, prefix: str, batch: pa.RecordBatch, declared: tuple[tuple[str, str], ...]) -> Any:
    """The route ``WHERE`` ``where`` (columns: the records' fields with ``prefix``) over ``batch``: a
    boolean array (NULL where the row-wise value is NULL), or None when it is not compiled (see the
    module); ``declared``: (field, scalar type) of the input's fields that are not lists."""
    key = (where, prefix, batch.schema, declared)
    if key not in _CACHE:
        if len(_CACHE) > 1000:
            _CACHE.clear()
        try:
            _CACHE[key] = _Compiler(prefix, batch.schema, dict(declared)).bool(exprs.parse_expr(where))
        except _Unsupported:
            _CACHE[key] = None
    fn = _CACHE[key]
    return None if fn is None else fn(batch)


class _Compiler:
    def __init__(self, prefix: str, schema: pa.Schema, declared: dict[str, str]) -> None:
        self.prefix, self.schema, self.declared = prefix, schema, declared

    def bool(self, n: exp.Expr) -> Mask:
        """A condition: a function of a batch to a boolean array."""
        t = type(n)
        if t is exp.Paren or (t is exp.Anonymous and n.name.lower() == exprs.VIEW_FN):
            return self.bool(n.this if t is exp.Paren else n.expressions[0])  # CBP_VIEW: names the view in an error
        if t in (exp.And, exp.Or):
            a, b = self.bool(n.this), self.bool(n.expression)
            op = pc.and_kleene if t is exp.And else pc.or_kleene
            return lambda batch: op(a(batch), b(batch))
        if t is exp.Not:
            a = self.bool(n.this)
            return lambda batch: pc.invert(a(batch))
        if t in _CMP:
            return self._compare(_CMP[t], n.this, n.expression)
        if t is exp.Between and not n.args.get("symmetric"):
            lo = self._compare("greater_equal", n.this, n.args["low"])
            hi = self._compare("less_equal", n.this, n.args["high"])
            return lambda batch: pc.and_kleene(lo(batch), hi(batch))
        if t is exp.In and not n.args.get("query") and not n.args.get("unnest"):
            return self._in(n.this, n.expressions)
        if t is exp.Is and isinstance(n.expression, exp.Null):
            i = self._column(n.this)[0]
            return lambda batch: pc.is_null(batch.column(i))
        raise _Unsupported(t.__name__)

    def _column(self, n: exp.Expr) -> tuple[int, str]:
        """A column's index in the batch and its kind (int, decimal, date, string)."""
        if type(n) is not exp.Column or n.table:
            raise _Unsupported("not a column")
        name = n.name[len(self.prefix) :] if self.prefix and n.name.startswith(self.prefix) else n.name
        i, declared = self.schema.get_field_index(name), self.declared.get(name, "")
        if i < 0:
            raise _Unsupported(name)
        t = self.schema.field(i).type  # stored as declared (a date or decimal may come as JSON text: not here)
        if declared == "int" and pa.types.is_integer(t):
            return i, "int"
        if declared.startswith("decimal(") and pa.types.is_decimal128(t):
            return i, "decimal"
        if declared == "date" and pa.types.is_date32(t):
            return i, "date"
        if declared == "string" and (pa.types.is_string(t) or pa.types.is_large_string(t)):
            return i, "string"
        raise _Unsupported(f"{name}: {declared} stored as {t}")

    def _constant(self, n: exp.Expr, kind: str, col: int) -> Any:
        """A part without columns, evaluated by the row-wise code: an Arrow scalar for column ``col`` (``kind``)."""
        if any(n.find_all(exp.Column)) or any(n.find_all(exp.Subquery, exp.Select)):
            raise _Unsupported("not a constant")
        try:
            v = node_fn(n)({})
        except Exception as e:  # evaluated row-wise instead, where its error is raised as it should be
            raise _Unsupported("a constant that fails") from e
        if v is None or type(v) is bool:
            raise _Unsupported("NULL or bool")
        if kind == "int" and type(v) is int and -(2**63) <= v < 2**63:
            return pa.scalar(v, pa.int64())
        if kind == "decimal" and type(v) in (int, decimal.Decimal):
            return _decimal(decimal.Decimal(v), self.schema.field(col).type)
        if kind == "date" and type(v) is datetime.date:
            return pa.scalar(v, pa.date32())
        if kind == "string" and type(v) is str:
            return pa.scalar(v, pa.string())
        raise _Unsupported(f"a {type(v).__name__} against a {kind} column")

    def _compare(self, op: str, left: exp.Expr, right: exp.Expr) -> Mask:
        left, right = _bare(left), _bare(right)
        if type(left) is not exp.Column:
            if type(right) is not exp.Column:
                raise _Unsupported("no column")
            left, right, op = right, left, _SWAPPED.get(op, op)
        i, kind = self._column(left)
        fn = getattr(pc, op)
        if type(right) is exp.Column:
            j, other = self._column(right)
            if other != kind or self.schema.field(i).type != self.schema.field(j).type:
                raise _Unsupported("columns of two types")
            return lambda batch: fn(batch.column(i), batch.column(j))
        c = self._constant(right, kind, i)
        return lambda batch: fn(batch.column(i), c)

    def _in(self, left: exp.Expr, items: list[exp.Expr]) -> Mask:
        i, kind = self._column(_bare(left))
        if kind == "decimal":  # decimals of other scales in one value set: not written
            raise _Unsupported("IN of a decimal")
        values = [self._constant(e, kind, i) for e in items]
        value_set = pa.array([v.as_py() for v in values], type=self.schema.field(i).type)

        def member(batch: pa.RecordBatch) -> pa.Array:
            col = batch.column(i)
            found = pc.is_in(col, value_set=value_set)
            return pc.if_else(pc.is_null(col), pa.scalar(None, pa.bool_()), found) if col.null_count else found

        return member


def _decimal(v: decimal.Decimal, col: pa.Decimal128Type) -> pa.Scalar:
    """``v`` as a decimal scalar that Arrow compares with a ``col`` column exactly: both fit one
    decimal128 (38 digits) with the larger scale and the more integer digits, else not compiled.

        >>> _decimal(decimal.Decimal("0.5"), pa.decimal128(15, 2)).type
        Decimal128Type(decimal128(2, 1))
        >>> _decimal(decimal.Decimal("1e-30"), pa.decimal128(15, 2))
        Traceback (most recent call last):
        ...
        cbp.views.arrowwhere._Unsupported: a decimal wider than 38 digits with the column's
    """
    if not v.is_finite():
        raise _Unsupported("not a finite decimal")
    _, digits, exponent = v.as_tuple()
    assert isinstance(exponent, int)
    scale, whole = max(0, -exponent), max(1, len(digits) + exponent)
    if max(scale, col.scale) + max(whole, col.precision - col.scale) > 38:
        raise _Unsupported("a decimal wider than 38 digits with the column's")
    return pa.scalar(v, pa.decimal128(max(whole, 1) + scale, scale))


def _bare(n: exp.Expr) -> exp.Expr:
    while type(n) is exp.Paren:
        n = n.this
    return n
