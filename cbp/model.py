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
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

__all__ = ["Writer", "Emitter", "runnable_all", "runnable_any", "normalize_runnable_result"]

Frames = Mapping[str, list[Any]]


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
            out = {str(k): int(v) for k, v in x.items() if int(v) > 0}
        elif isinstance(x, Iterable) and not isinstance(x, (str, bytes)):
            out = {str(k): 1 for k in x}
        else:
            raise TypeError(f"{where}: {what} must be a set of flow names or a dict of counts, got {x!r:.80}")
        for f, n in out.items():
            if f not in frames:
                raise ValueError(f"{where}: {what} names '{f}', which is not an input flow of the stage ({', '.join(frames)})")
            if n > len(frames[f]):
                raise ValueError(f"{where}: {what} asks for {n} increment(s) of '{f}' but only {len(frames[f])} are complete")
        return out

    return norm(reads, "reads"), norm(removes, "removes"), state


class Writer:
    """Writes records to one output flow (or the state) of the current key's translate call."""

    __slots__ = ("name", "_sink")

    def __init__(self, name: str, sink: Callable[[str, Any], None]) -> None:
        self.name = name
        self._sink = sink

    def write(self, record: Mapping[str, Any]) -> None:
        """Write one record; it becomes visible to readers of the flow in the next epoch."""
        self._sink(self.name, record)


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
    ) -> None:
        self.stage = stage
        self.epoch = epoch
        self.params = dict(params)
        self.has_state = has_state
        self._writers = {f: Writer(f, sink) for f in outputs}
        if has_state:
            self._writers["state"] = Writer("state", sink)

    def __getattr__(self, name: str) -> Writer:
        try:
            return self.__dict__["_writers"][name]
        except KeyError:
            known = ", ".join(self.__dict__.get("_writers", {})) or "none"
            raise AttributeError(f"stage '{self.__dict__.get('stage')}' has no output flow '{name}' (it has: {known})") from None

    def __getitem__(self, name: str) -> Writer:
        return self.__getattr__(name)

    def write(self, flow: str, record: Mapping[str, Any]) -> None:
        """Write ``record`` to output flow ``flow`` (``"state"`` for the stage's state)."""
        self[flow].write(record)
