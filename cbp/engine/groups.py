"""A grouped task's input as key groups, streamed batch by batch.

Spark hands a grouped task its partition's input as Arrow batches of envelopes
(:data:`cbp.engine.task.ENVELOPE` plus ``_h``), sorted by key hash, key and flow. Only one
batch is decoded at a time; a key whose records continue in the next batch is carried over, so
memory holds one batch plus the records of the current key.

    >>> import pyarrow as pa
    >>> b = pa.RecordBatch.from_pydict({"_key": ['"a"', '"a"', '"b"'], "_flow": [0, 1, 0], "_rec": ["1", "2", "3"], "_h": [5, 5, 7]})
    >>> c = pa.RecordBatch.from_pydict({"_key": ['"b"'], "_flow": [0], "_rec": ["4"], "_h": [7]})
    >>> [[(g.key, g.flows) for g in chunk] for chunk in group_chunks([b, c], 2)]
    [[('"a"', [['1'], ['2']])], [('"b"', [['3', '4'], []])]]
"""

from __future__ import annotations

import heapq
import itertools
from typing import Any, Iterable, Iterator, Optional

import pyarrow as pa

__all__ = ["Group", "group_chunks", "with_state_keys"]


class Group:
    """One key's records: the stored JSON texts of each input flow, (black-box mode) of its state,
    and the multicast addresses it is bound to (input index -2, :mod:`cbp.engine.routing`)."""

    __slots__ = ("key", "h", "flows", "state", "bound", "records")

    def __init__(self, key: str, h: int, n_inputs: int) -> None:
        self.key, self.h = key, h
        self.flows: list[list[str]] = [[] for _ in range(n_inputs)]
        self.state: list[str] = []
        self.bound: list[str] = []
        self.records = 0  #: input records (state rows and bindings not counted)

    def add(self, flows: list[int], texts: list[str]) -> None:
        for fl, text in zip(flows, texts):
            if fl >= 0:
                self.flows[fl].append(text)
                self.records += 1
            else:
                (self.state if fl == -1 else self.bound).append(text)


def group_chunks(batches: Iterable[pa.RecordBatch], n_inputs: int) -> Iterator[list[Group]]:
    """The complete key groups of each batch, in input order (a group still open at a batch's end
    is completed with the next batch and comes in its chunk)."""
    carry: Optional[Group] = None
    for b in batches:
        if b.num_rows == 0:
            continue
        keys = b.column("_key").to_pylist()
        flows = b.column("_flow").to_pylist()
        texts = b.column("_rec").to_pylist()
        hashes = b.column("_h").to_pylist()
        del b
        chunk: list[Group] = []
        i, n = 0, len(keys)
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
            g.add(flows[i:j], texts[i:j])
            if j == n:
                carry = g  # its records may go on in the next batch
            else:
                chunk.append(g)
            i = j
        if chunk:
            yield chunk
    if carry is not None:
        yield [carry]


def with_state_keys(groups: Iterable[Group], stored: Iterable[tuple[int, str, Any]], n_inputs: int) -> Iterator[tuple[Group, Any]]:
    """Every key of the input groups and of ``stored`` (hash, key, state) once, with its stored
    state (``None``: none), in hash order; both streams come in hash order."""
    tagged = heapq.merge(((g.h, g) for g in groups), ((h, (k, old)) for h, k, old in stored), key=lambda x: x[0])
    for h, items in itertools.groupby(tagged, key=lambda x: x[0]):
        by_key: dict[str, list[Any]] = {}
        for _, it in items:
            if isinstance(it, Group):
                by_key.setdefault(it.key, [None, None])[0] = it
            else:
                by_key.setdefault(it[0], [None, None])[1] = it[1]
        for k in sorted(by_key):
            g, old = by_key[k]
            yield (g if g is not None else Group(k, h, n_inputs)), old
