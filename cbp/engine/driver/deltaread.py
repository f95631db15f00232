"""Reading cbp's Delta tables through Spark's own Delta connector (delta-spark).

cbp *writes* every table with delta-rs (:mod:`cbp.storage`); Spark users *read* them with
``spark.read.format("delta")``, time travel included. This module holds the two reads cbp
itself makes that way: a table at a version, and a stage's state as it is defined for any Delta
reader (the newest ``_epoch`` per ``_key``, where ``_alive``). A black-box epoch reads its state as
the version's files (:class:`StateSource`), without the connector's log replay.

    >>> StateSource("/h/state/count", 3, lambda: ["/h/state/count/_part=0/a.parquet"]).version
    3
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .session import require_delta

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["StateSource", "read_delta", "latest_state", "STATE_COLUMNS"]

#: The columns every state row carries before the user's fields (see :mod:`cbp.engine.task.bipindex`).
STATE_COLUMNS = ("_key", "_h", "_epoch", "_alive")


@dataclass(frozen=True)
class StateSource:
    """A state table at a version, for a job that reads it whole (black-box mode).

    ``files`` lists the version's data files (cbp's storage layer, with delta-rs): the job reads them,
    not the table through Spark's Delta connector (whose log replay is two Spark jobs an epoch).
    """

    uri: str
    version: int
    files: Callable[[], list[str]]


def read_delta(spark: SparkSession, uri: str, version: int | None = None) -> DataFrame:
    """The Delta table at ``uri`` (at ``version``, by time travel) as a Spark DataFrame.

    Raises ``RuntimeStateError`` code ``no-delta-jars`` when ``spark`` has no Delta connector.

    Example::

        read_delta(spark, "state/url_count/state/url_count", 2).count()
        # 17
    """
    require_delta(spark)
    reader = spark.read.format("delta")
    if version is not None:
        reader = reader.option("versionAsOf", int(version))
    return reader.load(uri)  # s3:// reaches S3A through fs.s3.impl (session.s3a_conf)


def latest_state(
    df: DataFrame, dedupe: bool = True, partitions: int | None = None, row_key: bool | None = None
) -> DataFrame:
    """A state table's live rows: each key's rows of its newest epoch, without tombstones.

    This is :func:`cbp.engine.task.bipindex.latest_rows` in Spark: ``max(_epoch)`` per ``_key`` where
    ``_alive``. ``dedupe=False`` trusts that each key has rows of one epoch only (a table last
    rewritten whole, in black-box mode). ``partitions`` (the stage's): the dedupe's shuffle has that
    many partitions, not ``spark.sql.shuffle.partitions`` (200 by default: cbp's session has no
    adaptive execution to coalesce them, and a 3-row state read in 3.9 s instead of 0.45 s). ``row_key``:
    whether the stage keeps keyed rows (a row is ``(_key, _rk)``), as its spec says; None asks ``df``'s
    columns, which on Spark Connect is a round trip to the server (``AnalyzePlan``).

    Example::

        latest_state(read_delta(spark, "state/url_count/state/url_count")).count()
        # 17
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if dedupe:
        if partitions is not None:
            df = df.repartition(partitions, "_key")  # the window below needs no other shuffle
        if row_key is None:
            row_key = "_rk" in df.columns
        newest = F.max("_epoch").over(Window.partitionBy("_key", *(["_rk"] if row_key else [])))
        df = df.withColumn("_newest", newest).where(F.col("_epoch") == F.col("_newest")).drop("_newest")
    return df.where(F.col("_alive"))
