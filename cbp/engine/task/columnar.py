"""Batch translate with no Python per key or per record: the columnar path of a grouped task.

When a stage's logic is vectorised (``batch: true``) and nothing in the epoch needs to visit keys
one by one, a grouped task never builds key groups (:mod:`cbp.engine.task.groups`). It takes the
shuffled envelopes (:mod:`cbp.engine.task.routing`) as they come, sorted by key hash, key and flow,
a chunk of whole keys at a time (at most :data:`CALL_KEYS`), and with Arrow
compute only:

- finds the key runs (where ``_key`` changes), their hashes and typed keys;
- reads the chunk's stored state through the partition's index (:meth:`StateReader.rows_of`)
  and keeps each key's newest live rows;
- cuts each input flow's records out of its struct column, in key order (and OrderBy field);
- calls the batch translator once, checks what it returned (:meth:`BatchTranslate.check`);
- compares each key's new rows with its stored rows and writes only the keys that changed,
  with tombstones for the removed ones, in hash order, as one Arrow table.

The same results as the per-key visit of :class:`cbp.engine.task.batch.BatchTranslate`. Used when
(:func:`columnar_fits`, chosen with the plan) the epoch is direct-mode, grouping is inner (only keys with input are
called), every input routes by a field (so there are no broadcast or multicast copies), no
OrderBy is a function, and the stage made no multicast bindings; otherwise the key-group path.
``CBP_COLUMNAR=0`` in the driver's environment turns it off.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .batch import BatchTranslate
from .batchtables import _typed_keys, _with_key, write_changed
from .partition import ArrowRows
from .routing import record_column
from .signed import consolidate_table, fill_diff, has_negative

if TYPE_CHECKING:
    from ...spec import StageSpec
    from .plan import TaskPlan, _Clock

__all__ = ["columnar_fits", "ColumnarTask"]

CHUNK_ROWS = 1 << 16  # envelopes gathered before a chunk of whole keys is cut off
#: Keys per call of the batch translator: more than the key-group path's (BATCH_KEYS), as nothing
#: here is held per key; a call's fixed cost (Arrow plans, checks) is then paid 8x less often.
CALL_KEYS = 1 << 16


def columnar_fits(stage: StageSpec, mode: str, *, bindings: bool, allowed: bool = True) -> bool:
    """Whether a stage epoch's tasks take the columnar path (see the module); chosen with the plan
    (:func:`cbp.engine.driver.taskplan.choose_path`). ``bindings``: the epoch reads multicast
    bindings; ``allowed``: ``CBP_COLUMNAR`` is not 0."""
    if not stage.batch or stage.row_key or not allowed or mode != "direct" or bindings:
        return False
    if stage.state_schema is not None and stage.grouping != "inner":
        return False
    return all(
        i.route_by is not None and i.route_by.field is not None and (i.order_by is None or i.order_by.field is not None)
        for i in stage.inputs
    )


class ColumnarTask:
    """One grouped task's batch translate over Arrow chunks of whole keys."""

    def __init__(self, plan: TaskPlan, batch: BatchTranslate, part: ArrowRows | None, clock: _Clock) -> None:
        self.plan, self.batch, self.part, self.clock = plan, batch, part, clock
        self.records = 0

    def run(self, batches: Iterable[pa.RecordBatch]) -> int:
        """Translate every key of the task's envelopes; the number of input records."""
        held: list[pa.RecordBatch] = []
        rows, due = 0, CHUNK_ROWS
        for b in batches:
            if b.num_rows == 0:
                continue
            held.append(b)
            rows += b.num_rows
            if rows >= due:
                t = pa.Table.from_batches(held).combine_chunks()
                keys = t.column("_key")
                start = int(pc.index(keys, keys[len(keys) - 1]).as_py())  # the last key may go on in the next batch
                if start > 0:
                    self._chunk(t.slice(0, start))
                held = t.slice(start).to_batches()
                rows = t.num_rows - start
                due = rows + CHUNK_ROWS  # one key with more records than a chunk: look again a chunk later
        if held:
            self._chunk(pa.Table.from_batches(held).combine_chunks())
        return self.records

    def _chunk(self, t: pa.Table) -> None:
        """Whole keys' envelopes (sorted by hash, key, flow): translated CALL_KEYS keys at a time."""
        keys = t.column("_key").combine_chunks()
        n = len(keys)
        change = np.ones(n, bool)
        if n > 1:
            change[1:] = pc.not_equal(keys.slice(1), keys.slice(0, n - 1)).to_numpy(zero_copy_only=False)
        starts = np.flatnonzero(change)
        for a in range(0, starts.size, CALL_KEYS):
            lo = int(starts[a])
            hi = int(starts[a + CALL_KEYS]) if a + CALL_KEYS < starts.size else n
            self._call(t.slice(lo, hi - lo), starts[a : a + CALL_KEYS] - lo, change[lo:hi])
        self.clock.lap("translate")

    def _call(self, t: pa.Table, starts: np.ndarray, change: np.ndarray) -> None:
        plan, bt = self.plan, self.batch
        st = plan.stage
        self.records += t.num_rows
        texts = t.column("_key").combine_chunks().take(pa.array(starts))
        hashes = t.column("_h").combine_chunks().take(pa.array(starts)).to_numpy()
        row_pos = np.cumsum(change) - 1  # each envelope's key, as a position in the call's keys
        flows = t.column("_flow").to_numpy()
        cut = []
        for idx in range(len(st.inputs)):
            mask = flows == idx
            recs = pa.Table.from_struct_array(t.column(record_column(idx)).filter(pa.array(mask)).combine_chunks())
            cut.append(
                (
                    fill_diff(recs.select(plan.input_schemas[idx].arrow.names).cast(plan.input_schemas[idx].arrow)),
                    row_pos[mask],
                )
            )
        if any(
            has_negative(table) for table, _ in cut
        ):  # retractions: consolidated per key and flow; keys left with nothing are not called
            cut, keep = _consolidated(cut, len(starts))
            if keep is not None:
                if not keep.size:
                    return
                texts, hashes = texts.take(pa.array(keep)), hashes[keep]
        typed, key_texts = _typed_keys(texts)
        self.clock.lap("input")
        old, old_pos, locs = self._old_state(texts, hashes)
        self.clock.lap("state_read")
        inputs = []
        for inp, (table, at) in zip(st.inputs, cut):
            table = _with_key(table, typed, at)
            if inp.order_by is not None and table.num_rows:
                table = table.sort_by([("_pos", "ascending"), (inp.order_by.field, "ascending")])
            inputs.append(table)
        state = None
        if old is not None:
            state = _with_key(old, typed, old_pos)
        result = bt.call(typed, state, inputs, len(starts), key_texts)
        new, removed, outputs = bt.check(result, typed, lambda i: texts[i].as_py())
        self.clock.lap("translate")  # building the call's tables, the user's call and its check
        if self.part is not None:
            self._write(texts, hashes, old, old_pos, locs, new, removed)
            self.clock.lap("state_write")
        for flow, table in outputs.items():
            bt.calls.outputs[flow].add_table(table)
        self.clock.lap("outputs")

    def _old_state(
        self, texts: pa.Array, hashes: np.ndarray
    ) -> tuple[pa.Table | None, np.ndarray, tuple[np.ndarray, ...] | None]:
        """The stored state of the call's keys: each key's newest live rows (key order, then stored
        order), their key positions, and (key position, hash, file id, row group) of every stored row."""
        part, schema = self.part, self.plan.stage.state_schema
        if part is None or schema is None:
            return None, np.empty(0, np.int64), None
        empty = schema.arrow.empty_table()
        if not part.index.live_keys:
            return empty, np.empty(0, np.int64), None
        rows, fids, rgs = part.reader.rows_of(hashes)
        if rows.num_rows == 0:
            return empty, np.empty(0, np.int64), None
        pos = pc.index_in(rows.column("_key"), value_set=texts)  # another key with the same hash: not this call's
        ok = pos.is_valid().to_numpy(zero_copy_only=False)
        rows, fids, rgs = rows.filter(pa.array(ok)), fids[ok], rgs[ok]
        pos = pos.filter(pa.array(ok)).to_numpy().astype(np.int64)
        part.keys_read += int(np.unique(pos).size)
        epochs = rows.column("_epoch").to_numpy()
        newest = np.full(len(texts), np.iinfo(np.int64).min, np.int64)
        np.maximum.at(newest, pos, epochs)
        live = (epochs == newest[pos]) & rows.column("_alive").to_numpy(zero_copy_only=False)
        order = np.argsort(pos[live], kind="stable")
        old = rows.filter(pa.array(live)).select(schema.arrow.names).take(pa.array(order)).cast(schema.arrow)
        return old, pos[live][order], (pos, hashes[pos], fids, rgs)

    def _write(
        self,
        texts: pa.Array,
        hashes: np.ndarray,
        old: pa.Table | None,
        old_pos: np.ndarray,
        locs: tuple[np.ndarray, ...] | None,
        new: pa.Table | None,
        removed: np.ndarray,
    ) -> None:
        """Write the keys whose state changed: new rows, or a tombstone for a removed key that had state."""
        part = self.part
        assert part is not None
        n = len(texts)
        n_old = np.bincount(old_pos, minlength=n)
        new_pos = new.column("_pos").to_numpy() if new is not None else np.empty(0, np.int64)
        n_new = np.bincount(new_pos, minlength=n)
        changed = np.zeros(n, bool)
        changed[removed] = n_old[removed] > 0
        given = n_new > 0
        changed |= given & (n_new != n_old)
        same_count = np.flatnonzero(given & (n_new == n_old))
        if same_count.size and new is not None and old is not None:
            changed[same_count] = _rows_differ(old, old_pos, new, same_count, n)
        if not changed.any():
            return
        ch = np.flatnonzero(changed)
        part.keys_written += int(ch.size)
        if locs is not None:
            kpos, h, f, g = locs
            sel = changed[kpos]
            part.drop_rows(h[sel], f[sel], g[sel])
        schema = self.plan.stage.state_schema
        assert schema is not None  # the columnar path is taken by stateful stages only
        write_changed(part, schema.arrow, new, changed, np.sort(removed), texts, pa.array(hashes))


def _consolidated(
    cut: list[tuple[pa.Table, np.ndarray]], n: int
) -> tuple[list[tuple[pa.Table, np.ndarray]], np.ndarray | None]:
    """Each flow's records (with their key positions) consolidated per key (:mod:`cbp.engine.task.signed`),
    and the positions of the keys left with records (None: all of them), the positions renumbered."""
    out = []
    live = np.zeros(n, bool)
    for table, at in cut:
        c = consolidate_table(table.append_column("_pos", pa.array(at, pa.int64())))
        at = c.column("_pos").to_numpy()
        live[at] = True
        out.append((c.drop_columns(["_pos"]), at))
    if live.all():
        return out, None
    renum = np.cumsum(live) - 1
    return [(table, renum[at]) for table, at in out], np.flatnonzero(live)


def _rows_differ(old: pa.Table, old_pos: np.ndarray, new: pa.Table, keys: np.ndarray, n: int) -> np.ndarray:
    """For keys (positions) with as many new rows as stored ones: whether any row differs, in order."""
    want = np.zeros(n, bool)
    want[keys] = True
    a = old.filter(pa.array(want[old_pos]))
    new_pos = new.column("_pos").to_numpy()
    sel = want[new_pos]
    b = new.filter(pa.array(sel))
    b_pos = new_pos[sel]
    b = b.take(pa.array(np.argsort(b_pos, kind="stable")))  # rows of a key together, in the order returned
    at = np.sort(b_pos, kind="stable")
    differs = np.zeros(len(at), bool)
    for name in old.column_names:
        x, y = a.column(name), b.column(name)
        if pa.types.is_list(x.type):
            differs |= np.array([u != v for u, v in zip(x.to_pylist(), y.to_pylist())], bool)
            continue
        eq = pc.equal(x, y)
        both_null = pc.and_(pc.is_null(x), pc.is_null(y))
        same = pc.or_kleene(pc.fill_null(eq, False), both_null)
        differs |= ~same.to_numpy(zero_copy_only=False)
    out = np.zeros(n, bool)
    np.logical_or.at(out, at, differs)
    found: np.ndarray = out[keys]
    return found
