#!/usr/bin/env python
"""Small epochs on a classic driver and on a Spark Connect server, side by side (issue 49).

URLCount (``flows/url_count.yaml``, direct mode) with ``--keys`` state keys built in one epoch, then
``--epochs`` epochs of ``--increment`` records (half stored keys, half new), in each mode, each mode in
a process of its own (a Connect session cannot share a process with a classic one):

- ``classic``: ``local[2]`` in the process, the small epoch's claiming job on RDDs (``parallelize``);
- ``classic-range``: the same, that job as ``spark.range(0, n, 1, n).mapInArrow`` (the DataFrame job
  a Connect session runs; ``cbp.engine.driver.smallepoch.CLAIM_BY_RANGE``);
- ``connect``: a Connect session to a server in front of ``local[2]`` (``--url``, else one started
  here by ``scripts/connect`` and stopped at the end).

It prints each mode's median epoch time and state-cache hits and writes ``bench/out/connect_epochs.json``.

    .venv/bin/python bench/connect_epochs.py                      # 10k keys, 8 epochs of 1k records
    .venv/bin/python bench/connect_epochs.py --url sc://127.0.0.1:15002 --modes connect
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MODES = ("classic", "classic-range", "connect")


def child(mode: str, url: str, keys: int, increment: int, epochs: int, home: str) -> dict[str, Any]:
    """One mode's run (in its own process): build the home, time ``epochs`` small epochs."""
    sys.path.insert(0, str(ROOT / "flows"))
    import cbp
    from cbp.engine.driver import smallepoch

    if mode == "connect":
        from pyspark.sql import SparkSession

        spark = SparkSession.builder.remote(url).getOrCreate()
    else:
        from cbp.engine.driver.session import get_spark

        smallepoch.CLAIM_BY_RANGE = mode == "classic-range"
        spark = get_spark(master="local[2]")
    p = cbp.Pipeline(str(ROOT / "flows" / "url_count.yaml"), home, spark=spark)
    p.feed("urls", [{"url": f"u{i}"} for i in range(keys)])
    p.run()
    seconds, hits, lookups = [], 0, 0
    for e in range(epochs):
        half = increment // 2
        p.feed(
            "urls",
            [{"url": f"u{(e * half + i) % keys}"} for i in range(half)] + [{"url": f"n{e}-{i}"} for i in range(half)],
        )
        t0 = time.perf_counter()
        reps = p.run()
        seconds.append(time.perf_counter() - t0)
        hits += sum(r.cache_hits for r in reps)
        lookups += sum(r.cache_lookups for r in reps)
    return {
        "mode": mode,
        "seconds": seconds,
        "median": statistics.median(seconds),
        "cache_hits": hits,
        "cache_lookups": lookups,
    }


def _server(state: str) -> tuple[str, list[str]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = [sys.executable, str(ROOT / "scripts" / "connect.py")]
    env = {**os.environ, "CBP_CONNECT_STATE": state}
    subprocess.run([*script, "start", "--port", str(port)], env=env, check=True)
    return f"sc://127.0.0.1:{port}", script


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--increment", type=int, default=1_000)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--url", help="a running Spark Connect server (default: start one)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--home", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.url or "", args.keys, args.increment, args.epochs, args.home)))
        return
    modes = args.modes.split(",")
    work = tempfile.mkdtemp(prefix="cbp-connect-bench-")
    url, script = args.url, None
    if "connect" in modes and not url:
        url, script = _server(os.path.join(work, "server"))
    results = []
    try:
        for mode in modes:
            cmd = [sys.executable, __file__, "--child", mode, "--home", os.path.join(work, mode)]
            cmd += ["--keys", str(args.keys), "--increment", str(args.increment), "--epochs", str(args.epochs)]
            out = subprocess.run(cmd + (["--url", url] if url else []), capture_output=True, text=True, check=False)
            if out.returncode:
                sys.exit(f"{mode} failed:\n{out.stderr[-3000:]}")
            results.append(json.loads(out.stdout.strip().splitlines()[-1]))
            r = results[-1]
            rate = r["cache_hits"] / r["cache_lookups"] if r["cache_lookups"] else float("nan")
            print(
                f"{mode:14} median epoch {r['median']:.3f} s  "
                f"cache hits {r['cache_hits']}/{r['cache_lookups']} ({rate:.0%})  "
                f"epochs {' '.join(f'{s:.2f}' for s in r['seconds'])}",
                flush=True,
            )
    finally:
        if script is not None:
            subprocess.run([*script, "stop"], env={**os.environ, "CBP_CONNECT_STATE": os.path.join(work, "server")})
    (ROOT / "bench" / "out").mkdir(exist_ok=True)
    (ROOT / "bench" / "out" / "connect_epochs.json").write_text(
        json.dumps({"args": vars(args), "results": results}, indent=1)
    )


if __name__ == "__main__":
    main()
