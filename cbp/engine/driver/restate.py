"""Rewriting a stage's whole state in one pass (``cbp upgrade``): the Spark job, whose tasks
(:mod:`cbp.engine.task.restate`) convert each old partition's rows and write each new partition."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from ...storage import Home
from ...storage.objectstore import propagate_to_spark
from ..task.restate import Job, convert_part, write_part

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["rewrite_state"]


def rewrite_state(
    spark: SparkSession, job: Job, files_by_part: dict[int, list[dict[str, Any]]]
) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Run the rewrite; per new partition its ``{"add", "index", "rows"}``, and the failures (then
    nothing is to be committed)."""
    home: Home = job.home
    items = sorted(files_by_part.items())
    if not items:
        return {}, []
    sc = spark.sparkContext
    propagate_to_spark(sc)
    rdd = sc.parallelize(items, len(items))
    pairs = rdd.flatMap(partial(convert_part, job)).partitionBy(job.partitions, lambda q: q)
    got = pairs.mapPartitionsWithIndex(partial(write_part, job)).collect()
    errors = [e for _, r in got if "errors" in r for e in r["errors"]]
    if errors:
        for _, r in got:
            if "add" in r:
                home.delete_file(f"{job.state_rel}/{r['add']['path']}")
                home.delete_file(r["index"])
        return {}, errors
    return {q: r for q, r in got}, []
