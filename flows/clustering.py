"""Incremental clustering coefficients (paper 001 §3.1.1, Figs. 6-7; ``clustering.yaml``).

What: for an undirected graph fed as signed increments of edges, the local clustering coefficient
of every node, ``c = 2E / N(N-1)`` for a node with ``N`` neighbours and ``E`` edges among them
(``networkx.clustering``), over the graph of the *present* edges: an edge is present while the sum
of the ``_diff`` of its records (either orientation) is positive, so an edge fed twice and
retracted once stays present; self-loops are ignored. A node exists while it has a present edge.
The output ``coefficients`` is consolidated-correct: each change of a node's coefficient is
written as ``-old`` (``_diff: -1``) and ``+new``, a node that stops existing gets the retraction
of its last record and one that reappears a new record, so ``output("coefficients",
consolidated=True)`` holds one record per existing node, its current coefficient.

State of a node: ``adj`` (its present neighbours), ``counts`` (the nonzero multiplicity of each
edge to another node, a JSON object; a node whose counts are all <= 0 keeps only them) and ``fof``:
for each neighbour, the neighbours it shares with that neighbour (the part of the
friends-of-friends relation, FoF, that closes a triangle: the rest cannot change the coefficient,
so it is not kept). A node with no nonzero count has no state.

How: one stateful stage keyed by node; an edge record goes to both ends, which add its ``_diff``
to their counts. A node whose present neighbours changed tells, on the loopback flow ``updates``,
its *kept* neighbours the ones it gained and lost, and its *new* neighbours its whole adjacency
(which replaces what they knew of it). It forgets by itself, on the spot, what it knew of the
neighbours it lost. Receivers apply what they hear of their own neighbours, next epoch, on both
ends of each link (``x`` heard from ``u`` is ``u`` known of ``x`` too), and recompute. A triangle's
edges may arrive or leave in any epochs: both ends of a changed link tell every common neighbour,
two epochs after each feed. All the updates a node reads in one epoch were sent in the previous
one, so what the two ends of a link say of it agrees, and their order does not matter. A
retraction thus costs what an addition costs: the two ends and their neighbours are called, no
other node. (A home written before ``counts`` existed reads each node of ``adj`` as one copy.)

Why multicast: each of the two updates is the same record for every node it goes to. With
``params.multicast`` (``clustering.yaml``) the node writes each once, routed to
``cbp.multicast([node, "old"])`` or ``cbp.multicast([node, "new"])``, after binding its kept or
new neighbours to that address with ``out.associate``; the shuffle then carries one copy per
partition plus one small binding row per neighbour, which saves bytes once updates are larger
than bindings and the neighbours outnumber the partitions (on the small sparse test graphs it
moves more). Without it (``clustering_emulated.yaml``, the paper's emulation baseline of §5.3)
each record lists its targets and RouteBy replicates it per destination.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator, Optional

from cbp import Emitter, multicast

Record = dict[str, Any]


def edge_ends(edge: Record) -> list[str]:
    """RouteBy of ``edges``: an undirected edge concerns both of its ends."""
    return [edge["src"], edge["dst"]]


def route_update(update: Record) -> Any:
    """RouteBy of ``updates``: the listed targets, else the sender's multicast group (its kept or
    its new neighbours)."""
    targets = update["targets"]
    return multicast([update["src"], update["group"]]) if targets is None else targets


def edge_counts(node: str, prev: Optional[Record], edges: Iterator[Record]) -> dict[str, int]:
    """The multiplicity of each of ``node``'s edges after ``edges`` (zeros dropped, self-loops ignored)."""
    counts: dict[str, int] = {}
    if prev is not None:
        counts = dict(prev["counts"]) if prev.get("counts") is not None else {u: 1 for u in prev["adj"]}
    for e in edges:
        other = e["dst"] if e["src"] == node else e["src"]
        if other == node:
            continue
        counts[other] = counts.get(other, 0) + int(e.get("_diff", 1))
        if counts[other] == 0:
            del counts[other]
    return counts


def coefficient(adj: list[str], fof: dict[str, list[str]]) -> float:
    """``2E / N(N-1)``: each edge among the neighbours is seen from both of its ends."""
    n = len(adj)
    if n < 2:
        return 0.0
    nbrs = set(adj)
    links = sum(len(nbrs.intersection(fof.get(u, ()))) for u in adj)
    return links / (n * (n - 1))


class Links:
    """The node's ``fof`` as it changes in one call: the lists touched are copied into sets once,
    and written back sorted by :meth:`settle` (the same state whatever the order of the updates)."""

    def __init__(self, fof: dict[str, list[str]], nbrs: set[str]) -> None:
        self.fof = fof
        self.nbrs = nbrs
        self.sets: dict[str, set[str]] = {}

    def of(self, u: str) -> set[str]:
        """The set of ``u``'s links, copied on first use."""
        got = self.sets.get(u)
        if got is None:
            got = self.sets[u] = set(self.fof.get(u, ()))
        return got

    def link(self, u: str, xs: Iterable[str]) -> None:
        """``u`` is linked to each of ``xs`` that is a neighbour (both ends recorded)."""
        if u not in self.nbrs:
            return
        for x in self.nbrs.intersection(xs):
            if x != u:
                self.of(u).add(x)
                self.of(x).add(u)

    def unlink(self, u: str, xs: Iterable[str]) -> None:
        """``u`` is no longer linked to any of ``xs`` (both ends)."""
        for x in xs:
            if x in self.of(u):
                self.of(u).discard(x)
                self.of(x).discard(u)

    def forget(self, lost: list[str]) -> None:
        """Neighbours lost: drop their lists and their place in the others'."""
        for r in lost:
            self.unlink(r, list(self.of(r)))
            self.sets[r] = set()

    def settle(self) -> dict[str, list[str]]:
        """The new ``fof``: touched lists sorted, empty ones dropped, the rest as stored."""
        fof = dict(self.fof)
        for u, now in self.sets.items():
            if now:
                fof[u] = sorted(now)
            else:
                fof.pop(u, None)
        return fof


def send_updates(node: str, kept: list[str], added: list[str], lost: list[str], out: Emitter) -> None:
    """Tell the kept neighbours the gained and lost ones, the new ones the whole adjacency: each
    update written once and multicast to a group the node binds its neighbours to, or replicated
    per target."""
    tell = (("old", kept, added, lost), ("new", added, kept + added, []))
    for group, targets, nodes, gone in tell:
        if not targets or not (nodes or gone):
            continue
        if out.params.get("multicast", True):
            for t in targets:
                out.associate(t, [node, group])
            out.updates.write({"src": node, "targets": None, "group": group, "nodes": nodes, "lost": gone})
        else:
            out.updates.write({"src": node, "targets": targets, "group": group, "nodes": nodes, "lost": gone})


def hear(links: Links, updates: Iterator[Record]) -> None:
    """Apply the neighbours' updates: a kept neighbour's gains and losses, a new one's whole adjacency."""
    for upd in updates:
        src, nodes = upd["src"], upd["nodes"]
        if upd["group"] == "new" and src in links.nbrs:
            links.unlink(src, list(links.of(src).difference(nodes)))  # what it no longer has
        links.link(src, nodes)
        links.unlink(src, upd.get("lost") or ())


def clustering(node: str, state: Iterator[Record], edges: Iterator[Record], updates: Iterator[Record],
               out: Emitter) -> None:
    """Count the edges, announce the neighbours gained and lost, apply what the neighbours' updates
    say of shared neighbours, emit a changed coefficient as -old/+new."""
    prev = next(state, None)
    old_adj: list[str] = list(prev["adj"]) if prev else []
    counts = edge_counts(node, prev, edges)
    present = {u for u, c in counts.items() if c > 0}
    kept = [u for u in old_adj if u in present]
    lost = [u for u in old_adj if u not in present]
    added = sorted(present.difference(old_adj))
    adj = kept + added
    send_updates(node, kept, added, lost, out)
    links = Links(prev["fof"] if prev else {}, set(adj))
    links.forget(lost)
    hear(links, updates)
    c = coefficient(adj, links.settle() if adj else {})
    old = prev["coefficient"] if prev else 0.0
    if old_adj and (not adj or c != old):
        out.coefficients.write({"node": node, "coefficient": old, "_diff": -1})
    if adj and (not old_adj or c != old):
        out.coefficients.write({"node": node, "coefficient": c})
    if counts:
        fof = links.settle() if adj else {}
        out.state.write({"node": node, "coefficient": c, "adj": adj, "counts": counts, "fof": fof})
