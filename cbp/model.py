"""The CBP model's user-facing pieces (paper 001, Table 1): defaults and the output writer.

A translator is a plain function ``translate(key, state, *inputs, out)``: ``state`` and each
of ``inputs`` are iterators of dict records (one per input flow, in the YAML's order, each
sorted by its flow's OrderBy), ``out`` writes records to output flows and to the state.

    >>> def count_urls(key, state, urls, out):
    ...     prev = next(state, None)
    ...     n = sum(1 for _ in urls) + (prev["count"] if prev else 0)
    ...     out.state.write({"url": key, "count": n})
    ...     out.counts.write({"url": key, "count": n})

The defaults are RouteByRcd (no ``route_by``), OrderByAny (no ``order_by``), FrameByPrior (no
``frame_by``) and :func:`runnable_all`; :func:`runnable_any` is the other built-in.

Besides keys, a RouteBy may return the broadcast key :data:`ALL` (or :func:`broadcast` limited
to some input flows, or to the stored keys) and a multicast address (:func:`multicast`), bound
to keys with ``out.associate(key, address)`` (paper 001 §2.3, §4.5.3).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping
from typing import Any

__all__ = [
    "Writer",
    "Emitter",
    "runnable_all",
    "runnable_any",
    "normalize_runnable_result",
    "Broadcast",
    "Multicast",
    "ALL",
    "broadcast",
    "multicast",
]

Frames = Mapping[str, list[Any]]


class Broadcast:
    """The broadcast key: a record routed to it reaches keys of the epoch, crossing the shuffle once
    per partition. ``flows`` limits it to keys with input on those input flows (``"state"``: every
    stored key, which makes those keys called); ``None`` means every key called in the epoch.

        >>> ALL, broadcast("state"), broadcast("edges", "state").flows
        (ALL, broadcast('state'), ('edges', 'state'))
    """

    __slots__ = ("flows",)

    def __init__(self, flows: tuple[str, ...] | None = None) -> None:
        self.flows = flows

    def __repr__(self) -> str:
        return "ALL" if self.flows is None else f"broadcast({', '.join(map(repr, self.flows))})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Broadcast) and other.flows == self.flows

    def __hash__(self) -> int:
        return hash(("cbp.broadcast", self.flows))


#: RouteBy's broadcast key: deliver the record to every key called in the epoch (paper 001 §2.3).
ALL = Broadcast()


def broadcast(*flows: str) -> Broadcast:
    """A broadcast key limited to keys with input on ``flows`` (``"state"``: every stored key).

    >>> broadcast() is ALL or broadcast() == ALL
    True
    """
    if not all(isinstance(f, str) for f in flows):
        raise TypeError(f"broadcast() takes input flow names (or 'state'), got {flows!r:.80}")
    return Broadcast(tuple(flows)) if flows else ALL


class Multicast:
    """A multicast address as a RouteBy result: the record reaches, in the stage's next epoch,
    every key the stage bound to ``address`` with ``out.associate`` in the epoch that wrote it.

        >>> multicast("n1")
        multicast('n1')
    """

    __slots__ = ("address",)

    def __init__(self, address: Any) -> None:
        self.address = address

    def __repr__(self) -> str:
        return f"multicast({self.address!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Multicast) and other.address == self.address

    def __hash__(self) -> int:
        return hash(("cbp.multicast", repr(self.address)))


def multicast(address: Any) -> Multicast:
    """RouteBy's multicast key for ``address`` (any JSON value: a string, number or list)."""
    if address is None:
        raise TypeError("multicast() needs an address, got None")
    return Multicast(address)


def runnable_all(frames: Frames, state: Any) -> tuple[dict[str, int], dict[str, int], Any]:
    """RunnableAll: runnable when every input flow has a complete increment; reads and removes them all.

    >>> runnable_all({"a": [1, 2], "b": [5]}, None)
    ({'a': 2, 'b': 1}, {'a': 2, 'b': 1}, None)
    >>> runnable_all({"a": [1], "b": []}, None)
    ({}, {}, None)
    """
    if not frames or any(len(v) == 0 for v in frames.values()):
        return {}, {}, state
    take = {f: len(v) for f, v in frames.items()}
    return take, dict(take), state


def runnable_any(frames: Frames, state: Any) -> tuple[dict[str, int], dict[str, int], Any]:
    """RunnableAny: runnable when any input flow has a complete increment; reads and removes what is there.

    >>> runnable_any({"a": [], "b": [7]}, None)
    ({'b': 1}, {'b': 1}, None)
    """
    take = {f: len(v) for f, v in frames.items() if v}
    return take, dict(take), state


def normalize_runnable_result(result: Any, frames: Frames, where: str) -> tuple[dict[str, int], dict[str, int], Any]:
    """Check a Runnable's ``(reads, removes, state)`` and turn sets of flow names into counts.

    A set or list of flow names means "the oldest complete increment of each"; a dict gives
    how many of the oldest complete increments to read or remove.
    """
    if not isinstance(result, tuple) or len(result) != 3:
        raise TypeError(f"{where}: a Runnable must return (reads, removes, state), got {result!r:.80}")
    reads, removes, state = result

    def norm(x: Any, what: str) -> dict[str, int]:
        if x is None or x is False:
            return {}
        if isinstance(x, Mapping):
            bad = [(k, v) for k, v in x.items() if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0]
            if bad:
                raise TypeError(
                    f"{where}: {what} gives {bad[0][1]!r:.40} for '{bad[0][0]}'; a count of increments is a whole "
                    f"number, 0 or more"
                )
            out = {str(k): int(v) for k, v in x.items() if v > 0}
        elif isinstance(x, Iterable) and not isinstance(x, (str, bytes)):
            out = {str(k): 1 for k in x}
        else:
            raise TypeError(f"{where}: {what} must be a set of flow names or a dict of counts, got {x!r:.80}")
        for f, n in out.items():
            if f not in frames:
                raise ValueError(
                    f"{where}: {what} names '{f}', which is not an input flow of the stage ({', '.join(frames)})"
                )
            if n > len(frames[f]):
                raise ValueError(
                    f"{where}: {what} asks for {n} increment(s) of '{f}' but only {len(frames[f])} are complete"
                )
        return out

    return norm(reads, "reads"), norm(removes, "removes"), state


class Writer:
    """Writes records to one output flow (or the state) of the current key's translate call."""

    __slots__ = ("name", "_sink")

    def __init__(self, name: str, sink: Callable[[str, Any], None]) -> None:
        self.name = name
        self._sink = sink

    def write(self, record: Mapping[str, Any]) -> None:
        """Write one record; it becomes visible to readers of the flow in the next epoch. A
        ``"_diff"`` field gives its multiplicity (a nonzero int; +1 when absent, -1 a retraction)."""
        self._sink(self.name, record)

    def retract(self, record: Mapping[str, Any]) -> None:
        """Write ``record`` with its multiplicity negated: ``_diff`` -1, or -n for a record read with ``_diff`` n.

        >>> seen = []
        >>> Writer("counts", lambda f, r: seen.append(r)).retract({"url": "u", "count": 2, "_diff": 1}); seen
        [{'url': 'u', 'count': 2, '_diff': -1}]
        """
        d = record.get("_diff", 1)
        self._sink(self.name, {**record, "_diff": -d if type(d) is int else d})


class Emitter:
    """The ``out`` argument of a translator: one :class:`Writer` per output flow, ``state`` for state.

    Also carries ``stage``, ``epoch``, the stage's ``params`` from the YAML, and ``has_state``
    (whether the stage keeps state, so one translator can serve a stateful and a stateless variant).

        >>> seen = []
        >>> out = Emitter("s", 1, {}, ["counts"], True, lambda f, r: seen.append((f, r)))
        >>> out.counts.write({"url": "u", "count": 1}); out.state.write({"url": "u", "count": 1})
        >>> seen
        [('counts', {'url': 'u', 'count': 1}), ('state', {'url': 'u', 'count': 1})]
    """

    def __init__(
        self,
        stage: str,
        epoch: int,
        params: Mapping[str, Any],
        outputs: Iterable[str],
        has_state: bool,
        sink: Callable[[str, Any], None],
        bind: Callable[[Any, Any], None] | None = None,
    ) -> None:
        self.stage = stage
        self._bind = bind
        self.epoch = epoch
        self.params = dict(params)
        self.has_state = has_state
        self._writers = {f: Writer(f, sink) for f in outputs}
        if has_state:
            self._writers["state"] = Writer("state", sink)
        for f, w in self._writers.items():  # out.<flow> as a plain attribute: a lookup ~10x faster than __getattr__
            if f not in self.__dict__ and not hasattr(type(self), f):
                self.__dict__[f] = w

    def __getattr__(self, name: str) -> Writer:
        try:
            return self.__dict__["_writers"][name]
        except KeyError:
            known = ", ".join(self.__dict__.get("_writers", {})) or "none"
            raise AttributeError(
                f"stage '{self.__dict__.get('stage')}' has no output flow '{name}' (it has: {known})"
            ) from None

    def __getitem__(self, name: str) -> Writer:
        return self.__getattr__(name)

    def write(self, flow: str, record: Mapping[str, Any]) -> None:
        """Write ``record`` to output flow ``flow`` (``"state"`` for the stage's state)."""
        self[flow].write(record)

    def associate(self, key: Any, address: Any) -> None:
        """Bind grouping key ``key`` to multicast ``address`` for the stage's next epoch: records
        written in this epoch whose RouteBy returns ``multicast(address)`` reach ``key`` then
        (paper 001 §4.5.3; bindings last one epoch).

            >>> bound = []
            >>> out = Emitter("s", 1, {}, [], False, lambda f, r: None, lambda k, a: bound.append((k, a)))
            >>> out.associate("n2", "n1"); bound
            [('n2', 'n1')]
        """
        if self._bind is None:
            raise TypeError(
                f"stage '{self.stage}' has no grouping keys (a record-wise stage): it cannot associate keys with "
                f"multicast addresses"
            )
        self._bind(key, address)


#: What ``out.<name>`` is besides an output flow (an output flow of a per-key stage may not be
#: named so): its public names, and its own and Python's private ones.
EMITTER_NAMES = frozenset(
    {"stage", "epoch", "params", "has_state"} | {n for n in vars(Emitter) if not n.startswith("_")}
)
EMITTER_PRIVATE = frozenset({"_writers", "_bind"} | set(dir(Emitter)) - EMITTER_NAMES)
