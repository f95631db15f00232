"""What runs inside a Spark task: routing records, and one stage epoch on one partition.

The driver side (:mod:`cbp.engine.job`) ships a :class:`TaskPlan` to every task. A grouped task
receives its partition's *new* input, sorted by key and flow, reads the state of the keys it
needs from the partition it owns (:mod:`cbp.engine.bipindex`), calls the translator once per key with
one iterator per input flow, and writes the state changes and output increments as files that
the driver then commits. A task that fails leaves only unreferenced files behind.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .. import faults
from .bipindex import ROW_GROUP, STATE_META, PartitionIndex, StateMeta, latest_rows, read_partition_rows
from ..model import Emitter
from ..spec.schema import RecordError, RecordSchema
from ..spec import StageSpec
from ..storage import INC, Home

__all__ = ["TaskPlan", "ENVELOPE", "RESULT", "encode_key", "route_batches", "grouped_task", "recordwise_task", "USER_ERROR"]

#: Records on their way to a stage: JSON-encoded key, input index (-1: state), stored record as JSON.
ENVELOPE = pa.schema([("_key", pa.string()), ("_flow", pa.int32()), ("_rec", pa.string())])
RESULT = pa.schema([("meta", pa.string())])
USER_ERROR = "CBP-USER-ERROR"
IO_ERROR = "CBP-IO-ERROR"


def encode_key(key: Any) -> str:
    """The canonical text of a grouping key (JSON), used for routing and stored as ``_key``."""
    return json.dumps(key, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class EpochTimeout(BaseException):
    """Raised inside a task when its stage epoch's time limit is up (a BaseException, so that a
    translator's ``except Exception`` cannot swallow it)."""


RETRY_GRACE = 2.0  # seconds a task attempt started after its epoch's deadline runs (less than the driver's cancel grace)

#: What user code may raise that cbp reports as the user's failure (``SystemExit`` included).
USER_EXCEPTIONS = (Exception, SystemExit)


class UserFailure(Exception):
    """Raised in a task when user code fails; the driver turns it into :class:`cbp.errors.UserCodeError`."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{USER_ERROR}<<{message}>>{USER_ERROR}")


def _user_failure(where: str, fn_name: str, exc: BaseException) -> UserFailure:
    if isinstance(exc, EpochTimeout):
        return UserFailure(f"{where}: {fn_name} was still running when the epoch's time limit was up; the key is the one it was called for")
    tb = traceback.extract_tb(exc.__traceback__)
    user = [fr for fr in tb if "/cbp/" not in fr.filename.replace("\\", "/")] or tb[-1:]
    loc = f" ({user[-1].filename}:{user[-1].lineno})" if user else ""
    return UserFailure(f"{where}: {fn_name} raised {type(exc).__name__}: {exc}{loc}")


@dataclass
class TaskPlan:
    """Everything a task of one stage epoch needs (pickled to the executors)."""

    home: Home
    stage: StageSpec
    epoch: int
    mode: str
    out_schemas: dict[str, RecordSchema]
    out_incs: dict[str, int]
    input_schemas: list[RecordSchema]
    state_rel: str
    parts: dict[int, StateMeta] = field(default_factory=dict)
    max_files: int = 8
    row_group: int = ROW_GROUP
    cache_mb: Optional[float] = None
    fault: Optional[str] = None  # CBP_FAULT of the driver (crash tests, see cbp.faults)
    driver_pid: int = 0
    deadline: Optional[float] = None  # wall-clock time (time.time()) the epoch must end by
    timeout: Optional[float] = None  # the limit that set it, in seconds (for messages)

    def where(self, key: Any = None) -> str:
        s = f"stage '{self.stage.name}' epoch {self.epoch}"
        return s if key is None else f"{s} key {key!r}"


# ------------------------------------------------------------------ routing (map side)
def route_batches(plan: TaskPlan, flow_idx: int, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """RouteBy each record of input ``flow_idx``; a record routed to several keys is sent to each."""
    inp = plan.stage.inputs[flow_idx]
    route = inp.route_by
    assert route is not None
    for b in batches:
        keys: list[str] = []
        recs: list[str] = []
        for rec in b.to_pylist():
            text = json.dumps(rec, separators=(",", ":"), ensure_ascii=False)
            try:
                out = route(plan.input_schemas[flow_idx].from_storage(dict(rec)))
            except (*USER_EXCEPTIONS, EpochTimeout) as e:
                raise _user_failure(f"{plan.where()} flow '{inp.flow}' record {text[:200]}", f"route_by '{route.text}'", e) from None
            many = out if isinstance(out, (list, set, frozenset)) else (out,)  # a tuple is one composite key
            if None in many:
                raise UserFailure(f"{plan.where()} flow '{inp.flow}': route_by '{route.text}' returned no key (None) for record {text[:200]}")
            encoded = [encode_key(k) for k in many]
            if len(encoded) > 1:
                encoded = list(dict.fromkeys(encoded))  # a record goes to each distinct key once
            keys.extend(encoded)
            recs.extend([text] * len(encoded))
        yield pa.RecordBatch.from_arrays(
            [pa.array(keys, pa.string()), pa.array(np.full(len(keys), flow_idx, np.int32)), pa.array(recs, pa.string())],
            schema=ENVELOPE,
        )


# ------------------------------------------------------------------ translate calls
class _Calls:
    """Calls the translator for one key at a time and collects what it writes, validated."""

    def __init__(self, plan: TaskPlan) -> None:
        self.plan = plan
        st = plan.stage
        self.outputs: dict[str, list[dict[str, Any]]] = {f: [] for f in st.outputs}
        self.state_out: list[dict[str, Any]] = []
        self.key: Any = None
        self.emitter = Emitter(st.name, plan.epoch, st.params, st.outputs, st.state_schema is not None, self._sink)
        self.calls = 0

    def _sink(self, flow: str, record: Any) -> None:
        schema = self.plan.stage.state_schema if flow == "state" else self.plan.out_schemas[flow]
        try:
            rec = schema.validate(record)  # type: ignore[union-attr]
        except RecordError as e:
            raise UserFailure(f"{self.plan.where(self.key)}: the translator wrote a record to '{flow}' that does not fit its schema: {e}; record {record!r:.200}") from None
        (self.state_out if flow == "state" else self.outputs[flow]).append(rec)

    def call(self, key: Any, state: list[dict[str, Any]], inputs: list[Iterator[dict[str, Any]]]) -> list[dict[str, Any]]:
        self.key = key
        self.state_out = []
        self.calls += 1
        st = self.plan.stage
        try:
            st.translator(key, iter(state), *inputs, out=self.emitter)
        except UserFailure:
            raise
        except (*USER_EXCEPTIONS, EpochTimeout) as e:
            raise _user_failure(self.plan.where(key), f"translator '{st.translator_path}'", e) from None
        return self.state_out


def _flow_iter(plan: TaskPlan, idx: int, texts: list[str], key: Any) -> Iterator[dict[str, Any]]:
    schema = plan.input_schemas[idx]
    order = plan.stage.inputs[idx].order_by
    if order is None:  # OrderByAny: arrival order, decoded lazily
        return (schema.from_storage(json.loads(t)) for t in texts)
    recs = [schema.from_storage(json.loads(t)) for t in texts]
    try:
        recs.sort(key=order)
    except (*USER_EXCEPTIONS, EpochTimeout) as e:
        raise _user_failure(f"{plan.where(key)} flow '{plan.stage.inputs[idx].flow}'", f"order_by '{order.text}'", e) from None
    return iter(recs)


class IOFailure(Exception):
    """Raised in a task that cannot write to the home; the driver turns it into :class:`cbp.errors.RuntimeStateError`."""

    def __init__(self, message: str) -> None:
        super().__init__(f"{IO_ERROR}<<{message}>>{IO_ERROR}")


@contextmanager
def _io_errors(plan: TaskPlan) -> Iterator[None]:
    try:
        with _time_limit(plan):
            yield
    except OSError as e:  # a full or read-only home, a lost object store
        raise IOFailure(f"{plan.where()}: cannot write to the home {plan.home.location}: {e}") from None
    except EpochTimeout:  # up outside user code: no key to name
        raise UserFailure(f"{plan.where()}: the epoch's time limit was up") from None


@contextmanager
def _time_limit(plan: TaskPlan) -> Iterator[None]:
    """Raise :class:`EpochTimeout` in this task when ``plan.deadline`` passes (SIGALRM).

    A Spark Python worker runs its task in its main thread, where signals are delivered; the
    exception surfaces inside whatever Python code runs then, usually the translator, so the
    failure can name the key. The driver also cancels the job a little later, for code that
    never returns to the interpreter.
    """
    if plan.deadline is None or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(signum: int, frame: Any) -> None:
        raise EpochTimeout()

    left = plan.deadline - time.time()
    if left <= 0:  # a retried attempt: give it a moment to reach the same key, so the failure can name it
        left = min(plan.timeout or 1.0, RETRY_GRACE)
    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, left)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------ grouped task (reduce side)
def grouped_task(plan: TaskPlan, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """One stage epoch on one partition (direct or black-box)."""
    with _io_errors(plan):
        yield from _grouped_task(plan, batches)


def _grouped_task(plan: TaskPlan, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    p = TaskContext.get().partitionId()
    clock = _Clock()
    batches = list(batches)
    env = pa.Table.from_batches(batches) if batches else pa.Table.from_batches([], schema=ENVELOPE.append(pa.field("_h", pa.int64())))
    keys = env["_key"].to_pylist()
    flows = env["_flow"].to_numpy(zero_copy_only=False)
    texts = env["_rec"].to_pylist()
    hashes = env["_h"].to_numpy(zero_copy_only=False)
    st = plan.stage
    n_inputs = len(st.inputs)
    has_state = st.state_schema is not None
    calls = _Calls(plan)
    stats = {"in": int(np.count_nonzero(flows >= 0)), "state_read": 0, "state_written": 0}

    # group boundaries of the sorted input
    groups: list[tuple[str, int, int, int]] = []  # key, hash, start, end
    i, n = 0, len(keys)
    while i < n:
        j = i + 1
        while j < n and keys[j] == keys[i]:
            j += 1
        groups.append((keys[i], int(hashes[i]), i, j))
        i = j

    index: Optional[PartitionIndex] = None
    meta = plan.parts.get(p, StateMeta())
    state_adds: list[dict[str, Any]] = []
    state_removes: list[dict[str, Any]] = []
    old_state: dict[str, list[dict[str, Any]]] = {}
    old_loc: dict[str, tuple[int, int, int]] = {}
    part_dir = f"{plan.state_rel}/_part={p}"

    clock.lap("input")
    if has_state and plan.mode == "direct":
        index, rebuilt = _open_index(plan, p, meta)
        clock.lap("index_load")
        if rebuilt is not None:
            state_adds.append(rebuilt)
            state_removes.extend(meta.files)
        if st.grouping == "outer":
            rows, fids, rgs = index.all_rows(plan.home, plan.state_rel, plan.cache_mb)
        else:
            wanted = np.array([g[1] for g in groups if any(flows[g[2]:g[3]] >= 0)], dtype=np.int64)
            rows, fids, rgs = index.rows_of(plan.home, plan.state_rel, wanted, plan.cache_mb)
        clock.lap("state_read")
        old_state, old_loc = _rows_by_key(st.state_schema, rows, fids, rgs)  # type: ignore[arg-type]
        stats["state_read"] = len(old_state)
        clock.lap("state_decode")

    # keys to call: those with input, plus (outer, direct) every state key of the partition
    call_keys = [(k, h, a, b) for (k, h, a, b) in groups]
    if has_state and plan.mode == "direct" and st.grouping == "outer":
        present = {g[0] for g in groups}
        extra = sorted(k for k in old_state if k not in present)
        call_keys += [(k, old_loc[k][0], 0, 0) for k in extra]

    new_rows: list[dict[str, Any]] = []
    drops: list[tuple[int, int, int]] = []
    for key_text, h, a, b in call_keys:
        per_flow: list[list[str]] = [[] for _ in range(n_inputs)]
        bb_state: list[dict[str, Any]] = []
        for r in range(a, b):
            fl = int(flows[r])
            if fl >= 0:
                per_flow[fl].append(texts[r])
            else:
                bb_state.append(st.state_schema.from_storage(json.loads(texts[r])))  # type: ignore[union-attr]
        if plan.mode == "blackbox":
            old = bb_state
            if st.grouping == "inner" and not any(per_flow):
                new_rows.extend(_state_row(key_text, h, plan.epoch, st.state_schema, rec) for rec in old)  # type: ignore[arg-type]
                continue
        else:
            old = old_state.get(key_text, [])
        key = json.loads(key_text)
        inputs = [_flow_iter(plan, idx, per_flow[idx], key) for idx in range(n_inputs)]
        new = calls.call(key, old, inputs)
        if not has_state:
            continue
        if plan.mode == "blackbox":
            new_rows.extend(_state_row(key_text, h, plan.epoch, st.state_schema, rec) for rec in new)  # type: ignore[arg-type]
            stats["state_written"] += 1 if new != old else 0
            continue
        if new == old:
            continue  # unchanged state is not rewritten
        stats["state_written"] += 1
        if key_text in old_loc:
            drops.append(old_loc[key_text])
        if new:
            new_rows.extend(_state_row(key_text, h, plan.epoch, st.state_schema, rec) for rec in new)  # type: ignore[arg-type]
        else:
            new_rows.append({"_key": key_text, "_h": h, "_epoch": plan.epoch, "_alive": False})

    clock.lap("translate")
    result: dict[str, Any] = {"part": p, "index": meta.index}
    if has_state and plan.mode == "blackbox":
        stats["state_read"] = len({keys[r] for r in np.nonzero(flows < 0)[0]})
        stats["state_rows"] = len(new_rows)
        if new_rows:
            state_adds.append(_write_state(plan, part_dir, p, new_rows, prefix=f"e{plan.epoch:08d}-full"))
    elif has_state:
        assert index is not None
        if new_rows:
            add = _write_state(plan, part_dir, p, new_rows, prefix=f"e{plan.epoch:08d}")  # sorts new_rows
            t_h = np.array([r["_h"] for r in new_rows], dtype=np.int64)
            alive = np.array([r["_alive"] for r in new_rows], dtype=bool)
            rgs_new = np.arange(len(t_h)) // plan.row_group
            d = np.array(drops, dtype=np.int64).reshape(-1, 3)
            clock.lap("state_write")
            index = index.updated(d[:, 0], d[:, 1], d[:, 2], t_h[alive], add["path"], rgs_new[alive])
            state_adds.append(add)
            clock.lap("index_update")
        current = ([] if rebuilt is not None else list(meta.files)) + state_adds
        if len(current) > plan.max_files:
            index, replaced, compacted = _compact(plan, p, index, current)
            uncommitted = {id(a) for a in state_adds}
            gone = {id(a) for a in replaced}
            for a in replaced:
                if id(a) in uncommitted:  # written this epoch, superseded before being committed
                    plan.home.delete_file(f"{plan.state_rel}/{a['path']}")
                else:
                    state_removes.append(a)
            state_adds = [a for a in state_adds if id(a) not in gone] + ([compacted] if compacted else [])
            stats["compacted"] = len(replaced)
        if new_rows or state_removes:
            rel = f"stages/{st.name}/index/_part={p}/e{plan.epoch:08d}-{uuid.uuid4().hex[:12]}.parquet"
            index.save(plan.home, rel)
            result["index"] = rel
            clock.lap("index_save")
        stats["live_keys"] = index.live_keys
        stats["files"] = len(index.files)

    result["state_adds"] = state_adds
    result["state_removes"] = state_removes
    faults.task_point(plan.fault, "task:state-written", plan.driver_pid)
    result["outputs"] = _write_outputs(plan, p, calls.outputs)
    faults.task_point(plan.fault, "task:outputs-written", plan.driver_pid)
    clock.lap("outputs")
    stats["seconds"] = clock.laps
    stats["keys"] = calls.calls
    stats["out"] = {f: len(v) for f, v in calls.outputs.items()}
    result["stats"] = stats
    yield pa.RecordBatch.from_pylist([{"meta": json.dumps(result)}], schema=RESULT)


def recordwise_task(plan: TaskPlan, flow_idx: int, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A record-wise stage (no state, RouteByRcd): translate each record alone, no shuffle."""
    with _io_errors(plan):
        yield from _recordwise_task(plan, flow_idx, batches)


def _recordwise_task(plan: TaskPlan, flow_idx: int, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    p = TaskContext.get().partitionId()
    calls = _Calls(plan)
    n_in = 0
    empty: list[dict[str, Any]] = []
    schema = plan.input_schemas[flow_idx]
    for b in batches:
        for rec in b.to_pylist():
            n_in += 1
            inputs: list[Iterator[dict[str, Any]]] = [iter(()) for _ in plan.stage.inputs]
            inputs[flow_idx] = iter((schema.from_storage(rec),))
            calls.call(None, empty, inputs)
    outputs = _write_outputs(plan, p * 1000 + flow_idx, calls.outputs)
    faults.task_point(plan.fault, "task:outputs-written", plan.driver_pid)
    stats = {"in": n_in, "keys": calls.calls, "state_read": 0, "state_written": 0, "out": {f: len(v) for f, v in calls.outputs.items()}}
    yield pa.RecordBatch.from_pylist([{"meta": json.dumps({"part": p, "outputs": outputs, "stats": stats, "state_adds": [], "state_removes": []})}], schema=RESULT)


# ------------------------------------------------------------------ helpers
class _Clock:
    """Seconds spent in each phase of a task (reported in the task's stats)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self._t, 4)
        self._t = now


def _state_row(key_text: str, h: int, epoch: int, schema: RecordSchema, rec: dict[str, Any]) -> dict[str, Any]:
    row = {"_key": key_text, "_h": h, "_epoch": epoch, "_alive": True}
    row.update(schema.to_storage(rec))
    return row


def _sorted_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows.sort(key=lambda r: (r["_h"], r["_key"]))
    return rows


def _state_schema(plan: TaskPlan) -> pa.Schema:
    return pa.schema(list(STATE_META) + list(plan.stage.state_schema.arrow))  # type: ignore[union-attr]


def _write_state(plan: TaskPlan, part_dir: str, p: int, rows: list[dict[str, Any]], prefix: str) -> dict[str, Any]:
    table = pa.Table.from_pylist(_sorted_rows(rows), schema=_state_schema(plan))
    add = plan.home.write_parquet(part_dir, table, prefix, p, row_group_size=plan.row_group)
    add["path"] = add.pop("rel")[len(plan.state_rel) + 1:]
    return add


def _rows_by_key(schema: RecordSchema, rows: pa.Table, fids: np.ndarray, rgs: np.ndarray) -> tuple[dict[str, list[dict[str, Any]]], dict[str, tuple[int, int, int]]]:
    state: dict[str, list[dict[str, Any]]] = {}
    loc: dict[str, tuple[int, int, int]] = {}
    if rows.num_rows == 0:
        return state, loc
    user_cols = list(schema.fields)
    keys = rows["_key"].to_pylist()
    hs = rows["_h"].to_pylist()
    alive = rows["_alive"].to_pylist()
    recs = rows.select(user_cols).to_pylist()
    for k, h, a, rec, f, g in zip(keys, hs, alive, recs, fids.tolist(), rgs.tolist()):
        if not a:
            continue
        state.setdefault(k, []).append(schema.from_storage(rec))
        loc[k] = (h, f, g)
    return state, loc


def _open_index(plan: TaskPlan, p: int, meta: StateMeta) -> tuple[PartitionIndex, Optional[dict[str, Any]]]:
    """The partition's index; rebuilt (as a compaction) when the state has files but no index."""
    if meta.index is not None:
        return PartitionIndex.load(plan.home, meta.index), None
    if not meta.files:
        return PartitionIndex.empty(), None
    rows = latest_rows(read_partition_rows(plan.home, plan.state_rel, meta.files))
    return _index_from_rows(plan, p, rows.select(_state_schema(plan).names), prefix=f"e{plan.epoch:08d}-rebuilt")


def _compact(plan: TaskPlan, p: int, index: PartitionIndex, files: list[dict[str, Any]]) -> tuple[PartitionIndex, list[dict[str, Any]], Optional[dict[str, Any]]]:
    """Merge a partition's data files; return the new index, the files replaced, and the new file.

    Tiered, so that compaction costs what changed: while the files written since the last full
    compaction hold fewer rows than half the largest (base) file, only they are merged (newest rows
    per key, tombstones kept, since they hide older rows of the base). Otherwise every live row is
    rewritten into one file and stale rows and tombstones disappear.
    """
    base = max(files, key=lambda f: int(f["rows"] or 0))
    deltas = [f for f in files if f is not base]
    if sum(int(f["rows"] or 0) for f in deltas) * 2 >= int(base["rows"] or 0):
        rows, _, _ = index.all_rows(plan.home, plan.state_rel, plan.cache_mb)
        new_index, add = _index_from_rows(plan, p, rows.select(_state_schema(plan).names), prefix=f"e{plan.epoch:08d}-compact")
        return new_index, files, add
    rows = latest_rows(read_partition_rows(plan.home, plan.state_rel, deltas), keep_tombstones=True)
    rows = rows.select(_state_schema(plan).names).take(pc.sort_indices(rows["_h"]))
    add = plan.home.write_parquet(f"{plan.state_rel}/_part={p}", rows, f"e{plan.epoch:08d}-merged", p, row_group_size=plan.row_group)
    add["path"] = add.pop("rel")[len(plan.state_rel) + 1:]
    # index the merged rows that were their key's newest anywhere (a delta older than the base may
    # hold stale rows of keys the base has since rewritten: they stay, unindexed, for readers to skip)
    names = {f["path"] for f in deltas}
    latest = index.h[np.isin(index.f, [i for i, n in enumerate(index.files) if n in names])]
    h = rows["_h"].to_numpy()
    keep = rows["_alive"].to_numpy(zero_copy_only=False) & np.isin(h, latest)
    g = (np.arange(rows.num_rows) // plan.row_group)[keep]
    new_index = index.without_files(names).updated(
        np.empty(0, np.int64), np.empty(0, np.int32), np.empty(0, np.int32), h[keep], add["path"], g)
    return new_index, deltas, add


def _index_from_rows(plan: TaskPlan, p: int, rows: pa.Table, prefix: str) -> tuple[PartitionIndex, Optional[dict[str, Any]]]:
    if rows.num_rows == 0:
        return PartitionIndex.empty(), None
    rows = rows.take(pc.sort_indices(rows["_h"]))
    add = plan.home.write_parquet(f"{plan.state_rel}/_part={p}", rows, prefix, p, row_group_size=plan.row_group)
    add["path"] = add.pop("rel")[len(plan.state_rel) + 1:]
    h = rows["_h"].to_numpy()
    g = np.arange(rows.num_rows) // plan.row_group
    return PartitionIndex(h, np.zeros(h.size, np.int32), g.astype(np.int32), [add["path"]]), add


def _write_outputs(plan: TaskPlan, part: int, outputs: dict[str, list[dict[str, Any]]]) -> dict[str, list[dict[str, Any]]]:
    result: dict[str, list[dict[str, Any]]] = {}
    for flow, recs in outputs.items():
        if not recs:
            continue
        inc = plan.out_incs[flow]
        table = plan.out_schemas[flow].to_arrow(recs)
        rel_dir = f"flows/{flow}/{INC}={inc}"
        add = plan.home.write_parquet(rel_dir, table, f"s{plan.stage.name}-e{plan.epoch:08d}-p{part:05d}", inc)
        add["path"] = add.pop("rel")[len(f"flows/{flow}") + 1:]
        result[flow] = [add]
    return result
