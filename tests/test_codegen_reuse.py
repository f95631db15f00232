"""Epoch after epoch, a pipeline's Spark plans reuse the classes Spark generated for the previous epoch
(issues 48 and 49): Spark caches whole-stage code by its source text, so a value that differs per epoch
inlined into a plan (an epoch number as an integer literal, a per-epoch alias) would compile new code,
and give HotSpot new methods to compile, on every epoch. Counted with Spark's own metric
(``CodegenMetrics``: one histogram update per compilation, none for a cache hit) in the session's JVM."""

from __future__ import annotations

import random

import pandas as pd
import pytest
from conftest import FLOWS

import cbp

pytestmark = pytest.mark.classic(reason="reads Spark's CodegenMetrics in the driver's JVM (py4j)")


def _compilations(spark) -> int:
    """Whole-stage and expression classes Spark compiled in this JVM so far (cache hits not counted)."""
    metrics = spark.sparkContext._jvm.org.apache.spark.metrics.source.CodegenMetrics
    return int(metrics.METRIC_COMPILATION_TIME().getCount())


def test_the_metric_counts_a_new_literal(spark):
    """The metric the test below reads moves when a plan's code is new (else that test could not fail)."""
    n = random.randrange(10**6, 10**9)  # an integer literal is inlined into the generated source
    before = _compilations(spark)
    spark.range(3).selectExpr(f"id * {n} AS x").collect()
    assert _compilations(spark) > before


def test_shuffle_path_epochs_compile_no_new_code(spark, tmp_path):
    """URLCount's epochs on the shuffle path (a scan of the epoch's files, Spark's routing and shuffle):
    after the first epoch (which compiles each class twice in local mode: Spark 4's cache is keyed by the
    thread's class loader, the driver's and the executor task's), the next compiles nothing; the counts
    equal pandas' over every URL fed."""
    p = cbp.Pipeline(str(FLOWS / "url_count.yaml"), str(tmp_path / "home"), spark=spark, small_epoch_records=0)
    fed: list[str] = []
    compiled = []
    for e in range(2):
        urls = [f"u{(e * 7 + i) % 23}" for i in range(40)] + [f"n{e}-{i}" for i in range(5)]
        fed += urls
        p.feed("urls", [{"url": u} for u in urls])
        before = _compilations(spark)
        p.run()
        compiled.append(_compilations(spark) - before)
    assert compiled[1] == 0, compiled
    counts = {r["url"]: r["count"] for r in p.state("url_count")}
    want = pd.Series(fed).value_counts().to_dict()
    assert counts == want
