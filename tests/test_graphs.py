"""Graph pipelines (paper 001 §3.1): clustering coefficients and PageRank against networkx after every increment.

The generated graphs hold duplicate edges, self-loops, nodes that gain their first edge in a later
increment (one of them after a self-loop alone, which must not make it appear), an increment of
edges between existing nodes only, and (directed) dangling nodes. Both pipelines are run in direct
and black-box mode; clustering also with multicast emulated by replication, which must give the
same records.
"""

from __future__ import annotations

import random
from typing import Any

import networkx as nx
import pytest
from networkx.algorithms.link_analysis.pagerank_alg import _pagerank_python

import cbp
from cbp.testing import Increment, Replay, replay
from conftest import FLOWS

Edges = list[tuple[str, str]]


def graph_increments(seed: int, n: int, m: int, *, sinks: float = 0.0, k: int = 5) -> list[Edges]:
    """``k`` increments of about ``m`` random edges on ``n`` nodes (a fraction ``sinks`` of them never a source).

    Increment 2 is edges between nodes already seen only; the last one brings the late nodes
    (their first edges) and the "loner", which got only a self-loop in increment 1.
    """
    rng = random.Random(seed)
    nodes = [f"v{i}" for i in range(n)]
    late, early = nodes[-3:], nodes[:-3]
    sink = set(rng.sample(early, int(sinks * n)))

    def edge(among: list[str]) -> tuple[str, str]:
        src = rng.choice([v for v in among if v not in sink])
        return src, rng.choice(among)

    first = [edge(early) for _ in range(m // 3)] + [("loner", "loner")]
    seen = sorted({v for e in first for v in e if e[0] != e[1]})
    incs = [first, [edge(seen) for _ in range(m // 10)]]
    for _ in range(k - 3):
        inc = [edge(early) for _ in range(m // (k - 1))]
        incs.append(inc + rng.sample(incs[-1], 3) + [(inc[0][0], inc[0][0])])  # duplicates, a self-loop
    incs.append([edge(early) for _ in range(m // 10)] + [(v, rng.choice(early)) for v in late]
                + [(rng.choice(early), "loner"), (late[0], late[0])])
    return incs


def feed(edges: Edges) -> list[dict[str, str]]:
    return [{"src": a, "dst": b} for a, b in edges]


def newest(result: Replay, flow: str, field: str) -> list[dict[str, float]]:
    """Per step, the newest value of ``field`` per node on ``flow`` over the replay so far."""
    seen: dict[str, float] = {}
    out = []
    for step in result.steps:
        for r in step.outputs.get(flow, []):
            seen[r["node"]] = r[field]
        out.append(dict(seen))
    return out


# ---------------------------------------------------------------- clustering coefficients
def run_clustering(yaml: str, incs: list[Edges], tmp_path: Any, mode: str) -> Replay:
    return replay(FLOWS / yaml, [Increment("edges", feed(e)) for e in incs], home=str(tmp_path / f"{yaml}-{mode}"), mode=mode)


def check_clustering(result: Replay, incs: list[Edges]) -> None:
    g = nx.Graph()
    for step, inc, coeffs in zip(result.steps, incs, newest(result, "coefficients", "coefficient")):
        before = nx.Graph(g)
        g.add_edges_from((a, b) for a, b in inc if a != b)
        expected = nx.clustering(g)
        assert set(coeffs) == set(expected)
        assert max(abs(coeffs[v] - expected[v]) for v in expected) <= 1e-9
        touched = {v for a, b in inc if a != b and not before.has_edge(a, b) for v in (a, b)}
        near = touched | {u for v in touched for u in g[v]}
        assert {r["node"] for r in step.outputs.get("coefficients", [])} <= near  # only what the new edges reach
        assert len(step.epochs) == 2  # the edges, then the neighbours' updates


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
def test_clustering_matches_networkx(spark, tmp_path, mode):
    incs = graph_increments(seed=7, n=50, m=160)
    check_clustering(run_clustering("clustering.yaml", incs, tmp_path, mode), incs)


def test_clustering_emulated_multicast_gives_the_same_records(spark, tmp_path):
    incs = graph_increments(seed=8, n=40, m=120)
    multi, emul = (run_clustering(y, incs, tmp_path, "direct") for y in ("clustering.yaml", "clustering_emulated.yaml"))
    check_clustering(emul, incs)
    for a, b in zip(multi.steps, emul.steps):
        assert [sorted(e.outputs["coefficients"], key=lambda r: r["node"]) for e in a.epochs] == \
               [sorted(e.outputs["coefficients"], key=lambda r: r["node"]) for e in b.epochs]
        assert a.state == b.state
    # multicast delivers the old neighbours' update from one copy per partition; emulated, the shuffle replicates it
    reports = {name: [e.report for s in r.steps for e in s.epochs] for name, r in (("multicast", multi), ("emulated", emul))}
    for name, reps in reports.items():
        print(f"\nclustering {name}: shuffled {sum(r.shuffle_records or 0 for r in reps)} records, "
              f"{sum(r.shuffle_bytes or 0 for r in reps)} bytes; {sum(r.copies_in for r in reps)} copies, "
              f"{sum(r.bindings_in for r in reps)} bindings, {sum(r.delivered for r in reps)} multicast deliveries")
    assert sum(r.delivered for r in reports["multicast"]) > 0 == sum(r.delivered + r.copies_in for r in reports["emulated"])


# ---------------------------------------------------------------- PageRank
def reference_pagerank(g: nx.DiGraph) -> dict[str, float]:
    """networkx's PageRank (alpha 0.85), converged far below the 1e-6 compared against.

    ``nx.pagerank`` is this power iteration too, run through scipy, which cbp does not install.
    """
    return _pagerank_python(g, alpha=0.85, tol=1e-13, max_iter=10_000)


def check_pagerank(result: Replay, incs: list[Edges]) -> None:
    g = nx.DiGraph()
    total = None
    for step, inc, scores in zip(result.steps, incs, newest(result, "ranks", "score")):
        g.add_edges_from((a, b) for a, b in inc if a != b)
        totals = [r["total"] for r in step.outputs.get("rank_total", [])]
        assert len(totals) <= 1  # one total per run, once propagation stopped
        total = totals[-1] if totals else total
        expected = reference_pagerank(g)
        assert set(scores) == set(expected)
        assert abs(total - sum(scores.values())) <= 1e-12 * total
        assert max(abs(scores[v] / total - expected[v]) for v in expected) <= 1e-6
        last = step.epochs[-1].outputs  # the phases: edges, pushes while any, then the total
        assert last["rank_total"] == step.outputs.get("rank_total", []) and last["pushes"] == []


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
def test_pagerank_matches_networkx(spark, tmp_path, mode):
    incs = graph_increments(seed=3, n=30, m=80, sinks=0.4)
    result = replay(FLOWS / "pagerank.yaml", [Increment("edges", feed(e)) for e in incs], home=str(tmp_path / mode), mode=mode)
    check_pagerank(result, incs)


def communities(rng: random.Random, count: int, size: int) -> Edges:
    """``count`` disconnected random communities of ``size`` nodes, about two out-links per node."""
    return [(f"c{c}-{i}", f"c{c}-{rng.randrange(size)}") for c in range(count) for i in range(size) for _ in range(2)]


def test_pagerank_work_follows_the_change(spark, tmp_path):
    """One new link in a graph of 24 communities reads the state of the community it reaches, not the graph's."""
    rng = random.Random(5)
    graph = communities(rng, 24, 25)
    g = nx.DiGraph((a, b) for a, b in graph if a != b)
    link = next(e for e in (("c3-0", f"c3-{i}") for i in range(1, 25)) if not g.has_edge(*e))
    p = cbp.load(FLOWS / "pagerank.yaml", home=str(tmp_path / "h"))
    p.feed("edges", feed(graph))
    build = p.run()
    p.feed("edges", feed([link]))
    small = p.run()
    g.add_edge(*link)
    nodes = g.number_of_nodes()
    read_build, read_small = sum(r.keys_read for r in build), sum(r.keys_read for r in small)
    print(f"\npagerank on {nodes} nodes: building it read {read_build} state keys in {len(build)} epochs; "
          f"one new link read {read_small} in {len(small)} epochs ({read_small / nodes:.2f} per node of the graph)")
    assert read_small < nodes
    assert max(r.keys_read for r in small) <= 26  # the community and the total's key
    scores = {r["node"]: r["score"] for r in p.state("pagerank") if r["node"] is not None}
    total = next(r["score"] for r in p.state("pagerank") if r["node"] is None)
    expected = reference_pagerank(g)
    assert max(abs(scores[v] / total - expected[v]) for v in expected) <= 1e-6
