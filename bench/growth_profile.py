#!/usr/bin/env python
"""Where an old home's ``feed()`` spends more than a young one's: cProfile with a CPU clock.

Two URLCount homes in one process and Spark session (as ``bench/controller_growth.py`` runs them,
the same retention): an *old* one run ``--old`` rounds of feed + run, a *young* one ``--young``
rounds; then ``--feeds`` more rounds on each, alternating, with only their ``feed()`` calls
profiled (``time.process_time``: CPU seconds, not the machine's load). Prints each home's CPU per
feed and the functions whose cumulative CPU differs most between the two, and with ``--stats DIR``
writes both profiles (``pstats`` files) there.

    .venv/bin/python bench/growth_profile.py --old 300 --young 20 --feeds 60
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from controller_growth import FLOW, Feeds  # bench/ is sys.path[0]
from url_count_bench import YAML, log


def cumulative(prof: cProfile.Profile) -> dict[str, tuple[float, int]]:
    """Cumulative CPU seconds and primitive calls per function (``file:line(name)``)."""
    stats = pstats.Stats(prof)
    out: dict[str, tuple[float, int]] = {}
    for (file, line, name), (cc, _nc, _tt, ct, _callers) in stats.stats.items():  # type: ignore[attr-defined]
        out[f"{os.path.relpath(file) if file.startswith('/') else file}:{line}({name})"] = (ct, cc)
    return out


class Home:
    """A URLCount home of this process, fed and run round after round."""

    def __init__(self, spark: Any, name: str, seed: int, retention: int) -> None:
        import cbp

        self.dir = Path(tempfile.mkdtemp(prefix=f"cbp-growth-profile-{name}-"))
        self.p = cbp.load(YAML, home=str(self.dir), spark=spark)
        self.p.set_retention(retention, None)
        self.feeds, self.name, self.n = Feeds(seed, 3), name, 0
        self.prof = cProfile.Profile(time.process_time)
        self.cpu = 0.0

    def round(self, profiled: bool) -> None:
        self.n += 1
        records = self.feeds.next()
        c0 = time.process_time()
        if profiled:
            self.prof.enable()
        self.p.feed(FLOW, records, feed_id=f"{self.name}-{self.n}")
        if profiled:
            self.prof.disable()
            self.cpu += time.process_time() - c0
        self.p.run()

    def files(self) -> int:
        return sum(len(f) for _, _, f in os.walk(self.dir))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", type=int, default=300, help="rounds the old home runs first (default 300)")
    ap.add_argument("--young", type=int, default=20, help="rounds the young home runs first (default 20)")
    ap.add_argument("--feeds", type=int, default=60, help="profiled rounds on each (default 60)")
    ap.add_argument("--retention-epochs", type=int, default=100, help="as controller_growth.py (default 100)")
    ap.add_argument("--top", type=int, default=25, help="functions listed (default 25)")
    ap.add_argument("--stats", default=None, help="write old.pstats and young.pstats into this directory")
    args = ap.parse_args(argv)
    from cbp.engine.driver.session import get_spark

    spark = get_spark()
    old = Home(spark, "old", 42, args.retention_epochs)
    young = Home(spark, "young", 43, args.retention_epochs)
    try:
        for _ in range(args.old):
            old.round(False)
        for _ in range(args.young):
            young.round(False)
        log(f"old home: {old.n} rounds, {old.files()} files; young: {young.n} rounds, {young.files()} files")
        for _ in range(args.feeds):
            old.round(True)
            young.round(True)
        report(old, young, args)
    finally:
        for h in (old, young):
            shutil.rmtree(h.dir, ignore_errors=True)
    return 0


def report(old: Home, young: Home, args: argparse.Namespace) -> None:
    n = args.feeds
    print(
        f"feed() CPU: old {old.cpu / n * 1e3:.2f} ms, young {young.cpu / n * 1e3:.2f} ms, "
        f"old/young {old.cpu / young.cpu:.2f}x ({n} feeds each)"
    )
    if args.stats:
        os.makedirs(args.stats, exist_ok=True)
        old.prof.dump_stats(os.path.join(args.stats, "old.pstats"))
        young.prof.dump_stats(os.path.join(args.stats, "young.pstats"))
    a, b = cumulative(old.prof), cumulative(young.prof)
    diff = sorted(set(a) | set(b), key=lambda k: -abs(a.get(k, (0, 0))[0] - b.get(k, (0, 0))[0]))
    print(f"{'old ms':>9} {'young ms':>9} {'old calls':>9} {'young calls':>11}  function (cumulative CPU, {n} feeds)")
    for k in diff[: args.top]:
        (ta, ca), (tb, cb) = a.get(k, (0.0, 0)), b.get(k, (0.0, 0))
        print(f"{ta * 1e3:9.1f} {tb * 1e3:9.1f} {ca:9d} {cb:11d}  {k}")


if __name__ == "__main__":
    sys.exit(main())
