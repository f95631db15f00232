#!/usr/bin/env python
"""Requests to the object store per feed and per run of URLCount on an ``s3://`` home.

On an object store every request is a round trip (and, on a real one, billed), so what an epoch
costs there is mostly how many requests it makes. This benchmark counts them at the source: the
S3 server of ``scripts/cluster`` (moto, on 127.0.0.1) logs one line per request. For each source
tree given (``--trees``; each in its own process with its own ``cbp`` first on ``PYTHONPATH``, so an
old checkout, e.g. ``git worktree add /tmp/old <commit>``, and this one compare in one run), it
feeds ``--records`` URLs (real link targets, as ``bench/url_count_bench.py``) to a new home on
the bucket and runs ``--epochs`` epochs in local Spark, and reports, per tree, the median requests
of a feed and of a run (the first epoch left out: it creates the tables) and what the requests of a
run were, by kind. Prints a table, writes ``bench/out/s3_requests.{md,json,png}``.

    .venv/bin/python bench/s3_requests.py                      # this tree
    .venv/bin/python bench/s3_requests.py --trees /tmp/old,.   # an old checkout vs this one

The cluster (its S3 server) is started if it is not up, and stopped after if this script started it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
LOG = ROOT / "state" / "cluster" / "logs" / "s3.log"
sys.path.insert(0, str(BENCH))

from cluster import CLUSTER, _cluster_env, _cluster_up, log  # noqa: E402

CHILD = r"""
import json, os, sys, time, uuid
import cbp  # this tree's (first on PYTHONPATH), before the bench's helpers put this checkout on sys.path
sys.path.insert(0, sys.argv[5])
import numpy as np, pyarrow as pa, pyarrow.parquet as pq
from url_count_bench import Keys, load_vocabulary
records, epochs, log, work = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
keys = Keys(load_vocabulary()[0])
home = f"s3://{os.environ['CBP_S3_BUCKET']}/s3-requests-{uuid.uuid4().hex[:8]}"
p = cbp.load("flows/url_count.yaml", home=home)
rng = np.random.default_rng(7)
lines = lambda: sum(1 for _ in open(log, "rb"))
marks = []
for e in range(epochs):
    f = f"{work}/inc-{e}.parquet"
    pq.write_table(pa.table({"url": [r["url"] for r in keys.records(rng.integers(0, 20 * records, records))]}), f)
    a = lines(); p.feed("urls", f); time.sleep(0.3)
    b = lines(); p.run(); time.sleep(0.3)
    marks.append([a, b, lines()])
print("RESULT " + json.dumps({"cbp": cbp.__file__, "home": home, "marks": marks}))
"""

#: What a request was for, by the first pattern its path matches (the path inside the home).
KINDS = [
    ("Delta log: read", r"^GET .*/_delta_log/"),
    ("Delta log: write", r"^(PUT|POST) .*/_delta_log/"),
    ("Delta log: list / look up", r"^(HEAD .*/_delta_log/|GET .*prefix=[^ ]*_delta_log)"),
    ("leases", r"_cbp/leases/"),
    ("controller records", r" [^ ]*/_cbp/"),
    ("listings", r"^GET [^ ]*\?"),
    ("directory markers", r"^PUT [^ ?]*/(\?| |$)"),
    ("data files: write", r"^(PUT|POST) .*\.parquet"),
    ("data files: read", r"^(GET|HEAD) .*\.parquet"),
    ("data files: delete", r"^DELETE .*\.parquet"),
    ("bucket", r"^HEAD /[^/ ]+$"),
]


def kind_of(request: str) -> str:
    return next((k for k, pat in KINDS if re.search(pat, request)), "other")


def requests_between(a: int, b: int) -> list[str]:
    """Method and path of the server's log lines a..b (escape codes dropped)."""
    with open(LOG, encoding="utf-8", errors="replace") as f:
        chosen = [ln for i, ln in enumerate(f) if a <= i < b]
    out = []
    for ln in chosen:
        m = re.search(r'"(?:\x1b\[[0-9;]*m)*([A-Z]+) (\S+) HTTP', ln)
        if m:
            out.append(f"{m.group(1)} {m.group(2)}")
    return out


def run_tree(tree: Path, args: argparse.Namespace, env: dict[str, str], work: Path) -> dict[str, Any]:
    env = {**env, "PYTHONPATH": os.pathsep.join([str(tree), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)}
    env.pop("CBP_SPARK_MASTER", None)  # local Spark: the requests do not depend on where tasks run
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(args.records), str(args.epochs), str(LOG), str(work), str(BENCH)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=args.timeout,
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if out.returncode != 0 or line is None:
        raise SystemExit(f"{tree}: exit {out.returncode}\n{out.stderr[-3000:]}")
    res = json.loads(line[7:])
    feeds = [requests_between(a, b) for a, b, _ in res["marks"]]
    runs = [requests_between(b, c) for _, b, c in res["marks"]]
    kinds: Counter[str] = Counter()
    for r in runs[1:]:
        kinds.update(kind_of(q) for q in r)
    n = max(1, len(runs) - 1)
    return {
        "tree": str(tree),
        "cbp": res["cbp"],
        "feed": [len(f) for f in feeds],
        "run": [len(r) for r in runs],
        "run_kinds": {k: round(v / n, 1) for k, v in kinds.most_common()},
    }


def report(results: list[dict[str, Any]], args: argparse.Namespace) -> str:
    med = lambda xs: statistics.median(xs[1:] or xs)  # noqa: E731
    lines = [
        "# Object-store requests per feed and per run (URLCount, s3:// home on moto)",
        "",
        f"- command: `{' '.join([Path(sys.argv[0]).name, *sys.argv[1:]])}`; date {time.strftime('%Y-%m-%dT%H:%M:%S')}",
        f"- {args.records:,} records per feed, {args.epochs} epochs per tree (medians leave the first out: it creates "
        f"the tables)",
        "",
        "| tree | feed requests | run requests | per run: feed, run |",
        "|---|---:|---:|---|",
    ]
    for r in results:
        lines.append(f"| {r['tree']} | {med(r['feed']):.0f} | {med(r['run']):.0f} | {r['feed']}, {r['run']} |")
    kinds = sorted(
        {k for r in results for k in r["run_kinds"]}, key=lambda k: -max(r["run_kinds"].get(k, 0) for r in results)
    )
    lines += [
        "",
        "Requests of a run by kind (mean over the epochs after the first):",
        "",
        "| kind | " + " | ".join(Path(r["tree"]).name or r["tree"] for r in results) + " |",
        "|---|" + "---:|" * len(results),
    ]
    for k in kinds:
        lines.append(f"| {k} | " + " | ".join(f"{r['run_kinds'].get(k, 0):.1f}" for r in results) + " |")
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = sorted({k for r in results for k in r["run_kinds"]})
    fig, ax = plt.subplots(figsize=(8, 4.5))
    bottoms = [0.0] * len(results)
    names = [f"{Path(r['tree']).name or r['tree']}\n({i + 1})" for i, r in enumerate(results)]
    for i, k in enumerate(kinds):
        vals = [r["run_kinds"].get(k, 0) for r in results]
        ax.bar(names, vals, bottom=bottoms, label=k, color=f"C{i % 10}")
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    ax.set_ylabel("requests per run (mean)")
    ax.set_title("S3 requests of one URLCount run, by kind")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", default=".", help="comma-separated source trees (default: this one)")
    ap.add_argument("--records", type=int, default=1000, help="records per feed (default 1000)")
    ap.add_argument("--epochs", type=int, default=6, help="feeds + runs per tree (default 6)")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per tree")
    args = ap.parse_args(argv)
    started = _cluster_up()
    try:
        env = {**os.environ, **_cluster_env()}
        work = Path(os.environ.get("TMPDIR", "/tmp")) / f"cbp-s3-requests-{os.getpid()}"
        work.mkdir(parents=True, exist_ok=True)
        results = []
        for t in args.trees.split(","):
            tree = Path(t).resolve()
            log(f"{tree}: {args.epochs} feeds + runs")
            results.append(run_tree(tree, args, env, work))
    finally:
        if started:
            subprocess.run([str(CLUSTER), "down"], check=False)
    text = report(results, args)
    print(text)
    OUT.mkdir(exist_ok=True)
    (OUT / "s3_requests.md").write_text(text, encoding="utf-8")
    (OUT / "s3_requests.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
    plot(results, OUT / "s3_requests.png")
    log(f"wrote {OUT / 's3_requests.md'}, .json, .png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
