#!/usr/bin/env python
"""Small epochs routed by a RouteBy function: one Spark job (the task routes, then runs the partitions,
``cbp.engine.driver.routeandrun``) against two (a routing job, then the run job: ``ROUTE_AND_RUN = 0``),
alternating epoch by epoch in one process, on a classic ``local[2]`` driver or (``--remote URL
--server-pid PID``) a Spark Connect server (``scripts/connect start``).

URLCount (``flows/url_count.yaml``) with ``route_by`` a function returning the URL, ``--keys`` state keys,
then ``--epochs`` epochs of ``--increment`` records (half stored keys, half new), the first ``--warmup`` not
counted: median epoch wall and CPU seconds (this process's tree, and the server's on Connect), state-cache hits.

    .venv/bin/python bench/routeby_jobs.py
    .venv/bin/python bench/routeby_jobs.py --remote sc://127.0.0.1:15002 --server-pid 1234
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from connect_epochs import _tree_cpu  # noqa: E402 - the benchmark beside this one


def _pipeline(work: str) -> str:
    """URLCount routed by a function (a module of its own in ``work``); the YAML's path."""
    flows = ROOT / "flows"
    yaml = (flows / "url_count.yaml").read_text()
    yaml = yaml.replace("route_by: url", "route_by: 'rb_url_count:url_of'")
    yaml = yaml.replace("url_count:count_urls", "rb_url_count:count_urls")
    module = (flows / "url_count.py").read_text() + "\n\ndef url_of(r):\n    return r['url']\n"
    Path(work, "rb_url_count.py").write_text(module)
    Path(work, "p.yaml").write_text(yaml)
    sys.path.insert(0, work)
    return str(Path(work, "p.yaml"))


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--remote", help="a Spark Connect server's sc:// URL (default: a classic local[2] driver)")
    ap.add_argument("--server-pid", type=int, default=0, help="the server's pid (its CPU seconds counted)")
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--increment", type=int, default=500)
    ap.add_argument("--epochs", type=int, default=48)
    ap.add_argument("--warmup", type=int, default=8)
    args = ap.parse_args()
    import cbp
    from cbp.engine.driver import smallepoch

    if args.remote:
        from cbp.engine.driver.session import connect_spark

        spark = connect_spark(args.remote)
    else:
        from cbp.engine.driver.session import get_spark

        os.environ.setdefault("CBP_SPARK_MASTER", "local[2]")
        spark = get_spark()
    roots = [os.getpid()] + ([args.server_pid] if args.server_pid else [])
    work = tempfile.mkdtemp(prefix="cbp-routeby-jobs-")
    p = cbp.Pipeline(_pipeline(work), str(Path(work, "home")), spark=spark)
    p.feed("urls", [{"url": f"u{i}"} for i in range(args.keys)])
    p.run()
    wall: dict[str, list[float]] = {"one job": [], "two jobs": []}
    cpu: dict[str, list[float]] = {"one job": [], "two jobs": []}
    hits = {"one job": [0, 0], "two jobs": [0, 0]}
    half, limit = args.increment // 2, smallepoch.ROUTE_AND_RUN
    for e in range(args.epochs):
        mode = "two jobs" if e % 2 else "one job"
        smallepoch.ROUTE_AND_RUN = 0 if e % 2 else limit
        stored = [{"url": f"u{(e * half + i) % args.keys}"} for i in range(half)]
        p.feed("urls", stored + [{"url": f"n{e}-{i}"} for i in range(half)])
        c0, t0 = sum(_tree_cpu(r) for r in roots), time.perf_counter()
        reports = p.run()
        if e >= args.warmup:
            wall[mode].append(time.perf_counter() - t0)
            cpu[mode].append(sum(_tree_cpu(r) for r in roots) - c0)
            hits[mode][0] += sum(r.cache_hits for r in reports)
            hits[mode][1] += sum(r.cache_lookups for r in reports)
    out = {
        m: {
            "median_wall": round(statistics.median(wall[m]), 3),
            "median_cpu": round(statistics.median(cpu[m]), 3),
            "epochs": len(wall[m]),
            "cache_hits": f"{hits[m][0]}/{hits[m][1]}",
        }
        for m in wall
    }
    one, two = out["one job"], out["two jobs"]
    ratio = {"wall": one["median_wall"] / two["median_wall"], "cpu": one["median_cpu"] / two["median_cpu"]}
    print(json.dumps({"mode": "connect" if args.remote else "classic", **out}))
    print(f"one job / two jobs: {ratio['wall']:.2f}x (wall), {ratio['cpu']:.2f}x (CPU)")


if __name__ == "__main__":
    main()
