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

from collections.abc import Iterable, Iterator

import pyarrow as pa

from .plan import GroupedTask, TaskPlan
from .runners import claiming_task, routed_task, routing_task

__all__ = ["BLOBS", "blobs", "session_batches", "routing_batches", "routed_batches", "claiming_batches", "slot_batches"]

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
