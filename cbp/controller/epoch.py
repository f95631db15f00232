"""One stage epoch, driven from the controller: plan and intention, Spark job, commit (paper 001 §4.3).

:meth:`Epochs.plan` (under the home's lock) writes the epoch's *intention* (what it reads and
removes, the increment ids it will produce, the connectors it touches); :meth:`Epochs.run_job`
runs the Spark job (:mod:`cbp.engine.driver.job`) without the lock, writing only new files; and
:meth:`Epochs.commit` (under the lock again, on the newest snapshot) commits the epoch as one
change (:mod:`.journal`), or refuses it if what it read changed meanwhile (:mod:`.commitcheck`).
A runner that dies leaves the intention: the next ``cbp run`` re-runs the epoch with the same
decision, or drops it if its inputs changed (:mod:`.intentions`).

Reads: ``live.spec`` and ``live.st`` (the stage's epoch, state version, index, bindings; its
input connectors and increments), the input increments' and state table's files, the tuning.
Writes: through the journal, one change per epoch: the state table and output flow tables (Delta
commits), its snapshot updates (the scheduler's position; the stage's epoch, runnable state,
index, layout and bindings; its input connectors; output increments, made by
:class:`~.landing.Landing`), the epoch's history entry and its intention
(:class:`~.intentions.Intentions`); deletes index and binding files no one reads again. The plan
changes nothing in ``live.st``: the output ids it takes and the scheduler's position it moves to
are in its :class:`~.commitcheck.Planned`, and :meth:`Epochs.commit` makes them typed updates.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pyarrow as pa

from .. import faults
from ..engine.common.protocol import TaskResult
from ..engine.driver.deltaread import StateSource
from ..engine.driver.job import run_stage_epoch
from ..engine.driver.taskplan import build_task_plan
from ..engine.task.bipindex import STATE_META, StateMeta
from ..engine.task.framing import FRAME_KEY
from ..engine.task.plan import TaskPlan
from ..spec import StageSpec
from ..storage import INC, LAYOUT, PART, Home
from ..storage.layout import epoch_of
from .change import (
    Change,
    Commit,
    ConnectorRead,
    EntryVersion,
    EpochAdvance,
    FlowCounters,
    FlowVersion,
    IncrementVersion,
    SchedSet,
    SnapshotUpdate,
    StateVersion,
)
from .codehash import note_code
from .commitcheck import Conflict, Planned, base_of, conflict
from .history import EpochEntry
from .intentions import Intention, Intentions
from .journal import Journal
from .landing import Landing, LandResult, flow_schema
from .live import LazySpark, Live, Tuning
from .records import Decision, EpochReport
from .snapshot import Increment, Sched
from .viewtables import ViewTables

__all__ = ["Epochs"]


class Epochs:
    """Runs and commits one stage epoch at a time."""

    def __init__(
        self,
        home: Home,
        live: Live,
        journal: Journal,
        landing: Landing,
        intentions: Intentions,
        tuning: Tuning,
        spark: LazySpark,
        mode: str,
    ) -> None:
        self.home, self.live, self.journal, self.landing, self.intentions = home, live, journal, landing, intentions
        self.tuning, self.spark, self.mode = tuning, spark, mode
        self.views = ViewTables(home, live, landing.history)  # each SQL view's table of current rows
        self.epoch_timeout: float | None = None  # seconds per stage epoch of the current run (cbp run --epoch-timeout)
        self.run_info: dict[str, Any] | None = (
            None  # the cbp run under way (pid, host, started, command), for the history
        )

    # ------------------------------------------------------------------ one stage epoch
    def _state_table_schema(self, spec: StageSpec) -> pa.Schema:
        rk = [pa.field("_rk", pa.string())] if spec.row_key else []  # keyed rows (cbp.engine.task.keyedstate)
        assert spec.state_schema is not None  # a stateful stage's
        return pa.schema([pa.field(PART, pa.int32())] + list(STATE_META) + rk + list(spec.state_schema.arrow))

    def run_epoch(self, stage: str, d: Decision, *, intention: Intention | None = None) -> EpochReport:
        """Plan, run and commit one epoch of ``stage`` while the caller holds the home's lock
        throughout: state, output increments and connectors, all or nothing."""
        planned = self.plan(stage, d, intention=intention)
        done = self.commit(planned, *self.run_job(planned))
        assert not isinstance(done, Conflict)  # nothing else changed the home: the lock was held
        return done

    def plan(
        self, stage: str, d: Decision, *, intention: Intention | None = None, sched: Sched | None = None
    ) -> Planned:
        """Under the home's lock: what the epoch reads, its output increment ids, its intention
        (written here) and its tasks' plan. ``live.st`` is read, not changed: the ids it takes and
        ``sched`` (the scheduler's position after choosing this epoch; None: unchanged) are in the
        :class:`~.commitcheck.Planned` it returns, and :meth:`commit` makes them typed updates of
        its change, on the snapshot it commits on."""
        spec = self.live.spec.stages[stage]
        epoch = self.live.st.stages[stage].epoch + 1
        t0 = time.perf_counter()
        base = base_of(self.live.st, stage, d.reads, d.removes, list(spec.outputs))
        inputs: dict[str, list[int]] = {}
        input_files: dict[int, list[str]] = {}
        # loopback files -> the epoch of this stage that wrote them (whose bindings deliver their multicasts)
        made_in: dict[str, int] = {}
        for idx, inp in enumerate(spec.inputs):
            n = d.reads.get(inp.flow, 0)
            if n:
                inputs[inp.flow] = self.live.st.connector(stage, inp.flow)[:n]
                files = self.landing.increment_files(inp.flow, inputs[inp.flow])
                input_files[idx] = [uri for uri, _ in files]
                made_in.update(
                    (uri, e) for uri, i in files if (e := self._made_in(stage, inp.flow, uri, i)) is not None
                )
        if intention is not None:  # the attempt that died allocated these; its files go first
            out_incs = dict(intention.out_incs)
            self.intentions.discard_files(stage, epoch, out_incs)
        else:
            out_incs = {f: self.landing.allocate(f, 1)[0] for f in spec.outputs}
        self.intentions.write(stage, epoch, d, inputs, out_incs)
        wanted = {epoch - 1, *made_in.values()}
        bindings = [self.home.uri(rel) for rel in self.live.st.stages[stage].bindings if epoch_of(rel) in wanted]
        try:
            plan, state_uris = self._plan(stage, epoch, out_incs, inputs, made_in, bindings)
        except BaseException:
            self.intentions.abandon_quietly(stage, epoch, out_incs)
            raise
        sched = copy.deepcopy(sched) if sched is not None else None
        return Planned(stage, epoch, d, inputs, input_files, out_incs, plan, state_uris, base, sched, t0)

    def run_job(self, p: Planned) -> tuple[list[TaskResult], dict[str, int]]:
        """The epoch's Spark job, without the home's lock (the runner lock keeps other runners out):
        its tasks' results and the shuffle's size. If it fails, its files and intention go."""
        try:
            shuffle: dict[str, int] = {}
            results = run_stage_epoch(
                self.spark.get(),
                p.plan,
                p.input_files,
                p.state_uris,
                state_needs_dedupe=p.base.stage_state.layout != "blackbox",
                shuffle=shuffle,
            )
            faults.point("epoch:ran")
        except BaseException:
            self.intentions.abandon_quietly(p.stage, p.epoch, p.out_incs)
            raise
        return results, shuffle

    def commit(self, p: Planned, results: list[TaskResult], shuffle: dict[str, int]) -> EpochReport | Conflict:
        """Under the home's lock, on the newest snapshot: commit the epoch, or refuse it (nothing
        written, its files and intention gone) if what it read changed meanwhile (:mod:`.commitcheck`)."""
        why = conflict(p.base, self.live.st)
        if why is not None:
            self.home.fence(f"stage '{p.stage}' epoch {p.epoch}")  # a runner that lost its lease touches nothing
            if self.live.st.stages[p.stage].epoch < p.epoch:  # else the files of that number are another's
                self.intentions.abandon_quietly(p.stage, p.epoch, p.out_incs)
            return Conflict(p.stage, p.epoch, why)
        with self.journal.transaction():
            try:
                faults.point("epoch:checked")
                change, counts = self._epoch_change(p.stage, p.epoch, p.decision, results, p.inputs, p.out_incs)
                planned: list[SnapshotUpdate] = [SchedSet(p.sched)] if p.sched is not None else []
                planned += [FlowCounters(f, i + 1) for f, i in p.out_incs.items()]
                self.journal.commit(replace(change, updates=(*planned, *change.updates)))
            except BaseException:
                try:
                    committing = self.home.pending() is not None  # then the change is finished later, not dropped
                except OSError:
                    committing = True
                if not committing:
                    self.intentions.abandon_quietly(p.stage, p.epoch, p.out_incs)
                raise
        seconds = time.perf_counter() - p.started
        return _report(p.stage, p.epoch, self.mode, results, counts, seconds, shuffle)

    def _plan(
        self,
        stage: str,
        epoch: int,
        out_incs: dict[str, int],
        inputs: dict[str, list[int]],
        made_in: dict[str, int],
        bindings: list[str],
    ) -> tuple[TaskPlan, StateSource | None]:
        """The plan the epoch's tasks get (built complete, frozen: cbp.engine.driver.taskplan), and
        (black-box mode) the state table at its version."""
        spec = self.live.spec.stages[stage]
        sst = self.live.st.stages[stage]
        parts: dict[int, StateMeta] = {}
        state_uris: StateSource | None = None
        state_rel = LAYOUT.state(stage)
        if spec.state_schema is not None and sst.state_version is not None:
            if self.mode == "blackbox":  # the job reads these files (no Delta log replay in Spark)
                version, home = sst.state_version, self.home
                state_uris = StateSource(
                    home.uri(state_rel),
                    version,
                    lambda: [home.uri(state_rel, f["path"]) for f in home.table_files(state_rel, version)],
                )
            else:
                files = self.home.table_files(state_rel, sst.state_version)
                for f in files:
                    parts.setdefault(int(f["partition"]), StateMeta()).files.append(f)
                for p, rel in (sst.index if sst.layout == "direct" else {}).items():
                    parts.setdefault(int(p), StateMeta()).index = rel
        known = [self.live.st.flows[i.flow].incs.get(n) for i in spec.inputs for n in inputs.get(i.flow, [])]
        limits = [t for t in (spec.timeout, self.epoch_timeout) if t is not None]
        plan = build_task_plan(
            home=self.home,
            stage=spec,
            epoch=epoch,
            mode=self.mode,
            out_schemas={f: self.live.spec.flows[f].schema for f in spec.outputs},
            out_incs=out_incs,
            out_frames={
                f: fr.field
                for f in spec.outputs
                if (fr := self.live.spec.flows[f].frame_by) is not None and fr.field is not None
            },
            input_schemas=[self.live.spec.flows[i.flow].schema.signed() for i in spec.inputs],
            state_rel=state_rel,
            parts=parts,
            tuning=self.tuning,
            master=self.spark.master(),
            new_records=sum(m.records for m in known if m is not None),
            records_known=all(m is not None for m in known),
            made_in=made_in,
            bindings=bindings,
            timeout=min(limits) if limits else None,
        )
        return plan, state_uris

    def _epoch_change(
        self,
        stage: str,
        epoch: int,
        d: Decision,
        results: list[TaskResult],
        inputs: dict[str, list[int]],
        out_incs: dict[str, int],
    ) -> tuple[Change, dict[str, int]]:
        """The tasks' results as the epoch's :class:`~.change.Change` (its Delta commits, snapshot
        updates, history entry, files to delete once committed and files written here), and the
        records per output flow. Output increments are snapshot updates of the change, made by the
        landing part."""
        spec = self.live.spec.stages[stage]
        app = (f"cbp:{stage}", self.live.st.seq + 1)  # the change's number: Delta transaction version, never reused
        entry = LAYOUT.epoch_entry(stage, epoch)
        state = self._state_commit(stage, results, app, entry)
        out = self._output_commits(stage, epoch, results, out_incs, app)
        view_commits, view_files = self.views.epoch_commits(stage, results, app)
        reads = tuple(ConnectorRead(stage, flow, n) for flow, n in d.removes.items())
        bindings, unbound = self._bindings(stage, results, d)
        index = {str(r.part): r.index for r in results if r.index} if self.mode == "direct" else {}
        stateful = spec.state_schema is not None
        advance = EpochAdvance(
            stage, epoch, d.state, tuple(bindings), index if stateful else None, self.mode if stateful else None
        )
        code, shape = note_code(self.live.st, spec, epoch)
        record = EpochEntry(
            self.live.st.stages[stage].state_version,
            inputs,
            out.produced,
            {f: out.counts[f] for f in out.produced},
            _placement(results),
            code,
            app[1],
            self.run_info,
            round(time.time(), 3),
        )
        change = Change(
            "epoch",
            f"stage '{stage}' epoch {epoch}",
            commits=(*state.commits, *out.commits, *view_commits),
            updates=(*out.updates, *reads, advance, *((shape,) if shape is not None else ())),
            entries=((entry, record),),
            stage=stage,
            cleanup=(*state.cleanup, *out.cleanup, *unbound),
            written=(*out.written, *view_files),
        )
        return change, out.counts

    def _state_commit(self, stage: str, results: list[TaskResult], app: tuple[str, int], entry: str) -> _Part:
        """The state table's commit of the epoch (none for a stateless stage, or a direct-mode epoch
        that changed no file) and the index files no new index stands on: what the tasks say, or
        (black-box) every one."""
        spec = self.live.spec.stages[stage]
        part = _Part()
        if spec.state_schema is None:
            return part
        adds = [a for r in results for a in r.state_adds]
        removes = [x for r in results for x in r.state_removes]
        if self.mode == "blackbox" or adds or removes:
            state_rel = LAYOUT.state(stage)
            self.home.ensure_table(state_rel, self._state_table_schema(spec), PART)
            targets = (StateVersion(stage), EntryVersion(entry, "state_version"))
            blackbox = self.mode == "blackbox"
            part.commits.append(Commit(state_rel, PART, tuple(adds), tuple(removes), *app, targets, overwrite=blackbox))
        if self.mode == "direct":
            part.cleanup += [rel for r in results for rel in r.index_garbage]
        else:
            part.cleanup += self._index_files(stage, dict(self.live.st.stages[stage].index))
        return part

    def _output_commits(
        self, stage: str, epoch: int, results: list[TaskResult], out_incs: dict[str, int], app: tuple[str, int]
    ) -> _Part:
        """The output flows' commits: each flow's files as the increment allocated for it, or
        re-framed (by the tasks' framing keys, or by a FrameBy function here) by the landing part."""
        part = _Part()
        producer = f"{stage}:{epoch}"
        for flow in self.live.spec.stages[stage].outputs:
            adds = [a for r in results for a in r.outputs.get(flow, [])]
            part.counts[flow] = sum(int(a["rows"]) for a in adds)
            if not adds:
                continue  # an epoch that writes nothing to a flow adds no increment to it
            frame_by = self.live.spec.flows[flow].frame_by
            if frame_by is not None and frame_by.field is not None:  # framed by the tasks: join their runs
                ordered = sorted(results, key=lambda r: r.part)
                runs = [(a[FRAME_KEY], a) for r in ordered for a in r.outputs.get(flow, [])]
                landed = self.landing.land_runs(
                    flow, runs, producer=producer, prior_frame=epoch, app=app, floor=out_incs[flow] + 1
                )
            elif frame_by is not None:  # a FrameBy function threads its state through the records: framed here
                data, task_files = self.landing.read_task_files(flow, adds)
                part.cleanup += task_files
                what, prefix = f"stage '{stage}' epoch {epoch}", LAYOUT.output_prefix(stage, epoch)
                landed = self.landing.land(
                    flow,
                    data,
                    close=False,
                    producer=producer,
                    prior_frame=epoch,
                    app=app,
                    what=what,
                    prefix=prefix,
                    floor=out_incs[flow] + 1,  # after the id the plan took
                )
            else:
                rel, inc = LAYOUT.flow(flow), out_incs[flow]
                self.home.ensure_table(rel, flow_schema(self.live.spec, flow), INC)
                fc = (Commit(rel, INC, tuple(adds), (), *app, (FlowVersion(flow), IncrementVersion(flow, inc))),)
                version = self.live.st.flows[flow].version
                added = self.landing.registered(flow, inc, Increment(epoch, part.counts[flow], version, producer, True))
                landed = LandResult(fc, [inc], (), (added,))
            part.produced[flow] = landed.ids
            part.commits += landed.commits
            part.written += landed.written
            part.updates += landed.updates
        return part

    def _bindings(self, stage: str, results: list[TaskResult], d: Decision) -> tuple[list[str], list[str]]:
        """The bindings files the stage keeps after the epoch, and those it drops (to delete).

        Bindings serve the next epoch (paper 001 §4.5.3) and, while they are unread, the loopback
        increments of the epoch that made them (as the connectors are once the epoch's reads are removed).
        """
        left = {flow: self.live.st.connector(stage, flow)[d.removes.get(flow, 0) :] for flow in d.removes}
        old = self.live.st.stages[stage].bindings
        kept = [rel for rel in old if self._awaited(stage, epoch_of(rel), left)]
        dropped = [rel for rel in old if rel not in kept]
        bindings = sorted(kept + [a["path"] for r in results for a in r.bindings])
        return bindings, dropped + self._stray_bindings(stage, dropped, bindings)

    def _stray_bindings(self, stage: str, dropped: list[str], live: list[str]) -> list[str]:
        """Bindings files of the epochs whose bindings are ``dropped`` that no result named: those
        of task attempts that failed after writing them (listed only when bindings are dropped)."""
        done = {epoch_of(rel) for rel in dropped}
        if not done:
            return []
        base, known = LAYOUT.bindings(stage), set(dropped) | set(live)
        return [
            rel
            for name in self.home.list_dir(base)
            if epoch_of(name) in done and (rel := f"{base}/{name}") not in known
        ]

    def _made_in(self, stage: str, flow: str, uri: str, inc: int) -> int | None:
        """The epoch of ``stage`` that wrote file ``uri`` of increment ``inc`` of ``flow`` (None: the
        flow is not one of the stage's loopback flows). A file's name says it
        (:meth:`Layout.output_prefix`); a re-framed file landed before such names were given goes
        by the epoch that opened its increment."""
        if flow not in self.live.spec.stages[stage].outputs:
            return None
        name = uri.rsplit("/", 1)[-1]
        start = LAYOUT.output_prefix(stage, 0)[:-8]  # "s<stage>-e", then the epoch's 8 digits
        digits = name[len(start) : len(start) + 8]
        if name.startswith(start) and digits.isdigit():
            return int(digits)
        epochs = self._made_epochs(stage, flow, inc)
        return min(epochs) if epochs else None

    def _made_epochs(self, stage: str, flow: str, inc: int) -> set[int]:
        """The epochs of ``stage`` that wrote records of increment ``inc`` of its loopback flow
        ``flow``: the one that opened it and (framed) every one that added to it."""
        m = self.live.st.flows[flow].incs.get(inc)
        if m is None or flow not in self.live.spec.stages[stage].outputs:
            return set()
        opened = m.producer.rpartition(":")[2]
        return {int(s) for s in m.srcs if isinstance(s, int) and not isinstance(s, bool)} | (
            {int(opened)} if opened.isdigit() else set()
        )

    def _awaited(self, stage: str, made: int | None, left: Mapping[str, list[int]]) -> bool:
        """Whether ``stage`` still has unread loopback increments with records of its epoch ``made``
        (``left``: its connectors that the epoch read from, as they are after it)."""
        spec = self.live.spec.stages[stage]
        return made is not None and any(
            made in self._made_epochs(stage, i.flow, n)
            for i in spec.inputs
            if i.flow in spec.outputs
            for n in left.get(i.flow, self.live.st.connector(stage, i.flow))
        )

    def _index_files(self, stage: str, index: dict[str, str]) -> list[str]:
        """Every index file of ``stage``'s partitions that have an ``index`` (a file and the deltas it stands on)."""
        base = LAYOUT.index(stage)
        return [f"{base}/{PART}={p}/{name}" for p in index for name in self.home.list_dir(f"{base}/{PART}={p}")]


@dataclass
class _Part:
    """What one part of an epoch's change adds up: commits, files to delete once committed or if
    abandoned, and (outputs) the increments produced and records per flow."""

    commits: list[Commit] = field(default_factory=list)
    cleanup: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    produced: dict[str, list[int]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    updates: list[SnapshotUpdate] = field(default_factory=list)  # (outputs) the increments' snapshot updates


def _placement(results: list[TaskResult]) -> dict[str, Any]:
    """Which executor ran each partition's task and how the state cache served it (kept in the history)."""
    stats = [r.stats for r in results]
    hits, lookups = (sum(int(s.get(k, 0)) for s in stats) for k in ("cache_hits", "cache_lookups"))
    return {
        "executors": {str(r.part): r.executor for r in sorted(results, key=lambda r: r.part) if r.executor},
        "cache_hits": hits,
        "cache_lookups": lookups,
        "cache_hit_rate": round(hits / lookups, 4) if lookups else None,
    }


def _report(
    stage: str,
    epoch: int,
    mode: str,
    results: list[TaskResult],
    counts: dict[str, int],
    seconds: float,
    shuffle: dict[str, int],
) -> EpochReport:
    stats = [r.stats for r in results]
    phases: dict[str, float] = {}
    for s in stats:
        for k, v in s.get("seconds", {}).items():
            phases[k] = round(phases.get(k, 0.0) + v, 3)
    return EpochReport(
        stage=stage,
        epoch=epoch,
        records_in=sum(s["in"] for s in stats),
        records_out=sum(counts.values()),
        keys_read=sum(s["state_read"] for s in stats),
        keys_written=sum(s["state_written"] for s in stats),
        seconds=seconds,
        outputs=counts,
        mode=mode,
        phases=phases,
        row_groups_read=sum(int(s.get("row_groups_read", 0)) for s in stats),
        rows_decoded=sum(int(s.get("rows_decoded", 0)) for s in stats),
        executors={r.part: r.executor for r in results if r.executor},
        cache_hits=sum(int(s.get("cache_hits", 0)) for s in stats),
        cache_lookups=sum(int(s.get("cache_lookups", 0)) for s in stats),
        copies_in=sum(int(s.get("broadcast_in", 0)) + int(s.get("multicast_in", 0)) for s in stats),
        bindings_in=sum(int(s.get("bindings_in", 0)) for s in stats),
        delivered=sum(int(s.get("delivered", 0)) for s in stats),
        shuffle_records=shuffle.get("records"),
        shuffle_bytes=shuffle.get("bytes"),
        columnar_tasks=sum(int(s.get("columnar", 0)) for s in stats),
    )
