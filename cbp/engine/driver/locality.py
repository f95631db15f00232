"""Which executor runs a task, and keeping state partition ``p`` on the same executor across epochs.

**Naming an executor.** A Python task cannot ask Spark for its executor id (``SparkEnv`` lives in
the JVM). Its Python worker is a child of the ``pyspark.daemon``, itself a child of the executor
JVM, whose command line (``CoarseGrainedExecutorBackend``, the same on standalone, YARN and
Kubernetes) carries ``--executor-id`` and ``--hostname``. :func:`executor_name` walks up the
process tree through ``/proc`` to find them and returns ``"<id>@<host>"``; a task in local mode
(no such ancestor) is ``"driver@<host>"``.

**Placement.** Spark's reduce tasks only prefer *hosts* that hold map output, which is useless
when executors share a host. A task location of the form ``executor_<host>_<id>`` (Spark's
``ExecutorCacheTaskLocation``) makes Spark schedule a task PROCESS_LOCAL on that executor first
(delay scheduling, ``spark.locality.wait``). PySpark cannot set an RDD's preferred locations, but
``SparkContext.makeRDD(Seq[(item, Seq[location])])`` can, through py4j. :func:`located_rdd` zips
such an RDD (one item per partition) with the partitions of the shuffled input: a zipped
partition prefers its parents' locations, so partition ``p``'s task goes to the executor that ran
``p`` last epoch (and kept its state files in its cache) while that executor lives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..common.protocol import RESULT
from ..task.runners import placed_task

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import SparkContext
    from pyspark.sql import DataFrame, SparkSession

    from ..task.plan import GroupedTask, TaskPlan

__all__ = [
    "task_location",
    "located_rdd",
    "prefs_rdd",
    "placed_epoch",
    "executor_preferences",
    "remember_executors",
    "balanced",
]


def task_location(executor: str | None) -> str | None:
    """Spark's task-location string for an executor name, ``None`` for none or the driver.

    >>> task_location("1@127.0.0.1"), task_location("driver@h"), task_location(None)
    ('executor_127.0.0.1_1', None, None)
    """
    if not executor or "@" not in executor:
        return None
    eid, host = executor.split("@", 1)
    return None if eid == "driver" else f"executor_{host}_{eid}"


def prefs_rdd(sc: SparkContext, prefs: list[str | None]) -> Any:
    """A JVM RDD of one item per partition, partition ``p`` preferring location ``prefs[p]``."""
    jvm = sc._jvm
    assert jvm is not None  # a driver with its JVM
    items = jvm.java.util.ArrayList()
    for p, loc in enumerate(prefs):
        locs = jvm.java.util.ArrayList()
        if loc:
            locs.add(loc)
        seq = jvm.scala.jdk.javaapi.CollectionConverters.asScala(locs).toList()
        items.add(jvm.scala.Tuple2(bytearray(p.to_bytes(4, "big")), seq))
    tag = jvm.scala.reflect.ClassTag.apply(jvm.java.lang.Class.forName("[B"))
    return sc._jsc.sc().makeRDD(jvm.scala.jdk.javaapi.CollectionConverters.asScala(items).toList(), tag)


def located_rdd(sc: SparkContext, batches_jrdd: Any, prefs: list[str | None]) -> Any:
    """A PySpark RDD whose partition ``p`` is ``[(p_bytes, [arrow batch bytes, ...])]`` from the JVM
    RDD ``batches_jrdd`` (Arrow record batches, one partition per state partition), preferring
    to run on ``prefs[p]``."""
    from pyspark.rdd import RDD
    from pyspark.serializers import BatchedSerializer, CPickleSerializer

    jvm = sc._jvm
    assert jvm is not None  # a driver with its JVM
    left = jvm.org.apache.spark.api.java.JavaRDD.fromRDD(prefs_rdd(sc, prefs), jvm.scala.reflect.ClassTag.AnyRef())
    right = jvm.org.apache.spark.api.java.JavaRDD.fromRDD(batches_jrdd, jvm.scala.reflect.ClassTag.AnyRef()).glom()
    pairs = left.zip(right)
    pickled = jvm.org.apache.spark.api.python.SerDeUtil.pairRDDToPython(pairs.rdd(), 1)
    return RDD(
        jvm.org.apache.spark.api.java.JavaRDD.fromRDD(pickled, jvm.scala.reflect.ClassTag.AnyRef()),
        sc,
        BatchedSerializer(CPickleSerializer(), 1),  # type: ignore[no-untyped-call]
    )


#: (application, home, stage) -> {partition: executor name} of the stage's last epoch in this driver
_LAST: dict[tuple[str, str, str], dict[int, str]] = {}


def balanced(last: dict[int, str], partitions: int) -> dict[int, str]:
    """Partition -> executor for the next epoch: ``last``, with partitions moved from the busiest to
    the idlest of the executors seen until their counts differ by at most one (Spark placed the first
    epoch, maybe unevenly; each move costs that partition's cache once).

        >>> balanced({0: "a", 1: "b", 2: "b", 3: "b"}, 4)
        {0: 'a', 1: 'b', 2: 'b', 3: 'a'}
    """
    out = {p: e for p, e in last.items() if p < partitions}
    while out:
        load: dict[str, list[int]] = {}
        for p, e in sorted(out.items()):
            load.setdefault(e, []).append(p)
        busy, idle = max(load, key=lambda e: len(load[e])), min(load, key=lambda e: len(load[e]))
        if len(load[busy]) - len(load[idle]) <= 1:
            break
        out[load[busy][-1]] = idle
    return out


def _placement_key(sc: SparkContext, plan: TaskPlan) -> tuple[str, str, str]:
    return (sc.applicationId, str(plan.home.location), plan.stage.name)


def executor_preferences(sc: SparkContext, plan: TaskPlan) -> list[str | None]:
    """Per partition of ``plan``'s stage, the task location of the executor that ran it last epoch
    in this driver (:func:`balanced` over the executors), or None."""
    last = balanced(_LAST.get(_placement_key(sc, plan), {}), plan.stage.partitions)
    return [task_location(last.get(p)) for p in range(plan.stage.partitions)]


def remember_executors(sc: SparkContext, plan: TaskPlan, results: Any) -> None:
    """Note which executor ran each partition (the ``part`` and ``executor`` of the tasks' result rows)."""
    key = _placement_key(sc, plan)
    ran = {int(p): e for p, e in zip(results["part"].to_pylist(), results["executor"].to_pylist()) if e}
    _LAST[key] = {**balanced(_LAST.get(key, {}), plan.stage.partitions), **ran}


def placed_epoch(spark: SparkSession, env: DataFrame, plan: TaskPlan, task: GroupedTask) -> pa.Table:
    """Run ``task(plan, batches)`` on each partition of the DataFrame ``env`` (one per state partition),
    partition ``p`` preferring the executor that ran it in the stage's last epoch in this driver
    (:func:`balanced` over the executors);
    return the tasks' result rows (:data:`cbp.engine.common.protocol.RESULT`) as an Arrow table."""
    from functools import partial

    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    sc = spark.sparkContext
    large = str(spark.conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true"
    schema = to_arrow_schema(env.schema, prefers_large_types=True) if large else to_arrow_schema(env.schema)
    rdd = located_rdd(sc, env._jdf.toArrowBatchRdd(), executor_preferences(sc, plan))
    blobs = rdd.mapPartitions(partial(placed_task, plan, schema, task)).collect()
    table = pa.Table.from_batches([pa.ipc.read_record_batch(pa.py_buffer(b), RESULT) for b in blobs], schema=RESULT)
    remember_executors(sc, plan, table)
    return table
