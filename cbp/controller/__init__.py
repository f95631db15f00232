"""Internal: the incremental dataflow controller (IDC, paper 001 §4.1-4.3), not public API.

It keeps, per stage input, a *flow connector*: the ordered queue of increments available to
that stage with their framing keys. It asks each stage's Runnable which increments to read and
remove, runs the runnable stages of a possibly cyclic graph round by round until none is
runnable (or an epoch budget is spent), commits each stage epoch durably, and garbage-collects
increments that no connector references.

:class:`Controller` is a facade over parts, each an object handed what it reads and writes
(each module's docstring says which tables, files and snapshot fields):

- :mod:`.live`: what the parts share: the spec and live snapshot (:class:`~.live.Live`), the
  notes, the tuning, Spark;
- :mod:`.snapshot`: the typed, versioned live state (what is live, not history);
- :mod:`.history`: what happened (epochs, feeds, feed ids, collected increments), read on demand;
- :mod:`.journal`: the commit protocol: pending records, Delta commits, recovery;
- :mod:`.evolution`: the recorded pipeline against the YAML, and the gate on changes;
- :mod:`.intentions`: what a stage epoch is about to do, finished or dropped after a crash;
- :mod:`.landing`: feeds, framing, garbage collection; :mod:`.keyed`: keyed flows (upserts by
  key as signed changes); :mod:`.feeds`: duplicate feeds and withdrawing one;
- :mod:`.sources`: syncing flows fed from Delta tables;
- :mod:`.scheduler`: runnability and the round-robin scheduler;
- :mod:`.epoch`: one stage epoch: intention, Spark job, commits;
- :mod:`.reads`: state and output records, epochs, status; :mod:`.runs`: the history of runs;
- :mod:`.upgrade` (with :mod:`.migrate` and :mod:`.backfill`): applying a changed YAML;
  :mod:`.rewind`: going back.

Reads: nothing itself (it composes the parts and delegates to them). Writes: only ``live.spec``,
which :meth:`Controller.reading` swaps while a changed home is read as it was recorded.

    >>> from cbp.spec import load_spec                                  # doctest: +SKIP
    >>> ctl = Controller(load_spec("flows/url_count.yaml"), Home("state/url_count"))  # doctest: +SKIP
    >>> ctl.feed("urls", [{"url": "http://a/"}]); ctl.run()             # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Optional

import pyarrow as pa

from ..engine.task.bipindex import ROW_GROUP
from ..errors import UsageError
from ..spec import PipelineSpec
from ..storage import LAYOUT, Home, objectstore
from .codehash import evolution_status
from .epoch import Epochs
from .evolution import Evolution
from .feeds import Feeds
from .history import History
from .intentions import Intentions
from .journal import Journal
from .keyed import Keyed
from .landing import Landing
from .live import LazySpark, Live, Notice, Tuning
from .migrate import Migration
from .plan import Plan
from .reads import Reads
from .records import Decision, EpochRecord, EpochReport, Landed
from .retention import Retention
from .rewind import Rewind, RewindReport
from .runs import Runs
from .scheduler import Scheduler
from .snapshot import Snapshot
from .sources import Sources, SyncReport
from .upgrade import Upgrade

__all__ = ["Controller", "EpochReport", "EpochRecord", "Decision", "Landed", "SyncReport"]


class Controller:
    """Connectors, runnability, scheduling and epoch commits for one pipeline in one home."""

    def __init__(
        self,
        spec: PipelineSpec,
        home: Home,
        *,
        mode: str | None = None,
        spark: Any = None,
        max_state_files: int = 8,
        backpressure: int = 4,
        state_row_group: int = ROW_GROUP,
        state_cache_mb: float | None = None,
        state_scan_fraction: float | None = None,
        state_index_mb: float | None = None,
        small_epoch_records: int | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.home = home
        self.mode = mode or spec.mode
        if self.mode not in ("direct", "blackbox"):
            raise UsageError(f"unknown mode '{self.mode}'; use 'direct' or 'blackbox'", code="bad-option")
        self.live = Live(spec)
        self.tuning = Tuning(
            max_state_files,
            state_row_group,
            state_cache_mb,
            state_scan_fraction,
            small_epoch_records,
            backpressure,
            state_index_mb,
        )
        self._spark = LazySpark(spark)
        self._notice = Notice(notify)  # recoveries and lock take-overs are reported here
        self.history = History(home, LAYOUT)
        self._compose()
        try:
            snapshot = home.read_controller()  # the home's first read: a store taking no connection fails here
        except OSError as e:
            raise objectstore.unreachable(home.location, e) or e
        self._journal.load(snapshot)

    def _compose(self) -> None:
        """Make the parts, each handed the collaborators it reads and writes through."""
        home, live, history, notice = self.home, self.live, self.history, self._notice
        self._evolution = Evolution(home, live, history, notice)
        self._journal = journal = Journal(home, history, live, notice, self._evolution.reconcile, self._evolution.check)
        self._intentions = intentions = Intentions(home, live)
        journal.after_epoch = Retention(home, live, notice).after_epoch
        self._feeds = Feeds(home, live, journal, history, notice)
        self._landing = Landing(home, live, journal, history, Keyed(home, live), self._feeds, notice)
        self._sources = Sources(
            live, journal, history, self._landing, lambda flow: self._reads.consolidated_records(flow), notice
        )
        self._epochs = Epochs(home, live, journal, self._landing, intentions, self.tuning, self._spark, self.mode)
        self._scheduler = Scheduler(home, live, journal, intentions, self._epochs, self._landing, self.tuning, notice)
        self._rewind = Rewind(home, live, journal, history, intentions, notice)
        self._runs = Runs(live, journal, history, self._rewind.rewinds)
        self._reads = Reads(
            home, live, journal, history, intentions, self._scheduler, self._runs, self._feeds, self.mode
        )
        migration = Migration(home, live, self.tuning, self._spark)
        self._upgrade = Upgrade(home, live, journal, history, self._evolution, intentions, migration)

    # ------------------------------------------------------------------ what callers read and set
    @property
    def spec(self) -> PipelineSpec:
        """The pipeline (while :meth:`reading` a changed home: as the home recorded it)."""
        return self.live.spec

    @property
    def st(self) -> Snapshot:
        """The live snapshot."""
        return self.live.st

    @property
    def notify(self) -> Notice:
        """Where notes go (recoveries, take-overs, duplicate feeds); assign a callable to hear them."""
        return self._notice

    @notify.setter
    def notify(self, listener: Callable[[str], None] | None) -> None:
        self._notice.listener = listener

    @property
    def spark(self) -> Any:
        return self._spark.get()

    @property
    def max_state_files(self) -> int:
        return self.tuning.max_state_files

    @max_state_files.setter
    def max_state_files(self, n: int) -> None:
        self.tuning.max_state_files = n

    @property
    def backpressure(self) -> int:
        return self.tuning.backpressure

    @property
    def evolution(self) -> Plan:
        """The plan from the pipeline the home recorded to the YAML (:mod:`.evolution`)."""
        return self._evolution.plan

    @property
    def run_info(self) -> dict[str, Any] | None:
        """The cbp run under way (pid, host, started, command), kept in each epoch's history entry."""
        return self._epochs.run_info

    @property
    def epoch_timeout(self) -> float | None:
        return self._epochs.epoch_timeout

    # ------------------------------------------------------------------ journal
    def refresh(self) -> None:
        """Re-read the newest snapshot (another process or Pipeline object may have moved on)."""
        self._journal.refresh()

    def recover(self) -> str | None:
        """Finish a change that a killed or failed writer left pending; return what it was."""
        return self._journal.recover()

    # ------------------------------------------------------------------ landing and syncing
    def feed(
        self,
        flow: str,
        records: list[dict[str, Any]] | pa.Table,
        *,
        close: bool = False,
        feed_id: str | None = None,
        force: bool = False,
    ) -> Landed:
        """Land records on external flow ``flow`` (:meth:`.landing.Landing.feed`)."""
        return self._landing.feed(flow, records, close=close, feed_id=feed_id, force=force)

    def collect_garbage(self) -> list[tuple[str, int]]:
        return self._landing.collect_garbage()

    def unfeed(self, flow: str, number: int) -> dict[str, Any]:
        """Withdraw a feed no stage has read (:meth:`.feeds.Feeds.unfeed`)."""
        return self._feeds.unfeed(flow, number)

    def pending_duplicates(self) -> list[dict[str, Any]]:
        return self._feeds.pending_duplicates()

    def source_flows(self) -> list[str]:
        return self._sources.source_flows()

    def landed_version(self, flow: str) -> int | None:
        return self._sources.landed_version(flow)

    def sync(self, flows: list[str] | None = None, reland: list[str] | None = None) -> list[SyncReport]:
        """Land every version the source tables gained, or re-land ``reland`` (:meth:`.sources.Sources.sync`)."""
        return self._sources.sync(flows, reland)

    # ------------------------------------------------------------------ scheduling and epochs
    def frames(self, stage: str) -> dict[str, list[Any]]:
        return self._scheduler.frames(stage)

    def decide(self, stage: str, *, keep_state: bool = False) -> Decision | None:
        return self._scheduler.decide(stage, keep_state=keep_state)

    def run(
        self,
        max_epochs: int | None = None,
        on_epoch: Callable[[EpochReport], None] | None = None,
        on_start: Callable[[str, int], None] | None = None,
        command: str = "cbp.Pipeline.run()",
        epoch_timeout: float | None = None,
    ) -> list[EpochReport]:
        """Run runnable stages round by round (:meth:`.scheduler.Scheduler.run`)."""
        return self._scheduler.run(max_epochs, on_epoch, on_start, command, epoch_timeout)

    def run_epoch(self, stage: str, d: Decision, *, intention: dict[str, Any] | None = None) -> EpochReport:
        return self._epochs.run_epoch(stage, d, intention=intention)

    def idle_reasons(self) -> dict[str, str]:
        return self._scheduler.idle_reasons()

    # ------------------------------------------------------------------ reads
    def epochs(self, stage: str) -> int:
        return self._reads.epochs(stage)

    def feeds(self, flow: str) -> int:
        return self._reads.feeds(flow)

    def epoch_record(self, stage: str, epoch: int) -> EpochRecord:
        return self._reads.epoch_record(stage, epoch)

    def is_new(self) -> bool:
        return self._reads.is_new()

    def state_version(self, stage: str, epoch: int | None = None) -> int | None:
        return self._reads.state_version(stage, epoch)

    def state_records(self, stage: str, epoch: int | None = None) -> list[dict[str, Any]]:
        return self._reads.state_records(stage, epoch)

    def output_versions(self, flow: str, epoch: int | None = None, upto: bool = False) -> dict[Any, list[int]]:
        return self._reads.output_versions(flow, epoch, upto)

    def output_records(self, flow: str, epoch: int | None = None) -> list[dict[str, Any]]:
        return self._reads.output_records(flow, epoch)

    def consolidated_records(self, flow: str, epoch: int | None = None) -> list[dict[str, Any]]:
        return self._reads.consolidated_records(flow, epoch)

    def interrupted(self) -> list[dict[str, Any]]:
        return self._reads.interrupted()

    def timeline(self) -> list[dict[str, Any]]:
        """Every run and rewind of the home, oldest first (:meth:`.runs.Runs.timeline`)."""
        return self._runs.timeline()

    def last_run(self) -> dict[str, Any] | None:
        return self._runs.last_run()

    def status(self) -> dict[str, Any]:
        """Stages, connectors, runnability, recovery and evolution, for ``cbp status``."""
        with self.reading():
            out = self._reads.status()
            out.update(evolution_status(self.live.spec, self.live.st, self._evolution.plan))
        return out

    # ------------------------------------------------------------------ evolution and rewind
    def _committed_snapshot(self) -> Snapshot:
        return self._evolution.committed_snapshot()

    def recorded_definition(self) -> dict[str, Any] | None:
        """The pipeline the home recorded (:func:`.plan.definition`), None for a new home."""
        return self._evolution.recorded_definition()

    def recorded_spec(self) -> PipelineSpec | None:
        return self._evolution.recorded_spec()

    def plan(self, restore: tuple[str, ...] = (), discard: tuple[str, ...] = ()) -> Plan:
        """What :meth:`upgrade` would do (nothing is changed)."""
        return self._upgrade.plan(restore, discard)

    def upgrade(
        self, restore: tuple[str, ...] = (), discard: tuple[str, ...] = (), command: str = "cbp upgrade"
    ) -> Plan:
        """Apply the plan as one durable change; refused plans raise ``plan-refused``."""
        return self._upgrade.upgrade(restore, discard, command)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Read-only access on a home whose YAML changed: as the home recorded it (a note says so)."""
        self._journal.refresh()
        if not self._evolution.plan.needs_upgrade:
            yield
            return
        spec = self._evolution.recorded_spec()
        current = self.live.spec
        self._notice(
            f"warning: {current.path} differs from the pipeline recorded in {self.home.location} "
            f"('cbp plan' shows how); reading the home as {'recorded' if spec else 'stored'}"
        )
        self.live.spec = spec or current
        try:
            yield
        finally:
            self.live.spec = current
            if self.live.committed is not None:
                self._journal.load(self.live.committed)

    def rewind(
        self, to_epoch: int, stage: str | None = None, *, command: str = "cbp.Pipeline.rewind()"
    ) -> RewindReport:
        """Put the pipeline back as it was after ``stage``'s epoch ``to_epoch`` (:meth:`.rewind.Rewind.rewind`)."""
        return self._rewind.rewind(to_epoch, stage, command=command)

    def rewinds(self) -> list[dict[str, Any]]:
        return self._rewind.rewinds()

    def undone_records(self, flow: str, epoch: int, rewind_seq: int | None = None) -> list[dict[str, Any]]:
        return self._rewind.undone_records(flow, epoch, rewind_seq)
