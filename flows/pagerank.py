"""Incremental PageRank by thresholded push propagation (paper 001 §3.1.2, Figs. 8-9; ``pagerank.yaml``).

What: for a directed graph fed as increments of edges (duplicates and self-loops ignored), each
node's PageRank as ``networkx.pagerank(G, alpha=0.85)`` computes it (uniform teleport, dangling
nodes' rank spread uniformly), as two outputs: ``ranks`` holds unnormalised scores ``s`` (a
record whenever a node's score changed or it appeared) and ``rank_total`` their sum, so that
``PR(v) = newest score of v / newest total``.

Why no broadcast is needed (the paper broadcasts dangling nodes' rank to every node): with a
uniform teleport and a uniform redistribution of the dangling mass, both terms of
``PR = α Mᵀ PR + α (Σ_dangling PR) / n · 1 + (1 - α) / n · 1`` are multiples of the all-ones
vector, so ``PR`` is proportional to ``s = (I - α Mᵀ)⁻¹ 1``, the "leaky" PageRank in which ``M``
is the link matrix with dangling rows left empty. Each node can therefore keep an unnormalised
``s_v = 1 + α Σ_{u→v} s_u / outdeg(u)``; a dangling node simply sends nothing, and ``PR = s / Σ s``.

How (push propagation, after Chien et al. [8], whose thresholding this keeps): a node stores ``s``,
``sent`` (the score its out-neighbours currently reflect), the out-degree ``degree`` it was sent
with and its out-adjacency (old neighbours first). When ``s`` moved by more than
``params.tolerance`` from ``sent``, or the node gained out-edges, it sends its old out-neighbours
the per-edge difference ``α (s / d_new - sent / d_old)`` as ONE record multicast to all of them
(``out.associate`` each, address = the node) and its new out-neighbours ``α s / d_new``; receivers
add what they get to ``s``. Only nodes reached by a change above the tolerance are called (inner
grouping), so the work of an increment follows the change, not the graph.

Accuracy: when propagation stops every node holds ``|s - sent| <= tolerance``; the scores then
solve ``s = (I - α Mᵀ)⁻¹ (1 - α Mᵀ r)`` with ``|r| <= tolerance``, and since ``(I - α Mᵀ)⁻¹ α Mᵀ 1 =
s* - 1`` each score is within a relative ``tolerance`` of the exact one, the total too, so every
``PR(v)`` is within ``2 · tolerance · PR(v)`` (the default 5e-7 keeps every error below 1e-6).

Phases (Fig. 9): the Runnable :func:`propagation_first` reads the loopback flow ``pushes``
exclusively while any push is pending; once propagation has stopped, it reads the loopback flow
``rank_deltas`` (each call's score change, all routed to the one key :data:`TOTAL`), which keeps
``rank_total`` the sum of the scores emitted on ``ranks`` in one epoch per run; only then does it
take the next ``edges`` increment. (A second stage for the total would run after every
propagation epoch, doubling the epochs of a run.)
"""

from __future__ import annotations

import math
from typing import Any, Iterator

import cbp

Record = dict[str, Any]
Frames = dict[str, list[Any]]

#: The key of the graph's total score; node keys are strings, so it is never a node.
TOTAL = 0


# ---------------------------------------------------------------- routing and phases
def edge_ends(edge: Record) -> list[str]:
    """RouteBy of ``edges``: the source gains an out-edge, the destination must exist."""
    return [edge["src"], edge["dst"]]


def route_push(push: Record) -> Any:
    """RouteBy of ``pushes``: the listed new out-neighbours, else the sender's multicast group."""
    targets = push["targets"]
    return cbp.multicast(push["src"]) if targets is None else targets


def propagation_first(frames: Frames, state: Any) -> tuple[dict[str, int], dict[str, int], Any]:
    """Runnable (Fig. 9's phases): all pending pushes while there are any; once propagation has
    stopped, the score changes it made (to the total); then the oldest edges increment."""
    for flow in ("pushes", "rank_deltas", "edges"):
        if frames[flow]:
            take = 1 if flow == "edges" else len(frames[flow])
            return {flow: take}, {flow: take}, state
    return {}, {}, state


def whole_graph(record: Record) -> int:
    """RouteBy of ``rank_deltas``: the one key that sums the whole graph's score."""
    return TOTAL


# ---------------------------------------------------------------- stage pagerank (key: node)
def new_out_neighbours(node: str, edges: list[Record], known: list[str]) -> list[str]:
    """Destinations of ``node``'s new out-edges (not itself, not already linked)."""
    return sorted({e["dst"] for e in edges if e["src"] == node} - set(known) - {node})


def push(node: str, adj: list[str], degree: int, sent: float, score: float, out: Any) -> None:
    """Send the old out-neighbours (``adj[:degree]``) the change of their share, the new ones their share."""
    alpha, d = float(out.params.get("alpha", 0.85)), len(adj)
    old, new = adj[:degree], adj[degree:]
    change = alpha * (score / d - sent / degree) if old else 0.0
    if change != 0.0:
        for t in old:
            out.associate(t, node)
        out.pushes.write({"src": node, "targets": None, "delta": change})
    if new:
        out.pushes.write({"src": node, "targets": new, "delta": alpha * score / d})


def pagerank(node: str | int, state: Iterator[Record], edges: Iterator[Record], pushes: Iterator[Record],
             rank_deltas: Iterator[Record], out: Any) -> None:
    """Add received pushes to the score, add new out-edges, push on if the change is large enough."""
    if node == TOTAL:
        return add_up(state, rank_deltas, out)
    prev = next(state, None)
    links = list(edges)
    if prev is None and all(e["src"] == e["dst"] for e in links):
        return  # only self-loops: the node does not appear
    old_score = prev["score"] if prev else 0.0
    score = math.fsum([old_score if prev else 1.0, *(p["delta"] for p in pushes)])
    sent, degree, adj = (prev["sent"], prev["degree"], list(prev["out"])) if prev else (0.0, 0, [])
    adj += new_out_neighbours(node, links, adj)
    if len(adj) != degree or abs(score - sent) > float(out.params.get("tolerance", 5e-7)):
        push(node, adj, degree, sent, score, out)
        sent, degree = score, len(adj)
    if prev is None or score != old_score:
        out.ranks.write({"node": node, "score": score})
        out.rank_deltas.write({"delta": score - old_score})
    out.state.write({"node": node, "score": score, "sent": sent, "degree": degree, "out": adj})


def add_up(state: Iterator[Record], rank_deltas: Iterator[Record], out: Any) -> None:
    """The key :data:`TOTAL`: add the run's score changes to the total; emit it when it changed."""
    prev = next(state, None)
    old = prev["score"] if prev else 0.0
    new = math.fsum([old, *(r["delta"] for r in rank_deltas)])
    out.state.write({"node": None, "score": new, "sent": 0.0, "degree": 0, "out": []})
    if new != old:
        out.rank_total.write({"total": new})
