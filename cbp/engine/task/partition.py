"""What a grouped task asks of its state partition (:class:`StatePartition`), whatever kind it is.

The kinds (chosen once, when the plan is built: :attr:`cbp.engine.task.plan.EnginePath.partition`):

- ``none``: a stateless stage (:class:`NoState`);
- ``direct``: state read through the partition's index, changed keys appended
  (:class:`cbp.engine.task.statepart.DirectPartition`);
- ``blackbox``: the state came with the input, all of it is rewritten
  (:class:`cbp.engine.task.statepart.BlackboxPartition`);
- ``keyed-direct`` and ``keyed-blackbox``: the same for keyed rows
  (:class:`cbp.engine.task.keyedstate.KeyedPartition`, :class:`cbp.engine.task.keyedstate.KeyedBlackbox`).

A task finds a key's stored state by :meth:`~StatePartition.lookup` (a chunk of keys) or
:meth:`~StatePartition.scan` (every stored key), completes it with :meth:`~StatePartition.stored`
(a black-box partition takes it from the key's input group), gives the translator
:meth:`~StatePartition.records`, and hands the new state back to :meth:`~StatePartition.update`,
one signature for every kind. :attr:`~StatePartition.rows` is the partition's Arrow row store for the
batch and columnar paths (direct mode), None for the others.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, runtime_checkable

import numpy as np
import pyarrow as pa

from .bipindex import StateMeta

if TYPE_CHECKING:
    from .bipindex import PartitionIndex, StateReader
    from .groups import Group
    from .plan import TaskPlan

__all__ = ["StatePartition", "ArrowRows", "NoState", "OldState", "Finished", "StateRecords"]


class OldState(NamedTuple):
    """A key's stored state: its records (decoded), where its rows are (file id, row group), and
    its rows as stored, which a new state is compared with (the translator may change
    ``records`` in place)."""

    records: list[dict[str, Any]]
    locs: list[tuple[int, int]]
    stored: list[dict[str, Any]]


#: A task's result of its partition: the index file (relative to the home), the state files added
#: and removed (Delta add actions).
Finished = tuple[str | None, list[dict[str, Any]], list[dict[str, Any]]]
#: The state records a translator gets for a key: decoded records, or keyed rows read as it asks.
StateRecords = Iterable[dict[str, Any]]


@runtime_checkable
class StatePartition(Protocol):
    """One task's state partition (see the module)."""

    #: the kind (``none``, ``direct``, ``blackbox``, ``keyed-direct``, ``keyed-blackbox``)
    kind: str
    #: written whole each epoch: a key without input is still written (its state kept)
    whole: bool
    #: index files the new index no longer needs (deleted once the epoch commits)
    index_garbage: list[str]

    @property
    def rows(self) -> ArrowRows | None: ...

    def lookup(self, hashes: np.ndarray) -> dict[str, tuple[int, OldState]]:
        """The stored state of the keys with these hashes (a chunk of the input, in hash order)."""
        ...

    def scan(self) -> Iterator[tuple[int, str, OldState]]:
        """Every stored key with its state, in (hash, key) order."""
        ...

    def stored(self, g: Group, found: OldState | None) -> OldState | None:
        """Key ``g``'s stored state: ``found`` by lookup or scan, or what came with its input."""
        ...

    def records(self, g: Group, old: OldState | None) -> StateRecords:
        """The state records the translator gets for key ``g``."""
        ...

    def update(self, key_text: str, h: int, old: OldState | None, new: StateRecords) -> None:
        """Record a key's new state (``old``: as :meth:`stored` gave it)."""
        ...

    def finish(self, stats: dict[str, Any]) -> Finished:
        """Close the partition's files; its index file, adds and removes."""
        ...

    def abort(self) -> None:
        """Drop what the partition wrote (the task failed)."""
        ...


class ArrowRows(Protocol):
    """A direct-mode partition's rows as Arrow tables (the batch and columnar paths)."""

    index: PartitionIndex
    reader: StateReader
    keys_read: int
    keys_written: int

    def drop(self, h: int, old: OldState | None) -> None: ...

    def drop_rows(self, h: np.ndarray, f: np.ndarray, g: np.ndarray) -> None: ...

    def write_rows(self, keys: pa.Array, hashes: pa.Array, rows: pa.Table) -> None: ...


class NoState:
    """The partition of a stateless stage: nothing stored, nothing written."""

    kind = "none"
    whole = False

    def __init__(self, plan: TaskPlan, p: int) -> None:
        self._index = plan.parts.get(p, StateMeta()).index
        self.index_garbage: list[str] = []

    @property
    def rows(self) -> ArrowRows | None:
        return None

    def lookup(self, hashes: np.ndarray) -> dict[str, tuple[int, OldState]]:
        return {}

    def scan(self) -> Iterator[tuple[int, str, OldState]]:
        return iter(())

    def stored(self, g: Group, found: OldState | None) -> OldState | None:
        return None

    def records(self, g: Group, old: OldState | None) -> StateRecords:
        return []

    def update(self, key_text: str, h: int, old: OldState | None, new: StateRecords) -> None:
        return None

    def finish(self, stats: dict[str, Any]) -> Finished:
        return self._index, [], []

    def abort(self) -> None:
        return None
