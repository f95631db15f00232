#!/usr/bin/env python
"""TPC-H benchmark of SQL views: per query, cbp's epoch after a 0.1% change against Spark SQL
recomputing the query on the same snapshot.

One command, one process, one local Spark session (cbp's own, ``local[2]``): the 8 tables are
generated with ``tpchgen-cli`` at ``--sf`` and written as Delta tables with change data feed
(``bench/tpch_data.py``); each query that compiles today (``flows/tpch/q*.sql``; the others are
listed with their ``view-unsupported`` reason) gets its own pipeline over the tables. Then:

1. **first build**: each pipeline's first run (sync of the tables it reads + every epoch), against
   one recompute of the query by Spark SQL;
2. per change (**RF1** new orders with their lineitems, **RF2** deleted orders with their
   lineitems, **update** of prices and market segments; each ``--fraction`` of the orders, 0.1% by
   default, as Delta commits): each pipeline's run (the sync of the change data feed and the
   epochs of the view's stages: seconds, input records read, state keys read), the state the
   view's stages hold afterwards (rows, bytes of their state tables' current files, as
   ``cbp explain`` reports them), and Spark SQL's recompute on the same snapshot. The view's
   contents are checked against the recompute's result every time (a difference is marked in the
   table; a query whose first build fails is listed, and the others go on).

Spark SQL reads the snapshot's current Parquet files (the Delta table's ``file_uris()``, as
delta-spark would; no delta-spark jars needed); its time is the best of two runs (the query's
DataFrame built, ``collect()``-ed), so the ratio ``cbp / recompute`` is not flattered.

    .venv/bin/python bench/tpch.py --sf 0.1            # writes bench/out/tpch.{md,json,png}
    .venv/bin/python bench/tpch.py --sf 0.01 --quick   # smoke run
    .venv/bin/python bench/tpch.py --sf 0.1 --queries q1,q3,q12   # only these queries
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tpch_data  # noqa: E402

CHANGES = ("rf1", "rf2", "update")


def verdicts(data: Path, where: Path) -> dict[str, str | None]:
    """Per query: None if it compiles today, else its error (code and message)."""
    from cbp.errors import SpecError
    from cbp.spec import load_spec

    out: dict[str, str | None] = {}
    for q in tpch_data.QUERIES:
        try:
            load_spec(tpch_data.write_pipeline(data, where / q, [q]))
            out[q] = None
        except SpecError as e:
            out[q] = f"[{e.code}] {str(e).split(': ', 1)[-1]}"
    return out


def recompute(spark: Any, data: Path, yaml: Path, q: str) -> tuple[float, list[tuple]]:
    """Spark SQL's best-of-two time of query ``q`` over the tables' current files, and its rows."""
    from deltalake import DeltaTable

    from cbp.views.sqlfiles import read_sql_files

    views = read_sql_files(str(yaml), [f"{q}.sql"], {})
    best, rows = float("inf"), []
    for _ in range(2):
        t0 = time.perf_counter()
        for t in tpch_data.read_tables(yaml, [q]):
            spark.read.parquet(*DeltaTable(str(data / t)).file_uris()).createOrReplaceTempView(t)
        for name, v in views.items():
            df = spark.sql(v.sql)
            df.createOrReplaceTempView(name)
        rows = [tuple(r) for r in df.collect()]
        best = min(best, time.perf_counter() - t0)
    return best, rows


def state_held(yaml: Path, home: Path, q: str) -> tuple[int, int]:
    """Rows and bytes of the state tables' current files of the stages of ``q``'s views."""
    from cbp.commands.explain import explain
    from cbp.views.sqlfiles import read_sql_files

    rows = size = 0
    for view in read_sql_files(str(yaml), [f"{q}.sql"], {}):
        for st in explain(str(yaml), view, str(home))["stages"]:
            if st["state"] is not None:
                rows += st["state"].get("rows") or 0
                size += st["state"].get("bytes") or 0
    return rows, size


def contents(p: Any, q: str) -> list[tuple]:
    cols = list(p.spec.flows[q].schema.fields)
    out: list[tuple] = []
    for r in p.output(q, consolidated=True):
        out += [tuple(r.get(c) for c in cols)] * r.get("_diff", 1)
    return out


def same(got: list[tuple], want: list[tuple]) -> bool:
    def key(row: tuple) -> str:
        return repr([round(v, 6) if isinstance(v, float) else v for v in row])

    return sorted(map(key, got)) == sorted(map(key, want))


def cpu_seconds() -> float:
    """CPU seconds (user + system) of this process and its live descendants (the JVM, Spark's Python
    workers, which are reused between tasks): the machine is shared, so wall time alone misleads."""
    import psutil

    total = 0.0
    for proc in [psutil.Process(), *psutil.Process().children(recursive=True)]:
        try:
            t = proc.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system + t.children_user + t.children_system
    return total


def epoch(p: Any) -> dict[str, Any]:
    """One run of ``p``: wall seconds (of which the sync's), CPU seconds, records read by its epochs,
    state keys read."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    p.sync()
    t1 = time.perf_counter()
    reports = p.run(sync=False)
    return {
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": cpu_seconds() - c0,
        "sync_seconds": t1 - t0,
        "records_in": sum(r.records_in for r in reports),
        "keys_read": sum(r.keys_read for r in reports),
        "epochs": len(reports),
        "load": os.getloadavg()[0],  # the machine's 1-minute load average after the run
    }


def measure(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    import cbp
    from cbp.engine.driver.session import get_spark

    data = out / f"tpch-sf{args.sf}"
    shutil.rmtree(data, ignore_errors=True)
    t0 = time.perf_counter()
    rows = tpch_data.generate(data, args.sf)
    result: dict[str, Any] = {"sf": args.sf, "fraction": args.fraction, "rows": rows}
    result["generate_seconds"] = round(time.perf_counter() - t0, 1)
    result["verdicts"] = verdicts(data, out / "tpch-verdicts")
    queries = [q for q, v in result["verdicts"].items() if v is None and (not args.queries or q in args.queries)]
    spark = get_spark()
    pipes: dict[str, tuple[Any, Path, Path]] = {}
    result["first"], result["changes"] = {}, []
    result["failed"] = {}
    for q in queries:
        home = out / "tpch-homes" / q
        shutil.rmtree(home, ignore_errors=True)
        yaml = tpch_data.write_pipeline(data, out / "tpch-pipelines" / q, [q])
        p = cbp.Pipeline(str(yaml), str(home), spark=spark)
        try:
            run = epoch(p)
        except Exception as e:  # said in the result; the other queries go on
            result["failed"][q] = f"first build: {type(e).__name__}: {e}"[:500]
            print(f"first build {q} FAILED: {e}", flush=True)
            continue
        pipes[q] = (p, yaml, home)
        secs, want = recompute(spark, data, yaml, q)
        ok = same(contents(p, q), want)
        result["first"][q] = {**run, "recompute": secs, "state": state_held(yaml, home, q), "result_rows": len(want)}
        result["first"][q]["same"] = ok
        print(
            f"first build {q}: cbp {run['seconds']:.1f}s, recompute {secs:.1f}s{'' if ok else ' DIFFERS'}", flush=True
        )
        save(out, result)
    refresh = tpch_data.Refresh(data, seed=3, fraction=args.fraction)
    for change in CHANGES:
        orders = getattr(refresh, change)()
        for q, (p, yaml, home) in pipes.items():
            run = epoch(p)
            secs, want = recompute(spark, data, yaml, q)
            row = {"query": q, "change": change, "orders": orders, **run, "recompute": secs}
            row["same"] = same(contents(p, q), want)
            row["state"] = state_held(yaml, home, q)
            result["changes"].append(row)
            flag = "" if row["same"] else " DIFFERS"
            print(f"{change} {q}: cbp {run['seconds']:.2f}s, recompute {secs:.2f}s{flag}", flush=True)
            save(out, result)
    return result


def save(out: Path, result: dict[str, Any]) -> None:
    """The result so far, in ``out/tpch.json`` (a long run killed midway keeps what it measured)."""
    (out / "tpch.json").write_text(json.dumps(result, indent=1, default=str))


def table(result: dict[str, Any]) -> str:
    """The Markdown tables of a result."""
    r = result
    loads = [x["load"] for x in [*r["first"].values(), *r["changes"]] if "load" in x]
    load = f"; load average {min(loads):.0f} to {max(loads):.0f} after the runs" if loads else ""
    lines = [
        f"TPC-H SF {r['sf']} ({r['rows']['lineitem']:,} lineitems, {r['rows']['orders']:,} orders); "
        f"changes of {r['fraction']:.1%} of the orders; {r.get('machine', '')}{load}",
        "",
        "| query | change | cbp run (s) | cbp CPU (s) | of which sync (s) | records read | state keys read "
        "| state held (rows / MB) | Spark SQL recompute (s) | cbp / recompute |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for q, f in r["first"].items():
        rows, size = f["state"]
        lines.append(
            f"| {q} | first build | {f['seconds']:.2f} | {f.get('cpu_seconds', 0):.1f} | {f['sync_seconds']:.2f} | "
            f"{f['records_in']:,} | "
            f"{f['keys_read']:,} | "
            f"{rows:,} / {size / 1e6:.1f} | {f['recompute']:.2f} | **{f['seconds'] / f['recompute']:.2f}×**"
            f"{'' if f.get('same', True) else ' (differs!)'} |"
        )
    for c in r["changes"]:
        rows, size = c["state"]
        lines.append(
            f"| {c['query']} | {c['change']} ({c['orders']} orders) | {c['seconds']:.2f} | "
            f"{c.get('cpu_seconds', 0):.1f} | {c['sync_seconds']:.2f} | "
            f"{c['records_in']:,} | "
            f"{c['keys_read']:,} | {rows:,} / {size / 1e6:.1f} | {c['recompute']:.2f} | "
            f"**{c['seconds'] / c['recompute']:.2f}×**{'' if c.get('same', True) else ' (differs!)'} |"
        )
    if r.get("failed"):
        lines += ["", *[f"- {q} FAILED: {why}" for q, why in r["failed"].items()]]
    lines += ["", "| query | compiles today? |", "|---|---|"]
    lines += [f"| {q} | {'yes' if v is None else v} |" for q, v in r["verdicts"].items()]
    return "\n".join(lines) + "\n"


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    queries = list(result["first"])
    kinds = ["first build", *CHANGES]
    fig, ax = plt.subplots(figsize=(7, 3.6))
    width = 0.8 / len(kinds)
    for i, kind in enumerate(kinds):
        ratios = []
        for q in queries:
            if kind == "first build":
                f = result["first"][q]
            else:
                f = next(c for c in result["changes"] if c["query"] == q and c["change"] == kind)
            ratios.append(f["seconds"] / f["recompute"])
        ax.bar([j + i * width for j in range(len(queries))], ratios, width, label=kind)
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.axhline(0.1, color="green", lw=0.8, ls=":")
    ax.set_yscale("log")
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(queries))], queries)
    ax.set_ylabel("cbp run / Spark SQL recompute")
    ax.set_title(f"TPC-H SF {result['sf']}: cbp's epoch after a {result['fraction']:.1%} change vs a recompute")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--fraction", type=float, default=0.001, help="of the orders per change")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    ap.add_argument("--quick", action="store_true", help="a smoke run: SF 0.01")
    ap.add_argument("--queries", type=lambda s: s.split(","), default=None, help="only these, e.g. q1,q3,q12")
    ap.add_argument("--merge", nargs="+", default=None, help="tpch.json files of runs of other queries: one table")
    args = ap.parse_args(argv)
    if args.merge:
        return report(merged([json.loads(Path(f).read_text()) for f in args.merge]), Path(args.out))
    if args.quick:
        args.sf = 0.01
    os.environ.setdefault("CBP_SPARK_MASTER", "local[2]")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = measure(args, out)
    result["machine"] = f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"
    report(result, out)


def report(result: dict[str, Any], out: Path) -> None:
    """Write ``out/tpch.{json,md,png}`` of ``result`` and print its table."""
    out.mkdir(parents=True, exist_ok=True)
    save(out, result)
    md = table(result)
    (out / "tpch.md").write_text(md)
    plot(result, out / "tpch.png")
    print(md)


def merged(results: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs of different queries on the same data (same ``--sf``, ``--fraction`` and refresh seed) as one
    result: their first builds and changes, in the order of the runs.

    >>> a = {"first": {"q1": {}}, "changes": [{"query": "q1", "change": "rf1"}, {"query": "q1", "change": "rf2"}]}
    >>> b = {"first": {"q3": {}}, "changes": [{"query": "q3", "change": "rf1"}]}
    >>> [(c["query"], c["change"]) for c in merged([a, b])["changes"]]
    [('q1', 'rf1'), ('q3', 'rf1'), ('q1', 'rf2')]
    """
    out = {**results[0], "first": {}, "changes": [], "failed": {}}
    for r in results:
        out["first"].update(r["first"])
        out["changes"] += r["changes"]
        out["failed"].update(r.get("failed", {}))
    order = list(out["first"])
    out["changes"].sort(key=lambda c: (CHANGES.index(c["change"]), order.index(c["query"])))
    return out


if __name__ == "__main__":
    main()
