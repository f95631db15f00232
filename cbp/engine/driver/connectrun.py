"""A small epoch's one-stage job on a Spark Connect session (:func:`cbp.engine.driver.smallepoch.run_routed`).

The client may share no file system with the server, so the partitions' envelopes (Arrow IPC, routed by
the driver) go with the job's function: one round trip (``ExecutePlan``, :mod:`cbp.engine.driver.dfjobs`).
Which task runs partition ``p`` depends on the server:

- **in front of a cluster** (:func:`cbp.engine.driver.anchor.placing`): ``mapInArrow`` over the cached
  anchor, partition ``p`` in the task of the anchor's block ``p % slots``, run on the executor that holds
  that block epoch after epoch;
- **local mode** (``spark.master`` is ``local``: every task on the server's machine): ``tasks`` tasks
  (one per core) claim the partitions through files in the server's temporary directory
  (:func:`cbp.engine.task.arrowtasks.server_claiming_batches`), first those their Python worker ran last,
  as a classic driver's tasks do in local mode. A fixed share per task (partition ``p`` in task
  ``p % tasks``) met the other worker whenever Spark handed the two tasks to its two idle workers the
  other way round (``bench/connect_epochs.py``: 44 of 48 state-cache lookups hit, 48 of 48 with claims);
- **else** (a managed server that does not say, or ``CBP_PLACEMENT=0`` on a cluster): that fixed share.

Example::

    table = run_connect(spark, plan, task, payloads)   # payloads: [(p, Arrow IPC of p's envelopes)]
"""

from __future__ import annotations

import uuid
from functools import partial
from typing import TYPE_CHECKING

import pyarrow as pa

from ..common.protocol import RESULT
from ..common.sparkhash import partition_probes
from ..task.arrowtasks import routed_batches, server_claiming_batches, slot_batches
from .anchor import ANCHOR, anchor_frame, placing, spread
from .dfjobs import blob_schema, blobs_of, parallelism, range_frame, server_local

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..task.plan import GroupedTask, TaskPlan

__all__ = ["run_connect"]

#: (session id, home, stage) -> the name of the last claims directory of the stage's jobs (the next job removes it).
_LAST_JOB: dict[tuple[str, str, str], str] = {}


def run_connect(
    spark: SparkSession, plan: TaskPlan, task: GroupedTask, payloads: list[tuple[int, bytes]]
) -> tuple[pa.Table, bool]:
    """The result rows of ``task`` run on each partition's envelopes (``payloads``), in no particular order,
    and whether the tasks claimed the partitions (then the caller checks each came back once)."""
    tasks = max(1, min(len(payloads), parallelism(spark)))  # a task per core
    groups = [payloads[i::tasks] for i in range(tasks)]
    slots = tasks if placing(spark) else 0
    claimed = not slots and tasks > 1 and server_local(spark)
    if slots:  # a cluster behind the server: partition p always in the task of the anchor's block p % slots
        probes = list(partition_probes(slots))
        anchor = anchor_frame(spark, slots)
        blobs = blobs_of(anchor.mapInArrow(partial(slot_batches, plan, task, probes, groups, ANCHOR), blob_schema()))
    elif claimed:
        key = (str(getattr(spark, "session_id", id(spark))), plan.home.location, plan.stage.name)
        job, done = uuid.uuid4().hex, _LAST_JOB.get(key)
        jobs = range_frame(spark, tasks)
        blobs = blobs_of(
            jobs.mapInArrow(partial(server_claiming_batches, plan, task, job, done, payloads, tasks), blob_schema())
        )
        _LAST_JOB[key] = job
    else:
        blobs = blobs_of(
            range_frame(spark, tasks).mapInArrow(partial(routed_batches, plan, task, groups), blob_schema())
        )
    table = pa.Table.from_batches([pa.ipc.read_record_batch(pa.py_buffer(b), RESULT) for b in blobs], schema=RESULT)
    if slots:  # the anchor's blocks on as many executors as it has slots, or cached again once
        ran = zip(table.column("part").to_pylist(), table.column("executor").to_pylist())
        spread(spark, slots, {int(p) % slots: str(e) for p, e in ran})
    return table, claimed
