#!/usr/bin/env python
"""URLCount on a cluster vs local: warm epoch time and state-cache hit rate, three setups in one run.

Setups, each in its own Python subprocess (one SparkSession per process):

* ``local``: ``local[2]``, home on the local disk;
* ``cluster``: the two-worker standalone cluster of ``scripts/cluster`` (one 1-core executor per
  worker), same kind of home; the script starts the cluster if it is not up and stops it if it did;
* ``cluster-s3``: the cluster with an ``s3://`` home on its moto S3 server;
* with ``--unplaced``, also ``cluster-unplaced``: the cluster with ``CBP_PLACEMENT=0`` (Spark places
  the tasks itself), to show what keeping partition p on its executor is worth.

Each setup builds URLCount state with ``--keys`` distinct URLs (chunks of ``--chunk`` keys, one
epoch each), runs one unmeasured warm-up epoch and ``--epochs`` measured epochs of ``--increment``
records (half existing keys, half new, the same seeded increments for every setup; real URLs as in
``bench/url_count_bench.py``), all in one driver process, so the executors' state caches live across
the epochs. It prints a markdown table (also ``bench/out/cluster.md``) and writes every
measurement to ``bench/out/cluster.json`` and a plot to ``bench/out/cluster.png``.

    .venv/bin/python bench/cluster.py                                  # 1M keys, 100k per epoch
    .venv/bin/python bench/cluster.py --keys 50000 --increment 10000   # quick
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
YAML = ROOT / "flows" / "url_count.yaml"
CLUSTER = ROOT / "scripts" / "cluster"
ENV_SH = ROOT / "state" / "cluster" / "env.sh"
SETUPS = ("local", "cluster", "cluster-s3")
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------- one setup (child)
def child(args: argparse.Namespace) -> int:
    """Build the state and measure the epochs of one setup; write the measurements as JSON."""
    from url_count_bench import Keys, increments, load_vocabulary

    import cbp
    from cbp.engine.driver.session import get_spark

    vocab, source = load_vocabulary()
    keys = Keys(vocab)
    p = cbp.load(str(YAML), args.home, spark=get_spark())
    t0 = time.perf_counter()
    for a in range(0, args.keys, args.chunk):
        p.feed("urls", keys.records(_arange(a, min(a + args.chunk, args.keys))))
        p.run()
    build = time.perf_counter() - t0
    epochs = []
    for i, ids in enumerate(increments(args.keys, args.increment, args.epochs + 1, seed=42)):
        p.feed("urls", keys.records(ids))
        reports = p.run()
        if len(reports) != 1:
            raise RuntimeError(f"expected one epoch per increment, got {[r.line() for r in reports]}")
        r = reports[0]
        epochs.append(
            {
                "epoch": r.epoch,
                "warmup": i == 0,
                "seconds": r.seconds,
                "records_in": r.records_in,
                "keys_read": r.keys_read,
                "cache_hits": r.cache_hits,
                "cache_lookups": r.cache_lookups,
                "cache_hit_rate": r.cache_hit_rate,
                "executors": {str(k): v for k, v in r.executors.items()},
                "phases": r.phases,
            }
        )
        print(r.line(), flush=True)
    Path(args.out).write_text(
        json.dumps(
            {"build_seconds": build, "epochs": epochs, "source": source, "master": get_spark().sparkContext.master}
        )
    )
    return 0


def _arange(a: int, b: int) -> Any:
    import numpy as np

    return np.arange(a, b)


# ---------------------------------------------------------------------------------- the driver
def _cluster_env() -> dict[str, str]:
    """The driver environment ``state/cluster/env.sh`` sets."""
    out = subprocess.run(
        ["bash", "-c", f"source {shlex.quote(str(ENV_SH))} && env -0"], capture_output=True, check=True
    )
    return dict(kv.split("=", 1) for kv in out.stdout.decode().split("\0") if "=" in kv)


def _cluster_up() -> bool:
    """Start the cluster unless it runs; whether this call started it."""
    if ENV_SH.exists() and subprocess.run([str(CLUSTER), "status"], capture_output=True).returncode == 0:
        return False
    log("starting the cluster (scripts/cluster up)")
    env = {**os.environ, "CBP_PYTHON": os.environ.get("CBP_PYTHON", sys.executable)}
    subprocess.run([str(CLUSTER), "up"], check=True, env=env)
    return True


def run_setup(name: str, args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """One setup in its own Python subprocess; its measurements."""
    env = dict(os.environ)
    if name == "local":
        env["CBP_SPARK_MASTER"] = "local[2]"
        home = str(work / "home-local")
    else:
        env.update(_cluster_env())
        home = (
            f"s3://{env['CBP_S3_BUCKET']}/bench-{uuid.uuid4().hex[:8]}"
            if name == "cluster-s3"
            else str(work / f"home-{name}")
        )
        if name == "cluster-unplaced":
            env["CBP_PLACEMENT"] = "0"
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    out = work / f"{name}.json"
    cmd = [
        sys.executable,
        str(Path(__file__)),
        "--child",
        "--home",
        home,
        "--out",
        str(out),
        "--keys",
        str(args.keys),
        "--increment",
        str(args.increment),
        "--epochs",
        str(args.epochs),
        "--chunk",
        str(args.chunk),
    ]
    log(f"{name}: home {home}")
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"setup {name} failed:\n{proc.stderr[-3000:]}")
    for line in proc.stdout.splitlines():
        log(f"{name}: {line}")
    res = json.loads(out.read_text())
    res.update(setup=name, home=home, wall=time.perf_counter() - t0)
    return res


def summarize(res: dict[str, Any]) -> dict[str, Any]:
    """Median warm epoch, hit rate, and whether partition -> executor stayed the same."""
    warm = [e for e in res["epochs"] if not e["warmup"]]
    secs = [e["seconds"] for e in warm]
    hits, looks = sum(e["cache_hits"] for e in warm), sum(e["cache_lookups"] for e in warm)
    maps = [e["executors"] for e in res["epochs"]]
    return {
        "setup": res["setup"],
        "median": statistics.median(secs),
        "min": min(secs),
        "max": max(secs),
        "hit_rate": hits / looks if looks else None,
        "executors": sorted(set(v for m in maps for v in m.values())),
        "stable": all(m == maps[0] for m in maps),
        "build": res["build_seconds"],
        "map": maps[-1],
    }


def report(summaries: list[dict[str, Any]], args: argparse.Namespace, source: str) -> str:
    base = next((s["median"] for s in summaries if s["setup"] == "local"), None)
    lines = [
        "# URLCount on the cluster vs local: warm epoch time and state-cache hit rate",
        "",
        f"- command: `{' '.join(['.venv/bin/python', 'bench/cluster.py'] + sys.argv[1:])}`",
        f"- date: {_dt.datetime.now().isoformat(timespec='seconds')}; machine: {os.cpu_count()} cores; data: {source}",
        f"- state: {args.keys:,} keys (built in chunks of {args.chunk:,}); increment {args.increment:,} records per "
        f"epoch "
        f"(half existing keys, half new, seed 42); 1 unmeasured warm-up epoch, then {args.epochs} measured; one driver "
        f"process per setup",
        "- epoch s = EpochReport.seconds: median [min-max] of the measured epochs; hit rate = state-file reads served "
        "from the "
        "executors' caches / all state-file reads, over the measured epochs; map stable = partition -> executor the "
        "same in every epoch",
        "",
        "| setup | epoch s | vs local | cache hit rate | executors | map stable | build s |",
        "|---|---:|---:|---:|---|:---:|---:|",
    ]
    for s in summaries:
        ratio = f"{s['median'] / base:.2f}x" if base else "-"
        rate = f"{s['hit_rate']:.0%}" if s["hit_rate"] is not None else "-"
        lines.append(
            f"| {s['setup']} | {s['median']:.2f} [{s['min']:.2f}-{s['max']:.2f}] | {ratio} | {rate} | "
            f"{', '.join(s['executors'])} | {'yes' if s['stable'] else 'no'} | {s['build']:.0f} |"
        )
    return "\n".join(lines) + "\n"


def plot(summaries: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    names = [s["setup"] for s in summaries]
    a.bar(
        names,
        [s["median"] for s in summaries],
        yerr=[[s["median"] - s["min"] for s in summaries], [s["max"] - s["median"] for s in summaries]],
        capsize=4,
    )
    a.set_ylabel("warm epoch s (median)")
    b.bar(names, [100 * (s["hit_rate"] or 0) for s in summaries], color="tab:green")
    b.set_ylabel("state-cache hit rate %")
    b.set_ylim(0, 100)
    for ax in (a, b):
        ax.tick_params(axis="x", rotation=20)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--keys", type=int, default=1_000_000, help="distinct URLs in the state (default 1,000,000)")
    ap.add_argument("--increment", type=int, default=100_000, help="records per measured epoch (default 100,000)")
    ap.add_argument("--epochs", type=int, default=5, help="measured warm epochs per setup (default 5)")
    ap.add_argument("--chunk", type=int, default=250_000, help="new keys per state-building epoch (default 250,000)")
    ap.add_argument(
        "--setups", default=",".join(SETUPS), help=f"comma-separated, of {', '.join(SETUPS)}, cluster-unplaced"
    )
    ap.add_argument("--unplaced", action="store_true", help="also run cluster-unplaced (CBP_PLACEMENT=0)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--home", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    setups = [s for s in args.setups.split(",") if s] + (["cluster-unplaced"] if args.unplaced else [])
    started = any(s != "local" for s in setups) and _cluster_up()
    OUT.mkdir(parents=True, exist_ok=True)
    try:
        with tempfile.TemporaryDirectory(prefix="cbp-bench-cluster-") as tmp:
            results = [run_setup(s, args, Path(tmp)) for s in setups]
    finally:
        if started:
            log("stopping the cluster (scripts/cluster down)")
            subprocess.run([str(CLUSTER), "down"], check=False)
    summaries = [summarize(r) for r in results]
    text = report(summaries, args, results[0]["source"])
    print(text)
    (OUT / "cluster.md").write_text(text)
    (OUT / "cluster.json").write_text(
        json.dumps({"args": vars(args), "summaries": summaries, "results": results}, indent=1)
    )
    plot(summaries, OUT / "cluster.png")
    log(f"wrote {OUT / 'cluster.md'}, cluster.json, cluster.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
