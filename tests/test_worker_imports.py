"""Inside real Spark tasks: after a stage epoch has run (tasks that unpickled the driver's shipped
functions and task plan, and ran the translator), the Python workers hold the engine's task side
and what it needs, never the controller, the engine's driver side, the pipeline, the command line,
Airflow or the crawl application (tests/test_imports.py checks the same in a fresh interpreter)."""

from __future__ import annotations

import sys

import pytest
from conftest import WORD_COUNT, WORD_COUNT_MODULE

import cbp

#: What no Python worker of a cbp task loads.
NEVER = ("cbp.controller", "cbp.engine.driver", "cbp.pipeline", "cbp.cli", "cbp.commands", "cbp.airflow", "cbp_crawl")


def _loaded(_rows):
    import os
    import sys

    yield (os.getpid(), sorted(m for m in sys.modules if m == "cbp" or m.startswith(("cbp.", "cbp_crawl"))))


@pytest.mark.classic(reason="reaches every Python worker with an RDD job (parallelize): Connect has no RDDs")
def test_spark_workers_of_an_epoch_load_the_task_side_only(spark, make_pipeline, tmp_path):
    from pyspark import cloudpickle

    p = cbp.Pipeline(str(make_pipeline(WORD_COUNT, WORD_COUNT_MODULE)), str(tmp_path / "home"))
    p.feed("words", [{"w": w} for w in "a b a c b a".split()])
    p.run()
    assert {r["w"]: r["n"] for r in p.state("count")} == {"a": 3, "b": 2, "c": 1}  # from scratch: the counts
    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # _loaded runs in the workers as it is here
    try:
        seen = dict(spark.sparkContext.parallelize(range(8), 8).mapPartitions(_loaded).collect())
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    task_workers = {pid: mods for pid, mods in seen.items() if "cbp.engine.task.translate" in mods}
    assert task_workers, "no worker that ran the epoch's tasks was reached"
    print({pid: len(mods) for pid, mods in task_workers.items()}, "cbp modules in the workers that ran tasks")
    # The session's Python workers are reused across tests: one that ran a crawl pipeline's tasks
    # (its translators import cbp_crawl, as the driver did to load them) keeps the crawl modules.
    never = NEVER if "cbp_crawl" not in sys.modules else tuple(n for n in NEVER if n != "cbp_crawl")
    wrong = {m for mods in seen.values() for m in mods if m.startswith(never)}
    assert wrong == set()
