"""The broadcast and multicast copies a grouped task received (:class:`Copies`), and their
delivery to its key groups (routed by :mod:`cbp.engine.task.routing`)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from ...spec import STATE
from ...spec.typedvalues import to_json
from .groups import Group
from .plan import TaskPlan
from .routing import COPY

__all__ = ["Copies"]


class Copies:
    """The broadcast and multicast records a grouped task received, and their delivery to key groups.

    A copy is kept as the task's key groups hold records (:mod:`cbp.engine.task.groups`): an Arrow
    slice of one or more records (batch translate), else its JSON text, so that every key it is
    delivered to decodes a fresh record of its own."""

    def __init__(self, plan: TaskPlan) -> None:
        names = [i.flow for i in plan.stage.inputs]
        self._index = {n: i for i, n in enumerate(names)}
        self.where = plan.where()
        #: (input indexes it is limited to or None, whether it goes to stored keys, input index, records, how many)
        self.broadcast: list[tuple[frozenset[int] | None, bool, int, Any, int]] = []
        self.multicast: dict[str, list[tuple[int, Any, int]]] = {}
        self.to_state = False  # a broadcast goes to every stored key: the task must visit them all
        self.stats = {"broadcast_in": 0, "multicast_in": 0, "bindings_in": 0, "delivered": 0}

    def absorb(self, chunks: Iterable[list[Group]]) -> Iterator[list[Group]]:
        """Take the copies off the front of the task's key groups; the remaining chunks.

        Reads ahead to the first chunk with a key group, so that :attr:`to_state` is known before
        the first key is visited.
        """
        it = iter(chunks)
        for chunk in it:
            rest = [g for g in chunk if not self._take(g)]
            if rest:
                return _chain(rest, it)
        return iter(())

    def _take(self, g: Group) -> bool:
        if not g.key.startswith(COPY):
            return False
        kind, body = g.key[1], g.key[2:]
        for idx, items in enumerate(g.flows):
            for item in items:
                if isinstance(item, dict):
                    item, n = json.dumps(item, separators=(",", ":"), ensure_ascii=False, default=to_json), 1
                else:
                    n = len(item)
                if kind == "M":
                    self.multicast.setdefault(body, []).append((idx, item, n))
                    self.stats["multicast_in"] += n
                else:
                    self._add_broadcast(json.loads(body), idx, item, n)
        return True

    def _add_broadcast(self, flows: list[str] | None, idx: int, item: Any, n: int) -> None:
        self.stats["broadcast_in"] += n
        if flows is None:
            self.broadcast.append((None, False, idx, item, n))
            return
        to_state = STATE in flows
        self.to_state |= to_state
        self.broadcast.append((frozenset(self._index[f] for f in flows if f != STATE), to_state, idx, item, n))

    def deliver_multicast(self, g: Group) -> None:
        """Add to ``g`` the multicast records of the addresses it is bound to."""
        if not g.bound:
            return
        self.stats["bindings_in"] += len(g.bound)
        for addr in dict.fromkeys(g.bound):
            for idx, item, n in self.multicast.get(addr, ()):
                g.flows[idx].append(item)
                g.records += n
                self.stats["delivered"] += n
        g.bound = []

    def deliver_broadcast(self, g: Group, has_state: bool, outer: bool) -> None:
        """Add to ``g`` the broadcast records it gets: limited ones if it has input on one of their
        flows or (``"state"``) stored state; unlimited ones if the key is called (by input, by outer
        grouping, or by a broadcast to the stored keys)."""
        if not self.broadcast:
            return
        had = [bool(items) for items in g.flows]
        called = any(had) or (has_state and (outer or self.to_state))
        for only, to_state, idx, item, n in self.broadcast:
            if called if only is None else (to_state and has_state) or any(had[i] for i in only):
                g.flows[idx].append(item)
                g.records += n
                self.stats["delivered"] += n


def _chain(first: list[Group], rest: Iterator[list[Group]]) -> Iterator[list[Group]]:
    yield first
    yield from rest
