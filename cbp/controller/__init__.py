"""Internal: the incremental dataflow controller (IDC, paper 001 §4.1-4.3), not public API.

It keeps, per stage input, a *flow connector*: the ordered queue of increments available to
that stage with their framing keys. It asks each stage's Runnable which increments to read and
remove, runs the runnable stages of a possibly cyclic graph round by round until none is
runnable (or an epoch budget is spent), commits each stage epoch durably, and garbage-collects
increments that no connector references.

:class:`Parts` is the composition of the controller's parts that a :class:`cbp.Pipeline` owns;
it forwards nothing: callers call the part that does the work (``parts.reads.state``,
``parts.scheduler.frames``). Each part is an object handed what it reads and writes (each
module's docstring says which tables, files and snapshot fields):

- :mod:`.live`: what the parts share: the spec and live snapshot (:class:`~.live.Live`), the
  notes, the tuning, Spark;
- :mod:`.snapshot`: the typed, versioned live state (what is live, not history);
- :mod:`.history`: what happened (epochs, feeds, feed ids, collected increments), read on demand;
- :mod:`.journal`: the commit protocol: pending records, Delta commits, recovery; a change is a
  typed :class:`~.change.Change`;
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

Reads: nothing itself (it composes the parts). Writes: only ``live.spec``, which
:meth:`Parts.reading` swaps while a changed home is read as it was recorded.

Example::

    from cbp.spec import load_spec
    parts = Parts(load_spec("flows/url_count.yaml"), Home("state/url_count"))
    parts.landing.feed("urls", [{"url": "http://a/"}]); parts.scheduler.run()
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..engine.task.bipindex import ROW_GROUP
from ..errors import UsageError
from ..spec import PipelineSpec
from ..storage import LAYOUT, Home, objectstore
from .compaction import Compaction
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
from .reads import Reads
from .records import Decision, EpochRecord, EpochReport, Landed
from .retention import Retention
from .rewind import Rewind
from .runs import Runs
from .scheduler import Scheduler
from .sources import Sources, SyncReport
from .upgrade import Upgrade
from .viewtables import ViewTables

__all__ = ["Parts", "EpochReport", "EpochRecord", "Decision", "Landed", "SyncReport"]


class Parts:
    """The controller of one pipeline in one home: its parts, each made once and handed the
    collaborators it reads and writes through; the home's snapshot is loaded when they are made."""

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
        self.live = live = Live(spec)
        self.tuning = tuning = Tuning(
            max_state_files,
            state_row_group,
            state_cache_mb,
            state_scan_fraction,
            small_epoch_records,
            backpressure,
            state_index_mb,
        )
        self.spark = LazySpark(spark)
        self.notice = notice = Notice(notify)  # recoveries and lock take-overs are reported here
        self.history = history = History(home, LAYOUT)
        self.evolution = evolution = Evolution(home, live, history, notice)
        self.journal = journal = Journal(home, history, live, notice, evolution.reconcile, evolution.check)
        self.intentions = intentions = Intentions(home, live)
        self.retention = Retention(home, live, notice)
        journal.after_epoch = self.retention.after_epoch
        journal.replan = ViewTables(home, live, history).recommit  # a view table's commit after an OPTIMIZE
        self.feeds = Feeds(home, live, journal, history, notice)
        self.landing = landing = Landing(home, live, journal, history, Keyed(home, live), self.feeds, notice)
        landing.after_gc = Compaction(home, live, journal, self.retention).after_gc  # flows nobody reads
        self.sources = Sources(
            live, journal, history, landing, lambda flow: self.reads.consolidated_records(flow), notice
        )
        self.epochs = Epochs(home, live, journal, landing, intentions, tuning, self.spark, self.mode)
        self.scheduler = Scheduler(home, live, journal, intentions, self.epochs, landing, tuning, notice)
        self.rewind = Rewind(home, live, journal, history, intentions, notice)
        self.runs = Runs(live, journal, history, self.rewind.rewind_entries)
        self.reads = Reads(home, live, journal, history, intentions, self.scheduler, self.runs, self.feeds, self.mode)
        migration = Migration(home, live, tuning, self.spark)
        self.upgrade = Upgrade(home, live, journal, history, evolution, intentions, migration)
        try:
            snapshot = home.read_controller()  # the home's first read: a store taking no connection fails here
        except OSError as e:
            cause = objectstore.unreachable(home.location, e)
            if cause is None:
                raise
            raise cause from e
        journal.load(snapshot)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Read-only access on a home whose YAML changed: as the home recorded it (a note says so)."""
        self.journal.refresh()
        if not self.evolution.plan.needs_upgrade:
            yield
            return
        spec = self.evolution.recorded_spec()
        current = self.live.spec
        self.notice(
            f"warning: {current.path} differs from the pipeline recorded in {self.home.location} "
            f"('cbp plan' shows how); reading the home as {'recorded' if spec else 'stored'}"
        )
        self.live.spec = spec or current
        try:
            yield
        finally:
            self.live.spec = current
            if self.live.committed is not None:
                self.journal.load(self.live.committed)
