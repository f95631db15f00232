#!/usr/bin/env python
"""The graph pipelines against networkx on the link graph of any Debian documentation package.

Not a timing benchmark: a check, on real data, of the contracts of ``flows/pagerank.yaml``
(consolidated score / total = ``networkx.pagerank(alpha=0.85)``, max abs error <= 1e-6) and
``flows/clustering.yaml`` (consolidated coefficient = ``networkx.clustering``, <= 1e-9) after every
increment. The package's page links (:func:`graphdata.doc_link_edges`: directed for PageRank,
undirected for clustering) are split with a seed into a base graph and ``--increments`` equal
increments; each is fed and run to quiescence, then compared.

    .venv/bin/python bench/graph_accuracy.py --package postgresql-doc-15 --flow pagerank
    .venv/bin/python bench/graph_accuracy.py --package python3.11-doc --flow clustering --increments 10

One line per increment: edges fed, epochs, seconds, max abs error, nodes. Exit 1 if an error is
over the contract's bound or a node is missing.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import networkx as nx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from graphdata import doc_link_edges, split_edges  # noqa: E402
from graphs import feed_records, flow  # noqa: E402

from cbp.pipeline import Pipeline  # noqa: E402

BOUND = {"pagerank": 1e-6, "clustering": 1e-9}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--package", default="python3.11-doc", help="a Debian documentation package (apt-get download)")
    ap.add_argument("--flow", choices=sorted(BOUND), default="pagerank")
    ap.add_argument("--increments", type=int, default=4)
    ap.add_argument("--base", type=float, default=0.8, help="fraction of the edges in the base graph")
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--mode", choices=["direct", "blackbox"], default="direct")
    args = ap.parse_args()
    pr = args.flow == "pagerank"
    edges = doc_link_edges(args.package, directed=pr)
    base, incs = split_edges(edges, args.increments, base=args.base, seed=args.seed)
    print(
        f"{args.package}: {len(edges)} {'directed' if pr else 'undirected'} edges, {args.flow}, {args.mode}", flush=True
    )
    work = Path(tempfile.mkdtemp(prefix="cbp-graph-accuracy-"))
    ok = True
    try:
        p = Pipeline(flow(f"{args.flow}.yaml"), home=str(work / "home"), mode=args.mode)
        g: nx.Graph = nx.DiGraph() if pr else nx.Graph()
        newest: dict[str, float] = {}
        total = None
        for j, inc in enumerate([base, *incs]):
            p.feed("edges", feed_records(inc))
            t0 = time.perf_counter()
            reps = p.run()
            dt = time.perf_counter() - t0
            g.add_edges_from((a, b) for a, b in inc if a != b)
            # each change is written as -old, +new: the consolidated flows hold the current values
            newest = {
                o["node"]: o["score" if pr else "coefficient"]
                for o in p.output("ranks" if pr else "coefficients", consolidated=True)
            }
            if pr:
                total = p.output("rank_total", consolidated=True)[0]["total"]
            want = nx.pagerank(g, alpha=0.85, tol=1e-12, max_iter=1000) if pr else nx.clustering(g)
            missing = [v for v in want if v not in newest]
            err = max((abs(newest[v] / (total if pr else 1.0) - want[v]) for v in want if v in newest), default=0.0)
            ok &= not missing and err <= BOUND[args.flow]
            print(
                f"increment {j}: {len(inc)} edges, {len(reps)} epochs, {dt:.1f} s, max abs error {err:.2e}, "
                f"nodes {len(want)}, missing {len(missing)}",
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("within the contract" if ok else f"OUT OF CONTRACT (bound {BOUND[args.flow]:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
