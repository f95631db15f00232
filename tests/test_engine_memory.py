"""Memory-bounded tasks: a stage epoch whose one partition receives far more input than its
Python worker may hold completes with correct results (tasks stream their input key group by key
group and write state and outputs in chunks).

It runs in a subprocess, because the Python workers' memory limit is a setting of the
SparkSession (``CBP_SPARK_CONF``), and the test suite shares one session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PIPE = """
pipeline: memory
flows:
  docs: {external: true, schema: {id: int, text: string}}
  counts: {schema: {k: string, n: int}}
stages:
  count:
    translator: memmod:count
    partitions: 1
    inputs: [{flow: docs, route_by: "memmod:route"}]
    state: {schema: {k: string, n: int}}
    outputs: [counts]
"""
MODULE = """
ROUTES = 60

def route(doc):  # each document goes to 60 keys: the shuffle multiplies the input 60 times
    return [f"k{(doc['id'] * 61 + j * 7919) % 100000}" for j in range(ROUTES)]

def count(key, state, docs, out):
    prev = next(state, None)
    n = sum(1 for _ in docs) + (prev["n"] if prev else 0)
    out.state.write({"k": key, "n": n})
    out.counts.write({"k": key, "n": n})
"""
CHILD = """
import json, os, sys
from collections import Counter

import cbp
from cbp.engine.driver.session import get_spark

work, n_docs, text_len = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
sys.path.insert(0, work)
from memmod import route


def python_workers_peak_kb():
    # the peak RSS (VmHWM) of the Python processes below this one: Spark's Python workers
    procs = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = dict(line.split(":", 1) for line in open(f"/proc/{pid}/status").read().splitlines() if ":" in line)
            exe = open(f"/proc/{pid}/cmdline").read().split("\\0")[0].rsplit("/", 1)[-1]
        except OSError:
            continue
        procs[int(pid)] = (int(status["PPid"]), int(status.get("VmHWM", "0 kB").split()[0]), exe)
    mine, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {p for p, (parent, _, _) in procs.items() if parent in frontier} - mine
        mine |= frontier
    return max((procs[p][1] for p in mine if "python" in procs[p][2]), default=0)


p = cbp.load(os.path.join(work, "pipe.yaml"), home=os.path.join(work, "home"), spark=get_spark())
docs = [{"id": i, "text": (f"{i:08d}" * (text_len // 8 + 1))[:text_len]} for i in range(n_docs)]
p.feed("docs", docs)
want = Counter(k for d in docs for k in set(route(d)))
del docs
[rep] = p.run()
got = {r["k"]: r["n"] for r in p.state("count")}
out = {r["k"]: r["n"] for r in p.output("counts", epoch=1)}
print("RESULT " + json.dumps({
    "records_in": rep.records_in, "input_mb": sum(want.values()) * (text_len + 30) / 2**20,
    "worker_peak_mb": python_workers_peak_kb() / 1024, "state_ok": got == dict(want), "outputs_ok": out == dict(want),
}), flush=True)
"""


@pytest.mark.classic(
    reason="limits its own driver's Python workers (spark.executor.pyspark.memory, a static setting) and reads "
    "their peak RSS below its process: on Connect the workers are the server's (its results are right there)"
)
def test_partition_input_far_larger_than_the_python_workers_memory(tmp_path):
    """1.2M records of ~1 KB (1.2 GB of input, all in one partition) through Python workers limited
    to 1 GB of address space (``spark.executor.pyspark.memory``; a worker that has imported
    pyarrow and cbp already maps about 560 MB of it): the epoch completes, its state and outputs
    are the from-scratch counts, and the workers' peak RSS stays well below the input."""
    (tmp_path / "pipe.yaml").write_text(textwrap.dedent(PIPE))
    (tmp_path / "memmod.py").write_text(textwrap.dedent(MODULE))
    (tmp_path / "child.py").write_text(textwrap.dedent(CHILD))
    env = {
        **os.environ,
        "CBP_SPARK_MASTER": "local[2,1]",
        "CBP_DRIVER_MEMORY": "2g",
        "CBP_SPARK_CONF": "spark.executor.pyspark.memory=1g",
        "PYTHONPATH": str(ROOT),
        "PYSPARK_PYTHON": sys.executable,
    }
    n_docs, text_len = 20000, 1000
    r = subprocess.run(
        [sys.executable, str(tmp_path / "child.py"), str(tmp_path), str(n_docs), str(text_len)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")]
    assert r.returncode == 0 and lines, r.stderr[-4000:]
    res = json.loads(lines[-1][len("RESULT ") :])
    assert res["records_in"] == n_docs * 60
    assert res["state_ok"] and res["outputs_ok"], res
    assert res["input_mb"] > 1100
    assert 0 < res["worker_peak_mb"] < res["input_mb"] / 2, res  # measured: ~340 MB (4.2 GB before streaming)


@pytest.mark.classic(reason="compares an RDD job's Python workers with a SQL job's: Connect has no RDDs")
def test_rdd_and_sql_jobs_share_one_pool_of_python_workers(spark):
    """A small epoch runs its tasks through ``mapPartitions``, a large one through ``mapInArrow``;
    both must land in the same Python workers (one pool), or each worker of each pool holds its
    own state and index caches: twice the memory ``state_cache_mb`` + ``state_index_mb`` allow."""
    import pyarrow as pa

    def daemon_rdd(it):
        yield os.getppid()

    def daemon_sql(batches):
        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"p": [os.getppid()]})

    rdd = set(spark.sparkContext.parallelize(range(4), 2).mapPartitions(daemon_rdd).collect())
    sql = {r.p for r in spark.range(4).repartition(2).mapInArrow(daemon_sql, "p long").collect()}
    assert rdd == sql and len(rdd) == 1


@pytest.mark.classic(reason="reads its Python workers' parent through an RDD job: Connect has no RDDs")
def test_python_workers_are_forked_by_cbps_daemon_with_the_task_side_imported(spark):
    """Spark forks each Python worker from ``cbp.engine.task.daemon`` (``spark.python.daemon.module``),
    which imported cbp's task side once: a fresh worker (one whose task failed is never reused) starts with it."""

    def seen(it):
        import sys

        with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
            parent = f.read().replace(b"\0", b" ").decode()
        yield parent, "cbp.engine.task.arrowtasks" in sys.modules

    [(parent, imported)] = set(spark.sparkContext.parallelize(range(2), 1).mapPartitions(seen).collect())
    assert "cbp.engine.task.daemon" in parent and imported
