"""The pipeline a home recorded, against today's YAML: the plan, and the gate on changes.

Every snapshot the journal loads is reconciled with the YAML (:meth:`Evolution.reconcile`): the
plan (:attr:`Evolution.plan`, :mod:`.stageplan`) says what differs; what touches no stored data
(new flows, stages or inputs start empty) is adopted at once and recorded with the next change;
while a difference touches stored data, every change waits for ``cbp upgrade``
(:meth:`Evolution.check`, code ``pipeline-changed``; :mod:`.upgrade` applies the plan).

The recorded YAML lives in the history (``_cbp/history/pipeline/<n>.json``, one per recorded
pipeline: the first write of a home, each upgrade, and writes that took a change touching no
stored data); the snapshot's ``shapes["pipeline"]`` says which one is current.

Reads: ``live.spec`` and ``live.st`` (:class:`~.live.Live`), ``live.committed``, the YAML file, the
recorded pipeline's history entry. Writes: the history's legacy entries (the recorded YAML's
entry, written with the next change); what it adopts in ``live.st`` (the flows and connectors the
YAML adds, ``shapes["pipeline"]`` and the ``flow:``/``state:`` shapes when the YAML is recorded)
are typed updates the journal applies as it loads the snapshot.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import Any

from ..errors import SpecError, UsageError
from ..spec import PipelineSpec, load_spec
from ..storage import LAYOUT, Home
from .change import PipelineAdopted, ShapeSet, SnapshotUpdate
from .entries import PipelineEntry, parse
from .history import History
from .live import Live
from .plan import PIPELINE, Plan, definition, recorded
from .snapshot import Snapshot
from .stageplan import make_plan

__all__ = ["Evolution", "recording", "yaml_text", "sha", "pipeline_entry"]


def pipeline_entry(n: int) -> str:
    """The history entry of the home's ``n``-th recorded pipeline."""
    return f"{LAYOUT.HISTORY}/pipeline/{n:012d}.json"


def yaml_text(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def recording(
    st: Snapshot, spec: PipelineSpec, kind: str, lines: list[str]
) -> tuple[str, PipelineEntry, list[ShapeSet]]:
    """What making ``spec`` the home's recorded pipeline takes: its history entry (path, value) and
    the shapes it sets in ``st`` (``shapes["pipeline"]``, the ``flow:``/``state:`` shapes); ``st`` is
    not changed."""
    n = int((st.shapes.get(PIPELINE) or {}).get("n", 0)) + 1
    text = yaml_text(spec.path)
    d = definition(spec)
    rel = pipeline_entry(n)
    shapes = [ShapeSet(PIPELINE, {"n": n, "entry": rel, "sha256": sha(text), "definition": d})]
    for f, fd in d["flows"].items():  # what an older cbp reads
        shapes.append(ShapeSet(f"flow:{f}", {"schema": fd["schema"], "framed": fd["framed"]}))
    for s, sd in d["stages"].items():
        if sd["state"] is not None:
            shapes.append(ShapeSet(f"state:{s}", {"schema": sd["state"], "partitions": sd["partitions"]}))
    entry = PipelineEntry(n, kind, text, spec.path, tuple(lines), time.time(), d)
    return rel, entry, shapes


class Evolution:
    """The plan from the recorded pipeline to the YAML, kept current as snapshots load."""

    def __init__(self, home: Home, live: Live, history: History, notify: Callable[[str], None]) -> None:
        self.home, self.live, self.history, self.notify = home, live, history, notify
        self.plan = Plan([])  # from the recorded pipeline to the YAML, as of the live snapshot
        self.upgrading = False  # set while cbp upgrade applies the plan: changes may go on

    def reconcile(self) -> list[SnapshotUpdate]:
        """Compare the YAML with the pipeline the home recorded (:attr:`plan`); what touches no
        stored data (new flows, stages or inputs start empty) is adopted: the updates returned,
        which the journal applies to the snapshot it loaded (``live.st`` is not changed here), and
        recorded with the next change. A plan that touches stored data waits for ``cbp upgrade``."""
        st, spec = self.live.st, self.live.spec
        if st.pipeline != spec.name:
            raise UsageError(
                f"home {self.home.location} belongs to pipeline '{st.pipeline}', not '{spec.name}'; use another --home",
                code="bad-home",
            )
        self.plan = make_plan(recorded(st), spec, st)
        inputs = tuple((s, tuple(stage.input_flows)) for s, stage in spec.stages.items())
        updates: list[SnapshotUpdate] = [PipelineAdopted(tuple(spec.flows), inputs)]
        if not self.plan.needs_upgrade:
            rec = st.shapes.get(PIPELINE)
            if rec is None or rec["sha256"] != sha(yaml_text(spec.path)) or rec["definition"] != definition(spec):
                kind = "created" if not st.shapes else "adopted"
                rel, entry, shapes = recording(st, spec, kind, self.plan.lines())
                self.history.legacy[rel] = entry.to_json()  # written with the next change
                updates += shapes
        return updates

    def check(self) -> None:
        """Refuse a change (code ``pipeline-changed``) while the YAML changes stored data, unless upgrading."""
        if self.plan.needs_upgrade and not self.upgrading:
            spec = self.live.spec
            rec = self.live.st.shapes.get(PIPELINE)
            if rec is not None and rec["sha256"] == sha(yaml_text(spec.path)):  # same YAML: cbp compiles it anew
                what = f"the YAML is the one the home {self.home.location} recorded, but this cbp compiles it "
                what += "differently from the cbp that wrote the home, in ways that touch stored data: "
                fix = "Run 'cbp upgrade' (or 'cbp run --upgrade') once to apply the plan ('cbp plan' shows it)"
            else:
                what = f"the pipeline changed since the home {self.home.location} recorded it, in ways that "
                what += "touch stored data: "
                fix = "Run 'cbp upgrade' (or 'cbp run --upgrade') to apply the plan ('cbp plan' shows it), "
                fix += "or restore the previous YAML"
            raise UsageError(
                f"{spec.path}: {what}" + "; ".join(self.plan.lines()) + f". {fix}", code="pipeline-changed"
            )

    def committed_snapshot(self) -> Snapshot:
        """The newest committed snapshot (a new home's is empty)."""
        doc = self.live.committed
        return Snapshot.from_json(doc) if doc is not None else Snapshot(self.live.spec.name)

    def recorded_definition(self) -> dict[str, Any] | None:
        """The pipeline the home recorded (:func:`.plan.definition`), None for a new home."""
        return recorded(self.committed_snapshot())

    def recorded_spec(self) -> PipelineSpec | None:
        """The pipeline as the home recorded it (its YAML, translators resolved beside today's file);
        None if not recorded."""
        rec = self.committed_snapshot().shapes.get(PIPELINE)
        doc = self.home.read_json(rec["entry"]) if rec else None
        entry = parse(PipelineEntry.from_json, doc, rec["entry"]) if rec and doc else None
        if entry is None or not entry.yaml:
            return None
        try:
            return load_spec(self.live.spec.path, text=entry.yaml)
        except SpecError as e:
            self.notify(f"the recorded YAML cannot be loaded as it was ({e}); reading with today's YAML")
            return None
