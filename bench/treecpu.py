"""CPU seconds of a process tree, the processes that have exited included.

A sum over the live processes of a tree misses the CPU of those that exited: pyspark's Python daemon
ignores SIGCHLD, so the workers it forks (Spark stops one idle for 60 s) are reaped by the kernel and their
CPU is added to no parent's ``children_*`` times. A bench that reads the tree before and after a run then
under-counts it, or counts less than nothing when a worker exits in between (seen: -4.5 CPU s for a Spark
SQL recompute). :class:`TreeCPU` samples the tree from a thread and keeps each process's last-seen CPU;
a process loses at most one interval's CPU (workers exit idle), one that lives less than an interval is
missed.

Example::

    meter = TreeCPU(os.getpid())
    c0 = meter.total()
    run()
    print(meter.total() - c0)
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import psutil


class TreeCPU:
    """CPU seconds (user + system) of process ``root`` and every descendant seen since construction,
    those for which ``skip(pid)`` is true left out; sampled every ``every`` seconds by a daemon thread."""

    def __init__(self, root: int, skip: Callable[[int], bool] = lambda pid: False, every: float = 0.2) -> None:
        self.root, self.skip, self.every = root, skip, every
        self._seen: dict[tuple[int, float], float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.sample()
        self._thread = threading.Thread(target=self._run, name="treecpu", daemon=True)
        self._thread.start()

    def sample(self) -> None:
        """Read the CPU of every live process of the tree now."""
        try:
            root = psutil.Process(self.root)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            return
        for proc in procs:
            try:
                if self.skip(proc.pid):
                    continue
                t = proc.cpu_times()
                key = (proc.pid, proc.create_time())
            except (psutil.Error, ProcessLookupError):
                continue
            with self._lock:
                self._seen[key] = t.user + t.system

    def total(self) -> float:
        """CPU seconds of the tree so far: the live processes' now, the exited ones' when last seen."""
        self.sample()
        with self._lock:
            return sum(self._seen.values())

    def stop(self) -> None:
        """Stop the sampling thread."""
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()


def pgid_in(groups: set[int]) -> Callable[[int], bool]:
    """A ``skip`` for :class:`TreeCPU`: true for the processes of one of ``groups`` (process groups)."""

    def skip(pid: int) -> bool:
        return os.getpgid(pid) in groups

    return skip
