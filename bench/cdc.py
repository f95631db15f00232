#!/usr/bin/env python
"""CDC benchmark: per-customer order totals kept fresh from a Delta table that changes, three ways.

A source Delta table of ``--rows`` orders (``order_id``, ``customer``, ``amount``; change data feed
on) changes by ``--change`` of its rows per version: updates (a new amount and often another
customer: rows move between groups), deletes and inserts, in equal thirds, one delta-rs MERGE per
version. The changes are generated once (fixed seed); then each system, in its own Python process
(a fresh JVM), on its own copy of the table, builds the totals (unmeasured), and for each version
the parent's change is applied to the copy (delta-rs, unmeasured) and the system brings its totals
up to date (measured: seconds and CPU-seconds of the whole process tree, JVM and Python workers
included). The first version is a warm-up, left out of the medians. At the end every system's
totals must equal a pandas groupby of the table's current rows.

Systems:

- ``cbp``: ``flows/orders.yaml`` on the table (``source: {delta: ...}``): ``Pipeline.run()``, which
  syncs the version (its change data feed as signed records) and runs the epoch;
- ``cdf-merge``: Structured Streaming ``readChangeFeed`` from the table, ``foreachBatch`` aggregating
  the signed changes per customer and MERGE-ing them into a Delta table with delta-spark
  (``availableNow`` per version; seconds are the micro-batch's ``triggerExecution``);
- ``recompute``: a full recompute with Spark SQL (``GROUP BY customer`` over the table, written
  over a Delta table).

    .venv/bin/python bench/cdc.py                      # 1M rows, 1% per version, 1 + 10 versions
    .venv/bin/python bench/cdc.py --quick              # smoke run: 20k rows, 1 + 3 versions

Output: ``bench/out/cdc.md`` (table), ``bench/out/cdc.json``, ``bench/out/cdc.png``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(ROOT))

SYSTEMS = ("cbp", "cdf-merge", "recompute")
LABELS = {
    "cbp": "cbp (sync + epoch)",
    "cdf-merge": "readChangeFeed + foreachBatch + MERGE",
    "recompute": "full recompute (Spark SQL)",
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------- the data
def make_data(args: argparse.Namespace, where: Path) -> dict[str, Any]:
    """The base table (version 0) and one Parquet file of changes per later version (``op``: U, D, I)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import write_deltalake

    rng = np.random.default_rng(7)
    n, customers = args.rows, max(1, args.rows // 20)
    base = where / "source"
    ids = np.arange(n, dtype=np.int64)
    cust = rng.integers(0, customers, n)
    amount = rng.integers(1, 1000, n).astype(np.float64)  # whole amounts: every sum is exact
    write_deltalake(
        str(base),
        pa.table({"order_id": ids, "customer": pa.array([f"c{c:06d}" for c in cust]), "amount": amount}),
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    live = set(range(n))
    next_id = n
    changes = []
    per = max(3, int(n * args.change))
    for v in range(args.versions + 1):
        pool = np.fromiter(live, dtype=np.int64)
        picked = rng.choice(pool, size=2 * (per // 3), replace=False)
        upd, dele = picked[: per // 3], picked[per // 3 :]
        ins = np.arange(next_id, next_id + per // 3, dtype=np.int64)
        next_id += len(ins)
        live.difference_update(dele.tolist())
        live.update(ins.tolist())
        k = len(upd) + len(dele) + len(ins)
        t = pa.table(
            {
                "order_id": np.concatenate([upd, dele, ins]),
                "customer": pa.array([f"c{c:06d}" for c in rng.integers(0, customers, k)]),
                "amount": rng.integers(1, 1000, k).astype(np.float64),
                "op": pa.array(["U"] * len(upd) + ["D"] * len(dele) + ["I"] * len(ins)),
            }
        )
        f = where / f"change-{v:03d}.parquet"
        pq.write_table(t, f)
        changes.append(str(f))
    return {"base": str(base), "changes": changes}


def apply_change(table: str, change: str) -> None:
    """One version of the source table: a delta-rs MERGE of updates, deletes and inserts."""
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    src = pq.read_table(change)
    (
        DeltaTable(table)
        .merge(src, predicate="t.order_id = s.order_id", source_alias="s", target_alias="t")
        .when_matched_delete(predicate="s.op = 'D'")
        .when_matched_update(updates={"customer": "s.customer", "amount": "s.amount"}, predicate="s.op = 'U'")
        .when_not_matched_insert(
            updates={"order_id": "s.order_id", "customer": "s.customer", "amount": "s.amount"}, predicate="s.op = 'I'"
        )
        .execute()
    )


def expected(table: str) -> dict[str, tuple[int, float]]:
    """From scratch: a pandas groupby of the table's current rows."""
    from deltalake import DeltaTable

    df = DeltaTable(table).to_pandas()
    g = df.groupby("customer")["amount"].agg(["count", "sum"])
    return {c: (int(r["count"]), float(r["sum"])) for c, r in g.iterrows()}


# ---------------------------------------------------------------------------------- the systems
class Cbp:
    def __init__(self, spark: Any, work: Path, table: str) -> None:
        import yaml

        import cbp

        spec = yaml.safe_load((ROOT / "flows" / "orders.yaml").read_text())
        spec["flows"]["orders"]["source"] = {"delta": table}
        spec["stages"]["customer_totals"]["translator"] = "orders:customer_totals"
        y = work / "orders.yaml"  # its translator, flows/orders.py, is imported from PYTHONPATH (run_child)
        y.write_text(yaml.safe_dump(spec))
        self.yaml = y
        self.pipe = cbp.load(y, home=str(work / "home"), spark=spark)

    def build(self) -> None:
        self.pipe.run()

    def step(self) -> float | None:
        reports = self.pipe.run()
        if len(reports) != 1:
            raise RuntimeError(f"cbp: expected one epoch per version, got {len(reports)}")
        return None

    def totals(self) -> dict[str, tuple[int, float]]:
        return {r["customer"]: (int(r["orders"]), float(r["total"])) for r in self.pipe.state("customer_totals")}

    def close(self) -> None:
        pass


class CdfMerge:
    def __init__(self, spark: Any, work: Path, table: str) -> None:
        self.spark, self.table, self.target, self.ckpt = spark, table, str(work / "totals"), str(work / "checkpoint")

    def build(self) -> None:
        from deltalake import DeltaTable

        self.start = DeltaTable(self.table).version() + 1
        (
            self.spark.read.format("delta")
            .load(self.table)
            .groupBy("customer")
            .agg({"*": "count", "amount": "sum"})
            .withColumnRenamed("count(1)", "orders")
            .withColumnRenamed("sum(amount)", "total")
            .write.format("delta")
            .save(self.target)
        )

    def step(self) -> float | None:
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        spark, target = self.spark, self.target

        def merge(batch: Any, batch_id: int) -> None:
            sign = F.when(F.col("_change_type").isin("insert", "update_postimage"), 1).otherwise(-1)
            inc = (
                batch.withColumn("_s", sign)
                .groupBy("customer")
                .agg(F.sum("_s").alias("dn"), F.sum(F.col("_s") * F.col("amount")).alias("dt"))
            )
            (
                DeltaTable.forPath(spark, target)
                .alias("t")
                .merge(inc.alias("s"), "t.customer = s.customer")
                .whenMatchedDelete(condition="t.orders + s.dn = 0")
                .whenMatchedUpdate(set={"orders": "t.orders + s.dn", "total": "t.total + s.dt"})
                .whenNotMatchedInsert(values={"customer": "s.customer", "orders": "s.dn", "total": "s.dt"})
                .execute()
            )

        q = (
            spark.readStream.format("delta")
            .option("readChangeFeed", "true")
            .option("startingVersion", self.start)
            .load(self.table)
            .writeStream.foreachBatch(merge)
            .option("checkpointLocation", self.ckpt)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        if q.exception() is not None:
            raise RuntimeError(f"cdf-merge: {q.exception()}")
        batches = [p for p in q.recentProgress if p.numInputRows > 0]
        return sum(p.durationMs.get("triggerExecution", 0) for p in batches) / 1000.0

    def totals(self) -> dict[str, tuple[int, float]]:
        return {
            r["customer"]: (int(r["orders"]), float(r["total"]))
            for r in self.spark.read.format("delta").load(self.target).collect()
            if r["orders"] != 0
        }

    def close(self) -> None:
        pass


class Recompute(CdfMerge):
    def build(self) -> None:
        self.step()

    def step(self) -> float | None:
        self.spark.sql(
            f"SELECT customer, count(*) AS orders, sum(amount) AS total FROM delta.`{self.table}` GROUP BY customer"
        ).write.format("delta").mode("overwrite").save(self.target)
        return None


# ---------------------------------------------------------------------------------- one system, in a child process
def tree_cpu() -> float:
    """CPU-seconds (user + system) of this process and its living descendants (JVM, Python workers)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            c = p.cpu_times()
            total += c.user + c.system
        except psutil.Error:
            pass
    return total


def child(spec_path: str, result_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text())
    name, work = spec["system"], Path(spec["work"])
    work.mkdir(parents=True, exist_ok=True)
    table = str(work / "source")
    shutil.copytree(spec["data"]["base"], table)
    from cbp.engine.driver.session import get_spark

    spark = get_spark(
        conf={} if name == "cbp" else {"spark.sql.adaptive.enabled": "true", "spark.sql.shuffle.partitions": "4"}
    )
    sysm: Any = {"cbp": Cbp, "cdf-merge": CdfMerge, "recompute": Recompute}[name](spark, work, table)
    res: dict[str, Any] = {"system": name, "steps": []}
    t0 = time.perf_counter()
    sysm.build()
    res["build"] = time.perf_counter() - t0
    log(f"{name}: built in {res['build']:.1f}s")
    for j, change in enumerate(spec["data"]["changes"]):
        apply_change(table, change)
        c0, t0 = tree_cpu(), time.perf_counter()
        inner = sysm.step()
        wall, cpu = time.perf_counter() - t0, tree_cpu() - c0
        res["steps"].append({"seconds": inner if inner is not None else wall, "wall": wall, "cpu": cpu})
        log(
            f"{name}: {'warm-up' if j == 0 else f'version {j}'} {res['steps'][-1]['seconds']:.2f}s (wall {wall:.2f}s, "
            f"cpu {cpu:.2f}s)"
        )
    want, got = expected(table), sysm.totals()
    res["correct"] = want == got
    if not res["correct"]:
        bad = sorted(set(want) ^ set(got)) + sorted(k for k in set(want) & set(got) if want[k] != got[k])
        res["mismatch"] = [[k, want.get(k), got.get(k)] for k in bad[:5]]
        log(f"{name}: WRONG totals, e.g. {res['mismatch']}")
    sysm.close()
    Path(result_path).write_text(json.dumps(res))
    return 0


def run_child(system: str, work: Path, data: dict[str, Any], timeout_min: float) -> dict[str, Any]:
    spec_f, res_f = work / f"{system}.spec.json", work / f"{system}.result.json"
    spec_f.write_text(json.dumps({"system": system, "work": str(work / system), "data": data}))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "flows"), os.environ.get("PYTHONPATH", "")]).rstrip(
            os.pathsep
        ),
    }
    proc = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--child", str(spec_f), "--result", str(res_f)],
        cwd=str(ROOT),
        env=env,
        start_new_session=True,
    )
    try:
        rc = proc.wait(timeout=timeout_min * 60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        return {"system": system, "failed": f"timeout after {timeout_min:g} min"}
    finally:
        shutil.rmtree(work / system, ignore_errors=True)
    if rc != 0 or not res_f.exists():
        return {"system": system, "failed": f"exit code {rc}"}
    res = json.loads(res_f.read_text())
    measured = res["steps"][1:] or res["steps"]
    res["median"] = statistics.median(s["seconds"] for s in measured)
    res["median_wall"] = statistics.median(s["wall"] for s in measured)
    res["median_cpu"] = statistics.median(s["cpu"] for s in measured)
    return res


# ---------------------------------------------------------------------------------- report
def report(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    per = max(3, int(args.rows * args.change))
    lines = [
        "# CDC benchmark: per-customer totals from a changing Delta table",
        "",
        f"{args.rows:,} source rows, {args.rows // 20:,} customers, {per:,} rows changed per version "
        f"(updates, deletes, inserts in thirds), {args.versions} measured versions after one warm-up; "
        f"{platform.node()}, {os.cpu_count()} cores, {_dt.date.today()}.",
        "",
        "| system | build s | median s / version | min | max | median wall s | median CPU-s / version | totals = "
        "pandas |",
        "|---|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in results:
        if "failed" in r:
            lines.append(f"| {LABELS[r['system']]} | {r['failed']} | | | | | | |")
            continue
        xs = [s["seconds"] for s in (r["steps"][1:] or r["steps"])]
        lines.append(
            f"| {LABELS[r['system']]} | {r['build']:.1f} | {r['median']:.2f} | {min(xs):.2f} | {max(xs):.2f} | "
            f"{r['median_wall']:.2f} | {r['median_cpu']:.2f} | {'yes' if r['correct'] else 'NO'} |"
        )
    by = {r["system"]: r for r in results if "failed" not in r}
    if "cbp" in by and "cdf-merge" in by:
        ratio = by["cbp"]["median"] / by["cdf-merge"]["median"]
        lines += [
            "",
            f"cbp's median latency per version is {ratio:.2f}x that of readChangeFeed + foreachBatch + MERGE "
            f"(goal: at most 0.2x): {'met' if ratio <= 0.2 else 'NOT met'}; CPU-seconds "
            f"{by['cbp']['median_cpu'] / max(by['cdf-merge']['median_cpu'], 1e-9):.2f}x.",
        ]
    lines += [
        "",
        "Seconds per version: cbp and the recompute, the wall time of the call (`Pipeline.run()`: sync and epoch; "
        "the Spark SQL job); the streaming query, its micro-batch's `triggerExecution` (without the query's start, as "
        "a "
        "query that runs for months would). Wall and CPU-seconds cover the whole call for all three, CPU of the "
        "process tree (driver, JVM, Python workers).",
    ]
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4))
    for r in results:
        if "failed" in r:
            continue
        xs = list(range(1, len(r["steps"])))
        a.plot(xs, [s["seconds"] for s in r["steps"][1:]], marker="o", label=LABELS[r["system"]])
        b.plot(xs, [s["cpu"] for s in r["steps"][1:]], marker="o", label=LABELS[r["system"]])
    a.set(xlabel="version", ylabel="seconds", title="latency per source version")
    b.set(xlabel="version", ylabel="CPU-seconds", title="CPU per source version")
    a.set_ylim(bottom=0)
    b.set_ylim(bottom=0)
    a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--change", type=float, default=0.01, help="fraction of the rows changed per version")
    ap.add_argument("--versions", type=int, default=10, help="measured versions (after one warm-up)")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--timeout-min", type=float, default=60)
    ap.add_argument("--quick", action="store_true", help="20k rows, 3 versions")
    ap.add_argument("--child")
    ap.add_argument("--result")
    args = ap.parse_args(argv)
    if args.child:
        return child(args.child, args.result)
    if args.quick:
        args.rows, args.versions = 20_000, 3
    OUT.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cbp-cdc-"))
    try:
        log(f"writing the source table ({args.rows:,} rows) and {args.versions + 1} versions of changes in {work}")
        data = make_data(args, work)
        results = []
        for s in args.systems.split(","):
            log(f"running {s}")
            results.append(run_child(s, work, data, args.timeout_min))
        text = report(results, args)
        (OUT / "cdc.md").write_text(text)
        (OUT / "cdc.json").write_text(json.dumps({"args": vars(args), "results": results}, indent=1))
        plot(results, OUT / "cdc.png")
        print(text)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
