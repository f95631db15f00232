"""Small epochs without a shuffle: the driver routes a small increment itself.

A stage epoch normally is a Spark job of two stages: the map side reads the increment and routes
it, Spark's shuffle partitions it by ``pmod(hash(key), P)`` and sorts each partition by
``xxhash64(key)``, and the reduce side runs the grouped tasks. For a small increment most of that
job is fixed cost (a second stage, the shuffle, the sort; about half of a 1,000-record URLCount
epoch, ``bench/epoch_cost.py``). When the epoch's new records are at most
:func:`small_records` (default :data:`SMALL_RECORDS`, and :data:`SMALL_FILE_BYTES` of files) and
each input flow routes by a plain field, the driver reads the increment with pyarrow, routes it with Arrow
(:func:`cbp.engine.routing.plain_envelopes`), computes Spark's two hashes itself
(:mod:`cbp.engine.sparkhash`), sorts each partition's envelopes as Spark would, and runs the same
grouped task (:func:`cbp.engine.task.grouped_task`) on exactly partition ``p``'s envelopes for
each ``p``, in a one-stage job (on a cluster a task per partition, preferring the executor that
ran ``p`` last, as :mod:`cbp.engine.locality` places the normal path's tasks; else the partitions
dealt to one task per core).

Anything else takes the normal path: black-box mode (the whole state goes through the shuffle),
multicast bindings, a RouteBy function or ``ALL`` (user code and copies: the map side's job), a
batch Arrow cannot route by itself (float or list keys, key strings JSON must escape), or more records.

The knob: ``CBP_SMALL_EPOCH_RECORDS`` or the pipeline tuning option ``small_epoch_records``
(0 turns the path off).
"""

from __future__ import annotations

import os
from functools import partial
from typing import TYPE_CHECKING, Any, Iterator, Optional

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..storage import objectstore
from .routing import plain_envelopes
from .sparkhash import partition_of, spark_xxhash64

if TYPE_CHECKING:
    from .task import TaskPlan

__all__ = ["SMALL_RECORDS", "small_records", "routed_schema", "driver_routed", "run_routed"]

#: New records of an epoch up to which the driver routes them (above, Spark's shuffle does). On 2
#: cores the driver's path was faster up to 200k records (URLCount, 1M state keys: 0.69x the
#: shuffle path's epoch at 100k records, 0.79x at 200k; ``bench/epoch_cost.py --compare``).
SMALL_RECORDS = 200_000
#: ... as long as their files hold at most this many bytes, and their envelopes (what a task gets)
#: this many: the driver holds them, and a task its partition's share.
SMALL_FILE_BYTES = 16 << 20
SMALL_ENVELOPE_BYTES = 64 << 20


def routed_schema(plan: "TaskPlan") -> pa.Schema:
    """The envelopes a grouped task gets, as the shuffle hands them over (``_r`` dropped, ``_h`` added)."""
    env = plan.envelope_schema()
    return pa.schema([f for f in env if f.name != "_r"] + [pa.field("_h", pa.int64())])


def small_records(override: Optional[int] = None) -> int:
    """The threshold: ``override`` (a pipeline's ``small_epoch_records``), else
    ``CBP_SMALL_EPOCH_RECORDS``, else :data:`SMALL_RECORDS`.

        >>> small_records(0), small_records(5)
        (0, 5)
    """
    if override is not None:
        return int(override)
    env = os.environ.get("CBP_SMALL_EPOCH_RECORDS")
    try:
        return int(env) if env else SMALL_RECORDS
    except ValueError:
        return SMALL_RECORDS


def driver_routed(plan: "TaskPlan", input_files: dict[int, list[str]]) -> Optional[list[pa.Table]]:
    """Partition ``p``'s envelopes (sorted as the shuffle sorts them) for each ``p``, or None when
    this epoch must take the normal path (see the module's docstring)."""
    if (plan.mode != "direct" or plan.bindings or plan.new_records is None
            or plan.new_records > small_records(plan.small_records)):
        return None
    located: list[tuple[int, Any, str]] = []
    for i, files in input_files.items():
        route = plan.stage.inputs[i].route_by
        ft = plan.input_schemas[i].fields.get(route.field) if route is not None and route.field is not None else None
        if ft is None or ft.scalar == "json" or ft.is_list:
            return None
        for uri in files:
            fs, path = objectstore.filesystem(uri)
            located.append((i, fs, path))
    if sum(fs.get_file_info(path).size or 0 for _, fs, path in located) > SMALL_FILE_BYTES:
        return None
    parts: list[pa.RecordBatch] = []
    size = 0
    schema = plan.envelope_schema()
    for i, fs, path in located:
        want = plan.input_schemas[i].arrow
        with fs.open_input_file(path) as fh:
            table = pq.read_table(fh, columns=[f.name for f in want])
        for b in table.cast(want).to_batches():
            env = plain_envelopes(i, plan.stage.inputs[i].route_by.field, b, schema)  # type: ignore[union-attr, arg-type]
            if env is None:
                return None
            size += env.nbytes
            if size > SMALL_ENVELOPE_BYTES:
                return None
            parts.append(env)
    n = plan.stage.partitions
    routed = routed_schema(plan)
    if not parts:
        return [routed.empty_table() for _ in range(n)]
    env = pa.Table.from_batches(parts, schema=schema)
    key_col = env.column("_key").combine_chunks()
    table = env.drop_columns(["_r"]).append_column("_h", pa.array(spark_xxhash64(key_col.to_pylist()), pa.int64()))
    part = partition_of(key_col, n)
    out = []
    for p in range(n):
        rows = table.filter(pa.array(part == p))
        order = pc.sort_indices(rows, sort_keys=[("_h", "ascending"), ("_key", "ascending"), ("_flow", "ascending")])  # stable, as Spark's is for these
        out.append(rows.take(order).combine_chunks())
    return out


def _routed_task(plan: "TaskPlan", task: Any, items: Iterator[list[tuple[int, bytes]]]) -> Iterator[bytes]:
    """Worker side: for each partition given to this task, its envelopes (one Arrow IPC stream)
    in, the grouped task's result out."""
    for group in items:
        for p, data in group:
            for rb in task(plan, iter(pa.ipc.open_stream(pa.py_buffer(data))), p):
                yield rb.serialize().to_pybytes()


def run_routed(spark: Any, plan: "TaskPlan", parts: list[pa.Table], task: Any, placed: bool) -> pa.Table:
    """Run ``task(plan, batches, p)`` for each partition ``p`` on the envelopes the driver routed;
    the tasks' result rows (:data:`cbp.engine.protocol.RESULT`).

    With ``placed`` (a cluster), partition ``p`` is a Spark task of its own that prefers the executor
    that ran ``p`` last (:mod:`cbp.engine.locality`). Otherwise the partitions are dealt to as many
    tasks as Spark runs at once (one per core in local mode), each running its share one after the
    other: with little to do per partition, a task's fixed cost is most of its time.
    """
    from pyspark.rdd import RDD
    from pyspark.serializers import NoOpSerializer

    from .locality import executor_preferences, prefs_rdd, remember_executors
    from .protocol import RESULT

    sc = spark.sparkContext
    try:  # a task gets its envelopes in batches of this many, as from the shuffle
        chunk = max(1, int(spark.conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000")))
    except ValueError:
        chunk = 10_000
    payloads = []
    routed = routed_schema(plan)
    for p, t in enumerate(parts):
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, routed) as w:
            w.write_table(t.cast(routed), max_chunksize=chunk)
        payloads.append((p, sink.getvalue().to_pybytes()))
    tasks = len(payloads) if placed else max(1, min(len(payloads), sc.defaultParallelism))
    groups = [payloads[i::tasks] for i in range(tasks)]
    data = sc.parallelize(groups, tasks)  # group i alone in Spark partition i (through a file, not py4j)
    if placed:  # zipped with an RDD whose partition p prefers p's executor: the pair's task does too
        jvm = sc._jvm
        where = RDD(jvm.org.apache.spark.api.java.JavaRDD.fromRDD(prefs_rdd(sc, executor_preferences(sc, plan)), jvm.scala.reflect.ClassTag.AnyRef()),
                    sc, NoOpSerializer())
        data = where.zip(data).values()
    blobs = data.mapPartitions(partial(_routed_task, plan, task)).collect()
    table = pa.Table.from_batches([pa.ipc.read_record_batch(pa.py_buffer(b), RESULT) for b in blobs], schema=RESULT)
    if placed:
        remember_executors(sc, plan, table)
    return table

