"""What runs inside a Spark task: routing records, and one stage epoch on one partition.

The driver side (:mod:`cbp.engine.job`) ships a :class:`TaskPlan` to every task. A grouped task
receives its partition's *new* input, sorted by key hash, key and flow, as a stream of Arrow
batches (:mod:`cbp.engine.groups`); it calls the translator once per key with one iterator per
input flow, reading the state of each chunk of keys from the partition it owns and writing the
changed state (:mod:`cbp.engine.statepart`) and the output increments (:mod:`cbp.engine.sinks`)
as it goes, in files that the driver then commits. It reports a typed result row or fails with a
typed failure record (:mod:`cbp.engine.protocol`). A task that fails leaves only unreferenced
files behind.
"""

from __future__ import annotations

import json
import signal
import threading
import time
import traceback
from contextlib import contextmanager
from functools import partial
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional, Union

import numpy as np
import pyarrow as pa

from .. import faults
from ..gcpolicy import fewer_collections
from ..model import Broadcast, Emitter, Multicast
from ..spec import StageSpec
from ..spec.resolve import safe_str
from ..spec.schema import RecordError, RecordSchema
from ..storage import INC, LAYOUT, Home
from .batch import BatchTranslate
from .columnar import ColumnarTask, columnar_ok
from .signed import consolidated_batches, delivered_consolidated, signed_record, state_record
from .bipindex import ROW_GROUP, StateMeta
from .groups import Group, group_chunks, with_state_keys
from .locality import executor_name
from .protocol import USER_EXCEPTIONS, EpochTimeout, FailureRecord, TaskFailed, TaskResult, result_batch
from .routing import BINDINGS, Copies, Routes, check_target, copy_key, decode_key, elided_fields, encode_key, envelope_schema, plain_envelopes, plain_route_field, restore_fields
from .framing import FramedSink
from .sinks import ParquetSink, RecordSink, io_path
from .statepart import BlackboxPartition, DirectPartition, OldState
from .keyedbatch import KeyedBatch, KeyedRows, state_partition

__all__ = ["TaskPlan", "EpochTimeout", "encode_key", "route_batches", "grouped_task", "recordwise_task", "time_limit"]

RETRY_GRACE = 2.0  # seconds a task attempt started after its epoch's deadline runs (less than the driver's cancel grace)


@dataclass
class TaskPlan:
    """Everything a task of one stage epoch needs (pickled to the executors)."""

    home: Home
    stage: StageSpec
    epoch: int
    mode: str
    out_schemas: dict[str, RecordSchema]
    out_incs: dict[str, int]
    out_frames: dict[str, str]  # output flows framed by a field: that field (framed in the task, cbp.engine.framing)
    input_schemas: list[RecordSchema]
    state_rel: str
    parts: dict[int, StateMeta] = field(default_factory=dict)
    max_files: int = 8
    row_group: int = ROW_GROUP
    cache_mb: Optional[float] = None
    index_mb: Optional[float] = None  # the worker's partition index budget (cbp.engine.indexpages.INDEX_MB when None)
    scan_fraction: Optional[float] = None  # the state scan rule's threshold (cbp.engine.bipindex.SCAN_FRACTION when None)
    scan_choice: dict[int, float] = field(default_factory=dict)  # per partition: the driver's scan (0) or index (2) choice
    fault: Optional[str] = None  # CBP_FAULT of the driver (crash tests, see cbp.faults)
    driver_pid: int = 0
    deadline: Optional[float] = None  # wall-clock time (time.time()) the epoch must end by
    timeout: Optional[float] = None  # the limit that set it, in seconds (for messages)
    write_rows: int = 4096  # output records a task buffers before appending them to its file
    probes: list[str] = field(default_factory=list)  # per partition, a string Spark hashes into it (cbp.engine.routing)
    bindings: list[str] = field(default_factory=list)  # URIs of the bindings files the epoch reads (named by the epoch that made them)
    made_in: dict[str, int] = field(default_factory=dict)  # input file URI -> the epoch of this stage that wrote it (loopback flows)
    new_records: Optional[int] = None  # records of the increments the epoch reads (None: not known)
    small_records: Optional[int] = None  # up to how many the driver routes them (cbp.engine.smallepoch; None: its default)
    columnar: bool = True  # a batch translator may take the columnar path (cbp.engine.columnar; CBP_COLUMNAR=0: never)

    @property
    def elided(self) -> dict[int, str]:
        """The inputs whose RouteBy field crosses the shuffle as the key only (:func:`cbp.engine.routing.elided_fields`)."""
        return elided_fields([i.route_by.field if i.route_by is not None else None for i in self.stage.inputs], self.input_schemas)

    def envelope_schema(self) -> pa.Schema:
        """The envelopes of this stage epoch (:func:`cbp.engine.routing.envelope_schema`)."""
        return envelope_schema(self.input_schemas, self.stage.state_schema if self.mode == "blackbox" else None, self.elided)

    def where(self, key: Any = None) -> str:
        s = f"stage '{self.stage.name}' epoch {self.epoch}"
        return s if key is None else f"{s} key {key!r}"


def _failed(plan: TaskPlan, code: str, message: str, **fields: Any) -> TaskFailed:
    return TaskFailed(FailureRecord(code, message, plan.stage.name, plan.epoch, **fields))


def _user_failure(plan: TaskPlan, where: str, fn_name: str, exc: BaseException, key_text: Optional[str] = None) -> TaskFailed:
    """The failure of user code ``fn_name`` that raised ``exc`` (or was interrupted by the time limit)."""
    tb = traceback.extract_tb(exc.__traceback__)
    user = [fr for fr in tb if "/cbp/" not in fr.filename.replace("\\", "/")] or tb[-1:]
    loc = f"{user[-1].filename}:{user[-1].lineno}" if user else None
    if isinstance(exc, EpochTimeout):
        return _failed(plan, "timeout", f"{where}: {fn_name} was still running when the epoch's time limit was up; the key is the one it was called for",
                       key=key_text, location=loc)
    return _failed(plan, "user-code", f"{where}: {fn_name} raised {type(exc).__name__}: {safe_str(exc)}" + (f" ({loc})" if loc else ""),
                   key=key_text, exc_type=type(exc).__name__, location=loc)


# ------------------------------------------------------------------ routing (map side)
def route_batches(plan: TaskPlan, flow_idx: int, made: int, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """RouteBy each record of input ``flow_idx``: one envelope per distinct key it goes to, or one
    copy per partition for a broadcast or multicast key (:mod:`cbp.engine.routing`); ``made``: the
    epoch whose bindings deliver the records' multicasts (:func:`cbp.engine.routing.bound_address`)."""
    with fewer_collections():
        yield from _route_batches(plan, flow_idx, made, batches)


def _route_batches(plan: TaskPlan, flow_idx: int, made: int, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    inp = plan.stage.inputs[flow_idx]
    route = inp.route_by
    assert route is not None
    schema = plan.envelope_schema()
    routes = Routes(flow_idx, plan.probes, schema)
    flows = [i.flow for i in plan.stage.inputs]
    plain = plain_route_field(route, plan.input_schemas[flow_idx])
    for b in batches:
        env = plain_envelopes(flow_idx, plain, b, schema) if plain is not None else None
        if env is not None:  # every record of the batch routed by Arrow
            if env.num_rows:
                yield env
            continue
        routes.start(b)
        for row, rec in enumerate(b.to_pylist()):
            try:
                out = route(plan.input_schemas[flow_idx].from_storage(dict(rec)))
            except (*USER_EXCEPTIONS, EpochTimeout) as e:
                raise _user_failure(plan, f"{plan.where()} flow '{inp.flow}' record {_shown(rec)}", f"route_by '{route.text}'", e) from None
            many = out if isinstance(out, (list, set, frozenset)) else (out,)  # a tuple is one composite key
            if None in many and route.field is None:  # a field's null is a key, as in a Spark groupBy
                raise _failed(plan, "user-code", f"{plan.where()} flow '{inp.flow}': route_by '{route.text}' returned no key (None) for record {_shown(rec)}")
            keys: list[str] = []
            copied: set[str] = set()
            for k in many:
                if isinstance(k, (Broadcast, Multicast)):
                    why = check_target(k, flows)
                    if why is not None:
                        raise _failed(plan, "route-target", f"{plan.where()} flow '{inp.flow}': route_by '{route.text}': {why}; record {_shown(rec)}")
                    ck = copy_key(k, made)
                    if ck not in copied:  # the same broadcast or multicast twice: one copy
                        copied.add(ck)
                        yield from routes.add_copies(ck, row)
                    continue
                try:
                    keys.append(encode_key(k))
                except (TypeError, ValueError, RecursionError) as e:
                    raise _failed(plan, "user-code", f"{plan.where()} flow '{inp.flow}': route_by '{route.text}' returned a key that is not a JSON value "
                                  f"({e}) for record {_shown(rec)}") from None
            for k in (dict.fromkeys(keys) if len(keys) > 1 else keys):  # a record goes to each distinct key once
                full = routes.add(k, row)
                if full is not None:
                    yield full
        last = routes.flush()
        if last is not None:
            yield last


def _shown(rec: dict[str, Any]) -> str:
    """A record in an error message: its JSON text, cut at 200 characters."""
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False, default=str)[:200]


# ------------------------------------------------------------------ translate calls
class _Calls:
    """Calls the translator for one key at a time; validates what it writes, appends outputs to their files."""

    def __init__(self, plan: TaskPlan, part: int) -> None:
        self.plan = plan
        st = plan.stage
        self.outputs = {f: RecordSink(_output_sink(plan, f, part), plan.out_schemas[f].signed().to_arrow, plan.write_rows) for f in st.outputs}
        self.bindings = RecordSink(ParquetSink(plan.home, LAYOUT.bindings(st.name), f"{LAYOUT.epoch_prefix(plan.epoch)}-p{part:05d}", BINDINGS, part),
                                   lambda rows: pa.Table.from_pylist(rows, BINDINGS), plan.write_rows)
        self._validators = {f: partial(signed_record, plan.out_schemas[f]) for f in st.outputs}
        if st.state_schema is not None:
            self._validators["state"] = partial(state_record, st.state_schema)
        self.state_out: list[dict[str, Any]] = []
        self.key: Any = None
        self.key_text: Optional[str] = None
        self.emitter = Emitter(st.name, plan.epoch, st.params, st.outputs, st.state_schema is not None, self._sink,
                               None if st.record_wise else self.bind)
        self.calls = 0

    def _sink(self, flow: str, record: Any) -> None:
        try:
            rec = self._validators[flow](record)
        except RecordError as e:
            raise _failed(self.plan, "user-code" if e.code == "bad-record" else e.code, f"{self.plan.where(self.key)}: the translator wrote a record to '{flow}' that does not fit its schema: "
                          f"{e}; record {record!r:.200}", key=self.key_text, exc_type=type(e).__name__) from None
        if flow == "state":
            self.state_out.append(rec)
        else:
            self.outputs[flow].add(rec)

    def bind(self, key: Any, address: Any) -> None:
        """Record a multicast binding (``out.associate``) for the stage's next epoch."""
        try:
            row = {"_key": encode_key(key), "_addr": encode_key(address)}
        except (TypeError, ValueError) as e:
            raise _failed(self.plan, "user-code", f"{self.plan.where(self.key)}: out.associate({key!r:.80}, {address!r:.80}): "
                          f"the key and the address must be JSON values ({e})", key=self.key_text, exc_type=type(e).__name__) from None
        if address is None:
            raise _failed(self.plan, "user-code", f"{self.plan.where(self.key)}: out.associate({key!r:.80}, None): a multicast address cannot be None",
                          key=self.key_text, exc_type="TypeError")
        self.bindings.add(row)

    def call(self, key_text: Optional[str], key: Any, state: list[dict[str, Any]], inputs: list[Iterator[dict[str, Any]]]) -> list[dict[str, Any]]:
        self.key, self.key_text = key, key_text
        self.state_out = []
        self.calls += 1
        st = self.plan.stage
        try:
            st.translator(key, state if isinstance(state, KeyedRows) else iter(state), *inputs, out=self.emitter)
        except TaskFailed:
            raise
        except (*USER_EXCEPTIONS, EpochTimeout) as e:
            raise _user_failure(self.plan, self.plan.where(key), f"translator '{st.translator_path}'", e, key_text) from None
        return self.state_out

    @property
    def counts(self) -> dict[str, int]:
        return {f: s.count for f, s in self.outputs.items()}

    def close_bindings(self) -> list[dict[str, Any]]:
        """Finish the bindings file: its add action (path relative to the home), if any binding was made."""
        add = self.bindings.close()
        if add is None:
            return []
        add["path"] = add.pop("rel")
        return [add]

    def close(self) -> dict[str, list[dict[str, Any]]]:
        """Finish the output files; their add actions per flow (paths relative to the flow's table)."""
        result: dict[str, list[dict[str, Any]]] = {}
        for flow, sink in self.outputs.items():
            done = sink.close()
            adds = done if isinstance(done, list) else [] if done is None else [done]
            for add in adds:
                add["path"] = add.pop("rel")[len(LAYOUT.flow(flow)) + 1:]
            if adds:
                result[flow] = adds
        return result

    def abort(self) -> None:
        for sink in [*self.outputs.values(), self.bindings]:
            sink.sink.abort()


def _output_sink(plan: TaskPlan, flow: str, part: int) -> ParquetSink | FramedSink:
    """Where a task writes its records of output ``flow``: one file in the directory of the
    increment the epoch took for it, or, for a flow framed by a field, one file per run there
    (their increments are told by the driver, :mod:`cbp.engine.framing`)."""
    rel_dir, prefix = LAYOUT.increment_dir(flow, plan.out_incs[flow]), LAYOUT.output_prefix(plan.stage.name, plan.epoch) + f"-p{part:05d}"
    schema = plan.out_schemas[flow].signed()
    field = plan.out_frames.get(flow)
    if field is None:
        return ParquetSink(plan.home, rel_dir, prefix, schema.arrow, plan.out_incs[flow])
    return FramedSink(plan.home, rel_dir, prefix, schema.arrow, field, json_text=schema.fields[field].scalar == "json" and not schema.fields[field].is_list,
                      epoch=plan.epoch, partition=plan.out_incs[flow])


def _flow_iter(plan: TaskPlan, idx: int, items: list[Any], key: Any, key_text: str) -> Iterator[dict[str, Any]]:
    """One input flow's records of a key for the translator, in OrderBy order: ``items`` are the
    group's (:mod:`cbp.engine.groups`): records in stored form, or the JSON texts of copies."""
    schema = plan.input_schemas[idx]
    order = plan.stage.inputs[idx].order_by
    if order is None:  # OrderByAny: arrival order, decoded lazily
        return (schema.from_storage(json.loads(t) if type(t) is str else t) for t in items)
    recs = [schema.from_storage(json.loads(t) if type(t) is str else t) for t in items]
    try:
        recs.sort(key=order.sort_key(schema))
    except (*USER_EXCEPTIONS, EpochTimeout) as e:
        raise _user_failure(plan, f"{plan.where(key)} flow '{plan.stage.inputs[idx].flow}'", f"order_by '{order.text}'", e, key_text) from None
    return iter(recs)


@contextmanager
def _io_errors(plan: TaskPlan) -> Iterator[None]:
    try:
        with time_limit(plan):
            yield
    except OSError as e:  # a full or read-only home, a lost object store
        raise _failed(plan, "io", f"{plan.where()}: cannot write to the home {plan.home.location}: {e}",
                      path=io_path(e) or plan.home.location, errno=e.errno) from None
    except EpochTimeout:  # up outside user code: no key to name
        raise _failed(plan, "timeout", f"{plan.where()}: the epoch's time limit was up") from None


@contextmanager
def time_limit(plan: TaskPlan) -> Iterator[None]:
    """Raise :class:`EpochTimeout` in this task when ``plan.deadline`` passes (SIGALRM).

    A Spark Python worker runs its task in its main thread, where signals are delivered; the
    exception surfaces inside whatever Python code runs then, usually the translator, so the
    failure can name the key. The driver also cancels the job a little later, for code that
    never returns to the interpreter."""
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
_Partition = Union[DirectPartition, BlackboxPartition, None]


def grouped_task(plan: TaskPlan, batches: Iterable[pa.RecordBatch], part: Optional[int] = None) -> Iterator[pa.RecordBatch]:
    """One stage epoch on one partition (direct or black-box): ``part``, else the Spark task's."""
    with _io_errors(plan), fewer_collections():
        yield from _grouped_task(plan, batches, part)


def _grouped_task(plan: TaskPlan, batches: Iterable[pa.RecordBatch], part_id: Optional[int]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    p = TaskContext.get().partitionId() if part_id is None else part_id
    elided = plan.elided
    if elided:  # RouteBy fields the envelopes left out (they crossed as the key): back into the records
        batches = (restore_fields(b, plan.input_schemas, elided) for b in batches)
    clock = _Clock()
    calls = _Calls(plan, p)
    part: _Partition = None
    copies = Copies(plan)
    try:
        if plan.stage.state_schema is not None:  # (keyed rows: cbp.engine.keyedstate)
            part = state_partition(plan, p, calls)
        clock.lap("index_load")
        stats: dict[str, Any] = {"in": 0}
        batch = ((KeyedBatch if plan.stage.row_key else BatchTranslate)(plan, calls, partial(_update, part), _failed, _user_failure, _flow_iter,
                                direct=part if isinstance(part, DirectPartition) else None) if plan.stage.batch else None)
        if batch is not None and not plan.stage.row_key and columnar_ok(plan, part):  # no key groups: Arrow all the way (cbp.engine.columnar)
            stats["in"] = ColumnarTask(plan, batch, part if isinstance(part, DirectPartition) else None, clock).run(batches)
            stats["columnar"] = 1
        else:
            chunks = copies.absorb(group_chunks(batches, len(plan.stage.inputs), arrow=plan.stage.batch))
            for g, old in _keyed(plan, part, chunks, clock, copies):
                stats["in"] += g.records
                _translate(plan, calls, part, g, old, copies, batch)
            if batch is not None:
                batch.flush()
        clock.lap("translate")
        stats.update(copies.stats)
        result = _finish(plan, p, calls, part, stats, clock)
        result.executor = executor_name()
    except BaseException:
        calls.abort()
        if part is not None:
            part.abort()
        raise
    yield result_batch(result)


def _keyed(plan: TaskPlan, part: _Partition, chunks: Iterator[list[Group]], clock: "_Clock", copies: Copies) -> Iterator[tuple[Group, Optional[OldState]]]:
    """The keys to visit, in hash order, with their stored state (direct mode): those with input
    (multicast deliveries included), plus, for outer grouping or a broadcast to the stored keys,
    every stored key of the partition."""
    if isinstance(part, DirectPartition) and (plan.stage.grouping == "outer" or copies.to_state):
        for g, old in with_state_keys(_delivered(chunks, copies), part.scan(), len(plan.stage.inputs)):
            yield g, old
        return
    for chunk in chunks:
        clock.lap("input")
        chunk = list(_delivered((chunk,), copies))
        found = part.lookup(np.array([g.h for g in chunk], np.int64)) if isinstance(part, DirectPartition) else {}
        clock.lap("state_read")
        for g in chunk:
            hit = found.get(g.key)
            yield g, (hit[1] if hit is not None else None)
        clock.lap("translate")


def _delivered(chunks: Iterable[list[Group]], copies: Copies) -> Iterator[Group]:
    """The key groups with their multicast deliveries; a group left with neither input nor state
    (a key bound to addresses nothing was sent to) is dropped."""
    for chunk in chunks:
        for g in chunk:
            copies.deliver_multicast(g)
            if g.records or g.state:
                yield g


def _translate(plan: TaskPlan, calls: _Calls, part: _Partition, g: Group, old: Optional[OldState], copies: Copies,
               batch: Optional[BatchTranslate] = None) -> None:
    """Call the translator for one key (if it is called) and hand its new state to the partition
    (a batch translator: queue the key for the next batch call)."""
    st = plan.stage
    if isinstance(part, BlackboxPartition):  # (keyed rows: rows_for, read as the translator asks, cbp.engine.keyedstate)
        records = part.rows_for(g) if st.row_key else [st.state_schema.decoded_copy(r) for r in g.state]  # type: ignore[union-attr]
        has_state = bool(g.state)
    else:
        records = part.rows_for(g) if st.row_key else old.records if old is not None else []  # type: ignore[union-attr]
        has_state = old is not None
    delivered_consolidated(g, copies, has_state, st.grouping == "outer", st.batch)
    if not g.records and not (st.grouping == "outer" and has_state):
        if batch is not None and isinstance(part, BlackboxPartition):
            batch.add(g, old, records, called=False)  # kept, in key order with the batch's keys
        elif isinstance(part, BlackboxPartition):
            part.update(g.key, g.h, g.state, records)  # a key without input keeps its state
        return
    if batch is not None:
        batch.add(g, old, records)
        return
    key = decode_key(g.key)
    inputs = [_flow_iter(plan, idx, g.flows[idx], key, g.key) for idx in range(len(st.inputs))]
    _update(part, g, old, calls.call(g.key, key, records, inputs))


def _update(part: _Partition, g: Group, old: Optional[OldState], new: list[dict[str, Any]]) -> None:
    """Hand a key's new state to its partition, which compares it with the state as stored."""
    if isinstance(part, BlackboxPartition):
        part.update(g.key, g.h, g.state, new)  # type: ignore[arg-type]
    elif part is not None:
        part.update(g.key, g.h, old, new)


def _finish(plan: TaskPlan, p: int, calls: _Calls, part: _Partition, stats: dict[str, Any], clock: "_Clock") -> TaskResult:
    """Close the state and output files; the task's result."""
    index, adds, removes = (plan.parts.get(p, StateMeta()).index, [], []) if part is None else part.finish(stats)
    clock.lap("state_write")
    faults.task_point(plan.fault, "task:state-written", plan.driver_pid)
    outputs = calls.close()
    bindings = calls.close_bindings()
    faults.task_point(plan.fault, "task:outputs-written", plan.driver_pid)
    clock.lap("outputs")
    stats.setdefault("state_read", 0)
    stats.setdefault("state_written", 0)
    stats.update(seconds=clock.laps, keys=calls.calls, out=calls.counts)
    return TaskResult(part=p, index=index, state_adds=adds, state_removes=removes, outputs=outputs, stats=stats, bindings=bindings,
                      index_garbage=getattr(part, "index_garbage", []))


# ------------------------------------------------------------------ record-wise task
def recordwise_task(plan: TaskPlan, flow_idx: int, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A record-wise stage (no state, RouteByRcd): translate each record alone, no shuffle."""
    with _io_errors(plan), fewer_collections():
        yield from _recordwise_task(plan, flow_idx, batches)


def _recordwise_task(plan: TaskPlan, flow_idx: int, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    p = TaskContext.get().partitionId()
    calls = _Calls(plan, p * 1000 + flow_idx)
    n_in = 0
    empty: list[dict[str, Any]] = []
    schema = plan.input_schemas[flow_idx]
    try:
        for b in consolidated_batches(batches):
            for rec in b.to_pylist():
                n_in += 1
                inputs: list[Iterator[dict[str, Any]]] = [iter(()) for _ in plan.stage.inputs]
                inputs[flow_idx] = iter((schema.from_storage(rec),))
                calls.call(None, None, empty, inputs)
        outputs = calls.close()
    except BaseException:
        calls.abort()
        raise
    faults.task_point(plan.fault, "task:outputs-written", plan.driver_pid)
    stats = {"in": n_in, "keys": calls.calls, "state_read": 0, "state_written": 0, "out": calls.counts}
    yield result_batch(TaskResult(part=p, outputs=outputs, stats=stats, executor=executor_name()))


class _Clock:
    """Seconds spent in each phase of a task (reported in the task's stats)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self._t, 4)
        self._t = now
