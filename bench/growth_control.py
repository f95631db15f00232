#!/usr/bin/env python
"""A young control for ``bench/controller_growth.py``: tells the home's age from the machine's speed.

A shared machine's speed drifts over a run of minutes, and a process can slow down by itself (its
heap, native libraries' memory); neither is a cost that follows the epochs a home has run. So in
each window of the growth run, the same feeds and runs are timed side by side on a *young* home (a
new one, made in the same process and Spark session at the window's control rounds, a few rounds
of warm-up first: ``--control-warmup``, 10 by default): for the last ``control`` rounds of the
window, each round of the old home is followed by one of the young home. A young home of 10 rounds
is below a retention of 100 epochs, so its directories and logs hold fewer files than the old
one's (a feed creates six files in them); ``--control-warmup 125`` compares against a home past
it. ``old/young`` per window is the home's age's cost (in the first window the old home has run
its 250-300 rounds: past the retention already).

At the end the same comparison runs in a **fresh process** (``python bench/growth_control.py
--old HOME ...``: its own Spark session, the old home loaded from its files, a new young one): if
the old home is as slow against the young one there, it is the home; if both are faster than in
the long-lived process, it is the process.

    .venv/bin/python bench/growth_control.py --old /tmp/home --rounds 100 --out /tmp/fresh.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from url_count_bench import YAML, log  # bench/ is sys.path[0]

#: Per-round measures compared old against young: (JSON key, label, scale, unit).
COMPARED = [
    ("feed_s", "feed()", 1e3, "ms"),
    ("feed_cpu_s", "feed() CPU", 1e3, "ms"),
    ("run_s", "run()", 1e3, "ms"),
    ("run_cpu_s", "run() CPU", 1e3, "ms"),
    ("controller_s", "controller", 1e3, "ms"),
    ("controller_cpu_s", "controller CPU", 1e3, "ms"),
]
WARMUP = 10  # rounds a new home (or a home in a new process) runs before it is measured


def process_memory() -> dict[str, float]:
    """This process's resident memory and Arrow's allocations, MiB."""
    out = {"rss_mib": 0.0, "arrow_mib": 0.0}
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                out["rss_mib"] = int(line.split()[1]) / 1024
    try:
        import pyarrow as pa

        out["arrow_mib"] = pa.total_allocated_bytes() / 2**20
    except ImportError:
        pass
    return out


class YoungHome:
    """A new home in this process, made again for each window's control rounds."""

    def __init__(
        self, spark: Any, retention: tuple[int | None, float | None], records: int, seed: int, warmup: int = WARMUP
    ) -> None:
        self.spark, self.retention, self.records, self.seed, self.warmup = spark, retention, records, seed, warmup
        self.home: Path | None = None
        self.p: Any = None
        self.files: dict[str, Any] = {}
        self.made = 0
        self.n = 0

    def renew(self, timer: Any, one_round: Any, feeds_cls: Any) -> None:
        """Drop the young home, make a new one and run it ``warmup`` rounds (not measured)."""
        import cbp

        self.drop()
        self.made += 1
        self.home = Path(tempfile.mkdtemp(prefix="cbp-growth-young-"))
        self.p = cbp.load(YAML, home=str(self.home), spark=self.spark)
        self.p.set_retention(*self.retention)
        self.feeds = feeds_cls(self.seed + self.made, self.records)
        self.files = {}
        for _ in range(self.warmup):
            self.round(timer, one_round)

    def round(self, timer: Any, one_round: Any) -> dict[str, Any]:
        """One measured round on the young home (feed ids of its own)."""
        assert self.home is not None
        self.n += 1
        row, self.files = one_round(
            self.p, self.n, self.feeds.next(), timer, self.home, self.files, f"young{self.made}"
        )
        return row

    def drop(self) -> None:
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None


class Controls:
    """The young control of each window: its last ``control`` rounds are paired with young-home rounds."""

    def __init__(self, spark: Any, args: argparse.Namespace, timer: Any, one_round: Any, feeds_cls: Any) -> None:
        self.window, self.control = args.window, min(args.control, args.window)
        retention = (None, None) if args.keep_all else (args.retention_epochs, args.retention_days)
        self.warmup = int(getattr(args, "control_warmup", WARMUP))
        self.young = YoungHome(spark, retention, args.records, args.seed + 1, self.warmup)
        self.timer, self.one_round, self.feeds_cls = timer, one_round, feeds_cls
        self.old_rows: list[dict[str, Any]] = []
        self.young_rows: list[dict[str, Any]] = []
        self.windows: list[dict[str, Any]] = []

    def after(self, n: int, row: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        """Called after the old home's round ``n`` (``rows``: every round so far)."""
        if self.control <= 0:
            return
        pos = (n - 1) % self.window
        start = self.window - self.control
        if pos == start:
            self.young.renew(self.timer, self.one_round, self.feeds_cls)
        if pos >= start:
            self.old_rows.append(row)
            self.young_rows.append(self.young.round(self.timer, self.one_round))
        if pos == self.window - 1:
            done = rows[-self.window :]
            entry = {
                "rounds": [done[0]["round"], done[-1]["round"]],
                "all": medians(done),
                "compare": compare(self.old_rows, self.young_rows),
                "warmup": self.warmup,
                "memory": process_memory(),
            }
            self.windows.append(entry)
            self.old_rows, self.young_rows = [], []
            log(line(f"rounds {entry['rounds'][0]}-{entry['rounds'][1]}", entry["compare"]))

    def close(self) -> None:
        self.young.drop()


def window_table(windows: list[dict[str, Any]], fresh: dict[str, Any] | None) -> list[str]:
    """Markdown: each window's medians (all its rounds) and old/young of its paired control rounds."""
    if not windows:
        return []
    c = windows[0]["compare"]["rounds"]
    lines = [
        "",
        f"Per window: medians of all its rounds (old home), then old/young over its last {c} rounds, each old-home",
        "round followed by the same round on a young home (new at those rounds, after "
        f"{windows[0].get('warmup', WARMUP)} rounds of warm-up), same process:",
        "",
        "| rounds | feed() ms | feed() CPU ms | run() ms | run() CPU ms | old/young feed() | feed() CPU | run() "
        "| run() CPU | controller CPU | RSS MiB | Arrow MiB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for w in windows:
        a, r, m = w["all"], w["compare"]["ratio"], w["memory"]
        lines.append(
            f"| {w['rounds'][0]}-{w['rounds'][1]} | {a['feed_s'] * 1e3:.1f} | {a['feed_cpu_s'] * 1e3:.1f} | "
            f"{a['run_s'] * 1e3:.1f} | {a['run_cpu_s'] * 1e3:.1f} | {r['feed_s']:.2f}x | {r['feed_cpu_s']:.2f}x | "
            f"{r['run_s']:.2f}x | {r['run_cpu_s']:.2f}x | {r['controller_cpu_s']:.2f}x | {m['rss_mib']:.0f} | "
            f"{m['arrow_mib']:.1f} |"
        )
    if fresh is not None:
        last = windows[-1]["compare"]
        lines += [
            "",
            "The last window's paired rounds against the same in a fresh process (old home loaded from its files):",
        ]
        lines += ["", "| measure | this process: old | young | old/young | fresh process: old | young | old/young |"]
        lines += ["|---|---:|---:|---:|---:|---:|---:|"]
        f = fresh["compare"]
        for k, name, s, unit in COMPARED:
            lines.append(
                f"| {name}, {unit} | {last['old'][k] * s:.1f} | {last['young'][k] * s:.1f} | {last['ratio'][k]:.2f}x | "
                f"{f['old'][k] * s:.1f} | {f['young'][k] * s:.1f} | {f['ratio'][k]:.2f}x |"
            )
    return lines


def plot_ratios(ax: Any, windows: list[dict[str, Any]]) -> None:
    """old/young per window (at the window's last round)."""
    x = [w["rounds"][1] for w in windows]
    for key, color in (
        ("feed_s", "tab:orange"),
        ("feed_cpu_s", "tab:red"),
        ("run_s", "tab:blue"),
        ("run_cpu_s", "tab:purple"),
    ):
        label = dict((k, n) for k, n, *_ in COMPARED)[key]
        ax.plot(x, [w["compare"]["ratio"][key] for w in windows], marker="o", color=color, label=f"{label} old/young")
    ax.axhline(1.1, color="grey", ls="--", lw=1, label="goal 1.1x")
    ax.axhline(1.0, color="black", lw=0.5)
    ax.set_ylabel("old home / young home")
    ax.set_title("the home's age: old/young of the same rounds, side by side, per window")


def medians(rows: list[dict[str, Any]]) -> dict[str, float]:
    return {key: statistics.median(r[key] for r in rows) for key, *_ in COMPARED}


def compare(old: list[dict[str, Any]], young: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the paired rounds and old/young per measure."""
    a, b = medians(old), medians(young)
    return {
        "rounds": len(old),
        "old": a,
        "young": b,
        "ratio": {k: round(a[k] / b[k], 3) if b[k] else None for k in a},
    }


def line(label: str, c: dict[str, Any]) -> str:
    """One log line: each measure's old, young and old/young."""
    parts = [
        f"{name} {c['old'][k] * s:.1f}/{c['young'][k] * s:.1f} {unit} ({c['ratio'][k]:.2f}x)"
        for k, name, s, unit in COMPARED
    ]
    return f"{label}: old/young " + "; ".join(parts)


def fresh_process(old_home: Path, rounds: int, args: argparse.Namespace, out: Path) -> dict[str, Any] | None:
    """Run this module in a new process on ``old_home`` (and a young home of its own); its comparison."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--old", str(old_home), "--rounds", str(rounds)]
    cmd += ["--records", str(args.records), "--seed", str(args.seed + 1000), "--out", str(out)]
    cmd += ["--retention", json.dumps([args.retention_epochs, args.retention_days])]
    cmd += ["--warmup", str(int(getattr(args, "control_warmup", WARMUP)))]
    log(f"fresh process: {' '.join(cmd)}")
    done = subprocess.run(cmd, check=False, timeout=3600)
    if done.returncode != 0 or not out.exists():
        log(f"fresh process failed (exit {done.returncode})")
        return None
    return json.loads(out.read_text(encoding="utf-8"))


def child(argv: list[str]) -> int:
    """The fresh process: the old home loaded from its files and a young home, ``--rounds`` rounds each, paired."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the old home (its pipeline, url_count)")
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--records", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1042)
    ap.add_argument("--retention", default="[100, null]", help="JSON [epochs, days] of the young home")
    ap.add_argument(
        "--warmup", type=int, default=WARMUP, help="rounds of the young home before pairing (--control-warmup)"
    )
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    import controller_growth as g

    import cbp
    from cbp.engine.driver.session import get_spark

    timer = g.SparkJobTimer()
    g.FSYNCS.install()
    timer.install()
    spark = get_spark()
    old_home = Path(args.old)
    p = cbp.load(YAML, home=str(old_home), spark=spark)
    feeds = g.Feeds(args.seed, args.records)
    retention = tuple(json.loads(args.retention))
    young = YoungHome(spark, retention, args.records, args.seed, args.warmup)  # type: ignore[arg-type]
    young.renew(timer, g.one_round, g.Feeds)
    files = g.tracked_files(old_home)
    old_rows, young_rows = [], []
    try:
        for n in range(1, WARMUP + args.rounds + 1):
            row, files = g.one_round(p, n, feeds.next(), timer, old_home, files, "fresh")
            yrow = young.round(timer, g.one_round)
            if n > WARMUP:
                old_rows.append(row)
                young_rows.append(yrow)
    finally:
        young.drop()
    result = {"compare": compare(old_rows, young_rows), "memory": process_memory()}
    Path(args.out).write_text(json.dumps(result, indent=1), encoding="utf-8")
    log(line("fresh process", result["compare"]))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(child(sys.argv[1:]))
