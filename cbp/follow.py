"""Continuous mode: one warm driver that runs epochs whenever an increment lands (``cbp run --follow``).

A follower takes the home's runner lock (as ``cbp run`` does: a second runner is refused with
``busy``, and a follower that cannot take it fails with ``busy``) and keeps it, with its one
SparkSession, until it is stopped. It runs the pipeline until quiescent, then waits for new input
and runs again, with at least ``min_interval`` seconds between the starts of two runs:

- **feeds by another process** (``cbp feed``, the Python API, an Airflow task): a feed takes only
  the home's mutation lock, which the follower holds while it plans an epoch and while it commits
  it, never during the epoch's Spark job nor while it waits, so feeds land while it follows (one
  that lands during a job is read by the next epoch; :mod:`cbp.controller.commitcheck`). Every
  feed writes the next controller snapshot, ``_cbp/controller/<seq + 1>.json``: the follower
  looks for that one file (a ``stat`` on a local home, one ``HEAD`` request on S3) and never
  re-reads the growing history;
- **sources** it polls itself: files dropped in an inbox (``cbp run --follow --inbox``, see
  :mod:`cbp.commands._follow`), and a Delta source's new versions when the pipeline has a
  ``sync()`` (see :func:`sync_hook`). What they land is a feed like any other;
- every ``recheck`` seconds it runs anyway (a feeder killed mid-commit left a pending record that
  only a run finishes; a snapshot written under another name).

Waiting is a sleep of ``poll`` seconds (at least 0.01) between looks: no busy wait. An error in a
run (a translator that raises, an unreachable store) ends the follower with that error, as it
ends ``cbp run``. ``stop`` (a
:class:`threading.Event` or a callable returning True) is looked at between looks and after every
epoch: the follower stops after the epoch in flight, with nothing half-committed.

Example::

    import threading
    p = cbp.load("flows/url_count.yaml", home="/tmp/cbp-demo")
    stop = threading.Event()
    t = threading.Thread(target=p.follow, kwargs={"stop": stop, "min_interval": 1.0}); t.start()
    feeder = cbp.load("flows/url_count.yaml", home="/tmp/cbp-demo")
    feeder.feed("urls", [{"url": "http://a/"}])  # the follower runs it
    stop.set(); t.join()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .errors import UsageError
from .storage.layout import LAYOUT

if TYPE_CHECKING:
    from .controller import EpochReport
    from .pipeline import Pipeline

__all__ = [
    "follow",
    "Follower",
    "FollowSummary",
    "Source",
    "sync_hook",
    "stopper",
    "POLL_LOCAL",
    "POLL_OBJECT_STORE",
    "RECHECK",
]

POLL_LOCAL = 0.05  # seconds between looks for new input on a local home (a stat per look)
POLL_OBJECT_STORE = 1.0  # on an object store: one HEAD request per look (about 86,400 a day)
MIN_POLL = 0.01  # a smaller poll is taken as this one
RECHECK = 60.0  # seconds after which a follower runs even if it saw nothing new
SYNC_EVERY = 5.0  # seconds between two looks at a Delta source's versions (Pipeline.sync)

#: A source of input that a follower polls: lands what waits (through ``Pipeline.feed``) and says
#: whether it landed anything. It is called between runs only, in the follower's thread.
Source = Callable[[], bool]
Stop = threading.Event | Callable[[], bool] | None


class _Stopped(Exception):
    """Raised from the epoch callback to end a run after the epoch that just committed."""


@dataclass
class FollowSummary:
    """What a follower did: its runs (rounds), the stage epochs they ran, and why it stopped."""

    rounds: int = 0
    epochs: int = 0
    reports: list[Any] = field(default_factory=list)  # every EpochReport, in order
    round_starts: list[float] = field(default_factory=list)  # time.monotonic() at the start of each run


def stopper(stop: Stop) -> Callable[[], bool]:
    """``stop`` as a function that says whether to stop.

    >>> ev = threading.Event(); s = stopper(ev); s(), ev.set(), s()
    (False, None, True)
    >>> stopper(None)()
    False
    """
    if stop is None:
        return lambda: False
    if isinstance(stop, threading.Event):
        return stop.is_set
    if callable(stop):
        return lambda: bool(stop())
    raise UsageError(
        f"stop must be a threading.Event or a function returning True to stop, not {type(stop).__name__}",
        code="bad-option",
    )


def sync_hook(pipe: Any, every: float = SYNC_EVERY) -> Source | None:
    """A :data:`Source` that calls ``pipe.sync()`` (which lands a Delta source's new versions as
    feeds) at most every ``every`` seconds, if the pipeline has ``sync`` and a flow with a
    ``source`` (``source: {delta: URI}``); None otherwise. Works whether or not the pipeline's
    class has ``sync`` yet."""
    sync = getattr(pipe, "sync", None)
    flows = getattr(getattr(pipe, "spec", None), "flows", {}) or {}
    if not callable(sync) or not any(getattr(fl, "source", None) for fl in flows.values()):
        return None
    last = [float("-inf")]

    def poll() -> bool:
        now = time.monotonic()
        if now - last[0] < every:
            return False
        last[0] = now
        reports = sync()  # one report per source flow, with the versions it landed (cbp.controller.sources)
        if isinstance(reports, (list, tuple)):
            return any(getattr(r, "versions", None) for r in reports)
        return bool(reports)  # what it landed shows as a new snapshot anyway

    return poll


class Follower:
    """Runs a pipeline whenever an increment lands (see the module docstring); :meth:`run` until stopped."""

    def __init__(
        self,
        pipe: Pipeline,
        *,
        min_interval: float = 0.0,
        stop: Stop = None,
        poll: float | None = None,
        sources: Sequence[Source] = (),
        recheck: float = RECHECK,
        command: str = "cbp.Pipeline.follow()",
        epoch_timeout: float | None = None,
        on_epoch: Callable[[EpochReport], None] | None = None,
        on_start: Callable[[str, int], None] | None = None,
        on_round: Callable[[list[Any]], None] | None = None,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        for name, value in (("min_interval", min_interval), ("poll", poll), ("recheck", recheck)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < float("inf")
            ):
                raise UsageError(f"{name} must be a number of seconds, 0 or more, got {value!r}", code="bad-option")
        self.pipe, self.parts = pipe, pipe.parts
        self.home = pipe.home
        self.min_interval = float(min_interval)
        default = POLL_OBJECT_STORE if self.home.local_dir() is None else POLL_LOCAL
        self.poll = max(float(poll), MIN_POLL) if poll is not None else default  # never a busy wait
        self.recheck = float(recheck)
        self.should_stop = stopper(stop)
        hook = sync_hook(pipe)
        self.sources = list(sources) + ([hook] if hook is not None else [])
        self.command, self.epoch_timeout = command, epoch_timeout
        self.on_epoch, self.on_start, self.on_round, self.on_ready = on_epoch, on_start, on_round, on_ready
        self.summary = FollowSummary()
        self._seen = self.parts.live.st.seq

    # ------------------------------------------------------------------ waiting
    def _sleep(self, seconds: float) -> bool:
        """Sleep ``seconds`` in slices of at most :attr:`poll`; True as soon as it should stop."""
        deadline = time.monotonic() + seconds
        while not self.should_stop():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, self.poll))
        return True

    def _landed_elsewhere(self) -> bool:
        """Whether a change was committed since this follower's last run: the snapshot after the one
        that run ended on exists (each change writes the next one; anything that refreshes the
        controller meanwhile, as a sync does, cannot hide it)."""
        return self.home.exists(LAYOUT.snapshot(self._seen + 1))

    def _poll_sources(self) -> bool:
        landed = False
        for source in self.sources:
            landed = bool(source()) or landed
        return landed

    def _wait_for_input(self) -> bool:
        """Wait until something new landed (True) or it should stop (False)."""
        idle_since = time.monotonic()
        while not self.should_stop():
            self.home.fence("following the home")  # on S3: the runner lease was not lost meanwhile
            if self._poll_sources() or self._landed_elsewhere() or time.monotonic() - idle_since >= self.recheck:
                return True
            if self._sleep(self.poll):
                return False
        return False

    # ------------------------------------------------------------------ running
    def _round(self) -> bool:
        """One run until quiescent; False if it was stopped after an epoch."""
        self.summary.rounds += 1
        self.summary.round_starts.append(time.monotonic())
        reports: list[Any] = []

        def done(rep: Any) -> None:
            reports.append(rep)
            self.summary.reports.append(rep)
            self.summary.epochs += 1
            if self.on_epoch is not None:
                self.on_epoch(rep)
            if self.should_stop():
                raise _Stopped()

        stopped = False
        try:
            self.pipe.run(on_epoch=done, on_start=self.on_start, command=self.command, epoch_timeout=self.epoch_timeout)
        except _Stopped:
            stopped = True
        self._seen = self.parts.live.st.seq  # the snapshot the run ended on
        if self.on_round is not None:
            self.on_round(reports)
        return not stopped

    def run(self, warm: Callable[[], None] | None = None) -> FollowSummary:
        """Follow until stopped: take the runner lock (``busy`` if another runner holds it), call
        ``warm`` (e.g. start Spark), run, wait for input, run again; the summary of what ran."""

        def took_over(holder: dict[str, Any]) -> None:
            self.parts.notice(
                f"took over the home from a cbp run that was killed (pid {holder.get('pid')} on "
                f"{holder.get('host')}: {holder.get('command')})"
            )

        with self.home.follower_lock(self.command, took_over):
            if warm is not None and not self.should_stop():  # a stop asked meanwhile: no Spark to start
                warm()
            self._poll_sources()
            if self.on_ready is not None:
                self.on_ready()
            while not self.should_stop():
                starts = self.summary.round_starts
                if starts and self._sleep(starts[-1] + self.min_interval - time.monotonic()):
                    break  # stopped while the minimum interval held the next run back
                if not self._round():
                    break
                if not self._wait_for_input():
                    break
        return self.summary


def follow(pipe: Pipeline, **options: Any) -> FollowSummary:
    """Follow ``pipe`` until stopped (:class:`Follower`'s options); see the module docstring."""
    return Follower(pipe, **options).run()
