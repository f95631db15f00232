"""Fault injection for cbp's crash tests: off unless ``CBP_FAULT`` is set.

cbp marks the moments of a feed, a stage epoch and a recovery where a crash matters with
:func:`point` (driver side) and :func:`task_point` (inside a Spark task). ``CBP_FAULT`` picks
one of them and what happens there:

``kill:<point>:<n>``
    the driver process kills itself with SIGKILL the ``n``-th time it reaches ``<point>``
    (as a power cut or ``kill -9`` would);
``task-exit:<point>:<marker>``
    the Python worker running a Spark task exits abruptly at ``<point>`` unless the file
    ``<marker>`` exists, which it creates first: the task fails once, and Spark retries it;
``kill-driver:<point>:<n>``
    a Spark task kills the driver the ``n``-th time any task of this process reaches ``<point>``
    (counted per worker process and driver: a Spark Connect server's workers outlive the drivers, its
    clients; a crash in the middle of a Spark job).

    >>> point("epoch:pending")  # nothing happens unless CBP_FAULT names it
"""

from __future__ import annotations

import os
import signal
from collections import Counter

from . import settings

__all__ = ["point", "task_point", "current"]

_HITS: Counter[tuple[str, int]] = Counter()


def current() -> str | None:
    """The fault set for this process (``CBP_FAULT``), if any; stage epochs pass it to their tasks."""
    return settings.current().fault


def _parse(spec: str | None) -> tuple[str, str, str] | None:
    if not spec:
        return None
    kind, _, rest = spec.partition(":")
    name, _, arg = rest.rpartition(":")
    return kind, name, arg


def point(name: str) -> None:
    """A moment of the driver where a crash can be injected (``kill:<name>:<n>``)."""
    f = _parse(current())
    if f is None or f[0] != "kill" or f[1] != name:
        return
    _HITS[name, 0] += 1
    if _HITS[name, 0] == int(f[2]):
        os.kill(os.getpid(), signal.SIGKILL)


def task_point(spec: str | None, name: str, driver_pid: int) -> None:
    """A moment inside a Spark task (``task-exit`` and ``kill-driver`` faults)."""
    f = _parse(spec)
    if f is None or f[1] != name:
        return
    kind, _, arg = f
    if kind == "task-exit":
        try:
            fd = os.open(arg, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return  # the retry: go on
        os.close(fd)
        os._exit(17)
    if kind == "kill-driver":
        _HITS[name, driver_pid] += 1  # a server's worker runs the tasks of many drivers, one after the other
        if _HITS[name, driver_pid] == int(arg):
            os.kill(driver_pid, signal.SIGKILL)
