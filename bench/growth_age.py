#!/usr/bin/env python
"""The home's age alone: ``feed()`` CPU on copies of URLCount homes of different ages, in one process.

``bench/controller_growth.py`` compares an old home with a young one in a process that has run
for an hour on a shared machine; here each home given (``--homes``: directories of
``flows/url_count.yaml`` homes, e.g. copies of the benchmark's home taken at several rounds, or
``controller_growth.py --keep``) is copied afresh ``--reps`` times, and each copy is fed
``--feeds`` tiny feeds (3 records, as the benchmark's, each with a feed id) in turn with the
others' copies, without Spark and without ``run()``: the process, the machine's load and the feeds
are the same for every home, only its files differ. Prints each home's median ``feed()`` CPU
(``time.process_time``) and its ratio to the first home's.

A copy of a live home must be taken under its lock (an ``flock`` on ``<home>/_cbp/lock``):

    .venv/bin/python bench/growth_age.py --homes /tmp/young,/tmp/r280,/tmp/r1800 --reps 6 --feeds 30
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from controller_growth import FLOW, Feeds  # bench/ is sys.path[0]
from url_count_bench import YAML


def one_rep(homes: list[str], rep: int, feeds: int, cpu: dict[str, list[float]]) -> None:
    """Fresh copies of every home, fed ``feeds`` times each, in turn (the order reversed every other feed)."""
    import cbp

    made: dict[str, tuple[Any, Feeds, str]] = {}
    try:
        for h in homes:
            d = tempfile.mkdtemp(prefix="cbp-growth-age-")
            shutil.copytree(h, f"{d}/h", symlinks=True, ignore=shutil.ignore_patterns("runner.lock"))
            p = cbp.load(YAML, home=f"{d}/h")
            f = Feeds(300 + rep, 3)
            p.feed(FLOW, f.next(), feed_id=f"age-warm-{rep}")  # loads the tables, finishes a pending change
            made[h] = (p, f, d)
        for i in range(feeds):
            for h in homes if i % 2 == 0 else homes[::-1]:
                p, f, _d = made[h]
                records = f.next()
                c0 = time.process_time()
                p.feed(FLOW, records, feed_id=f"age-{rep}-{i}")
                cpu[h].append(time.process_time() - c0)
    finally:
        for _p, _f, d in made.values():
            shutil.rmtree(d, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--homes", required=True, help="comma-separated home directories; the first is the reference")
    ap.add_argument("--reps", type=int, default=6, help="fresh copies of each home (default 6)")
    ap.add_argument("--feeds", type=int, default=30, help="feeds per copy (default 30)")
    args = ap.parse_args(argv)
    homes = [str(Path(h).resolve()) for h in args.homes.split(",") if h]
    missing = [h for h in homes if not (Path(h) / "_cbp").is_dir()]
    if missing:
        ap.error(f"not a cbp home: {', '.join(missing)}")
    cpu: dict[str, list[float]] = {h: [] for h in homes}
    for rep in range(args.reps):
        one_rep(homes, rep, args.feeds, cpu)
    base = statistics.median(cpu[homes[0]])
    for h in homes:
        m = statistics.median(cpu[h])
        print(
            f"{h}: feed() CPU median {m * 1e3:.2f} ms, mean {statistics.mean(cpu[h]) * 1e3:.2f} ms, "
            f"n={len(cpu[h])}, {m / base:.3f}x the first"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
