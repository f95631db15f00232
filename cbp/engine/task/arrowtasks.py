"""The small-epoch tasks of :mod:`.runners` as ``mapInArrow`` functions: what a one-stage job built on
DataFrame APIs alone runs (a Spark Connect session has no RDDs: :mod:`cbp.engine.driver.dfjobs`).

Each function first reads its whole input (a task that leaves input unread loses its Python worker
on Spark Connect, and with it the worker's state cache), then runs the task of :mod:`.runners` and
yields its messages as Arrow batches of one ``blob`` column (:data:`BLOBS`).

The envelopes sent with the function were cut into Arrow batches of the session's
``spark.sql.execution.arrow.maxRecordsPerBatch`` as the client last asked it (once per session: each
question is a round trip); a task cuts them again to the session's setting at the time of the job, which
Spark SQL gives the job's tasks as a local property (:func:`session_batches`), as a shuffle would.

    >>> [b.num_rows for b in blobs(iter([b"a", b"b"]))]
    [2]
"""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator

import pyarrow as pa

from .plan import GroupedTask, TaskPlan
from .runners import claimant, claiming_task, routed_task, routing_task

__all__ = [
    "BLOBS",
    "blobs",
    "session_batches",
    "routing_batches",
    "routed_batches",
    "claiming_batches",
    "server_claiming_batches",
    "slot_batches",
    "CLAIMS",
]

#: The output of every function here: one binary column.
BLOBS = pa.schema([pa.field("blob", pa.binary())])


def blobs(messages: Iterable[bytes], per_batch: int = 64) -> Iterator[pa.RecordBatch]:
    """``messages`` as Arrow batches of :data:`BLOBS`, up to ``per_batch`` a batch."""
    held: list[bytes] = []
    for m in messages:
        held.append(m)
        if len(held) >= per_batch:
            yield pa.RecordBatch.from_arrays([pa.array(held, pa.binary())], schema=BLOBS)
            held = []
    if held:
        yield pa.RecordBatch.from_arrays([pa.array(held, pa.binary())], schema=BLOBS)


def session_batches(group: list[tuple[int, bytes]], chunk: int | None = None) -> list[tuple[int, bytes]]:
    """A task's partitions ``(p, envelopes)`` (Arrow IPC streams) with no batch over ``chunk`` records
    (default: the session's ``spark.sql.execution.arrow.maxRecordsPerBatch`` at the time of the job, from
    the task's local properties; none outside a Spark task, or none set: as they are).

    >>> sink = pa.BufferOutputStream()
    >>> with pa.ipc.new_stream(sink, pa.schema([("k", pa.int64())])) as w:
    ...     w.write_table(pa.table({"k": list(range(20))}))
    >>> [(p, [b.num_rows for b in pa.ipc.open_stream(s)]) for p, s in session_batches([(3, sink.getvalue())], 8)]
    [(3, [8, 8, 4])]
    """
    chunk = chunk or _session_chunk()
    if chunk is None:
        return group
    out = []
    for p, data in group:
        reader = pa.ipc.open_stream(data)
        batches = list(reader)
        if all(b.num_rows <= chunk for b in batches):
            out.append((p, data))
            continue
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, reader.schema) as w:
            w.write_table(pa.Table.from_batches(batches, reader.schema), max_chunksize=chunk)
        out.append((p, sink.getvalue()))
    return out


def _session_chunk() -> int | None:
    """The job's ``spark.sql.execution.arrow.maxRecordsPerBatch`` (a local property of its tasks), or None."""
    from pyspark import TaskContext

    context = TaskContext.get()
    value = context.getLocalProperty("spark.sql.execution.arrow.maxRecordsPerBatch") if context else None
    try:
        return int(value) if value and int(value) > 0 else None
    except ValueError:
        return None


def _rows(batches: Iterator[pa.RecordBatch]) -> list[dict[str, object]]:
    """Every row of the task's input, read to its end."""
    return [row for b in list(batches) for row in b.to_pylist()]


def _ids(batches: Iterator[pa.RecordBatch]) -> list[int]:
    """The ``id`` of every row of a task of ``spark.range(0, n, 1, n)`` (task ``i`` holds ``i``), read to the end."""
    return [int(r["id"]) for r in _rows(batches)]  # type: ignore[call-overload]


def routing_batches(
    plan: TaskPlan, cap: int, groups: list[list[tuple[int, int, bytes]]], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """:func:`.runners.routing_task` in task ``i`` of a range: ``groups[i]``, slices ``(i, made, data)`` of
    input ``i`` (Arrow IPC), sent with the function."""
    for i in _ids(batches):
        yield from blobs(routing_task(plan, cap, iter(groups[i])))


def routed_batches(
    plan: TaskPlan, task: GroupedTask, groups: list[list[tuple[int, bytes]]], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """:func:`.runners.routed_task` in task ``i`` of a range: ``groups[i]``, partitions ``(p, envelopes)``
    (Arrow IPC), sent with the function."""
    for i in _ids(batches):
        yield from blobs(routed_task(plan, task, iter([session_batches(groups[i])])))


def claiming_batches(
    plan: TaskPlan,
    task: GroupedTask,
    work: str,
    n: int,
    tasks: int,
    last: dict[int, int],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """:func:`.runners.claiming_task` in the tasks of ``spark.range(0, tasks, 1, tasks)`` (task ``i``
    holds ``i``)."""
    yield from blobs(claiming_task(plan, task, work, n, tasks, last, iter(_ids(batches))))


#: The directory, in a Spark Connect server's temporary directory, where its tasks in local mode claim a small
#: epoch's partitions (:func:`server_claiming_batches`).
CLAIMS = "cbp-claims"
#: A job's claims directory older than this (its driver gone) is removed by a later task; a stage's
#: ``.pid`` files (who ran each partition last) after a week without an epoch.
CLAIMS_KEPT, WORKERS_KEPT = 3600.0, 7 * 86400.0


def server_claiming_batches(
    plan: TaskPlan,
    task: GroupedTask,
    job: str,
    done: str | None,
    payloads: list[tuple[int, bytes]],
    tasks: int,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """:func:`.runners.claiming_task` in the tasks of ``spark.range(0, tasks, 1, tasks)`` on a Spark Connect
    server in local mode: its tasks share a machine, the client need not. Every partition's envelopes
    (``payloads``: ``(p, Arrow IPC)``) come with the function; the tasks claim them through files in the
    server's temporary directory (:data:`CLAIMS`, a directory ``job`` of this job; ``done``, the last job's
    of the stage, is removed), first the partitions their Python worker ran last (that worker caches their
    state), which the tasks remember there too: one file per partition naming the worker's pid."""
    ids = _ids(batches)
    root = os.path.join(tempfile.gettempdir(), CLAIMS)
    stage = hashlib.sha1(f"{plan.home.location}|{plan.stage.name}".encode()).hexdigest()[:16]
    work = os.path.join(root, f"{stage}-{job}")
    os.makedirs(work, exist_ok=True)
    _sweep_claims(root, work, None if done is None else os.path.join(root, f"{stage}-{done}"))
    n = len(payloads)
    last = {p: pid for p in range(n) if (pid := _read_pid(os.path.join(root, f"{stage}-p{p}.pid"))) is not None}
    envelopes = {p: data for p, data in session_batches(payloads)}
    yield from blobs(claiming_task(plan, task, work, n, tasks, last, iter(ids), envelopes))
    me = os.getpid()
    for p in range(n):
        if claimant(work, p)[1] == me:
            _write_pid(os.path.join(root, f"{stage}-p{p}.pid"), me)


def _read_pid(path: str) -> int | None:
    try:
        with open(path) as f:
            return int(f.read())
    except (OSError, ValueError):
        return None


def _write_pid(path: str, pid: int) -> None:
    """``pid`` into ``path``, replaced at once (a task of the next job may read it)."""
    tmp = f"{path}.{pid}.tmp"
    with open(tmp, "w") as f:
        f.write(str(pid))
    os.replace(tmp, path)


def _sweep_claims(root: str, work: str, done: str | None) -> None:
    """Remove the last job's claims directory (``done``: its job ended before this one started) and those
    of jobs whose driver went away (older than :data:`CLAIMS_KEPT`), and stages' ``.pid`` files unused
    for :data:`WORKERS_KEPT`."""
    if done is not None:
        shutil.rmtree(done, ignore_errors=True)
    now = time.time()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        path = os.path.join(root, name)
        try:
            age = now - os.path.getmtime(path)
        except OSError:
            continue
        if name.endswith(".pid") and age > WORKERS_KEPT:
            _unlink(path)
        elif path != work and not name.endswith((".pid", ".tmp")) and age > CLAIMS_KEPT:
            shutil.rmtree(path, ignore_errors=True)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def slot_batches(
    plan: TaskPlan,
    task: GroupedTask,
    probes: list[str],
    groups: list[list[tuple[int, bytes]]],
    column: str,
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """:func:`.runners.routed_task` in the task of an anchor's slot (:mod:`cbp.engine.driver.anchor`): its
    one input row is the slot's probe (``probes[i]`` for slot ``i``); ``groups[i]`` are the partitions
    ``(p, envelopes)`` of slot ``i``, sent with the function."""
    mine = [probes.index(str(r[column])) for r in _rows(batches)]
    for i in mine:
        yield from blobs(routed_task(plan, task, iter([session_batches(groups[i])])))
