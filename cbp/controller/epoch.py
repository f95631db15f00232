"""One stage epoch, driven from the controller: intention, Spark job, commits (paper 001 §4.3).

Before a stage epoch runs, its *intention* (what it reads and removes, the increment ids it will
produce, the connectors it touches) is written; the Spark job (:mod:`cbp.engine.driver.job`) then writes
only new files, and the epoch is committed as one change (:mod:`.journal`). A runner that dies
leaves the intention: the next ``cbp run`` re-runs the epoch with the same decision, or drops
it if its inputs changed (:mod:`.intentions`).

Reads: ``live.spec`` and ``live.st`` (the stage's epoch, state version, index, bindings; its
input connectors and increments), the input increments' and state table's files, the tuning.
Writes: through the journal, one change per epoch: the state table and output flow tables (Delta
commits), ``live.st`` (the stage's epoch, runnable state, index, layout and bindings; its input
connectors; output increments, via :class:`~.landing.Landing`), the epoch's history entry and its
intention (:class:`~.intentions.Intentions`); deletes index and binding files no one reads again.
"""

from __future__ import annotations

import time
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
from .codehash import note_code
from .intentions import Intentions
from .journal import ENTRY, Journal
from .landing import Landing, flow_schema
from .live import LazySpark, Live, Tuning
from .records import Decision, EpochReport
from .snapshot import Increment

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
        self.epoch_timeout: float | None = None  # seconds per stage epoch of the current run (cbp run --epoch-timeout)
        self.run_info: dict[str, Any] | None = (
            None  # the cbp run under way (pid, host, started, command), for the history
        )

    # ------------------------------------------------------------------ one stage epoch
    def _state_table_schema(self, spec: StageSpec) -> pa.Schema:
        rk = [pa.field("_rk", pa.string())] if spec.row_key else []  # keyed rows (cbp.engine.task.keyedstate)
        return pa.schema([pa.field(PART, pa.int32())] + list(STATE_META) + rk + list(spec.state_schema.arrow))  # type: ignore[union-attr]

    def run_epoch(self, stage: str, d: Decision, *, intention: dict[str, Any] | None = None) -> EpochReport:
        """Run and commit one epoch of ``stage``: state, output increments and connectors, all or nothing."""
        with self.journal.transaction():
            return self._run_epoch(stage, d, intention)

    def _run_epoch(self, stage: str, d: Decision, intention: dict[str, Any] | None) -> EpochReport:
        spec = self.live.spec.stages[stage]
        epoch = self.live.st.stages[stage].epoch + 1
        t0 = time.perf_counter()
        inputs: dict[str, list[int]] = {}
        input_files: dict[int, list[str]] = {}
        made_in: dict[
            str, int
        ] = {}  # loopback files -> the epoch of this stage that wrote them (whose bindings deliver their multicasts)
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
            out_incs = {f: int(i) for f, i in intention["out_incs"].items()}
            for f, i in out_incs.items():
                self.live.st.flows[f].next_inc = max(self.live.st.flows[f].next_inc, i + 1)
            self.intentions.discard_files(stage, epoch, out_incs)
        else:
            out_incs = {f: self.landing.allocate(f, 1)[0] for f in spec.outputs}
        self.intentions.write(stage, epoch, d, inputs, out_incs)
        wanted = {epoch - 1, *made_in.values()}
        bindings = [self.home.uri(rel) for rel in self.live.st.stages[stage].bindings if epoch_of(rel) in wanted]
        try:
            plan, state_uris = self._plan(stage, epoch, out_incs, inputs, made_in, bindings)
            shuffle: dict[str, int] = {}
            results = run_stage_epoch(
                self.spark.get(),
                plan,
                input_files,
                state_uris,
                state_needs_dedupe=self.live.st.stages[stage].layout != "blackbox",
                shuffle=shuffle,
            )
            faults.point("epoch:ran")
            commits, cleanup, counts, written = self._epoch_commits(stage, epoch, d, results, inputs, out_incs)
            self.journal.commit(
                "epoch", f"stage '{stage}' epoch {epoch}", commits, stage=stage, cleanup=cleanup, written=written
            )
        except BaseException:
            try:
                committing = self.home.pending() is not None  # then the change is finished later, not dropped
            except OSError:
                committing = True
            if not committing:
                self.intentions.abandon_quietly(stage, epoch, out_incs)
            raise
        return _report(stage, epoch, self.mode, results, counts, time.perf_counter() - t0, shuffle)

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
            if self.mode == "blackbox":  # read by Spark's Delta reader, or as these files without it
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
            master=self.spark.get().sparkContext.master,
            new_records=sum(m.records for m in known if m is not None),
            records_known=all(m is not None for m in known),
            made_in=made_in,
            bindings=bindings,
            timeout=min(limits) if limits else None,
        )
        return plan, state_uris

    def _epoch_commits(
        self,
        stage: str,
        epoch: int,
        d: Decision,
        results: list[TaskResult],
        inputs: dict[str, list[int]],
        out_incs: dict[str, int],
    ) -> tuple[list[dict[str, Any]], list[str], dict[str, int], list[str]]:
        """Turn the tasks' results into the epoch's Delta commits, the next snapshot (in ``self.live.st``)
        and its history entry.

        Returns the commits, the files to delete once committed, the records per output flow, and
        the files written here (re-framed outputs), to delete if the epoch is abandoned.
        """
        spec = self.live.spec.stages[stage]
        sst = self.live.st.stages[stage]
        app = f"cbp:{stage}"
        txn = (
            self.live.st.seq + 1
        )  # the change's sequence number: Delta transaction version, never reused (also after a rewind)
        entry = LAYOUT.epoch_entry(stage, epoch)
        commits: list[dict[str, Any]] = []
        cleanup: list[str] = []
        written: list[str] = []
        if spec.state_schema is not None:
            adds = [a for r in results for a in r.state_adds]
            removes = [x for r in results for x in r.state_removes]
            if self.mode == "blackbox" or adds or removes:
                state_rel = LAYOUT.state(stage)
                self.home.ensure_table(state_rel, self._state_table_schema(spec), PART)
                commits.append(
                    {
                        "table": state_rel,
                        "partition_by": PART,
                        "adds": adds,
                        "removes": removes,
                        "overwrite": self.mode == "blackbox",
                        "app": app,
                        "version": txn,
                        "targets": [["stages", stage, "state_version"], [ENTRY, entry, "state_version"]],
                    }
                )
            old_index = dict(sst.index)
            sst.index = {str(r.part): r.index for r in results if r.index} if self.mode == "direct" else {}
            sst.layout = self.mode
            # index files no new index stands on: what the tasks say, or (black-box) every one
            cleanup += (
                [rel for r in results for rel in r.index_garbage]
                if self.mode == "direct"
                else self._index_files(stage, old_index)
            )
        produced: dict[str, list[int]] = {}
        counts: dict[str, int] = {}
        for flow in spec.outputs:
            adds = [a for r in results for a in r.outputs.get(flow, [])]
            counts[flow] = sum(int(a["rows"]) for a in adds)
            if not adds:
                continue  # an epoch that writes nothing to a flow adds no increment to it
            frame_by = self.live.spec.flows[flow].frame_by
            if frame_by is not None and frame_by.field is not None:  # framed by the tasks: join their runs
                runs = [
                    (a[FRAME_KEY], a) for r in sorted(results, key=lambda r: r.part) for a in r.outputs.get(flow, [])
                ]
                fc, produced[flow] = self.landing.land_runs(
                    flow, runs, producer=f"{stage}:{epoch}", prior_frame=epoch, app=(app, txn)
                )
                commits += fc
                continue
            if frame_by is not None:  # a FrameBy function threads its state through the epoch's records: framed here
                data, task_files = self.landing.read_task_files(flow, adds)
                cleanup += task_files
                fc, produced[flow], w = self.landing.land(
                    flow,
                    data,
                    close=False,
                    producer=f"{stage}:{epoch}",
                    prior_frame=epoch,
                    app=(app, txn),
                    what=f"stage '{stage}' epoch {epoch}",
                    prefix=LAYOUT.output_prefix(stage, epoch),
                )
                commits += fc
                written += w
                continue
            rel = LAYOUT.flow(flow)
            self.home.ensure_table(rel, flow_schema(self.live.spec, flow), INC)
            commits.append(
                {
                    "table": rel,
                    "partition_by": INC,
                    "adds": adds,
                    "removes": [],
                    "app": app,
                    "version": txn,
                    "targets": [["flows", flow, "version"], ["flows", flow, "incs", str(out_incs[flow]), "version"]],
                }
            )
            self.landing.register(
                flow,
                out_incs[flow],
                Increment(epoch, counts[flow], self.live.st.flows[flow].version, f"{stage}:{epoch}", True),
            )
            produced[flow] = [out_incs[flow]]
        for flow, n in d.removes.items():
            del self.live.st.connector(stage, flow)[:n]
        # bindings serve the next epoch (paper 001 §4.5.3) and, while they are unread, the loopback increments of the epoch that made them
        kept = [rel for rel in sst.bindings if self._awaited(stage, epoch_of(rel))]
        dropped = [rel for rel in sst.bindings if rel not in kept]
        sst.bindings = sorted(kept + [a["path"] for r in results for a in r.bindings])
        cleanup += dropped + self._stray_bindings(stage, dropped, sst.bindings)
        sst.epoch = epoch
        sst.runnable_state = d.state
        self.journal.entry(
            entry,
            {
                "state_version": sst.state_version,
                "inputs": inputs,
                "outputs": produced,
                "records": {f: counts[f] for f in produced},
                "placement": _placement(results),
                "code": note_code(self.live.st, spec, epoch),
                "seq": txn,
                "run": self.run_info,
                "at": round(time.time(), 3),
            },
        )
        return commits, cleanup, counts, written

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

    def _awaited(self, stage: str, made: int | None) -> bool:
        """Whether ``stage`` still has unread loopback increments with records of its epoch ``made``."""
        spec = self.live.spec.stages[stage]
        return made is not None and any(
            made in self._made_epochs(stage, i.flow, n)
            for i in spec.inputs
            if i.flow in spec.outputs
            for n in self.live.st.connector(stage, i.flow)
        )

    def _index_files(self, stage: str, index: dict[str, str]) -> list[str]:
        """Every index file of ``stage``'s partitions that have an ``index`` (a file and the deltas it stands on)."""
        base = LAYOUT.index(stage)
        return [f"{base}/{PART}={p}/{name}" for p in index for name in self.home.list_dir(f"{base}/{PART}={p}")]


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
        executors={r.part: r.executor for r in results if r.executor},  # type: ignore[misc]
        cache_hits=sum(int(s.get("cache_hits", 0)) for s in stats),
        cache_lookups=sum(int(s.get("cache_lookups", 0)) for s in stats),
        copies_in=sum(int(s.get("broadcast_in", 0)) + int(s.get("multicast_in", 0)) for s in stats),
        bindings_in=sum(int(s.get("bindings_in", 0)) for s in stats),
        delivered=sum(int(s.get("delivered", 0)) for s in stats),
        shuffle_records=shuffle.get("records"),
        shuffle_bytes=shuffle.get("bytes"),
        columnar_tasks=sum(int(s.get("columnar", 0)) for s in stats),
    )
