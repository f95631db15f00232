"""The physical layer on Spark: one stage epoch as one Spark job (paper 001 §4.4–4.5).

*Direct* mode (§4.5): only the new input increments are read and routed (RouteBy) through
Spark's shuffle into the stage's P partitions with Spark's own hash (``repartition(P, _key)``),
sorted by key and flow. Task ``p`` owns state partition ``p``: it reads the state of the keys it
needs through the partition's index and writes only what changed (:mod:`cbp.engine.task.translate`).

*Black-box* mode (§4.4): the state is just another input. It is read whole (the Parquet files of
the epoch's version, as cbp's storage layer lists them), shuffled with the new input, and written
whole every epoch: the benchmarks' baseline.

Either way the job only writes files; :mod:`cbp.controller` commits them.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from functools import partial, reduce
from typing import TYPE_CHECKING, Any

from ...errors import RuntimeStateError, UserCodeError
from ...spec.schema import RecordSchema
from ...storage.layout import epoch_of
from ..common.protocol import FailureRecord, TaskResult, decode_failure, decode_results, result_spark_schema
from ..task.routing import BOUND, COPY, COPY_HASH, JSON_ESCAPED, bound_address, record_column
from ..task.translate import TaskPlan, grouped_task, recordwise_task, route_batches
from .anchor import anchored_shuffle, placing
from .bulkjob import bulk_grouped
from .deltaread import StateSource, latest_state
from .dfjobs import JobTag, ddl_type, known_schema, shuffle_metrics
from .locality import placed_epoch
from .remote_read import needs_arrow_reader, read_parquet
from .session import is_connect
from .signedinputs import consolidates_across, refuse_unsigned_inputs, zset_frame
from .smallepoch import driver_routed, run_routed

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import SparkContext
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["run_stage_epoch", "spark_ddl", "struct_ddl", "envelope_ddl", "shuffle_written"]

_WORKER_DIED = (
    "Python worker exited unexpectedly",
    "worker exited unexpectedly (crashed)",
)  # only without a JVM exception
CANCEL_GRACE = 5.0  # seconds after the deadline before the driver cancels a job whose tasks did not stop


def spark_ddl(schema: RecordSchema, meta: str = "") -> str:
    """The Spark DDL of stored records (``json`` fields are text).

    >>> spark_ddl(RecordSchema.parse({"url": "string", "n": "int", "xs": "list<float>"}))
    '`url` STRING, `n` BIGINT, `xs` ARRAY<DOUBLE>'
    """
    return ", ".join(([meta] if meta else []) + _columns(schema))


def _columns(schema: RecordSchema, without: str | None = None) -> list[str]:
    cols = []
    for name, ft in schema.fields.items():
        if name == without:
            continue
        cols.append(f"`{name}` {ft.spark}")
    return cols


def struct_ddl(schema: RecordSchema, without: str | None = None) -> str:
    """The Spark type of a record of ``schema`` as a struct (how records cross the shuffle), ``without``
    one field (the RouteBy field that crosses as the key).

        >>> struct_ddl(RecordSchema.parse({"url": "string", "xs": "list<int>"}))
        'STRUCT<`url`: STRING, `xs`: ARRAY<BIGINT>>'
        >>> struct_ddl(RecordSchema.parse({"url": "string"}), without="url")
        'STRUCT<>'
    """
    return "STRUCT<" + ", ".join(c.replace("` ", "`: ", 1) for c in _columns(schema, without)) + ">"


def envelope_ddl(plan: TaskPlan) -> str:
    """The Spark DDL of the stage epoch's envelopes (:func:`cbp.engine.task.routing.envelope_schema`)."""
    return ", ".join(f"{n} {t}" for n, t in _envelope_types(plan).items())


def _envelope_types(plan: TaskPlan) -> dict[str, str]:
    """The envelopes' columns and their Spark types as DDL text: a cast to text is one py4j call, a cast to
    a ``DataType`` five (the black-box epoch's plan casts every column of two envelopes)."""
    cols = {"_key": "STRING", "_flow": "INT", "_rec": "STRING", "_r": "STRING"}
    elided = plan.elided
    cols.update({record_column(i): struct_ddl(s, elided.get(i)) for i, s in enumerate(plan.input_schemas)})
    if plan.mode == "blackbox" and plan.stage.state_schema is not None:
        cols["_st"] = struct_ddl(plan.stage.state_schema)
    return cols


def run_stage_epoch(
    spark: SparkSession,
    plan: TaskPlan,
    input_files: dict[int, list[str]],
    state_files: StateSource | None = None,
    state_needs_dedupe: bool = False,
    shuffle: dict[str, int] | None = None,
) -> list[TaskResult]:
    """Run one stage epoch; return each task's result (files written, stats).

    ``input_files`` maps input index -> file URIs of the increments to read; ``state_files`` is
    the state table at its version (black-box mode only). A failed job raises the :mod:`cbp.errors`
    error its tasks reported (:func:`_job_error`). ``shuffle``, if given, receives the records
    and bytes the job wrote to Spark's shuffle (:func:`shuffle_written`).

    A record that failed its stage's code may be one a later retraction cancels (a bad source row
    deleted or fixed since): when an input evaluated before the reduce side holds a retraction in
    another file (:func:`~cbp.engine.driver.signedinputs.consolidates_across`), the epoch runs once
    more over its inputs consolidated by identity, and fails only if a record still fails. An epoch
    that succeeds pays nothing for it.
    """
    args = (spark, plan, input_files, state_files, state_needs_dedupe, shuffle)
    try:
        return _stage_epoch(*args, consolidate=False)
    except UserCodeError as e:
        if e.code == "timeout" or not any(consolidates_across(plan, i, f) for i, f in input_files.items()):
            raise
    return _stage_epoch(*args, consolidate=True)


def _stage_epoch(
    spark: SparkSession,
    plan: TaskPlan,
    input_files: dict[int, list[str]],
    state_files: StateSource | None,
    state_needs_dedupe: bool,
    shuffle: dict[str, int] | None,
    consolidate: bool,
) -> list[TaskResult]:
    """:func:`run_stage_epoch`'s job, its inputs consolidated across files when ``consolidate``."""
    st = plan.stage
    refuse_unsigned_inputs(plan, input_files)  # retractions go only where they are handled (cbp.spec.signing)
    connect = is_connect(spark)  # a Spark Connect session: no SparkContext (cbp.engine.driver.dfjobs)
    tag = JobTag(spark, f"cbp-{st.name}-{plan.epoch}-{uuid.uuid4().hex[:8]}")
    timer: threading.Timer | None = None
    known: dict[str, int] = {}  # the shuffle's records and bytes, when the epoch knows them without Spark
    if plan.deadline is not None:  # tasks stop themselves at the deadline; this is for those that cannot
        timer = threading.Timer(max(plan.deadline - time.time(), 0) + CANCEL_GRACE, tag.cancel)
        timer.daemon = True
        timer.start()
    try:
        tag.__enter__()
        if st.record_wise:
            jobs = [
                _signed_read(spark, plan, i, files, consolidate).mapInArrow(
                    partial(recordwise_task, plan, i), result_spark_schema()
                )
                for i, files in input_files.items()
                if files
            ]
            if not jobs:
                return []
            table = reduce(lambda a, b: a.unionByName(b), jobs).toArrow()
            if shuffle is not None and connect:  # known without Spark's status store: mapInArrow over reads
                shuffle.update(records=0, bytes=0)
        elif plan.path.bulk:  # empty state: each key's state computed by Spark SQL (cbp.engine.driver.bulkjob)
            grouped = partial(_grouped, spark, state=None, dedupe=False, no_shuffle=shuffle if connect else None)
            table = bulk_grouped(spark, plan, input_files, partial(_read, spark), grouped)
        else:
            table = _grouped(spark, plan, input_files, state_files, state_needs_dedupe, known, consolidate=consolidate)
        if shuffle is not None and known:  # no shuffle: nothing to ask Spark's status store
            shuffle.update(known)
        elif shuffle is not None and not connect:  # Spark's status store: classic only
            shuffle.update(shuffle_written(spark.sparkContext, tag.tag))
    except Exception as e:  # Spark wraps the task's exception in its own
        raise _job_error(plan, e) from None
    finally:
        tag.__exit__()
        if timer is not None:
            timer.cancel()
    results = decode_results(table)
    if shuffle is not None and connect and "records" not in shuffle:  # the shuffle path on Connect, no metrics
        shuffle["records"] = sum(int(r.stats.get("envelopes", 0)) for r in results)  # sent: the rows tasks read
    return results


def _job_error(plan: TaskPlan, exc: Exception) -> Exception:
    """The cbp error for a failed stage-epoch job: from the failure record its task sent
    (:func:`cbp.engine.common.protocol.decode_failure`), else from what Spark says happened."""
    none = "nothing of this epoch was committed"
    text = str(exc)
    rec = decode_failure(text)
    at: dict[str, Any] = {"stage": plan.stage.name, "epoch": plan.epoch}
    if (plan.deadline is not None and time.time() >= plan.deadline) or (rec is not None and rec.code == "timeout"):
        named = rec if rec is not None and rec.code == "timeout" and rec.key is not None else None
        limit = f" of {plan.timeout:g} s" if plan.timeout else ""
        where = named.message if named is not None else plan.where()
        return UserCodeError(
            f"{where}: the epoch ran out of its time limit{limit} and was cancelled; {none}. "
            "Raise the stage's 'timeout' (or 'cbp run --epoch-timeout') or fix the translator",
            code="timeout",
            key=_key(named),
            location=named.location if named is not None else None,
            **at,
        )
    if rec is not None and rec.code == "io":
        return RuntimeStateError(
            f"{rec.message}; {none}; fix the cause and run again", code="io", path=rec.path, errno=rec.errno, **at
        )
    if rec is not None:
        return UserCodeError(
            f"{rec.message}; {none}", code=rec.code, key=_key(rec), exc_type=rec.exc_type, location=rec.location, **at
        )
    if _worker_died(exc):
        return UserCodeError(
            f"{plan.where()}: a Spark Python worker died while running the stage's code (did a translator call "
            f"os._exit, or get killed, e.g. for memory?); {none}",
            code="worker-died",
            **at,
        )
    return RuntimeStateError(f"{plan.where()}: the Spark job failed; {none}: {_first_lines(text)}", **at)


def _key(rec: FailureRecord | None) -> Any:
    return json.loads(rec.key) if rec is not None and rec.key is not None else None


def _worker_died(exc: Exception) -> bool:
    """Whether a Python worker exited under a task: Spark's Python runner hit the end of the
    worker's output (an ``EOFException`` it wraps), told by the JVM exception's classes and frames."""
    je = getattr(exc, "java_exception", None)
    if je is None:  # no JVM exception to look at (e.g. Spark Connect): Spark's wording is all there is
        return any(sign in str(exc) for sign in _WORKER_DIED)
    try:
        for _ in range(32):
            cause = je.getCause()
            if cause is None:
                return False
            if cause.getClass().getName() == "java.io.EOFException":
                frames = je.getStackTrace()
                if len(frames) and str(frames[0].getClassName()).startswith("org.apache.spark.api.python."):
                    return True
            je = cause
    except Exception:  # the JVM is gone or the chain cannot be read
        return False
    return False


def _read(spark: SparkSession, schema: RecordSchema, files: list[str], meta: str = "") -> DataFrame:
    return _read_ddl(spark, spark_ddl(schema, meta), files)


def _signed_read(spark: SparkSession, plan: TaskPlan, i: int, files: list[str], consolidate: bool) -> DataFrame:
    """Input ``i``'s records; with ``consolidate``, consolidated across its files when a record is evaluated
    before the reduce side consolidates it and they hold a retraction (:mod:`cbp.engine.driver.signedinputs`)."""
    df = _read(spark, plan.input_schemas[i], files)
    return zset_frame(df) if consolidate and consolidates_across(plan, i, files) else df


def _read_ddl(spark: SparkSession, ddl: str, files: list[str]) -> DataFrame:
    if needs_arrow_reader(files):  # a home on an object store: no Hadoop connector needed
        return read_parquet(spark, ddl, files)
    schema = ddl_type(spark, ddl)  # on Connect a type, told to the DataFrame: mapInArrow asks its columns
    df = spark.read.schema(schema).parquet(*files)
    return df if isinstance(schema, str) else known_schema(df, schema)


def _state_rows(spark: SparkSession, schema: RecordSchema, state: StateSource, keyed: bool = False) -> Any | None:
    """The state table's rows at the epoch's version, read as the version's data files (cbp's own file
    list, :class:`~cbp.engine.driver.deltaread.StateSource`); None when there are none. Not through Spark's
    Delta connector: its log replay was two more Spark jobs per epoch (a 5-key black-box epoch: 1.4 s
    of 1.8 s, ``bench/blackbox_epoch.py``), a fixed cost that does not follow the state's size."""
    files = state.files()
    if not files:
        return None
    return _read(
        spark,
        schema,
        files,
        "_key STRING, _h BIGINT, _epoch BIGINT, _alive BOOLEAN" + (", _rk STRING" if keyed else ""),
    )


def _grouped(
    spark: SparkSession,
    plan: TaskPlan,
    input_files: dict[int, list[str]],
    state: StateSource | None,
    dedupe: bool,
    no_shuffle: dict[str, int] | None = None,
    frames: dict[int, DataFrame] | None = None,
    consolidate: bool = False,
) -> pa.Table:
    """The grouped stage epoch's job; its tasks' result rows (an Arrow table). ``no_shuffle`` receives
    the shuffle's records and bytes when they are known without Spark's status store (which Spark Connect
    does not have): zero if the job has no shuffle, on Connect the job's own metrics
    (:func:`~cbp.engine.driver.dfjobs.shuffle_metrics`). ``frames``: input ``i``'s records as this DataFrame
    instead of its files (a bulk build's seed rows). ``consolidate``: a view's routed inputs consolidated across files
    (:func:`run_stage_epoch`'s second try)."""
    from pyspark.sql import functions as F

    placed = plan.path.placed  # the path, chosen with the plan (cbp.engine.driver.taskplan.choose_path)
    routed = driver_routed(spark, plan, input_files)
    # a small increment: routed by the driver, no shuffle (cbp.engine.driver.smallepoch); None: the shuffle
    done = None if routed is None else run_routed(spark, plan, routed, grouped_task, placed)
    if done is not None:
        if no_shuffle is not None:
            no_shuffle.update(records=0, bytes=0)
        return done
    env_ddl = ddl_type(spark, envelope_ddl(plan))
    types = _envelope_types(plan)
    envelopes = partial(_envelopes, types)
    jvm = plan.path.jvm_routing
    parts = []
    for i, frame in (frames or {}).items():
        parts.append(frame.mapInArrow(partial(route_batches, plan, i, plan.epoch - 1), env_ddl))
    for i, files in input_files.items():
        if frames and i in frames:
            continue
        sql = _jvm_routed(spark, plan, i, files, envelopes) if jvm and files else None
        if sql is not None:
            parts.append(sql)
            continue
        if consolidate and consolidates_across(plan, i, files):  # +r and -r across files: never evaluated
            frame = zset_frame(_read(spark, plan.input_schemas[i], files))
            parts.append(frame.mapInArrow(partial(route_batches, plan, i, plan.epoch - 1), env_ddl))
            continue
        for made, some in _by_epoch(
            files, lambda f: plan.made_in.get(f, plan.epoch - 1)
        ).items():  # multicasts go by the bindings of the epoch that wrote them
            parts.append(
                _read(spark, plan.input_schemas[i], some).mapInArrow(partial(route_batches, plan, i, made), env_ddl)
            )
    for made, some in _by_epoch(plan.bindings, lambda f: epoch_of(f)).items():  # multicast bindings, to their keys
        b = _read_ddl(spark, "_key STRING, _addr STRING", some)
        addr = F.concat(F.lit(bound_address(made, "")), F.col("_addr"))
        parts.append(envelopes(b, _key=F.col("_key"), _flow=F.lit(BOUND).cast("int"), _rec=addr))
    schema = plan.stage.state_schema
    s = (
        _state_rows(spark, schema, state, bool(plan.stage.row_key))
        if plan.mode == "blackbox" and schema is not None and state is not None
        else None
    )
    if s is not None:
        # dedupe: the table was last written in direct mode, so keep each key's newest rows
        s = latest_state(s, dedupe, plan.stage.partitions, bool(plan.stage.row_key))
        assert schema is not None
        parts.append(
            envelopes(
                s,
                _key=F.col("_key"),
                _flow=F.lit(-1).cast("int"),
                _st=F.struct(*[F.col(f"`{c}`") for c in schema.fields]).cast(types["_st"]),
            )
        )
    if parts:
        env = reduce(lambda a, b: a.unionByName(b), parts)
    else:
        env = spark.createDataFrame([], env_ddl)
    return _shuffled_job(spark, plan, env, placed, no_shuffle)


def _shuffled_job(
    spark: SparkSession, plan: TaskPlan, env: DataFrame, placed: bool, known: dict[str, int] | None
) -> pa.Table:
    """The grouped tasks' job over the envelopes ``env``, shuffled into the stage's partitions; its
    result rows. On Connect ``known`` receives the shuffle's records and bytes (the job's own metrics)."""
    from pyspark.sql import functions as F

    # partitioned by Spark's hash of the key's text (or of _r, the probe of a copy of a broadcast or
    # multicast record; null in the other envelopes, so the key crosses the shuffle once), sorted by
    # hash first, as state files are: a task reads and writes its state in one pass
    h = F.when(F.col("_key").startswith(COPY), F.lit(COPY_HASH)).otherwise(F.xxhash64("_key"))
    by = F.coalesce(F.col("_r"), F.col("_key"))
    if plan.path.connect and placing(spark):  # a cluster behind a Connect server (cbp.engine.driver.anchor)
        env = anchored_shuffle(spark, env.withColumn("_h", h), by, plan.stage.partitions).drop("_r")
    else:
        env = env.withColumn("_h", h).repartition(plan.stage.partitions, by).drop("_r")
    env = _sorted_envelopes(spark, plan, env.sortWithinPartitions("_h", "_key", "_flow"))
    if placed:  # keep partition p on the executor that ran it last epoch (cbp.engine.driver.locality)
        return placed_epoch(spark, env, plan, grouped_task)
    job = env.mapInArrow(partial(grouped_task, plan), result_spark_schema())
    table = job.toArrow()
    if known is not None and plan.path.connect:  # no status store: the exchanges' SQL metrics, if sent
        known.update(shuffle_metrics(job))
    return table


def _sorted_envelopes(spark: SparkSession, plan: TaskPlan, env: DataFrame) -> DataFrame:
    """The shuffled envelopes (``_r`` dropped, ``_h`` added), on Connect told their schema: ``mapInArrow``
    asks the server its input's columns otherwise (a round trip per epoch)."""
    schema = ddl_type(spark, envelope_ddl(plan))
    if isinstance(schema, str):
        return env
    from pyspark.sql.types import LongType, StructField, StructType

    fields = [f for f in schema.fields if f.name != "_r"] + [StructField("_h", LongType(), True)]
    return known_schema(env, StructType(fields))


def _by_epoch(files: list[str], epoch: Callable[[str], int | None]) -> dict[int, list[str]]:
    """``files`` grouped by the stage epoch each belongs to (in order)."""
    out: dict[int, list[str]] = {}
    for f in files:
        out.setdefault(epoch(f) or 0, []).append(f)
    return out


def _envelopes(types: dict[str, str], df: DataFrame, **cols: Column) -> DataFrame:
    """``df`` as envelopes (:func:`envelope_ddl`): the columns given, null in the others."""
    from pyspark.sql import functions as F

    return df.select(*[(cols[n].cast(t) if n in cols else F.lit(None).cast(t)).alias(n) for n, t in types.items()])


def json_key_sql(col: Column, scalar: str) -> Column:
    """The Spark SQL expression of :func:`cbp.engine.task.routing.encode_key` of a non-null ``string``,
    ``int`` or ``bool`` column: the same text, byte for byte (JSON string escapes as Python's
    ``json.dumps(ensure_ascii=False)`` writes them: ``\\`` and ``\"``, the short escapes of
    backspace, tab, newline, form feed and return, ``\\u00xx`` for the other control characters)."""
    from pyspark.sql import functions as F

    if scalar == "int":
        return col.cast("string")
    if scalar == "bool":
        return F.when(col, F.lit("true")).otherwise(F.lit("false"))
    esc = col
    for c in ["\\", '"', *map(chr, range(32))]:  # the backslash first: the escapes written after it hold one
        esc = F.replace(esc, F.lit(c), F.lit(json.dumps(c)[1:-1]))
    quote = F.lit('"')
    return F.when(col.rlike(JSON_ESCAPED), F.concat(quote, esc, quote)).otherwise(F.concat(quote, col, quote))


def _jvm_routed(
    spark: SparkSession, plan: TaskPlan, idx: int, files: list[str], envelopes: Callable[..., DataFrame]
) -> DataFrame | None:
    """The envelopes of input ``idx`` built by Spark SQL, with no Python on the map side, when its
    RouteBy is a field that is never null and never needs Python to become a key (a ``string``,
    ``int`` or ``bool``: :func:`json_key_sql`); None otherwise (``route_batches`` routes it). The
    field crosses as the key only (:func:`cbp.engine.task.routing.elided_fields`)."""
    from pyspark.sql import functions as F

    field = plan.elided.get(idx)
    if field is None:
        return None
    schema = plan.input_schemas[idx]
    df = _read(spark, schema, files)
    key = json_key_sql(F.col(f"`{field}`"), schema.fields[field].scalar)
    rec = F.struct(*[F.col(f"`{c}`") for c in schema.fields if c != field])
    return envelopes(df, _key=key, _flow=F.lit(idx).cast("int"), **{record_column(idx): rec})


def shuffle_written(sc: SparkContext, tag: str, wait: float = 2.0) -> dict[str, int]:
    """Records and bytes written to the shuffle by the jobs tagged ``tag``, from Spark's status store
    (its task metrics, as the Spark UI shows them); empty if Spark does not say within ``wait`` s.
    The store is filled by a listener, a moment after a job ends: this waits for the jobs to end."""
    try:
        jsc = sc._jsc.sc()
        store = jsc.statusStore()
        job_ids = list(jsc.statusTracker().getJobIdsForTag(tag))
        deadline = time.time() + wait
        records = written = 0
        for jid in job_ids:
            job = store.job(jid)
            while str(job.status()) == "RUNNING" and time.time() < deadline:
                time.sleep(0.01)
                job = store.job(jid)
            stages = job.stageIds().iterator()
            while stages.hasNext():
                try:
                    st = store.lastStageAttempt(stages.next())
                except Exception:  # a stage that was skipped (its shuffle output reused) has no attempt
                    continue
                records += int(st.shuffleWriteRecords())
                written += int(st.shuffleWriteBytes())
        return {"records": records, "bytes": written} if job_ids else {}
    except Exception:  # no JVM (Spark Connect) or a store without these methods
        return {}


def _first_lines(text: str, n: int = 12) -> str:
    """What of Spark's failure text a user reads: its first lines and, of a longer Python traceback, the
    last ones (the exception itself), without the JVM's stack frames.

    >>> text = "Boom\\nTraceback:\\n" + "".join(f"  f{i}\\n" for i in range(20)) + "KeyError: 'x'\\n\\tat org.X"
    >>> print(_first_lines(text, n=4))
    Boom
    Traceback:
    ...
      f18
      f19
    KeyError: 'x'
    """
    lines = [ln for ln in text.splitlines() if ln.strip()]
    jvm = next((i for i, ln in enumerate(lines) if ln.startswith("\tat ") or "JVM stacktrace" in ln), len(lines))
    lines = lines[:jvm]
    if len(lines) <= n:
        return "\n".join(lines)
    return "\n".join([*lines[:2], "...", *lines[len(lines) - (n - 1) :]])
