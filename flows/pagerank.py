"""Incremental PageRank by thresholded push propagation (paper 001 §3.1.2, Figs. 8-9; ``pagerank.yaml``).

What: for a directed graph fed as signed increments of edges, each node's PageRank as
``networkx.pagerank(G, alpha=0.85)`` computes it (uniform teleport, dangling nodes' rank spread
uniformly) over the graph of the *present* edges: an edge ``u→v`` is present while the sum of the
``_diff`` of its records is positive (an edge fed twice and retracted once stays present; a
self-loop is ignored), and a node exists while it has a present edge (in or out). Two outputs,
both consolidated-correct: ``ranks`` holds one record per existing node, its unnormalised score
``s``, and ``rank_total`` one record, their sum, so that ``PR(v) = s_v / total`` reads off
``output("ranks", consolidated=True)`` and ``output("rank_total", consolidated=True)``. Each
change of a value is written as ``-old`` (``_diff: -1``) and ``+new``; a node that stops existing
gets only the retraction of its last record, a node that reappears a new ``+`` record.

Why no broadcast is needed (the paper broadcasts dangling nodes' rank to every node): with a
uniform teleport and a uniform redistribution of the dangling mass, both terms of
``PR = α Mᵀ PR + α (Σ_dangling PR) / n · 1 + (1 - α) / n · 1`` are multiples of the all-ones
vector, so ``PR`` is proportional to ``s = (I - α Mᵀ)⁻¹ 1``, the "leaky" PageRank in which ``M``
is the link matrix with dangling rows left empty. Each node can therefore keep an unnormalised
``s_v = 1 + α Σ_{u→v} s_u / outdeg(u)``; a dangling node simply sends nothing, and ``PR = s / Σ s``.

State of a node: ``score`` (``s``), ``sent`` (the score its out-neighbours' credit reflects),
``out`` (the out-neighbours credited, each with ``α · sent / degree``; ``degree = len(out)``),
``outs`` and ``ins`` (the nonzero multiplicities of its out- and in-edges, JSON objects keyed by
the other end). A node whose edges all have multiplicity <= 0 keeps only its counts (``out``
empty, ``score`` 0); a node with no nonzero count has no state.

How (push propagation with a threshold, in the spirit of the thresholded updates of [8] that the
paper implements, without its supernode construction): an edge record goes to both ends, which add
its ``_diff`` to their counts. When the present out-neighbours differ from ``out`` or ``s`` moved by
more than ``params.tolerance`` from ``sent``, the node pushes: the kept out-neighbours get the
per-edge difference ``α (s / d_new - sent / d_old)`` as ONE record multicast to them
(``out.associate`` each, address = the node), the added ones their share ``α s / d_new`` and the
removed ones minus the share they hold, ``-α sent / d_old``; receivers add what they get to ``s``.
So a retraction propagates exactly like an addition: it is a change of the source's out-degree
and of one neighbour's credit, and only nodes reached by a change above the tolerance are called
(inner grouping): the work of an increment follows the change, not the graph.

A node left with no present edge stops existing: it withdraws its credit from its out-neighbours
(``-α sent / d_old``), retracts its ``ranks`` record and takes its score out of the total. The
only pushes it can still receive are the withdrawals of its former in-neighbours, in the next epoch
(the Runnable never reads an edges increment while pushes are pending, and nobody credits a node
that has no present in-edge); a node that does not exist ignores pushes. When it reappears it
starts again from ``s = 1`` and its present in-neighbours credit it afresh.

Accuracy: when propagation stops every existing node holds ``|s - sent| <= tolerance``, and each
present edge ``u→v`` has credited ``v`` with exactly ``α sent_u / outdeg(u)`` (additions, changes and
withdrawals are all relative to what was credited, so removals leave nothing behind). The scores
therefore solve ``s = (I - α Mᵀ)⁻¹ (1 - α Mᵀ r)`` over the present graph with ``|r| <= tolerance``,
and since ``(I - α Mᵀ)⁻¹ α Mᵀ 1 = s* - 1`` each score is within a relative ``tolerance`` of the
exact one, the total too, so every ``PR(v)`` is within ``2 · tolerance · PR(v)`` (the default 5e-7
keeps every error below 1e-6), whatever the order of additions and retractions.

Phases (Fig. 9): the Runnable :func:`propagation_first` reads the loopback flow ``pushes``
exclusively while any push is pending; once propagation has stopped, it reads the loopback flow
``rank_deltas`` (each call's score change, all routed to the one key :data:`TOTAL`), which keeps
``rank_total`` the sum of the scores on ``ranks`` in one epoch per run; only then does it take the
next ``edges`` increment. (A second stage for the total would run after every propagation epoch,
doubling the epochs of a run.)

Older homes: a state record without ``outs`` counts each node of ``out`` once; one without ``ins``
(its in-edges unknown) keeps its node existing until it is fed again from scratch.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, Optional

from cbp import Emitter, multicast

Record = dict[str, Any]
Frames = dict[str, list[Any]]
Counts = dict[str, int]

#: The key of the graph's total score; node keys are strings, so it is never a node.
TOTAL = 0


# ---------------------------------------------------------------- routing and phases
def edge_ends(edge: Record) -> list[str]:
    """RouteBy of ``edges``: both ends count the edge's multiplicity."""
    return [edge["src"], edge["dst"]]


def route_push(push: Record) -> Any:
    """RouteBy of ``pushes``: the listed out-neighbours, else the sender's multicast group."""
    targets = push["targets"]
    return multicast(push["src"]) if targets is None else targets


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
def edge_counts(node: str, prev: Optional[Record], edges: Iterator[Record]) -> tuple[Counts, Counts, bool]:
    """The node's out- and in-edge multiplicities after ``edges`` (zeros dropped, self-loops ignored),
    and whether its in-edges are unknown (a state written before the counts were kept)."""
    outs: Counts = dict(prev["outs"]) if prev and prev.get("outs") is not None else {}
    if prev and prev.get("outs") is None:
        outs = {t: 1 for t in prev["out"]}
    ins: Counts = dict(prev["ins"]) if prev and prev.get("ins") is not None else {}
    legacy = prev is not None and prev.get("ins") is None
    for e in edges:
        src, dst, diff = e["src"], e["dst"], int(e.get("_diff", 1))
        if src == dst:
            continue
        counts, other = (outs, dst) if src == node else (ins, src)
        counts[other] = counts.get(other, 0) + diff
        if counts[other] == 0:
            del counts[other]
    return outs, ins, legacy


def push(node: str, credited: list[str], present: list[str], sent: float, score: float, out: Emitter) -> list[str]:
    """Bring the out-neighbours' credit from ``α sent / len(credited)`` on ``credited`` to
    ``α score / len(present)`` on ``present``: the kept ones get the difference (one multicast
    record), the added ones their share, the removed ones minus what they held. Returns the new
    credited list (kept ones first, in their order, then the added ones)."""
    alpha = float(out.params.get("alpha", 0.85))
    now = set(present)
    kept = [t for t in credited if t in now]
    removed = [t for t in credited if t not in now]
    added = sorted(now.difference(credited))
    d_old, d_new = len(credited), len(present)
    change = alpha * (score / d_new - sent / d_old) if kept else 0.0
    if change != 0.0:
        for t in kept:
            out.associate(t, node)
        out.pushes.write({"src": node, "targets": None, "delta": change})
    if removed:
        out.pushes.write({"src": node, "targets": removed, "delta": -alpha * sent / d_old})
    if added:
        out.pushes.write({"src": node, "targets": added, "delta": alpha * score / d_new})
    return kept + added


def pagerank(node: str | int, state: Iterator[Record], edges: Iterator[Record], pushes: Iterator[Record],
             rank_deltas: Iterator[Record], out: Emitter) -> None:
    """Count the edges, add received pushes to the score, push on if the out-edges changed or the
    score moved by more than the tolerance; a node left without present edges stops existing."""
    if node == TOTAL:
        add_up(state, rank_deltas, out)
        return
    prev = next(state, None)
    existed = prev is not None and (prev["degree"] > 0 or prev["score"] > 0.0)
    outs, ins, legacy = edge_counts(str(node), prev, edges)
    present = [t for t, c in outs.items() if c > 0]
    if not (legacy or present or any(c > 0 for c in ins.values())):
        vanish(str(node), prev if existed else None, outs, ins, out)
        return
    # Leaky PageRank: s_v = 1 + α Σ_{u→v} s_u / outdeg(u), a dangling node sends nothing. A node that
    # (re)appears starts from 1: pushes reaching a node that did not exist are withdrawals, ignored.
    old_score = prev["score"] if existed and prev else 0.0
    score = math.fsum([old_score, *(p["delta"] * p.get("_diff", 1) for p in pushes)]) if existed else 1.0
    sent, credited = (prev["sent"], list(prev["out"])) if existed and prev else (0.0, [])
    if set(present) != set(credited) or abs(score - sent) > float(out.params.get("tolerance", 5e-7)):
        credited = push(str(node), credited, present, sent, score, out)
        sent = score
    if score != old_score or not existed:
        if existed:
            out.ranks.write({"node": node, "score": old_score, "_diff": -1})
        out.ranks.write({"node": node, "score": score})
        out.rank_deltas.write({"delta": score - old_score})
    out.state.write({"node": node, "score": score, "sent": sent, "degree": len(credited), "out": credited,
                     "outs": outs, "ins": None if legacy else ins})


def vanish(node: str, prev: Optional[Record], outs: Counts, ins: Counts, out: Emitter) -> None:
    """A node without present edges: if it existed, withdraw its credit from its out-neighbours,
    retract its ``ranks`` record and its score from the total; keep its counts if any are left."""
    if prev is not None:
        if prev["out"]:
            push(node, list(prev["out"]), [], prev["sent"], 0.0, out)
        out.ranks.write({"node": node, "score": prev["score"], "_diff": -1})
        out.rank_deltas.write({"delta": -prev["score"]})
    if outs or ins:
        out.state.write({"node": node, "score": 0.0, "sent": 0.0, "degree": 0, "out": [], "outs": outs, "ins": ins})


def add_up(state: Iterator[Record], rank_deltas: Iterator[Record], out: Emitter) -> None:
    """The key :data:`TOTAL`: add the run's score changes to the total; when it changed, retract the
    old ``rank_total`` record and write the new one (none once the graph is empty).

    Its state record has ``node`` null and the total as ``score``.
    """
    prev = next(state, None)
    old = prev["score"] if prev else 0.0
    new = math.fsum([old, *(r["delta"] * r.get("_diff", 1) for r in rank_deltas)])
    out.state.write({"node": None, "score": new, "sent": 0.0, "degree": 0, "out": [], "outs": None, "ins": None})
    if new == old:
        return
    if prev is not None and old != 0.0:
        out.rank_total.write({"total": old, "_diff": -1})
    if new != 0.0:
        out.rank_total.write({"total": new})
