"""Incremental clustering coefficients (paper 001 §3.1.1, Figs. 6-7; ``clustering.yaml``).

What: for an undirected graph fed as increments of edges (duplicates and self-loops ignored),
the local clustering coefficient of every node, ``c = 2E / N(N-1)`` for a node with ``N``
neighbours and ``E`` edges among them (``networkx.clustering``). Every run to quiescence emits
one record for each node that appeared or whose coefficient changed (possibly several within a
run: the newest is right).

How: one stateful stage keyed by node. A node's state is its adjacency and, for each neighbour,
that neighbour's adjacency as last heard (the friends-of-friends relation, FoF). A node that gains
neighbours in an epoch tells its *old* neighbours only the new ones and its *new* neighbours its
whole adjacency, on the loopback flow ``updates``; receivers merge what they hear into their FoF
next epoch and recompute. Adjacencies only grow, so merging is a set union and the order in
which updates arrive does not matter. A triangle's three edges may arrive in any epochs: the
endpoint of the last one to arrive tells the third node about the other two, so every node ends
up with its neighbours' complete adjacencies, two epochs after each feed.

Why multicast: the "new neighbours" update is the same record for every old neighbour. With
``params.multicast`` (``clustering.yaml``) the node writes it once, routed to
``cbp.multicast(node)``, after binding each old neighbour to that address with
``out.associate``; the shuffle then carries one copy per partition. Without it
(``clustering_emulated.yaml``, the paper's emulation baseline of §5.3) the record lists its
targets and RouteBy replicates it per destination.
"""

from __future__ import annotations

from typing import Any, Iterator

import cbp

Record = dict[str, Any]


def edge_ends(edge: Record) -> list[str]:
    """RouteBy of ``edges``: an undirected edge concerns both of its ends."""
    return [edge["src"], edge["dst"]]


def route_update(update: Record) -> Any:
    """RouteBy of ``updates``: the listed targets, else the sender's multicast group."""
    targets = update["targets"]
    return cbp.multicast(update["src"]) if targets is None else targets


def new_neighbours(node: str, edges: Iterator[Record], known: set[str]) -> list[str]:
    """The other ends of ``edges`` that are neither ``node`` itself nor already neighbours."""
    found = {e["dst"] if e["src"] == node else e["src"] for e in edges}
    return sorted(found - known - {node})


def coefficient(adj: list[str], fof: dict[str, set[str]]) -> float:
    """``2E / N(N-1)``: each edge among the neighbours is seen from both of its ends."""
    n = len(adj)
    if n < 2:
        return 0.0
    nbrs = set(adj)
    links = sum(len(fof.get(u, set()) & nbrs) for u in adj)
    return links / (n * (n - 1))


def send_updates(node: str, old: list[str], new: list[str], out: Any) -> None:
    """Tell the old neighbours the new ones (multicast or replicated), the new ones everything."""
    if old:
        if out.params.get("multicast", True):
            for t in old:
                out.associate(t, node)
            out.updates.write({"src": node, "targets": None, "nodes": new})
        else:
            out.updates.write({"src": node, "targets": old, "nodes": new})
    out.updates.write({"src": node, "targets": new, "nodes": old + new})


def clustering(node: str, state: Iterator[Record], edges: Iterator[Record], updates: Iterator[Record], out: Any) -> None:
    """Merge neighbours' updates into the FoF, add new edges and announce them, emit a changed coefficient."""
    prev = next(state, None)
    adj: list[str] = list(prev["adj"]) if prev else []
    fof: dict[str, set[str]] = {u: set(v) for u, v in prev["fof"].items()} if prev else {}
    for upd in updates:
        fof.setdefault(upd["src"], set()).update(upd["nodes"])
    new = new_neighbours(node, edges, set(adj))
    if prev is None and not new:
        return  # only self-loops: the node does not appear
    if new:
        send_updates(node, adj, new, out)
        adj += new
    c = coefficient(adj, fof)
    if prev is None or c != prev["coefficient"]:
        out.coefficients.write({"node": node, "coefficient": c})
    out.state.write({"node": node, "coefficient": c, "adj": adj, "fof": {u: sorted(v) for u, v in sorted(fof.items())}})
