"""The lock files of a local home: this process's hold on each (``flock`` is per open file, so
one descriptor per path, re-entrant within the process) and the ``flock`` calls themselves.
:class:`cbp.storage.home.Home` takes its locks through them (on an object store: leases,
:mod:`cbp.storage.lease`)."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable

from ..errors import RuntimeStateError
from .lease import Lease

__all__ = ["LOCKS", "LOCKS_GUARD", "ProcessLock", "lock_file", "open_lock_file"]


class ProcessLock:
    """This process's hold on one home's lock (flock is per open file, so one fd per path; or a lease)."""

    def __init__(self) -> None:
        self.mutex = threading.RLock()
        self.depth = 0
        self.fd = -1
        self.lease: Lease | None = None


def open_lock_file(path: str, home: str) -> int:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as e:
        raise RuntimeStateError(
            f"cannot open the lock file {path} of the home {home}: {e.strerror}; is the home read-only or full?",
            code="io",
        ) from e


def lock_file(path: str, home: str, waiting: Callable[[], None] | None) -> int:
    """Open and ``flock`` a lock file exclusively, calling ``waiting`` once if that has to wait; the fd."""
    fd = open_lock_file(path, home)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting is not None:
                waiting()
            fcntl.flock(fd, fcntl.LOCK_EX)
    except BaseException:
        os.close(fd)
        raise
    return fd


LOCKS: dict[str, ProcessLock] = {}
LOCKS_GUARD = threading.Lock()
