"""BIPtable-style state partitions (paper 001 §4.5.2): append-only data files plus an index.

A stateful stage's state is a Delta table partitioned by ``_part``. Each epoch, the task that
owns partition ``p`` appends one data file holding only the keys whose state changed (sorted by
key hash, in small row groups; a key whose state was dropped gets a tombstone row). Beside it,
the task writes the partition's *index*: for every live key, its 64-bit hash and the location
(data file, row group) of its latest records, as a delta (the entries the epoch dropped and
added) on top of the index file it updated, or whole once the deltas grow (:class:`PartitionIndex`).
An inner stage looks up the hashes of the keys that received input and reads just those row
groups; it never scans the partition.

When a partition's live keys are spread over too many files, the task compacts them into one
file sorted by hash (the superseded files leave the Delta table in the same commit).

    >>> idx = PartitionIndex.empty()
    >>> idx.live_keys
    0
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ... import settings
from ...storage import Home
from .partindex import _INDEXES, MAX_DELTAS, PartitionIndex, _matches, sorted_unique  # noqa: F401  (re-exported)

__all__ = [
    "PartitionIndex",
    "StateReader",
    "ChunkRows",
    "SCAN_FRACTION",
    "scan_fraction",
    "choose_reads",
    "StateMeta",
    "STATE_META",
    "STATE_CODEC",
    "STATE_DICTIONARY",
    "read_partition_rows",
    "latest_rows",
]

#: Columns every state row carries before the user's state fields.
STATE_META = pa.schema(
    [
        pa.field("_key", pa.string()),  # the grouping key, JSON-encoded
        pa.field("_h", pa.int64()),  # xxhash64 of _key (Spark's), the index key
        pa.field("_epoch", pa.int64()),  # the stage epoch that wrote the row
        pa.field("_alive", pa.bool_()),  # False: tombstone, the key's state was dropped
    ]
)
#: Rows per row group of state files: the unit an inner stage reads (a lookup of one key decodes its
#: row group whole: pyarrow reads no part of a row group). At 8192, TPC-H Q18's RF2 at SF 1 decoded
#: 829 rows for each row asked in its join's state; 1024 makes that 191 (``docs/benchmarks/tpch.md``,
#: tenth round). Files written with another size keep theirs: a reader takes each file's row groups
#: from its footer, and the index names row groups, not rows.
ROW_GROUP = 1024
#: The codec of state files: LZ4 (Parquet's LZ4_RAW, which Spark's and delta-rs's readers read).
#: State files are read back in every epoch that looks keys up (or scanned whole), so their
#: decoding is on an epoch's path: a join state file of TPC-H Q18 (143,175 rows) decodes in 37 ms
#: against 71 ms with zstd and is written in 82 ms against 130 ms, for 5.9 MB against 3.9 MB
#: (``docs/benchmarks/tpch.md``, seventh round). Outputs and landed increments stay zstd, and so do a
#: state file's dictionary-encoded columns (:func:`cbp.engine.task.sinks.column_codecs`: Spark's reader).
STATE_CODEC = "lz4"
#: Whether state files dictionary-encode columns. They do not: a dictionary-encoded column is zstd
#: (:func:`cbp.engine.task.sinks.column_codecs`, Spark's reader and LZ4 dictionary pages), and each
#: zstd column chunk costs ~50 us to set up when read, which small row groups pay in every lookup:
#: a lookup of 375 keys in a Q18 join state file of 1.8 million rows in row groups of 1024 decoded in
#: 206 ms with dictionaries and 85 ms without, the whole file in 883 and 355 ms; 61 MB against 39 MB
#: (``docs/benchmarks/tpch.md``, tenth round).
STATE_DICTIONARY = False

#: Fraction of a state file's row groups above which a task reads the file whole (a scan, then
#: kept in the worker's cache) instead of reading just the row groups it needs through the index.
#: The rule is applied as a task's lookups stream by: once the row groups a task has read from a
#: file plus those its next chunk of keys needs exceed ``SCAN_FRACTION`` of the file's row groups,
#: the file is read whole. 0 always scans; any value above 1 never does (always the index).
#: ``CBP_STATE_SCAN_FRACTION`` (read each time a :class:`StateReader` is made, i.e. in the Spark
#: workers, which get the environment the driver had when Spark started) or the pipeline tuning
#: option ``state_scan_fraction`` (which reaches the tasks in their plan) overrides it.
#:
#: The value comes from ``bench/biptable.py`` (paper 001 §5.2, Fig. 13), which measures the
#: break-even *fraction of keys touched* f* between reading through the index and scanning, for
#: uniformly random keys (500k keys, one file of 62 row groups, the state reader alone, minimum of
#: 15 runs): the index was faster up to f = 0.02% of the keys (1.6x), as fast at 0.03%, and the
#: scan 5-10% faster from 0.05% on, so f* = 0.030%. The rule counts *row groups*: with R rows per
#: row group and keys touched uniformly at random, touching a fraction f of the keys touches about
#: 1 - (1 - f)^R of the row groups, so the threshold is 1 - (1 - f*)^R = 1 - (1 - 0.0003)^8192
#: = 0.91 (the same timings against the row groups the index actually read: 0.92; a second,
#: noisier run of 11: f* = 0.047%, 0.98), rounded down to 0.9. The paper's BIPtables broke even
#: at ~60% of the keys because they read single records; here the unit is a row group.
#: With R = 8192 (:data:`ROW_GROUP` then), any f above ~0.1% touches every row group: the index only
#: saves reads for increments of a few keys per row group, and beyond that it costs 5-10% more
#: than a scan (and a scan also fills the worker's cache for later epochs). With R = 1024 (and no
#: dictionaries) the threshold was kept, not measured again: on a Q18 join state file, reading
#: a fraction of the row groups cost about that fraction of reading the file whole.
#:
#: The driver therefore decides per partition and epoch before the tasks start
#: (:func:`choose_reads`, from the increment's records and the partition's stored rows): scan or
#: index, nothing in between. The mid-stream rule only applies when the user sets the fraction
#: (tuning or environment); it can then read a file up to (1 + SCAN_FRACTION) times (the
#: benchmark's "rule" column: 111-116 row groups of 62 for f >= 5%, 30-60% slower than either side).
SCAN_FRACTION = 0.9
CACHE_MB = 2048.0  # a worker's state file cache when neither the pipeline nor CBP_STATE_CACHE_MB says


#: A state file larger than the worker's state cache is read row group by row group even when a
#: task needs most of it (so a task holds at most about the cache's budget), unless it is
#: smaller than this (bytes decoded): small files are read whole, cached or not.
WHOLE_FLOOR = 64 * 2**20


def choose_reads(
    new_records: int, partitions: int, stored_rows: int, row_group: int = ROW_GROUP, threshold: float | None = None
) -> float:
    """The driver's choice for one state partition and epoch, from the measured break-even: the
    ``scan_fraction`` its task gets, 0.0 (read the files whole) or 2.0 (only the row groups the
    keys need), so the task does not switch mid-stream and read a file twice.

    The task's share of the new records over the partition's stored rows estimates the fraction f
    of keys touched, and 1 - (1 - f)^R the fraction of row groups; above ``threshold`` (default
    :data:`SCAN_FRACTION`) a scan is cheaper (``bench/biptable.py``).

        >>> choose_reads(100_000, 4, 250_000), choose_reads(20, 4, 25_000), choose_reads(5, 1, 0)
        (0.0, 2.0, 2.0)
    """
    if stored_rows <= 0 or new_records <= 0:
        return 2.0
    f = min(1.0, new_records / max(partitions, 1) / stored_rows)
    groups = 1.0 - (1.0 - f) ** max(row_group, 1)
    return 0.0 if groups >= (SCAN_FRACTION if threshold is None else threshold) else 2.0


def scan_fraction(override: float | None = None) -> float:
    """The scan rule's threshold: ``override`` (a pipeline's ``state_scan_fraction``), else
    ``CBP_STATE_SCAN_FRACTION``, else :data:`SCAN_FRACTION`."""
    if override is not None:
        return float(override)
    env = settings.current().state_scan_fraction
    return SCAN_FRACTION if env is None else env


_scan_fraction = scan_fraction  # StateReader's argument of the same name hides the function


@dataclass
class StateMeta:
    """What a task needs to know about its state partition: the live files and the index file."""

    files: list[dict[str, Any]] = field(default_factory=list)  # add-action dicts (path relative to the table)
    index: str | None = None  # index file, relative to the home


@dataclass
class _CachedFile:
    table: pa.Table
    h: np.ndarray  # the file's _h column (files are sorted by it)
    rg_starts: np.ndarray  # first row of each row group

    @property
    def nbytes(self) -> int:
        return int(self.table.nbytes + self.h.nbytes)

    def take(self, rows: np.ndarray) -> pa.Table:
        """The rows at these positions. A file cached as written (in chunks) is made one chunk at
        its first lookup: ``take`` on many chunks is ~20x slower, and a file is often never looked
        up again before it is compacted away."""
        if self.table.num_rows and self.table.column(0).num_chunks > 1:
            self.table = self.table.combine_chunks()
        return self.table.take(pa.array(rows, pa.int64()))


class _FileCache:
    """Decoded state files kept by a Spark Python worker across epochs (LRU, bounded in bytes).

    State data files never change once written, so a cached copy is never stale. A file is
    cached when a task had to read most of it anyway; later epochs then look their keys up in
    memory (binary search on the sorted key hashes) instead of reading row groups again, which
    is what keeps an inner epoch's cost to the keys it touches when those are spread over the
    whole partition. ``CBP_STATE_CACHE_MB`` sets the budget per worker (0 disables it).
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.used = 0
        self.files: OrderedDict[str, _CachedFile] = OrderedDict()

    def get(self, key: str) -> _CachedFile | None:
        hit = self.files.get(key)
        if hit is not None:
            self.files.move_to_end(key)
        return hit

    def make_room(self, nbytes: int) -> None:
        """Evict the least recently used files until ``nbytes`` more fit the budget: a file about to
        be read whole is decoded beside the cache, so the cache and that file together stay within
        the budget (plus, for a moment, the file's copy made one chunk); ``put`` uses it too."""
        if nbytes > self.budget:
            return
        while self.files and self.used + nbytes > self.budget:
            _, old = self.files.popitem(last=False)
            self.used -= old.nbytes

    def put(self, key: str, entry: _CachedFile) -> None:
        if entry.nbytes > self.budget:
            return
        self.make_room(entry.nbytes)
        self.files[key] = entry
        self.used += entry.nbytes


_CACHE: _FileCache | None = None


def _file_cache(budget_mb: float | None) -> _FileCache:
    global _CACHE
    if budget_mb is None:
        budget_mb = settings.current().state_cache_mb or CACHE_MB
    if _CACHE is None:
        _CACHE = _FileCache(0)
    _CACHE.budget = int(budget_mb * 2**20)
    return _CACHE


def cache_budget(budget_mb: float | None) -> int:
    """The bytes a worker's state cache may hold (``budget_mb``, else ``CBP_STATE_CACHE_MB``)."""
    return _file_cache(budget_mb).budget


def cache_written(home: Home, path: str, table: pa.Table, row_group: int, budget_mb: float | None) -> None:
    """Keep a state file this worker just wrote (``table``: all its rows, in order, in row groups of
    ``row_group`` rows) in the worker's cache, decoded: the next epoch of this partition, placed
    on the same executor, then finds it there instead of reading it back. The table is kept as
    it came (its chunks are not copied into one)."""
    cache = _file_cache(budget_mb)
    if cache.budget == 0 or table.nbytes > cache.budget:
        return
    cache.put(
        f"{home.location}|{path}",
        _CachedFile(table, table["_h"].to_numpy(), np.arange(0, max(table.num_rows, 1), row_group)),
    )


class ChunkRows:
    """The stored rows of the keys of one input chunk of a keyed stage (read together by
    :meth:`cbp.engine.task.keyedstate.KeyedPartition.lookup`), sorted by row hash, with their file ids
    and row groups; ``tops``: the keys' top 32 hash bits (a key's rows have row hashes
    ``top << 32`` to ``top << 32 | 0xFFFFFFFF``).

        >>> c = ChunkRows(np.array([0]), pa.table({"_h": [7, 3]}), np.array([0, 1]), np.array([2, 3]))
        >>> c.holds(5), c.at(np.array([7]))[0], c.of_key(0)["_h"].to_pylist()
        (True, [{'_h': 7}], [3, 7])
    """

    def __init__(
        self, tops: np.ndarray, rows: pa.Table | None, fids: np.ndarray | None, rgs: np.ndarray | None
    ) -> None:
        self.tops = set(tops.tolist())
        if rows is None or fids is None or rgs is None:
            rows, fids, rgs = pa.table({"_h": pa.array([], pa.int64())}), np.empty(0, np.int32), np.empty(0, np.int32)
        h = rows["_h"].to_numpy()
        order = np.argsort(h, kind="stable")
        self.rows, self.h, self.fids, self.rgs = rows.take(order), h[order], fids[order], rgs[order]

    def holds(self, kh: int) -> bool:
        """Whether the rows of the key with hash (or row hash) ``kh`` are here."""
        return (int(kh) >> 32) in self.tops

    def at(self, hashes: np.ndarray) -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray]:
        """The rows at these row hashes (of one key), as dicts, with their file ids and row groups."""
        pos = _matches(self.h, sorted_unique(np.sort(hashes)))
        return self.rows.take(pos).to_pylist(), self.fids[pos], self.rgs[pos]

    def of_key(self, kh: int) -> pa.Table:
        """Every row in the row hash range of the key with hash ``kh`` (``keyedstate.key_range``)."""
        lo = (int(kh) >> 32) << 32
        hi = lo + 0xFFFFFFFF
        a, b = np.searchsorted(self.h, [lo, hi], side="left")[0], np.searchsorted(self.h, hi, side="right")
        return self.rows.slice(int(a), int(b - a))


class StateReader:
    """Reads the latest state rows of keys through a partition's index, for one task.

    Lookups come in key-hash order (a task's input is sorted by hash, as the files are), chunk
    by chunk: each file is opened once, and the last row group read from each file is kept,
    since the next chunk may need it again; so a task reads every row group it needs once.
    ``files_opened`` and ``row_groups_read`` count what came from disk (not from the worker's
    cache). A file of which a task needs more than a fraction :data:`SCAN_FRACTION` (0.9) of the
    row groups is read whole, once, into the cache (``scan_fraction`` overrides it, see
    :func:`scan_fraction`; with the cache disabled, ``cache_mb`` 0, files are never read whole, nor
    files larger than both the cache and :data:`WHOLE_FLOOR`: a task's memory stays bounded).
    ``cache_lookups`` counts the (file, chunk) reads of state rows, ``cache_hits`` those served
    from the cache (or from a file this task read whole but the cache could not hold).
    """

    def __init__(
        self,
        home: Home,
        table_rel: str,
        index: PartitionIndex,
        cache_mb: float | None = None,
        scan_fraction: float | None = None,
    ) -> None:
        self.home, self.table_rel, self.index = home, table_rel, index
        self.cache = _file_cache(cache_mb)
        self.scan_fraction = _scan_fraction(scan_fraction)
        self._whole: dict[int, _CachedFile] = {}  # files this task read whole (the cache may be too small to keep them)
        self.files_opened = 0
        self.row_groups_read = 0
        self.rows_decoded = 0  # rows of the row groups read from disk (a lookup decodes whole row groups)
        self.cache_lookups = 0  # state files looked up in the worker's cache ...
        self.cache_hits = 0  # ... and found there
        self._open: dict[int, pq.ParquetFile] = {}
        self._sizes: dict[int, tuple[np.ndarray, int]] = {}  # file id -> rows per row group, bytes decoded
        self._done: dict[int, int] = {}  # file id -> row groups read from it by this task
        self._last: dict[int, tuple[int, pa.Table]] = {}  # file id -> its last row group read (number, rows)

    def rows_of(self, hashes: np.ndarray) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        """The latest rows of the keys with these hashes, and, aligned, the file id and row group of each."""
        parts, fids, rgs_out = [], [], []
        if self.index.live_keys:  # (nothing stored yet, a first build: no lookup)
            eh, ef, eg = self.index.entries(sorted_unique(hashes))
            for fid in np.unique(ef):
                sel = ef == fid
                t, rg_col = self._read_keys(int(fid), sorted_unique(eh[sel]), sorted_unique(eg[sel]))
                parts.append(t)
                rgs_out.append(rg_col)
                fids.append(np.full(t.num_rows, fid, np.int32))
        if not parts:
            return pa.Table.from_batches([], schema=STATE_META), np.empty(0, np.int32), np.empty(0, np.int32)
        return pa.concat_tables(parts, promote_options="default"), np.concatenate(fids), np.concatenate(rgs_out)

    def scan(self, chunk: int = ROW_GROUP) -> Iterator[tuple[pa.Table, np.ndarray, np.ndarray]]:
        """:meth:`rows_of` for every live key, in hash order, about ``chunk`` index entries at a time."""
        for h, _, _ in self.index.chunks(chunk):  # a hash's entries in one chunk; the index streamed
            yield self.rows_of(h)

    def _file(self, fid: int, path: str) -> tuple[pq.ParquetFile, np.ndarray, int]:
        """The open file, its rows per row group and its bytes decoded (read from its footer once)."""
        pf = self._open.get(fid)
        if pf is None:
            pf = self._open[fid] = pq.ParquetFile(self.home.fs.open_input_file(path))
            self.files_opened += 1
            md = pf.metadata
            counts = np.array([md.row_group(i).num_rows for i in range(md.num_row_groups)], dtype=np.int64)
            self._sizes[fid] = (counts, _decoded_bytes(pf))
        return pf, *self._sizes[fid]

    def _read_keys(self, fid: int, hashes: np.ndarray, rgs: np.ndarray) -> tuple[pa.Table, np.ndarray]:
        """Rows of one state file whose ``_h`` is in ``hashes`` (sorted), and the row group of each."""
        path = self.home.path(f"{self.table_rel}/{self.index.files[fid]}")
        key = f"{self.home.location}|{path}"
        entry = self.cache.get(key) or self._whole.get(fid)
        self.cache_lookups += 1
        if entry is not None:
            self.cache_hits += 1
        else:
            pf, counts, decoded = self._file(fid, path)
            n_rg = counts.size
            if (
                self.cache.budget == 0
                or self._done.get(fid, 0) + rgs.size <= self.scan_fraction * n_rg  # few row groups: read just those
                or decoded > max(self.cache.budget, WHOLE_FLOOR)
            ):  # a file larger than the cache: never held whole
                t, rg_col = self._read_row_groups(fid, pf, rgs, counts)
                mask = pc.is_in(t["_h"], value_set=pa.array(hashes, pa.int64()))
                return t.filter(mask), rg_col[mask.to_numpy(zero_copy_only=False)]
            self.cache.make_room(decoded)
            t = pf.read().combine_chunks()  # most of the file is needed: read it whole, once, and keep it
            self.row_groups_read += n_rg
            self.rows_decoded += t.num_rows
            entry = _CachedFile(t, t["_h"].to_numpy(), np.concatenate([[0], np.cumsum(counts)[:-1]]))
            self.cache.put(key, entry)
            self._whole[fid] = entry
        rows = _matches(entry.h, hashes)
        rg = np.searchsorted(entry.rg_starts, rows, side="right") - 1
        return entry.take(rows), rg.astype(np.int32)

    def _read_row_groups(
        self, fid: int, pf: pq.ParquetFile, rgs: np.ndarray, counts: np.ndarray
    ) -> tuple[pa.Table, np.ndarray]:
        last = self._last.get(fid)
        kept = last is not None and last[0] in rgs
        todo = rgs[rgs != last[0]] if kept else rgs  # type: ignore[index]
        tables, rg_cols = [], []
        if kept:
            tables.append(last[1])  # type: ignore[index]
            rg_cols.append(np.full(last[1].num_rows, last[0], np.int32))  # type: ignore[index]
        if todo.size:
            t = pf.read_row_groups([int(r) for r in todo])
            self.row_groups_read += int(todo.size)
            self.rows_decoded += t.num_rows
            self._done[fid] = self._done.get(fid, 0) + int(todo.size)
            top = int(todo[-1])
            self._last[fid] = (top, t.slice(t.num_rows - int(counts[top])).take(np.arange(int(counts[top]))))  # a copy
            tables.append(t)
            rg_cols.append(np.repeat(todo, counts[todo]).astype(np.int32))
        return pa.concat_tables(tables), np.concatenate(rg_cols)


def _decoded_bytes(pf: pq.ParquetFile) -> int:
    """About the bytes a state file takes decoded (its row groups' uncompressed sizes)."""
    md = pf.metadata
    return sum(md.row_group(i).total_byte_size for i in range(md.num_row_groups))


def read_partition_rows(home: Home, table_rel: str, files: list[dict[str, Any]]) -> pa.Table:
    """All rows of a partition's data files, whatever their age (for rebuilding an index)."""
    tables = [pq.read_table(home.path(f"{table_rel}/{f['path']}"), filesystem=home.fs) for f in files]
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return pa.Table.from_batches([], schema=STATE_META)
    return pa.concat_tables(tables, promote_options="default")


def latest_rows(rows: pa.Table, keep_tombstones: bool = False) -> pa.Table:
    """Keep, for each key, the rows of its newest epoch; drop tombstones unless asked to keep them.

    Any Delta reader gets a stage's state this way: ``max(_epoch)`` per ``_key`` (per ``_key`` and
    ``_rk`` for keyed rows) where ``_alive``.
    """
    if rows.num_rows == 0:
        return rows
    ident = rows["_key"]
    if "_rk" in rows.column_names:  # keyed rows (cbp.engine.task.keyedstate): a row is (_key, _rk)
        ident = pc.binary_join_element_wise(rows["_key"], pc.fill_null(rows["_rk"], ""), "\x00")
    ids = pa.table({"_id": ident, "_epoch": rows["_epoch"]})
    newest = ids.group_by("_id").aggregate([("_epoch", "max")])
    per_row = pc.take(newest["_epoch_max"], pc.index_in(ident, value_set=newest["_id"]))
    mask = pc.equal(rows["_epoch"], per_row)
    return rows.filter(mask if keep_tombstones else pc.and_(mask, rows["_alive"]))
