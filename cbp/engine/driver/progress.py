"""What a running stage epoch is doing, from Spark's status tracker, for progress displays (a classic
driver's: on Spark Connect the display shows the elapsed time only).

:class:`Poller` calls ``callback(Progress(...))`` from a daemon thread every ``every`` seconds while
an epoch runs (:meth:`Poller.epoch` says which; :meth:`Poller.idle` that none does), and stops when
its ``with`` block ends:

Example::

    with Poller(print) as poll:
        poll.epoch("url_count", 3); run_the_epoch(); poll.idle()
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["Progress", "Poller", "spark_progress"]


@dataclass(frozen=True)
class Progress:
    """One look at a running epoch: ``tasks_done`` of ``tasks_total`` tasks of Spark's active jobs,
    ``records_read`` by them so far (input and shuffle records; None when Spark does not say), the
    seconds since the epoch started, and the name of Spark's newest active stage (``"starting Spark"``
    while the process has no SparkContext yet). A small epoch routed by the driver runs no Spark job (0 of 0)."""

    stage: str
    epoch: int
    elapsed: float
    tasks_done: int = 0
    tasks_total: int = 0
    records_read: int | None = None
    spark_stage: str = ""


def spark_progress(sc: SparkContext) -> tuple[int, int, int | None, str]:
    """(tasks done, tasks in all, records read, the newest stage's name) of the active Spark stages."""
    tracker = sc.statusTracker()
    done = total = 0
    name = ""
    for sid in sorted(tracker.getActiveStageIds()):
        info = tracker.getStageInfo(sid)
        if info is not None:
            done, total, name = done + info.numCompletedTasks, total + info.numTasks, info.name
    records: int | None = None
    try:  # Spark's status store (what its UI shows) counts the records stages read
        jsc = sc._jsc.sc()
        jvm = sc._jvm
        assert jvm is not None
        stages = jvm.scala.jdk.javaapi.CollectionConverters.asJava(jsc.statusStore().activeStages())
        records = sum(int(d.inputRecords()) + int(d.shuffleReadRecords()) for d in stages)
    except Exception:  # a Spark without it (or a Spark Connect session): no record count
        records = None
    return done, total, records, name


def _remote() -> bool:
    """Whether this process's Spark is a Spark Connect session: no status tracker to read (classic only)."""
    from pyspark.sql.utils import is_remote

    return bool(is_remote())


class Poller:
    """Calls ``callback`` with a :class:`Progress` every ``every`` seconds while an epoch runs."""

    def __init__(self, callback: Callable[[Progress], None], every: float = 0.5) -> None:
        self._callback, self._every = callback, every
        self._current: tuple[str, int, float] | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def epoch(self, stage: str, epoch: int) -> None:
        """An epoch of ``stage`` starts now."""
        self._current = (stage, epoch, time.monotonic())

    def idle(self) -> None:
        """No epoch runs now."""
        self._current = None

    def __enter__(self) -> Poller:
        self._thread = threading.Thread(target=self._loop, name="cbp-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            current = self._current
            if current is None:
                continue
            stage, epoch, t0 = current
            done, total, records, name = 0, 0, None, ""
            try:  # the process's SparkContext if it has one (never started here: a small epoch may need none)
                from pyspark import SparkContext

                sc = SparkContext._active_spark_context
                if sc is not None:
                    done, total, records, name = spark_progress(sc)
                elif not _remote():
                    name = "starting Spark"
            except Exception:  # Spark stopping under us: nothing to say this time
                pass
            if self._current is current:
                self._callback(Progress(stage, epoch, time.monotonic() - t0, done, total, records, name))
