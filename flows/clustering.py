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

Why multicast: each of the two updates is the same record for every node it goes to. With
``params.multicast`` (``clustering.yaml``) the node writes each once, routed to
``cbp.multicast([node, "old"])`` or ``cbp.multicast([node, "new"])``, after binding its old or
new neighbours to that address with ``out.associate``; the shuffle then carries one copy per
partition plus one small binding row per neighbour, which saves bytes once updates are larger
than bindings and the neighbours outnumber the partitions (on the small sparse test graphs it
moves more). Without it (``clustering_emulated.yaml``, the paper's emulation baseline of §5.3)
each record lists its targets and RouteBy replicates it per destination.
"""

from __future__ import annotations

from typing import Any, Iterator

from cbp import Emitter, multicast

Record = dict[str, Any]


def edge_ends(edge: Record) -> list[str]:
    """RouteBy of ``edges``: an undirected edge concerns both of its ends."""
    return [edge["src"], edge["dst"]]


def route_update(update: Record) -> Any:
    """RouteBy of ``updates``: the listed targets, else the sender's multicast group (its old or
    its new neighbours)."""
    targets = update["targets"]
    return multicast([update["src"], update["group"]]) if targets is None else targets


def new_neighbours(node: str, edges: Iterator[Record], known: set[str]) -> list[str]:
    """The other ends of ``edges`` that are neither ``node`` itself nor already neighbours."""
    found = {e["dst"] if e["src"] == node else e["src"] for e in edges}
    return sorted(found - known - {node})


def coefficient(adj: list[str], fof: dict[str, list[str]]) -> float:
    """``2E / N(N-1)``: each edge among the neighbours is seen from both of its ends."""
    n = len(adj)
    if n < 2:
        return 0.0
    nbrs = set(adj)
    links = sum(len(nbrs.intersection(fof.get(u, ()))) for u in adj)
    return links / (n * (n - 1))


def merge(fof: dict[str, list[str]], src: str, nodes: list[str]) -> None:
    """Add what ``src`` says its neighbours are to what is known of them (no duplicates)."""
    known = fof.get(src)
    if known is None:
        fof[src] = list(dict.fromkeys(nodes))
        return
    seen = set(known)
    added = [x for x in dict.fromkeys(nodes) if x not in seen]
    if added:
        fof[src] = known + added


def send_updates(node: str, old: list[str], new: list[str], out: Emitter) -> None:
    """Tell the old neighbours the new ones, the new ones everything: each update written once
    and multicast to a group the node binds its neighbours to, or replicated per target."""
    for group, targets, nodes in (("old", old, new), ("new", new, old + new)):
        if not targets:
            continue
        if out.params.get("multicast", True):
            for t in targets:
                out.associate(t, [node, group])
            out.updates.write({"src": node, "targets": None, "group": group, "nodes": nodes})
        else:
            out.updates.write({"src": node, "targets": targets, "group": None, "nodes": nodes})


def clustering(node: str, state: Iterator[Record], edges: Iterator[Record], updates: Iterator[Record], out: Emitter) -> None:
    """Merge neighbours' updates into the FoF, add new edges and announce them, emit a changed coefficient."""
    prev = next(state, None)
    adj: list[str] = list(prev["adj"]) if prev else []
    fof: dict[str, list[str]] = prev["fof"] if prev else {}  # lists as stored; only what grows is copied
    for upd in updates:
        merge(fof, upd["src"], upd["nodes"])
    new = new_neighbours(node, edges, set(adj))
    if prev is None and not new:
        return  # only self-loops: the node does not appear
    if new:
        send_updates(node, adj, new, out)
        adj += new
    c = coefficient(adj, fof)
    if prev is None or c != prev["coefficient"]:
        out.coefficients.write({"node": node, "coefficient": c})
    out.state.write({"node": node, "coefficient": c, "adj": adj, "fof": fof})
