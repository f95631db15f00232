"""What a task may hold in memory: ``CBP_TASK_MEMORY_MB`` (unset: no bound but cbp's own defaults), a
budget a user can lower below 1 GB (a managed platform caps user code near that), shared out as:

- half to the worker's state file cache (``CBP_STATE_CACHE_MB`` / ``state_cache_mb``, at most this);
- an eighth to its partition index pages (``CBP_STATE_INDEX_MB`` / ``state_index_mb``, at most this);
- a quarter to a small epoch's envelopes (the driver routes an epoch only while they fit: above, the
  shuffle streams them to the tasks in sorted batches);
- a sixteenth to one Arrow batch Spark hands a task (``spark.sql.execution.arrow.maxBytesPerBatch``,
  beside the batches' record count).

    >>> b = budgets(64)
    >>> b.cache_mb, b.index_mb, b.envelope_bytes >> 20, b.batch_bytes >> 20
    (32.0, 8.0, 16, 4)
    >>> capped(2048.0, 32.0), capped(None, 32.0), capped(16.0, None)
    (32.0, 32.0, 16.0)
"""

from __future__ import annotations

from dataclasses import dataclass

from ... import settings

__all__ = ["Budgets", "budgets", "current", "capped", "spark_conf"]


@dataclass(frozen=True)
class Budgets:
    """A task's memory budget shared out (MB for the caches, bytes for the rest)."""

    cache_mb: float
    index_mb: float
    envelope_bytes: int
    batch_bytes: int


def budgets(task_mb: float) -> Budgets:
    """The shares of a task budget of ``task_mb`` MB (see the module)."""
    whole = int(task_mb * (1 << 20))
    return Budgets(task_mb / 2, task_mb / 8, max(1, whole // 4), max(1 << 16, whole // 16))


def current() -> Budgets | None:
    """The budgets of ``CBP_TASK_MEMORY_MB``, or None when it is not set."""
    mb = settings.current().task_memory_mb
    return None if mb is None else budgets(mb)


def capped(value: float | None, cap: float | None) -> float | None:
    """``value`` (None: the default, which is then the cap) at most ``cap`` (None: no cap)."""
    if cap is None:
        return value
    return cap if value is None else min(value, cap)


def spark_conf() -> dict[str, str]:
    """The Spark session settings of the budget: Arrow batches a task gets of at most a sixteenth of it."""
    b = current()
    return {} if b is None else {"spark.sql.execution.arrow.maxBytesPerBatch": str(b.batch_bytes)}
