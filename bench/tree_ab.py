#!/usr/bin/env python
"""Two (or more) source trees of cbp side by side on the same epochs: is a change faster?

Each tree (a checkout, e.g. ``git worktree add /tmp/old <commit>``) runs in its own process, with
its own ``cbp`` first on ``PYTHONPATH`` (and Spark's Python workers'), the same steps: build a home of
``--keys`` URLCount keys in one epoch (real URLs: the link targets of Debian's python3.11-doc with
a ``?p=N`` parameter, as ``bench/url_count_bench.py``), then feed the same ``--increment``-record
increment (half keys that exist, half new ones the first time) and ``run()`` it ``--epochs`` times. The trees take
turns ``--rounds`` times, so the machine's drift falls on all of them alike. Prints a table of
``run()`` seconds (median of each round's epochs after the first; all rounds pooled), writes
``bench/out/tree_ab.{json,png}``.

    .venv/bin/python bench/tree_ab.py --trees /tmp/old,. --yaml flows/url_count.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "bench" / "out"

CHILD = r"""
import json, shutil, sys, time
import cbp
keys, inc_n, epochs = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
yaml, home, data = sys.argv[4], sys.argv[5], sys.argv[6]
every = open(data, encoding="utf-8").read().splitlines()
urls, new = every[:keys], every[keys:]
shutil.rmtree(home, ignore_errors=True)
p = cbp.load(yaml, home=home)
p.feed("urls", [{"url": u} for u in urls])
p.run()
inc = [{"url": u} for u in urls[: inc_n : 2]] + [{"url": u} for u in new]
times = []
for _ in range(epochs):
    p.feed("urls", inc)
    t = time.perf_counter()
    p.run()
    times.append(time.perf_counter() - t)
print("RESULT " + json.dumps({"cbp": cbp.__file__, "times": times}))
"""


def run_tree(tree: Path, args: argparse.Namespace, work: Path) -> list[float]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    yaml = tree / args.yaml
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            str(args.keys),
            str(args.increment),
            str(args.epochs),
            str(yaml),
            str(work / "home"),
            str(work / "urls.txt"),
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=args.timeout,
    )
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if out.returncode != 0 or line is None:
        raise SystemExit(f"{tree}: exit {out.returncode}\n{out.stderr[-3000:]}")
    res = json.loads(line[7:])
    if not res["cbp"].startswith(str(tree.resolve())):
        raise SystemExit(f"{tree}: imported cbp from {res['cbp']}, not from the tree")
    return res["times"]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trees", required=True, help="comma-separated source trees (checkouts of cbp)")
    ap.add_argument(
        "--yaml", default="flows/url_count.yaml", help="pipeline, relative to each tree (default flows/url_count.yaml)"
    )
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--increment", type=int, default=100_000)
    ap.add_argument("--epochs", type=int, default=6, help="runs of the increment per round; the first is left out")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args(argv)
    trees = [Path(t).resolve() for t in args.trees.split(",")]
    times: dict[str, list[list[float]]] = {str(t): [] for t in trees}
    sys.path.insert(0, str(ROOT / "bench"))
    import numpy as np
    from url_count_bench import Keys, load_vocabulary

    vocab, where = load_vocabulary()
    print(f"data: {where}")
    with tempfile.TemporaryDirectory(prefix="cbp-tree-ab-") as tmp:
        ids = np.arange(args.keys + args.increment // 2)  # the state's keys, then the increment's new ones
        (Path(tmp) / "urls.txt").write_text(
            "\n".join(r["url"] for r in Keys(vocab).records(ids)) + "\n", encoding="utf-8"
        )
        for r in range(args.rounds):
            for t in trees:
                got = run_tree(t, args, Path(tmp))
                times[str(t)].append(got)
                print(f"round {r + 1} {t}: " + " ".join(f"{x:.2f}" for x in got), flush=True)
    base = statistics.median(x for rnd in times[str(trees[0])] for x in rnd[1:])
    print(
        f"\n{args.yaml}, {args.keys:,} keys, {args.increment:,}-record increment; run() seconds, epochs "
        f"2..{args.epochs} of each round\n"
    )
    print("| tree | median | per round | vs first tree |\n|:---|---:|:---|---:|")
    for t in trees:
        pooled = [x for rnd in times[str(t)] for x in rnd[1:]]
        med = statistics.median(pooled)
        rounds = ", ".join(f"{statistics.median(rnd[1:]):.2f}" for rnd in times[str(t)])
        print(f"| {t} | {med:.3f} | {rounds} | {med / base:.2f}x |")
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "tree_ab.json").write_text(json.dumps({"args": vars(args), "times": times}, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    ax.boxplot(
        [[x for rnd in times[str(t)] for x in rnd[1:]] for t in trees],
        tick_labels=[Path(t).name or str(t) for t in trees],
    )
    ax.set_ylabel("run() seconds per epoch")
    ax.set_title(f"{Path(args.yaml).name}: {args.keys:,} keys, {args.increment:,}-record increments")
    fig.tight_layout()
    fig.savefig(OUT / "tree_ab.png", dpi=120)
    print(f"\nwrote {OUT / 'tree_ab.json'} and {OUT / 'tree_ab.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
