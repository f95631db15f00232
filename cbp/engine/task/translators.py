"""How a grouped task calls the translator: a :class:`TranslatorRunner`, one per path
(:attr:`cbp.engine.task.plan.EnginePath.runner`, chosen when the plan was built):

- ``per-key`` (:class:`PerKeyRunner`): key groups in hash order, the translator called once per
  key, with the key's stored state and one iterator per input flow;
- ``batch`` and ``keyed-batch`` (:class:`BatchRunner`): the same key groups, queued and handed to
  a vectorised translator a batch of keys at a time (:mod:`.batch`, :mod:`.keyedbatch`);
- ``columnar`` (:class:`ColumnarRunner`): no key groups, Arrow all the way (:mod:`.columnar`).

Every runner reads and writes state only through the task's :class:`~.partition.StatePartition`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

import numpy as np
import pyarrow as pa

from ..common.protocol import USER_FAILURES
from .batch import BatchTranslate
from .calls import _Calls, _failed, _user_failure
from .columnar import ColumnarTask
from .copies import Copies
from .groups import Group, group_chunks, with_state_keys
from .keyedbatch import KeyedBatch
from .partition import StatePartition, StateRecords
from .plan import TaskPlan, _Clock
from .routing import decode_key
from .signed import delivered_consolidated
from .statepart import OldState

__all__ = ["TranslatorRunner", "PerKeyRunner", "BatchRunner", "ColumnarRunner", "runner_for", "flow_iter"]


class TranslatorRunner(Protocol):
    """Calls a stage's translator over one task's envelopes."""

    #: what the task adds to its stats (e.g. ``columnar``: 1)
    stats: dict[str, int]

    def run(self, batches: Iterable[pa.RecordBatch]) -> int:
        """Translate every key of the task's envelopes; the number of input records."""
        ...


def flow_iter(plan: TaskPlan, idx: int, items: list[Any], key: Any, key_text: str) -> Iterator[dict[str, Any]]:
    """One input flow's records of a key for the translator, in OrderBy order: ``items`` are the
    group's (:mod:`cbp.engine.task.groups`): records in stored form, or the JSON texts of copies."""
    schema = plan.input_schemas[idx]
    order = plan.stage.inputs[idx].order_by
    if order is None:  # OrderByAny: arrival order, decoded lazily
        return (schema.from_storage(json.loads(t) if type(t) is str else t) for t in items)
    recs = [schema.from_storage(json.loads(t) if type(t) is str else t) for t in items]
    try:
        recs.sort(key=order.sort_key(schema))
    except USER_FAILURES as e:
        raise _user_failure(
            plan, f"{plan.where(key)} flow '{plan.stage.inputs[idx].flow}'", f"order_by '{order.text}'", e, key_text
        ) from None
    return iter(recs)


class PerKeyRunner:
    """The translator called once per key (see the module)."""

    def __init__(self, plan: TaskPlan, calls: _Calls, part: StatePartition, copies: Copies, clock: _Clock) -> None:
        self.plan, self.calls, self.part, self.copies, self.clock = plan, calls, part, copies, clock
        self.stats: dict[str, int] = {}

    def run(self, batches: Iterable[pa.RecordBatch]) -> int:
        n = 0
        chunks = self.copies.absorb(group_chunks(batches, len(self.plan.stage.inputs), arrow=self.plan.stage.batch))
        for g, old in self._keyed(chunks):
            n += g.records
            self._visit(g, old)
        self._done()
        return n

    def _keyed(self, chunks: Iterator[list[Group]]) -> Iterator[tuple[Group, OldState | None]]:
        """The keys to visit, in hash order, with their stored state: those with input (multicast
        deliveries included), plus, for outer grouping or a broadcast to the stored keys, every
        stored key of the partition."""
        plan, part, clock = self.plan, self.part, self.clock
        if plan.stage.grouping == "outer" or self.copies.to_state:
            for g, old in with_state_keys(self._delivered(chunks), part.scan(), len(plan.stage.inputs)):
                yield g, part.stored(g, old)
            return
        for chunk in chunks:
            clock.lap("input")
            chunk = list(self._delivered((chunk,)))
            found = part.lookup(np.array([g.h for g in chunk], np.int64))
            clock.lap("state_read")
            for g in chunk:
                hit = found.get(g.key)
                yield g, part.stored(g, hit[1] if hit is not None else None)
            clock.lap("translate")

    def _delivered(self, chunks: Iterable[list[Group]]) -> Iterator[Group]:
        """The key groups with their multicast deliveries; a group left with neither input nor state
        (a key bound to addresses nothing was sent to) is dropped."""
        for chunk in chunks:
            for g in chunk:
                self.copies.deliver_multicast(g)
                if g.records or g.state:
                    yield g

    def _visit(self, g: Group, old: OldState | None) -> None:
        """Call the translator for one key (if it is called) and hand its new state to the partition."""
        st, part = self.plan.stage, self.part
        records = part.records(g, old)
        has_state = old is not None
        delivered_consolidated(g, self.copies, has_state, st.grouping == "outer", st.batch)
        if not g.records and not (st.grouping == "outer" and has_state):
            if part.whole:  # a key without input keeps its state (the partition is written whole)
                self._keep(g, old, records)
            return
        self._call(g, old, records)

    def _keep(self, g: Group, old: OldState | None, records: StateRecords) -> None:
        self.part.update(g.key, g.h, old, records)

    def _call(self, g: Group, old: OldState | None, records: StateRecords) -> None:
        key = decode_key(g.key)
        inputs = [flow_iter(self.plan, idx, g.flows[idx], key, g.key) for idx in range(len(self.plan.stage.inputs))]
        self.part.update(g.key, g.h, old, self.calls.call(g.key, key, records, inputs))

    def _done(self) -> None:
        return None


def _updater(part: StatePartition) -> Callable[[Group, OldState | None, StateRecords], None]:
    """``update(g, old, new)`` of a batch translator: the key's new state to ``part``."""

    def update(g: Group, old: OldState | None, new: StateRecords) -> None:
        part.update(g.key, g.h, old, new)

    return update


def _batch(plan: TaskPlan, calls: _Calls, part: StatePartition) -> BatchTranslate:
    kind = KeyedBatch if plan.path.runner == "keyed-batch" else BatchTranslate
    return kind(plan, calls, _updater(part), _failed, _user_failure, flow_iter, direct=part.rows)


class BatchRunner(PerKeyRunner):
    """The key groups handed to a vectorised translator a batch of keys at a time."""

    def __init__(self, plan: TaskPlan, calls: _Calls, part: StatePartition, copies: Copies, clock: _Clock) -> None:
        super().__init__(plan, calls, part, copies, clock)
        self.batch = _batch(plan, calls, part)

    def _keep(self, g: Group, old: OldState | None, records: StateRecords) -> None:
        self.batch.add(g, old, records, called=False)  # kept, in key order with the batch's keys

    def _call(self, g: Group, old: OldState | None, records: StateRecords) -> None:
        self.batch.add(g, old, records)

    def _done(self) -> None:
        self.batch.flush()


class ColumnarRunner:
    """A batch translator over Arrow chunks of whole keys, no key groups (:mod:`.columnar`)."""

    def __init__(self, plan: TaskPlan, calls: _Calls, part: StatePartition, copies: Copies, clock: _Clock) -> None:
        self.task = ColumnarTask(plan, _batch(plan, calls, part), part.rows, clock)
        self.stats: dict[str, int] = {"columnar": 1}

    def run(self, batches: Iterable[pa.RecordBatch]) -> int:
        return self.task.run(batches)


#: The runner of each path (``record`` runs outside grouped tasks: :func:`cbp.engine.task.translate.recordwise_task`).
RUNNERS: dict[str, type[PerKeyRunner] | type[ColumnarRunner]] = {
    "per-key": PerKeyRunner,
    "batch": BatchRunner,
    "keyed-batch": BatchRunner,
    "columnar": ColumnarRunner,
}


def runner_for(plan: TaskPlan, calls: _Calls, part: StatePartition, copies: Copies, clock: _Clock) -> TranslatorRunner:
    """The runner of the plan's path."""
    return RUNNERS[plan.path.runner](plan, calls, part, copies, clock)
