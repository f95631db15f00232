"""Internal: the incremental dataflow controller (IDC, paper 001 §4.1-4.3), not public API.

It keeps, per stage input, a *flow connector*: the ordered queue of increments available to
that stage with their framing keys. It asks each stage's Runnable which increments to read and
remove, runs the runnable stages of a possibly cyclic graph round by round until none is
runnable (or an epoch budget is spent), commits each stage epoch durably, and garbage-collects
increments that no connector references.

- :mod:`.snapshot`: the typed, versioned live state (what is live, not history);
- :mod:`.history`: what happened (epochs, feeds, feed ids, collected increments), read on demand;
- :mod:`.journal`: the commit protocol: pending records, Delta commits, recovery;
- :mod:`.landing`: feeds, framing, garbage collection;
- :mod:`.keyed`: keyed flows (upserts by key as signed changes);
- :mod:`.sources`: syncing flows fed from Delta tables;
- :mod:`.scheduler`: runnability and the round-robin scheduler;
- :mod:`.epoch`: one stage epoch: intention, Spark job, commits;
- :mod:`.reads`: state and output records, epochs, status.

    >>> from cbp.spec import load_spec                                  # doctest: +SKIP
    >>> ctl = Controller(load_spec("flows/url_count.yaml"), Home("state/url_count"))  # doctest: +SKIP
    >>> ctl.feed("urls", [{"url": "http://a/"}]); ctl.run()             # doctest: +SKIP
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator, Optional

from ..engine.task.bipindex import ROW_GROUP
from ..errors import CbpError, SpecError, UsageError
from ..spec import PipelineSpec, load_spec
from ..storage import LAYOUT, Home
from .epoch import Epochs
from .history import History
from .journal import Journal
from .keyed import Keyed
from .landing import Landing
from .reads import Reads
from .codehash import evolution_status
from .plan import PIPELINE, Plan, definition, recorded
from .records import Decision, EpochRecord, EpochReport, Landed
from .stageplan import make_plan
from .upgrade import apply_plan, record, sha, yaml_text
from .scheduler import Scheduling
from .sources import Sources, SyncReport
from .snapshot import Snapshot

__all__ = ["Controller", "EpochReport", "EpochRecord", "Decision", "Landed", "SyncReport"]


class Controller(Journal, Landing, Keyed, Sources, Scheduling, Epochs, Reads):
    """Connectors, runnability, scheduling and epoch commits for one pipeline in one home."""

    def __init__(self, spec: PipelineSpec, home: Home, *, mode: Optional[str] = None, spark: Any = None,
                 max_state_files: int = 8, backpressure: int = 4, state_row_group: int = ROW_GROUP,
                 state_cache_mb: Optional[float] = None, state_scan_fraction: Optional[float] = None, state_index_mb: Optional[float] = None,
                 small_epoch_records: Optional[int] = None, notify: Optional[Callable[[str], None]] = None) -> None:
        self.spec = spec
        self.home = home
        self.mode = mode or spec.mode
        if self.mode not in ("direct", "blackbox"):
            raise CbpError(f"unknown mode '{self.mode}'; use 'direct' or 'blackbox'")
        self._spark = spark
        self.max_state_files = max_state_files
        self.state_row_group = state_row_group
        self.state_cache_mb = state_cache_mb
        self.state_index_mb = state_index_mb
        self.state_scan_fraction = state_scan_fraction
        self.small_epoch_records = small_epoch_records
        self.backpressure = backpressure
        self._checked_ids: set[str] = set()
        self.notify = notify or (lambda message: None)  # recoveries and lock take-overs are reported here
        self.epoch_timeout: Optional[float] = None  # seconds per stage epoch of the current run (cbp run --epoch-timeout)
        self._interrupted: dict[str, dict[str, Any]] = {}  # stage -> intention of an epoch to finish
        self._entries: dict[str, Any] = {}
        self._upgrading = False
        self.evolution = Plan([])
        self.run_info: Optional[dict[str, Any]] = None  # the cbp run under way (pid, host, started, command), for the history
        self.history = History(home, LAYOUT)
        self._load(home.read_controller())

    @property
    def spark(self) -> Any:
        if self._spark is None:
            from ..engine.driver.session import get_spark

            self._spark = get_spark()
        return self._spark

    def _fresh(self) -> Snapshot:
        """The snapshot of a new home."""
        s = Snapshot(self.spec.name)
        self.st = s
        self._reconcile()
        return s

    def _reconcile(self) -> None:
        """Compare the YAML with the pipeline the home recorded (:attr:`evolution`, the plan); adopt
        what touches no stored data (new flows, stages or inputs start empty) and record it with
        the next change. A plan that touches stored data waits for :meth:`upgrade`."""
        if self.st.pipeline != self.spec.name:
            raise UsageError(f"home {self.home.location} belongs to pipeline '{self.st.pipeline}', not '{self.spec.name}'; use another --home",
                             code="bad-home")
        self.evolution = make_plan(recorded(self.st), self.spec, self.st)
        self.st.adopt(self.spec.flows, {s: st.input_flows for s, st in self.spec.stages.items()})
        if not self.evolution.needs_upgrade:
            rec = self.st.shapes.get(PIPELINE)
            if rec is None or rec["sha256"] != sha(yaml_text(self.spec.path)) or rec["definition"] != definition(self.spec):
                rel, entry = record(self, "created" if not self.st.shapes else "adopted", self.evolution.lines())
                self.history.legacy[rel] = entry

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The home's lock (:meth:`Journal._locked`); a change waits for ``cbp upgrade`` while the YAML
        changes stored data (code ``pipeline-changed``)."""
        with Journal._locked(self):
            if self.evolution.needs_upgrade and not self._upgrading:
                raise UsageError(f"{self.spec.path}: the pipeline changed since the home {self.home.location} recorded it, in ways that "
                                 "touch stored data: " + "; ".join(self.evolution.lines())
                                 + ". Run 'cbp upgrade' (or 'cbp run --upgrade') to apply the plan ('cbp plan' shows it), or restore the previous YAML",
                                 code="pipeline-changed")
            yield

    # ------------------------------------------------------------------ evolution (cbp plan / upgrade)
    def _committed_snapshot(self) -> Snapshot:
        return Snapshot.from_json(self._committed) if self._committed is not None else Snapshot(self.spec.name)

    def recorded_definition(self) -> Optional[dict[str, Any]]:
        """The pipeline the home recorded (:func:`.plan.definition`), None for a new home."""
        return recorded(self._committed_snapshot())

    def plan(self, restore: tuple[str, ...] = (), discard: tuple[str, ...] = ()) -> Plan:
        """What :meth:`upgrade` would do (nothing is changed)."""
        self.refresh()
        return make_plan(self.recorded_definition(), self.spec, self._committed_snapshot(), restore=restore, discard=discard)

    def upgrade(self, restore: tuple[str, ...] = (), discard: tuple[str, ...] = (), command: str = "cbp upgrade") -> Plan:
        """Apply the plan as one durable change; refused plans raise ``plan-refused``."""
        with self.home.runner_lock(command):
            self._upgrading = True
            try:
                with self._locked():
                    plan = self.plan(restore, discard)
                    if plan.refused:
                        raise UsageError("the plan has changes cbp cannot make: " + "; ".join(c.line() for c in plan.refused), code="plan-refused")
                    unknown = [r for r in (*restore, *discard) if r not in {c.name for c in plan.changes}]
                    if unknown:
                        raise UsageError(f"no archived stage '{unknown[0]}' is added back by this YAML", code="not-archived")
                    if plan.needs_upgrade:
                        apply_plan(self, plan, restore)
                    return plan
            finally:
                self._upgrading = False

    def recorded_spec(self) -> Optional[PipelineSpec]:
        """The pipeline as the home recorded it (its YAML, translators resolved beside today's file); None if not recorded."""
        rec = self._committed_snapshot().shapes.get(PIPELINE)
        entry = self.home.read_json(rec["entry"]) if rec else None
        if not entry or not entry.get("yaml"):
            return None
        try:
            return load_spec(self.spec.path, text=entry["yaml"])
        except SpecError as e:
            self.notify(f"the recorded YAML cannot be loaded as it was ({e}); reading with today's YAML")
            return None

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Read-only access on a home whose YAML changed: as the home recorded it (a note says so)."""
        self.refresh()
        if not self.evolution.needs_upgrade:
            yield
            return
        spec = self.recorded_spec()
        self.notify(f"warning: {self.spec.path} differs from the pipeline recorded in {self.home.location} "
                    f"('cbp plan' shows how); reading the home as {'recorded' if spec else 'stored'}")
        current = self.spec
        self.spec = spec or current
        try:
            yield
        finally:
            self.spec = current
            if self._committed is not None:
                self._load(self._committed)

    def status(self) -> dict[str, Any]:
        with self.reading():
            out = Reads.status(self)
            out.update(evolution_status(self))
        return out
