"""What runs inside a Spark task: routing records, and one stage epoch on one partition.

The driver side (:mod:`cbp.engine.driver.job`) ships a :class:`TaskPlan` to every task. A grouped task
receives its partition's *new* input, sorted by key hash, key and flow, as a stream of Arrow
batches (:mod:`cbp.engine.task.groups`); it calls the translator once per key with one iterator per
input flow, reading the state of each chunk of keys from the partition it owns and writing the
changed state (:mod:`cbp.engine.task.statepart`) and the output increments (:mod:`cbp.engine.task.sinks`)
as it goes, in files that the driver then commits. It reports a typed result row or fails with a
typed failure record (:mod:`cbp.engine.common.protocol`). A task that fails leaves only unreferenced
files behind.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

from ... import faults
from ...gcpolicy import fewer_collections
from ...model import Broadcast, Multicast
from ..common.protocol import USER_FAILURES, EpochTimeout, TaskResult, result_batch
from .calls import _Calls, _failed, _user_failure
from .copies import Copies
from .executor import executor_name
from .keyedstate import state_partition
from .partition import StatePartition
from .plan import TaskPlan, _Clock
from .routing import (
    Routes,
    check_target,
    copy_key,
    encode_key,
    plain_envelopes,
    plain_route_field,
    restore_fields,
)
from .signed import consolidated_batches, consolidated_by
from .sinks import io_path
from .translators import runner_for

__all__ = ["TaskPlan", "EpochTimeout", "encode_key", "route_batches", "grouped_task", "recordwise_task", "time_limit"]

RETRY_GRACE = (
    2.0  # seconds a task attempt started after its epoch's deadline runs (less than the driver's cancel grace)
)


# ------------------------------------------------------------------ routing (map side)
def route_batches(
    plan: TaskPlan, flow_idx: int, made: int, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """RouteBy each record of input ``flow_idx``: one envelope per distinct key it goes to, or one
    copy per partition for a broadcast or multicast key (:mod:`cbp.engine.task.routing`); ``made``: the
    epoch whose bindings deliver the records' multicasts (:func:`cbp.engine.task.routing.bound_address`)."""
    with fewer_collections():
        yield from _route_batches(plan, flow_idx, made, batches)


def _route_batches(
    plan: TaskPlan, flow_idx: int, made: int, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    inp = plan.stage.inputs[flow_idx]
    route = inp.route_by
    assert route is not None
    schema = plan.envelope_schema()
    routes = Routes(flow_idx, plan.probes, schema)
    flows = [i.flow for i in plan.stage.inputs]
    plain = plain_route_field(route, plan.input_schemas[flow_idx])
    reads = getattr(route.fn, "reads", None)
    if reads is not None:  # a SQL view's input (cbp.views.run.RouteKey): records equal in what it reads are one
        batches = _consolidated_by(batches, reads)
    where = getattr(route.fn, "batch_where", None)  # a view's WHERE, evaluated with Arrow where it can be
    if where is not None:
        declared = tuple((n, ft.scalar) for n, ft in plan.input_schemas[flow_idx].fields.items() if not ft.is_list)
        batches = _kept_where(batches, where, declared)
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
            except USER_FAILURES as e:
                raise _user_failure(
                    plan, f"{plan.where()} flow '{inp.flow}' record {_shown(rec)}", f"route_by '{route.text}'", e
                ) from None
            many = out if isinstance(out, (list, set, frozenset)) else (out,)  # a tuple is one composite key
            if None in many and route.field is None:  # a field's null is a key, as in a Spark groupBy
                raise _failed(
                    plan,
                    "user-code",
                    f"{plan.where()} flow '{inp.flow}': route_by '{route.text}' returned no key (None) "
                    f"for record {_shown(rec)}",
                )
            keys: list[str] = []
            copied: set[str] = set()
            for k in many:
                if isinstance(k, (Broadcast, Multicast)):
                    why = check_target(k, flows)
                    if why is not None:
                        raise _failed(
                            plan,
                            "route-target",
                            f"{plan.where()} flow '{inp.flow}': route_by '{route.text}': {why}; record {_shown(rec)}",
                        )
                    ck = copy_key(k, made)
                    if ck not in copied:  # the same broadcast or multicast twice: one copy
                        copied.add(ck)
                        yield from routes.add_copies(ck, row)
                    continue
                try:
                    keys.append(encode_key(k))
                except (TypeError, ValueError, RecursionError) as e:
                    raise _failed(
                        plan,
                        "user-code",
                        f"{plan.where()} flow '{inp.flow}': route_by '{route.text}' returned a key that "
                        "is not a JSON value "
                        f"({e}) for record {_shown(rec)}",
                    ) from None
            for k in dict.fromkeys(keys) if len(keys) > 1 else keys:  # a record goes to each distinct key once
                full = routes.add(k, row)
                if full is not None:
                    yield full
        last = routes.flush()
        if last is not None:
            yield last


def _kept_where(
    batches: Iterable[pa.RecordBatch], where: Callable[..., pa.Array | None], declared: tuple[tuple[str, str], ...]
) -> Iterator[pa.RecordBatch]:
    """The records of ``batches`` whose view WHERE is TRUE by Arrow (:meth:`cbp.views.run.RouteKey.batch_where`);
    a batch it cannot evaluate, whole: those others are routed to no key by the RouteBy itself, row by row."""
    for b in batches:
        mask = where(b, declared)
        yield b if mask is None else b.filter(mask)


#: Records a map task holds to consolidate a view's input (:func:`_consolidated_by`) at most at once.
CONSOLIDATE_ROWS = 1 << 20


def _consolidated_by(batches: Iterable[pa.RecordBatch], reads: list[str]) -> Iterator[pa.RecordBatch]:
    """The records of ``batches`` consolidated by the fields ``reads`` (:func:`.signed.consolidated_by`),
    :data:`CONSOLIDATE_ROWS` at a time (a pair split between two such chunks reaches the task, which
    consolidates it there)."""
    held: list[pa.RecordBatch] = []
    rows = 0
    for b in batches:
        if b.num_rows:
            held.append(b)
            rows += b.num_rows
        if rows >= CONSOLIDATE_ROWS:
            yield from consolidated_by(pa.Table.from_batches(held), reads).to_batches()
            held, rows = [], 0
    if held:
        yield from consolidated_by(pa.Table.from_batches(held), reads).to_batches()


def _shown(rec: dict[str, Any]) -> str:
    """A record in an error message: its JSON text, cut at 200 characters."""
    return json.dumps(rec, separators=(",", ":"), ensure_ascii=False, default=str)[:200]


@contextmanager
def _io_errors(plan: TaskPlan) -> Iterator[None]:
    try:
        with time_limit(plan):
            yield
    except OSError as e:  # a full or read-only home, a lost object store
        raise _failed(
            plan,
            "io",
            f"{plan.where()}: cannot write to the home {plan.home.location}: {e}",
            path=io_path(e) or plan.home.location,
            errno=e.errno,
        ) from None
    except EpochTimeout:  # up outside user code: no key to name
        raise _failed(plan, "timeout", f"{plan.where()}: the epoch's time limit was up") from None


@contextmanager
def time_limit(plan: TaskPlan) -> Iterator[None]:
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
def grouped_task(
    plan: TaskPlan, batches: Iterable[pa.RecordBatch], part: int | None = None
) -> Iterator[pa.RecordBatch]:
    """One stage epoch on one partition (direct or black-box): ``part``, else the Spark task's."""
    with _io_errors(plan), fewer_collections():
        yield from _grouped_task(plan, batches, part)


def _counted(batches: Iterable[pa.RecordBatch], rows: list[int]) -> Iterator[pa.RecordBatch]:
    """``batches``, their rows added up in ``rows[0]`` as they pass."""
    for b in batches:
        rows[0] += b.num_rows
        yield b


def _grouped_task(plan: TaskPlan, batches: Iterable[pa.RecordBatch], part_id: int | None) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    if part_id is None:  # the Spark task's
        ctx = TaskContext.get()
        assert ctx is not None
        part_id = ctx.partitionId()
    p = part_id
    envelopes = [0]  # the rows this task was given: on the shuffle path, the records its partition crossed it with
    batches = _counted(batches, envelopes)
    elided = plan.elided
    if elided:  # RouteBy fields the envelopes left out (they crossed as the key): back into the records
        batches = (restore_fields(b, plan.input_schemas, elided) for b in batches)
    clock = _Clock()
    calls = _Calls(plan, p)
    part: StatePartition | None = None
    copies = Copies(plan)
    try:
        part = state_partition(plan, p, calls)  # the plan's partition kind (cbp.engine.task.partition)
        clock.lap("index_load")
        runner = runner_for(plan, calls, part, copies, clock)  # the plan's runner (cbp.engine.task.translators)
        stats: dict[str, Any] = {"in": runner.run(batches), **runner.stats}
        stats["envelopes"] = envelopes[0]
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


def _finish(
    plan: TaskPlan, p: int, calls: _Calls, part: StatePartition, stats: dict[str, Any], clock: _Clock
) -> TaskResult:
    """Close the state and output files; the task's result."""
    index, adds, removes = part.finish(stats)
    clock.lap("state_write")
    faults.task_point(plan.fault, "task:state-written", plan.driver_pid)
    outputs = calls.close()
    bindings = calls.close_bindings()
    faults.task_point(plan.fault, "task:outputs-written", plan.driver_pid)
    clock.lap("outputs")
    stats.setdefault("state_read", 0)
    stats.setdefault("state_written", 0)
    stats.update(seconds=clock.laps, keys=calls.calls, out=calls.counts)
    return TaskResult(
        part=p,
        index=index,
        state_adds=adds,
        state_removes=removes,
        outputs=outputs,
        stats=stats,
        bindings=bindings,
        index_garbage=part.index_garbage,
    )


# ------------------------------------------------------------------ record-wise task
def recordwise_task(plan: TaskPlan, flow_idx: int, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A record-wise stage (no state, RouteByRcd): translate each record alone, no shuffle."""
    with _io_errors(plan), fewer_collections():
        yield from _recordwise_task(plan, flow_idx, batches)


def _recordwise_task(plan: TaskPlan, flow_idx: int, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    assert ctx is not None  # a Spark task's
    p = ctx.partitionId()
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
