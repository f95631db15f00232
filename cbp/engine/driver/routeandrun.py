"""A small epoch with a RouteBy function in one Spark job: its one task routes the records, then runs the
partitions (:func:`cbp.engine.task.routerun.route_and_run`).

A small epoch (:mod:`cbp.engine.driver.smallepoch`) whose records a RouteBy function routes (user code, which
never runs in the driver) ran two jobs: one whose tasks route the records and send the envelopes back, then,
once the driver has partitioned and sorted them, one that runs the partitions. When the records fit one
routing task (:data:`cbp.engine.driver.smallepoch.ROUTE_AND_RUN`), the routing job had one task: that task now
also partitions the envelopes, with the driver's own code, and runs every partition, one after the other. Each
record is routed once, as before; the job's fixed cost (a second job: its scheduling, a Python worker's
round trip) is saved. It is not used where each partition's task must run where its state is cached (a
cluster: preferred locations, or a Connect server's anchor): there a partition keeps its own task.

Example::

    table = route_and_run_job(spark, plan, RouteAndRun(envelopes, [(0, 4, records)]), task, cap, 10_000)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa

from ..common.protocol import RESULT
from ..task.routerun import route_and_run, route_and_run_batches
from .anchor import placing
from .dfjobs import blob_schema, blobs_of, range_frame

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..task.plan import GroupedTask, TaskPlan

__all__ = ["RouteAndRun", "fits_one_task", "route_and_run_job"]


@dataclass(frozen=True)
class RouteAndRun:
    """A small epoch's envelopes the driver routed (plain fields, bindings, cbp's own RouteBy), and the
    records a RouteBy function routes: ``(input, the epoch whose bindings deliver its multicasts, records)``."""

    envelopes: pa.Table
    records: list[tuple[int, int, pa.Table]]

    @property
    def count(self) -> int:
        """How many records the RouteBy functions route."""
        return sum(t.num_rows for _, _, t in self.records)


def fits_one_task(spark: SparkSession, plan: TaskPlan, records: int, limit: int) -> bool:
    """Whether ``records`` for RouteBy functions go to one job of one task (up to ``limit`` of them, not on a
    cluster, not a SQL view's stage that runs in the driver)."""
    if not 0 < records <= limit or plan.path.placed or plan.path.driver_run is not None:
        return False
    return not (plan.path.connect and placing(spark))


def _ipc(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as w:
        w.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def route_and_run_job(
    spark: SparkSession, plan: TaskPlan, fused: RouteAndRun, task: GroupedTask, cap: int, chunk: int
) -> pa.Table | None:
    """The result rows of ``task`` on every partition, in no particular order, from one job of one task; None
    (no partition run) when the envelopes pass ``cap`` bytes or a key is too long for the driver's hashing."""
    item = (_ipc(fused.envelopes), [(i, made, _ipc(t)) for i, made, t in fused.records])
    if plan.path.connect:  # no RDDs: the records go with the function (one round trip)
        job = range_frame(spark, 1)
        blobs = blobs_of(job.mapInArrow(partial(route_and_run_batches, plan, task, cap, chunk, item), blob_schema()))
    else:  # through parallelize's file, not the task's closure
        data = spark.sparkContext.parallelize([item], 1)
        blobs = data.mapPartitions(partial(route_and_run, plan, task, cap, chunk)).collect()
    if any(not b for b in blobs):
        return None
    return pa.Table.from_batches([pa.ipc.read_record_batch(pa.py_buffer(b), RESULT) for b in blobs], schema=RESULT)
