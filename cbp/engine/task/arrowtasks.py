"""The small-epoch tasks of :mod:`.runners` as ``mapInArrow`` functions: what a one-stage job built on
DataFrame APIs alone runs (a Spark Connect session has no RDDs: :mod:`cbp.engine.driver.dfjobs`).

Each function first reads its whole input (a task that leaves input unread loses its Python worker
on Spark Connect, and with it the worker's state cache), then runs the task of :mod:`.runners` and
yields its messages as Arrow batches of one ``blob`` column (:data:`BLOBS`).

    >>> [b.num_rows for b in blobs(iter([b"a", b"b"]))]
    [2]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa

from .plan import GroupedTask, TaskPlan
from .runners import claiming_task, routed_task, routing_task

__all__ = ["BLOBS", "blobs", "routing_batches", "routed_batches", "claiming_batches", "slot_batches"]

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
        yield from blobs(routed_task(plan, task, iter([groups[i]])))


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
        yield from blobs(routed_task(plan, task, iter([groups[i]])))
