"""Rewriting a stage's whole state in one pass (``cbp upgrade``): the Spark job, whose tasks
(:mod:`cbp.engine.task.restate`) convert each old partition's rows and write each new partition.

DataFrames only (as on Spark Connect, where there is no RDD): ``spark.range(n)`` holds the old
partitions' numbers (Spark partition i holds i); a ``mapInArrow``
(:func:`~cbp.engine.task.restate.convert_parts`) converts each and emits its rows split by new
partition (one Arrow IPC blob per new partition, with that partition's probe,
:func:`~cbp.engine.common.sparkhash.partition_probes`); ``repartition(P, probe)`` puts new
partition q in Spark partition q (Spark's hash of an int is not the identity; the probe string
hashes to q); a second ``mapInArrow`` (:func:`~cbp.engine.task.restate.write_parts`) writes each
new partition. A task that gets rows of two new partitions, or of one that is not its own, fails
the rewrite instead of writing them.
"""

from __future__ import annotations

import pickle
from functools import partial
from typing import TYPE_CHECKING, Any

from ...storage import Home
from ..common.sparkhash import partition_probes
from ..task.restate import SPLIT_DDL, WRITTEN_DDL, Job, convert_parts, write_parts

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["rewrite_state"]


def rewrite_state(
    spark: SparkSession, job: Job, files_by_part: dict[int, list[dict[str, Any]]]
) -> tuple[dict[int, dict[str, Any]], list[str]]:
    """Run the rewrite; per new partition its ``{"add", "index", "rows"}``, and the failures (then
    nothing is to be committed).

    Example (a rewrite of two old partitions into three; the controller commits the files)::

        rewrite_state(spark, job, {0: files0, 1: files1})
        # ({0: {"add": {...}, "index": "stages/s/index/_part=0/...", "rows": 4}, 1: ..., 2: ...}, [])
    """
    home: Home = job.home
    items = sorted(files_by_part.items())
    if not items:
        return {}, []
    probes = partition_probes(job.partitions)
    ids = spark.range(0, len(items), 1, len(items))  # Spark partition i holds i: one task per old partition
    split = ids.mapInArrow(partial(convert_parts, job, items, probes), SPLIT_DDL)
    placed = split.repartition(job.partitions, "probe")  # the probe of q hashes to Spark partition q
    got = [
        (int(r["q"]), pickle.loads(r["result"]))
        for r in placed.mapInArrow(partial(write_parts, job), WRITTEN_DDL).collect()
    ]
    errors = [e for _, r in got if "errors" in r for e in r["errors"]]
    if errors:
        for _, r in got:
            if "add" in r:
                home.delete_file(f"{job.state_rel}/{r['add']['path']}")
                home.delete_file(r["index"])
        return {}, errors
    return {q: r for q, r in got}, []
