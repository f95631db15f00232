#!/usr/bin/env python
"""cProfile (CPU clock) of a TPC-H query's pipeline's first sync: ``Pipeline.sync()`` in a fresh home.

The first sync lands every table the query reads as of its current version (for Q6: ``lineitem``).
Each run prints the sync's wall and CPU seconds and the steps that cost (reading the version's rows,
conforming them, hashing, writing the landed increment), and writes the profile to ``OUT/sync.pstats``.
``--tree`` profiles the ``cbp`` of another checkout (a ``git archive`` of an older commit, say), so that
two trees can be compared side by side on the same data:

    .venv/bin/python bench/tpch_data.py /tmp/tpch --sf 0.1   # the tables, then one RF1, RF2 and update
    .venv/bin/python bench/sync_profile.py /tmp/tpch q6 /tmp/prof-after
    .venv/bin/python bench/sync_profile.py /tmp/tpch q6 /tmp/prof-before --tree /tmp/before
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import sys
import time
from pathlib import Path

#: the steps reported: (label, file name ending, function name)
STEPS = (
    ("read the version's rows", "deltasource.py", "rows"),
    ("conform to the stored types", "arrowrecords.py", "conform"),
    ("hash the records", "feeds.py", "content_hash"),
    ("write the landed increment", "tables.py", "write_parquet"),
    ("imports (once per process)", "<frozen importlib._bootstrap>", "_find_and_load"),
)


def steps(stats: pstats.Stats) -> dict[str, float]:
    """CPU seconds of each of :data:`STEPS` (cumulative) in a profile."""
    out = dict.fromkeys((label for label, _, _ in STEPS), 0.0)
    raw = stats.stats  # type: ignore[attr-defined]  # pstats' own table: (file, line, name) -> (.., .., .., cum, ..)
    for (path, _line, name), row in raw.items():
        for label, ending, fn in STEPS:
            if name == fn and path.endswith(ending):
                out[label] = max(out[label], row[3])  # the outermost call: recursion counts once
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", help="the TPC-H Delta tables (bench/tpch_data.py)")
    ap.add_argument("query", help="e.g. q6")
    ap.add_argument("out", help="a directory for the pipeline, its home and the profile (emptied first)")
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]), help="the checkout whose cbp runs")
    args = ap.parse_args(argv)
    sys.path.insert(0, os.path.join(args.tree, "bench"))
    sys.path.insert(0, args.tree)
    import tpch_data

    import cbp

    work = Path(args.out)
    shutil.rmtree(work, ignore_errors=True)
    yaml = tpch_data.write_pipeline(args.data, work / "pipeline", [args.query])
    p = cbp.Pipeline(str(yaml), str(work / "home"))
    prof = cProfile.Profile(time.process_time)
    t0, c0 = time.perf_counter(), time.process_time()
    prof.enable()
    p.sync()
    prof.disable()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    prof.dump_stats(str(work / "sync.pstats"))
    print(f"{cbp.__file__}: {args.query}'s sync: {wall:.2f} s of wall, {cpu:.2f} CPU s, load {os.getloadavg()[0]:.1f}")
    for label, secs in steps(pstats.Stats(prof)).items():
        print(f"  {label:32s} {secs:6.3f} CPU s")


if __name__ == "__main__":
    main()
