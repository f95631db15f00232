"""Rewind and replay against a rebuild from scratch, on flows/url_count.yaml.

A home runs E epochs (one feed of R URL records each). Then, for k in K, a copy of it is
rewound to epoch E-k and the k feeds since are replayed (one ``run``); next to that, a fresh
home is fed all E feeds and run once, which is what a user without rewind does. Prints a table
(seconds of the rewind itself, of the replay, and of the rebuild), checks that every replay
ends with the rebuild's state, and writes bench/rewind_replay.png.

    .venv/bin/python bench/rewind_replay.py [--epochs 8] [--records 20000] [--urls 50000]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cbp  # noqa: E402

YAML = ROOT / "flows" / "url_count.yaml"


def _feeds(epochs: int, records: int, urls: int) -> list[list[dict[str, str]]]:
    rng = random.Random(1)
    return [
        [{"url": f"http://h{rng.randrange(urls) % 97}/p{rng.randrange(urls)}"} for _ in range(records)]
        for _ in range(epochs)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--urls", type=int, default=50000)
    ap.add_argument("--back", type=int, nargs="+", default=[1, 4])
    a = ap.parse_args()
    from cbp.engine.driver.session import get_spark

    spark = get_spark()
    feeds = _feeds(a.epochs, a.records, a.urls)
    work = Path(tempfile.mkdtemp(prefix="cbp-rewind-bench-"))
    try:
        base = str(work / "base")
        p = cbp.load(YAML, base, spark=spark)
        for f in feeds:
            p.feed("urls", f)
            p.run()
        copies = sum(
            os.path.getsize(os.path.join(d, n))
            for d, _, ns in os.walk(os.path.join(base, "_cbp/history/snapshots"))
            for n in ns
        )
        t0 = time.perf_counter()
        fresh = cbp.load(YAML, str(work / "fresh"), spark=spark)
        for f in feeds:
            fresh.feed("urls", f)
        fresh.run()
        rebuild = time.perf_counter() - t0
        want = fresh.state("url_count")
        rows = []
        for k in a.back:
            home = str(work / f"back{k}")
            shutil.copytree(base, home)
            q = cbp.load(YAML, home, spark=spark)
            t0 = time.perf_counter()
            rep = q.rewind(a.epochs - k)
            t_rewind = time.perf_counter() - t0
            t0 = time.perf_counter()
            q.run()
            t_replay = time.perf_counter() - t0
            assert q.state("url_count") == want, f"replay after rewinding {k} epoch(s) differs from the rebuild"
            rows.append((k, sum(len(e) for e in rep.undone.values()), t_rewind, t_replay, rebuild))
        print(
            f"url_count: {a.epochs} epochs of {a.records} records; snapshot copies kept for rewind: "
            f"{copies / a.epochs:.0f} bytes per epoch"
        )
        print(
            f"{'epochs back':>11} {'undone':>6} {'rewind s':>9} {'replay s':>9} {'rewind+replay s':>16} "
            f"{'rebuild s':>10}"
        )
        for k, n, tr, tp, rb in rows:
            print(f"{k:>11} {n:>6} {tr:>9.2f} {tp:>9.2f} {tr + tp:>16.2f} {rb:>10.2f}")
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        xs = range(len(rows))
        ax.bar([x - 0.2 for x in xs], [r[2] + r[3] for r in rows], 0.4, label="rewind + replay")
        ax.bar([x + 0.2 for x in xs], [r[4] for r in rows], 0.4, label="rebuild from scratch")
        ax.set_xticks(list(xs), [f"{r[0]} epoch(s) back" for r in rows])
        ax.set_ylabel("seconds")
        ax.set_title(f"url_count, {a.epochs} epochs x {a.records} records")
        ax.legend()
        fig.tight_layout()
        fig.savefig(ROOT / "bench" / "rewind_replay.png", dpi=100)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
