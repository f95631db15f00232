"""The systems `bench/peers.py` compares, each keeping URLCount state (url -> times seen).

Every system implements the same three steps on the same Parquet files of URLs (column ``url``):

- ``build(files)``: make the state of the first ``size`` keys (each seen once), the way a user of
  that system would (cbp: ``feed`` of every Parquet file, then one ``run``: one epoch; delta-rs / delta-spark: one
  table write;
  Spark's stateful operators: the query's first micro-batches over those files);
- ``epoch(file)``: take one increment and bring the state up to date; returns the seconds of work
  (for cbp ``run()``'s wall time; for a streaming query the micro-batch's ``triggerExecution``
  from ``StreamingQueryProgress``, which leaves out the query's start, as a query that runs for
  months would);
- ``final_state()``: the state as a Spark DataFrame ``(url string, count bigint)``, whose
  fingerprint (:func:`fingerprint`) must equal the from-scratch count's.

This module is imported by ``bench/peers.py`` in a child process per (system, size), so that
each system gets a fresh JVM and its peak memory is its own.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
YAML = ROOT / "flows" / "url_count.yaml"


def fingerprint(df: Any) -> dict[str, int]:
    """Rows, sum of counts and XOR of ``xxhash64(url, count)``: equal iff the states are (almost surely) equal."""
    from pyspark.sql import functions as F

    row = (
        df.select(F.col("url").cast("string").alias("url"), F.col("count").cast("bigint").alias("count"))
        .agg(
            F.count(F.lit(1)).alias("rows"),
            F.sum("count").alias("total"),
            F.bit_xor(F.xxhash64("url", "count")).alias("xor"),
        )
        .first()
    )
    return {"rows": int(row["rows"]), "total": int(row["total"] or 0), "xor": int(row["xor"] or 0)}


def reference(spark: Any, files: list[str]) -> dict[str, int]:
    """The from-scratch answer: every URL of every file counted in one Spark batch job."""
    return fingerprint(spark.read.parquet(*files).groupBy("url").count())


class System:
    """One peer; ``work`` is its own directory."""

    name = ""
    needs_spark_conf: dict[str, str] = {}

    def __init__(self, spark: Any, work: Path) -> None:
        self.spark, self.work = spark, work

    def build(self, files: list[str]) -> None:
        raise NotImplementedError

    def epoch(self, file: str) -> float:
        raise NotImplementedError

    def final_state(self) -> Any:
        raise NotImplementedError

    def close(self) -> None:
        """Release what the system holds (queries, sessions)."""


# ---------------------------------------------------------------------------------------- cbp
class Cbp(System):
    """cbp's URLCount: direct mode per-key (``flows/url_count.yaml``), vectorised
    (``flows/url_count_vec.yaml`` under the same pipeline name) or black-box mode."""

    def __init__(self, spark: Any, work: Path, mode: str, yaml: Path, seed_home: Path | None = None) -> None:
        import cbp

        super().__init__(spark, work)
        self.home = work / "home"
        if seed_home is not None:  # start from a copy of a home another system built
            shutil.copytree(seed_home, self.home)
        self.pipe = cbp.load(yaml, home=str(self.home), mode=mode, spark=spark)
        self.phases: list[dict[str, float]] = []  # per run: EpochReport.seconds and task seconds per phase

    def _feed_run(self, *files: str) -> float:
        for file in files:
            self.pipe.feed("urls", file)  # the Parquet file itself, as a Spark user would
        t0 = time.perf_counter()
        reports = self.pipe.run()
        seconds = time.perf_counter() - t0
        if len(reports) != 1:
            raise RuntimeError(f"expected one epoch per run, got {len(reports)}")
        self.phases.append({"epoch_seconds": reports[0].seconds, **reports[0].phases})
        return seconds

    def build(self, files: list[str]) -> None:
        self._feed_run(*files)  # all of them in one epoch, as a user loading a dataset would

    def epoch(self, file: str) -> float:
        return self._feed_run(file)

    def final_state(self) -> Any:
        return self.pipe.state_df("url_count")


# ---------------------------------------------------------------------------------------- delta-rs
class DeltaRsMerge(System):
    """A hand-written job: aggregate the increment with Arrow, MERGE it into a Delta table with delta-rs."""

    name = "deltars-merge"

    def __init__(self, spark: Any, work: Path) -> None:
        super().__init__(spark, work)
        self.table = str(work / "counts")

    def build(self, files: list[str]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq
        from deltalake import write_deltalake

        t = pq.read_table(files).group_by("url").aggregate([("url", "count")]).rename_columns(["url", "count"])
        write_deltalake(self.table, t.cast(pa.schema([("url", pa.string()), ("count", pa.int64())])))

    def epoch(self, file: str) -> float:
        import pyarrow as pa
        import pyarrow.parquet as pq
        from deltalake import DeltaTable

        t0 = time.perf_counter()
        inc = pq.read_table(file).group_by("url").aggregate([("url", "count")]).rename_columns(["url", "count"])
        inc = inc.cast(pa.schema([("url", pa.string()), ("count", pa.int64())]))
        (
            DeltaTable(self.table)
            .merge(inc, predicate="t.url = s.url", source_alias="s", target_alias="t")
            .when_matched_update(updates={"count": "t.count + s.count"})
            .when_not_matched_insert_all()
            .execute()
        )
        return time.perf_counter() - t0

    def final_state(self) -> Any:
        return self.spark.read.format("delta").load(self.table)  # Spark's Delta connector reads delta-rs's table


# ---------------------------------------------------------------------------------------- Structured Streaming
class Streaming(System):
    """A Structured Streaming query over a directory of Parquet files, run with ``availableNow``
    once per increment (the file is linked into the directory first), checkpointed in ``work``."""

    def __init__(self, spark: Any, work: Path) -> None:
        super().__init__(spark, work)
        self.src, self.ckpt, self.sink = work / "src", work / "checkpoint", work / "sink"
        self.src.mkdir(parents=True, exist_ok=True)
        self.n_files = 0

    def _stream(self) -> Any:
        return self.spark.readStream.schema("url STRING").option("maxFilesPerTrigger", 1).parquet(str(self.src))

    def _start(self, df: Any) -> Any:
        raise NotImplementedError

    def _add(self, file: str) -> None:
        self.n_files += 1
        dst = self.src / f"part-{self.n_files:05d}.parquet"
        try:
            os.link(file, dst)
        except OSError:
            shutil.copy(file, dst)

    def _run(self) -> float:
        """Run the query until the new files are processed; the micro-batches' triggerExecution seconds."""
        q = self._start(self._stream())
        q.awaitTermination()
        if q.exception() is not None:
            raise RuntimeError(f"{self.name}: {q.exception()}")
        batches = [p for p in q.recentProgress if p.numInputRows > 0]
        return sum(p.durationMs.get("triggerExecution", 0) for p in batches) / 1000.0

    def build(self, files: list[str]) -> None:
        for f in files:
            self._add(f)
        self._run()

    def epoch(self, file: str) -> float:
        self._add(file)
        return self._run()


class ForeachBatchMerge(Streaming):
    """What Spark users do today: ``foreachBatch`` aggregating each micro-batch and MERGE-ing it
    into a Delta table through delta-spark (``DeltaTable.merge``)."""

    name = "spark-merge"

    def __init__(self, spark: Any, work: Path) -> None:
        super().__init__(spark, work)
        self.table = str(work / "counts")

    def build(self, files: list[str]) -> None:
        # the initial load is one batch write, as a user would do it; the stream then starts after these files
        (self.spark.read.parquet(*files).groupBy("url").count().write.format("delta").save(self.table))
        for f in files:
            self._add(f)
        q = (
            self._stream()
            .writeStream.foreachBatch(lambda df, i: None)
            .option("checkpointLocation", str(self.ckpt))
            .trigger(availableNow=True)
            .start()
        )  # mark the initial files as done
        q.awaitTermination()

    def _start(self, df: Any) -> Any:
        from delta.tables import DeltaTable

        table, spark = self.table, self.spark

        def merge(batch: Any, batch_id: int) -> None:
            inc = batch.groupBy("url").count()
            (
                DeltaTable.forPath(spark, table)
                .alias("t")
                .merge(inc.alias("s"), "t.url = s.url")
                .whenMatchedUpdate(set={"count": "t.count + s.count"})
                .whenNotMatchedInsert(values={"url": "s.url", "count": "s.count"})
                .execute()
            )

        return (
            df.writeStream.foreachBatch(merge)
            .option("checkpointLocation", str(self.ckpt))
            .trigger(availableNow=True)
            .start()
        )

    def final_state(self) -> Any:
        return self.spark.read.format("delta").load(self.table)


class _StatefulOperator(Streaming):
    """A per-key Python function over Spark's RocksDB state store; every changed count is
    appended to a Parquet sink, so the state is the highest count per URL there."""

    def final_state(self) -> Any:
        return (
            self.spark.read.parquet(str(self.sink))
            .groupBy("url")
            .agg({"count": "max"})
            .withColumnRenamed("max(count)", "count")
        )

    def _operator(self, grouped: Any) -> Any:
        raise NotImplementedError

    def _start(self, df: Any) -> Any:
        out = self._operator(df.groupBy("url"))
        return (
            out.writeStream.format("parquet")
            .outputMode("append")
            .option("path", str(self.sink))
            .option("checkpointLocation", str(self.ckpt))
            .trigger(availableNow=True)
            .start()
        )


def _count_processor() -> Any:
    """The transformWithStateInPandas processor (a class built here so that pyspark imports lazily)."""
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class CountProcessor(StatefulProcessor):
        def init(self, handle: Any) -> None:
            self.count = handle.getValueState("count", StructType([StructField("count", LongType())]))

        def handleInputRows(self, key: Any, rows: Iterator[Any], timerValues: Any) -> Iterator[Any]:
            seen = sum(len(pdf) for pdf in rows)
            old = self.count.get() if self.count.exists() else None
            new = (old[0] if old else 0) + seen
            self.count.update((new,))
            yield pd.DataFrame({"url": [key[0]], "count": [new]})

        def close(self) -> None:
            pass

    return CountProcessor()


class TransformWithStateInPandas(_StatefulOperator):
    """Spark 4's ``transformWithStateInPandas`` (RocksDB state store)."""

    name = "tws-pandas"

    def _operator(self, grouped: Any) -> Any:
        return grouped.transformWithStateInPandas(_count_processor(), "url STRING, count BIGINT", "Append", "None")


def _count_with_state(key: Any, pdfs: Iterator[Any], state: Any) -> Iterator[Any]:
    import pandas as pd

    seen = sum(len(pdf) for pdf in pdfs)
    new = (state.get[0] if state.exists else 0) + seen
    state.update((new,))
    yield pd.DataFrame({"url": [key[0]], "count": [new]})


class ApplyInPandasWithState(_StatefulOperator):
    """``applyInPandasWithState`` (RocksDB state store)."""

    name = "apply-pandas"

    def _operator(self, grouped: Any) -> Any:
        return grouped.applyInPandasWithState(
            _count_with_state, "url STRING, count BIGINT", "count BIGINT", "append", "NoTimeout"
        )


#: Spark settings of the stateful peers: RocksDB state store (with changelog checkpointing, as
#: Spark's documentation recommends), and 4 state partitions like cbp's stage.
STREAMING_CONF = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.shuffle.partitions": "4",
}
