"""A grouped task's input as key groups, streamed batch by batch.

Spark hands a grouped task its partition's input as Arrow batches of envelopes
(:func:`cbp.engine.task.routing.envelope_schema` without ``_r``, plus ``_h``), sorted by key hash,
key and flow. Only one batch is decoded at a time; a key whose records continue in the next batch
is carried over, so memory holds one batch plus the records of the current key.

A group holds each input flow's records as the translator will take them: decoded records
(dicts in stored form) for per-key translate, Arrow slices of the envelopes' record column for
batch translate (``arrow=True``), which never turns them into Python objects.

    >>> import pyarrow as pa
    >>> rec = pa.struct([("n", pa.int64())])
    >>> b = pa.RecordBatch.from_pydict({"_key": ['"a"', '"a"', '"b"'], "_flow": [0, 1, 0], "_h": [5, 5, 7],
    ...     "_i0": pa.array([{"n": 1}, None, {"n": 3}], rec), "_i1": pa.array([None, {"n": 2}, None], rec)})
    >>> c = pa.RecordBatch.from_pydict({"_key": ['"b"'], "_flow": [0], "_h": [7], "_i0": pa.array([{"n": 4}], rec),
    ...     "_i1": pa.nulls(1, rec)})
    >>> [[(g.key, g.flows) for g in chunk] for chunk in group_chunks([b, c], 2)]
    [[('"a"', [[{'n': 1}], [{'n': 2}]])], [('"b"', [[{'n': 3}, {'n': 4}], []])]]
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Group", "group_chunks", "with_state_keys"]


class Group:
    """One key's records: those of each input flow (decoded dicts, or Arrow slices: see the module),
    (black-box mode) its stored state rows, and the multicast addresses it is bound to (input
    index -2, :mod:`cbp.engine.task.routing`)."""

    __slots__ = ("key", "h", "flows", "state", "bound", "records")

    def __init__(self, key: str, h: int, n_inputs: int) -> None:
        self.key, self.h = key, h
        self.flows: list[list[Any]] = [[] for _ in range(n_inputs)]
        self.state: list[dict[str, Any]] = []
        self.bound: list[str] = []
        self.records = 0  #: input records (state rows and bindings not counted)


class _Batch:
    """One batch of envelopes, its columns decoded as the groups need them."""

    def __init__(self, b: pa.RecordBatch, n_inputs: int, arrow: bool) -> None:
        self.keys = b.column("_key").to_pylist()
        flow = b.column("_flow")
        self.flows = flow.to_pylist()
        self.hashes = b.column("_h").to_pylist()
        self.n = len(self.keys)
        names = b.schema.names
        cols = [b.column(f"_i{k}") for k in range(n_inputs)]
        self.cols = cols if arrow else None
        self.recs: list[Any] = [None] * self.n
        if not arrow:
            if n_inputs == 1:
                self.recs = cols[0].to_pylist()
            else:
                fl = flow.to_numpy(zero_copy_only=False)
                for k, col in enumerate(cols):
                    mask = fl == k
                    if mask.any():
                        for pos, rec in zip(np.flatnonzero(mask).tolist(), col.filter(pa.array(mask)).to_pylist()):
                            self.recs[pos] = rec
        self.texts: list[str | None] = []
        self.states: list[dict[str, Any] | None] = []
        if self.n and pc.min(flow).as_py() < 0:
            self.texts = b.column("_rec").to_pylist()
            if "_st" in names:
                self.states = b.column("_st").to_pylist()

    def add(self, g: Group, i: int, j: int) -> None:
        """Rows ``i`` to ``j`` (one key's, sorted by flow) to ``g``."""
        flows = self.flows
        a = i
        while a < j:
            fl = flows[a]
            b = a + 1
            while b < j and flows[b] == fl:
                b += 1
            if fl >= 0:
                if self.cols is not None:
                    g.flows[fl].append(self.cols[fl].slice(a, b - a))
                else:
                    g.flows[fl].extend(self.recs[a:b])
                g.records += b - a
            elif fl == -1:
                g.state.extend(self.states[a:b])  # type: ignore[arg-type]
            else:
                g.bound.extend(self.texts[a:b])  # type: ignore[arg-type]
            a = b


def group_chunks(batches: Iterable[pa.RecordBatch], n_inputs: int, arrow: bool = False) -> Iterator[list[Group]]:
    """The complete key groups of each batch, in input order (a group still open at a batch's end
    is completed with the next batch and comes in its chunk). ``arrow``: records as Arrow slices."""
    carry: Group | None = None
    for b in batches:
        if b.num_rows == 0:
            continue
        batch = _Batch(b, n_inputs, arrow)
        del b
        keys, hashes = batch.keys, batch.hashes
        chunk: list[Group] = []
        i, n = 0, batch.n
        while i < n:
            k = keys[i]
            j = i + 1
            while j < n and keys[j] == k:
                j += 1
            if carry is not None and carry.key == k:
                g = carry
            else:
                if carry is not None:
                    chunk.append(carry)
                g = Group(k, hashes[i], n_inputs)
            carry = None
            batch.add(g, i, j)
            if j == n:
                carry = g  # its records may go on in the next batch
            else:
                chunk.append(g)
            i = j
        if chunk:
            yield chunk
    if carry is not None:
        yield [carry]


def with_state_keys(
    groups: Iterable[Group], stored: Iterable[tuple[int, str, Any]], n_inputs: int
) -> Iterator[tuple[Group, Any]]:
    """Every key of the input groups and of ``stored`` (hash, key, state) once, with its stored
    state (``None``: none), in hash order; both streams come in hash order."""
    tagged: Iterator[tuple[int, Group | None, str, Any]] = heapq.merge(
        ((g.h, g, g.key, None) for g in groups), ((h, None, k, old) for h, k, old in stored), key=lambda x: x[0]
    )
    for h, items in itertools.groupby(tagged, key=lambda x: x[0]):
        by_key: dict[str, list[Any]] = {}
        for _, group, key, stored_state in items:
            if group is not None:
                by_key.setdefault(key, [None, None])[0] = group
            else:
                by_key.setdefault(key, [None, None])[1] = stored_state
        for k in sorted(by_key):
            g, old = by_key[k]
            yield (g if g is not None else Group(k, h, n_inputs)), old
