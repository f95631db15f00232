"""Addition and retraction rounds of the graph pipelines (``bench/graphs.py --part retractions``).

On real graphs, each pipeline (``flows/clustering.yaml`` and ``flows/pagerank.yaml``, direct
mode) is built from all edges but a held-out batch of ``--new-edges`` (default 10), then runs
``--rounds`` rounds (default 2) of the two kinds of run below. Clustering takes the undirected page
link graph of a Debian documentation package (``--package``, default ``python3.11-doc``,
:func:`graphdata.doc_link_edges`) restricted to a seeded random sample of ``--round-pages`` pages
(default 150: a dense graph with hubs, where any change reaches most nodes). PageRank takes
``--round-pr-graph``: ``wordnet`` (default), the subgraph of WordNet's hypernym DAG induced by
``--round-pr-nodes`` (3,000) synsets found breadth-first from a seeded random one (a change reaches
the ancestors of the edge only), or ``doc``, the package's directed page links on the same sample.

- *add*: feed the held-out batch (first round) or re-add the batch retracted last round;
- *retract*: retract as many other present edges, drawn with the seed (``_diff: -1``).

Per round: the time of ``run()``, its epochs, the state keys read (the nodes called) and the
records shuffled, beside the build's; after every run the consolidated outputs are checked against
networkx over the present edges (clustering exactly; PageRank score / total within 1e-6), and the
nodes left edgeless by a retraction must be gone from them. Exit 1 from ``graphs.py`` if any check
fails.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

from graphdata import Edge, doc_link_edges, wordnet_edges

Signed = tuple[str, str, int]


def present_graph(mult: dict[Any, int], directed: bool) -> Any:
    """The networkx graph of the edges whose summed multiplicity is positive."""
    import networkx as nx

    g = nx.DiGraph() if directed else nx.Graph()
    g.add_edges_from(tuple(k) for k, m in mult.items() if m > 0)
    return g


def check(p: Any, flow: str, mult: dict[Any, int]) -> float:
    """Max abs error of the consolidated outputs against networkx (inf if the node sets differ)."""
    import networkx as nx

    if flow == "clustering":
        got = {r["node"]: r["coefficient"] for r in p.output("coefficients", consolidated=True)}
        want = nx.clustering(present_graph(mult, False))
    else:
        ranks = p.output("ranks", consolidated=True)
        total = p.output("rank_total", consolidated=True)[0]["total"]
        got = {r["node"]: r["score"] / total for r in ranks}
        want = nx.pagerank(present_graph(mult, True), alpha=0.85, tol=1e-13, max_iter=10_000)
    if set(got) != set(want):
        return float("inf")
    return max((abs(got[v] - want[v]) for v in want), default=0.0)


def apply(mult: dict[Any, int], batch: list[Signed], directed: bool) -> None:
    for a, b, d in batch:
        key = (a, b) if directed else frozenset((a, b))
        mult[key] = mult.get(key, 0) + d


def one_pipeline(args: argparse.Namespace, work: Path, flow: str) -> dict[str, Any]:
    """Build, then the add/retract rounds of one pipeline; every run measured and checked."""
    from graphs import bfs_subgraph, log, run_feed, sample_pages

    from cbp.pipeline import Pipeline

    directed = flow == "pagerank"
    if directed and args.round_pr_graph == "wordnet":
        dag = wordnet_edges(directed=True, hypernyms_only=True)
        edges: list[Edge] = bfs_subgraph(dag, args.round_pr_nodes, args.seed)
        name = f"WordNet hypernyms, BFS subgraph of {args.round_pr_nodes:,} synsets"
    else:
        edges = sample_pages(doc_link_edges(args.package, directed=directed), args.pages, args.seed)
        name = f"{args.package} page links ({'directed' if directed else 'undirected'}), {args.pages} pages sampled"
    rng = random.Random(args.seed)
    held = rng.sample(edges, args.new_edges)
    base = [e for e in edges if e not in held]
    pool = sorted(set(edges) - set(held))  # retracted: drawn from the edges never held out
    p = Pipeline(Path(__file__).resolve().parent.parent / "flows" / f"{flow}.yaml", home=str(work / f"rounds-{flow}"))
    mult: dict[Any, int] = {}
    runs = []
    batches: list[tuple[str, list[Signed]]] = [("build", [(a, b, 1) for a, b in base])]
    for r in range(args.rounds):
        batches += [(f"add {r + 1}", []), (f"retract {r + 1}", [])]  # filled in as the rounds go
    for run, batch in batches:
        if run.startswith("add"):
            batch = [(a, b, 1) for a, b in held]
        elif run.startswith("retract"):
            gone = rng.sample(pool, args.new_edges)
            pool = sorted(set(pool) - set(gone))
            batch = [(a, b, -1) for a, b in gone]
        before = present_graph(mult, directed)
        apply(mult, batch, directed)
        after = present_graph(mult, directed)
        m = run_feed(p, batch)
        err = check(p, flow, mult)
        called = sum(e["keys_read"] for e in m["epochs"])
        runs.append(
            {
                "run": run,
                "edges": len(batch),
                "seconds": m["run_wall"],
                "epochs": m["n_epochs"],
                "keys_read": called,
                "max_keys_read": max(e["keys_read"] for e in m["epochs"]),
                "keys_written": sum(e["keys_written"] for e in m["epochs"]),
                "records_in": sum(e["records_in"] for e in m["epochs"]),
                "shuffle_records": m["shuffle_records"],
                "nodes": after.number_of_nodes(),
                "edgeless": len(set(before) - set(after)),
                "max_error": err,
            }
        )
        log(
            f"  {flow:<10} {run:<9} {len(batch):>6} edges  run() {m['run_wall']:6.1f}s  {m['n_epochs']:>3} epochs  "
            f"keys read {called:,}  max error {err:.1e}"
        )
        if run.startswith("retract"):
            held = gone  # re-added next round (and not retracted again)
    return {"graph": f"{name}: {len(set(a for e in edges for a in e)):,} nodes, {len(edges):,} edges", "runs": runs}


def rounds_part(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    """Both pipelines' rounds."""
    tol = {"clustering": 1e-9, "pagerank": 1e-6}
    res = {flow: one_pipeline(args, work, flow) for flow in ("clustering", "pagerank")}
    ok = all(r["max_error"] <= tol[f] for f, v in res.items() for r in v["runs"])
    return {"pipelines": res, "agree_networkx": ok}


def rounds_table(res: dict[str, Any]) -> list[str]:
    """Markdown: per pipeline, every run beside the build."""
    lines = [
        "## Additions and retractions (edge rounds)",
        "",
        "Each round adds a batch of edges (the held-out ones, then those retracted the round before) and "
        "retracts as many others (`_diff: -1`); keys read = the existing nodes called (state keys read "
        "through the index), keys written = the nodes called that keep a state; shuffled records = 0 where "
        "the small epochs are routed by the driver; checked against networkx over the present edges after "
        "every run.",
        "",
    ]
    for flow, v in res["pipelines"].items():
        lines += [
            f"### {flow}: {v['graph']}",
            "",
            "| run | edges fed | run() s | epochs | keys read (sum) | max per epoch | keys written | records in "
            "| shuffled records | nodes after | left edgeless | max abs error vs networkx |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for r in v["runs"]:
            lines.append(
                f"| {r['run']} | {r['edges']:,} | {r['seconds']:.1f} | {r['epochs']} | {r['keys_read']:,} | "
                f"{r['max_keys_read']:,} | {r['keys_written']:,} | {r['records_in']:,} | "
                f"{r['shuffle_records']:,} | {r['nodes']:,} | {r['edgeless']} | {r['max_error']:.1e} |"
            )
        lines.append("")
    lines.append(f"All runs equal networkx: {'yes' if res['agree_networkx'] else 'NO'}.")
    return lines + [""]
