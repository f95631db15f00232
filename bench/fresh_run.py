#!/usr/bin/env python
"""What a new process pays before its first epoch: ``cbp run`` as Airflow's run task starts it
(issue 14, item 4: the fixed cost of an epoch, in a fresh driver).

URLCount vectorised (``flows/url_count_vec.yaml``) with ``--keys`` state keys (default 100k, real
URLs as ``url_count_bench.py``), then ``--rounds`` rounds; each round lands a 1,000-record
increment with ``cbp feed`` (no Spark) and times, as whole processes, side by side in one run
(their order alternating from round to round):

- ``cbp run`` with the driver JVM's class archive (``cbp/engine/driver/jvmcache.py``) and without it
  (``CBP_JVM_ARCHIVE=0``): one epoch each, on the same home;
- a process that only starts a SparkSession and runs one job (``spark.range(10).count()``), with
  and without the archive: the part of the above that is Spark's.

The archive lives in a directory of its own (``CBP_JVM_CACHE``), so the first process records it:
that process is timed too (``recording``). Prints a table; writes ``bench/out/fresh_run.{md,json,png}``.

    .venv/bin/python bench/fresh_run.py              # 100k keys, 8 rounds (~4 min)
    .venv/bin/python bench/fresh_run.py --rounds 4
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from url_count_bench import (
    OUT,
    ROOT,
    YAML_VEC,
    Keys,
    _version,
    increments,
    load_vocabulary,
    log,
)  # puts ROOT on sys.path

CBP = str(Path(sys.executable).parent / "cbp")
SPARK_ONLY = "from cbp.engine.driver.session import get_spark; assert get_spark().range(10).count() == 10"


def timed(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    seconds = time.perf_counter() - t0
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    return seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--increment", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    vocab, source = load_vocabulary()
    work = Path(tempfile.mkdtemp(prefix="cbp-fresh-"))
    try:
        res = measure(args, Keys(vocab), work)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the home and the archive (~170 MB)
    res["source"] = source
    write(res)
    return 0


def measure(args: argparse.Namespace, keys: Keys, work: Path) -> dict[str, Any]:
    """The home, the first (recording) process, then the rounds; the timings."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    home, cache = work / "home", work / "jvm"
    base = {k: v for k, v in os.environ.items() if k not in ("CBP_SPARK_CONF", "CBP_JVM_ARCHIVE")}
    env = {"on": {**base, "CBP_JVM_CACHE": str(cache)}, "off": {**base, "CBP_JVM_ARCHIVE": "0"}}
    t0 = time.perf_counter()
    log(f"{args.keys:,} keys: building the home ({work})")
    pq.write_table(pa.table({"url": [r["url"] for r in keys.records(np.arange(args.keys))]}), work / "base.parquet")
    incs = increments(args.keys, args.increment, args.rounds * 2 + 1, args.seed)
    subprocess.run(
        [CBP, "feed", "--home", str(home), str(YAML_VEC), "urls", str(work / "base.parquet")],
        cwd=ROOT,
        env=env["off"],
        check=True,
        capture_output=True,
    )
    recording = timed(
        [CBP, "run", "--home", str(home), "--quiet", str(YAML_VEC)], env["on"]
    )  # records the archive as it exits
    if not any(cache.glob("*.jsa")):
        raise SystemExit(f"no archive was recorded in {cache}: does this Java support -XX:ArchiveClassesAtExit?")
    log(f"built; the first process (recording the archive) took {recording:.1f}s")
    runs: dict[str, list[float]] = {"on": [], "off": []}
    spark: dict[str, list[float]] = {"on": [], "off": []}
    for r in range(args.rounds):
        order = ("on", "off") if r % 2 == 0 else ("off", "on")
        for i, which in enumerate(order):
            f = work / f"inc-{r}-{which}.parquet"
            pq.write_table(pa.table({"url": [x["url"] for x in keys.records(incs[2 * r + i])]}), f)
            subprocess.run(
                [CBP, "feed", "--home", str(home), str(YAML_VEC), "urls", str(f)],
                cwd=ROOT,
                env=env[which],
                check=True,
                capture_output=True,
            )
            runs[which].append(timed([CBP, "run", "--home", str(home), "--quiet", str(YAML_VEC)], env[which]))
            spark[which].append(timed([sys.executable, "-c", SPARK_ONLY], env[which]))
        log(
            f"round {r + 1}: cbp run {runs['on'][-1]:.2f}s with the archive, {runs['off'][-1]:.2f}s without; "
            f"session + one job {spark['on'][-1]:.2f}s / {spark['off'][-1]:.2f}s"
        )
    return {
        "args": vars(args),
        "version": _version("cbp"),
        "commit": _commit(),
        "recording": recording,
        "cbp_run": runs,
        "spark_only": spark,
        "total_seconds": time.perf_counter() - t0,
    }


def _commit() -> str:
    p = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return p.stdout.strip() or "?"


def _row(name: str, on: list[float], off: list[float]) -> str:
    m_on, m_off = statistics.median(on), statistics.median(off)
    return (
        f"| {name} | {m_on:.2f} [{min(on):.2f}-{max(on):.2f}] | {m_off:.2f} [{min(off):.2f}-{max(off):.2f}] | "
        f"{m_on - m_off:+.2f} | {m_on / m_off:.2f}x |"
    )


def write(res: dict[str, Any]) -> None:
    a = res["args"]
    lines = [
        "# A fresh process's first epoch: with and without the driver JVM's class archive",
        "",
        f"- {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}, cbp {res['version']} (`{res['commit']}`); "
        f"`{' '.join(sys.argv)}`",
        f"- URLCount vectorised, {a['keys']:,} state keys, {a['increment']:,}-record increments, {a['rounds']} rounds "
        f"alternating; "
        f"whole processes, seconds: median [min-max]",
        f"- the first process (the home's {a['keys']:,}-key build epoch), which recorded the archive as it exited: "
        f"{res['recording']:.1f} s",
        "",
        "| process | with archive | without | difference | ratio |",
        "|:---|---:|---:|---:|---:|",
        _row("`cbp run` (one epoch)", res["cbp_run"]["on"], res["cbp_run"]["off"]),
        _row("SparkSession + one job", res["spark_only"]["on"], res["spark_only"]["off"]),
        "",
    ]
    text = "\n".join(lines)
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "fresh_run.md").write_text(text, encoding="utf-8")
    (OUT / "fresh_run.json").write_text(json.dumps(res, indent=1), encoding="utf-8")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    groups = [("cbp run", res["cbp_run"]), ("session + one job", res["spark_only"])]
    for g, (_name, d) in enumerate(groups):
        for j, (which, label, color) in enumerate((("off", "without archive", "C0"), ("on", "with archive", "C1"))):
            xs = d[which]
            ax.bar(g + (j - 0.5) * 0.35, statistics.median(xs), 0.35, color=color, label=label if g == 0 else None)
            ax.scatter([g + (j - 0.5) * 0.35] * len(xs), xs, color="k", s=8, zorder=3)
    ax.set_xticks(range(len(groups)), [n for n, _ in groups])
    ax.set_ylabel("seconds per process")
    ax.set_title(f"a fresh process's first epoch (URLCount, {a['keys']:,} keys)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(OUT / "fresh_run.png", dpi=120)
    log(f"wrote {OUT / 'fresh_run.md'}, .json, .png")


if __name__ == "__main__":
    raise SystemExit(main())
