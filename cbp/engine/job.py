"""The physical layer on Spark: one stage epoch as one Spark job (paper 001 §4.4–4.5).

*Direct* mode (§4.5): only the new input increments are read and routed (RouteBy) through
Spark's shuffle into the stage's P partitions with Spark's own hash (``repartition(P, _key)``),
sorted by key and flow. Task ``p`` owns state partition ``p``: it reads the state of the keys it
needs through the partition's index and writes only what changed (:mod:`cbp.engine.task`).

*Black-box* mode (§4.4): the state is just another input. It is read whole, shuffled with the
new input, and written whole every epoch: the baseline the benchmarks compare against.

Either way the job only writes files; :mod:`cbp.controller` commits them.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from functools import partial, reduce
from typing import Any, Optional

from ..errors import RuntimeStateError, UserCodeError
from ..spec.schema import RecordSchema
from .protocol import TaskResult
from .task import IO_ERROR, USER_ERROR, TaskPlan, grouped_task, recordwise_task, route_batches

__all__ = ["run_stage_epoch", "spark_ddl"]

_SPARK_TYPES = {"string": "STRING", "int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN", "json": "STRING"}
_ERR_RE = re.compile(re.escape(USER_ERROR) + r"<<(.*?)>>" + re.escape(USER_ERROR), re.S)
_IO_RE = re.compile(re.escape(IO_ERROR) + r"<<(.*?)>>" + re.escape(IO_ERROR), re.S)
_WORKER_DIED = ("Python worker exited unexpectedly", "worker exited unexpectedly (crashed)", "EOFException")
CANCEL_GRACE = 5.0  # seconds after the deadline before the driver cancels a job whose tasks did not stop


def spark_ddl(schema: RecordSchema, meta: str = "") -> str:
    """The Spark DDL of stored records (``json`` fields are text).

        >>> spark_ddl(RecordSchema.parse({"url": "string", "n": "int", "xs": "list<float>"}))
        '`url` STRING, `n` BIGINT, `xs` ARRAY<DOUBLE>'
    """
    cols = []
    for name, ft in schema.fields.items():
        t = _SPARK_TYPES[ft.scalar]
        cols.append(f"`{name}` {'ARRAY<' + t + '>' if ft.is_list else t}")
    return ", ".join(([meta] if meta else []) + cols)


def run_stage_epoch(spark: Any, plan: TaskPlan, input_files: dict[int, list[str]], state_files: Optional[list[str]] = None,
                    state_needs_dedupe: bool = False) -> list[TaskResult]:
    """Run one stage epoch; return each task's result (files written, stats).

    ``input_files`` maps input index -> file URIs of the increments to read; ``state_files`` are
    the state table's files (black-box mode only).
    """
    st = plan.stage
    sc = spark.sparkContext
    tag = f"cbp-{st.name}-{plan.epoch}-{uuid.uuid4().hex[:8]}"
    timer: Optional[threading.Timer] = None
    if plan.deadline is not None:  # tasks stop themselves at the deadline; this is for those that cannot
        timer = threading.Timer(max(plan.deadline - time.time(), 0) + CANCEL_GRACE, sc.cancelJobsWithTag, (tag,))
        timer.daemon = True
        timer.start()
    sc.setInterruptOnCancel(True)
    sc.addJobTag(tag)
    try:
        if st.record_wise:
            jobs = [
                _read(spark, plan.input_schemas[i], files).mapInArrow(partial(recordwise_task, plan, i), "meta STRING")
                for i, files in input_files.items() if files
            ]
            if not jobs:
                return []
            rows = reduce(lambda a, b: a.unionByName(b), jobs).collect()
        else:
            rows = _grouped(spark, plan, input_files, state_files, state_needs_dedupe).collect()
    except Exception as e:  # Spark wraps the task's exception in its own
        raise _job_error(plan, str(e)) from None
    finally:
        sc.removeJobTag(tag)
        if timer is not None:
            timer.cancel()
    return [TaskResult(**json.loads(r["meta"])) for r in rows]


def _job_error(plan: TaskPlan, text: str) -> Exception:
    """The cbp error for a failed stage-epoch job, from what its tasks reported."""
    none = "nothing of this epoch was committed"
    if plan.deadline is not None and time.time() >= plan.deadline:
        limit = f" of {plan.timeout:g} s" if plan.timeout else ""
        m = _ERR_RE.search(text)
        where = m.group(1) if m and "time limit" in m.group(1) else plan.where()
        return UserCodeError(f"{where}: the epoch ran out of its time limit{limit} and was cancelled; {none}. "
                             "Raise the stage's 'timeout' (or 'cbp run --epoch-timeout') or fix the translator", code="timeout")
    m = _ERR_RE.search(text)
    if m:
        return UserCodeError(m.group(1) + f"; {none}")
    m = _IO_RE.search(text)
    if m:
        return RuntimeStateError(m.group(1) + f"; {none}; fix the cause and run again", code="io")
    if any(sign in text for sign in _WORKER_DIED):
        return UserCodeError(f"{plan.where()}: a Spark Python worker died while running the stage's code (did a translator call "
                             f"os._exit, or get killed, e.g. for memory?); {none}", code="worker-died")
    return RuntimeStateError(f"{plan.where()}: the Spark job failed; {none}: {_first_lines(text)}")


def _read(spark: Any, schema: RecordSchema, files: list[str]) -> Any:
    return spark.read.schema(spark_ddl(schema)).parquet(*files)


def _grouped(spark: Any, plan: TaskPlan, input_files: dict[int, list[str]], state_files: Optional[list[str]], dedupe: bool) -> Any:
    from pyspark.sql import functions as F

    env_ddl = "_key STRING, _flow INT, _rec STRING"
    parts = [
        _read(spark, plan.input_schemas[i], files).mapInArrow(partial(route_batches, plan, i), env_ddl)
        for i, files in input_files.items() if files
    ]
    if plan.mode == "blackbox" and plan.stage.state_schema is not None and state_files:
        schema = plan.stage.state_schema
        s = spark.read.schema(spark_ddl(schema, "_key STRING, _h BIGINT, _epoch BIGINT, _alive BOOLEAN")).parquet(*state_files)
        if dedupe:  # the table was last written in direct mode: keep each key's newest rows
            newest = s.groupBy("_key").agg(F.max("_epoch").alias("_newest"))
            s = s.join(newest, "_key").where("_epoch = _newest")
        s = s.where("_alive")
        parts.append(s.select(
            "_key", F.lit(-1).cast("int").alias("_flow"),
            F.to_json(F.struct(*[F.col(f"`{c}`") for c in schema.fields]), {"ignoreNullFields": "false"}).alias("_rec"),
        ))
    if parts:
        env = reduce(lambda a, b: a.unionByName(b), parts)
    else:
        env = spark.createDataFrame([], env_ddl)
    env = env.withColumn("_h", F.xxhash64("_key")).repartition(plan.stage.partitions, "_key").sortWithinPartitions("_key", "_flow")
    return env.mapInArrow(partial(grouped_task, plan), "meta STRING")


def _first_lines(text: str, n: int = 12) -> str:
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(lines[:n])

