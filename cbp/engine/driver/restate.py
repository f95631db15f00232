"""Rewriting a stage's whole state in one pass (``cbp upgrade``): the Spark job, whose tasks
(:mod:`cbp.engine.task.restate`) convert each old partition's rows and write each new partition.

DataFrames only (as on Spark Connect, where there is no RDD): ``spark.range(n)`` holds the old
partitions' numbers (Spark partition i holds i), a ``mapInArrow`` converts each and emits its
rows split by new partition (one Arrow IPC blob per new partition, with that partition's probe,
:func:`~cbp.engine.common.sparkhash.partition_probes`), ``repartition(P, probe)`` puts new
partition q in Spark partition q (Spark's hash of an int is not the identity; the probe string
hashes to q), and a second ``mapInArrow`` writes each new partition. A task that gets rows of
two new partitions, or of one that is not its own, fails the rewrite instead of writing them.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from ...storage import Home
from ..common.sparkhash import partition_probes
from ..task.restate import Job, convert_part, write_part

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["rewrite_state"]

#: The rows between the two steps: new partition, its probe, an Arrow IPC blob of its rows.
_SPLIT = pa.schema([("q", pa.int32()), ("probe", pa.string()), ("data", pa.binary())])
#: What each new partition's task reports: the partition and its pickled result.
_WRITTEN = pa.schema([("q", pa.int32()), ("result", pa.binary())])
_SPLIT_DDL, _WRITTEN_DDL = "q int, probe string, data binary", "q int, result binary"


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
    split = ids.mapInArrow(partial(_convert, job, items, probes), _SPLIT_DDL)
    placed = split.repartition(job.partitions, "probe")  # the probe of q hashes to Spark partition q
    got = [
        (int(r["q"]), pickle.loads(r["result"]))
        for r in placed.mapInArrow(partial(_write, job), _WRITTEN_DDL).collect()
    ]
    errors = [e for _, r in got if "errors" in r for e in r["errors"]]
    if errors:
        for _, r in got:
            if "add" in r:
                home.delete_file(f"{job.state_rel}/{r['add']['path']}")
                home.delete_file(r["index"])
        return {}, errors
    return {q: r for q, r in got}, []


def _convert(
    job: Job, items: list[tuple[int, list[dict[str, Any]]]], probes: tuple[str, ...], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Task of the old partitions whose numbers come in ``batches`` (``spark.range``): their rows,
    converted, one row per new partition (its number, probe and IPC blob)."""
    for batch in batches:  # every batch read: a task that leaves input unread loses its Python worker
        for i in batch.column(0).to_pylist():
            qs, blobs = [], []
            for q, data in convert_part(job, items[i]):
                qs.append(q)
                blobs.append(data)
            if qs:
                yield pa.RecordBatch.from_arrays(
                    [pa.array(qs, pa.int32()), pa.array([probes[q] for q in qs], pa.string()), pa.array(blobs)],
                    schema=_SPLIT,
                )


def _write(job: Job, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Task of one new partition: its blobs in (all of one partition ``q``, placed in Spark partition
    ``q``), its state file and index written (:func:`write_part`), the pickled result out."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    mine = ctx.partitionId() if ctx is not None else None
    rows: list[tuple[int, bytes]] = []
    for batch in batches:
        rows.extend(zip(batch.column("q").to_pylist(), batch.column("data").to_pylist()))
    if not rows:
        return
    qs = {q for q, _ in rows}
    if len(qs) != 1 or (mine is not None and qs != {mine}):  # a probe placed wrong: write nothing
        result = {"errors": [f"state rewrite: Spark partition {mine} got rows of new partitions {sorted(qs)}"]}
        yield _result(min(qs), result)
        return
    for q, result in write_part(job, qs.pop(), iter(rows)):
        yield _result(q, result)


def _result(q: int, result: dict[str, Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([q], pa.int32()), pa.array([pickle.dumps(result)], pa.binary())], schema=_WRITTEN
    )
