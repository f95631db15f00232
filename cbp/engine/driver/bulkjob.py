"""A stage epoch over empty state whose keys' state Spark SQL computes (the *bulk* path, chosen with
the plan: :func:`cbp.engine.driver.taskplan.choose_path`): a view's first build, or a view added or
changed by ``cbp upgrade``, reads its inputs' whole contents, where running every record through the
per-key translator in Python costs tens of microseconds a record.

The stage's translator's :class:`~cbp.engine.driver.taskplan.BulkBuild` turns the epoch's input
files into one *seed* row per key (its state, aggregated by Spark's generated code over the Parquet
columns), and names the stage that writes a seed: the same stage, state table, partitions and
outputs, with a translator that writes the key's state row and output records from its seed and a
RouteBy of the seed's key columns. That stage runs as any grouped epoch does (shuffle by the key's
text, one task per state partition, the partition's files and index written by the task): so the
files, and the controller's commit of them, are those of the per-key path, and a crash loses or
duplicates nothing that it would not.

A build with a ``rows`` method (a view's join step, :class:`cbp.views.joinbulk.JoinBuild`; a GROUP BY
whose build's ``writes`` says so, :mod:`cbp.views.groupbulk`) writes the state and output files itself,
in Spark jobs of Arrow tasks, and gives the tasks' results as a grouped epoch's: no seed goes through
Python at all. When that job fails, the seed path runs (a join has none: its ``seed`` refuses), then the
per-key path.

When Spark refuses the build's SQL, or the job fails (an ANSI error in a row: a division by zero,
a cast or a decimal overflow), the epoch runs again on the per-key path, whose error names the view,
the key and the row; the failed attempt's files are left unreferenced, as a retried task's are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...spec.schema import RecordSchema
from ..task.plan import TaskPlan
from .taskplan import bulk_build_of

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["bulk_grouped", "written", "SEED_FILE"]

#: The placeholder file name of the seed input (its rows come as a DataFrame, not files).
SEED_FILE = "cbp-bulk-seed"

Grouped = Callable[..., "pa.Table"]
_log = logging.getLogger(__name__)


def bulk_grouped(
    spark: SparkSession,
    plan: TaskPlan,
    input_files: dict[int, list[str]],
    read: Callable[[RecordSchema, list[str]], DataFrame],
    grouped: Grouped,
) -> pa.Table:
    """The epoch's tasks' results: its seed rows (``plan``'s stage's bulk build over ``input_files``,
    read by ``read``) written by the grouped job ``grouped(plan, input_files, frames=...)``; on a
    failure, ``grouped`` on the per-key path.

    Example: a ``GROUP BY`` view over 600,000 rows in 4 groups: one Spark aggregation, then 4 seed
    rows through Python instead of 600,000 records."""
    per_key = replace(plan, path=replace(plan.path, bulk=False))
    build = bulk_build_of(plan.stage)
    if build is None or not input_files or any(not files for files in input_files.values()):
        return grouped(per_key, input_files)
    if getattr(build, "rows", None) is not None and getattr(build, "writes", _every)(plan):
        try:  # state rows and output records by Spark (cbp.views.joinbulk, cbp.views.groupbulk)
            return written(spark, plan, input_files, read)
        except Exception as e:
            if plan.deadline is not None and time.time() >= plan.deadline:
                raise  # out of time: the per-key path would be too
            _log.info("%s: the bulk build failed (%s); seeds or per-key path", plan.where(), str(e).splitlines()[0])
    try:
        frames = [read(plan.input_schemas[i], input_files[i]) for i in range(len(plan.stage.inputs))]
        seed, stage, schema = build.seed(spark, plan.stage, frames)
    except Exception as e:  # Spark refused the build's SQL (or the session's settings do not allow it)
        _log.info("%s: the bulk build was refused (%s); per-key path", plan.where(), str(e).splitlines()[0])
        return grouped(per_key, input_files)
    path = replace(plan.path, bulk=False, route="shuffle", jvm_routing=False)
    seeded = replace(plan, stage=stage, input_schemas=[schema.signed()], path=path)
    try:
        return grouped(seeded, {0: [SEED_FILE]}, frames={0: seed})
    except Exception as e:
        if plan.deadline is not None and time.time() >= plan.deadline:
            raise  # out of time: the per-key path would be too
        _log.info("%s: the bulk build failed (%s); per-key path", plan.where(), str(e).splitlines()[0])
        return grouped(per_key, input_files)


def _every(plan: TaskPlan) -> bool:
    return True


def written(
    spark: SparkSession,
    plan: TaskPlan,
    input_files: dict[int, list[str]],
    read: Callable[[RecordSchema, list[str]], DataFrame],
) -> pa.Table:
    """The results of a build that gives state rows and output records (its ``rows(spark, plan,
    frames)``: a pair, or a row per key with both, :func:`cbp.engine.task.bulkwrite.write_rows`), written by
    :mod:`cbp.engine.task.bulkwrite`'s tasks; raises when Spark refuses or fails."""
    from functools import partial

    from ..common.protocol import result_spark_schema
    from ..task.bulkwrite import write_output, write_rows, write_state

    build: Any = bulk_build_of(plan.stage)
    frames = [read(plan.input_schemas[i], input_files[i]) for i in range(len(plan.stage.inputs))]
    rows = build.rows(spark, plan, frames)
    schema = result_spark_schema()
    if not isinstance(rows, tuple):  # a row per key, its state and output (cbp.views.groupbulk): one task
        return rows.mapInArrow(partial(write_rows, plan), schema).toArrow()
    state, output = rows
    states = state.mapInArrow(partial(write_state, plan), schema)
    return states.unionByName(output.mapInArrow(partial(write_output, plan), schema)).toArrow()
