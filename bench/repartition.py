#!/usr/bin/env python
"""Repartitioning a stage's state with 'cbp upgrade' next to a fresh build of the same state (issue 37).

URLCount (``flows/url_count.yaml``, vectorised translator ``flows/url_count_vec.yaml`` unless
``--row-wise``) builds ``--keys`` keys (default 1,000,000) in one epoch with ``partitions: 4``; then

- **upgrade 4 -> 8**: ``Pipeline.upgrade()`` with the YAML at ``partitions: 8`` (one pass over the
  state: a Spark task per old partition reads and re-routes its rows, a task per new partition
  sorts and writes its file and index; one journal commit);
- **fresh build at 8**: a new home with ``partitions: 8`` fed the same records, one epoch.

It checks that both give the same state, prints a table (median of ``--repeat`` runs, default 1),
and writes ``bench/out/repartition.{md,json,png}``. One SparkSession for all.

    .venv/bin/python bench/repartition.py                 # 1M keys (~3 min on 2 cores)
    .venv/bin/python bench/repartition.py --keys 100000
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(ROOT))
OUT = BENCH / "out"


def _yaml(src: Path, partitions: int, workdir: Path) -> Path:
    """A copy of ``src`` beside it (translators resolve there) with the stage's partition count."""
    text = src.read_text().replace("partitions: 4", f"partitions: {partitions}")
    path = src.parent / f".bench-repartition-{os.getpid()}-{partitions}-{src.name}"
    path.write_text(text)
    return path


def _state(p) -> dict:  # type: ignore[no-untyped-def]
    rows = p.state("url_count")
    return {r["url"]: r["count"] for r in rows}


def one(keys: int, src: Path, tmp: Path, spark) -> dict[str, float]:  # type: ignore[no-untyped-def]
    import cbp

    urls = pa.table({"url": [f"http://host{i % 997}/p/{i}" for i in range(keys)]})
    y4, y8 = _yaml(src, 4, tmp), _yaml(src, 8, tmp)
    try:
        home = str(tmp / f"h{time.time_ns()}")
        p = cbp.load(y4, home=home, spark=spark)
        p.feed("urls", urls)
        t0 = time.perf_counter()
        p.run()
        build4 = time.perf_counter() - t0
        q = cbp.load(y8, home=home, spark=spark)
        t0 = time.perf_counter()
        q.upgrade()
        upgrade = time.perf_counter() - t0
        fresh_home = str(tmp / f"f{time.time_ns()}")
        f = cbp.load(y8, home=fresh_home, spark=spark)
        f.feed("urls", urls)
        t0 = time.perf_counter()
        f.run()
        build8 = time.perf_counter() - t0
        a, b = _state(q), _state(f)
        assert a == b and len(a) == keys, "the upgraded state differs from the fresh build"
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(fresh_home, ignore_errors=True)
        return {"build_4": build4, "upgrade_4_to_8": upgrade, "build_8": build8}
    finally:
        y4.unlink(missing_ok=True)
        y8.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--row-wise", action="store_true", help="the row-wise translator (flows/url_count.yaml)")
    args = ap.parse_args()
    from cbp.engine.driver.session import get_spark

    spark = get_spark()
    src = ROOT / "flows" / ("url_count.yaml" if args.row_wise else "url_count_vec.yaml")
    tmp = Path(tempfile.mkdtemp(prefix="cbp-bench-repartition-"))
    try:
        runs = [one(args.keys, src, tmp, spark) for _ in range(args.repeat)]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    rows = [
        ("fresh build, 4 partitions (one epoch)", med["build_4"]),
        ("upgrade 4 -> 8 partitions", med["upgrade_4_to_8"]),
        ("fresh build, 8 partitions (one epoch)", med["build_8"]),
    ]
    table = [f"| what ({args.keys:,} keys, {src.name}) | seconds |", "|---|---:|"] + [
        f"| {w} | {s:.1f} |" for w, s in rows
    ]
    print("\n".join(table))
    OUT.mkdir(exist_ok=True)
    (OUT / "repartition.md").write_text("\n".join(table) + "\n")
    (OUT / "repartition.json").write_text(
        json.dumps({"keys": args.keys, "translator": src.name, "runs": runs, "median": med}, indent=2)
    )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3))
    ax.barh([w for w, _ in rows], [s for _, s in rows], color=["#999", "#2a7", "#999"])
    ax.set_xlabel("seconds")
    ax.set_title(f"Repartitioning {args.keys:,} keys vs a fresh build")
    fig.tight_layout()
    fig.savefig(OUT / "repartition.png", dpi=120)


if __name__ == "__main__":
    main()
