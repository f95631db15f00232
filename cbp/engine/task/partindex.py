"""A state partition's index (:mod:`cbp.engine.task.bipindex`): key hash -> (data file, row group).

On disk an index is a whole file, or a *delta*: the entries an epoch dropped and added, on top of
the index file it updated (its parent). In memory it is a *base* (sorted arrays, never changed
once made), the positions of the base entries dropped since, and a small sorted *overlay* of the
entries added since. So an epoch's update costs what the epoch changed, not the partition's live
keys: the overlay is folded into the base only when the index is written whole, or when someone
asks for every entry (:attr:`PartitionIndex.h`, a scan or a compaction, which cost that anyway).

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
from typing import Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ...storage import Home

__all__ = ["PartitionIndex", "MAX_DELTAS", "DELTA_FRACTION", "sorted_unique"]

#: Most index deltas a partition's index file may stand on before it is written whole again.
MAX_DELTAS = 8
#: ... and most entries those deltas may hold together, as a fraction of the live keys: a load
#: from files reads at most 1.5x the whole index, and writing it whole (every 8 epochs at most,
#: as compaction does) stays rare. At 0.125, a 100k-record epoch rewrote the index of 1M keys
#: every epoch and of 3M every third (3M: median epoch 0.42 s against 0.36 s at 0.5).
DELTA_FRACTION = 0.5

_I64 = np.empty(0, np.int64)
_I32 = np.empty(0, np.int32)

Delta = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, Optional[str], np.ndarray]


class PartitionIndex:
    """Key hash -> (file id, row group) of every live key of a state partition (see the module).

    ``chain`` lists the index files this index was loaded from or saved to (the whole file first),
    which its next save may still need; ``chain_entries`` counts the entries of its deltas.
    """

    def __init__(self, h: np.ndarray, f: np.ndarray, g: np.ndarray, files: list[str]) -> None:
        self._bh, self._bf, self._bg = h, f, g  # the base, sorted by hash
        self._dead = _I64  # sorted positions of the base entries dropped since
        self._oh, self._of, self._og = _I64, _I32, _I32  # the overlay, sorted by hash
        self.files: list[str] = files
        self._counts: Optional[np.ndarray] = None  # live entries per file id (made when first needed)
        self.chain: list[str] = []
        self.chain_entries = 0

    @classmethod
    def empty(cls) -> "PartitionIndex":
        return cls(_I64, _I32, _I32, [])

    @property
    def live_keys(self) -> int:
        return int(self._bh.size - self._dead.size + self._oh.size)

    @property
    def live_files(self) -> int:
        """Data files some entry points to."""
        return int(np.count_nonzero(self._file_counts()))

    # ------------------------------------------------------------------ every entry (folds the overlay in)
    @property
    def h(self) -> np.ndarray:
        """Every live entry's hash, sorted (with :attr:`f` and :attr:`g`, aligned)."""
        self._fold()
        return self._bh

    @property
    def f(self) -> np.ndarray:
        self._fold()
        return self._bf

    @property
    def g(self) -> np.ndarray:
        self._fold()
        return self._bg

    def _fold(self) -> None:
        """Make the dropped entries and the overlay part of the base (the same entries, the same
        ids: safe on an index other tasks hold)."""
        if not self._dead.size and not self._oh.size:
            return
        keep = np.ones(self._bh.size, bool)
        keep[self._dead] = False
        h, f, g = self._bh[keep], self._bf[keep], self._bg[keep]
        if self._oh.size and not h.size:  # a first build: the overlay is everything
            h, f, g = self._oh, self._of, self._og
        elif self._oh.size:
            at = np.searchsorted(h, self._oh, side="right")
            h, f, g = np.insert(h, at, self._oh), np.insert(f, at, self._of), np.insert(g, at, self._og)
        self._bh, self._bf, self._bg, self._dead, self._oh, self._of, self._og = h, f, g, _I64, _I64, _I32, _I32

    def _file_counts(self) -> np.ndarray:
        if self._counts is None:
            keep = np.ones(self._bh.size, bool)
            keep[self._dead] = False
            self._counts = (np.bincount(self._bf[keep], minlength=len(self.files))
                            + np.bincount(self._of, minlength=len(self.files)))
        return self._counts

    # ------------------------------------------------------------------ lookups and updates
    def entries(self, hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The live entries (hash, file id, row group) whose hash is in ``hashes`` (sorted, unique)."""
        pos = _matches(self._bh, hashes)
        if self._dead.size and pos.size:
            pos = pos[~_sorted_contains(self._dead, pos)]
        if not self._oh.size:
            return self._bh[pos], self._bf[pos], self._bg[pos]
        op = _matches(self._oh, hashes)
        return (np.concatenate([self._bh[pos], self._oh[op]]), np.concatenate([self._bf[pos], self._of[op]]),
                np.concatenate([self._bg[pos], self._og[op]]))

    def hashes_between(self, lo: int, hi: int) -> np.ndarray:
        """The distinct live hashes ``h`` with ``lo <= h <= hi``, sorted (the rows of one key of a
        keyed stage, :mod:`cbp.engine.task.keyedstate`); costs the entries in the range.

            >>> PartitionIndex(np.array([1, 5, 5, 9]), np.zeros(4, np.int32), np.zeros(4, np.int32), ["a"]).hashes_between(2, 9).tolist()
            [5, 9]
        """
        a, b = np.searchsorted(self._bh, [lo, hi], side="left")[0], np.searchsorted(self._bh, hi, side="right")
        pos = np.arange(a, b)
        if self._dead.size and pos.size:
            pos = pos[~_sorted_contains(self._dead, pos)]
        h = self._bh[pos]
        if self._oh.size:
            o = self._oh[np.searchsorted(self._oh, lo, side="left"):np.searchsorted(self._oh, hi, side="right")]
            h = np.sort(np.concatenate([h, o])) if o.size else h
        return sorted_unique(h)

    def updated(self, drop_h: np.ndarray, drop_f: np.ndarray, drop_g: np.ndarray,
                add_h: np.ndarray, add_file: Optional[str], add_g: np.ndarray) -> "PartitionIndex":
        """A new index without the entries ``(drop_h, drop_f, drop_g)`` (every live entry equal to
        one), plus new entries in ``add_file``. Costs what changed: this index is not copied."""
        counts = self._file_counts().copy()
        dead, oh, of, og = self._dead, self._oh, self._of, self._og
        if drop_h.size:
            found = _equal_entries(self._bh, self._bf, self._bg, drop_h, drop_f, drop_g)
            new_dead = np.setdiff1d(found, dead, assume_unique=True)
            np.subtract.at(counts, self._bf[new_dead], 1)
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
            ah, af, ag = add_h.astype(np.int64)[order], np.full(add_h.size, len(files) - 1, np.int32), add_g.astype(np.int32)[order]
            if oh.size:
                at = np.searchsorted(oh, ah, side="right")
                oh, of, og = np.insert(oh, at, ah), np.insert(of, at, af), np.insert(og, at, ag)
            else:
                oh, of, og = ah, af, ag
        new = PartitionIndex(self._bh, self._bf, self._bg, files)
        new._dead, new._oh, new._of, new._og, new._counts = dead, oh, of, og, counts
        return new

    def without_files(self, names: set[str]) -> "PartitionIndex":
        """The index without the entries that point into the data files ``names``."""
        gone = np.array([i for i, n in enumerate(self.files) if n in names], dtype=np.int32)
        keep = ~np.isin(self.f, gone)
        return PartitionIndex(self.h[keep], self.f[keep], self.g[keep], list(self.files))

    def renumbered(self) -> "PartitionIndex":
        """The same entries as a base alone, with only the files some entry points to (ids renumbered)."""
        h, f, g = self.h, self.f, self.g
        used = np.flatnonzero(np.bincount(f, minlength=len(self.files)))
        if used.size == len(self.files):
            return PartitionIndex(h, f, g, list(self.files))
        remap = np.full(max(len(self.files), 1), -1, np.int32)
        remap[used] = np.arange(used.size, dtype=np.int32)
        return PartitionIndex(h, remap[f], g, [self.files[i] for i in used])

    # ------------------------------------------------------------------ files
    @classmethod
    def load(cls, home: Home, rel: str) -> "PartitionIndex":
        """Read an index file, and the files it stands on (a worker keeps the last few indexes it
        read or wrote: they never change)."""
        key = f"{home.location}|{rel}"
        hit = _INDEXES.get(key)
        if hit is not None:
            return hit
        idx = cls._read(home, rel)
        _remember_index(key, idx)
        return idx

    @classmethod
    def _read(cls, home: Home, rel: str) -> "PartitionIndex":
        """Read an index file and the files it stands on (those are not kept: only the newest is used)."""
        t = pq.read_table(home.path(rel), filesystem=home.fs)
        meta = t.schema.metadata
        if meta.get(b"cbp.kind") == b"delta":
            parent = _INDEXES.get(f"{home.location}|{meta[b'cbp.parent'].decode()}") or cls._read(home, meta[b"cbp.parent"].decode())
            drop = t.filter(pc.equal(t["add"], False))
            add = t.filter(t["add"])
            idx = parent.updated(drop["h"].to_numpy(), drop["f"].to_numpy().astype(np.int32), drop["g"].to_numpy().astype(np.int32),
                                 add["h"].to_numpy(), meta[b"cbp.add_file"].decode() if add.num_rows else None,
                                 add["g"].to_numpy().astype(np.int32))
            if meta.get(b"cbp.ids") != b"kept":  # written by cbp before 2026-11-26, whose updates renumbered the files
                idx = idx.renumbered()
            idx.chain, idx.chain_entries = parent.chain + [rel], parent.chain_entries + t.num_rows
        else:
            idx = cls(t["h"].to_numpy(), t["f"].to_numpy().astype(np.int32), t["g"].to_numpy().astype(np.int32),
                      json.loads(meta[b"cbp.files"]))
            idx.chain = [rel]
        return idx

    def save(self, home: Home, rel: str, parent: Optional["PartitionIndex"] = None, delta: Optional[Delta] = None) -> list[str]:
        """Write this index as file ``rel``: as ``delta`` (the :meth:`updated` arguments that made it
        from ``parent``) when ``parent`` came from a file and its deltas are few and small, else
        whole (renumbered: the index kept for the next epoch is the one read back from the file).
        Returns the index files no longer needed once this one replaces ``parent``'s."""
        old = list(parent.chain) if parent is not None else []
        entries = 0 if delta is None else int(delta[0].size + delta[3].size)
        kept: PartitionIndex = self
        if (delta is not None and parent is not None and parent.chain and len(parent.chain) <= MAX_DELTAS
                and parent.chain_entries + entries <= max(self.live_keys, 1) * DELTA_FRACTION):
            dh, df, dg, ah, add_file, ag = delta
            t = pa.table({"add": pa.array(np.r_[np.zeros(dh.size, bool), np.ones(ah.size, bool)]),
                          "h": pa.array(np.r_[dh, ah].astype(np.int64)),
                          "f": pa.array(np.r_[df, np.zeros(ah.size, np.int32)].astype(np.int32)),
                          "g": pa.array(np.r_[dg, ag].astype(np.int32))})
            t = t.replace_schema_metadata({"cbp.kind": "delta", "cbp.parent": parent.chain[-1], "cbp.add_file": add_file or "",
                                           "cbp.hash": "spark-xxhash64", "cbp.ids": "kept"})
            self.chain, self.chain_entries = parent.chain + [rel], parent.chain_entries + entries
            garbage: list[str] = []
        else:
            kept = self.renumbered()
            t = pa.table({"h": kept.h, "f": kept.f, "g": kept.g})
            t = t.replace_schema_metadata({"cbp.files": json.dumps(kept.files), "cbp.hash": "spark-xxhash64"})
            kept.chain = [rel]
            garbage = old
        path = home.path(rel)
        home.make_parent(path)
        pq.write_table(t, path, filesystem=home.fs, compression={"h": "none", "f": "zstd", "g": "zstd"}, use_dictionary=False)
        _remember_index(f"{home.location}|{rel}", kept)
        return garbage


_INDEXES: "OrderedDict[str, PartitionIndex]" = OrderedDict()


def _remember_index(key: str, idx: PartitionIndex, keep: int = 16) -> None:
    _INDEXES[key] = idx
    while len(_INDEXES) > keep:
        _INDEXES.popitem(last=False)


def _matches(sorted_h: np.ndarray, hashes: np.ndarray) -> np.ndarray:
    """Positions in ``sorted_h`` of every element equal to one of ``hashes``."""
    lo = np.searchsorted(sorted_h, hashes, side="left")
    hi = np.searchsorted(sorted_h, hashes, side="right")
    lens = hi - lo
    if not lens.any():
        return np.empty(0, np.int64)
    return np.repeat(lo, lens) + (np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens))


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
    return (i < sorted_a.size) & (sorted_a[np.minimum(i, sorted_a.size - 1)] == x)


def _equal_entries(h: np.ndarray, f: np.ndarray, g: np.ndarray, dh: np.ndarray, df: np.ndarray, dg: np.ndarray) -> np.ndarray:
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
        ok[i] = bool(np.any(sdfg[lo[i]:hi[i]] == fg[i]))
    return cand[ok]
