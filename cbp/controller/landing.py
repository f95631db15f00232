"""Landing records as increments of a flow, framing them, and dropping increments nobody reads.

Feeds land on external flows; a stage epoch's framed outputs land the same way. With the
default framing (FrameByPrior) a feed or an epoch's output is one increment; with ``frame_by``,
consecutive records with the same framing key form an increment, complete once a later key
arrives (or on ``close``). A stage output framed by a field is framed where it is written, by
the tasks (:mod:`cbp.engine.task.framing`), and only joined here; one framed by a FrameBy function,
whose state threads through the epoch's records in order, is read back and framed here.

Reads: ``live.spec`` and ``live.st`` (flows: increments, counters, framing state; connectors),
flow tables' files, the history's feed ids. Writes: increment files of flow tables; a feed is one
:class:`~.change.Change` the journal applies (its Delta commits, its snapshot updates: new
increments and their ids, feed numbers, framing state, connectors; its feed and feed-id
entries); a stage epoch's output increments are updates of the epoch's change (:mod:`.epoch`);
never ``live.st`` itself (:meth:`Landing.allocate` only reads it: a stage epoch's commit moves the counter).
Garbage collection is :mod:`.collect`'s, keyed flows' tables :class:`~.keyed.Keyed`'s, feed hashes
:class:`~.feeds.Feeds`'.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from .. import faults
from ..engine.task.framing import frame_runs
from ..errors import InputError, RuntimeStateError, UserCodeError
from ..spec import PipelineSpec
from ..spec.arrowrecords import DIFF_FIELD, with_diff
from ..spec.resolve import safe_str
from ..spec.signing import REFUSED, first_unsigned, refusal, unsigned_inputs
from ..storage import INC, LAYOUT, SRC, Home
from ..storage.tables import LANDED_CODEC
from .change import (
    Change,
    Commit,
    FlowCounters,
    FlowVersion,
    FrameStateSet,
    IncrementAdded,
    IncrementSet,
    IncrementVersion,
    SnapshotUpdate,
    Target,
)
from .collect import collect_garbage
from .entries import FeedEntry, FeedHashEntry, FeedIdEntry, HistoryEntry
from .feeds import Feeds
from .history import History
from .journal import Journal
from .keyed import Keyed
from .live import Live
from .records import Landed, check_storable
from .snapshot import Increment

__all__ = ["LandResult", "Landing", "flow_schema"]


@dataclass(frozen=True)
class LandResult:
    """What landing records on a flow makes of them (:meth:`Landing.land`): the Delta commits, the
    increment ids, the files written (to delete if the change is abandoned) and the snapshot
    updates that enqueue the increments; the caller's :class:`~.change.Change` carries them."""

    commits: tuple[Commit, ...]
    ids: list[int]
    written: tuple[str, ...]
    updates: tuple[SnapshotUpdate, ...]


def flow_schema(spec: PipelineSpec, flow: str) -> pa.Schema:
    """A flow table's columns: cbp's leading ones (the increment id, and for a framed flow the
    feed or producing epoch of each record: a framed increment can span several), the flow's
    fields, and each record's multiplicity ``_diff`` last (null, or missing in a table an older
    cbp wrote: +1)."""
    fl = spec.flows[flow]
    extra = [pa.field(INC, pa.int64())] + ([pa.field(SRC, pa.int64())] if fl.frame_by is not None else [])
    return pa.schema(extra + list(fl.schema.arrow) + [DIFF_FIELD])


class Landing:
    """Lands records as increments of flows (feeds and stage outputs), frames them, collects garbage."""

    def __init__(
        self,
        home: Home,
        live: Live,
        journal: Journal,
        history: History,
        keyed: Keyed,
        feeds: Feeds,
        notify: Callable[[str], None],
    ) -> None:
        self.home, self.live, self.journal, self.history = home, live, journal, history
        self.keyed, self.feeds, self.notify = keyed, feeds, notify
        self._checked_ids: set[str] = set()  # flows whose table was checked for ids a crashed run left
        self.after_gc: Callable[[], None] | None = None  # after a run's garbage collection (.compaction)

    # ------------------------------------------------------------------ increments
    def _first_id(self, flow: str, floor: int = 0) -> int:
        """The first new increment id of ``flow`` (at least ``floor``), never one a crashed run may
        have left in the table."""
        start = max(self.live.st.flows[flow].next_inc, floor)
        if flow not in self._checked_ids:  # once per process: skip ids a crashed run left in the table
            self._checked_ids.add(flow)
            dt = self.home.table(LAYOUT.flow(flow))
            used = [int(p[INC]) for p in dt.partitions()] if dt is not None else []
            if used:
                start = max(start, max(used) + 1)
        return start

    def allocate(self, flow: str, n: int) -> list[int]:
        """New increment ids for a stage epoch's plan; ``live.st`` is not changed (the epoch's commit
        moves the flow's counter past them, :meth:`.epoch.Epochs.commit`)."""
        start = self._first_id(flow)
        return list(range(start, start + n))

    def registered(self, flow: str, inc: int, m: Increment) -> IncrementAdded:
        """The update that adds increment ``inc`` to ``flow`` and every connector that reads it."""
        return IncrementAdded(flow, inc, m, tuple(self.live.spec.flows[flow].consumers))

    def feed(
        self,
        flow: str,
        records: list[dict[str, Any]] | pa.Table,
        *,
        close: bool = False,
        feed_id: str | None = None,
        force: bool = False,
    ) -> Landed:
        """Land validated records (dicts, or an Arrow table of the fields as stored) on external
        flow ``flow``; return the increment ids they went to, as a :class:`Landed` list whose
        ``feed`` is the feed's number: the N of ``output(flow, epoch=N)``.

        Every feed takes the next feed number, an empty one too (it lands no increment, and its
        ``output --epoch N`` is empty). With the default framing, a feed of records is one
        increment, numbered as the feed unless a crashed run used that id. With ``frame_by``,
        consecutive records with the same framing key form an increment, which is complete once a
        record with another key arrives on the flow, or when ``close`` is given (the paper's
        missing punctuation). A feed with a ``feed_id`` the flow has already landed lands nothing
        (a retried task, a re-delivered file) and returns the first one's increment ids and number;
        one whose records equal a pending feed landed without an id is refused unless ``force``
        (:meth:`.feeds.Feeds.refuse_retry`, code ``duplicate-feed``).
        """
        fl = self.live.spec.flow(flow)
        if not fl.external:
            raise InputError(
                f"flow '{flow}' is produced by stage '{fl.producer}'; only external flows (external: true) can be fed",
                code="not-external",
            )
        data = with_diff(records if isinstance(records, pa.Table) else fl.schema.to_arrow(list(records)))
        with self.journal.locked(), self.journal.transaction():
            fs = self.live.st.flows[flow]
            seen = self.history.feed_id(self.live.st, flow, feed_id) if feed_id is not None else None
            if seen is not None:
                self.notify(f"feed id '{feed_id}' already landed on '{flow}' as feed {seen.feed}; nothing was landed")
                return Landed(seen.incs, feed=seen.feed or 0, records=0, repeated=True)
            hashed = self.feeds.refuse_retry(flow, data, feed_id, force)  # the records' hash entry, if read
            number = fs.feeds + 1
            floor = number if fl.frame_by is None else 0  # increment ids follow feed numbers, past empty feeds too
            counted = FlowCounters(flow, floor or None, number)
            what = f"feed {number} of flow '{flow}'"
            keyed: Commit | None = None
            keyed_written: list[str] = []
            if fl.key:  # events by key: land the changes they make (cbp.controller.keyed)

                def refuse(changes: pa.Table) -> None:
                    self._refuse_unsigned(flow, changes, number, keyed=True)

                data, keyed, keyed_written = self.keyed.feed(flow, data, number, feed_id, check=refuse)
            else:
                self._refuse_unsigned(flow, data, number, keyed=False)
            landed = self.land(
                flow,
                data,
                close=close,
                producer=f"feed:{number}",
                prior_frame=number,
                app=("cbp:feed", number),
                what=what,
                floor=floor,
            )
            ids = landed.ids
            note, entries = self._feed_entries(flow, number, data, feed_id, ids, hashed)
            faults.point("feed:written")
            change = Change(
                "feed",
                what,
                (*landed.commits, *([keyed] if keyed else [])),
                (counted, *landed.updates),
                tuple(entries),
                written=(*landed.written, *keyed_written),
            )
            self.journal.commit(change)
            self.feeds.warn_duplicate(flow, number, note, str(self.live.spec.path))
            return Landed(ids, feed=number, records=data.num_rows)

    def _feed_entries(
        self,
        flow: str,
        number: int,
        data: pa.Table,
        feed_id: str | None,
        ids: list[int],
        known: FeedHashEntry | None = None,
    ) -> tuple[FeedEntry, list[tuple[str, HistoryEntry]]]:
        """Feed ``number``'s history entries: its feed entry, its feed id's, its hash's (a repeated
        feed is warned about, :meth:`.feeds.Feeds.note`; ``known``: the hash's entry read already);
        and what the feed entry notes."""
        note, hashed = self.feeds.note(flow, number, data, feed_id, known)
        entries: list[tuple[str, HistoryEntry]] = [
            (LAYOUT.feed_entry(flow, number), replace(note, incs=tuple(ids), records=data.num_rows, id=feed_id))
        ]
        if feed_id is not None:
            entries.append((LAYOUT.feed_id_entry(flow, feed_id), FeedIdEntry(feed_id, number, tuple(ids))))
        return note, entries + hashed

    def _refuse_unsigned(self, flow: str, data: pa.Table, number: int, *, keyed: bool) -> None:
        """Refuse a feed that holds a record other than +1 (a retraction, copies) when a stage reads
        ``flow`` on an unsigned input (:mod:`cbp.spec.signing`); +r and -r that would cancel are refused too."""
        readers = unsigned_inputs(self.live.spec, flow)
        if not readers or DIFF_FIELD.name not in data.column_names:
            return
        i = first_unsigned(data.column(DIFF_FIELD.name))
        if i is None:
            return
        rec = data.slice(i, 1).to_pylist()[0]
        diff = rec.pop(DIFF_FIELD.name)
        rec = self.live.spec.flows[flow].schema.from_storage(rec)
        if keyed:
            where = f"feed {number}: change {i + 1} (made of the keyed upserts and deletes)"
        else:
            where = f"feed {number}: record {i + 1}"
        raise InputError(refusal(flow, readers[0], where, rec, diff, "Nothing was landed."), code=REFUSED)

    def _frame_runs(self, flow: str, data: pa.Table, producer: str) -> tuple[list[list[Any]], list[SnapshotUpdate]]:
        """Consecutive runs of records with one framing key: ``[key, first row, rows]``, and the
        flow's new framing state (a FrameBy function's)."""
        fl = self.live.spec.flows[flow]
        fs = self.live.st.flows[flow]
        frame_by = fl.frame_by
        assert frame_by is not None  # called for framed flows only
        field = frame_by.field
        if field is not None:  # column-wise
            ft = fl.schema.fields[field]
            # a field's values were validated as JSON values (finite floats, no lone surrogates):
            # storable, unless too long
            runs = [list(r) for r in frame_runs(data.column(field), json_text=ft.scalar == "json" and not ft.is_list)]
            self._check_frames(
                flow, [(key, lambda first=first: data.slice(first, 1).to_pylist()[0]) for key, first, _ in runs]
            )
            return runs, []
        runs = []
        fstate = fs.frame_state
        i = 0
        for batch in data.to_batches(max_chunksize=65536):
            for rec in batch.to_pylist():
                try:
                    key, fstate = frame_by(fl.schema.from_storage(rec), fstate)
                except KeyboardInterrupt:
                    raise
                except BaseException as e:  # noqa: BLE001 - user code: SystemExit and kin too, never a silent exit
                    raise UserCodeError(
                        f"flow '{flow}' record {i + 1} ({producer}): frame_by '{frame_by.text}' raised "
                        f"{type(e).__name__}: {safe_str(e)}; nothing was landed"
                    ) from e
                if runs and runs[-1][0] == key:
                    runs[-1][2] += 1
                else:
                    runs.append([key, i, 1])
                i += 1
        check_storable(fstate, f"flow '{flow}': frame_by '{frame_by.text}' returned a state that")
        self._check_frames(
            flow, [(key, lambda first=first: data.slice(first, 1).to_pylist()[0]) for key, first, _ in runs]
        )
        return runs, [FrameStateSet(flow, fstate)]

    def _check_frames(self, flow: str, keys: list[tuple[Any, Any]]) -> None:
        """Framing keys live in the snapshot: each must be storable. ``keys`` pairs each with a
        function that gives the first record of its run, as stored (for the message)."""
        fl = self.live.spec.flows[flow]
        for key, first in keys:
            try:
                check_storable(key, "")
            except UserCodeError:
                rec = fl.schema.from_storage(first())
                text = fl.frame_by.text if fl.frame_by is not None else ""
                check_storable(
                    key, f"flow '{flow}': frame_by '{text}' gave a framing key (for record {rec!r:.200}) that"
                )

    def land(
        self,
        flow: str,
        data: pa.Table,
        *,
        close: bool,
        producer: str,
        prior_frame: Any,
        app: tuple[str, int],
        what: str,
        prefix: str = "in",
        floor: int = 0,
    ) -> LandResult:
        """Frame validated records (an Arrow table of the flow's fields, as stored) into increments
        of ``flow`` and write their files (not yet committed); ``live.st`` is not changed.

        Returns the Delta commit to make (zero or one, see :meth:`Journal.commit`), the increment
        ids, the files written (to delete if the change is abandoned) and the snapshot updates that
        enqueue the increments (new ids from ``floor`` on). ``prefix`` starts the files' names (a
        stage's: :meth:`Layout.output_prefix`, which names the epoch).
        """
        fl = self.live.spec.flows[flow]
        data = with_diff(data)
        updates: list[SnapshotUpdate] = []
        if fl.frame_by is None:
            runs = [[prior_frame, 0, data.num_rows]] if data.num_rows else []
        else:
            runs, updates = self._frame_runs(flow, data, producer)
        assignments = self._assign(
            flow,
            [(key, count) for key, _, count in runs],
            close=close,
            producer=producer,
            prior_frame=prior_frame,
            floor=floor,
            updates=updates,
        )
        commits: list[Commit] = []
        written: list[str] = []
        if data.num_rows:
            commits.append(self._write_increments(flow, data, assignments, prior_frame, app, what, written, prefix))
        return LandResult(tuple(commits), [a[0] for a in assignments], tuple(written), tuple(updates))

    def land_runs(
        self,
        flow: str,
        runs: list[tuple[str, dict[str, Any]]],
        *,
        producer: str,
        prior_frame: Any,
        app: tuple[str, int],
        floor: int = 0,
    ) -> LandResult:
        """Land an epoch's output of a flow framed by a field, framed by its tasks
        (:class:`cbp.engine.task.framing.FramedSink`): ``runs`` are the tasks' files in output order,
        each with its run's framing key as JSON text. Consecutive runs with equal keys (the end
        of one task's output and the start of the next) are one increment.

        Returns what :meth:`land` does (no files are written here). The keys are values of a
        field, validated as JSON: storable in the snapshot.
        """
        merged: list[list[Any]] = []  # key, rows, adds
        for text, add in runs:
            key = json.loads(text)
            if merged and merged[-1][0] == key:
                merged[-1][1] += int(add["rows"])
                merged[-1][2].append(add)
            else:
                merged.append([key, int(add["rows"]), [add]])
        updates: list[SnapshotUpdate] = []
        runs_ = [(key, rows) for key, rows, _ in merged]
        assignments = self._assign(
            flow, runs_, close=False, producer=producer, prior_frame=prior_frame, updates=updates, floor=floor
        )
        rel = LAYOUT.flow(flow)
        self.home.ensure_table(rel, flow_schema(self.live.spec, flow), INC)
        adds = [{**a, "partition": inc} for (inc, _, _, _), (_, _, files) in zip(assignments, merged) for a in files]
        targets: list[Target] = [FlowVersion(flow), *(IncrementVersion(flow, a[0]) for a in assignments)]
        commits = (Commit(rel, INC, tuple(adds), (), app[0], app[1], tuple(targets)),) if adds else ()
        return LandResult(commits, [a[0] for a in assignments], (), tuple(updates))

    def _assign(
        self,
        flow: str,
        runs: list[tuple[Any, int]],
        *,
        close: bool,
        producer: str,
        prior_frame: Any,
        updates: list[SnapshotUpdate],
        floor: int = 0,
    ) -> list[tuple[int, Any, int, bool]]:
        """Put runs ``(framing key, rows)`` of new records of ``flow`` into increments: the open
        increment takes the first run if it has the same framing key, the others get new ids (from
        ``floor`` on). Appends to ``updates`` what that changes in the snapshot; returns
        ``(increment id, framing key, rows, is new)`` per run."""
        fl = self.live.spec.flows[flow]
        fs = self.live.st.flows[flow]
        open_inc = fs.open_increment()
        runs = list(runs)
        assignments: list[tuple[int, Any, int, bool]] = []
        if open_inc is not None and runs and fs.incs[open_inc].frame == runs[0][0]:
            key, count = runs.pop(0)
            assignments.append((open_inc, key, count, False))
        elif open_inc is not None and runs:
            updates.append(IncrementSet(flow, open_inc, replace(fs.incs[open_inc], complete=True)))  # a later frame
        start = self._first_id(flow, floor)
        updates.append(FlowCounters(flow, next_inc=start + len(runs)))
        assignments += [(start + n, key, count, True) for n, (key, count) in enumerate(runs)]
        for n, (inc, key, count, is_new) in enumerate(assignments):
            complete = fl.frame_by is None or n < len(assignments) - 1 or close
            if is_new:
                updates.append(
                    self.registered(flow, inc, Increment(key, count, fs.version, producer, complete, [prior_frame]))
                )
            else:
                m = fs.incs[inc]
                grown = replace(m, records=m.records + count, complete=complete, srcs=[*m.srcs, prior_frame])
                updates.append(IncrementSet(flow, inc, grown))
        if close and not assignments and open_inc is not None:
            updates.append(IncrementSet(flow, open_inc, replace(fs.incs[open_inc], complete=True)))
        return assignments

    def _write_increments(
        self,
        flow: str,
        data: pa.Table,
        assignments: list[tuple[int, Any, int, bool]],
        prior_frame: Any,
        app: tuple[str, int],
        what: str,
        written: list[str],
        prefix: str = "in",
    ) -> Commit:
        """Write one file per increment of ``assignments``; return the Delta commit that adds them."""
        fl = self.live.spec.flows[flow]
        rel = LAYOUT.flow(flow)
        schema = flow_schema(self.live.spec, flow)
        self.home.ensure_table(rel, schema, INC)
        schema = schema.remove(schema.get_field_index(INC))  # the partition column: in the file's path only
        adds = []
        start = 0
        for inc, _, count, _ in assignments:
            columns = [pa.array(np.full(count, prior_frame, dtype=np.int64))] if fl.frame_by is not None else []
            part = pa.Table.from_arrays(columns + list(data.slice(start, count).columns), schema=schema)
            start += count
            try:
                add = self.home.write_parquet(
                    LAYOUT.increment_dir(flow, inc),
                    part,
                    prefix,
                    inc,
                    compression=LANDED_CODEC,
                    text_statistics=False,
                    sampled_dictionary=True,
                )
            except OSError as e:
                raise RuntimeStateError(
                    f"{what}: cannot write to {self.home.uri(rel)}: {e}; nothing was landed", code="io"
                ) from e
            written.append(add["rel"])
            add["path"] = add.pop("rel")[len(rel) + 1 :]
            adds.append(add)
        targets: list[Target] = [FlowVersion(flow), *(IncrementVersion(flow, a[0]) for a in assignments)]
        return Commit(rel, INC, tuple(adds), (), app[0], app[1], tuple(targets))

    def read_task_files(self, flow: str, adds: list[dict[str, Any]]) -> tuple[pa.Table, list[str]]:
        """The records of files a task wrote (in partition order) that will be re-framed, and their paths."""
        schema = self.live.spec.flows[flow].schema
        parts, rels = [], []
        for a in sorted(adds, key=lambda a: a["path"]):
            rel = f"{LAYOUT.flow(flow)}/{a['path']}"
            t = pq.read_table(self.home.path(rel), filesystem=self.home.fs)
            parts.append(
                with_diff(
                    t.select(list(schema.fields) + [DIFF_FIELD.name] * (DIFF_FIELD.name in t.column_names)).cast(
                        pa.schema(list(schema.arrow) + [DIFF_FIELD] * (DIFF_FIELD.name in t.column_names))
                    )
                )
            )
            rels.append(rel)
        return (pa.concat_tables(parts) if parts else with_diff(schema.arrow.empty_table())), rels

    def increment_files(self, flow: str, ids: list[int]) -> list[tuple[str, int]]:
        """The data files of live increments ``ids`` of ``flow``, each with its increment."""
        fs = self.live.st.flows[flow]
        wanted = set(ids)
        rel = LAYOUT.flow(flow)
        return [
            (self.home.uri(rel, f["path"]), int(f["partition"]))
            for f in self.home.table_files(rel, fs.version)  # type: ignore[arg-type]
            if int(f["partition"]) in wanted
        ]

    # ------------------------------------------------------------------ garbage collection
    def collect_garbage(self) -> list[tuple[str, int]]:
        """Drop increments nobody reads any more (one durable change): :func:`.collect.collect_garbage`;
        then :attr:`after_gc` (compaction, once due)."""
        dropped = collect_garbage(self.home, self.live, self.journal)
        if self.after_gc is not None:
            self.after_gc()
        return dropped
