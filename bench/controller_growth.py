#!/usr/bin/env python
"""Controller growth: does the controller's cost per epoch grow with the number of epochs run?

Runs ``flows/url_count.yaml`` for ``--epochs`` rounds (default 3000) of one tiny feed (3 records:
new URLs and repeats of earlier ones, from a seeded RNG, each feed with a ``feed_id`` so that the
idempotent-feed index is used) followed by ``p.run()``, all in one SparkSession, and measures
every round:

- the wall time of feed + run, the Spark job time (``run_stage_epoch``, wrapped where the
  controller calls it) and the controller's time = wall - Spark job;
- the bytes the driver process wrote (``wchar`` of ``/proc/self/io``: controller snapshots,
  intentions, pending records, the Delta log that delta-rs writes in the driver; Spark's JVM and
  its Python workers are other processes), and, separately, the bytes of the files under
  ``<home>/_cbp`` and every ``<home>/**/_delta_log`` that are new or changed after the round;
- the CPU time of the driver process in ``feed()`` and in ``run()`` (less noisy than wall time on a
  loaded machine) and its ``os.fsync`` calls;
- the size of the controller snapshot (the newest ``<home>/_cbp/controller/<seq>.json``);
- every ``PROGRESS_EVERY`` (100) rounds, the number of files in the whole home: all of them, those
  under ``_cbp`` and the Delta logs (history and logs), and data files.

The home's retention (:mod:`cbp.controller.retention`) is set before the first round:
``--retention-epochs`` (default 100: the history and table logs of the last 100 epochs are kept,
older ones trimmed as epochs commit) and ``--retention-days``; ``--keep-all`` records a retention
that keeps everything (the behaviour before retention existed).

The home's age is told from the machine's speed (which drifts over a long run on a shared machine)
by a young control (:mod:`growth_control`): the last ``--control`` rounds of each window are each
followed by the same round on a young home (new at those rounds, in the same process), and each
window reports old/young; at the end ``--fresh-process`` paired rounds of the old home and a
young one run in a new process (is a slowdown the process's or the home's?).

It prints the medians of the first and the last ``--window`` rounds and their ratio, writes
every round to ``bench/out/controller_growth.json`` (and the table to ``controller_growth.md``)
and plots ``bench/out/controller_growth.png``. With ``--check`` it exits 1 if last/first is over
``--goal`` (1.1) for ``feed()``, ``run()``, the controller time or the driver bytes.

    .venv/bin/python bench/controller_growth.py                            # 3000 rounds
    .venv/bin/python bench/controller_growth.py --epochs 300 --window 50   # shorter
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import importlib
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from growth_control import Controls, fresh_process, plot_ratios, window_table  # bench/ is sys.path[0]
from url_count_bench import OUT, ROOT, YAML, _mem_gib, _version, log  # puts ROOT on sys.path

FLOW = "urls"
SNAPSHOTS = Path("_cbp") / "controller"  # cbp.storage: <home>/_cbp/controller/<seq:012d>.json
SPARK_JOB = "run_stage_epoch"  # cbp.engine.driver.job: one stage epoch as one Spark job
#: Modules that may hold the name the controller calls ``run_stage_epoch`` by: every one found is
#: wrapped, and each round checks that the wrapper saw one call per epoch (else the code moved).
CALL_SITES = ("cbp.controller.epoch", "cbp.controller", "cbp.engine.driver.job")
PROGRESS_EVERY = 100


class BenchError(Exception):
    """The benchmark cannot measure what it claims to (exit 2)."""


# ---------------------------------------------------------------------------------- measuring
class SparkJobTimer:
    """Wraps ``run_stage_epoch`` where the controller looks it up; sums its seconds and calls."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu = 0.0
        self.calls = 0
        self.patched: list[str] = []
        self._depth = 0

    def install(self, sites: tuple[str, ...] = CALL_SITES) -> None:
        for name in sites:
            try:
                mod = importlib.import_module(name)
            except ModuleNotFoundError as e:
                if e.name == name:
                    continue
                raise
            fn = getattr(mod, SPARK_JOB, None)
            if callable(fn) and not getattr(fn, "_bench_timed", False):
                setattr(mod, SPARK_JOB, self._wrap(fn))
                self.patched.append(f"{name}.{SPARK_JOB}")
        if not self.patched:
            raise BenchError(
                f"no '{SPARK_JOB}' in any of {', '.join(sites)}: the Spark job moved; "
                "add the module the controller now calls it from to CALL_SITES"
            )

    def _wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if self._depth:  # one wrapped name calling another: count once
                return fn(*args, **kwargs)
            self._depth += 1
            t0, c0 = time.perf_counter(), time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.cpu += time.process_time() - c0
                self.calls += 1
                self._depth -= 1

        timed._bench_timed = True  # type: ignore[attr-defined]
        return timed

    def take(self) -> tuple[float, float, int]:
        out = (self.seconds, self.cpu, self.calls)
        self.seconds, self.cpu, self.calls = 0.0, 0.0, 0
        return out


class FsyncCounter:
    """Counts this process's ``os.fsync`` calls (cbp's durable writes: a file's bytes, a directory's names)."""

    def __init__(self) -> None:
        self.calls = 0
        self._real = os.fsync

    def install(self) -> None:
        def fsync(fd: Any) -> None:
            self.calls += 1
            self._real(fd)

        os.fsync = fsync

    def take(self) -> int:
        out, self.calls = self.calls, 0
        return out


FSYNCS = FsyncCounter()


def driver_wchar() -> int:
    """Bytes this process (all its threads) has passed to write() so far."""
    with open("/proc/self/io", encoding="ascii") as f:
        for line in f:
            if line.startswith("wchar:"):
                return int(line.split()[1])
    raise BenchError("/proc/self/io has no wchar line")


Signature = tuple[int, int, int]  # size, mtime_ns, inode


def tracked_files(home: Path) -> dict[str, Signature]:
    """Every file under ``<home>/_cbp`` and each ``<home>/**/_delta_log``, without listing data files:
    the walk stops at a table (a directory with a ``_delta_log``) and skips partition directories."""
    out: dict[str, Signature] = {}

    def entries(d: str) -> list[os.DirEntry[str]]:
        try:
            return list(os.scandir(d))
        except FileNotFoundError:  # not made yet
            return []

    def files(d: str) -> None:
        for e in entries(d):
            try:
                if e.is_dir(follow_symlinks=False):
                    files(e.path)
                elif e.is_file(follow_symlinks=False):
                    st = e.stat(follow_symlinks=False)
                    out[e.path] = (st.st_size, st.st_mtime_ns, st.st_ino)
            except FileNotFoundError:
                pass

    def tables(d: str) -> None:
        log_dir = os.path.join(d, "_delta_log")
        if os.path.isdir(log_dir):
            files(log_dir)
            return
        for e in entries(d):
            if e.is_dir(follow_symlinks=False) and "=" not in e.name and not e.name.startswith(("_", ".")):
                tables(e.path)

    files(str(home / "_cbp"))
    tables(str(home))
    return out


def changed_bytes(before: dict[str, Signature], after: dict[str, Signature]) -> tuple[int, int]:
    """Bytes and number of the files that are new or changed (deleted ones do not count)."""
    changed = [sig[0] for path, sig in after.items() if before.get(path) != sig]
    return sum(changed), len(changed)


def count_files(home: Path) -> dict[str, int]:
    """Files in the whole home: all, those of ``_cbp`` (controller records and history), the Delta logs, data files."""
    out = {"all": 0, "cbp": 0, "delta_log": 0, "data": 0}
    for d, _dirs, names in os.walk(home):
        rel = os.path.relpath(d, home)
        kind = "cbp" if rel.split(os.sep)[0] == "_cbp" else "delta_log" if "_delta_log" in rel.split(os.sep) else "data"
        out[kind] += len(names)
        out["all"] += len(names)
    return out


def snapshot_size(home: Path) -> tuple[str, int]:
    """Name and size of the newest controller snapshot."""
    d = home / SNAPSHOTS
    names = sorted(n for n in os.listdir(d) if n.endswith(".json")) if d.is_dir() else []
    if not names:
        raise BenchError(f"no controller snapshot in {d}: the snapshot moved; update SNAPSHOTS")
    return names[-1], (d / names[-1]).stat().st_size


class Feeds:
    """Tiny feeds: ``records`` URLs a round, 1 to records-1 of them new, the rest earlier ones again."""

    def __init__(self, seed: int, records: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.records = records
        self.seen: list[str] = []

    def next(self) -> list[dict[str, str]]:
        n_new = self.records if not self.seen else int(self.rng.integers(1, self.records))
        new = [f"http://site{(len(self.seen) + k) % 37}.example/page/{len(self.seen) + k}.html" for k in range(n_new)]
        old = (
            [self.seen[int(j)] for j in self.rng.integers(0, len(self.seen), self.records - n_new)] if self.seen else []
        )
        self.seen += new
        urls = new + old
        self.rng.shuffle(urls)
        return [{"url": u} for u in urls]


def one_round(
    p: Any,
    n: int,
    records: list[dict[str, str]],
    timer: SparkJobTimer,
    home: Path,
    before: dict[str, Signature],
    prefix: str = "round",
) -> tuple[dict[str, Any], dict[str, Signature]]:
    """Feed (feed id ``<prefix>-<n>``) and run once; return the round's measurements and the tracked files after it."""
    timer.take()
    FSYNCS.take()
    w0 = driver_wchar()
    c0 = time.process_time()
    t0 = time.perf_counter()
    landed = p.feed(FLOW, records, feed_id=f"{prefix}-{n}")
    t1 = time.perf_counter()
    c1 = time.process_time()
    reports = p.run()
    t2 = time.perf_counter()
    c2 = time.process_time()
    w1 = driver_wchar()
    spark_s, spark_cpu, calls = timer.take()
    fsyncs = FSYNCS.take()
    if getattr(landed, "repeated", False):
        raise BenchError(f"round {n}: feed id '{prefix}-{n}' was taken as a repeat")
    if len(reports) != 1:
        raise BenchError(f"round {n}: expected one epoch, got {len(reports)}: {[r.line() for r in reports]}")
    if calls != len(reports):
        raise BenchError(
            f"round {n}: the wrapped {SPARK_JOB} ({', '.join(timer.patched)}) ran {calls} times for "
            f"{len(reports)} epoch(s): the controller calls the Spark job some other way now; add that "
            "module to CALL_SITES"
        )
    t3 = time.perf_counter()
    after = tracked_files(home)
    home_bytes, home_files = changed_bytes(before, after)
    snap_name, snap_bytes = snapshot_size(home)
    wall = t2 - t0
    row = {
        "round": n,
        "epoch": reports[0].epoch,
        "wall_s": wall,
        "feed_s": t1 - t0,
        "run_s": t2 - t1,
        "spark_s": spark_s,
        "controller_s": wall - spark_s,
        "controller_cpu_s": (c2 - c0) - spark_cpu,
        "feed_cpu_s": c1 - c0,
        "run_cpu_s": c2 - c1,
        "epoch_report_s": reports[0].seconds,
        "driver_bytes": w1 - w0,
        "fsyncs": fsyncs,
        "home_bytes": home_bytes,
        "home_files": home_files,
        "snapshot_bytes": snap_bytes,
        "snapshot": snap_name,
        "tracked_files": len(after),
        "walk_s": time.perf_counter() - t3,
    }
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()}, after


# ---------------------------------------------------------------------------------- reporting
#: (JSON key, table label, scale, unit, checked against --goal)
METRICS = [
    ("feed_s", "feed()", 1e3, "ms", True),
    ("run_s", "run()", 1e3, "ms", True),
    ("controller_s", "controller time (wall - Spark job)", 1e3, "ms", True),
    ("controller_cpu_s", "controller CPU time (driver process, all threads, outside the Spark job)", 1e3, "ms", False),
    ("feed_cpu_s", "feed() CPU time (driver process)", 1e3, "ms", False),
    ("run_cpu_s", "run() CPU time (driver process, the Spark job's driver side included)", 1e3, "ms", False),
    ("driver_bytes", "driver bytes written (wchar)", 1 / 1024, "KiB", True),
    ("home_bytes", "home bytes written (_cbp, _delta_log: new or changed files)", 1 / 1024, "KiB", False),
    ("snapshot_bytes", "controller snapshot size", 1 / 1024, "KiB", False),
    ("fsyncs", "fsyncs by the driver (feed + run)", 1, "calls", False),
    ("spark_s", "Spark job (run_stage_epoch)", 1e3, "ms", False),
    ("wall_s", "round wall time (feed + run)", 1e3, "ms", False),
]


def summarize(rows: list[dict[str, Any]], window: int, goal: float) -> dict[str, Any]:
    first, last = rows[:window], rows[-window:]
    out: dict[str, Any] = {
        "first_rounds": [first[0]["round"], first[-1]["round"]],
        "last_rounds": [last[0]["round"], last[-1]["round"]],
        "goal": goal,
        "metrics": {},
    }
    for key, *_rest, checked in METRICS:
        a = statistics.median(r[key] for r in first)
        b = statistics.median(r[key] for r in last)
        ratio = b / a if a else float("inf") if b else 1.0
        out["metrics"][key] = {
            "first": a,
            "last": b,
            "ratio": round(ratio, 3),
            "checked": checked,
            "ok": ratio <= goal if checked else None,
        }
    out["pass"] = all(m["ok"] for m in out["metrics"].values() if m["checked"])
    return out


def table(summary: dict[str, Any], args: argparse.Namespace, command: str, total_s: float, spark_start_s: float) -> str:
    (f0, f1), (l0, l1) = summary["first_rounds"], summary["last_rounds"]
    lines = [
        "# Controller growth: cost per epoch vs epochs already run",
        "",
        f"- command: `{command}`",
        f"- date: {_dt.datetime.now().isoformat(timespec='seconds')}; machine: {os.cpu_count()} cores, "
        f"{_mem_gib():.0f} GiB RAM, "
        f"{platform.python_implementation()} {platform.python_version()}, pyspark {_version('pyspark')}, deltalake "
        f"{_version('deltalake')}",
        f"- scenario: flows/url_count.yaml, {args.epochs} rounds of one {args.records}-record feed (with feed_id) + "
        f"run(), seed {args.seed}",
        "- medians per round; driver bytes = wchar of the Python driver (not Spark's JVM or its Python workers)",
        "",
        f"| per round (median) | rounds {f0}-{f1} | rounds {l0}-{l1} | last/first |",
        "|---|---:|---:|---:|",
    ]
    for key, label, scale, unit, checked in METRICS:
        m = summary["metrics"][key]
        mark = f" ({'ok' if m['ok'] else 'OVER'} vs {summary['goal']:g})" if checked else ""
        lines.append(
            f"| {label}, {unit} | {m['first'] * scale:,.1f} | {m['last'] * scale:,.1f} | {m['ratio']:.2f}x{mark} |"
        )
    verdict = "PASS" if summary["pass"] else "FAIL"
    lines += [
        "",
        f"Goal: last/first <= {summary['goal']:g} for controller time and driver bytes: {verdict}"
        f"{'' if args.check else ' (not enforced: no --check)'}.",
        f"Total {total_s / 60:.1f} min (Spark session start {spark_start_s:.0f}s).",
        "",
        f"Retention: {args.retention}.",
        "",
        "| after round | files in the home | _cbp (records, history) | Delta logs | data files |",
        "|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {c['round']:,} | {c['all']:,} | {c['cbp']:,} | {c['delta_log']:,} | {c['data']:,} |"
        for c in summary.get("files", [])
    ]
    lines += window_table(summary.get("windows", []), summary.get("fresh_process"))
    return "\n".join(lines + [""])


def plot(
    rows: list[dict[str, Any]], window: int, path: Path, files: list[dict[str, Any]], windows: list[dict[str, Any]]
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    df = pd.DataFrame(rows).set_index("round").select_dtypes("number")
    roll = df.rolling(window, min_periods=1, center=True).median()
    panels = 4 if windows else 3
    fig, axes = plt.subplots(panels, 1, figsize=(10, 3.3 * panels), sharex=True)
    ax1, ax2, ax3 = axes[:3]
    ax1.plot(df.index, df["controller_s"] * 1e3, ".", ms=2, alpha=0.3, color="tab:blue")
    ax1.plot(
        roll.index,
        roll["controller_s"] * 1e3,
        color="tab:blue",
        label=f"controller (wall - Spark job), centred rolling median of {window}",
    )
    ax1.plot(
        roll.index, roll["controller_cpu_s"] * 1e3, color="tab:purple", label="controller CPU time, rolling median"
    )
    ax1.plot(roll.index, roll["spark_s"] * 1e3, color="tab:grey", ls="--", label="Spark job, rolling median")
    ax1.plot(roll.index, roll["feed_s"] * 1e3, color="tab:orange", label="feed(), rolling median")
    ax1.set_ylabel("ms per round")
    ax1.set_ylim(
        bottom=0, top=max(df["controller_s"].quantile(0.99), df["spark_s"].quantile(0.95)) * 1e3 * 1.3
    )  # not the 1st job
    ax1.set_title("time per round")
    for key, color, label in (
        ("driver_bytes", "tab:red", "driver bytes written (wchar)"),
        ("home_bytes", "tab:green", "home bytes written (_cbp + _delta_log)"),
    ):
        ax2.plot(df.index, df[key] / 1024, ".", ms=2, alpha=0.3, color=color)
        ax2.plot(roll.index, roll[key] / 1024, color=color, label=f"{label}, rolling median")
    ax2.plot(df.index, df["snapshot_bytes"] / 1024, color="black", lw=1, label="controller snapshot size")
    ax2.set_ylabel("KiB per round")
    ax2.set_ylim(bottom=0)
    ax2.set_title("bytes per round")
    for key, color, label in (
        ("all", "black", "all files"),
        ("cbp", "tab:blue", "history and controller records (_cbp)"),
        ("delta_log", "tab:red", "Delta logs"),
        ("data", "tab:green", "data files"),
    ):
        ax3.plot([c["round"] for c in files], [c[key] for c in files], marker=".", color=color, label=label)
    ax3.set_ylabel("files in the home")
    ax3.set_ylim(bottom=0)
    axes[-1].set_xlabel("round (= epoch)")
    ax3.set_title("files in the home (every 100 rounds)")
    if windows:
        plot_ratios(axes[3], windows)
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(
        f"cbp controller cost vs epochs run (url_count, {len(rows)} rounds, {os.cpu_count()} cores)", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--epochs", type=int, default=3000, help="rounds of feed + run (default 3000)")
    ap.add_argument("--window", type=int, default=100, help="rounds in the first and the last window (default 100)")
    ap.add_argument(
        "--home", default=None, help="pipeline home (new or empty; kept). Default: a temp dir, deleted at the end"
    )
    ap.add_argument("--out", default=str(OUT), help=f"output directory (default {os.path.relpath(OUT, ROOT)})")
    ap.add_argument(
        "--goal", type=float, default=1.1, help="largest last/first ratio allowed with --check (default 1.1)"
    )
    ap.add_argument(
        "--check", action="store_true", help="exit 1 if controller time or driver bytes grew more than --goal"
    )
    ap.add_argument("--records", type=int, default=3, help="records per feed (default 3, at least 2)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--keep", action="store_true", help="keep the temporary home")
    ap.add_argument(
        "--retention-epochs", type=int, default=100, help="the home keeps the last N epochs' history (default 100)"
    )
    ap.add_argument("--retention-days", type=float, default=None, help="... or those of the last D days")
    ap.add_argument("--keep-all", action="store_true", help="a retention that keeps everything (as before retention)")
    ap.add_argument(
        "--control",
        type=int,
        default=50,
        help="rounds at the end of each window also run on a young home, paired (default 50; 0: none)",
    )
    ap.add_argument(
        "--control-warmup",
        type=int,
        default=10,
        help="rounds a young home runs before its paired rounds (default 10; --retention-epochs + 25 or more: "
        "a young home past the retention, whose directories and logs hold as many files as the old one's)",
    )
    ap.add_argument(
        "--fresh-process",
        type=int,
        default=100,
        help="paired rounds of the old and a young home in a fresh process at the end (default 100; 0: none)",
    )
    args = ap.parse_args(argv)
    if args.window < 1 or args.epochs < args.window or args.records < 2 or args.goal <= 0:
        ap.error("need --window >= 1, --epochs >= --window, --records >= 2 and --goal > 0")
    if not os.path.exists("/proc/self/io"):
        ap.error("needs Linux /proc/self/io (driver bytes written)")
    command = " ".join([".venv/bin/python", "bench/controller_growth.py", *(sys.argv[1:] if argv is None else argv)])

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.home:
        home = Path(args.home).resolve()
        if home.exists() and any(home.iterdir()):
            ap.error(f"--home {home} is not empty; the benchmark starts from a new home")
        home.mkdir(parents=True, exist_ok=True)
    else:
        home = Path(tempfile.mkdtemp(prefix="cbp-controller-growth-"))
    if 2 * args.window > args.epochs:
        log(f"note: the first and last {args.window} rounds overlap ({args.epochs} rounds)")

    t_start = time.perf_counter()
    import cbp
    from cbp.engine.driver.session import get_spark

    timer = SparkJobTimer()
    FSYNCS.install()
    try:
        timer.install()
    except BenchError as e:
        print(f"controller_growth: {e}", file=sys.stderr)
        return 2
    log(f"home {home}; timing the Spark job at {', '.join(timer.patched)}")
    t0 = time.perf_counter()
    spark = get_spark()
    spark_start_s = time.perf_counter() - t0
    log(f"Spark session started in {spark_start_s:.1f}s")

    rows: list[dict[str, Any]] = []
    counts: list[dict[str, Any]] = []
    fresh: dict[str, Any] | None = None
    try:
        p = cbp.load(YAML, home=str(home), spark=spark)
        if args.keep_all:
            setting = p.set_retention(None, None)
        else:
            setting = p.set_retention(args.retention_epochs, args.retention_days)
        args.retention = setting.describe()
        log(f"retention: keep {args.retention}")
        feeds = Feeds(args.seed, args.records)
        controls = Controls(spark, args, timer, one_round, Feeds)
        files = tracked_files(home)
        t_rounds = time.perf_counter()
        for n in range(1, args.epochs + 1):
            row, files = one_round(p, n, feeds.next(), timer, home, files)
            rows.append(row)
            controls.after(n, row, rows)
            if n % PROGRESS_EVERY == 0 or n == args.epochs:
                counts.append({"round": n, **count_files(home)})
                last = rows[-PROGRESS_EVERY:]
                el = time.perf_counter() - t_rounds
                med = {
                    k: statistics.median(r[k] for r in last)
                    for k in ("controller_s", "spark_s", "driver_bytes", "home_bytes")
                }
                log(
                    f"round {n:>5}/{args.epochs}  elapsed {el:6.0f}s (ETA {el / n * (args.epochs - n):5.0f}s)  "
                    f"last {len(last)}: controller {med['controller_s'] * 1e3:6.1f} ms  Spark "
                    f"{med['spark_s'] * 1e3:6.1f} ms  "
                    f"driver {med['driver_bytes'] / 1024:7.1f} KiB  home {med['home_bytes'] / 1024:7.1f} KiB  "
                    f"snapshot {row['snapshot_bytes'] / 1024:7.1f} KiB  files {counts[-1]['all']}"
                )
        controls.close()
        if args.fresh_process > 0 and controls.windows:
            fresh = fresh_process(home, args.fresh_process, args, out / "controller_growth_fresh.json")
    except BenchError as e:
        print(f"controller_growth: {e}", file=sys.stderr)
        return 2
    finally:
        if not args.home and not args.keep:
            shutil.rmtree(home, ignore_errors=True)

    total = time.perf_counter() - t_start
    summary = summarize(rows, args.window, args.goal)
    summary["files"] = counts
    summary["windows"] = controls.windows
    summary["fresh_process"] = fresh
    md = table(summary, args, command, total, spark_start_s)
    (out / "controller_growth.md").write_text(md, encoding="utf-8")
    (out / "controller_growth.json").write_text(
        json.dumps(
            {
                "args": vars(args),
                "command": command,
                "spark_job": timer.patched,
                "total_seconds": round(total, 1),
                "spark_start_seconds": round(spark_start_s, 1),
                "summary": summary,
                "rounds": rows,
            },
            indent=1,
        ),
        encoding="utf-8",
    )
    plot(rows, args.window, out / "controller_growth.png", counts, controls.windows)
    print()
    print(md)
    print(f"wrote {out / 'controller_growth.md'}, {out / 'controller_growth.json'}, {out / 'controller_growth.png'}")
    return 1 if args.check and not summary["pass"] else 0


if __name__ == "__main__":
    sys.exit(main())
