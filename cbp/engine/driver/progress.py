"""What a running stage epoch is doing, for progress displays: on a classic driver from Spark's status
tracker (tasks, records read), on Spark Connect from the progress the server sends with each running
query (``spark.registerProgressHandler``: tasks per stage, no record counts; :class:`ConnectProgress`).

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

__all__ = ["Progress", "Poller", "spark_progress", "ConnectProgress"]


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


class ConnectProgress:
    """A Spark Connect progress handler (``spark.registerProgressHandler``): the tasks of the stages of
    the queries running now, as the server reports them (every ``spark.connect.progress.reportInterval``,
    2 s by default). :meth:`look` gives what :func:`spark_progress` gives on classic (no record count).

        >>> from types import SimpleNamespace as NS
        >>> h = ConnectProgress()
        >>> h([NS(stage_id=3, num_tasks=4, num_completed_tasks=1, done=False)], 3, "op1", False)
        >>> h.look()
        (1, 4, None, 'Spark stage 3')
        >>> h([], 0, "op1", True)
        >>> h.look()
        (0, 0, None, '')
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, list[tuple[int, int, int]]] = {}  # operation -> (stage, done, tasks)

    def __call__(self, stages: Any, inflight_tasks: int, operation_id: str | None, done: bool) -> None:
        op = operation_id or ""
        with self._lock:
            if done:
                self._running.pop(op, None)
            else:
                self._running[op] = [(s.stage_id, s.num_completed_tasks, s.num_tasks) for s in stages or ()]

    def look(self) -> tuple[int, int, int | None, str]:
        """(tasks done, tasks in all, None, the newest stage's name) of the running queries."""
        with self._lock:
            seen = [s for stages in self._running.values() for s in stages]
        if not seen:
            return 0, 0, None, ""
        return sum(s[1] for s in seen), sum(s[2] for s in seen), None, f"Spark stage {max(s[0] for s in seen)}"


def _connect_session() -> Any:
    """This process's Spark Connect session (the poller's thread has no active session of its own: the
    process's default one), or None."""
    from pyspark.sql.connect.session import SparkSession

    return SparkSession.getActiveSession() or SparkSession._get_default_session()


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
        self._handler = ConnectProgress()
        self._registered: Any = None  # the Connect session the handler is registered with

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
        if self._registered is not None:
            try:
                self._registered.removeProgressHandler(self._handler)
            except Exception:  # noqa: BLE001 - a session already stopped
                pass
            self._registered = None

    def _connect_look(self) -> tuple[int, int, int | None, str]:
        """What the progress handler saw, registered with the process's Connect session on first look."""
        if self._registered is None:
            session = _connect_session()
            if session is None:
                return 0, 0, None, ""
            session.registerProgressHandler(self._handler)
            self._registered = session
        return self._handler.look()

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            current = self._current
            if current is None:
                continue
            stage, epoch, t0 = current
            done, total, records, name = 0, 0, None, ""
            try:
                if _remote():  # Spark Connect: the server's progress reports (pyspark-client has no SparkContext)
                    done, total, records, name = self._connect_look()
                else:  # the process's SparkContext if it has one (never started here: a small epoch may need none)
                    from pyspark import SparkContext

                    sc = SparkContext._active_spark_context
                    if sc is not None:
                        done, total, records, name = spark_progress(sc)
                    else:
                        name = "starting Spark"
            except Exception:  # Spark stopping under us: nothing to say this time
                pass
            if self._current is current:
                self._callback(Progress(stage, epoch, time.monotonic() - t0, done, total, records, name))
