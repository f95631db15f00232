"""A durable change of a home as typed, frozen records: its Delta commits and its snapshot updates.

A stage epoch is ``plan -> result -> Change``: :mod:`.epoch` turns the tasks' results into a
:class:`Change`, which only the journal (:meth:`.journal.Journal.commit`) applies. A change holds

- its Delta commits (:class:`Commit`: the files added to and removed from one table, the
  application transaction id that marks the commit made, and where the table version it makes
  goes: :class:`StateVersion`, :class:`FlowVersion`, :class:`IncrementVersion` in the snapshot,
  :class:`EntryVersion` in a history entry);
- the snapshot updates it makes (:class:`EpochAdvance`, :class:`ConnectorRead`, :class:`SchedSet`,
  :class:`ShapeSet`, :class:`IncrementsDropped`, :class:`GcRun`; a feed's :class:`FlowCounters`,
  :class:`FrameStateSet`, :class:`IncrementAdded`, :class:`IncrementSet`; a rewind's
  :class:`StageSet`, :class:`FlowSet`, :class:`ConnectorSet`, :class:`SchedSet`,
  :class:`ShapeDropped`; an upgrade's :class:`StageDropped`, :class:`ConnectorDropped`,
  :class:`PipelineAdopted`), applied in order by the journal to the live snapshot before it is written
  (a Runnable's :class:`RunnableStateSet` is saved by the journal outside a change);
- its history entries (typed, :mod:`.entries`), the files to delete once it is
  committed (``cleanup``) and those to delete if it is abandoned before its pending record
  exists (``written``).

A commit's JSON is the pending record's, as every cbp wrote it: a target is a path into the
snapshot's JSON (``["flows", F, "version"]``) or ``["@entry", rel, key]``; :meth:`Commit.from_json`
reads what older homes wrote, and a path it does not know is ``home-corrupt``.

Reads: nothing. Writes: nothing (the journal applies a change; :meth:`SnapshotUpdate.apply`
changes the snapshot it is given).

    >>> c = Commit("flows/w", "_inc", ({"path": "a.parquet"},), (), "cbp:feed", 3, (FlowVersion("w"),))
    >>> Commit.from_json(c.to_json()) == c, c.to_json()["targets"]
    (True, [['flows', 'w', 'version']])
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import RuntimeStateError
from .entries import HistoryEntry
from .snapshot import FlowState, Increment, Sched, Snapshot, StageState

__all__ = [
    "Change",
    "Commit",
    "ConnectorRead",
    "ConnectorDropped",
    "ConnectorSet",
    "EntryVersion",
    "EpochAdvance",
    "FlowCounters",
    "FlowSet",
    "FrameStateSet",
    "FlowVersion",
    "GcRun",
    "IncrementAdded",
    "IncrementSet",
    "IncrementVersion",
    "IncrementsDropped",
    "PipelineAdopted",
    "RunnableStateSet",
    "SchedSet",
    "ShapeDropped",
    "ShapeSet",
    "StageDropped",
    "StageSet",
    "SnapshotUpdate",
    "StateVersion",
    "Target",
    "ENTRY",
]

ENTRY = "@entry"  # first element of a commit target that points into a history entry

#: A Delta ``add`` or ``remove`` action as cbp writes it (``path``, ``partition``, ``rows``, ``size``...).
Action = dict[str, Any]
JSON = dict[str, Any]


@dataclass(frozen=True)
class StateVersion:
    """The version of stage ``stage``'s state table (``stages.<stage>.state_version``)."""

    stage: str

    def path(self) -> list[str]:
        return ["stages", self.stage, "state_version"]


@dataclass(frozen=True)
class FlowVersion:
    """The version of flow ``flow``'s table (``flows.<flow>.version``)."""

    flow: str

    def path(self) -> list[str]:
        return ["flows", self.flow, "version"]


@dataclass(frozen=True)
class IncrementVersion:
    """The table version holding increment ``inc`` of flow ``flow`` (``flows.<flow>.incs.<inc>.version``)."""

    flow: str
    inc: int

    def path(self) -> list[str]:
        return ["flows", self.flow, "incs", str(self.inc), "version"]


@dataclass(frozen=True)
class EntryVersion:
    """Field ``key`` of history entry ``entry`` (written with the change)."""

    entry: str
    key: str

    def path(self) -> list[str]:
        return [ENTRY, self.entry, self.key]


Target = StateVersion | FlowVersion | IncrementVersion | EntryVersion


def target_of(path: list[str]) -> Target:
    """The typed target of a pending record's JSON path (what every cbp wrote)."""
    p = [str(x) for x in path]
    if len(p) == 3 and p[0] == ENTRY:
        return EntryVersion(p[1], p[2])
    if len(p) == 3 and p[0] == "stages" and p[2] == "state_version":
        return StateVersion(p[1])
    if len(p) == 3 and p[0] == "flows" and p[2] == "version":
        return FlowVersion(p[1])
    if len(p) == 5 and p[0] == "flows" and p[2] == "incs" and p[4] == "version" and p[3].lstrip("-").isdigit():
        return IncrementVersion(p[1], int(p[3]))
    raise RuntimeStateError(
        f"the pending change names a commit target cbp does not know: {path!r}; the home was changed by hand "
        "or by a newer cbp",
        code="home-corrupt",
    )


def set_version(snap: JSON, target: Target, version: int) -> None:
    """Put ``version`` where ``target`` says in a snapshot's JSON (not an entry's: see :class:`Change`)."""
    *parents, last = target.path()
    doc = snap
    for k in parents:
        doc = doc[k]
    doc[last] = version


@dataclass(frozen=True)
class Commit:
    """One Delta commit of a change: ``adds``/``removes`` on ``table``, made once (``app`` at ``version``)."""

    table: str
    partition_by: str
    adds: tuple[Action, ...]
    removes: tuple[Action, ...]
    app: str
    version: int
    targets: tuple[Target, ...] = ()
    overwrite: bool = False
    schema: str | None = None  # the table's new schema (Arrow IPC, hex), if it changes one (cbp upgrade)

    def to_json(self) -> JSON:
        out: JSON = {
            "table": self.table,
            "partition_by": self.partition_by,
            "adds": [dict(a) for a in self.adds],
            "removes": [dict(r) for r in self.removes],
            "app": self.app,
            "version": self.version,
            "targets": [t.path() for t in self.targets],
        }
        if self.overwrite:
            out["overwrite"] = True
        if self.schema is not None:
            out["schema"] = self.schema
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Commit:
        return cls(
            table=str(doc["table"]),
            partition_by=str(doc["partition_by"]),
            adds=tuple(doc["adds"]),
            removes=tuple(doc["removes"]),
            app=str(doc["app"]),
            version=int(doc["version"]),
            targets=tuple(target_of(p) for p in doc.get("targets", [])),
            overwrite=bool(doc.get("overwrite", False)),
            schema=doc.get("schema") or None,
        )


@dataclass(frozen=True)
class EpochAdvance:
    """Stage ``stage`` ran epoch ``epoch``: its Runnable's new state, its state partitions' index
    and layout (None: a stateless stage keeps them), and the bindings files it keeps."""

    stage: str
    epoch: int
    runnable_state: Any
    bindings: tuple[str, ...]
    index: Mapping[str, str] | None = None
    layout: str | None = None

    def apply(self, st: Snapshot) -> None:
        sst = st.stages[self.stage]
        sst.epoch, sst.runnable_state, sst.bindings = self.epoch, self.runnable_state, list(self.bindings)
        if self.index is not None:
            sst.index = dict(self.index)
        if self.layout is not None:
            sst.layout = self.layout


@dataclass(frozen=True)
class RunnableStateSet:
    """Stage ``stage``'s Runnable returned a new ``state`` with a "not runnable" answer (stored as JSON)."""

    stage: str
    state: Any

    def apply(self, st: Snapshot) -> None:
        st.stages[self.stage].runnable_state = copy.deepcopy(self.state)


@dataclass(frozen=True)
class ConnectorRead:
    """Stage ``stage`` removed the first ``n`` increments of its connector from ``flow``."""

    stage: str
    flow: str
    n: int

    def apply(self, st: Snapshot) -> None:
        del st.connector(self.stage, self.flow)[: self.n]


@dataclass(frozen=True)
class ShapeSet:
    """The recorded shape ``key`` (``code:<stage>``, ``flow:<f>`` ...) becomes ``value``."""

    key: str
    value: Mapping[str, Any]

    def apply(self, st: Snapshot) -> None:
        st.shapes[self.key] = dict(self.value)


@dataclass(frozen=True)
class IncrementsDropped:
    """Increments ``incs`` of flow ``flow`` leave the snapshot (collected, or a feed withdrawn), and
    every connector of ``readers`` from the flow forgets them."""

    flow: str
    incs: tuple[int, ...]
    readers: tuple[str, ...] = ()

    def apply(self, st: Snapshot) -> None:
        fs, gone = st.flows[self.flow], set(self.incs)
        for i in self.incs:
            del fs.incs[i]
        for c in self.readers:
            q = st.connector(c, self.flow)
            q[:] = [i for i in q if i not in gone]


@dataclass(frozen=True)
class FlowCounters:
    """Flow ``flow``'s counters move on: its next increment id to at least ``next_inc``, its
    feeds to ``feeds`` (None: unchanged)."""

    flow: str
    next_inc: int | None = None
    feeds: int | None = None

    def apply(self, st: Snapshot) -> None:
        fs = st.flows[self.flow]
        if self.next_inc is not None:
            fs.next_inc = max(fs.next_inc, self.next_inc)
        if self.feeds is not None:
            fs.feeds = self.feeds


@dataclass(frozen=True)
class FrameStateSet:
    """Flow ``flow``'s framing state (a FrameBy function's) becomes ``state``."""

    flow: str
    state: Any

    def apply(self, st: Snapshot) -> None:
        st.flows[self.flow].frame_state = copy.deepcopy(self.state)


@dataclass(frozen=True)
class IncrementAdded:
    """A new increment ``inc`` of flow ``flow``, enqueued on the connector of each of ``readers``."""

    flow: str
    inc: int
    increment: Increment
    readers: tuple[str, ...] = ()

    def apply(self, st: Snapshot) -> None:
        st.flows[self.flow].incs[self.inc] = copy.deepcopy(self.increment)
        for c in self.readers:
            st.connector(c, self.flow).append(self.inc)


@dataclass(frozen=True)
class IncrementSet:
    """Live increment ``inc`` of flow ``flow`` becomes ``increment`` (an open framed one grew or completed)."""

    flow: str
    inc: int
    increment: Increment

    def apply(self, st: Snapshot) -> None:
        st.flows[self.flow].incs[self.inc] = copy.deepcopy(self.increment)


@dataclass(frozen=True)
class StageSet:
    """Stage ``stage``'s state in the snapshot becomes ``state`` (a rewind puts it back)."""

    stage: str
    state: StageState

    def apply(self, st: Snapshot) -> None:
        st.stages[self.stage] = copy.deepcopy(self.state)


@dataclass(frozen=True)
class FlowSet:
    """Flow ``flow``'s state in the snapshot becomes ``state`` (a rewind puts it back)."""

    flow: str
    state: FlowState

    def apply(self, st: Snapshot) -> None:
        st.flows[self.flow] = copy.deepcopy(self.state)


@dataclass(frozen=True)
class ConnectorSet:
    """Connector ``name`` (``<stage>.<flow>``) holds ``incs`` (a rewind puts it back)."""

    name: str
    incs: tuple[int, ...]

    def apply(self, st: Snapshot) -> None:
        st.connectors[self.name] = list(self.incs)


@dataclass(frozen=True)
class SchedSet:
    """The scheduler's position becomes ``sched`` (a rewind starts it again)."""

    sched: Sched

    def apply(self, st: Snapshot) -> None:
        st.sched = copy.deepcopy(self.sched)


@dataclass(frozen=True)
class ShapeDropped:
    """The recorded shape ``key`` is forgotten (a rewind to before a stage's code was noted)."""

    key: str

    def apply(self, st: Snapshot) -> None:
        st.shapes.pop(self.key, None)


@dataclass(frozen=True)
class StageDropped:
    """Stage ``stage`` leaves the snapshot (an upgrade archived or dropped it; its connectors go separately)."""

    stage: str

    def apply(self, st: Snapshot) -> None:
        st.stages.pop(self.stage, None)


@dataclass(frozen=True)
class ConnectorDropped:
    """Connector ``name`` (``<stage>.<flow>``) leaves the snapshot (an upgrade dropped the input or its stage)."""

    name: str

    def apply(self, st: Snapshot) -> None:
        st.connectors.pop(self.name, None)


@dataclass(frozen=True)
class PipelineAdopted:
    """The flows, stages and connectors of the pipeline that the snapshot lacks are added, empty
    (:meth:`.snapshot.Snapshot.adopt`); ``inputs``: each stage's input flows."""

    flows: tuple[str, ...]
    inputs: tuple[tuple[str, tuple[str, ...]], ...]

    def apply(self, st: Snapshot) -> None:
        st.adopt(dict.fromkeys(self.flows), {s: list(fl) for s, fl in self.inputs})


@dataclass(frozen=True)
class GcRun:
    """Garbage collection run ``run`` collected increments."""

    run: int

    def apply(self, st: Snapshot) -> None:
        st.gc_runs = self.run


SnapshotUpdate = (
    EpochAdvance
    | ConnectorRead
    | ShapeSet
    | IncrementsDropped
    | GcRun
    | FlowCounters
    | FrameStateSet
    | IncrementAdded
    | IncrementSet
    | StageSet
    | FlowSet
    | ConnectorSet
    | SchedSet
    | ShapeDropped
    | StageDropped
    | ConnectorDropped
    | PipelineAdopted
    | RunnableStateSet
)


@dataclass(frozen=True)
class Change:
    """One durable change (see the module docstring); ``kind`` is ``epoch``, ``feed``, ``gc``,
    ``compact`` (:mod:`.compaction`), ``unfeed``, ``upgrade`` or ``rewind``; ``what`` says it in messages."""

    kind: str
    what: str
    commits: tuple[Commit, ...] = ()
    updates: tuple[SnapshotUpdate, ...] = ()
    entries: tuple[tuple[str, HistoryEntry], ...] = ()  # typed (.entries)
    stage: str | None = None  # a stage epoch's stage: its intention is cleared once committed
    cleanup: tuple[str, ...] = field(default=())
    written: tuple[str, ...] = field(default=())
