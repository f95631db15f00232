"""Keeping state partition ``p`` on one executor without preferred locations (Spark Connect on a cluster).

A classic driver places partition ``p``'s task on the executor that ran it last through an RDD's
preferred locations (:mod:`cbp.engine.driver.locality`); Spark Connect has no RDDs. Spark still
prefers to run a task where a *cached block* of its input lives, so a small cached DataFrame, the
**anchor**, does the same: one row per partition, a probe string that Spark's ``repartition(P, col)``
puts in partition ``p`` (:func:`cbp.engine.common.sparkhash.partition_probes`), hash-partitioned by
it and cached. An epoch's input, given the same probe per row (:func:`anchored`), is joined to the
anchor (a shuffled hash join, the anchor the build side): the anchor's side keeps its cached
partitioning (no shuffle), so the join's task ``p`` reads cached block ``p`` and the scheduler runs
it on the executor that holds that block, epoch after epoch, as long as the block lives (an
executor lost: Spark computes the block again elsewhere, and ``p`` stays there from then on).

A small epoch needs no join: its job is ``mapInArrow`` over the anchor itself, the partitions' envelopes
sent with the function (:func:`cbp.engine.task.arrowtasks.slot_batches`), so that it stays one stage;
a first job that put two of the anchor's blocks on one executor drops the anchor once (:func:`spread`).

Only a server in front of a cluster needs it (:func:`placing`: its ``spark.master`` is not ``local``);
in local mode every task runs in the one executor.

Example::

    if placing(spark):
        df = anchored(spark, df, "_a", 4)   # df's column _a holds partition_probes(4)[p] for partition p
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ... import settings
from ..common.sparkhash import partition_probes
from .dfjobs import server_local

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["ANCHOR", "placing", "anchor_frame", "anchored", "probe_column", "anchored_shuffle", "spread"]

#: The anchor's one column, also the join column an anchored input carries.
ANCHOR = "_cbp_anchor"
#: Connect session id -> whether its server runs tasks on a cluster (asked once per session).
_PLACING: dict[str, bool] = {}
#: (session id, partitions) -> the cached anchor.
_ANCHORS: dict[tuple[str, int], DataFrame] = {}
#: (session id, partitions) of anchors cached again once because their blocks shared an executor.
_RESPREAD: set[tuple[str, int]] = set()


def _sid(spark: SparkSession) -> str:
    return str(getattr(spark, "session_id", id(spark)))


def placing(spark: SparkSession) -> bool:
    """Whether epochs on this Connect session should be anchored: its server's master is a cluster's
    (not ``local``) and ``CBP_PLACEMENT`` is not ``0``. One round trip per session."""
    if not settings.current().placement:  # CBP_PLACEMENT=0
        return False
    sid = _sid(spark)
    if sid not in _PLACING:  # a managed server that does not say: a cluster
        _PLACING[sid] = not server_local(spark)
    return _PLACING[sid]


def anchor_frame(spark: SparkSession, partitions: int) -> DataFrame:
    """The cached anchor of ``partitions`` partitions: row ``p`` (probe ``p``) alone in partition ``p``.
    Cached on first use (Spark fills the cache in the first job that reads it; a later session's
    identical plan finds the same cached blocks)."""
    key = (_sid(spark), partitions)
    if key not in _ANCHORS:
        rows = [(probe,) for probe in partition_probes(partitions)]
        frame = spark.createDataFrame(rows, f"{ANCHOR} STRING").repartition(partitions, ANCHOR)
        _ANCHORS[key] = frame.cache()
    return _ANCHORS[key]


def probe_column(partition: Column, partitions: int) -> Column:
    """The anchor probe of a partition-number column (0 to ``partitions - 1``), as a Spark column."""
    from pyspark.sql import functions as F

    probes = F.array(*[F.lit(p) for p in partition_probes(partitions)])
    return F.element_at(probes, partition.cast("int") + 1)


def anchored(spark: SparkSession, df: DataFrame, partitions: int, broadcast: bool = False) -> DataFrame:
    """``df`` (with column :data:`ANCHOR`: the probe of each row's partition) joined to the anchor: a
    DataFrame of ``partitions`` partitions, partition ``p`` holding the rows of probe ``p`` and run on
    the executor that caches anchor block ``p``; the :data:`ANCHOR` column dropped.

    ``broadcast`` (a small ``df``, as a small epoch's envelopes): ``df`` is broadcast and the anchor's
    cached partitions are the job's only stage; its tasks prefer nothing but the anchor's executors.
    Otherwise ``df`` is shuffled by its probe and joined by a shuffled hash join (the anchor its build
    side, its partitioning kept); the shuffle's reduce tasks then also prefer the hosts of the map output
    unless the server sets ``spark.shuffle.reduceLocality.enabled=false`` (``scripts/connect`` does)."""
    from pyspark.sql import functions as F

    anchor = anchor_frame(spark, partitions)
    if broadcast:
        return anchor.join(F.broadcast(df), ANCHOR).drop(ANCHOR)
    return anchor.hint("shuffle_hash").join(df, ANCHOR).drop(ANCHOR)


def anchored_shuffle(spark: SparkSession, df: DataFrame, by: Column, partitions: int) -> DataFrame:
    """``df.repartition(partitions, by)`` with partition ``p`` run where anchor block ``p`` is cached:
    each row's partition is Spark's own (``pmod(hash(by), partitions)``, as ``repartition`` computes
    it), its probe the join key (:func:`anchored`)."""
    from pyspark.sql import functions as F

    part = F.pmod(F.hash(by), F.lit(partitions))
    return anchored(spark, df.withColumn(ANCHOR, probe_column(part, partitions)), partitions)


def spread(spark: SparkSession, slots: int, executors: dict[int, str]) -> None:
    """After a job over an anchor of ``slots`` slots (``executors``: slot -> the executor that ran it):
    if two slots' blocks landed on one executor (the first job ran while another executor was busy or
    starting), drop the anchor so that the next job caches it again, once per session and size. An
    executor of several cores may hold several slots: then the second anchor stays as it falls."""
    key = (_sid(spark), slots)
    if key in _RESPREAD or key not in _ANCHORS or len(set(executors.values())) >= min(slots, len(executors)):
        return
    _RESPREAD.add(key)
    try:
        _ANCHORS.pop(key).unpersist()
    except Exception:  # noqa: BLE001 - the next job caches it again anyway
        pass
