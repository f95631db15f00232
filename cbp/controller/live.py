"""What the controller's parts share: the live pipeline and snapshot, the notes, the tuning, Spark.

Each part (composed by :class:`~cbp.controller.Parts`) is handed these objects, never copies of what
they hold, so a part always sees the snapshot and the spec of now:

- :class:`Live` holds the pipeline ``spec`` (swapped while a home whose YAML changed is read as
  it was recorded, :meth:`Parts.reading`), the live snapshot ``st`` (swapped when the journal
  loads a newer one: a refresh, a recovery, a commit, a transaction rolled back) and
  ``committed``, the JSON of the newest committed snapshot. Only the journal
  (:mod:`.journal`) assigns ``st`` and ``committed``, and a rewind its new snapshot; only the
  composition (:meth:`~cbp.controller.Parts.reading`) assigns ``spec``.
- :class:`Notice` is where parts report what users should hear (recoveries, take-overs,
  duplicate feeds); ``cbp`` commands point it at stderr.
- :class:`Tuning` holds the settings a Pipeline was given (state files, row groups, backpressure).
- :class:`LazySpark` starts the SparkSession the first time a part needs it.

Reads: nothing. Writes: nothing (they hold what the other parts read and write).

    >>> n = Notice(); n("unheard"); n.listened
    False
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError
from ..spec import PipelineSpec
from .snapshot import Snapshot

__all__ = ["Live", "Notice", "Tuning", "LazySpark", "TUNING", "check_tuning"]


class Live:
    """The spec and snapshot the controller works on now (see the module docstring)."""

    def __init__(self, spec: PipelineSpec) -> None:
        self.spec = spec
        self.st = Snapshot(spec.name)  # until the journal loads the home's
        self.committed: dict[str, Any] | None = None  # JSON of the newest committed snapshot (None: a new home)


class Notice:
    """A settable callback for what the user should hear; silent until something listens."""

    def __init__(self, listener: Callable[[str], None] | None = None) -> None:
        self.listener = listener

    def __call__(self, message: str) -> None:
        if self.listener is not None:
            self.listener(message)

    @property
    def listened(self) -> bool:
        """Whether anything listens (else a part may warn the Python way)."""
        return self.listener is not None


@dataclass
class Tuning:
    """How epochs run: files per state partition before compaction, rows per state row group,
    the state cache and scan fraction of the tasks, small epochs, and backpressure (the
    defaults are :class:`~cbp.controller.Parts`'s)."""

    max_state_files: int
    state_row_group: int
    state_cache_mb: float | None
    state_scan_fraction: float | None
    small_epoch_records: int | None
    backpressure: int
    state_index_mb: float | None = None  # the tasks' partition index budget (cbp.engine.task.indexpages)


class LazySpark:
    """The SparkSession, started on first use (reads and feeds never start one)."""

    def __init__(self, spark: Any = None) -> None:
        self._spark = spark

    def get(self) -> Any:
        if self._spark is None:
            from ..engine.driver.session import get_spark

            self._spark = get_spark()
        return self._spark

    def master(self) -> str:
        """The Spark master the session runs on, or will run on, without starting it: an epoch's
        plan chooses its path by it before the job needs Spark (a run killed or refused before its
        job never starts a JVM)."""
        from .. import settings
        from ..engine.driver.session import is_connect

        if self._spark is None:
            remote = settings.current().remote
            if remote:  # a Spark Connect server (CBP_REMOTE, SPARK_REMOTE, cbp --remote)
                return remote
            from pyspark.sql import SparkSession

            active = SparkSession.getActiveSession()  # what get_spark would return
            if active is None:
                return settings.current().spark_master
            self._spark = active
        if is_connect(self._spark):  # the path of a Connect session's epochs (cbp.engine.driver.taskplan)
            return "sc://"
        return str(self._spark.sparkContext.master)


#: The tuning options of :class:`Pipeline`: (type, smallest value, None allowed).
TUNING: dict[str, tuple[type, float, bool]] = {
    "max_state_files": (int, 1, False),
    "backpressure": (int, 1, False),
    "state_row_group": (int, 1, False),
    "state_cache_mb": (float, 0, True),
    "state_scan_fraction": (float, 0, True),
    "small_epoch_records": (int, 0, True),
    "state_index_mb": (float, 1, True),
}


def check_tuning(tuning: Mapping[str, Any]) -> None:
    """Refuse an unknown tuning option or a value it cannot take (``bad-tuning``), before anything runs.

    >>> check_tuning({"max_state_files": 0})
    Traceback (most recent call last):
    cbp.errors.UsageError: tuning option max_state_files=0: give an integer >= 1
    """
    for name, value in tuning.items():
        if name == "notify":
            if value is not None and not callable(value):
                raise UsageError(
                    f"tuning option notify={value!r}: give a function of one message, or None", code="bad-tuning"
                )
            continue
        if name not in TUNING:
            raise UsageError(
                f"unknown tuning option '{name}' (known: {', '.join([*TUNING, 'notify'])})", code="bad-tuning"
            )
        kind, least, nullable = TUNING[name]
        if value is None and nullable:
            continue
        number = isinstance(value, numbers.Integral) if kind is int else isinstance(value, numbers.Real)  # numpy's too
        if (
            isinstance(value, bool)
            or not number
            or not (value >= least)
            or value != value
            or value in (float("inf"), float("-inf"))
        ):
            raise UsageError(
                f"tuning option {name}={value!r}: give {'an integer' if kind is int else 'a number'} >= {least:g}"
                + (" or None" if nullable else ""),
                code="bad-tuning",
            )
