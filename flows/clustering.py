"""Incremental clustering coefficients (paper 001 §3.1.1, Figs. 6-7; ``clustering.yaml``).

What: for an undirected graph fed as increments of edges (duplicates and self-loops ignored),
the local clustering coefficient of every node, ``c = 2E / N(N-1)`` for a node with ``N``
neighbours and ``E`` edges among them (``networkx.clustering``). Every run to quiescence emits
one record for each node that appeared or whose coefficient changed (possibly several within a
run: the newest is right).

How: one stateful stage keyed by node. A node's state is its adjacency and, for each neighbour,
the neighbours it shares with that neighbour (the part of the friends-of-friends relation, FoF,
that closes a triangle: the rest cannot change the coefficient, so it is not kept). A node that
gains neighbours in an epoch tells its *old* neighbours only the new ones and its *new* neighbours
its whole adjacency, on the loopback flow ``updates``; receivers keep what they hear of their own
neighbours, next epoch, on both ends of each link (``x`` heard from ``u`` is ``u`` known of ``x``
too), and recompute. Adjacencies only grow, so merging is a set union and the order in which
updates arrive does not matter. A triangle's three edges may arrive in any epochs: the endpoint of
the last one to arrive tells the third node about the other two, so every node ends up knowing
every link among its neighbours, two epochs after each feed. (A home written before this kept each
neighbour's whole adjacency; its lists are read as they are: the coefficient only counts the
neighbours in them.)

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


def merge(fof: dict[str, list[str]], src: str, nodes: list[str], nbrs: set[str], grown: dict[str, set[str]]) -> None:
    """Record that ``src`` and each of ``nodes`` among the neighbours ``nbrs`` are linked, on both
    ends: ``grown`` holds the lists being extended as sets, written back by :func:`settle`."""
    if src not in nbrs:
        return
    shared = nbrs.intersection(nodes)
    shared.discard(src)
    if not shared:
        return
    known = grown.get(src)
    if known is None:
        known = grown[src] = set(fof.get(src, ()))
    known |= shared
    for x in shared:
        other = grown.get(x)
        if other is None:
            other = grown[x] = set(fof.get(x, ()))
        other.add(src)


def settle(fof: dict[str, list[str]], grown: dict[str, set[str]]) -> None:
    """Write the grown sets back into ``fof`` as lists: what was known first, in its order, then
    what was added, sorted (so that the state is the same whatever the order of the updates)."""
    for u, now in grown.items():
        known = fof.get(u, [])
        if len(now) > len(known):
            fof[u] = known + sorted(now.difference(known))


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
    """Add new edges and announce them, keep what neighbours' updates say of shared neighbours,
    emit a changed coefficient."""
    prev = next(state, None)
    adj: list[str] = list(prev["adj"]) if prev else []
    fof: dict[str, list[str]] = prev["fof"] if prev else {}  # lists as stored; only what grows is copied
    new = new_neighbours(node, edges, set(adj))
    if prev is None and not new:
        return  # only self-loops: the node does not appear
    if new:
        send_updates(node, adj, new, out)
        adj += new
    nbrs, grown = set(adj), {}
    for upd in updates:
        merge(fof, upd["src"], upd["nodes"], nbrs, grown)
    settle(fof, grown)
    c = coefficient(adj, fof)
    if prev is None or c != prev["coefficient"]:
        out.coefficients.write({"node": node, "coefficient": c})
    out.state.write({"node": node, "coefficient": c, "adj": adj, "fof": fof})
