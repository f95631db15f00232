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

import decimal
import heapq
from collections.abc import Iterable, Iterator
from typing import Any

from .exprs import ev, parse_expr
from .joinrun import SKIP, _added, _consolidated
from .vtypes import avg_value, conform, decode_key, sum_type

__all__ = ["window", "topk", "order_key"]

_EXACT = decimal.Context(prec=200)


class _Desc:
    """A value ordered the other way round (a DESC term of an ORDER BY)."""

    __slots__ = ("v",)

    def __init__(self, v: Any) -> None:
        self.v = v

    def __lt__(self, other: _Desc) -> bool:
        return bool(other.v < self.v)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and bool(self.v == other.v)

    def __hash__(self) -> int:
        return hash(self.v)


def order_key(row: dict[str, Any], order: list[tuple[str, bool, bool]] | list[list[Any]]) -> tuple[Any, ...]:
    """The sort key of ``row`` under ORDER BY terms ``[expression SQL, descending, NULLs first]``."""
    out: list[tuple[Any, ...]] = []
    for e, desc, nulls_first in order:
        v = ev(parse_expr(e), row)
        if v is None:
            out.append((0,) if nulls_first else (2,))
        else:
            out.append((1, _Desc(v) if desc else v))
    return tuple(out)


def _tie(values: list[Any]) -> tuple[Any, ...]:
    """The order of rows that tie on the ORDER BY: their columns in order, NULLs first."""
    return tuple((v is not None, v) for v in values)


def _rows(plan: dict[str, Any], ms: dict[str, int]) -> list[dict[str, Any]]:
    """A key's multiset of rows expanded (a row of multiplicity n is n rows), in the tie order."""
    decoded = []
    for text, n in ms.items():
        values = decode_key(text, plan["ftypes"])
        decoded.append((_tie(values), dict(zip(plan["fields"], values)), n))
    decoded.sort(key=lambda d: d[0])
    return [dict(row) for _, row, n in decoded for _ in range(n)]


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
        v = ev(self.arg, row) if self.arg is not None else None
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


def _values(win: dict[str, Any], rows: list[dict[str, Any]], view: str) -> list[Any]:
    """One window function's value for each of ``rows`` (a partition sorted by the window's ORDER BY)."""
    fn, n = win["fn"], len(rows)
    keys = [order_key(r, win["order"]) for r in rows]
    if fn in ("row_number", "rank", "dense_rank"):
        out, start, dense = [], 0, 0
        for i in range(n):
            if i == 0 or keys[i] != keys[i - 1]:
                start, dense = i, dense + 1
            out.append(i + 1 if fn == "row_number" else start + 1 if fn == "rank" else dense)
        return out
    if fn in ("lag", "lead"):
        step = -win["offset"] if fn == "lag" else win["offset"]
        arg = parse_expr(win["arg"])
        default = parse_expr(win["default"]) if win.get("default") else None
        got = [
            ev(arg, rows[i + step]) if 0 <= i + step < n else (ev(default, rows[i]) if default is not None else None)
            for i in range(n)
        ]
        return [conform(v, win["at"], view) for v in got]
    acc = _Acc(win, view)
    if win["frame"] == "all":
        for r in rows:
            acc.add(r)
        return [acc.value()] * n
    out, i = [], 0
    while i < n:
        j = _peers(keys, i) if win["frame"] == "range" else i + 1
        for r in rows[i:j]:
            acc.add(r)
        out += [acc.value()] * (j - i)
        i = j
    return out


def _partition(plan: dict[str, Any], ms: dict[str, int]) -> dict[tuple[Any, ...], int]:
    """The view's rows of one partition (each distinct output row with its multiplicity)."""
    rows = _rows(plan, ms)
    for i, win in enumerate(plan["wins"]):
        ranked = sorted(rows, key=lambda r: order_key(r, win["order"])) if win["order"] else rows
        for r, v in zip(ranked, _values(win, ranked, plan["out"]), strict=True):
            r[f"w__{i}"] = v
    out: dict[tuple[Any, ...], int] = {}
    exprs = [(parse_expr(e), plan["types"].get(name)) for name, e in plan["cols"]]
    for r in rows:
        vals = tuple(conform(ev(e, r), t, plan["out"]) for e, t in exprs)
        out[vals] = out.get(vals, 0) + 1
    return out


def _top(plan: dict[str, Any], ms: dict[str, int]) -> dict[tuple[Any, ...], int]:
    """The first ``limit`` rows of a relation's multiset under the ORDER BY (each with its count)."""
    k = plan["limit"]
    cands = []
    for text, n in ms.items():
        values = decode_key(text, plan["ftypes"])
        row = dict(zip(plan["fields"], values))
        key = (order_key(row, plan["order"]), _tie(values))
        cands += [(key, i, tuple(values)) for i in range(min(n, k))]
    out: dict[tuple[Any, ...], int] = {}
    for _, _, vals in heapq.nsmallest(k, cands, key=lambda c: (c[0], c[1])):
        out[vals] = out.get(vals, 0) + 1
    return out


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
    compute = _top if top else _partition
    before, after = compute(plan, old), compute(plan, new)
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


def window(key: str, state: Iterator[dict[str, Any]], rows: Iterable[dict[str, Any]], out: Any) -> None:
    """Window functions of one partition (key: the PARTITION BY values' JSON text).

    Example: ``row_number() OVER (PARTITION BY g ORDER BY x DESC) AS rn`` with partition ``["a"]``
    holding x = 5 and x = 3 and a record x = 4 (``_diff`` 1): the row of x = 3 goes from rn 2 to
    rn 3 (retracted and written), x = 4 is written with rn 2, x = 5 is not emitted.
    """
    _step(key, state, rows, out, top=False)


def topk(key: str, state: Iterator[dict[str, Any]], rows: Iterable[dict[str, Any]], out: Any) -> None:
    """``ORDER BY ... LIMIT k`` of a whole view (one key): its current first k rows.

    Example: ``ORDER BY x DESC LIMIT 2`` over x = 5, 4, 3: deleting the row of 5 retracts it and
    writes the row of 3.
    """
    _step(key, state, rows, out, top=True)
