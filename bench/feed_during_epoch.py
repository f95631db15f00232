"""How long a feed takes while a stage epoch's Spark job runs (issue 47, item 3).

A word count whose translator holds its epoch's job at a gate for ``--hold`` seconds; while it
is held, another Pipeline object on the same home feeds ``--feeds`` times, one after another, and
``status()`` is read. Printed as JSON: each feed's seconds, the status read's, and whether each
returned before the job was let go. With the home's mutation lock held across the whole epoch a
feed takes about ``--hold`` seconds; held only to plan and to commit, milliseconds.

    .venv/bin/python bench/feed_during_epoch.py --hold 20 --feeds 5
    PYTHONPATH=/tmp/old .venv/bin/python bench/feed_during_epoch.py   # a checkout of the tree before
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

YAML = """
pipeline: counter
flows:
  words: {external: true, schema: {w: string}}
stages:
  count:
    translator: gated_count:count
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
"""

MODULE = """
import os, time

def count(key, state, words, out):
    here = os.path.dirname(__file__)
    open(os.path.join(here, "started"), "a").close()
    while not os.path.exists(os.path.join(here, "go")):
        time.sleep(0.05)
    prev = next(state, None)
    out.state.write({"w": key, "n": sum(1 for _ in words) + (prev["n"] if prev else 0)})
"""


def measure(hold: float, feeds: int) -> dict[str, Any]:
    import cbp

    d = Path(tempfile.mkdtemp(prefix="cbp-feed-during-epoch-"))
    (d / "gated_count.py").write_text(MODULE)
    (d / "pipeline.yaml").write_text(YAML)
    home = str(d / "home")
    runner = cbp.load(d / "pipeline.yaml", home=home)
    runner.feed("words", [{"w": "a"}, {"w": "b"}])
    run = threading.Thread(target=runner.run)
    run.start()
    while not (d / "started").exists():
        time.sleep(0.05)
    released: list[float] = []
    feeder = cbp.load(d / "pipeline.yaml", home=home)
    took: list[tuple[float, float]] = []  # (seconds, when it returned)

    def feed_all() -> None:
        for i in range(feeds):
            t0 = time.perf_counter()
            feeder.feed("words", [{"w": f"w{i}"}])
            took.append((time.perf_counter() - t0, time.perf_counter()))
        t0 = time.perf_counter()
        feeder.status()
        took.append((time.perf_counter() - t0, time.perf_counter()))

    f = threading.Thread(target=feed_all)
    f.start()
    time.sleep(hold)
    released.append(time.perf_counter())
    (d / "go").touch()
    f.join()
    run.join()
    runner.run()
    state = {r["w"]: r["n"] for r in runner.state("count")}
    shutil.rmtree(d, ignore_errors=True)
    return {
        "hold_s": hold,
        "feed_s": [round(s, 3) for s, _ in took[:-1]],
        "feed_median_s": round(statistics.median(s for s, _ in took[:-1]), 3),
        "feed_max_s": round(max(s for s, _ in took[:-1]), 3),
        "status_s": round(took[-1][0], 3),
        "returned_before_release": [when < released[0] for _, when in took],
        "state_exact": state == {"a": 1, "b": 1, **{f"w{i}": 1 for i in range(feeds)}},
        "cbp": cbp.__file__,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hold", type=float, default=20.0, help="seconds the epoch's job is held at its gate")
    ap.add_argument("--feeds", type=int, default=5, help="feeds made while it is held")
    args = ap.parse_args(argv)
    json.dump(measure(args.hold, args.feeds), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
