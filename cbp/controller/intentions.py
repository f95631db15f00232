"""Intentions: what a stage epoch is about to do, written before it runs (paper 001 §4.3).

Before a stage epoch runs, its *intention* (what it reads and removes, the increment ids it will
produce, the connectors it touches) is written under ``_cbp/intentions``. A runner that dies
leaves it: the next ``cbp run`` finishes the epoch with the same decision if its inputs are still
at the heads of their connectors (:meth:`Intentions.fits`), or drops it and the files its attempt
wrote (:meth:`Intentions.abandon`). The journal clears an intention when its epoch commits; an
epoch whose job failed or whose commit was refused (:mod:`.commitcheck`) drops its own.

Reads: ``live.spec`` and ``live.st`` (stage epochs and connectors), the home's intentions, the rewinds' records.
Writes: intention files, and deletes the files an abandoned attempt wrote (its epoch's bindings,
state and index files, output increments), never the state files of an epoch of that number that a
rewind undid (the rewinds' records name them). :attr:`Intentions.interrupted` holds the intentions
found at the start of a run, for the scheduler to finish.

An intention is a frozen :class:`Intention`; its JSON is what every cbp wrote (an intention an
older cbp left, without ``out_incs`` or ``connectors``, still loads).

    >>> it = Intention("count", 3, {"w": 1}, {"w": 1}, None, {"w": [5]}, {"out": 7})
    >>> Intention.from_json(it.to_json()) == it, it.decision().reads
    (True, {'w': 1})
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .. import faults
from ..errors import RuntimeStateError
from ..storage import LAYOUT, PART, Home
from .entries import RewindEntry, parse
from .live import Live
from .records import Decision

__all__ = ["Intention", "Intentions"]


@dataclass(frozen=True)
class Intention:
    """What stage ``stage``'s epoch ``epoch`` is about to do: its Runnable's decision (``reads``,
    ``removes``, ``runnable_state``), the increment ids it reads per input flow (``inputs``), the
    increment ids it produces per output flow (``out_incs``), when it started and its input
    connectors as they were."""

    stage: str
    epoch: int
    reads: Mapping[str, int]
    removes: Mapping[str, int]
    runnable_state: Any
    inputs: Mapping[str, list[int]]
    out_incs: Mapping[str, int] = field(default_factory=dict)
    started: float | None = None
    connectors: Mapping[str, list[int]] = field(default_factory=dict)

    def decision(self) -> Decision:
        """The decision to run it with again."""
        return Decision(dict(self.reads), dict(self.removes), self.runnable_state)

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "epoch": self.epoch,
            "reads": dict(self.reads),
            "removes": dict(self.removes),
            "runnable_state": self.runnable_state,
            "inputs": {f: list(ids) for f, ids in self.inputs.items()},
            "out_incs": dict(self.out_incs),
            "started": self.started,
            "connectors": {f: list(ids) for f, ids in self.connectors.items()},
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Intention:
        started = doc.get("started")
        return cls(
            stage=str(doc["stage"]),
            epoch=int(doc["epoch"]),
            reads={str(f): int(n) for f, n in doc.get("reads", {}).items()},
            removes={str(f): int(n) for f, n in doc.get("removes", {}).items()},
            runnable_state=doc.get("runnable_state"),
            inputs={str(f): [int(i) for i in ids] for f, ids in doc.get("inputs", {}).items()},
            out_incs={str(f): int(i) for f, i in (doc.get("out_incs") or {}).items()},
            started=float(started) if started is not None else None,
            connectors={str(f): [int(i) for i in ids] for f, ids in (doc.get("connectors") or {}).items()},
        )


class Intentions:
    """Writes, checks and drops stage epochs' intentions."""

    def __init__(self, home: Home, live: Live) -> None:
        self.home, self.live = home, live
        self.interrupted: dict[str, Intention] = {}  # stage -> intention of an epoch to finish

    def read(self) -> dict[str, Intention]:
        """The home's intentions, stage -> intention."""
        return {stage: Intention.from_json(doc) for stage, doc in self.home.intentions().items()}

    def load(self) -> None:
        """Find epochs that were under way when a runner died; drop intentions that no longer apply."""
        self.interrupted = {}
        for stage, it in self.read().items():
            if stage in self.live.spec.stages and self.fits(it):
                self.interrupted[stage] = it
            else:
                self.abandon(stage, it)

    def fits(self, it: Intention) -> bool:
        """An intention can be finished if its epoch is the stage's next and its inputs are still at the heads."""
        stage, st = it.stage, self.live.st
        if stage not in self.live.spec.stages or it.epoch != st.stages[stage].epoch + 1:
            return False
        for flow, ids in it.inputs.items():
            q = st.connectors.get(f"{stage}.{flow}")
            if q is None or q[: len(ids)] != ids:
                return False
        return True

    def abandon(self, stage: str, it: Intention) -> None:
        """Drop an intention whose epoch will not be finished, and the files its attempt left."""
        st = self.live.st.stages.get(stage)
        if it.epoch > (st.epoch if st else 0):
            self.discard_files(stage, it.epoch, it.out_incs)
        self.home.clear_intention(stage)

    def abandon_all(self) -> None:
        """Drop every intention (a rewind or an upgrade: the next run decides again)."""
        for stage, it in self.read().items():
            self.abandon(stage, it)

    def write(
        self, stage: str, epoch: int, d: Decision, inputs: dict[str, list[int]], out_incs: dict[str, int]
    ) -> None:
        spec = self.live.spec.stages[stage]
        try:
            connectors = {i.flow: self.live.st.connector(stage, i.flow) for i in spec.inputs}
            it = Intention(stage, epoch, d.reads, d.removes, d.state, inputs, out_incs, time.time(), connectors)
            self.home.write_intention(stage, it.to_json())
        except OSError as e:
            raise RuntimeStateError(
                f"stage '{stage}' epoch {epoch}: cannot write its intention in {self.home.uri(LAYOUT.INTENTIONS)}: "
                f"{e}; "
                "nothing was run",
                code="io",
            ) from e
        faults.point("epoch:intention")

    def abandon_quietly(self, stage: str, epoch: int, out_incs: dict[str, int]) -> None:
        try:
            self.discard_files(stage, epoch, out_incs)
            self.home.clear_intention(stage)
        except OSError:
            pass  # e.g. a read-only home: the intention stays and the next run re-runs the epoch

    def discard_files(self, stage: str, epoch: int, out_incs: Mapping[str, int]) -> None:
        """Delete the files an uncommitted attempt of this epoch wrote (none of them is in a Delta log)."""
        prefix = LAYOUT.epoch_prefix(epoch)
        keep = self._undone_state_files(stage, epoch)
        for name in self.home.list_dir(LAYOUT.bindings(stage)):
            if name.startswith(prefix):
                self.home.delete_file(f"{LAYOUT.bindings(stage)}/{name}")
        for base in (LAYOUT.state(stage), LAYOUT.index(stage)):
            for part in self.home.list_dir(base):
                if part.startswith(f"{PART}="):
                    for name in self.home.list_dir(f"{base}/{part}"):
                        if name.startswith(prefix) and name not in keep:
                            self.home.delete_file(f"{base}/{part}/{name}")
        for flow, inc in out_incs.items():
            d = LAYOUT.increment_dir(flow, inc)
            for name in self.home.list_dir(d):
                if name.startswith(LAYOUT.output_prefix(stage, epoch)):
                    self.home.delete_file(f"{d}/{name}")

    def _undone_state_files(self, stage: str, epoch: int) -> set[str]:
        """The names of the state files that an earlier epoch ``epoch`` of ``stage`` committed before a
        rewind undid it: they share this attempt's name prefix, and the state table's history still
        lists them (Delta time travel to the undone epoch reads them), so they are never deleted."""
        names: set[str] = set()
        for name in self.home.list_dir(f"{LAYOUT.HISTORY}/rewinds"):
            rel = f"{LAYOUT.HISTORY}/rewinds/{name}"
            doc = self.home.read_json(rel) if name.endswith(".json") else None
            rec = parse(RewindEntry.from_json, doc, rel) if doc is not None else None
            for e in rec.undone.get(stage, ()) if rec is not None else ():
                if e.epoch == epoch and e.entry.state_version is not None:
                    names.update(
                        f["path"].rsplit("/", 1)[-1]
                        for f in self.home.table_files(LAYOUT.state(stage), e.entry.state_version)
                    )
        return names
