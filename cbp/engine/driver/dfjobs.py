"""What a stage epoch's driver asks of Spark in either kind of session: a classic one (a JVM in this
process, ``sparkContext``, RDDs) or a Spark Connect one (DataFrame APIs only; :func:`is_connect`).

- **Job tags.** An epoch's jobs carry a tag, so that the driver can cancel them at the deadline:
  ``sc.addJobTag`` / ``sc.cancelJobsWithTag`` on classic, ``spark.addTag`` / ``spark.interruptTag``
  on Connect (:class:`JobTag`).
- **One-stage jobs of Python tasks** without RDDs: ``mapInArrow`` over :func:`range_frame` (``n``
  tasks, task ``i`` holds ``i``) of a function of :mod:`cbp.engine.task.arrowtasks` (they read their
  input to its end) that carries each task's work (``groups[i]`` for task ``i``); :func:`blobs_of`
  collects. On Connect such a job is one round trip (``ExecutePlan``): the range's schema is known here
  (:func:`known_schema`: ``mapInArrow`` asks for its input's columns, an ``AnalyzePlan``), the
  function's output schema is a Spark type (a DDL string is parsed by the server), and the work travels
  in the function rather than a DataFrame of rows (``createDataFrame`` asks the server a ``Config``).
- **Shuffle records and bytes** without the status store: on Connect, the SQL metrics of the job's
  exchanges, which the server sends after the job's last rows (:func:`shuffle_metrics`).

Example::

    with JobTag(spark, "cbp-count-3") as tag:
        blobs = blobs_of(range_frame(spark, 2).mapInArrow(partial(claiming_batches, ...), BLOB_DDL))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .session import is_connect, seen_conf

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

__all__ = [
    "JobTag",
    "parallelism",
    "connect_conf",
    "server_local",
    "range_frame",
    "known_schema",
    "ddl_type",
    "blobs_of",
    "shuffle_metrics",
    "BLOB_DDL",
    "CONNECT_PARALLELISM",
]

#: The output of the jobs' functions (:data:`cbp.engine.task.arrowtasks.BLOBS`).
BLOB_DDL = "blob BINARY"
#: Tasks a Spark Connect session's small jobs use when the server does not say (``spark.default.parallelism``).
CONNECT_PARALLELISM = 2


class JobTag:
    """Tag the jobs this thread starts with ``tag`` while the ``with`` block runs; :meth:`cancel` (from
    any thread) cancels them, interrupting their tasks."""

    def __init__(self, spark: SparkSession, tag: str) -> None:
        self.spark, self.tag, self.connect = spark, tag, is_connect(spark)

    def __enter__(self) -> JobTag:
        if self.connect:
            self.spark.addTag(self.tag)
        else:
            sc = self.spark.sparkContext
            sc.setInterruptOnCancel(True)
            sc.addJobTag(self.tag)
        return self

    def cancel(self) -> None:
        """Cancel the tagged jobs (a timer's thread calls this at an epoch's deadline)."""
        if self.connect:
            self.spark.interruptTag(self.tag)
        else:
            self.spark.sparkContext.cancelJobsWithTag(self.tag)

    def __exit__(self, *exc: Any) -> None:
        if self.connect:
            self.spark.removeTag(self.tag)
        else:
            self.spark.sparkContext.removeJobTag(self.tag)


def parallelism(spark: SparkSession) -> int:
    """Tasks Spark runs at once: the classic driver's default parallelism; on Spark Connect the server's
    ``spark.default.parallelism`` if it says, else :data:`CONNECT_PARALLELISM`."""
    if not is_connect(spark):
        return max(1, spark.sparkContext.defaultParallelism)
    return int(connect_conf(spark, "spark.default.parallelism", str(CONNECT_PARALLELISM), positive=True))


#: (Connect session id, setting) -> its value, asked once per session (each question is a round trip).
_CONF: dict[tuple[str, str], str] = {}


def connect_conf(spark: SparkSession, key: str, default: str, positive: bool = False) -> str:
    """A Connect session's setting ``key`` (``default`` when the server does not say, or, with
    ``positive``, says something that is not a positive integer), asked once per session: a small
    epoch asked two such settings, two round trips of its six."""
    k = (str(getattr(spark, "session_id", id(spark))), key)
    if k not in _CONF:
        try:
            seen, value_seen = seen_conf(spark, key)  # asked when the session opened (one round trip for all)
            value = str((value_seen if seen else spark.conf.get(key, None)) or default)
            if positive and int(value) < 1:
                value = default
        except Exception:  # noqa: BLE001 - a server that does not say, or not a number
            value = default
        _CONF[k] = value
    return _CONF[k]


def server_local(spark: SparkSession) -> bool:
    """Whether a Spark Connect session's server runs its tasks in local mode (its ``spark.master`` is
    ``local``: every task on its machine); False for a server that does not say. Asked once per session."""
    return connect_conf(spark, "spark.master", "cluster").startswith("local")


#: (Connect session id, DDL) -> the server's parse of it (an ``AnalyzePlan`` round trip each time it is asked).
_DDL: dict[tuple[str, str], StructType] = {}


def ddl_type(spark: SparkSession, ddl: str) -> StructType | str:
    """A schema ``ddl`` (``"a STRING, b INT"``) as a job's functions and reads take it: on Connect a Spark type,
    parsed by the server once per session and DDL (a stage's DDLs are the same epoch after epoch; a DDL string
    given to ``mapInArrow`` is parsed by the server each time); on classic the string (parsed in this
    process's JVM)."""
    if not is_connect(spark):
        return ddl
    from pyspark.sql.types import DataType, StructType

    k = (str(getattr(spark, "session_id", id(spark))), ddl)
    if k not in _DDL:
        parsed = DataType.fromDDL(ddl)
        assert isinstance(parsed, StructType)  # a list of columns
        _DDL[k] = parsed
    return _DDL[k]


def blob_schema() -> StructType:
    """:data:`BLOB_DDL` as a Spark type: a Connect client sends a DDL string to the server to parse
    (a round trip per job), a type it sends as it is."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    return StructType([StructField("blob", BinaryType())])


def blobs_of(df: DataFrame) -> list[bytes]:
    """The ``blob`` messages a job's tasks returned (a DataFrame of :data:`BLOB_DDL`)."""
    return [bytes(b) for b in df.toArrow().column("blob").to_pylist()]


def range_frame(spark: SparkSession, n: int) -> DataFrame:
    """``n`` partitions, partition ``i`` holding the one row ``id = i``: the input of a job of ``n`` tasks."""
    from pyspark.sql.types import LongType, StructField, StructType

    return known_schema(spark.range(0, n, 1, n), StructType([StructField("id", LongType(), False)]))


def known_schema(df: DataFrame, schema: StructType) -> DataFrame:
    """``df``, a DataFrame whose schema the caller knows, told it: a Connect DataFrame asks the server
    the first time anything needs its schema (a round trip: ``mapInArrow`` needs its input's columns).
    A classic DataFrame as it is (its schema is in this process)."""
    if is_connect(df.sparkSession):
        df._cached_schema = schema  # type: ignore[attr-defined]  # pyspark.sql.connect.dataframe.DataFrame's cache
    return df


#: The SQL metrics of a shuffle's exchange (Spark's ``SQLShuffleWriteMetricsReporter`` updates them with the
#: task metrics that classic's status store sums), by what :func:`shuffle_metrics` calls them.
SHUFFLE_METRICS = {"shuffleRecordsWritten": "records", "shuffleBytesWritten": "bytes"}


def shuffle_metrics(df: DataFrame) -> dict[str, int]:
    """Records and bytes a collected Connect DataFrame's job wrote to Spark's shuffle: the metrics of its
    plan's exchanges, which the server sends with the job's last response (``df.executionInfo``); empty
    when it sent none or the plan has no exchange (a classic DataFrame: :func:`cbp.engine.driver.job.shuffle_written`).

    Example::

        table = df.toArrow()
        shuffle_metrics(df)  # {"records": 1000, "bytes": 45678}
    """
    collected = getattr(getattr(df, "executionInfo", None), "metrics", None)
    if collected is None:
        return {}
    out: dict[str, int] = {}
    try:
        for node in collected.extract_graph()[1].values():  # each plan node once
            for m in node.metrics:
                what = SHUFFLE_METRICS.get(m.name)
                if what is not None:
                    out[what] = out.get(what, 0) + int(m.value)
    except Exception:  # noqa: BLE001 - a tree pyspark cannot read: unknown, never a failed epoch
        return {}
    return out if len(out) == len(SHUFFLE_METRICS) else {}
