"""A state partition's index (:mod:`cbp.engine.task.bipindex`): key hash -> (data file, row group).

On disk an index is a whole file, or a *delta*: the entries an epoch dropped and added, on top of
the index file it updated (its parent). In memory it is a *base* (sorted entries, never changed
once made: a whole file read page by page through the worker's bounded page cache, or arrays,
:mod:`cbp.engine.task.indexpages`), the positions of the base entries dropped since, and a small sorted
*overlay* of the entries added since. So an epoch's update costs what the epoch changed, not the
partition's live keys, and so does a worker that opens the index: it reads the deltas and the
pages its lookups need. The overlay is folded into a new whole file, streamed page by page, when
the deltas grow (more than :data:`MAX_DELTAS`, or more entries than :data:`DELTA_FRACTION` of the
live keys or than an eighth of the worker's index budget); :attr:`PartitionIndex.h` (every entry
in memory) is for tests and tools.

File ids are positions in :attr:`PartitionIndex.files`. An update never renumbers them (a file no
entry points to any more stays, as a hole), so a delta's ids mean the same in the task that wrote
it and in a worker that replays it on the parent read from disk; a whole write renumbers them.
Deltas written before that rule (no ``cbp.ids: kept`` in their metadata) renumbered after each
update, and are replayed that way.

    >>> idx = PartitionIndex(np.array([5, 9]), np.array([0, 0], np.int32), np.array([0, 1], np.int32), ["a.parquet"])
    >>> new = idx.updated(np.array([9]), np.array([0], np.int32), np.array([1], np.int32),
    ...                   np.array([7, 9]), "b.parquet", np.array([0, 0], np.int32))
    >>> new.h.tolist(), new.f.tolist(), new.live_keys, idx.live_keys
    ([5, 7, 9], [0, 1, 1], 3, 2)
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Iterator
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...storage import Home
from . import indexpages
from .indexpages import CACHE, PAGE, ArrayBase, PagedBase, in_ranges, index_budget, matches, write_whole

__all__ = ["PartitionIndex", "MAX_DELTAS", "DELTA_FRACTION", "sorted_unique", "delta_cap"]

#: Most index deltas a partition's index file may stand on before it is written whole again.
MAX_DELTAS = 8
#: ... and most entries those deltas may hold together, as a fraction of the live keys: a load
#: from files reads at most 1.5x the whole index, and writing it whole (every 8 epochs at most,
#: as compaction does) stays rare. At 0.125, a 100k-record epoch rewrote the index of 1M keys
#: every epoch and of 3M every third (3M: median epoch 0.42 s against 0.36 s at 0.5).
DELTA_FRACTION = 0.5
#: An epoch whose delta would hold more entries than this many pages writes the index whole: it
#: wrote at least as many state rows, which cost more than streaming the index, and a worker that
#: opens the index later does not replay a delta that big (a build of 1M rows into one key).
BIG_DELTA_PAGES = 8
#: Bytes an entry of the deltas takes in memory (overlay: hash, file id, row group; or a dead position).
ENTRY_BYTES = 16

_I64 = np.empty(0, np.int64)
_I32 = np.empty(0, np.int32)

Delta = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, str | None, np.ndarray]
Base: TypeAlias = ArrayBase | PagedBase


def delta_cap() -> int:
    """Most entries an index's deltas may hold: an eighth of the worker's index budget."""
    return max(CACHE.budget // 8 // ENTRY_BYTES, 1024)


class PartitionIndex:
    """Key hash -> (file id, row group) of every live key of a state partition (see the module).

    ``chain`` lists the index files this index was loaded from or saved to (the whole file first),
    which its next save may still need; ``chain_entries`` counts the entries of its deltas.
    """

    def __init__(self, h: np.ndarray, f: np.ndarray, g: np.ndarray, files: list[str]) -> None:
        self._base: Base = ArrayBase(h, f, g)  # sorted by hash
        self._dead = _I64  # sorted positions of the base entries dropped since
        self._oh, self._of, self._og = _I64, _I32, _I32  # the overlay, sorted by hash
        self.files: list[str] = files
        self._counts: np.ndarray | None = None  # live entries per file id (made when first needed)
        self.chain: list[str] = []
        self.chain_entries = 0

    @classmethod
    def empty(cls) -> PartitionIndex:
        return cls(_I64, _I32, _I32, [])

    @classmethod
    def _on(cls, base: Base, files: list[str]) -> PartitionIndex:
        idx = cls(_I64, _I32, _I32, files)
        idx._base = base
        return idx

    @property
    def live_keys(self) -> int:
        return int(self._base.size - self._dead.size + self._oh.size)

    @property
    def live_files(self) -> int:
        """Data files some entry points to."""
        return int(np.count_nonzero(self._file_counts()))

    @property
    def nbytes(self) -> int:
        """Bytes this index holds in memory besides the worker's cached pages."""
        return int(self._base.nbytes + self._dead.nbytes + self._oh.nbytes + self._of.nbytes + self._og.nbytes)

    # ------------------------------------------------------------------ every entry
    @property
    def h(self) -> np.ndarray:
        """Every live entry's hash, sorted (with :attr:`f` and :attr:`g`, aligned): the whole
        index in memory (tests, tools; the engine streams it, :meth:`chunks`)."""
        return self._all()[0]

    @property
    def f(self) -> np.ndarray:
        return self._all()[1]

    @property
    def g(self) -> np.ndarray:
        return self._all()[2]

    def _all(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if isinstance(self._base, ArrayBase) and not self._dead.size and not self._oh.size:
            return self._base.arrays()
        parts = list(self.chunks(PAGE))
        if not parts:
            return _I64, _I32, _I32
        return tuple(np.concatenate([p[k] for p in parts]) for k in range(3))  # type: ignore[return-value]

    def chunks(self, size: int = PAGE) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Every live entry in hash order, about ``size`` at a time, a hash's entries in one chunk;
        holds a page of the base and the overlay."""
        held: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        n = 0
        for h, f, g in self._merged():
            held.append((h, f, g))
            n += h.size
            if n < size:
                continue
            h, f, g = (np.concatenate([c[k] for c in held]) for k in range(3))
            a = 0
            while h.size - a >= size:
                b = int(np.searchsorted(h, h[a + size - 1], side="right"))  # the chunk ends after a hash's last entry
                if b >= h.size:  # ... which may be in the next page
                    break
                yield h[a:b], f[a:b], g[a:b]
                a = b
            held, n = [(h[a:], f[a:], g[a:])], h.size - a
        if n:
            yield tuple(np.concatenate([c[k] for c in held]) for k in range(3))  # type: ignore[misc]

    def _merged(self) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """The live entries page by page: a base page without its dropped entries, with the overlay's
        entries up to the page's last hash merged in (hash order; the base's entries first)."""
        oh, of, og = self._oh, self._of, self._og
        o = 0
        for start, h, f, g in self._base.pages():
            if not h.size:
                continue
            if self._dead.size:
                a, b = np.searchsorted(self._dead, [start, start + h.size])
                d = self._dead[a:b] - start
                if d.size:
                    keep = np.ones(h.size, bool)
                    keep[d] = False
                    h, f, g = h[keep], f[keep], g[keep]
            top = int(np.searchsorted(oh, h[-1], side="right")) if h.size else o
            if top > o:
                at = np.searchsorted(h, oh[o:top], side="right")
                h, f, g = np.insert(h, at, oh[o:top]), np.insert(f, at, of[o:top]), np.insert(g, at, og[o:top])
                o = top
            yield h, f, g
        if o < oh.size:
            yield oh[o:], of[o:], og[o:]

    def _file_counts(self) -> np.ndarray:
        if self._counts is None:
            counts = self._base.counts(len(self.files))
            if self._dead.size:
                counts -= np.bincount(self._base.f_at(self._dead), minlength=len(self.files))[: len(self.files)]
            self._counts = counts + np.bincount(self._of, minlength=len(self.files))[: len(self.files)]
        return self._counts

    # ------------------------------------------------------------------ lookups and updates
    def entries(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The live entries (hash, file id, row group) whose hash is in ``hashes`` (sorted, unique)."""
        pos, h, f, g = self._base.lookup(hashes)
        if self._dead.size and pos.size:
            keep = ~_sorted_contains(self._dead, pos)
            h, f, g = h[keep], f[keep], g[keep]
        if not self._oh.size:
            return h, f, g
        op = matches(self._oh, hashes)
        return np.concatenate([h, self._oh[op]]), np.concatenate([f, self._of[op]]), np.concatenate([g, self._og[op]])

    def hashes_between(self, lo: int | np.ndarray, hi: int | np.ndarray) -> np.ndarray:
        """The distinct live hashes ``h`` with ``lo <= h <= hi``, sorted (the rows of one key of a
        keyed stage, :mod:`cbp.engine.task.keyedstate`), or in any of the ranges ``[lo[i], hi[i]]``
        (arrays, sorted and disjoint: the rows of several keys); costs the entries in the ranges.

            >>> index = PartitionIndex(np.array([1, 5, 5, 9]), np.zeros(4, np.int32), np.zeros(4, np.int32), ["a"])
            >>> index.hashes_between(2, 9).tolist(), index.hashes_between(np.array([0, 6]), np.array([2, 9])).tolist()
            ([5, 9], [1, 9])
        """
        lo_a, hi_a = np.atleast_1d(np.asarray(lo, np.int64)), np.atleast_1d(np.asarray(hi, np.int64))
        pos, h = self._base.between(lo_a, hi_a)
        if self._dead.size and pos.size:
            h = h[~_sorted_contains(self._dead, pos)]
        if self._oh.size:
            o = self._oh[in_ranges(self._oh, lo_a, hi_a)]
            h = np.sort(np.concatenate([h, o])) if o.size else h
        return sorted_unique(h)

    def updated(
        self,
        drop_h: np.ndarray,
        drop_f: np.ndarray,
        drop_g: np.ndarray,
        add_h: np.ndarray,
        add_file: str | None,
        add_g: np.ndarray,
    ) -> PartitionIndex:
        """A new index without the entries ``(drop_h, drop_f, drop_g)`` (every live entry equal to
        one), plus new entries in ``add_file``. Costs what changed: this index is not copied."""
        counts = self._file_counts().copy()
        dead, oh, of, og = self._dead, self._oh, self._of, self._og
        if drop_h.size:
            pos, bh, bf, bg = self._base.lookup(sorted_unique(np.sort(drop_h)))
            hit = _equal_entries(bh, bf, bg, drop_h, drop_f, drop_g)
            fresh = ~_sorted_contains(dead, pos[hit]) if dead.size else np.ones(hit.size, bool)
            new_dead = pos[hit][fresh]
            np.subtract.at(counts, bf[hit][fresh], 1)
            dead = np.union1d(dead, new_dead)
            if oh.size:
                gone = _equal_entries(oh, of, og, drop_h, drop_f, drop_g)
                np.subtract.at(counts, of[gone], 1)
                keep = np.ones(oh.size, bool)
                keep[gone] = False
                oh, of, og = oh[keep], of[keep], og[keep]
        files = list(self.files)
        if add_file is not None and add_h.size:  # merge the (small, sorted) new entries into the overlay
            files.append(add_file)
            counts = np.append(counts, add_h.size)
            order = np.argsort(add_h, kind="stable")
            ah, af, ag = (
                add_h.astype(np.int64)[order],
                np.full(add_h.size, len(files) - 1, np.int32),
                add_g.astype(np.int32)[order],
            )
            if oh.size:
                at = np.searchsorted(oh, ah, side="right")
                oh, of, og = np.insert(oh, at, ah), np.insert(of, at, af), np.insert(og, at, ag)
            else:
                oh, of, og = ah, af, ag
        new = PartitionIndex._on(self._base, files)
        new._dead, new._oh, new._of, new._og, new._counts = dead, oh, of, og, counts
        return new

    def without_files(self, names: set[str]) -> PartitionIndex:
        """The index without the entries that point into the data files ``names`` (the base read
        page by page: holds the positions of those entries)."""
        gone = np.array([i for i, n in enumerate(self.files) if n in names], dtype=np.int32)
        dead = [self._dead]
        for start, _, f, _ in self._base.pages():
            hit = np.flatnonzero(np.isin(f, gone))
            if hit.size:
                dead.append(hit + start)
        keep = ~np.isin(self._of, gone)
        new = PartitionIndex._on(self._base, list(self.files))
        new._dead = np.unique(np.concatenate(dead))
        new._oh, new._of, new._og = self._oh[keep], self._of[keep], self._og[keep]
        counts = self._file_counts().copy()
        counts[gone] = 0
        new._counts = counts
        return new

    def hashes_in_files(self, ids: list[int]) -> np.ndarray:
        """The live hashes whose entries point into the files with these ids (streamed), sorted."""
        out = [h[np.isin(f, ids)] for h, f, _ in self.chunks()]
        return np.concatenate(out) if out else _I64

    def renumbered(self) -> PartitionIndex:
        """The same entries as arrays alone, with only the files some entry points to (ids renumbered)."""
        h, f, g = self._all()
        used = np.flatnonzero(np.bincount(f, minlength=len(self.files)))
        if used.size == len(self.files):
            return PartitionIndex(h, f, g, list(self.files))
        remap = np.full(max(len(self.files), 1), -1, np.int32)
        remap[used] = np.arange(used.size, dtype=np.int32)
        return PartitionIndex(h, remap[f], g, [self.files[i] for i in used])

    # ------------------------------------------------------------------ files
    @classmethod
    def load(cls, home: Home, rel: str, budget_mb: float | None = None) -> PartitionIndex:
        """Open an index file and the deltas it stands on (a worker keeps the last few indexes it
        opened or wrote, within its index budget, ``budget_mb``: they never change)."""
        index_budget(budget_mb)
        key = f"{home.location}|{rel}"
        hit = _INDEXES.get(key)
        if hit is not None:
            _INDEXES.move_to_end(key)
            return hit
        idx = cls._read(home, rel)
        _remember_index(key, idx)
        return idx

    @classmethod
    def _read(cls, home: Home, rel: str) -> PartitionIndex:
        """Open an index file: a whole one by its footer (its pages are read as lookups need them),
        a delta whole, on top of the files it stands on (those are not kept: only the newest is used)."""
        pf = pq.ParquetFile(home.fs.open_input_file(home.path(rel)))
        meta = pf.schema_arrow.metadata or {}
        if meta.get(b"cbp.kind") == b"delta":
            t = pf.read()
            parent = _INDEXES.get(f"{home.location}|{meta[b'cbp.parent'].decode()}") or cls._read(
                home, meta[b"cbp.parent"].decode()
            )
            drop = t.filter(pc.equal(t["add"], False))
            add = t.filter(t["add"])
            idx = parent.updated(
                drop["h"].to_numpy(),
                drop["f"].to_numpy().astype(np.int32),
                drop["g"].to_numpy().astype(np.int32),
                add["h"].to_numpy(),
                meta[b"cbp.add_file"].decode() if add.num_rows else None,
                add["g"].to_numpy().astype(np.int32),
            )
            if meta.get(b"cbp.ids") != b"kept":  # written by cbp before 2026-11-26, whose updates renumbered the files
                idx = idx.renumbered()
            idx.chain, idx.chain_entries = parent.chain + [rel], parent.chain_entries + t.num_rows
            return idx
        files = json.loads(meta[b"cbp.files"])
        base = PagedBase.open(home, rel, pf)
        if base is None:  # no page statistics: read it whole
            t = pf.read()
            idx = cls(t["h"].to_numpy(), t["f"].to_numpy().astype(np.int32), t["g"].to_numpy().astype(np.int32), files)
        else:
            idx = cls._on(base, files)
        idx.chain = [rel]
        return idx

    def save(self, home: Home, rel: str, parent: PartitionIndex | None = None, delta: Delta | None = None) -> list[str]:
        """Write this index as file ``rel``: as ``delta`` (the :meth:`updated` arguments that made it
        from ``parent``) when ``parent`` came from a file and its deltas are few and small, else
        whole (renumbered, streamed page by page: the index kept for the next epoch reads that
        file). Returns the index files no longer needed once this one replaces ``parent``'s."""
        old = list(parent.chain) if parent is not None else []
        entries = 0 if delta is None else int(delta[0].size + delta[3].size)
        kept: PartitionIndex = self
        if (
            delta is not None
            and parent is not None
            and parent.chain
            and len(parent.chain) <= MAX_DELTAS
            and entries <= BIG_DELTA_PAGES * indexpages.PAGE
            and parent.chain_entries + entries <= min(max(self.live_keys, 1) * DELTA_FRACTION, delta_cap())
        ):
            dh, df, dg, ah, add_file, ag = delta
            t = pa.table(
                {
                    "add": pa.array(np.r_[np.zeros(dh.size, bool), np.ones(ah.size, bool)]),
                    "h": pa.array(np.r_[dh, ah].astype(np.int64)),
                    "f": pa.array(np.r_[df, np.zeros(ah.size, np.int32)].astype(np.int32)),
                    "g": pa.array(np.r_[dg, ag].astype(np.int32)),
                }
            )
            t = t.replace_schema_metadata(
                {
                    "cbp.kind": "delta",
                    "cbp.parent": parent.chain[-1],
                    "cbp.add_file": add_file or "",
                    "cbp.hash": "spark-xxhash64",
                    "cbp.ids": "kept",
                }
            )
            self.chain, self.chain_entries = parent.chain + [rel], parent.chain_entries + entries
            path = home.path(rel)
            home.make_parent(path)
            pq.write_table(
                t, path, filesystem=home.fs, compression={"h": "none", "f": "zstd", "g": "zstd"}, use_dictionary=False
            )
            garbage: list[str] = []
        else:
            counts = self._file_counts()
            used = np.flatnonzero(counts > 0)
            remap = np.full(max(len(self.files), 1), -1, np.int32)
            remap[used] = np.arange(used.size, dtype=np.int32)
            files = [self.files[i] for i in used]
            base = write_whole(home, rel, ((h, remap[f], g) for h, f, g in self.chunks()), files, counts[used])
            kept = PartitionIndex._on(base, files)
            kept.chain = [rel]
            garbage = old
        _remember_index(f"{home.location}|{rel}", kept)
        return garbage


_INDEXES: OrderedDict[str, PartitionIndex] = OrderedDict()


def _remember_index(key: str, idx: PartitionIndex, keep: int = 16) -> None:
    """Keep ``idx`` (at most ``keep`` indexes, holding at most half the worker's index budget
    in memory besides their pages: the oldest go first, the newest stays)."""
    _INDEXES[key] = idx
    _INDEXES.move_to_end(key)
    cache = CACHE
    held = sum(i.nbytes for i in _INDEXES.values())
    while len(_INDEXES) > 1 and (len(_INDEXES) > keep or held > cache.budget // 2):
        _, old = _INDEXES.popitem(last=False)
        held -= old.nbytes
    cache.held = held
    cache.trim()


_matches = matches  # (the name cbp.engine.task.bipindex re-exports)


def sorted_unique(a: np.ndarray) -> np.ndarray:
    """``np.unique(a)``, without a sort when ``a`` is sorted already (hashes usually come in
    order); ``a`` itself when it is sorted and unique.

        >>> sorted_unique(np.array([1, 1, 4, 9, 9])).tolist(), sorted_unique(np.array([3, 1, 3])).tolist()
        ([1, 4, 9], [1, 3])
    """
    if a.size < 2:
        return a
    if not np.all(a[1:] >= a[:-1]):
        return np.unique(a)
    step = a[1:] != a[:-1]
    return a if step.all() else a[np.r_[True, step]]


def _sorted_contains(sorted_a: np.ndarray, x: np.ndarray) -> np.ndarray:
    """For each element of ``x``, whether it is in ``sorted_a`` (sorted)."""
    i = np.searchsorted(sorted_a, x)
    found: np.ndarray = (i < sorted_a.size) & (sorted_a[np.minimum(i, sorted_a.size - 1)] == x)
    return found


def _equal_entries(
    h: np.ndarray, f: np.ndarray, g: np.ndarray, dh: np.ndarray, df: np.ndarray, dg: np.ndarray
) -> np.ndarray:
    """Positions (sorted) of the entries of the sorted arrays ``(h, f, g)`` equal to one of the
    triples ``(dh, df, dg)``."""
    cand = _matches(h, sorted_unique(dh))
    if not cand.size:
        return cand
    fg = (f[cand].astype(np.int64) << 32) | g[cand].astype(np.int64)
    dfg = (df.astype(np.int64) << 32) | dg.astype(np.int64)
    order = np.lexsort((dfg, dh))
    sdh, sdfg = dh[order], dfg[order]
    hc = h[cand]
    lo = np.searchsorted(sdh, hc, side="left")
    hi = np.searchsorted(sdh, hc, side="right")
    ok = np.zeros(cand.size, bool)
    single = (hi - lo) == 1  # the usual case; a hash is dropped several times only on a collision
    ok[single] = sdfg[lo[single]] == fg[single]
    for i in np.flatnonzero((hi - lo) > 1):
        ok[i] = bool(np.any(sdfg[lo[i] : hi[i]] == fg[i]))
    return cand[ok]
