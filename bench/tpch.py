#!/usr/bin/env python
"""TPC-H benchmark of SQL views: per query, cbp's epoch after a 0.1% change against Spark SQL
recomputing the query on the same snapshot and against the query as a Spark Declarative Pipelines view.

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

The **SDP column** (``--no-sdp`` leaves it out; ``bench/tpch_sdp.py``): after the first build and after
each change, the same query (``flows/tpch/QUERY.sql`` as it is) as a Spark Declarative Pipelines
materialized view over the same snapshot's files, refreshed with ``spark-pipelines run`` against one Spark
Connect server this process starts and stops: the refresh's seconds from the pipeline's event log (the
flow's RUNNING to COMPLETED), the CLI's wall time and the CPU of the CLI and the server; the view's rows
are checked against the recompute's too.

    .venv/bin/python bench/tpch.py --sf 0.1            # writes bench/out/tpch.{md,json,png}
    .venv/bin/python bench/tpch.py --sf 0.01 --quick   # smoke run
    .venv/bin/python bench/tpch.py --sf 0.1 --queries q1,q3,q12   # only these queries
    .venv/bin/python bench/tpch.py --sf 1 --queries q1,q6 --no-sdp   # without the SDP column

To profile the runs after the changes without building again: ``--keep`` copies the tables, the pipelines
and their homes as the first builds left them to ``OUT/kept``; a later ``--reuse`` (same ``--out``,
``--sf`` and ``--queries``) puts that copy back where it was and goes straight to the changes (the same
changes: the refresh's seed is fixed). ``--profile`` writes each first build's and change run's cProfile
on a CPU clock (``time.process_time``: the driver's own CPU, not the JVM's) to ``OUT/prof/QUERY-first.pstats``
and ``OUT/prof/QUERY-CHANGE.pstats``; every row also has the Spark jobs its run started (``spark_jobs``,
from the status tracker).

    .venv/bin/python bench/tpch.py --sf 0.1 --queries q14,q4 --no-sdp --keep
    .venv/bin/python bench/tpch.py --sf 0.1 --queries q14,q4 --no-sdp --reuse --profile

``--tables OUT/kept/tpch-sfSF`` (of an earlier ``--keep`` run at the same ``--sf``) copies the tables that run
generated, as they were before its changes, instead of generating them again (SF 1's generation is minutes):
runs of other queries on the same data, and the same changes, for ``--merge``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tpch_data  # noqa: E402
import tpch_sdp  # noqa: E402
import treecpu  # noqa: E402

CHANGES = ("rf1", "rf2", "update")
#: process groups whose CPU is not cbp's (the SDP arm's Spark Connect server, a child of this process)
OTHER_GROUPS: set[int] = set()
_METER: treecpu.TreeCPU | None = None


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


def recompute(spark: Any, data: Path, yaml: Path, q: str) -> tuple[float, list[tuple], float]:
    """Spark SQL's best-of-two time of query ``q`` over the tables' current files, its rows, and the CPU
    seconds of that best run (the process tree's: the JVM does the work)."""
    from deltalake import DeltaTable

    from cbp.views.sqlfiles import read_sql_files

    views = read_sql_files(str(yaml), [f"{q}.sql"], {})
    best, cpu, rows = float("inf"), 0.0, []
    for _ in range(2):
        t0, c0 = time.perf_counter(), cpu_seconds()
        for t in tpch_data.read_tables(yaml, [q]):
            spark.read.parquet(*DeltaTable(str(data / t)).file_uris()).createOrReplaceTempView(t)
        for name, v in views.items():
            df = spark.sql(v.sql)
            df.createOrReplaceTempView(name)
        rows = [tuple(r) for r in df.collect()]
        if time.perf_counter() - t0 < best:
            best, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    return best, rows, cpu


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
    """CPU seconds (user + system) of this process and its descendants (the JVM, Spark's Python workers),
    those that exited included (:mod:`treecpu`), not the SDP arm's server: the machine is shared, so wall
    time alone misleads."""
    global _METER
    if _METER is None:
        _METER = treecpu.TreeCPU(os.getpid(), skip=treecpu.pgid_in(OTHER_GROUPS))
    return _METER.total()


def spark_jobs() -> int:
    """The Spark jobs the running SparkContext has run so far (as many as its status tracker keeps: 1,000)."""
    from pyspark import SparkContext

    sc = SparkContext._active_spark_context
    return len(sc.statusTracker().getJobIdsForGroup(None)) if sc is not None else 0


def epoch(p: Any, profile: Path | None = None) -> dict[str, Any]:
    """One run of ``p``: wall seconds (of which the sync's), CPU seconds, records read by its epochs,
    state keys read, Spark jobs started; with ``profile``, the run's cProfile on a CPU clock is written there."""
    import cProfile

    prof = cProfile.Profile(time.process_time) if profile else None
    jobs0 = spark_jobs()
    t0, c0 = time.perf_counter(), cpu_seconds()
    if prof:
        prof.enable()
    p.sync()
    t1 = time.perf_counter()
    reports = p.run(sync=False)
    if prof:
        prof.disable()
        profile.parent.mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(profile))
    return {
        "spark_jobs": spark_jobs() - jobs0,
        "seconds": time.perf_counter() - t0,
        "cpu_seconds": cpu_seconds() - c0,
        "sync_seconds": t1 - t0,
        "records_in": sum(r.records_in for r in reports),
        "keys_read": sum(r.keys_read for r in reports),
        "row_groups_read": sum(r.row_groups_read for r in reports),
        "rows_decoded": sum(getattr(r, "rows_decoded", 0) for r in reports),  # 0: a cbp before it was counted
        "epochs": len(reports),
        "per_epoch": [  # what each stage epoch read: records, state keys, state row groups and their rows
            [r.stage, r.records_in, r.keys_read, r.row_groups_read, getattr(r, "rows_decoded", 0), round(r.seconds, 3)]
            for r in reports
        ],
        "load": os.getloadavg()[0],  # the machine's 1-minute load average after the run
    }


def measure(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    from cbp.engine.driver.session import get_spark

    data = out / f"tpch-sf{args.sf}"
    kept = [data, out / "tpch-homes", out / "tpch-pipelines"]
    t0 = time.perf_counter()
    if args.reuse:
        rows = restore(out, kept)
    elif args.tables:
        rows = copy_tables(Path(args.tables), data)
    else:
        shutil.rmtree(data, ignore_errors=True)
        rows = tpch_data.generate(data, args.sf)
    result: dict[str, Any] = {"sf": args.sf, "fraction": args.fraction, "rows": rows, "sdp": args.sdp}
    result["generate_seconds"] = round(time.perf_counter() - t0, 1)
    result["verdicts"] = verdicts(data, out / "tpch-verdicts")
    queries = [q for q, v in result["verdicts"].items() if v is None and (not args.queries or q in args.queries)]
    result["profile"] = str(out / "prof") if args.profile else None
    spark = get_spark()
    shutil.rmtree(out / "tpch-sdp", ignore_errors=True)  # the server's warehouse, the queries' SDP projects
    server = tpch_sdp.Server(out / "tpch-sdp") if args.sdp else None
    try:
        if server is not None:
            server.start()
            OTHER_GROUPS.add(server.proc.pid)  # a session of its own: its pid is its group's
        if args.reuse:
            pipes = reopened(spark, data, out, queries, result)
        else:
            pipes = first_builds(spark, server, data, out, queries, result)
        if args.keep:
            keep(out, kept, rows)
        change_runs(spark, server, data, out, pipes, args.fraction, result)
    finally:
        if server is not None:
            server.stop()
    return result


def keep(out: Path, paths: list[Path], rows: dict[str, int]) -> None:
    """Copy ``paths`` (the tables, pipelines and homes as the first builds left them) to ``out/kept``."""
    dest = out / "kept"
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for path in paths:
        shutil.copytree(path, dest / path.name, symlinks=True)
    (dest / "rows.json").write_text(json.dumps(rows))


def copy_tables(src: Path, data: Path) -> dict[str, int]:
    """Copy the tables a ``--keep`` run generated (``OUT/kept/tpch-sfSF``, as they were before its changes) to
    ``data`` instead of generating them again; their row counts are its ``rows.json``."""
    if not (src.parent / "rows.json").exists():
        raise SystemExit(f"--tables: no rows.json beside {src} (give a --keep run's OUT/kept/tpch-sfSF)")
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(src, data, symlinks=True)
    rows: dict[str, int] = json.loads((src.parent / "rows.json").read_text())
    return rows


def restore(out: Path, paths: list[Path]) -> dict[str, int]:
    """Put ``out/kept``'s copies back at ``paths`` (where they were: paths in the homes are absolute)."""
    src = out / "kept"
    if not (src / "rows.json").exists():
        raise SystemExit(f"--reuse: nothing kept in {src} (run with --keep first)")
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(src / path.name, path, symlinks=True)
    rows: dict[str, int] = json.loads((src / "rows.json").read_text())
    return rows


def reopened(spark: Any, data: Path, out: Path, queries: list[str], result: dict[str, Any]) -> dict[str, Any]:
    """The kept pipelines of ``queries``, opened on their restored homes (no first build measured)."""
    import cbp

    result["first"], result["changes"], result["failed"] = {}, [], {}
    pipes: dict[str, tuple[Any, Path, Path]] = {}
    for q in queries:
        home, yaml = out / "tpch-homes" / q, out / "tpch-pipelines" / q / "tpch.yaml"
        if not home.exists():
            raise SystemExit(f"--reuse: {q} was not kept (its home {home} is missing)")
        pipes[q] = (cbp.Pipeline(str(yaml), str(home), spark=spark), yaml, home)
    return pipes


def first_builds(
    spark: Any, server: Any, data: Path, out: Path, queries: list[str], result: dict[str, Any]
) -> dict[str, tuple[Any, Path, Path]]:
    """Each query's pipeline built (its first run), against a recompute and the SDP view's first run."""
    import cbp

    pipes: dict[str, tuple[Any, Path, Path]] = {}
    result["first"], result["changes"], result["failed"] = {}, [], {}
    for q in queries:
        home = out / "tpch-homes" / q
        shutil.rmtree(home, ignore_errors=True)
        yaml = tpch_data.write_pipeline(data, out / "tpch-pipelines" / q, [q])
        p = cbp.Pipeline(str(yaml), str(home), spark=spark)
        try:
            run = epoch(p, Path(result["profile"]) / f"{q}-first.pstats" if result.get("profile") else None)
        except Exception as e:  # said in the result; the other queries go on
            result["failed"][q] = f"first build: {type(e).__name__}: {e}"[:500]
            print(f"first build {q} FAILED: {e}", flush=True)
            continue
        pipes[q] = (p, yaml, home)
        secs, want, cpu = recompute(spark, data, yaml, q)
        row = {**run, "recompute": secs, "recompute_cpu": cpu, "state": state_held(yaml, home, q)}
        row["result_rows"] = len(want)
        row["same"] = same(contents(p, q), want)
        row.update(sdp_run(server, data, out, yaml, q, want))
        result["first"][q] = row
        print(f"first build {q}: {summary(row)}", flush=True)
        save(out, result)
    return pipes


def change_runs(
    spark: Any,
    server: Any,
    data: Path,
    out: Path,
    pipes: dict[str, tuple[Any, Path, Path]],
    fraction: float,
    result: dict[str, Any],
) -> None:
    """Per change (RF1, RF2, update), each pipeline's run against a recompute and the SDP view's refresh."""
    refresh = tpch_data.Refresh(data, seed=3, fraction=fraction)
    for change in CHANGES:
        orders = getattr(refresh, change)()
        for q, (p, yaml, home) in pipes.items():
            run = epoch(p, Path(result["profile"]) / f"{q}-{change}.pstats" if result.get("profile") else None)
            secs, want, cpu = recompute(spark, data, yaml, q)
            row = {"query": q, "change": change, "orders": orders, **run, "recompute": secs, "recompute_cpu": cpu}
            row["same"] = same(contents(p, q), want)
            row["state"] = state_held(yaml, home, q)
            row.update(sdp_run(server, data, out, yaml, q, want))
            result["changes"].append(row)
            print(f"{change} {q}: {summary(row)}", flush=True)
            save(out, result)


def sdp_run(server: Any, data: Path, out: Path, yaml: Path, q: str, want: list[tuple]) -> dict[str, Any]:
    """The SDP arm on the current snapshot: the view's project (re)written, ``spark-pipelines run``, its
    rows checked against the recompute's ``want``; ``{}`` without a server (``--no-sdp``). A failed run is
    said in the row (``sdp_error``), and the bench goes on."""
    if server is None:
        return {}
    spec = tpch_sdp.write_project(out / "tpch-sdp" / q, q, data, tpch_data.read_tables(yaml, [q]))
    try:
        sdp = tpch_sdp.refresh(server, spec, q)
        return {"sdp": sdp, "sdp_same": same(tpch_sdp.view_rows(server, q), want)}
    except Exception as e:  # the SDP arm's failure is a result too
        print(f"SDP {q} FAILED: {str(e).splitlines()[0][:300]}", flush=True)
        return {"sdp_error": f"{type(e).__name__}: {e}"[:500]}


def summary(row: dict[str, Any]) -> str:
    """One printed line of a row: cbp's run, the recompute, the SDP refresh, and any difference."""
    text = f"cbp {row['seconds']:.2f}s, recompute {row['recompute']:.2f}s"
    if "sdp" in row:
        text += f", SDP refresh {row['sdp']['refresh']:.2f}s (CLI {row['sdp']['cli_seconds']:.1f}s)"
    flags = [name for name, ok in (("cbp", row["same"]), ("SDP", row.get("sdp_same", True))) if not ok]
    return text + "".join(f" {name} DIFFERS" for name in flags) + (" SDP FAILED" if "sdp_error" in row else "")


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
        "| state held (rows / MB) | Spark SQL recompute / CPU (s) | SDP refresh (s) | SDP CLI run / CPU (s) "
        "| cbp / recompute | cbp / SDP refresh | CPU: cbp / recompute |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [table_row(q, "first build", f) for q, f in r["first"].items()]
    lines += [table_row(c["query"], f"{c['change']} ({c['orders']} orders)", c) for c in r["changes"]]
    if r.get("failed"):
        lines += ["", *[f"- {q} FAILED: {why}" for q, why in r["failed"].items()]]
    errors = [(q, f) for q, f in r["first"].items() if "sdp_error" in f]
    errors += [(f"{c['query']} {c['change']}", c) for c in r["changes"] if "sdp_error" in c]
    lines += ["", *[f"- SDP {what} FAILED: {f['sdp_error']}" for what, f in errors]] if errors else []
    lines += ["", "| query | compiles today? |", "|---|---|"]
    lines += [f"| {q} | {'yes' if v is None else v} |" for q, v in r["verdicts"].items()]
    return "\n".join(lines) + "\n"


def table_row(q: str, what: str, f: dict[str, Any]) -> str:
    """One row of the table: a first build or a run after a change, with its SDP refresh if measured."""
    rows, size = f["state"]
    sdp = f.get("sdp")
    if sdp:
        sdp_cols = f"{sdp['refresh']:.2f} | {sdp['cli_seconds']:.1f} / {sdp['cli_cpu'] + sdp['server_cpu']:.1f}"
        vs_sdp = f"**{f['seconds'] / sdp['refresh']:.2f}×**" if sdp["refresh"] > 0 else "–"
    else:
        sdp_cols, vs_sdp = ("failed | –" if "sdp_error" in f else "– | –"), "–"
    rcpu = f.get("recompute_cpu")
    cpu_cols = (
        (f"{f['recompute']:.2f} / {rcpu:.1f}", f"{f['cpu_seconds'] / rcpu:.2f}×")
        if rcpu
        else (f"{f['recompute']:.2f}", "–")
    )
    flags = ("" if f.get("same", True) else " (differs!)") + ("" if f.get("sdp_same", True) else " (SDP differs!)")
    return (
        f"| {q} | {what} | {f['seconds']:.2f} | {f.get('cpu_seconds', 0):.1f} | {f['sync_seconds']:.2f} | "
        f"{f['records_in']:,} | {f['keys_read']:,} | {rows:,} / {size / 1e6:.1f} | {cpu_cols[0]} | "
        f"{sdp_cols} | **{f['seconds'] / f['recompute']:.2f}×**{flags} | {vs_sdp} | {cpu_cols[1]} |"
    )


def plot(result: dict[str, Any], path: Path) -> None:
    """Per first build and change, each query's cbp run, Spark SQL recompute and SDP refresh (seconds, log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    queries = list(result["first"])
    kinds = ["first build", *CHANGES]
    series = [("cbp run", lambda f: f["seconds"]), ("Spark SQL recompute", lambda f: f["recompute"])]
    if any("sdp" in f for f in [*result["first"].values(), *result["changes"]]):
        series.append(("SDP refresh", lambda f: f["sdp"]["refresh"] if "sdp" in f else float("nan")))
    ncols = len(kinds) if len(queries) <= 3 else 2  # more queries: the four panels 2 by 2, not one wide row
    nrows = -(-len(kinds) // ncols)
    fig, grid = plt.subplots(
        nrows, ncols, figsize=(3 + 1.1 * len(queries) * ncols, 3.8 * nrows), sharey=True, squeeze=False
    )
    axes = list(grid.flat)
    width = 0.8 / len(series)
    for ax, kind in zip(axes, kinds):
        runs = [result["first"][q] if kind == "first build" else row_of(result, q, kind) for q in queries]
        for i, (label, value) in enumerate(series):
            xs = [j + i * width for j, f in enumerate(runs) if f is not None]
            ax.bar(xs, [value(f) for f in runs if f is not None], width, label=label)
        ax.set_yscale("log")
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(queries))], queries)
        ax.set_title(kind, fontsize=9)
    for row in grid:
        row[0].set_ylabel("seconds (log)")
    axes[0].legend(fontsize=7)
    fig.suptitle(
        f"TPC-H SF {result['sf']}: cbp's run after a {result['fraction']:.1%} change, "
        "a Spark SQL recompute, an SDP materialized view's refresh",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def row_of(result: dict[str, Any], q: str, change: str) -> dict[str, Any] | None:
    """The run of query ``q`` after ``change`` in ``result``, if there is one."""
    return next((c for c in result["changes"] if c["query"] == q and c["change"] == change), None)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument("--fraction", type=float, default=0.001, help="of the orders per change")
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    ap.add_argument("--quick", action="store_true", help="a smoke run: SF 0.01")
    ap.add_argument("--queries", type=lambda s: s.split(","), default=None, help="only these, e.g. q1,q3,q12")
    ap.add_argument(
        "--no-sdp", dest="sdp", action="store_false", help="leave out the Spark Declarative Pipelines column"
    )
    ap.add_argument("--keep", action="store_true", help="copy the first builds' tables and homes to OUT/kept")
    ap.add_argument("--reuse", action="store_true", help="start from OUT/kept instead of generating and building")
    ap.add_argument(
        "--tables", default=None, help="copy the tables of a --keep run (its OUT/kept/tpch-sfSF) instead of generating"
    )
    ap.add_argument(
        "--profile", action="store_true", help="cProfile (CPU clock) of each first build and change run, in OUT/prof"
    )
    ap.add_argument("--merge", nargs="+", default=None, help="tpch.json files of runs of other queries: one table")
    args = ap.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a killed run stops the SDP server too (finally)
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
