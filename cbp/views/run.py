"""The translators of the stages views compile to (:mod:`cbp.views.plan`), each signed: it sums
``_diff`` and writes signed records, so a view's consolidated contents follow its inputs' (DBSP's
rules: a projection, filter or UNION ALL is linear and keeps no state; a join keeps both inputs'
rows by join key and emits ``dA ⋈ B + A ⋈ dB + dA ⋈ dB``, outer, semi and anti joins too,
:mod:`cbp.views.joinrun`; a GROUP BY keeps each group's count and
sums, or for MIN, MAX and count(DISTINCT) the multiset of values, and emits the retraction of a
group's old row and its new row; SELECT DISTINCT is a GROUP BY of its columns).

A stage's plan is its ``params['cbp_view']``; expressions travel as Spark SQL text.

    >>> RouteKey(["g"], "n > 0", "", [], False)({"g": "a", "n": 1})
    '["a"]'
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from .arrowwhere import batch_where
from .compiled import conformer, expr_fn
from .joinrun import SKIP, join
from .mode import ansi, int_result, per_plan
from .vtypes import avg_value, conform, decode_key, key_text, sum_type
from .winrun import topk, window

__all__ = ["RouteKey", "SKIP", "linear", "group", "write_group", "join", "window", "topk", "unrouted"]


class RouteKey:
    """The RouteBy of a generated stage's input: the JSON text of the key expressions' values
    (:data:`SKIP` when ``where`` is not true, or, with ``skip_null``, a key value is NULL). cbp's own
    code: a small epoch routes by it in the driver (:mod:`cbp.engine.driver.smallepoch`).

    ``reads``: the input's fields the stage reads (None: all). Records equal in them are one record
    to the stage, so the engine consolidates an epoch's records by them before routing
    (:func:`cbp.engine.task.signed.consolidated_by`): an update of a field no view reads cancels
    there, before any key or state is touched."""

    driver_safe = True

    def __init__(
        self,
        exprs: list[str],
        where: str | None,
        prefix: str,
        casts: list[str | None],
        skip_null: bool,
        reads: list[str] | None = None,
    ) -> None:
        self.exprs, self.where, self.prefix, self.casts, self.skip_null = exprs, where, prefix, casts, skip_null
        self.reads = reads

    def __call__(self, record: dict[str, Any]) -> str:
        if self.where is not None and expr_fn(self.where, self.prefix)(record) is not True:
            return SKIP
        values = [expr_fn(e, self.prefix)(record) for e in self.exprs]
        if self.skip_null and any(v is None for v in values):
            return SKIP
        casts = self.casts or [None] * len(values)  # an int key joined with a float or decimal key ...
        return key_text(values, casts)

    def batch_where(self, batch: pa.RecordBatch, declared: tuple[tuple[str, str], ...]) -> pa.Array | None:
        """The route's WHERE over a batch of stored records, with Arrow (:mod:`cbp.views.arrowwhere`): a
        record it does not mark TRUE is one :meth:`__call__` would route to :data:`SKIP`; None when the
        WHERE is not one Arrow evaluates exactly (or there is none): then every record is routed row-wise.
        ``declared``: (field, scalar type) of the input's fields."""
        return None if self.where is None else batch_where(self.where, self.prefix, batch, declared)

    @property
    def text(self) -> str:
        """How the route reads in a plan: its key expressions (and WHERE)."""
        where = f" where {self.where}" if self.where else ""
        return f"view key ({', '.join(self.exprs)}){where}"


def unrouted(record: dict[str, Any]) -> Any:
    """The placeholder RouteBy of a generated stage in its raw YAML shape; the compiled spec routes
    by a :class:`RouteKey` instead (so this is never called)."""
    raise RuntimeError("a view stage's input routed by the placeholder route")


@per_plan
def linear(key: Any, state: Iterator[dict[str, Any]], *inputs: Iterable[dict[str, Any]], out: Any) -> None:
    """Projection, WHERE and UNION ALL: each record's image under every branch reading its input, with
    the record's ``_diff``.

    Example: plan branch ``{"input": 0, "where": "n > 1", "cols": [["m", "n * 2"]]}`` turns
    ``{"n": 3, "_diff": -1}`` into ``{"m": 6, "_diff": -1}`` and drops ``{"n": 1, "_diff": 1}``.
    """
    plan = out.params["cbp_view"]
    w = getattr(out, plan["out"])
    for i, rows in enumerate(inputs):
        branches = [_Branch(b, plan) for b in plan["branches"] if b["input"] == i]
        for r in rows:
            for b in branches:
                if b.where is not None and b.where(r) is not True:
                    continue
                rec = {n: to(f(r)) for n, f, to in b.cols}
                rec["_diff"] = r["_diff"]
                w.write(rec)


class _Branch:
    """A branch of a linear plan compiled: its WHERE and per column (name, expression, conform to its type)."""

    def __init__(self, b: dict[str, Any], plan: dict[str, Any]) -> None:
        self.where = expr_fn(b["where"]) if b["where"] is not None else None
        self.cols = [(n, expr_fn(e), conformer(plan["types"].get(n), plan["out"])) for n, e in b["cols"]]


#: The aggregates whose state is the multiset of their group's values (DBSP's rule): MIN, MAX and the
#: DISTINCT aggregates (``count(DISTINCT a, b)``'s values are the tuples with no NULL member).
MULTISET = ("min", "max", "count_distinct", "sum_distinct", "avg_distinct")
_EXACT = decimal.Context(prec=200)


def _distinct_total(keys: Iterable[str], at: str) -> Any:
    """The exact sum of a multiset's distinct values (its keys, :func:`key_text` of each value)."""
    total: Any = 0
    for k in keys:
        v = decode_key(k, [at])[0]
        total = _EXACT.add(total, v) if isinstance(v, decimal.Decimal) else total + v
    return total


def _aggregates(plan: dict[str, Any], n: int, c: list[Any], s: list[Any], m: list[Any]) -> dict[str, Any]:
    env: dict[str, Any] = {}
    for i, (fn, _, at) in enumerate(plan["aggs"]):
        if fn == "count_star":
            env[f"a__{i}"] = n
        elif fn == "count":
            env[f"a__{i}"] = c[i]
        elif fn == "count_distinct":
            env[f"a__{i}"] = len(m[i])
        elif c[i] == 0:
            env[f"a__{i}"] = None  # sum, avg, min and max of no values
        elif fn in ("min", "max"):
            values = [decode_key(k, [at])[0] for k in m[i]]
            env[f"a__{i}"] = min(values) if fn == "min" else max(values)
        elif fn == "sum":
            env[f"a__{i}"] = conform(s[i], sum_type(at), plan["out"])
        elif fn == "sum_distinct":
            env[f"a__{i}"] = conform(_distinct_total(m[i], at), sum_type(at), plan["out"])
        elif fn == "avg_distinct":
            env[f"a__{i}"] = avg_value(_distinct_total(m[i], at), len(m[i]), at, plan["out"])
        else:
            env[f"a__{i}"] = avg_value(s[i], c[i], at, plan["out"])
    return env


def _group_row(
    plan: dict[str, Any], groups: list[Any], n: int, c: list[Any], s: list[Any], m: list[Any]
) -> dict[str, Any] | None:
    """The view's row of a group (None: the group is empty or HAVING is not true)."""
    if n == 0 and plan["groups"]:
        return None  # a group that is empty (an aggregate without GROUP BY has its row: count 0, sum NULL)
    env = {f"g__{j}": v for j, v in enumerate(groups)} | _aggregates(plan, n, c, s, m)
    if plan["having"] is not None and expr_fn(plan["having"])(env) is not True:
        return None
    return {name: conform(expr_fn(e)(env), plan["types"].get(name), plan["out"]) for name, e in plan["cols"]}


def _total(v: Any) -> Any:
    """A sum read from a group's state row: a decimal's exact text (non-ANSI) read back as a decimal."""
    if isinstance(v, str):
        return decimal.Decimal(v)
    return v or 0


def _distinct_value(fn: str, v: Any) -> Any:
    """A DISTINCT aggregate's value as Spark tells values apart: ``-0.0`` is ``0.0``."""
    return 0.0 if type(v) is float and v == 0 and fn != "min" and fn != "max" else v


def _arg_fn(arg: str | list[str]) -> Any:
    """An aggregate's argument compiled; of ``count(DISTINCT a, b)`` (a list): the tuple of the values,
    None when one of them is NULL (Spark counts the distinct tuples with no NULL member)."""
    if isinstance(arg, str):
        return expr_fn(arg)
    fns = [expr_fn(a) for a in arg]

    def values(r: dict[str, Any]) -> tuple[Any, ...] | None:
        vs = tuple(f(r) for f in fns)
        return None if any(v is None for v in vs) else vs

    return values


class _Group:
    """One group's state: its row count, and per aggregate the count of non-NULL values and their
    sum or multiset (value key -> count)."""

    def __init__(self, aggs: list[list[Any]], old: dict[str, Any] | None) -> None:
        self.aggs = aggs
        self.args = [(i, fn, _arg_fn(arg)) for i, (fn, arg, _) in enumerate(aggs) if arg is not None]
        k = range(len(aggs))
        self.n: int = old["n"] if old else 0
        self.c: list[int] = [old[f"c{i}"] if old else 0 for i in k]
        self.s: list[Any] = [_total(old.get(f"s{i}")) if old else 0 for i in k]
        self.m: list[dict[str, int]] = [dict(json.loads(old[f"m{i}"])) if old and f"m{i}" in old else {} for i in k]

    def copy(self) -> _Group:
        g = _Group(self.aggs, None)
        g.n, g.c, g.s, g.m = self.n, list(self.c), list(self.s), [dict(x) for x in self.m]
        return g

    def add(self, r: dict[str, Any]) -> None:
        d = r["_diff"]
        self.n += d
        for i, fn, arg in self.args:
            v = arg(r)
            if v is None:
                continue
            self.c[i] += d
            if fn in ("sum", "avg"):
                if not isinstance(v, decimal.Decimal):
                    self.s[i] = self.s[i] + v * d
                elif d == 1:
                    self.s[i] = _EXACT.add(self.s[i], v)
                else:
                    self.s[i] = _EXACT.add(self.s[i], _EXACT.multiply(v, d))
            elif fn in MULTISET:
                k = key_text([_distinct_value(fn, x) for x in (v if type(v) is tuple else [v])])
                left = self.m[i].get(k, 0) + d
                if left:
                    self.m[i][k] = left
                else:
                    self.m[i].pop(k, None)

    def record(self, key: str) -> dict[str, Any]:
        rec: dict[str, Any] = {"k": key, "n": self.n}
        for i, (fn, _, at) in enumerate(self.aggs):
            rec[f"c{i}"] = self.c[i]
            if fn in MULTISET:
                rec[f"m{i}"] = json.dumps(sorted(self.m[i].items()))
            elif fn in ("sum", "avg") and str(at).startswith("decimal(") and not ansi():  # exact text (state: string)
                rec[f"s{i}"] = format(decimal.Decimal(self.s[i]), "f")
            else:  # (an int sum wraps at 64 bits in non-ANSI mode, as Spark's does)
                rec[f"s{i}"] = int_result(self.s[i]) if fn == "sum" and type(self.s[i]) is int else self.s[i]
        return rec

    def row(self, plan: dict[str, Any], groups: list[Any]) -> dict[str, Any] | None:
        return _group_row(plan, groups, self.n, self.c, self.s, self.m)


@per_plan
def group(
    key: str, state: Iterator[dict[str, Any]], rows: Iterable[dict[str, Any]], *ticks: Iterable[Any], out: Any
) -> None:
    """GROUP BY (and SELECT DISTINCT): the group's count and per-aggregate value count and sum (or
    multiset of values: MIN, MAX, count(DISTINCT)), updated by the records' ``_diff``; the old row
    retracted and the new one written when they differ.

    Example: ``SELECT g, count(*) AS n ... GROUP BY g`` with group ``["a"]`` stored at n = 2 and a
    record ``_diff: -1`` writes ``{"g": "a", "n": 2, "_diff": -1}`` and ``{"g": "a", "n": 1}``.
    ``ticks``: the inputs of the joins under an aggregate without GROUP BY, only to run it (not read).
    """
    if key == SKIP:
        return
    plan = out.params["cbp_view"]
    stored = next(state, None)
    old = _Group(plan["aggs"], stored)
    new = old.copy()
    where = expr_fn(plan["where"]) if plan.get("where") is not None else None
    for r in rows:
        if where is None or where(r) is True:
            new.add(r)
    write_group(plan, key, old if stored is not None else None, new, out)


def write_group(plan: dict[str, Any], key: str, old: _Group | None, new: _Group, out: Any) -> None:
    """Group ``key``'s state ``new`` written, and its view row's change from ``old`` (None: the group had
    no state) to ``new``: the old row retracted, the new one written, when they differ.

    Example: ``old`` at count 2 and ``new`` at count 1 of ``SELECT g, count(*) AS n ... GROUP BY g``
    write ``{"g": "a", "n": 2, "_diff": -1}`` and ``{"g": "a", "n": 1}``."""
    if new.n < 0 or any(x < 0 for x in new.c) or any(v < 0 for m in new.m for v in m.values()):
        raise ValueError(f"view '{plan['out']}', group {key}: more rows retracted than there were (count {new.n})")
    groups = decode_key(key, plan["gtypes"])
    after = new.row(plan, groups)  # a decimal overflow fails here
    before = old.row(plan, groups) if old is not None else None  # no state: an aggregate without GROUP BY's
    if new.n or not plan["groups"]:  # row is written at its first epoch
        out.state.write(new.record(key))
    if before != after:
        w = getattr(out, plan["out"])
        weight = plan.get("weight")  # INTERSECT ALL, EXCEPT ALL: the row's multiplicity, a column not written
        if before is not None:
            w.write(before | {"_diff": -before.pop(weight) if weight else -1})
        if after is not None:
            w.write(after | ({"_diff": after.pop(weight)} if weight else {}))
