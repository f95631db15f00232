"""One task's state partition: reading the old state of keys, writing the changed keys, the index.

A grouped task's input arrives sorted by key hash (then key and flow), as state files are. So
the task looks up old state chunk by chunk as its input streams by (:meth:`DirectPartition.lookup`),
or scans the partition alongside it for outer grouping (:meth:`DirectPartition.scan`), and
writes the new rows of changed keys straight into one state file in hash order
(:class:`StateWriter`), row group by row group. Nothing here holds more than a chunk of rows,
plus the partition's index (a few bytes per key).
"""

from __future__ import annotations

import uuid
from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .bipindex import (
    STATE_CODEC,
    STATE_DICTIONARY,
    STATE_META,
    PartitionIndex,
    StateMeta,
    StateReader,
    cache_budget,
    cache_written,
    latest_rows,
)
from .indexpages import CACHE as INDEX_CACHE
from .partition import OldState, StateRecords
from .sinks import ParquetSink

if TYPE_CHECKING:
    from .groups import Group
    from .plan import TaskPlan

__all__ = ["OldState", "StateWriter", "DirectPartition", "BlackboxPartition"]


def state_schema(plan: TaskPlan) -> pa.Schema:
    """A state file's columns: :data:`STATE_META`, ``_rk`` for keyed rows
    (:mod:`cbp.engine.task.keyedstate`), the state fields."""
    rk = [pa.field("_rk", pa.string())] if plan.stage.row_key else []
    return pa.schema(list(STATE_META) + rk + list(plan.stage.state_schema.arrow))  # type: ignore[union-attr]


def _state_row(key_text: str, h: int, epoch: int, rec: dict[str, Any] | None) -> dict[str, Any]:
    row = {"_key": key_text, "_h": h, "_epoch": epoch, "_alive": rec is not None}
    if rec is not None:
        row.update(rec)
    return row


class StateWriter:
    """A new state file of partition ``p``: rows in key-hash order, one row group per ``plan.row_group``
    rows, written as they come; remembers the hash and row group of every live row (for the index).
    With ``keep``, the finished file also goes into the worker's state cache (:func:`cache_written`)."""

    def __init__(self, plan: TaskPlan, p: int, prefix: str, keep: bool = True) -> None:
        self.plan, self.row_group = plan, plan.row_group
        self.schema = state_schema(plan)
        self.sink = ParquetSink(
            plan.home,
            f"{plan.state_rel}/_part={p}",
            prefix,
            self.schema,
            p,
            plan.row_group,
            STATE_CODEC,
            dictionary=STATE_DICTIONARY,
        )
        self.rows = 0  # rows handed to the sink
        self._dicts: list[dict[str, Any]] = []
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._last_h: int | None = None
        self._h: list[np.ndarray] = []
        self._g: list[np.ndarray] = []
        self._written: list[pa.Table] | None = [] if keep and plan.mode == "direct" else None
        self._written_bytes = 0
        self._budget = cache_budget(plan.cache_mb) if self._written is not None else 0

    def add(self, key_text: str, h: int, rec: dict[str, Any] | None) -> None:
        """One row of a key (``rec`` in storage form), or its tombstone (``rec`` None)."""
        self._dicts.append(_state_row(key_text, h, self.plan.epoch, rec))
        if len(self._dicts) >= self.row_group:
            self._flush_dicts()

    def write_table(self, rows: pa.Table) -> None:
        """Rows already in Arrow form (with the state table's columns), in hash order."""
        self._flush_dicts()
        self._pending.append(rows)
        self._pending_rows += rows.num_rows
        if self._pending_rows >= self.row_group:
            self._emit(final=False)

    def close(self) -> tuple[dict[str, Any] | None, np.ndarray, np.ndarray]:
        """The file's add action (path relative to the state table; ``None``: no rows), and the
        hashes and row groups of its live rows."""
        self._flush_dicts()
        self._emit(final=True)
        add = self.sink.close()
        if add is not None:
            rel = add.pop("rel")
            add["path"] = rel[len(self.plan.state_rel) + 1 :]
            if self._written:
                cache_written(
                    self.plan.home,
                    self.plan.home.path(rel),
                    pa.concat_tables(self._written),
                    self.row_group,
                    self.plan.cache_mb,
                )
        self._written = None
        h = np.concatenate(self._h) if self._h else np.empty(0, np.int64)
        g = np.concatenate(self._g) if self._g else np.empty(0, np.int32)
        return add, h, g

    def abort(self) -> None:
        self.sink.abort()

    def _flush_dicts(self) -> None:
        if self._dicts:
            rows = pa.Table.from_pylist(self._dicts, schema=self.schema)
            self._dicts = []
            self._pending.append(rows)
            self._pending_rows += rows.num_rows
            if self._pending_rows >= self.row_group:
                self._emit(final=False)

    def _emit(self, final: bool) -> None:
        if not self._pending_rows:
            return
        t = pa.concat_tables(self._pending) if len(self._pending) > 1 else self._pending[0]
        n = t.num_rows if final else t.num_rows - t.num_rows % self.row_group
        out, rest = t.slice(0, n), t.slice(n)
        self._pending, self._pending_rows = ([rest] if rest.num_rows else []), rest.num_rows
        h = out["_h"].to_numpy()
        if h.size and ((self._last_h is not None and h[0] < self._last_h) or np.any(h[1:] < h[:-1])):
            raise RuntimeError("cbp: state rows reached the writer out of key-hash order")  # a bug, not the user's
        self._last_h = int(h[-1])
        alive = out["_alive"].to_numpy(zero_copy_only=False)
        self._h.append(h[alive])
        self._g.append(((self.rows + np.arange(n)) // self.row_group)[alive].astype(np.int32))
        self.sink.write(out)
        if self._written is not None:
            self._written.append(out)
            self._written_bytes += out.nbytes
            if self._written_bytes > self._budget:  # the file could not be cached: hold none of it
                self._written = None
        self.rows += n


def _rows_by_key(schema: Any, rows: pa.Table, fids: np.ndarray, rgs: np.ndarray) -> dict[str, tuple[int, OldState]]:
    """Decode state rows per key: its newest epoch's live rows, and every location it has."""
    out: dict[str, tuple[int, OldState]] = {}
    if rows.num_rows == 0:
        return out
    epochs: dict[str, int] = {}
    recs = rows.select(list(schema.fields)).to_pylist()
    cols = (rows["_key"].to_pylist(), rows["_h"].to_pylist(), rows["_epoch"].to_pylist(), rows["_alive"].to_pylist())
    for k, h, e, alive, rec, f, g in zip(*cols, recs, fids.tolist(), rgs.tolist()):
        entry = out.get(k)
        if entry is None or e > epochs[k]:  # the latest rows of a key win (older ones are stale)
            entry = out[k] = (h, OldState([], list(entry[1].locs) if entry else [], []))
            epochs[k] = e
        entry[1].locs.append((f, g))
        if alive and e == epochs[k]:
            entry[1].stored.append(rec)
            entry[1].records.append(schema.decoded_copy(rec))
    return out


class DirectPartition:
    """State partition ``p`` in direct mode: old state through the index, changed keys appended
    (a :class:`cbp.engine.task.partition.StatePartition`)."""

    kind = "direct"
    whole = False

    def __init__(self, plan: TaskPlan, p: int) -> None:
        self.plan, self.p = plan, p
        self.meta = plan.parts.get(p, StateMeta())
        self._pages_read = INDEX_CACHE.reads
        self.index, rebuilt = _open_index(plan, p, self.meta)
        self.rebuilt = rebuilt is not None
        self.adds: list[dict[str, Any]] = [rebuilt] if rebuilt is not None else []
        self.removes: list[dict[str, Any]] = list(self.meta.files) if rebuilt is not None else []
        choice = plan.scan_choice.get(p)  # the driver's choice for this partition and epoch
        self.reader = StateReader(
            plan.home, plan.state_rel, self.index, plan.cache_mb, plan.scan_fraction if choice is None else choice
        )
        self.writer = StateWriter(plan, p, prefix=f"e{plan.epoch:08d}")
        self.keys_read = 0
        self.keys_written = 0
        self._drops: tuple[array[int], array[int], array[int]] = (array("q"), array("i"), array("i"))
        self.index_garbage: list[str] = []  # index files the new index no longer needs (deleted once committed)

    def lookup(self, hashes: np.ndarray) -> dict[str, tuple[int, OldState]]:
        """The stored state of the keys with these hashes (a chunk of the input, in hash order)."""
        if not hashes.size or not self.index.live_keys:
            return {}
        found = _rows_by_key(self.plan.stage.state_schema, *self.reader.rows_of(hashes))
        self.keys_read += len(found)
        return found

    def scan(self) -> Iterator[tuple[int, str, OldState]]:
        """Every stored key with its state, in (hash, key) order (outer grouping)."""
        for rows, fids, rgs in self.reader.scan():
            found = _rows_by_key(self.plan.stage.state_schema, rows, fids, rgs)
            self.keys_read += len(found)
            for k, (h, old) in sorted(found.items(), key=lambda kv: (kv[1][0], kv[0])):
                if old.records:
                    yield h, k, old

    @property
    def rows(self) -> DirectPartition:
        """The partition's rows as Arrow tables (:class:`cbp.engine.task.partition.ArrowRows`)."""
        return self

    def stored(self, g: Group, found: OldState | None) -> OldState | None:
        return found

    def records(self, g: Group, old: OldState | None) -> StateRecords:
        return old.records if old is not None else []

    def update(self, key_text: str, h: int, old: OldState | None, new: StateRecords) -> None:
        """Record a key's new state (written only if it changed; ``[]`` drops it)."""
        schema = self.plan.stage.state_schema
        rows = [schema.to_storage(rec) for rec in new]  # type: ignore[union-attr]
        if rows == (old.stored if old else []):
            return  # unchanged state is not rewritten
        self.drop(h, old)
        for row in rows:
            self.writer.add(key_text, h, row)
        if not new:
            self.writer.add(key_text, h, None)

    def drop(self, h: int, old: OldState | None) -> None:
        """A key whose state changes: its stored rows (if any) leave the index when the epoch commits."""
        self.keys_written += 1
        for f, g in dict.fromkeys(old.locs if old else ()):
            self._drops[0].append(h)
            self._drops[1].append(f)
            self._drops[2].append(g)

    def drop_rows(self, h: np.ndarray, f: np.ndarray, g: np.ndarray) -> None:
        """:meth:`drop` for many stored rows at once: their key hashes, file ids and row groups."""
        if h.size:
            order = np.lexsort((g, f, h))
            h, f, g = h[order], f[order], g[order]
            new = np.r_[True, (h[1:] != h[:-1]) | (f[1:] != f[:-1]) | (g[1:] != g[:-1])]
            self._drops[0].extend(h[new].tolist())
            self._drops[1].extend(f[new].tolist())
            self._drops[2].extend(g[new].tolist())

    def write_rows(self, keys: pa.Array, hashes: pa.Array, rows: pa.Table) -> None:
        """New rows of keys already :meth:`drop`-ped, in storage form, in key-hash order (``_alive``
        false: a tombstone); ``keys`` (texts) and ``hashes`` align with ``rows``."""
        n = rows.num_rows
        cols = {
            "_key": keys,
            "_h": hashes,
            "_epoch": pa.array(np.full(n, self.plan.epoch, np.int64)),
            "_alive": rows.column("_alive"),
        }
        schema = self.writer.schema
        self.writer.write_table(
            pa.table([cols[f.name] if f.name in cols else rows.column(f.name) for f in schema], schema=schema)
        )

    def finish(self, stats: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]], list[dict[str, Any]]]:
        """Close the new file, update (and maybe compact) the index; the index file, adds, removes."""
        plan, p = self.plan, self.p
        add, h, g = self.writer.close()
        index = self.index
        delta: tuple[Any, ...] | None = None
        if add is not None:
            dh, df, dg = (np.array(a, dtype=np.int64 if a.typecode == "q" else np.int32) for a in self._drops)
            index = index.updated(dh, df, dg, h, add["path"], g)
            delta = (dh, df, dg, h, add["path"], g)
            self.adds.append(add)
        adds, removes = self.adds, self.removes
        current = ([] if self.rebuilt else list(self.meta.files)) + adds
        if len(current) > plan.max_files:
            index, replaced, compacted, read = _compact(plan, p, index, current)
            uncommitted = {id(a) for a in adds}
            for a in replaced:
                if id(a) in uncommitted:  # written this epoch, superseded before being committed
                    plan.home.delete_file(f"{plan.state_rel}/{a['path']}")
                else:
                    removes.append(a)
            gone = {id(a) for a in replaced}
            adds = [a for a in adds if id(a) not in gone] + ([compacted] if compacted else [])
            stats["compacted"] = len(replaced)
            stats["compact_row_groups_read"] = read
            delta = None  # compacted: the index is written whole
        index_rel = self.meta.index
        if add is not None or removes:
            index_rel = f"stages/{plan.stage.name}/index/_part={p}/e{plan.epoch:08d}-{uuid.uuid4().hex[:12]}.parquet"
            self.index_garbage = index.save(plan.home, index_rel, None if self.rebuilt else self.index, delta)
        stats.update(
            state_read=self.keys_read,
            state_written=self.keys_written,
            live_keys=index.live_keys,
            files=index.live_files,
            row_groups_read=self.reader.row_groups_read,
            rows_decoded=self.reader.rows_decoded,
            files_opened=self.reader.files_opened,
            cache_hits=self.reader.cache_hits,
            cache_lookups=self.reader.cache_lookups,
            index_pages_read=INDEX_CACHE.reads - self._pages_read,
        )
        return index_rel, adds, removes

    def abort(self) -> None:
        self.writer.abort()


class BlackboxPartition:
    """State partition ``p`` in black-box mode: the state came with the input; all of it is rewritten
    (a :class:`cbp.engine.task.partition.StatePartition`)."""

    kind = "blackbox"
    whole = True

    def __init__(self, plan: TaskPlan, p: int) -> None:
        self.plan = plan
        self.writer = StateWriter(plan, p, prefix=f"e{plan.epoch:08d}-full")
        self.keys_read = 0
        self.keys_written = 0
        self.index_garbage: list[str] = []

    @property
    def rows(self) -> None:
        return None

    def lookup(self, hashes: np.ndarray) -> dict[str, tuple[int, OldState]]:
        return {}  # a key's state comes with its input (Group.state)

    def scan(self) -> Iterator[tuple[int, str, OldState]]:
        return iter(())  # every stored key comes with the input

    def stored(self, g: Group, found: OldState | None) -> OldState | None:
        """The key's rows that came with its input, as stored and decoded."""
        if not g.state:
            return None
        schema = self.plan.stage.state_schema
        return OldState([schema.decoded_copy(r) for r in g.state], [], list(g.state))  # type: ignore[union-attr]

    def records(self, g: Group, old: OldState | None) -> StateRecords:
        return old.records if old is not None else []

    def update(self, key_text: str, h: int, old: OldState | None, new: StateRecords) -> None:
        """Write a key's new state; ``old`` is its state as stored (compared, for the counts)."""
        schema = self.plan.stage.state_schema
        rows = [schema.to_storage(rec) for rec in new]  # type: ignore[union-attr]
        stored = old.stored if old is not None else []
        self.keys_read += 1 if stored else 0
        self.keys_written += 1 if rows != stored else 0
        for row in rows:
            self.writer.add(key_text, h, row)

    def finish(self, stats: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]], list[dict[str, Any]]]:
        add, _, _ = self.writer.close()
        stats.update(state_read=self.keys_read, state_written=self.keys_written, state_rows=self.writer.rows)
        return None, [add] if add is not None else [], []

    def abort(self) -> None:
        self.writer.abort()


# ------------------------------------------------------------------ index rebuild and compaction
def _open_index(plan: TaskPlan, p: int, meta: StateMeta) -> tuple[PartitionIndex, dict[str, Any] | None]:
    """The partition's index; rebuilt (as a compaction) when the state has files but no index
    (it was last written in black-box mode)."""
    if meta.index is not None:
        return PartitionIndex.load(plan.home, meta.index, getattr(plan, "index_mb", None)), None
    if not meta.files:
        return PartitionIndex.empty(), None
    w = StateWriter(plan, p, prefix=f"e{plan.epoch:08d}-rebuilt")
    _merge_files(plan, meta.files, w, keep_tombstones=False)
    return _index_of(w)


def _sorted(rows: pa.Table) -> pa.Table:
    keys = [("_h", "ascending"), ("_key", "ascending")] + ([("_rk", "ascending")] if "_rk" in rows.column_names else [])
    return rows.take(pc.sort_indices(rows, sort_keys=keys))


def _index_of(w: StateWriter) -> tuple[PartitionIndex, dict[str, Any] | None]:
    add, h, g = w.close()
    if add is None:
        return PartitionIndex.empty(), None
    return PartitionIndex(h, np.zeros(h.size, np.int32), g, [add["path"]]), add


def _compact(
    plan: TaskPlan, p: int, index: PartitionIndex, files: list[dict[str, Any]]
) -> tuple[PartitionIndex, list[dict[str, Any]], dict[str, Any] | None, int]:
    """Merge a partition's data files; return the new index, the files replaced, the new file, and
    the row groups read.

    Tiered, so that compaction costs what changed: while the files written since the last full
    compaction hold fewer rows than half the largest (base) file, only they are merged (newest rows
    per key, tombstones kept, since they hide older rows of the base). Otherwise every live row is
    rewritten into one file, chunk by chunk in hash order, and stale rows and tombstones disappear.
    """
    base = max(files, key=lambda f: int(f["rows"] or 0))
    deltas = [f for f in files if f is not base]
    if sum(int(f["rows"] or 0) for f in deltas) * 2 >= int(base["rows"] or 0):
        reader = StateReader(plan.home, plan.state_rel, index, plan.cache_mb, plan.scan_fraction)
        w = StateWriter(plan, p, prefix=f"e{plan.epoch:08d}-compact")
        names = state_schema(plan).names
        for rows, _, _ in reader.scan():
            w.write_table(_sorted(rows.select(names)))
        new_index, add = _index_of(w)
        return new_index, files, add, reader.row_groups_read
    w = StateWriter(plan, p, prefix=f"e{plan.epoch:08d}-merged")
    _merge_files(plan, deltas, w, keep_tombstones=True)
    add, h, g = w.close()
    # index the merged rows that were their key's newest anywhere (a delta older than the base may
    # hold stale rows of keys the base has since rewritten: they stay, unindexed, for readers to skip)
    names = {f["path"] for f in deltas}
    latest = index.hashes_in_files([i for i, n in enumerate(index.files) if n in names])
    keep = np.isin(h, latest)
    new_index = index.without_files(names).updated(
        np.empty(0, np.int64),
        np.empty(0, np.int32),
        np.empty(0, np.int32),
        h[keep],
        add["path"] if add else None,
        g[keep],
    )
    return new_index, deltas, add, 0


def _merge_files(plan: TaskPlan, files: list[dict[str, Any]], w: StateWriter, keep_tombstones: bool) -> None:
    """Write the newest rows of every key of ``files`` (each sorted by key hash) to ``w``, in hash
    order, holding about a row group per file: the rows of hashes below every open file's last
    hash read are complete, and are merged and written."""
    names = state_schema(plan).names
    pfs = [pq.ParquetFile(plan.home.fs.open_input_file(plan.home.path(f"{plan.state_rel}/{f['path']}"))) for f in files]
    bufs = [pa.Table.from_batches([], schema=pa.schema([state_schema(plan).field(n) for n in names]))] * len(pfs)
    next_rg = [0] * len(pfs)

    def read_more(i: int) -> None:
        t = pfs[i].read_row_group(next_rg[i]).select(names)
        next_rg[i] += 1
        bufs[i] = pa.concat_tables([bufs[i], t], promote_options="default")

    def top(i: int) -> int:
        return int(bufs[i]["_h"][-1].as_py())

    while True:
        for i in range(len(pfs)):
            while not bufs[i].num_rows and next_rg[i] < pfs[i].metadata.num_row_groups:
                read_more(i)
        unread = [i for i in range(len(pfs)) if next_rg[i] < pfs[i].metadata.num_row_groups]
        bound = min((top(i) for i in unread), default=None)
        parts = []
        for i, b in enumerate(bufs):
            n = b.num_rows if bound is None else int(np.searchsorted(b["_h"].to_numpy(), bound, side="left"))
            parts.append(b.slice(0, n))
            bufs[i] = b.slice(n)
        rows = pa.concat_tables(parts)
        if rows.num_rows:
            w.write_table(_sorted(latest_rows(rows, keep_tombstones=keep_tombstones)))
        elif not unread:
            return
        else:  # only rows of the bound's hash are left in the files that end there: read on
            for i in unread:
                if top(i) == bound:
                    read_more(i)
