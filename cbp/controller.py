"""The incremental dataflow controller (IDC, paper 001 §4.1–4.2).

It keeps, per stage input, a *flow connector*: the ordered queue of increments available to
that stage with their framing keys. It asks each stage's Runnable which increments to read and
remove, runs the runnable stages of a possibly cyclic graph round by round until none is
runnable (or an epoch budget is spent), commits each stage epoch, and garbage-collects
increments that no connector references. Its run-time state is a JSON snapshot in the home,
written after every change (:meth:`cbp.storage.Home.write_controller`).

    >>> from cbp.spec import load_spec                                  # doctest: +SKIP
    >>> ctl = Controller(load_spec("flows/url_count.yaml"), Home("state/url_count"))  # doctest: +SKIP
    >>> ctl.feed("urls", [{"url": "http://a/"}]); ctl.run()             # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import write_deltalake

from .bipindex import ROW_GROUP, STATE_META, StateMeta, latest_rows
from .errors import CbpError, InputError, RuntimeStateError, SpecError, UsageError, UserCodeError
from .model import normalize_runnable_result
from .physical import run_stage_epoch
from .spec import PipelineSpec, StageSpec
from .storage import INC, PART, SRC, Home
from .task import TaskPlan

__all__ = ["Controller", "EpochReport", "Decision"]


@dataclass
class EpochReport:
    """What one stage epoch did (one line of ``cbp run``)."""

    stage: str
    epoch: int
    records_in: int
    records_out: int
    keys_read: int
    keys_written: int
    seconds: float
    outputs: dict[str, int] = field(default_factory=dict)
    mode: str = "direct"
    phases: dict[str, float] = field(default_factory=dict)  # task seconds per phase, summed over tasks

    def line(self) -> str:
        outs = ", ".join(f"{f}={n}" for f, n in self.outputs.items()) or "-"
        return (f"{self.stage:<16} epoch {self.epoch:>4}  in {self.records_in:>9}  out {self.records_out:>9} ({outs})  "
                f"state read {self.keys_read:>8}  written {self.keys_written:>8}  {self.seconds:7.2f}s")


@dataclass
class Decision:
    """A Runnable's answer: how many of the oldest complete increments to read and remove per flow."""

    reads: dict[str, int]
    removes: dict[str, int]
    state: Any


def _new_snapshot(spec: PipelineSpec) -> dict[str, Any]:
    return {
        "seq": 0,
        "pipeline": spec.name,
        "flows": {f: {"next_inc": 1, "version": None, "feeds": 0, "incs": {}, "frame_state": None} for f in spec.flows},
        "connectors": {_conn(s, i.flow): [] for s, st in spec.stages.items() for i in st.inputs},
        "stages": {s: {"epoch": 0, "runnable_state": None, "state_version": None, "layout": "direct", "index": {}, "history": {}} for s in spec.stages},
    }


def _check_storable(value: Any, what: str) -> None:
    """Runnable states, frame states and framing keys live in the JSON controller snapshot."""
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise UserCodeError(f"{what} cannot be stored as JSON ({e}); use dicts, lists, strings, numbers, booleans "
                            "or None (tuples come back as lists); nothing was run or landed", code="not-storable") from e


def _signature(schema: Any) -> dict[str, str]:
    return {name: str(ft) for name, ft in schema.fields.items()}


def _conn(stage: str, flow: str) -> str:
    return f"{stage}.{flow}"


class Controller:
    """Connectors, runnability, scheduling and epoch commits for one pipeline in one home."""

    def __init__(self, spec: PipelineSpec, home: Home, *, mode: Optional[str] = None, spark: Any = None,
                 max_state_files: int = 8, backpressure: int = 4, state_row_group: int = ROW_GROUP,
                 state_cache_mb: Optional[float] = None) -> None:
        self.spec = spec
        self.home = home
        self.mode = mode or spec.mode
        if self.mode not in ("direct", "blackbox"):
            raise CbpError(f"unknown mode '{self.mode}'; use 'direct' or 'blackbox'")
        self._spark = spark
        self.max_state_files = max_state_files
        self.state_row_group = state_row_group
        self.state_cache_mb = state_cache_mb
        self.backpressure = backpressure
        self._checked_ids: set[str] = set()
        snap = home.read_controller()
        self.st = snap if snap is not None else _new_snapshot(spec)
        self._reconcile()

    # ------------------------------------------------------------------ snapshot
    def _reconcile(self) -> None:
        """Adopt YAML changes that keep the pipeline's shape: new flows, stages or inputs start empty."""
        fresh = _new_snapshot(self.spec)
        for k in ("flows", "connectors", "stages"):
            for name, v in fresh[k].items():
                self.st[k].setdefault(name, v)
        if self.st.get("pipeline") != self.spec.name:
            raise RuntimeStateError(f"home {self.home.location} belongs to pipeline '{self.st.get('pipeline')}', not '{self.spec.name}'; use another --home")
        shapes = self.st.setdefault("shapes", {})
        for name, fl in self.spec.flows.items():
            self._check_shape(shapes, f"flow:{name}", f"flow '{name}'", "increments",
                              {"schema": _signature(fl.schema), "framed": fl.frame_by is not None}, self.st["flows"][name]["version"] is not None)
        for name, stage in self.spec.stages.items():
            if stage.state_schema is not None:
                self._check_shape(shapes, f"state:{name}", f"stage '{name}'", "state",
                                  {"schema": _signature(stage.state_schema), "partitions": stage.partitions}, self.st["stages"][name]["state_version"] is not None)

    def _check_shape(self, shapes: dict[str, Any], key: str, what: str, data: str, now: dict[str, Any], stored: bool) -> None:
        """Refuse a YAML whose schema, framing or partition count no longer fits the data in the home."""
        before = shapes.get(key)
        if before is None or not stored or before == now:
            shapes[key] = now
            return
        diffs = []
        old_s, new_s = before["schema"], now["schema"]
        diffs += [f"field '{f}' added" for f in new_s if f not in old_s]
        diffs += [f"field '{f}' removed" for f in old_s if f not in new_s]
        diffs += [f"field '{f}' changed from {old_s[f]} to {new_s[f]}" for f in new_s if f in old_s and old_s[f] != new_s[f]]
        if before.get("partitions") != now.get("partitions"):
            diffs.append(f"partitions changed from {before.get('partitions')} to {now.get('partitions')}")
        if before.get("framed") != now.get("framed"):
            diffs.append("frame_by " + ("added" if now.get("framed") else "removed"))
        raise SpecError(str(self.spec.path), f"{what} no longer fits its {data} stored in {self.home.location}: {'; '.join(diffs)}. "
                        "cbp does not migrate stored data: restore the previous definition, or start a new --home", code="home-mismatch")

    def refresh(self) -> None:
        """Re-read the newest snapshot (another process or Pipeline object may have moved on)."""
        snap = self.home.read_controller()
        if snap is not None and snap["seq"] != self.st["seq"]:
            self.st = snap
            self._reconcile()

    def _save(self) -> None:
        self.st["seq"] += 1
        self.home.write_controller(self.st)

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from .sparksession import get_spark

            self._spark = get_spark()
        return self._spark

    # ------------------------------------------------------------------ increments
    def _flow_rel(self, flow: str) -> str:
        return f"flows/{flow}"

    def _flow_schema(self, flow: str) -> pa.Schema:
        return pa.schema(self._flow_extra(flow) + list(self.spec.flows[flow].schema.arrow))

    def _flow_extra(self, flow: str) -> list[pa.Field]:
        """Columns cbp adds to a flow's table: the increment id, and for a framed flow the feed or
        producing epoch of each record (a framed increment can span several feeds or epochs)."""
        return [pa.field(INC, pa.int64())] + ([pa.field(SRC, pa.int64())] if self.spec.flows[flow].frame_by is not None else [])

    def _allocate(self, flow: str, n: int) -> list[int]:
        """New increment ids, never reusing one a crashed run may have left in the table."""
        fs = self.st["flows"][flow]
        start = fs["next_inc"]
        if flow not in self._checked_ids:  # once per process: skip ids a crashed run left in the table
            self._checked_ids.add(flow)
            dt = self.home.table(self._flow_rel(flow))
            used = [int(p[INC]) for p in dt.partitions()] if dt is not None else []
            if used:
                start = max(start, max(used) + 1)
        fs["next_inc"] = start + n
        return list(range(start, start + n))

    def _register(self, flow: str, inc: int, frame: Any, records: int, version: int, producer: str, complete: bool) -> None:
        self.st["flows"][flow]["incs"][str(inc)] = {
            "frame": frame, "records": records, "version": version, "producer": producer, "complete": complete, "gc": False,
        }
        for consumer in self.spec.flows[flow].consumers:
            self.st["connectors"][_conn(consumer, flow)].append(inc)

    def feed(self, flow: str, records: list[dict[str, Any]] | pa.Table, *, close: bool = False) -> list[int]:
        """Land validated records (dicts, or an Arrow table of the fields as stored) on external
        flow ``flow``; return the increment ids they went to.

        With the default framing, a feed is one increment. With ``frame_by``, consecutive records
        with the same framing key form an increment, which is complete once a record with another
        key arrives on the flow, or when ``close`` is given (the paper's missing punctuation).
        """
        fl = self.spec.flow(flow)
        if not fl.external:
            raise InputError(f"flow '{flow}' is produced by stage '{fl.producer}'; only external flows (external: true) can be fed", code="not-external")
        data = records if isinstance(records, pa.Table) else fl.schema.to_arrow(records)
        with self._locked(), self._transaction():
            fs = self.st["flows"][flow]
            fs["feeds"] += 1
            ids = self._land(flow, data, close=close, producer=f"feed:{fs['feeds']}", prior_frame=fs["feeds"])
            self._save()
        return ids

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the home's lock and work on the newest snapshot (see :meth:`Home.lock`)."""

        def waiting() -> None:
            print(f"cbp: waiting for another process to finish its change to {self.home.location} ...", file=sys.stderr, flush=True)

        with self.home.lock(waiting):
            self.refresh()
            yield

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """Changes to the snapshot in the block are dropped if it raises (nothing half-applied)."""
        before = copy.deepcopy(self.st)
        try:
            yield
        except BaseException:
            self.st = before
            raise

    def _land(self, flow: str, data: pa.Table, *, close: bool, producer: str, prior_frame: Any) -> list[int]:
        """Frame validated records (an Arrow table of the flow's fields, as stored) into increments
        of ``flow``, write them (one Delta commit) and enqueue them."""
        fl = self.spec.flows[flow]
        fs = self.st["flows"][flow]
        incs = fs["incs"]
        open_inc = next((int(i) for i, m in incs.items() if not m["complete"] and not m["gc"]), None)
        runs: list[list[Any]] = []  # [framing key, first row, row count], consecutive
        if fl.frame_by is None:
            if data.num_rows:
                runs.append([prior_frame, 0, data.num_rows])
        else:
            fstate = fs["frame_state"]
            i = 0
            for batch in data.to_batches(max_chunksize=65536):
                for rec in batch.to_pylist():
                    try:
                        key, fstate = fl.frame_by(fl.schema.from_storage(rec), fstate)
                    except Exception as e:
                        raise UserCodeError(f"flow '{flow}' record {i + 1} ({producer}): frame_by '{fl.frame_by.text}' raised {type(e).__name__}: {e}; nothing was landed") from e
                    if runs and runs[-1][0] == key:
                        runs[-1][2] += 1
                    else:
                        runs.append([key, i, 1])
                    i += 1
            _check_storable(fstate, f"flow '{flow}': frame_by '{fl.frame_by.text}' returned a state that")
            for key, first, _ in runs:
                rec = fl.schema.from_storage(data.slice(first, 1).to_pylist()[0])
                _check_storable(key, f"flow '{flow}': frame_by '{fl.frame_by.text}' returned a framing key (for record {rec!r:.200}) that")
            fs["frame_state"] = fstate
        # the open increment takes the first run if it has the same framing key
        assignments: list[tuple[int, Any, int, bool]] = []  # inc, frame, rows, is_new
        if open_inc is not None and runs and incs[str(open_inc)]["frame"] == runs[0][0]:
            key, _, count = runs.pop(0)
            assignments.append((open_inc, key, count, False))
        elif open_inc is not None and runs:
            incs[str(open_inc)]["complete"] = True  # a later frame arrived
        new_ids = self._allocate(flow, len(runs))
        assignments += [(i, key, count, True) for i, (key, _, count) in zip(new_ids, runs)]
        version = fs["version"]
        if data.num_rows:
            counts = [a[2] for a in assignments]
            columns = [pa.array(np.repeat([a[0] for a in assignments], counts), pa.int64())]
            if fl.frame_by is not None:
                columns.append(pa.array(np.full(data.num_rows, prior_frame, dtype=np.int64)))
            table = pa.Table.from_arrays(columns + list(data.columns), schema=self._flow_schema(flow))
            self.home.ensure_table(self._flow_rel(flow), self._flow_schema(flow), INC)
            try:
                write_deltalake(self.home.uri(self._flow_rel(flow)), table, mode="append", partition_by=[INC])
            except Exception as e:
                raise RuntimeStateError(f"flow '{flow}': could not write the increment to {self.home.uri(self._flow_rel(flow))}: {e}") from e
            version = self.home.table(self._flow_rel(flow)).version()  # type: ignore[union-attr]
            fs["version"] = version
        for n, (inc, key, count, is_new) in enumerate(assignments):
            last = n == len(assignments) - 1
            complete = fl.frame_by is None or not last or close
            if is_new:
                self._register(flow, inc, key, count, version, producer, complete)
                incs[str(inc)]["srcs"] = [prior_frame]
            else:
                m = incs[str(inc)]
                m.update(records=m["records"] + count, version=version, complete=complete, srcs=m.get("srcs", []) + [prior_frame])
        if close and not assignments and open_inc is not None:
            incs[str(open_inc)]["complete"] = True
        return [a[0] for a in assignments]

    # ------------------------------------------------------------------ runnability
    def frames(self, stage: str) -> dict[str, list[Any]]:
        """Framing keys of the complete increments at the head of each input connector."""
        out: dict[str, list[Any]] = {}
        for inp in self.spec.stages[stage].inputs:
            incs = self.st["flows"][inp.flow]["incs"]
            keys = []
            for i in self.st["connectors"][_conn(stage, inp.flow)]:
                m = incs[str(i)]
                if not m["complete"]:
                    break
                keys.append(m["frame"])
            out[inp.flow] = keys
        return out

    def decide(self, stage: str, *, keep_state: bool = False) -> Optional[Decision]:
        """Ask the stage's Runnable; None when the stage is not runnable.

        With ``keep_state`` (the scheduler's calls), a new runnable state returned with a "not
        runnable" answer is saved too; a runnable decision carries its state to the epoch's commit.
        """
        spec = self.spec.stages[stage]
        frames = self.frames(stage)
        where = f"stage '{stage}' runnable '{spec.runnable_name}'"
        try:
            result = spec.runnable({k: list(v) for k, v in frames.items()}, copy.deepcopy(self.st["stages"][stage]["runnable_state"]))
            reads, removes, state = normalize_runnable_result(result, frames, where)
        except (TypeError, ValueError) as e:
            raise UserCodeError(str(e) if where in str(e) else f"{where}: {e}") from e
        except Exception as e:
            raise UserCodeError(f"{where} raised {type(e).__name__}: {e}") from e
        _check_storable(state, f"{where} returned a state that")
        if not reads:
            sst = self.st["stages"][stage]
            stored = json.loads(json.dumps(state)) if keep_state else None  # as it will read back
            if keep_state and stored != sst["runnable_state"]:
                sst["runnable_state"] = stored
                self._save()
            return None
        return Decision(reads, removes, state)

    def _backpressured(self, stage: str) -> bool:
        outs = [f for f in self.spec.stages[stage].outputs if self.spec.flows[f].consumers]
        if not outs:
            return False
        return all(
            len(self.st["connectors"][_conn(c, f)]) >= self.backpressure
            for f in outs for c in self.spec.flows[f].consumers
        )

    # ------------------------------------------------------------------ scheduling
    def run(self, max_epochs: Optional[int] = None, on_epoch: Optional[Callable[[EpochReport], None]] = None,
            on_start: Optional[Callable[[str, int], None]] = None) -> list[EpochReport]:
        """Run runnable stages round by round until none is runnable or ``max_epochs`` stage epochs ran.

        Each round gives every runnable stage (in dataflow order) one epoch, so no stage starves;
        a stage whose every downstream connector already holds ``backpressure`` increments waits
        while others can run.
        """
        reports: list[EpochReport] = []
        while max_epochs is None or len(reports) < max_epochs:
            ran = False
            held: list[str] = []  # stages skipped for backpressure in this round
            for honor_backpressure in (True, False):
                for stage in self.spec.order if honor_backpressure else held:
                    if max_epochs is not None and len(reports) >= max_epochs:
                        break
                    with self._locked():  # feeds may land between epochs; each epoch sees them
                        if honor_backpressure and self._backpressured(stage):
                            held.append(stage)
                            continue
                        d = self.decide(stage, keep_state=True)
                        if d is None:
                            continue
                        if on_start:
                            on_start(stage, self.st["stages"][stage]["epoch"] + 1)
                        rep = self.run_epoch(stage, d)
                    reports.append(rep)
                    if on_epoch:
                        on_epoch(rep)
                    ran = True
                if ran:
                    break
            if not ran:
                break
        with self._locked():
            self.collect_garbage()
        return reports

    # ------------------------------------------------------------------ one stage epoch
    def _state_rel(self, stage: str) -> str:
        return f"stages/{stage}/state"

    def _state_table_schema(self, spec: StageSpec) -> pa.Schema:
        return pa.schema([pa.field(PART, pa.int32())] + list(STATE_META) + list(spec.state_schema.arrow))  # type: ignore[union-attr]

    def run_epoch(self, stage: str, d: Decision) -> EpochReport:
        """Run and commit one epoch of ``stage``: state, output increments and connectors."""
        with self._transaction():
            return self._run_epoch(stage, d)

    def _run_epoch(self, stage: str, d: Decision) -> EpochReport:
        spec = self.spec.stages[stage]
        sst = self.st["stages"][stage]
        epoch = sst["epoch"] + 1
        t0 = time.perf_counter()

        inputs: dict[str, list[int]] = {}
        input_files: dict[int, list[str]] = {}
        for idx, inp in enumerate(spec.inputs):
            n = d.reads.get(inp.flow, 0)
            if not n:
                continue
            ids = self.st["connectors"][_conn(stage, inp.flow)][:n]
            inputs[inp.flow] = ids
            input_files[idx] = self._increment_uris(inp.flow, ids)

        out_incs = {f: self._allocate(f, 1)[0] for f in spec.outputs}
        parts: dict[int, StateMeta] = {}
        state_uris: Optional[list[str]] = None
        state_rel = self._state_rel(stage)
        if spec.state_schema is not None and sst["state_version"] is not None:
            files = self.home.table_files(state_rel, sst["state_version"])
            if self.mode == "blackbox":
                state_uris = [self.home.uri(state_rel, f["path"]) for f in files]
            else:
                for f in files:
                    parts.setdefault(int(f["partition"]), StateMeta()).files.append(f)
                for p, rel in (sst["index"] if sst["layout"] == "direct" else {}).items():
                    parts.setdefault(int(p), StateMeta()).index = rel
        plan = TaskPlan(
            home=self.home, stage=spec, epoch=epoch, mode=self.mode,
            out_schemas={f: self.spec.flows[f].schema for f in spec.outputs}, out_incs=out_incs,
            input_schemas=[self.spec.flows[i.flow].schema for i in spec.inputs], state_rel=state_rel,
            parts=parts, max_files=self.max_state_files, row_group=self.state_row_group, cache_mb=self.state_cache_mb,
        )
        results = run_stage_epoch(self.spark, plan, input_files, state_uris, state_needs_dedupe=sst["layout"] != "blackbox")

        # ---- commit: state, then outputs, then the controller snapshot
        app = f"cbp:{stage}"
        if spec.state_schema is not None:
            adds = [a for r in results for a in r["state_adds"]]
            removes = [x for r in results for x in r["state_removes"]]
            if self.mode == "blackbox" or adds or removes:
                sst["state_version"] = self.home.commit_files(
                    state_rel, self._state_table_schema(spec), PART, adds, removes,
                    overwrite=self.mode == "blackbox", app_id=app, app_version=epoch,
                )
            old_index = dict(sst["index"])
            sst["index"] = {str(r["part"]): r["index"] for r in results if r.get("index")} if self.mode == "direct" else {}
            sst["layout"] = self.mode
        produced: dict[str, list[int]] = {}
        counts: dict[str, int] = {}
        for flow in spec.outputs:
            adds = [a for r in results for a in r["outputs"].get(flow, [])]
            n = sum(int(a["rows"]) for a in adds)
            counts[flow] = n
            if not adds:
                continue  # an epoch that writes nothing to a flow adds no increment to it
            if self.spec.flows[flow].frame_by is not None:  # re-frame the epoch's records by the flow's FrameBy
                produced[flow] = self._land(flow, self._read_task_files(flow, adds), close=False, producer=f"{stage}:{epoch}", prior_frame=epoch)
                continue
            version = self.home.commit_files(self._flow_rel(flow), self._flow_schema(flow), INC, adds, app_id=app, app_version=epoch)
            self.st["flows"][flow]["version"] = version
            self._register(flow, out_incs[flow], epoch, n, version, f"{stage}:{epoch}", True)
            produced[flow] = [out_incs[flow]]
        for flow, n in d.removes.items():
            q = self.st["connectors"][_conn(stage, flow)]
            del q[:n]
        sst["epoch"] = epoch
        sst["runnable_state"] = d.state
        sst["history"][str(epoch)] = {"state_version": sst["state_version"], "inputs": inputs, "outputs": produced}
        self._save()
        if spec.state_schema is not None:
            for p, rel in old_index.items():
                if rel and sst["index"].get(p) != rel:
                    self.home.delete_file(rel)

        stats = [r["stats"] for r in results]
        phases: dict[str, float] = {}
        for s in stats:
            for k, v in s.get("seconds", {}).items():
                phases[k] = round(phases.get(k, 0.0) + v, 3)
        return EpochReport(
            stage=stage, epoch=epoch,
            records_in=sum(s["in"] for s in stats), records_out=sum(counts.values()),
            keys_read=sum(s["state_read"] for s in stats), keys_written=sum(s["state_written"] for s in stats),
            seconds=time.perf_counter() - t0, outputs=counts, mode=self.mode, phases=phases,
        )

    def _read_task_files(self, flow: str, adds: list[dict[str, Any]]) -> pa.Table:
        """The records of files a task wrote (in partition order) that will not be committed as they are."""
        schema = self.spec.flows[flow].schema
        parts = []
        for a in sorted(adds, key=lambda a: a["path"]):
            rel = f"{self._flow_rel(flow)}/{a['path']}"
            parts.append(pq.read_table(self.home.path(rel), filesystem=self.home.fs).select(list(schema.fields)).cast(schema.arrow))
            self.home.delete_file(rel)
        return pa.concat_tables(parts) if parts else schema.arrow.empty_table()

    def _increment_uris(self, flow: str, ids: list[int]) -> list[str]:
        by_version: dict[int, list[int]] = {}
        for i in ids:
            m = self.st["flows"][flow]["incs"][str(i)]
            v = self.st["flows"][flow]["version"] if not m["gc"] else m["version"]
            by_version.setdefault(v, []).append(i)
        uris = []
        for v, incs in by_version.items():
            wanted = set(incs)
            for f in self.home.table_files(self._flow_rel(flow), v):
                if int(f["partition"]) in wanted:
                    uris.append(self.home.uri(self._flow_rel(flow), f["path"]))
        return uris

    # ------------------------------------------------------------------ garbage collection
    def collect_garbage(self) -> list[tuple[str, int]]:
        """Drop increments no connector references from flows that have readers."""
        dropped: list[tuple[str, int]] = []
        for flow, fs in self.st["flows"].items():
            consumers = self.spec.flows[flow].consumers if flow in self.spec.flows else ()
            if not consumers or fs["version"] is None:
                continue
            referenced = {i for c in consumers for i in self.st["connectors"][_conn(c, flow)]}
            dead = [int(i) for i, m in fs["incs"].items() if not m["gc"] and m["complete"] and int(i) not in referenced]
            if not dead:
                continue
            dt = self.home.table(self._flow_rel(flow))
            assert dt is not None
            dt.delete(f"{INC} IN ({', '.join(str(i) for i in dead)})")
            fs["version"] = self.home.table(self._flow_rel(flow)).version()  # type: ignore[union-attr]
            for i in dead:
                fs["incs"][str(i)]["gc"] = True
                dropped.append((flow, i))
        if dropped:
            self._save()
        return dropped

    # ------------------------------------------------------------------ reading results
    def state_records(self, stage: str, epoch: Optional[int] = None) -> list[dict[str, Any]]:
        """The stage's state records after ``epoch`` (default: the latest), sorted by key."""
        self.refresh()
        spec = self.spec.stage(stage)
        if spec.state_schema is None:
            raise UsageError(f"stage '{stage}' has no state (no 'state:' in the YAML)", code="no-state")
        sst = self.st["stages"][stage]
        if epoch is None:
            version = sst["state_version"]
        else:
            h = sst["history"].get(str(epoch))
            if h is None:
                raise UsageError(f"stage '{stage}' has not run epoch {epoch} (epochs run: {sst['epoch']})", code="unknown-epoch")
            version = h["state_version"]
        if version is None:
            return []
        dt = self.home.table(self._state_rel(stage), version)
        rows = latest_rows(pa.table(dt.to_pyarrow_table()))  # type: ignore[union-attr]
        rows = rows.sort_by([("_key", "ascending")])
        return [spec.state_schema.from_storage(r) for r in rows.select(list(spec.state_schema.fields)).to_pylist()]

    def output_records(self, flow: str, epoch: Optional[int] = None) -> list[dict[str, Any]]:
        """Records of the flow's increments (only those produced by its stage's ``epoch`` when given)."""
        self.refresh()
        fl = self.spec.flow(flow)
        fs = self.st["flows"][flow]
        if epoch is not None:
            if fl.producer is None and not 1 <= epoch <= fs["feeds"]:
                raise UsageError(f"external flow '{flow}' has had {fs['feeds']} feed(s); --epoch N picks the Nth (1..{fs['feeds']})", code="unknown-epoch")
            if fl.producer is not None and str(epoch) not in self.st["stages"][fl.producer]["history"]:
                raise UsageError(f"stage '{fl.producer}' (producer of '{flow}') has not run epoch {epoch} (epochs run: {self.st['stages'][fl.producer]['epoch']})", code="unknown-epoch")
            if fl.frame_by is not None:  # a framed increment may hold records of several feeds/epochs
                ids = sorted(int(i) for i, m in fs["incs"].items() if epoch in m.get("srcs", []))
            elif fl.producer is None:
                ids = [int(i) for i, m in fs["incs"].items() if m["producer"] == f"feed:{epoch}"]
            else:
                ids = self.st["stages"][fl.producer]["history"][str(epoch)]["outputs"].get(flow, [])
        else:
            ids = sorted(int(i) for i in fs["incs"])
        by_version: dict[int, list[int]] = {}  # live increments at the current version, collected ones by time travel
        for inc in ids:
            m = fs["incs"][str(inc)]
            by_version.setdefault(fs["version"] if not m["gc"] else m["version"], []).append(inc)
        parts = []
        for v, incs in by_version.items():
            dt = self.home.table(self._flow_rel(flow), v)
            parts.append(pa.table(dt.to_pyarrow_table(partitions=[(INC, "in", [str(i) for i in incs])])))  # type: ignore[union-attr]
        if not parts:
            return []
        t = pa.concat_tables(parts)
        if epoch is not None and fl.frame_by is not None:
            t = t.filter(pc.equal(t[SRC], epoch))
        t = t.sort_by([(INC, "ascending")])
        return [fl.schema.from_storage(r) for r in t.select(list(fl.schema.fields)).to_pylist()]

    def status(self) -> dict[str, Any]:
        """Stages, epochs run, pending increments per connector, and which stages are runnable now."""
        self.refresh()
        stages = {}
        for s, spec in self.spec.stages.items():
            conns = {}
            for inp in spec.inputs:
                q = self.st["connectors"][_conn(s, inp.flow)]
                incs = self.st["flows"][inp.flow]["incs"]
                complete = sum(1 for i in q if incs[str(i)]["complete"])
                conns[inp.flow] = {"pending": len(q), "complete": complete, "records": sum(incs[str(i)]["records"] for i in q)}
            try:
                runnable = self.decide(s) is not None
            except UserCodeError as e:
                runnable = f"error: {e}"
            stages[s] = {"epochs": self.st["stages"][s]["epoch"], "connectors": conns, "runnable": runnable}
        return {"pipeline": self.spec.name, "home": self.home.location, "mode": self.mode, "stages": stages}
