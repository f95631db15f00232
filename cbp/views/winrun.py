"""The translators of window-function and top-k stages (:mod:`cbp.views.windows`), signed: they sum
``_diff``. A stage's state is its key's multiset of rows (one state row per distinct row: its JSON
text ``r`` and multiplicity ``n``); when an epoch touches a key, the key's output before and after
the change is computed from the rows, and only the difference is written (rows that did not change
are not emitted). Rows that tie on a window's (or the LIMIT's) ORDER BY are ordered by their columns
in order, NULLs first: deterministic, where Spark's choice among ties is arbitrary.

    >>> rows = [{"x": 3}, {"x": 1}, {"x": 3}]
    >>> keys = [order_key(r, [("x", True, False)]) for r in rows]
    >>> [r["x"] for _, r in sorted(zip(keys, rows), key=lambda p: p[0])]
    [3, 3, 1]
"""

from __future__ import annotations

import bisect
import decimal
import heapq
from collections.abc import Iterable, Iterator
from typing import Any

from sqlglot import exp

from .compiled import node_fn
from .exprs import parse_expr
from .frames import Desc, spans
from .joinrun import SKIP, _added, _consolidated
from .mode import per_plan
from .vtypes import avg_value, conform, decode_key, sum_type

__all__ = ["window", "topk", "order_key"]

_EXACT = decimal.Context(prec=200)


def order_key(row: dict[str, Any], order: list[tuple[str, bool, bool]] | list[list[Any]]) -> tuple[Any, ...]:
    """The sort key of ``row`` under ORDER BY terms ``[expression SQL, descending, NULLs first]``."""
    return _key(row, compiled(order))


def compiled(order: list[tuple[str, bool, bool]] | list[list[Any]]) -> list[tuple[str | None, Any, bool, bool]]:
    """ORDER BY terms parsed once: ``(field name of a plain column or None, expression, desc, NULLs first)``."""
    out = []
    for e, desc, nulls_first in order:
        node = parse_expr(e)
        out.append((node.name if isinstance(node, exp.Column) else None, node, bool(desc), bool(nulls_first)))
    return out


def _key(row: dict[str, Any], terms: list[tuple[str | None, Any, bool, bool]]) -> tuple[Any, ...]:
    out: list[tuple[Any, ...]] = []
    for name, node, desc, nulls_first in terms:
        v = row[name] if name is not None else node_fn(node)(row)
        if v is None:
            out.append((0,) if nulls_first else (2,))
        else:
            out.append((1, Desc(v) if desc else v))
    return tuple(out)


def _tie(values: list[Any]) -> tuple[Any, ...]:
    """The order of rows that tie on the ORDER BY: their columns in order, NULLs first."""
    return tuple((v is not None, v) for v in values)


class _Decoded:
    """The stored rows of a key decoded once per epoch (both the output before and after the change
    read them): per row text its values, its tie order and its sort key under each ORDER BY."""

    def __init__(self, plan: dict[str, Any]) -> None:
        self.plan = plan
        self.rows: dict[str, tuple[dict[str, Any], tuple[Any, ...]]] = {}
        self.keys: dict[tuple[str, int], tuple[Any, ...]] = {}
        self.orders: dict[int, list[tuple[str | None, Any, bool, bool]]] = {}

    def row(self, text: str) -> dict[str, Any]:
        return self._get(text)[0]

    def tie(self, text: str) -> tuple[Any, ...]:
        return self._get(text)[1]

    def _get(self, text: str) -> tuple[dict[str, Any], tuple[Any, ...]]:
        got = self.rows.get(text)
        if got is None:
            values = decode_key(text, self.plan["ftypes"])
            got = self.rows[text] = (dict(zip(self.plan["fields"], values)), _tie(values))
        return got

    def key(self, text: str, i: int, order: list[list[Any]]) -> tuple[Any, ...]:
        """The sort key of row ``text`` under ORDER BY ``order`` (the ``i``-th window's, -1: the LIMIT's)."""
        got = self.keys.get((text, i))
        if got is None:
            terms = self.orders.get(i)
            if terms is None:
                terms = self.orders[i] = compiled(order)
            got = self.keys[(text, i)] = _key(self.row(text), terms)
        return got


class _Acc:
    """A running aggregate (count(*), count, sum, avg, min, max) of a frame."""

    def __init__(self, win: dict[str, Any], view: str) -> None:
        self.fn, self.at, self.view = win["fn"], win.get("at"), view
        self.arg = parse_expr(win["arg"]) if win.get("arg") else None
        self.n = self.c = 0
        self.s: Any = 0
        self.lo: Any = None
        self.hi: Any = None

    def add(self, row: dict[str, Any]) -> None:
        self.n += 1
        v = node_fn(self.arg)(row) if self.arg is not None else None
        if v is None:
            return
        self.c += 1
        if self.fn in ("sum", "avg"):
            self.s = _EXACT.add(self.s, v) if isinstance(v, decimal.Decimal) else self.s + v
        self.lo = v if self.lo is None or v < self.lo else self.lo
        self.hi = v if self.hi is None or v > self.hi else self.hi

    def value(self) -> Any:
        if self.fn == "count_star":
            return self.n
        if self.fn == "count":
            return self.c
        if self.c == 0:
            return None
        if self.fn in ("min", "max"):
            return self.lo if self.fn == "min" else self.hi
        if self.fn == "sum":
            return conform(self.s, sum_type(str(self.at)), self.view)
        return avg_value(self.s, self.c, str(self.at), self.view)


def _peers(keys: list[tuple[Any, ...]], i: int) -> int:
    """The end (exclusive) of the run of rows tying with row ``i`` on the ORDER BY."""
    j = i + 1
    while j < len(keys) and keys[j] == keys[i]:
        j += 1
    return j


def _ranks(fn: str, keys: list[tuple[Any, ...]], buckets: int | None) -> list[Any]:
    """row_number, rank, dense_rank, percent_rank ((rank - 1) / (n - 1)), cume_dist (the share of rows up
    to the row's last peer) and ntile (n buckets, the first n % buckets of them one row larger)."""
    n = len(keys)
    out: list[Any] = []
    start = dense = end = 0
    for i in range(n):
        if i == 0 or keys[i] != keys[i - 1]:
            start, dense, end = i, dense + 1, _peers(keys, i)
        if fn == "row_number":
            out.append(i + 1)
        elif fn == "rank":
            out.append(start + 1)
        elif fn == "dense_rank":
            out.append(dense)
        elif fn == "percent_rank":
            out.append(start / (n - 1) if n > 1 else 0.0)
        elif fn == "cume_dist":
            out.append(end / n)
        else:
            size, big = divmod(n, buckets or 1)
            edge = big * (size + 1)  # the rows in the larger buckets
            out.append(i // (size + 1) + 1 if i < edge else big + (i - edge) // size + 1)
    return out


def _sliding(frame: str, n: int, i: int) -> tuple[int, int]:
    """Row ``i``'s sliding ROWS frame ``rows:<lo>:<hi>`` as ``[start, end)`` over ``n`` rows (may be empty).

    >>> _sliding("rows:-2:0", 5, 1), _sliding("rows:1:u", 5, 4)
    ((0, 2), (5, 5))
    """
    _, lo, hi = frame.split(":")
    start = 0 if lo == "u" else min(max(i + int(lo), 0), n)
    end = n if hi == "u" else min(max(i + int(hi) + 1, 0), n)
    return start, max(start, end)


def _spans(win: dict[str, Any], keys: list[tuple[Any, ...]]) -> list[tuple[int, int]]:
    """Each row's frame as ``[start, end)`` (rows sorted by the window's ORDER BY, ``keys`` their sort keys)."""
    frame, n = win["frame"], len(keys)
    if frame.startswith("range:"):
        return spans(frame, keys, bool(win["order"][0][1]) if win["order"] else False)
    if frame.startswith("rows:"):
        return [_sliding(frame, n, i) for i in range(n)]
    if frame == "all":
        return [(0, n)] * n
    if frame == "rows":
        return [(0, i + 1) for i in range(n)]
    out: list[tuple[int, int]] = []
    i = 0
    while i < n:  # "range": up to the last peer
        j = _peers(keys, i)
        out += [(0, j)] * (j - i)
        i = j
    return out


def _picked(win: dict[str, Any], rows: list[dict[str, Any]], frames: list[tuple[int, int]], view: str) -> list[Any]:
    """first_value, last_value, nth_value: the value at the frame's first, last or n-th row (IGNORE NULLS:
    among the rows whose value is not NULL); NULL when the frame has no such row."""
    arg = node_fn(parse_expr(win["arg"]))
    values = [arg(r) for r in rows]
    at = [i for i, v in enumerate(values) if v is not None] if win.get("ignore") else list(range(len(rows)))
    out = []
    for start, end in frames:
        lo, hi = bisect.bisect_left(at, start), bisect.bisect_left(at, end)  # at[lo:hi]: the frame's candidates
        k = lo if win["fn"] == "first_value" else hi - 1 if win["fn"] == "last_value" else lo + win["nth"] - 1
        out.append(conform(values[at[k]], win["at"], view) if lo <= k < hi else None)
    return out


def _shifted(win: dict[str, Any], rows: list[dict[str, Any]], view: str) -> list[Any]:
    """lag and lead: the value ``offset`` rows before or after (IGNORE NULLS: ``offset`` rows whose value
    is not NULL), else the default (evaluated on the current row)."""
    n, step = len(rows), -win["offset"] if win["fn"] == "lag" else win["offset"]
    arg = node_fn(parse_expr(win["arg"]))
    default = node_fn(parse_expr(win["default"])) if win.get("default") else None
    values = [arg(r) for r in rows]
    at = [i for i, v in enumerate(values) if v is not None] if win.get("ignore") and step else list(range(n))
    out = []
    for i in range(n):
        if step < 0:  # the -step-th candidate before row i
            k = bisect.bisect_left(at, i) + step
        else:  # the step-th candidate after row i (step 0: the row itself)
            k = bisect.bisect_right(at, i) + step - 1 if step else i
        hit = 0 <= k < len(at)
        out.append(conform(values[at[k]] if hit else default(rows[i]) if default else None, win["at"], view))
    return out


def _aggregated(win: dict[str, Any], rows: list[dict[str, Any]], keys: list[tuple[Any, ...]], view: str) -> list[Any]:
    """An aggregate over each row's frame: accumulated along the partition for frames that start at its
    first row and end at the row or its last peer; computed afresh per frame for the others (as Spark's
    sliding frames recompute their buffer)."""
    n = len(rows)
    acc = _Acc(win, view)
    if win["frame"] == "all":
        for r in rows:
            acc.add(r)
        return [acc.value()] * n
    if win["frame"] in ("range", "rows"):
        out, i = [], 0
        while i < n:
            j = _peers(keys, i) if win["frame"] == "range" else i + 1
            for r in rows[i:j]:
                acc.add(r)
            out += [acc.value()] * (j - i)
            i = j
        return out
    out = []
    for start, end in _spans(win, keys):
        acc = _Acc(win, view)
        for r in rows[start:end]:
            acc.add(r)
        out.append(acc.value())
    return out


def _values(win: dict[str, Any], rows: list[dict[str, Any]], keys: list[tuple[Any, ...]], view: str) -> list[Any]:
    """One window function's value for each of ``rows`` (a partition sorted by the window's ORDER BY,
    ``keys`` their sort keys)."""
    fn = win["fn"]
    if fn in ("row_number", "rank", "dense_rank", "percent_rank", "cume_dist", "ntile"):
        return _ranks(fn, keys, win.get("buckets"))
    if fn in ("lag", "lead"):
        return _shifted(win, rows, view)
    if fn in ("first_value", "last_value", "nth_value"):
        return _picked(win, rows, _spans(win, keys), view)
    return _aggregated(win, rows, keys, view)


def _partition(plan: dict[str, Any], ms: dict[str, int], rows_of: _Decoded) -> dict[tuple[Any, ...], int]:
    """The view's rows of one partition (each distinct output row with its multiplicity)."""
    texts = [t for t in sorted(ms, key=rows_of.tie) for _ in range(ms[t])]  # in the tie order
    rows = [dict(rows_of.row(t)) for t in texts]
    for i, win in enumerate(plan["wins"]):
        keys = [rows_of.key(t, i, win["order"]) for t in texts]
        at = sorted(range(len(rows)), key=keys.__getitem__)  # stable: ties stay in the tie order
        ranked = [rows[j] for j in at]
        for r, v in zip(ranked, _values(win, ranked, [keys[j] for j in at], plan["out"]), strict=True):
            r[f"w__{i}"] = v
    out: dict[tuple[Any, ...], int] = {}
    exprs = [(node_fn(parse_expr(e)), plan["types"].get(name)) for name, e in plan["cols"]]
    names = [name for name, _ in plan["cols"]]
    keep = node_fn(parse_expr(plan["keep"])) if plan.get("keep") else None  # a filter of the output rows (on a rank)
    for r in rows:
        vals = tuple(conform(e(r), t, plan["out"]) for e, t in exprs)
        if keep is None or keep(dict(zip(names, vals))) is True:
            out[vals] = out.get(vals, 0) + 1
    return out


def _top(plan: dict[str, Any], ms: dict[str, int], rows_of: _Decoded) -> list[str]:
    """The first ``limit`` rows of a relation's multiset under the ORDER BY, in order (a row's text once
    per copy)."""
    k = plan["limit"]
    cands = [
        ((rows_of.key(text, -1, plan["order"]), rows_of.tie(text)), i, text)
        for text, n in ms.items()
        for i in range(min(n, k))
    ]
    return [text for _, _, text in heapq.nsmallest(k, cands, key=lambda c: (c[0], c[1]))]


def _top_change(
    plan: dict[str, Any], old: dict[str, int], new: dict[str, int], delta: dict[str, int], rows_of: _Decoded
) -> tuple[dict[tuple[Any, ...], int], dict[tuple[Any, ...], int]]:
    """The first k rows before and after: after, from the first k before and the rows added, unless a
    row of the first k lost a copy (then from every row)."""
    before = _top(plan, old, rows_of)
    if all(d > 0 or t not in before for t, d in delta.items()):
        near = set(before) | {t for t, d in delta.items() if d > 0}
        after = _top(plan, {t: new[t] for t in near if new.get(t)}, rows_of)
    else:
        after = _top(plan, new, rows_of)

    def values(top: list[str]) -> dict[tuple[Any, ...], int]:
        out: dict[tuple[Any, ...], int] = {}
        for t in top[plan.get("offset", 0) :]:  # OFFSET n: the first n of the first limit rows left out
            vals = tuple(rows_of.row(t).values())
            out[vals] = out.get(vals, 0) + 1
        return out

    return values(before), values(after)


def _step(key: str, state: Iterator[dict[str, Any]], rows: Iterable[dict[str, Any]], out: Any, top: bool) -> None:
    """One key of a window or top-k stage: the stored rows updated by the records' ``_diff``, the key's
    output recomputed before and after, the difference written."""
    if key == SKIP:
        return
    plan = out.params["cbp_view"]
    delta = _consolidated(rows, plan["fields"])
    if not delta:
        return
    old = {row["r"]: row["n"] for row in state}
    new = _added(old, delta, plan, key)
    rows_of = _Decoded(plan)
    if top:
        before, after = _top_change(plan, old, new, delta, rows_of)
    else:
        before, after = _partition(plan, old, rows_of), _partition(plan, new, rows_of)
    for text in delta:
        if new.get(text):
            out.state.write({"r": text, "n": new[text]})
        else:
            out.state.delete(text)
    names = plan["fields"] if top else [n for n, _ in plan["cols"]]
    w = getattr(out, plan["out"])
    for vals in set(before) | set(after):
        d = after.get(vals, 0) - before.get(vals, 0)
        if d:
            w.write(dict(zip(names, vals)) | {"_diff": d})


@per_plan
def window(key: str, state: Iterator[dict[str, Any]], rows: Iterable[dict[str, Any]], out: Any) -> None:
    """Window functions of one partition (key: the PARTITION BY values' JSON text).

    Example: ``row_number() OVER (PARTITION BY g ORDER BY x DESC) AS rn`` with partition ``["a"]``
    holding x = 5 and x = 3 and a record x = 4 (``_diff`` 1): the row of x = 3 goes from rn 2 to
    rn 3 (retracted and written), x = 4 is written with rn 2, x = 5 is not emitted.
    """
    _step(key, state, rows, out, top=False)


@per_plan
def topk(key: str, state: Iterator[dict[str, Any]], rows: Iterable[dict[str, Any]], out: Any) -> None:
    """``ORDER BY ... LIMIT k`` of a whole view (one key): its current first k rows.

    Example: ``ORDER BY x DESC LIMIT 2`` over x = 5, 4, 3: deleting the row of 5 retracts it and
    writes the row of 3.
    """
    _step(key, state, rows, out, top=True)
