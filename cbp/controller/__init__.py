"""The incremental dataflow controller (IDC, paper 001 §4.1–4.2).

It keeps, per stage input, a *flow connector*: the ordered queue of increments available to
that stage with their framing keys. It asks each stage's Runnable which increments to read and
remove, runs the runnable stages of a possibly cyclic graph round by round until none is
runnable (or an epoch budget is spent), commits each stage epoch, and garbage-collects
increments that no connector references. Its run-time state is a JSON snapshot in the home.

Durability (paper 001 §4.3). Before a stage epoch runs, the controller writes the epoch's
*intention* (what it reads and removes, the increment ids it will produce, the connectors it
touches). Every change of the home (a feed, a stage epoch, a garbage collection) is then
committed the same way: the new files are written first (invisible), then a *pending* record
holding the Delta commits to make (each with an application transaction id, so a commit that
already happened is recognised) and the next controller snapshot, then the Delta commits, then
the snapshot, which is the commit point. A writer that dies anywhere leaves either an intention
(the epoch is re-run with the same decision) or a pending record (its commits are finished):
the next ``cbp run`` or ``cbp feed`` recovers before doing anything else.

    >>> from cbp.spec import load_spec                                  # doctest: +SKIP
    >>> ctl = Controller(load_spec("flows/url_count.yaml"), Home("state/url_count"))  # doctest: +SKIP
    >>> ctl.feed("urls", [{"url": "http://a/"}]); ctl.run()             # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import faults
from ..engine.bipindex import ROW_GROUP, STATE_META, StateMeta, latest_rows
from ..errors import CbpError, InputError, RuntimeStateError, SpecError, UsageError, UserCodeError
from ..model import normalize_runnable_result
from ..engine.job import run_stage_epoch
from ..spec import PipelineSpec, StageSpec
from ..storage import INC, PART, SRC, Home
from ..engine.protocol import TaskResult
from ..engine.task import TaskPlan

__all__ = ["Controller", "EpochReport", "EpochRecord", "Decision", "Landed"]


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


@dataclass(frozen=True)
class EpochRecord:
    """A committed stage epoch: the increment ids it read per input flow, and the increment ids and
    records it wrote per output flow."""

    stage: str
    epoch: int
    inputs: dict[str, list[int]]
    outputs: dict[str, list[int]]
    records: dict[str, int]


@dataclass
class Decision:
    """A Runnable's answer: how many of the oldest complete increments to read and remove per flow."""

    reads: dict[str, int]
    removes: dict[str, int]
    state: Any


class Landed(list):  # type: ignore[type-arg]
    """What a feed landed: the increment ids (the list), ``feed`` its number (what
    ``output(flow, epoch=N)`` and ``cbp output --epoch N`` take for an external flow), ``records``
    how many records it landed, ``repeated`` whether its feed id had landed before (then nothing was)."""

    def __init__(self, incs: Iterable[int] = (), *, feed: int = 0, records: int = 0, repeated: bool = False) -> None:
        super().__init__(incs)
        self.feed, self.records, self.repeated = feed, records, repeated


def _new_snapshot(spec: PipelineSpec) -> dict[str, Any]:
    return {
        "seq": 0,
        "pipeline": spec.name,
        "flows": {f: {"next_inc": 1, "version": None, "feeds": 0, "incs": {}, "frame_state": None} for f in spec.flows},
        "connectors": {_conn(s, i.flow): [] for s, st in spec.stages.items() for i in st.inputs},
        "stages": {s: {"epoch": 0, "runnable_state": None, "state_version": None, "layout": "direct", "index": {}, "history": {}} for s in spec.stages},
        "sched": _new_round(),
        "gc_runs": 0,
    }


def _new_round() -> dict[str, Any]:
    """The scheduler's position: pass 0 visits every stage in dataflow order (honouring
    backpressure); pass 1 visits the stages held back, if nothing else ran."""
    return {"pass": 0, "pos": 0, "held": [], "ran": False}


def _set_path(doc: dict[str, Any], path: list[str], value: Any) -> None:
    for k in path[:-1]:
        doc = doc[k]
    doc[path[-1]] = value


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
                 state_cache_mb: Optional[float] = None, notify: Optional[Callable[[str], None]] = None) -> None:
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
        self.notify = notify or (lambda message: None)  # recoveries and lock take-overs are reported here
        self.epoch_timeout: Optional[float] = None  # seconds per stage epoch of the current run (cbp run --epoch-timeout)
        self._interrupted: dict[str, dict[str, Any]] = {}  # stage -> intention of an epoch to finish
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
        self.st.setdefault("sched", _new_round())
        self.st.setdefault("gc_runs", 0)
        if any(s not in self.spec.stages for s in self.st["sched"]["held"]):
            self.st["sched"] = _new_round()
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
            from ..engine.session import get_spark

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

    def feed(self, flow: str, records: list[dict[str, Any]] | pa.Table, *, close: bool = False,
             feed_id: Optional[str] = None) -> "Landed":
        """Land validated records (dicts, or an Arrow table of the fields as stored) on external
        flow ``flow``; return the increment ids they went to, as a :class:`Landed` list whose
        ``feed`` is the feed's number: the N of ``output(flow, epoch=N)``.

        Every feed takes the next feed number, an empty one too (it lands no increment, and its
        ``output --epoch N`` is empty). With the default framing, a feed of records is one
        increment, numbered as the feed unless a crashed run used that id. With ``frame_by``,
        consecutive records with the same framing key form an increment, which is complete once a
        record with another key arrives on the flow, or when ``close`` is given (the paper's
        missing punctuation). A feed with a ``feed_id`` the flow has already landed lands nothing
        (a retried task, a re-delivered file) and returns the first one's increment ids and number.
        """
        fl = self.spec.flow(flow)
        if not fl.external:
            raise InputError(f"flow '{flow}' is produced by stage '{fl.producer}'; only external flows (external: true) can be fed", code="not-external")
        data = records if isinstance(records, pa.Table) else fl.schema.to_arrow(records)
        with self._locked(), self._transaction():
            fs = self.st["flows"][flow]
            seen = fs.setdefault("feed_ids", {})
            if feed_id is not None and feed_id in seen:
                self.notify(f"feed id '{feed_id}' already landed on '{flow}' as feed {seen[feed_id]['feed']}; nothing was landed")
                return Landed(seen[feed_id]["incs"], feed=seen[feed_id]["feed"], records=0, repeated=True)
            fs["feeds"] += 1
            number = fs["feeds"]
            if fl.frame_by is None:  # increment ids follow feed numbers, past empty feeds too
                fs["next_inc"] = max(fs["next_inc"], number)
            what = f"feed {fs['feeds']} of flow '{flow}'"
            commits, ids, written = self._land(flow, data, close=close, producer=f"feed:{fs['feeds']}", prior_frame=fs["feeds"],
                                               app=("cbp:feed", fs["feeds"]), what=what)
            if feed_id is not None:
                seen[feed_id] = {"feed": fs["feeds"], "incs": ids}
            faults.point("feed:written")
            self._commit("feed", what, commits, written=written)
            return Landed(ids, feed=number, records=data.num_rows)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the home's lock and work on the newest snapshot (see :meth:`Home.lock`)."""

        def waiting() -> None:
            print(f"cbp: waiting for another process to finish its change to {self.home.location} ...", file=sys.stderr, flush=True)

        with self.home.lock(waiting):
            self.refresh()
            self.recover()
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

    # ------------------------------------------------------------------ durable commits
    def _commit(self, kind: str, what: str, commits: list[dict[str, Any]], *, stage: Optional[str] = None,
                cleanup: Sequence[str] = (), written: Sequence[str] = ()) -> None:
        """Make the change in ``self.st`` durable, with the Delta ``commits`` it needs, all or nothing.

        Each commit is ``{"table", "partition_by", "adds", "removes", "app", "version", "targets"}``:
        the files to add/remove, the application transaction id that marks it done, and the
        snapshot paths that receive the table version it creates. The pending record (commits +
        next snapshot) is written first; from then on the change is finished, by this process or,
        if it dies, by the next one (:meth:`recover`). ``cleanup`` files are deleted afterwards;
        ``written`` files are deleted if the change is abandoned before its pending record exists.
        """
        self.st["seq"] += 1
        record = {"kind": kind, "what": what, "stage": stage, "commits": commits, "cleanup": list(cleanup),
                  "snapshot": self.st, "written_at": time.time()}
        try:
            self.home.write_pending(record)
        except OSError as e:
            self._delete_quietly(written)
            raise RuntimeStateError(f"{what}: cannot write {self.home.uri('_cbp/pending.json')}: {e}; nothing was committed", code="io") from e
        faults.point(f"{kind}:pending")
        self._finish(record, kind)

    def _finish(self, record: dict[str, Any], kind: str) -> None:
        """Apply a pending record: the Delta commits not made yet, the snapshot, the cleanup. Idempotent."""
        snap = record["snapshot"]
        for n, c in enumerate(record["commits"]):
            dt = self.home.table(c["table"])
            done = dt is not None and (dt.transaction_version(c["app"]) or 0) >= c["version"]
            if not done:
                try:
                    self.home.commit_files(c["table"], None, c["partition_by"], c["adds"], c["removes"],
                                           overwrite=c.get("overwrite", False), app_id=c["app"], app_version=c["version"])
                except Exception as e:
                    raise RuntimeStateError(
                        f"{record['what']}: the commit to {self.home.uri(c['table'])} failed: {e}. Nothing of it is visible "
                        "through cbp; once the cause is fixed, the next 'cbp run' or 'cbp feed' on this home finishes it", code="io") from e
                faults.point(f"{kind}:committed:{n}")
            version = self.home.table(c["table"]).version()  # type: ignore[union-attr]  # ours: writers are serialised
            for path in c["targets"]:
                _set_path(snap, path, version)
        current = self.home.read_controller()
        if current is None or int(current["seq"]) < int(snap["seq"]):
            try:
                self.home.write_controller(snap)
            except OSError as e:
                raise RuntimeStateError(f"{record['what']}: cannot write the controller snapshot in {self.home.uri('_cbp/controller')}: {e}. "
                                        "Once the cause is fixed, the next 'cbp run' or 'cbp feed' finishes the commit", code="io") from e
        faults.point(f"{kind}:snapshot")
        self._delete_quietly(record["cleanup"])
        if record.get("stage"):
            self.home.clear_intention(record["stage"])
        self.home.clear_pending()
        self.st = snap

    def recover(self) -> Optional[str]:
        """Finish a change that a killed or failed writer left pending; return what it was.

        Called under the home's lock before every change, so the pending record (if any) belongs
        to a writer that is gone.
        """
        record = self.home.pending()
        if record is None:
            return None
        t0 = time.perf_counter()
        self._finish(record, "recover")
        self._reconcile()
        self.notify(f"recovered: finished committing {record['what']}, which was interrupted ({time.perf_counter() - t0:.2f}s)")
        return record["what"]

    def _delete_quietly(self, rels: Any) -> None:
        for rel in rels:
            try:
                self.home.delete_file(rel)
            except OSError:
                pass  # an orphan file is invisible; it only takes space

    def _land(self, flow: str, data: pa.Table, *, close: bool, producer: str, prior_frame: Any,
              app: tuple[str, int], what: str) -> tuple[list[dict[str, Any]], list[int], list[str]]:
        """Frame validated records (an Arrow table of the flow's fields, as stored) into increments
        of ``flow``, write their files (not yet committed) and enqueue them in the snapshot.

        Returns the Delta commit to make (a list of zero or one, see :meth:`_commit`), the
        increment ids, and the files written (to delete if the change is abandoned).
        """
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
        version = fs["version"]  # the real version is set when the commit is made (see _finish)
        commits: list[dict[str, Any]] = []
        written: list[str] = []
        if data.num_rows:
            rel = self._flow_rel(flow)
            self.home.ensure_table(rel, self._flow_schema(flow), INC)
            adds = []
            start = 0
            for inc, _, count, _ in assignments:
                columns = [pa.array(np.full(count, inc, dtype=np.int64))]
                if fl.frame_by is not None:
                    columns.append(pa.array(np.full(count, prior_frame, dtype=np.int64)))
                part = pa.Table.from_arrays(columns + list(data.slice(start, count).columns), schema=self._flow_schema(flow))
                start += count
                try:
                    add = self.home.write_parquet(f"{rel}/{INC}={inc}", part.drop_columns([INC]), "in", inc)
                except OSError as e:
                    raise RuntimeStateError(f"{what}: cannot write to {self.home.uri(rel)}: {e}; nothing was landed", code="io") from e
                written.append(add["rel"])
                add["path"] = add.pop("rel")[len(rel) + 1:]
                adds.append(add)
            targets = [["flows", flow, "version"]] + [["flows", flow, "incs", str(a[0]), "version"] for a in assignments]
            commits.append({"table": rel, "partition_by": INC, "adds": adds, "removes": [], "app": app[0], "version": app[1], "targets": targets})
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
        return commits, [a[0] for a in assignments], written

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
            on_start: Optional[Callable[[str, int], None]] = None, command: str = "cbp.Pipeline.run()",
            epoch_timeout: Optional[float] = None) -> list[EpochReport]:
        """Run runnable stages round by round until none is runnable or ``max_epochs`` stage epochs ran.

        Each round gives every runnable stage (in dataflow order) one epoch, so no stage starves;
        a stage whose every downstream connector already holds ``backpressure`` increments waits
        while others can run. The round's position is part of each epoch's commit, so a run that
        was killed (or stopped by ``max_epochs``) goes on exactly where it stopped. Only one
        runner works on a home at a time: another one gets :class:`cbp.errors.BusyError`.
        ``epoch_timeout`` (seconds) limits every stage epoch of this run, besides each stage's
        own ``timeout``: an epoch over its limit is cancelled and nothing of it is committed.
        """
        if epoch_timeout is not None and not epoch_timeout > 0:
            raise UsageError(f"the epoch timeout must be a positive number of seconds, got {epoch_timeout}", code="bad-option")
        self.epoch_timeout = epoch_timeout
        reports: list[EpochReport] = []

        def took_over(holder: dict[str, Any]) -> None:
            self.notify(f"took over the home from a cbp run that was killed (pid {holder.get('pid')} on {holder.get('host')}: {holder.get('command')})")

        with self.home.runner_lock(command, took_over):
            with self._locked():
                self._load_intentions()
                if not self.st["sched"]["ran"]:  # no epoch in this round yet: a new run starts a whole round
                    self.st["sched"] = _new_round()
            while max_epochs is None or len(reports) < max_epochs:
                with self._locked():  # feeds may land between epochs; each epoch sees them
                    step = self._next_step()
                    if step is None:
                        break
                    stage, d, intention = step
                    if on_start:
                        on_start(stage, self.st["stages"][stage]["epoch"] + 1)
                    rep = self.run_epoch(stage, d, intention=intention)
                reports.append(rep)
                if on_epoch:
                    on_epoch(rep)
            with self._locked():
                self.collect_garbage()
        return reports

    def _next_step(self) -> Optional[tuple[str, Decision, Optional[dict[str, Any]]]]:
        """Advance the scheduler to the next stage epoch to run: (stage, decision, intention to finish)."""
        sc = self.st["sched"]
        while True:
            order = list(self.spec.order) if sc["pass"] == 0 else sc["held"]
            if sc["pos"] >= len(order):
                if sc["ran"]:
                    sc.update(_new_round())
                elif sc["pass"] == 0 and sc["held"]:
                    sc.update({"pass": 1, "pos": 0})
                else:
                    sc.update(_new_round())  # quiescent: nothing ran in a whole round
                    return None
                continue
            stage = order[sc["pos"]]
            sc["pos"] += 1
            intention = self._interrupted.pop(stage, None)
            if intention is not None and self._intention_fits(intention):
                self.notify(f"finishing stage '{stage}' epoch {intention['epoch']}, which was interrupted: re-running it with the same inputs")
                sc["ran"] = True
                return stage, Decision(intention["reads"], intention["removes"], intention["runnable_state"]), intention
            if sc["pass"] == 0 and self._backpressured(stage):
                sc["held"].append(stage)
                continue
            d = self.decide(stage, keep_state=True)
            if d is None:
                continue
            sc["ran"] = True
            return stage, d, None

    def _load_intentions(self) -> None:
        """Find epochs that were under way when a runner died; drop intentions that no longer apply."""
        self._interrupted = {}
        for stage, it in self.home.intentions().items():
            if stage in self.spec.stages and self._intention_fits(it):
                self._interrupted[stage] = it
            else:
                self._abandon(stage, it)

    def _intention_fits(self, it: dict[str, Any]) -> bool:
        """An intention can be finished if its epoch is the stage's next and its inputs are still at the heads."""
        stage = it["stage"]
        if stage not in self.spec.stages or it["epoch"] != self.st["stages"][stage]["epoch"] + 1:
            return False
        for flow, ids in it["inputs"].items():
            q = self.st["connectors"].get(_conn(stage, flow))
            if q is None or q[:len(ids)] != ids:
                return False
        return True

    def _abandon(self, stage: str, it: dict[str, Any]) -> None:
        """Drop an intention whose epoch will not be finished, and the files its attempt left."""
        if it["epoch"] > self.st["stages"].get(stage, {}).get("epoch", 0):
            self._discard_epoch_files(stage, it["epoch"], it.get("out_incs", {}))
        self.home.clear_intention(stage)

    def interrupted(self) -> list[dict[str, Any]]:
        """What a killed or failed writer left for recovery: a pending commit, epochs under way."""
        out = []
        rec = self.home.pending()
        if rec is not None:
            done = []
            for c in rec["commits"]:
                dt = self.home.table(c["table"])
                done.append(dt is not None and (dt.transaction_version(c["app"]) or 0) >= c["version"])
            out.append({"kind": "commit", "what": rec["what"], "commits": len(done), "commits_done": sum(done),
                        "recovery": f"the next 'cbp run' or 'cbp feed' finishes committing it ({sum(done)} of {len(done)} Delta commits made)"})
        for stage, it in self.home.intentions().items():
            if rec is not None and rec.get("stage") == stage:
                continue
            fits = stage in self.spec.stages and self._intention_fits(it)
            reads = ", ".join(f"{f} {ids}" for f, ids in it["inputs"].items()) or "no input"
            out.append({"kind": "epoch", "stage": stage, "epoch": it["epoch"], "reads": it["inputs"],
                        "recovery": (f"the next 'cbp run' re-runs stage '{stage}' epoch {it['epoch']} with the same inputs ({reads})" if fits
                                     else "the next 'cbp run' drops it (its inputs changed) and asks the stage's runnable again")})
        return out

    # ------------------------------------------------------------------ one stage epoch
    def _state_rel(self, stage: str) -> str:
        return f"stages/{stage}/state"

    def _state_table_schema(self, spec: StageSpec) -> pa.Schema:
        return pa.schema([pa.field(PART, pa.int32())] + list(STATE_META) + list(spec.state_schema.arrow))  # type: ignore[union-attr]

    def run_epoch(self, stage: str, d: Decision, *, intention: Optional[dict[str, Any]] = None) -> EpochReport:
        """Run and commit one epoch of ``stage``: state, output increments and connectors, all or nothing."""
        with self._transaction():
            return self._run_epoch(stage, d, intention)

    def _run_epoch(self, stage: str, d: Decision, intention: Optional[dict[str, Any]]) -> EpochReport:
        spec = self.spec.stages[stage]
        sst = self.st["stages"][stage]
        epoch = sst["epoch"] + 1
        t0 = time.perf_counter()
        what = f"stage '{stage}' epoch {epoch}"

        inputs: dict[str, list[int]] = {}
        input_files: dict[int, list[str]] = {}
        for idx, inp in enumerate(spec.inputs):
            n = d.reads.get(inp.flow, 0)
            if not n:
                continue
            ids = self.st["connectors"][_conn(stage, inp.flow)][:n]
            inputs[inp.flow] = ids
            input_files[idx] = self._increment_uris(inp.flow, ids)

        if intention is not None:  # the attempt that died allocated these; its files go first
            out_incs = {f: int(i) for f, i in intention["out_incs"].items()}
            for f, i in out_incs.items():
                fs = self.st["flows"][f]
                fs["next_inc"] = max(fs["next_inc"], i + 1)
            self._discard_epoch_files(stage, epoch, out_incs)
        else:
            out_incs = {f: self._allocate(f, 1)[0] for f in spec.outputs}
        try:
            self.home.write_intention(stage, {
                "stage": stage, "epoch": epoch, "reads": d.reads, "removes": d.removes, "runnable_state": d.state,
                "inputs": inputs, "out_incs": out_incs, "started": time.time(),
                "connectors": {i.flow: self.st["connectors"][_conn(stage, i.flow)] for i in spec.inputs},
            })
        except OSError as e:
            raise RuntimeStateError(f"{what}: cannot write its intention in {self.home.uri('_cbp/intentions')}: {e}; nothing was run", code="io") from e
        faults.point("epoch:intention")

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
            fault=faults.current(), driver_pid=os.getpid(),
        )
        limits = [t for t in (spec.timeout, self.epoch_timeout) if t is not None]
        if limits:
            plan.timeout = min(limits)
            plan.deadline = time.time() + plan.timeout
        try:
            results = run_stage_epoch(self.spark, plan, input_files, state_uris, state_needs_dedupe=sst["layout"] != "blackbox")
            faults.point("epoch:ran")
            commits, cleanup, counts, written = self._epoch_commits(stage, epoch, d, results, inputs, out_incs)
            self._commit("epoch", what, commits, stage=stage, cleanup=cleanup, written=written)
        except BaseException:
            try:
                committing = self.home.pending() is not None  # then the change is finished later, not dropped
            except OSError:
                committing = True
            if not committing:
                self._abandon_quietly(stage, epoch, out_incs)
            raise

        stats = [r.stats for r in results]
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

    def _epoch_commits(self, stage: str, epoch: int, d: Decision, results: list[TaskResult], inputs: dict[str, list[int]],
                       out_incs: dict[str, int]) -> tuple[list[dict[str, Any]], list[str], dict[str, int], list[str]]:
        """Turn the tasks' results into the epoch's Delta commits and the next snapshot (in ``self.st``).

        Returns the commits, the files to delete once committed, the records per output flow, and
        the files written here (re-framed outputs), to delete if the epoch is abandoned.
        """
        spec = self.spec.stages[stage]
        sst = self.st["stages"][stage]
        app = f"cbp:{stage}"
        what = f"stage '{stage}' epoch {epoch}"
        commits: list[dict[str, Any]] = []
        cleanup: list[str] = []
        written: list[str] = []
        state_targets = [["stages", stage, "state_version"], ["stages", stage, "history", str(epoch), "state_version"]]
        if spec.state_schema is not None:
            adds = [a for r in results for a in r.state_adds]
            removes = [x for r in results for x in r.state_removes]
            if self.mode == "blackbox" or adds or removes:
                state_rel = self._state_rel(stage)
                self.home.ensure_table(state_rel, self._state_table_schema(spec), PART)
                commits.append({"table": state_rel, "partition_by": PART, "adds": adds, "removes": removes,
                                "overwrite": self.mode == "blackbox", "app": app, "version": epoch, "targets": state_targets})
            old_index = dict(sst["index"])
            sst["index"] = {str(r.part): r.index for r in results if r.index} if self.mode == "direct" else {}
            sst["layout"] = self.mode
            cleanup += [rel for p, rel in old_index.items() if rel and sst["index"].get(p) != rel]
        produced: dict[str, list[int]] = {}
        counts: dict[str, int] = {}
        for flow in spec.outputs:
            adds = [a for r in results for a in r.outputs.get(flow, [])]
            n = sum(int(a["rows"]) for a in adds)
            counts[flow] = n
            if not adds:
                continue  # an epoch that writes nothing to a flow adds no increment to it
            if self.spec.flows[flow].frame_by is not None:  # re-frame the epoch's records by the flow's FrameBy
                data, task_files = self._read_task_files(flow, adds)
                cleanup += task_files
                fc, produced[flow], w = self._land(flow, data, close=False, producer=f"{stage}:{epoch}", prior_frame=epoch,
                                                   app=(app, epoch), what=what)
                commits += fc
                written += w
                continue
            rel = self._flow_rel(flow)
            self.home.ensure_table(rel, self._flow_schema(flow), INC)
            commits.append({"table": rel, "partition_by": INC, "adds": adds, "removes": [], "app": app, "version": epoch,
                            "targets": [["flows", flow, "version"], ["flows", flow, "incs", str(out_incs[flow]), "version"]]})
            self._register(flow, out_incs[flow], epoch, n, self.st["flows"][flow]["version"], f"{stage}:{epoch}", True)
            produced[flow] = [out_incs[flow]]
        for flow, n in d.removes.items():
            q = self.st["connectors"][_conn(stage, flow)]
            del q[:n]
        sst["epoch"] = epoch
        sst["runnable_state"] = d.state
        sst["history"][str(epoch)] = {"state_version": sst["state_version"], "inputs": inputs, "outputs": produced}
        return commits, cleanup, counts, written

    def _abandon_quietly(self, stage: str, epoch: int, out_incs: dict[str, int]) -> None:
        try:
            self._discard_epoch_files(stage, epoch, out_incs)
            self.home.clear_intention(stage)
        except OSError:
            pass  # e.g. a read-only home: the intention stays and the next run re-runs the epoch

    def _discard_epoch_files(self, stage: str, epoch: int, out_incs: dict[str, int]) -> None:
        """Delete the files an uncommitted attempt of this epoch wrote (none of them is in a Delta log)."""
        prefix = f"e{epoch:08d}"
        for base in (self._state_rel(stage), f"stages/{stage}/index"):
            for part in self.home.list_dir(base):
                if part.startswith(f"{PART}="):
                    for name in self.home.list_dir(f"{base}/{part}"):
                        if name.startswith(prefix):
                            self.home.delete_file(f"{base}/{part}/{name}")
        for flow, inc in out_incs.items():
            d = f"{self._flow_rel(flow)}/{INC}={inc}"
            for name in self.home.list_dir(d):
                if name.startswith(f"s{stage}-{prefix}"):
                    self.home.delete_file(f"{d}/{name}")

    def _read_task_files(self, flow: str, adds: list[dict[str, Any]]) -> tuple[pa.Table, list[str]]:
        """The records of files a task wrote (in partition order) that will be re-framed, and their paths."""
        schema = self.spec.flows[flow].schema
        parts, rels = [], []
        for a in sorted(adds, key=lambda a: a["path"]):
            rel = f"{self._flow_rel(flow)}/{a['path']}"
            parts.append(pq.read_table(self.home.path(rel), filesystem=self.home.fs).select(list(schema.fields)).cast(schema.arrow))
            rels.append(rel)
        return (pa.concat_tables(parts) if parts else schema.arrow.empty_table()), rels

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
        """Drop increments no connector references from flows that have readers (one durable change).

        Dropped increments stay readable by time travel (``output --epoch``) until the table is vacuumed.
        """
        dropped: list[tuple[str, int]] = []
        commits: list[dict[str, Any]] = []
        with self._transaction():
            run = self.st["gc_runs"] + 1
            for flow, fs in self.st["flows"].items():
                consumers = self.spec.flows[flow].consumers if flow in self.spec.flows else ()
                if not consumers or fs["version"] is None:
                    continue
                referenced = {i for c in consumers for i in self.st["connectors"][_conn(c, flow)]}
                dead = {int(i) for i, m in fs["incs"].items() if not m["gc"] and m["complete"] and int(i) not in referenced}
                if not dead:
                    continue
                rel = self._flow_rel(flow)
                removes = [f for f in self.home.table_files(rel, fs["version"]) if int(f["partition"]) in dead]
                commits.append({"table": rel, "partition_by": INC, "adds": [], "removes": removes, "app": "cbp:gc", "version": run,
                                "targets": [["flows", flow, "version"]]})
                for i in sorted(dead):
                    fs["incs"][str(i)]["gc"] = True
                    dropped.append((flow, i))
            if dropped:
                self.st["gc_runs"] = run
                self._commit("gc", f"garbage collection {run}", commits)
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

    def idle_reasons(self) -> dict[str, str]:
        """Why each stage is not runnable now (stages that are runnable are left out)."""
        from ..spec.deadends import dead_ends

        self.refresh()
        dead = {d.stage: d.message for d in dead_ends(self.spec)}
        out: dict[str, str] = {}
        for s, spec in self.spec.stages.items():
            if self.decide(s) is not None:
                continue
            if s in dead:
                out[s] = dead[s]
                continue
            frames = self.frames(s)
            pending = {i.flow: len(self.st["connectors"][_conn(s, i.flow)]) for i in spec.inputs}
            have = ", ".join(f"'{f}' {len(k)} complete of {pending[f]} pending" for f, k in frames.items())
            if not any(pending.values()):
                out[s] = "no new input on " + ", ".join(f"'{f}'" for f in pending)
            elif spec.runnable_name == "all" and not any(frames.values()):
                out[s] = f"no complete increment yet ({have}); a framed flow's increment completes when a later framing key arrives or on 'cbp feed --close'"
            elif spec.runnable_name == "all":
                waiting = [f for f, k in frames.items() if not k]
                out[s] = f"runnable 'all' waits for an increment on {', '.join(repr(f) for f in waiting)} ({have})"
            else:
                out[s] = f"its runnable '{spec.runnable_name}' says not runnable ({have})"
        return out

    # ------------------------------------------------------------------ accessors (read-only)
    def epochs(self, stage: str) -> int:
        """How many epochs ``stage`` has committed."""
        self.refresh()
        self.spec.stage(stage)
        return int(self.st["stages"][stage]["epoch"])

    def feeds(self, flow: str) -> int:
        """How many feeds external flow ``flow`` has had (the N of its newest ``output --epoch N``)."""
        self.refresh()
        self.spec.flow(flow)
        return int(self.st["flows"][flow]["feeds"])

    def epoch_record(self, stage: str, epoch: int) -> "EpochRecord":
        """What stage epoch ``epoch`` read (increment ids per input flow) and wrote (ids and records per output flow)."""
        self.refresh()
        sst = self.st["stages"][self.spec.stage(stage).name]
        h = sst["history"].get(str(epoch))
        if h is None:
            raise UsageError(f"stage '{stage}' has not run epoch {epoch} (epochs run: {sst['epoch']})", code="unknown-epoch")
        outputs = {f: [int(i) for i in ids] for f, ids in h["outputs"].items()}
        records = {f: sum(int(self.st["flows"][f]["incs"][str(i)]["records"]) for i in ids) for f, ids in outputs.items()}
        return EpochRecord(stage, epoch, {f: [int(i) for i in ids] for f, ids in h["inputs"].items()}, outputs, records)

    def is_new(self) -> bool:
        """True while nothing has been fed or run in the home."""
        return self.home.read_controller() is None

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
        runner = self.home.runner_info() if self.home.runner_active() else None
        interrupted = self.interrupted()
        if runner is not None:  # what a live runner has under way is not interrupted
            for it in interrupted:
                it["recovery"] = "under way in the running cbp run"
        return {"pipeline": self.spec.name, "home": self.home.location, "mode": self.mode, "stages": stages,
                "runner": runner, "interrupted": interrupted}
