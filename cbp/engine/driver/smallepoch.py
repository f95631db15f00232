"""Small epochs without a shuffle: the driver routes a small increment itself.

A stage epoch normally is a Spark job of two stages: the map side reads the increment and routes
it, Spark's shuffle partitions it by ``pmod(hash(key), P)`` and sorts each partition by
``xxhash64(key)``, and the reduce side runs the grouped tasks. For a small increment most of that
job is fixed cost (a second stage, the shuffle, the sort, Spark's planning of each small file; about
half of a 1,000-record URLCount epoch, ``bench/epoch_cost.py``). When the epoch's new records are at
most :func:`small_records` (default :data:`SMALL_RECORDS`, and :data:`SMALL_FILE_BYTES` of files
with the stage's multicast bindings), the driver reads them with pyarrow and routes them itself:

- an input routed by a plain field, with Arrow (:func:`cbp.engine.task.routing.plain_envelopes`);
- any other (a RouteBy function, ``ALL``, multicast, a ``json`` or list field, a key JSON must
  escape) by a one-stage Spark job whose tasks run RouteBy as the normal path's map side does
  (:func:`route_on_executors`: user code never runs in the driver, and under the epoch's time
  limit); its envelopes, with the copies of broadcast and multicast records, come back to the driver
  (or, when the records fit one routing task and the epoch is not placed, that task partitions them and
  runs every partition itself: one job, :mod:`cbp.engine.driver.routeandrun`);
  a RouteBy of cbp's own (``driver_safe``: a SQL view's key, no user code) by the driver itself, with
  the same code, which saves that job (up to :data:`DRIVER_ROUTED` records);
- the bindings files, with pyarrow, as the normal path's job turns them into envelopes.

The driver then computes Spark's two hashes itself (:mod:`cbp.engine.common.sparkhash`; a copy goes by its
probe, as in the shuffle), sorts each partition's envelopes as Spark would, and runs the same
grouped task (:func:`cbp.engine.task.translate.grouped_task`) on exactly partition ``p``'s envelopes for
each ``p``, in a one-stage job (on a cluster a task per partition, preferring the executor that
ran ``p`` last, as :mod:`cbp.engine.driver.locality` places the normal path's tasks; else one task per
core, each taking partitions one at a time). A SQL view's stage (cbp's own translators, no user
code) with at most :data:`DRIVER_RUN` envelopes runs its partitions in the driver itself in local
mode, with no Spark job at all. Nothing crosses Spark's shuffle, so such an epoch
reports no shuffled records (``EpochReport.copies_in`` still counts one copy per partition).

In local mode the tasks' Python workers keep the state files they read in memory, but Spark
hands a task to whichever idle worker comes first, so a fixed share of partitions per task met a
worker without them about one time in six. There each task claims its partitions itself
(:func:`cbp.engine.task.runners.claim`: a file created only if absent, in a directory the driver made for the job, which
also holds each partition's envelopes): first those its worker ran last time, then those nobody
ran, then the rest; the driver checks that every partition came back exactly once. A Spark Connect
server's tasks in local mode claim them the same way, in the server's temporary directory
(:mod:`cbp.engine.driver.connectrun`).

Anything else takes the normal path: black-box mode (the whole state goes through the shuffle),
more records or bytes, envelopes that outgrow :func:`envelope_cap` (a RouteBy that returns
many keys), or a key longer than :data:`SMALL_KEY_BYTES`.

The knobs: ``CBP_SMALL_EPOCH_RECORDS`` or the pipeline tuning option ``small_epoch_records``
(0 turns the path off); ``CBP_DRIVER_RUN_RECORDS`` for :data:`DRIVER_RUN` (0: a SQL view's small
epoch always runs as a Spark job).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ... import settings
from ...errors import RuntimeStateError
from ...storage import objectstore
from ...storage.layout import epoch_of
from ..common.protocol import RESULT
from ..task.arrowtasks import claiming_batches, routing_batches
from ..task.routerun import SMALL_KEY_BYTES, partitioned, routed_schema
from ..task.routing import BINDINGS, BOUND, bound_address, plain_envelopes, plain_route_field
from ..task.runners import claimant, claiming_task, routed_task, routing_task
from ..task.translate import route_batches
from . import taskmemory
from .connectrun import run_connect
from .dfjobs import blob_schema, blobs_of, connect_conf, parallelism, range_frame
from .jvmcache import pid_alive
from .locality import executor_preferences, prefs_rdd, remember_executors
from .routeandrun import RouteAndRun, fits_one_task, route_and_run_job
from .session import is_connect
from .signedinputs import merged_signed

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from ..task.plan import GroupedTask, TaskPlan

__all__ = [
    "SMALL_RECORDS",
    "SMALL_KEY_BYTES",
    "small_records",
    "routed_schema",
    "RouteAndRun",
    "driver_routed",
    "route_on_executors",
    "run_routed",
]

#: New records of an epoch up to which the driver routes them (above, Spark's shuffle does). On 2
#: cores the driver's path was faster up to 200k records (URLCount, 1M state keys: 0.69x the
#: shuffle path's epoch at 100k records, 0.79x at 200k; ``bench/epoch_cost.py --compare``).
SMALL_RECORDS = 200_000
#: ... as long as their files hold at most this many bytes, and their envelopes (what a task gets)
#: this many: the driver holds them, and a task its partition's share.
SMALL_FILE_BYTES = 16 << 20
SMALL_ENVELOPE_BYTES = 64 << 20
#: Records per task of the job that runs RouteBy functions for a small epoch (at least; a slice per core above it).
ROUTE_SLICE = 2048
#: At most this many records of a RouteBy function (user code) are routed by the one task of a job that then
#: runs the epoch's partitions (:class:`RouteAndRun`): one Spark job an epoch, not a routing job and a run
#: job. Not on a cluster, where each partition's task goes to the executor that caches its state; 0 turns
#: it off. Every record is still routed once, in one task, as the routing job's one task would route it.
ROUTE_AND_RUN = ROUTE_SLICE
#: At most this many records routed by a ``driver_safe`` RouteBy are routed in the driver (more go to
#: a routing job, whose tasks run in parallel).
DRIVER_ROUTED = 20_000
#: At most this many envelopes of a small epoch of a SQL view's stage (cbp's own translators, no user
#: code) run in the driver itself, partition after partition, without a Spark job (local mode): the
#: job's fixed cost (the JVM's scheduling, a Python worker's round trip) was most of a 600-record
#: epoch's CPU (TPC-H Q6 and Q1 at SF 0.01, ``bench/tpch.py``). Up to 50,000 change records the driver
#: took 0.37x to 0.90x the CPU of the same epoch as a Spark job (TPC-H Q6 and Q1 at SF 0.1, one noisy
#: 1.19x), at 100,000 0.98x and 1.25x: the per-record work (the same grouped task) is most of both
#: (``bench/driver_run.py``). The driver holds the envelopes: about 210 bytes of Arrow each for Q6 and Q1
#: (10 MB at this bound). ``CBP_DRIVER_RUN_RECORDS`` sets it (:func:`driver_run`); 0 turns it off.
DRIVER_RUN = 50_000
#: The translators of a SQL view's stages (:mod:`cbp.views.run`).
VIEW_TRANSLATORS = "cbp.views.run:"
#: Whether a local small epoch's claiming tasks run as ``spark.range(0, n, 1, n).mapInArrow`` rather
#: than ``parallelize(range(n), n).mapPartitions`` (``bench/connect_epochs.py`` measures both).
CLAIM_BY_RANGE = False
#: (home, stage) -> partition -> the local Python worker (pid) that ran it last (local mode).
_LAST_WORKER: dict[tuple[str, str], dict[int, int]] = {}
#: (home, stage) -> envelope bytes per record of its last routing job (:func:`route_on_executors`):
#: an epoch whose records would make more than the cap takes the shuffle without trying.
_ROUTED_BYTES: dict[tuple[str, str], float] = {}


def envelope_cap() -> int:
    """The most envelope bytes a small epoch may have: :data:`SMALL_ENVELOPE_BYTES`, or a quarter of
    ``CBP_TASK_MEMORY_MB`` if that is less (:mod:`cbp.engine.driver.taskmemory`)."""
    b = taskmemory.current()
    return SMALL_ENVELOPE_BYTES if b is None else min(SMALL_ENVELOPE_BYTES, b.envelope_bytes)


def small_records(override: int | None = None, env: settings.Settings | None = None) -> int:
    """The threshold: ``override`` (a pipeline's ``small_epoch_records``), else
    ``CBP_SMALL_EPOCH_RECORDS`` (of ``env``, default this process's settings), else :data:`SMALL_RECORDS`.

        >>> small_records(0), small_records(5)
        (0, 5)
    """
    if override is not None:
        return int(override)
    found = (settings.current() if env is None else env).small_epoch_records
    return SMALL_RECORDS if found is None else found


def driver_run(env: settings.Settings | None = None) -> int:
    """Envelopes up to which a SQL view's small epoch runs in the driver: ``CBP_DRIVER_RUN_RECORDS`` (of
    ``env``, default this process's settings), else :data:`DRIVER_RUN`.

        >>> driver_run(settings.Settings(driver_run_records=0)), driver_run(settings.Settings()) == DRIVER_RUN
        (0, True)
    """
    found = (settings.current() if env is None else env).driver_run_records
    return DRIVER_RUN if found is None else found


def _read_as(pf: pq.ParquetFile, want: pa.Schema) -> pa.Table:
    """A file's records with the columns of ``want`` (one it lacks, as ``_diff`` in a file an older
    cbp wrote, is null)."""
    have = set(pf.schema_arrow.names)
    t = pf.read(columns=[f.name for f in want if f.name in have])
    return pa.Table.from_arrays(
        [t.column(f.name).cast(f.type) if f.name in have else pa.nulls(t.num_rows, f.type) for f in want], schema=want
    )


def driver_routed(
    spark: SparkSession, plan: TaskPlan, input_files: dict[int, list[str]]
) -> list[pa.Table] | RouteAndRun | None:
    """Partition ``p``'s envelopes (sorted as the shuffle sorts them) for each ``p``; or, for records of a
    RouteBy function that one task routes and then runs the partitions (:mod:`.routeandrun`), those records
    and the envelopes routed here; or None when this epoch must take the normal path (module docstring)."""
    if plan.path.route != "driver":  # chosen with the plan (cbp.engine.driver.taskplan.choose_path)
        return None
    located = [(i, uri, *objectstore.filesystem(uri)) for i, files in input_files.items() for uri in files]
    bound = [(uri, *objectstore.filesystem(uri)) for uri in plan.bindings]
    held = [(fs, path) for _, _, fs, path in located] + [(fs, path) for _, fs, path in bound]
    if sum(fs.get_file_info(path).size or 0 for fs, path in held) > SMALL_FILE_BYTES:
        return None
    schema = plan.envelope_schema()
    parts: list[pa.RecordBatch] = []
    remote: list[
        tuple[int, int, pa.Table]
    ] = []  # (input, the epoch whose bindings deliver its multicasts, records): RouteBy's job
    for i, uri, fs, path in located:
        want = plan.input_schemas[i].arrow
        with fs.open_input_file(path) as fh:
            table = _read_as(pq.ParquetFile(fh), want)
        field = plain_route_field(plan.stage.inputs[i].route_by, plan.input_schemas[i])
        rest = []
        for b in table.to_batches():
            env = plain_envelopes(i, field, b, schema) if field is not None else None
            if env is None:
                rest.append(b)
            else:
                parts.append(env)
        if rest:
            remote.append((i, plan.made_in.get(uri, plan.epoch - 1) or 0, pa.Table.from_batches(rest, want)))
    for uri, fs, path in bound:
        with fs.open_input_file(path) as fh:
            parts.extend(
                _binding_envelopes(pq.read_table(fh, columns=BINDINGS.names).cast(BINDINGS), epoch_of(uri) or 0, schema)
            )
    remote = merged_signed(plan, remote)  # a view's input: +r and -r of two files cancel before routing
    if (
        remote
        and sum(t.num_rows for _, _, t in remote) <= DRIVER_ROUTED
        and all(_driver_safe(plan, i) for i, _, _ in remote)
    ):
        by_input: dict[tuple[int, int], list[pa.RecordBatch]] = {}  # an input's files routed together: a view's
        for i, made, table in remote:  # input is consolidated across them (cbp.views.run.RouteKey.reads)
            by_input.setdefault((i, made), []).extend(table.to_batches())
        for (i, made), batches in by_input.items():
            parts.extend(route_batches(plan, i, made, batches))
        remote = []
    if remote:
        key, records = (plan.home.location, plan.stage.name), sum(t.num_rows for _, _, t in remote)
        if records * _ROUTED_BYTES.get(key, 0.0) >= envelope_cap():
            return None  # the last routing job of this stage says its envelopes would outgrow the cap
        if sum(t.nbytes for _, _, t in remote) > envelope_cap():
            return None  # the records themselves would: on Connect every routing task holds them all
        if fits_one_task(spark, plan, records, ROUTE_AND_RUN):
            return RouteAndRun(pa.Table.from_batches(parts, schema=schema), remote)
        routed = route_on_executors(spark, plan, remote)
        # bytes of envelopes per record RouteBy routed (at least, when they outgrew the cap)
        _ROUTED_BYTES[key] = (envelope_cap() if routed is None else sum(b.nbytes for b in routed)) / max(records, 1)
        if routed is None:
            return None
        parts.extend(routed)
    if sum(b.nbytes for b in parts) > envelope_cap():
        return None
    return partitioned(plan, pa.Table.from_batches(parts, schema=schema))


def _driver_safe(plan: TaskPlan, i: int) -> bool:
    """Input ``i`` is routed by a RouteBy of cbp's own that may run in the driver (``driver_safe``: a
    view's :class:`cbp.views.run.RouteKey`, no user code): routed here, without a Spark job."""
    route = plan.stage.inputs[i].route_by
    return route is not None and bool(getattr(route.fn, "driver_safe", False))


def _binding_envelopes(rows: pa.Table, made: int, schema: pa.Schema) -> list[pa.RecordBatch]:
    """Envelopes of a bindings file written in stage epoch ``made``: to the bound key, the address as
    the copies of that epoch's multicasts name it (as the normal path's job builds them)."""
    out = []
    for b in rows.to_batches():
        n = b.num_rows
        cols = {
            "_key": b.column("_key"),
            "_flow": pa.array(np.full(n, BOUND, np.int32)),
            "_rec": pc.binary_join_element_wise(bound_address(made, ""), b.column("_addr"), ""),
        }
        out.append(
            pa.RecordBatch.from_arrays(
                [cols[f.name] if f.name in cols else pa.nulls(n, f.type) for f in schema], schema=schema
            )
        )
    return out


def route_on_executors(
    spark: SparkSession, plan: TaskPlan, work: list[tuple[int, int, pa.Table]]
) -> list[pa.RecordBatch] | None:
    """RouteBy of the records in ``work`` run by a one-stage Spark job (user code runs where the
    normal path runs it, under the epoch's time limit), its envelopes collected; None when they
    outgrow what the driver should hold (:func:`envelope_cap`)."""
    tasks = parallelism(spark)
    payloads = []
    for i, made, table in work:
        step = max(ROUTE_SLICE, -(-table.num_rows // tasks))
        for a in range(0, table.num_rows, step):
            sink = pa.BufferOutputStream()
            with pa.ipc.new_stream(sink, table.schema) as w:
                w.write_table(table.slice(a, step))
            payloads.append((i, made, sink.getvalue().to_pybytes()))
    tasks = min(tasks, len(payloads))
    cap = envelope_cap() // tasks
    if plan.path.connect:  # no RDDs: the slices go with the function, task i's in groups[i] (one round trip)
        groups = [payloads[i::tasks] for i in range(tasks)]
        blobs = blobs_of(
            range_frame(spark, tasks).mapInArrow(partial(routing_batches, plan, cap, groups), blob_schema())
        )
    else:
        blobs = (
            spark.sparkContext.parallelize(payloads, tasks).mapPartitions(partial(routing_task, plan, cap)).collect()
        )
    if any(not b for b in blobs):
        return None
    schema = plan.envelope_schema()
    return [pa.ipc.read_record_batch(pa.py_buffer(b), schema) for b in blobs]


def run_routed(
    spark: SparkSession, plan: TaskPlan, parts: list[pa.Table] | RouteAndRun, task: GroupedTask, placed: bool
) -> pa.Table | None:
    """Run ``task(plan, batches, p)`` for each partition ``p`` on the envelopes the driver routed;
    the tasks' result rows (:data:`cbp.engine.common.protocol.RESULT`). For a :class:`RouteAndRun`, one
    job's one task routes its records first; None (nothing run) when their envelopes pass the cap.

    With ``placed`` (a cluster), partition ``p`` is a Spark task of its own that prefers the executor
    that ran ``p`` last (:mod:`cbp.engine.driver.locality`). Otherwise there are as many tasks as Spark
    runs at once (one per core in local mode), each running several partitions one after the other
    (with little to do per partition, a task's fixed cost is most of its time): dealt to them in
    turn, or in local mode claimed by them (:func:`_run_claimed`).
    """
    if isinstance(parts, RouteAndRun):
        return _route_and_run(spark, plan, parts, task)
    if not placed and _runs_in_driver(plan, parts):
        return _run_in_driver(plan, parts, task)
    tasks = len(parts) if placed else max(1, min(len(parts), parallelism(spark)))
    chunk = _chunk(spark)
    if plan.path.connect:
        table, claimed = run_connect(spark, plan, task, _payloads(plan, parts, chunk))
        return _each_once(plan, table, len(parts)) if claimed else _in_partition_order(table)
    from pyspark.rdd import RDD  # classic only: a Connect client (pyspark-client) has no pyspark.rdd
    from pyspark.serializers import NoOpSerializer

    sc = spark.sparkContext
    if not placed and tasks < len(parts) and str(sc.master).startswith("local"):
        return _run_claimed(spark, plan, parts, task, tasks, chunk)
    payloads = _payloads(plan, parts, chunk)
    groups = [payloads[i::tasks] for i in range(tasks)]
    data = sc.parallelize(groups, tasks)  # group i alone in Spark partition i (through a file, not py4j)
    if placed:  # zipped with an RDD whose partition p prefers p's executor: the pair's task does too
        jvm = sc._jvm
        assert jvm is not None  # a driver with its JVM
        where = RDD(
            jvm.org.apache.spark.api.java.JavaRDD.fromRDD(
                prefs_rdd(sc, executor_preferences(sc, plan)), jvm.scala.reflect.ClassTag.AnyRef()
            ),
            sc,
            NoOpSerializer(),
        )
        data = where.zip(data).values()
    blobs = data.mapPartitions(partial(routed_task, plan, task)).collect()
    table = _in_partition_order(
        pa.Table.from_batches([pa.ipc.read_record_batch(pa.py_buffer(b), RESULT) for b in blobs], schema=RESULT)
    )
    if placed:
        remember_executors(sc, plan, table)
    return table


def _route_and_run(spark: SparkSession, plan: TaskPlan, fused: RouteAndRun, task: GroupedTask) -> pa.Table | None:
    """:func:`run_routed` of a :class:`RouteAndRun`; None when its envelopes outgrew the cap (the stage's
    next epoch of as many records then takes the shuffle without trying, as after a routing job)."""
    table = route_and_run_job(spark, plan, fused, task, envelope_cap(), _chunk(spark))
    if table is None:
        _ROUTED_BYTES[(plan.home.location, plan.stage.name)] = envelope_cap() / max(fused.count, 1)
        return None
    return _in_partition_order(table)


def _runs_in_driver(plan: TaskPlan, parts: list[pa.Table]) -> bool:
    """Whether this small epoch runs in the driver: its plan's bound (``EnginePath.driver_run``, fixed
    when the plan was built: a SQL view's stage, in local mode, with no time limit to enforce, since only a
    task can be stopped at its deadline, and no fault injected, since a crash test's fault ends the process
    it fires in), at least as many envelopes as it routed."""
    bound = plan.path.driver_run
    return bound is not None and sum(t.num_rows for t in parts) <= bound


def _run_in_driver(plan: TaskPlan, parts: list[pa.Table], task: GroupedTask) -> pa.Table:
    """:func:`run_routed` in the driver: ``task`` on each partition's envelopes, in partition order
    (a failure raises the task's own :class:`cbp.engine.common.protocol.TaskFailed`, as a job's would)."""
    routed = routed_schema(plan)
    results = [rb for p, t in enumerate(parts) for rb in task(plan, iter(t.cast(routed).to_batches()), p)]
    return pa.Table.from_batches(results, schema=RESULT)


def _payloads(plan: TaskPlan, parts: list[pa.Table], chunk: int) -> list[tuple[int, bytes]]:
    """Each partition's envelopes as an Arrow IPC stream."""
    out = []
    for p, t in enumerate(parts):
        sink = pa.BufferOutputStream()
        _write_envelopes(sink, plan, t, chunk)
        out.append((p, sink.getvalue().to_pybytes()))
    return out


def _in_partition_order(table: pa.Table) -> pa.Table:
    """The tasks' result rows by partition, as the shuffle path returns them: the files of an
    output flow are committed, and read back, in the same order whichever task ran a partition."""
    return table.take(pc.sort_indices(table.column("part")))


def _each_once(plan: TaskPlan, table: pa.Table, n: int) -> pa.Table:
    """The result rows of tasks that claimed the ``n`` partitions, in partition order, once each (else the
    epoch fails and runs again: not committed)."""
    table = _in_partition_order(table)
    done = table.column("part").to_pylist()
    if done != list(range(n)):
        raise RuntimeStateError(
            f"stage '{plan.stage.name}' epoch {plan.epoch}: the tasks returned partitions {done} of "
            f"{n}; the epoch is not committed and runs again",
            code="io",
        )
    return table


def _chunk(spark: SparkSession) -> int:
    """Envelopes per Arrow batch a task gets, as from the shuffle."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    if is_connect(spark):  # asked once per session
        return int(connect_conf(spark, key, "10000", positive=True))
    try:
        return max(1, int(spark.conf.get(key, "10000") or "10000"))
    except ValueError:
        return 10_000


def _write_envelopes(sink: Any, plan: TaskPlan, t: pa.Table, chunk: int) -> None:
    routed = routed_schema(plan)
    with pa.ipc.new_stream(sink, routed) as w:
        w.write_table(t.cast(routed), max_chunksize=chunk)


def _run_claimed(
    spark: SparkSession, plan: TaskPlan, parts: list[pa.Table], task: GroupedTask, tasks: int, chunk: int
) -> pa.Table:
    """:func:`run_routed` in local mode: ``tasks`` tasks claim the partitions (module docstring)."""
    _sweep_routed()
    work = tempfile.mkdtemp(prefix=f"cbp-routed-{os.getpid()}-")
    key = (plan.home.location, plan.stage.name)
    try:
        for p, t in enumerate(parts):
            with pa.OSFile(os.path.join(work, f"{p}.arrows"), "wb") as f:
                _write_envelopes(f, plan, t, chunk)
        last = dict(_LAST_WORKER.get(key, {}))
        if CLAIM_BY_RANGE:  # the DataFrame job a Connect session could run (cbp.engine.driver.dfjobs)
            jobs = range_frame(spark, tasks)
            blobs = blobs_of(
                jobs.mapInArrow(partial(claiming_batches, plan, task, work, len(parts), tasks, last), blob_schema())
            )
        else:
            rdd = spark.sparkContext.parallelize(range(tasks), tasks)
            blobs = rdd.mapPartitions(partial(claiming_task, plan, task, work, len(parts), tasks, last)).collect()
        table = _each_once(
            plan,
            pa.Table.from_batches([pa.ipc.read_record_batch(pa.py_buffer(b), RESULT) for b in blobs], schema=RESULT),
            len(parts),
        )
        _LAST_WORKER[key] = {p: pid for p in range(len(parts)) if (pid := claimant(work, p)[1]) is not None}
        return table
    finally:
        shutil.rmtree(work, ignore_errors=True)


_SWEPT: list[bool] = []


def _sweep_routed() -> None:
    """Remove the envelope directories of small epochs whose process was killed (its ``finally``
    never ran): once per process, those of processes gone from this machine, or a day old."""
    if _SWEPT:
        return
    _SWEPT.append(True)
    tmp = tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(tmp) if n.startswith("cbp-routed-")]
    except OSError:
        return
    for n in names:
        path = os.path.join(tmp, n)
        pid = n.split("-")[2] if n.count("-") >= 3 else ""
        try:
            gone = (pid.isdigit() and not pid_alive(int(pid))) or time.time() - os.path.getmtime(path) > 86400
        except OSError:
            continue
        if gone:
            shutil.rmtree(path, ignore_errors=True)
