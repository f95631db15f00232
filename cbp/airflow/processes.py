"""Running ``cbp`` as a child process group that Airflow can time out and kill whole.

A ``cbp run`` starts a Spark JVM and Python workers (PySpark's worker daemon makes its own process
group): :class:`ProcessGroup` runs the command in a new process group, kills every process of it
(and the daemon's strays) on a timeout, an exception in the waiting task, or ``kill()``, and on
Linux makes the child die with the task process (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

__all__ = ["ProcessGroup"]


class ProcessGroup:
    """A command run in its own process group, so that it can be killed with everything it started
    (``cbp run`` and its Spark JVM): on ``timeout``, on any exception while waiting (Airflow's
    ``execution_timeout``), and when :meth:`kill` is called (an operator's ``on_kill``). On Linux
    the command also gets SIGKILL if the thread that started it dies (``PR_SET_PDEATHSIG``)."""

    def __init__(self, cmd: list[str], env: dict[str, str] | None = None, grace: float = 10.0) -> None:
        self.cmd, self.env, self.grace = cmd, env, grace
        self.proc: subprocess.Popen | None = None
        self.killed = False

    def run(self, timeout: float | None = None) -> tuple[int, str, str]:
        """Run to the end (or kill at ``timeout`` seconds: :class:`TimeoutError`); returns (exit code, stdout,
        stderr)."""
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            cmd = self.cmd
            if sys.platform.startswith("linux") and threading.current_thread() is threading.main_thread():
                cmd = [sys.executable, "-c", _DIE_WITH_PARENT, str(os.getpid()), *cmd]
            self.proc = subprocess.Popen(
                cmd, env=self.env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, start_new_session=True
            )
            try:
                try:
                    code = self.proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.kill()
                    raise TimeoutError(
                        f"{' '.join(self.cmd)} did not finish within {timeout:g} s; its process group was killed"
                    ) from None
                except BaseException:
                    self.kill()
                    raise
                finally:
                    self._reap()
            except BaseException:
                sys.stderr.write(_read(out, 1 << 16) + _read(err, 1 << 16))  # what it said before it was killed
                raise
            return code, _read(out), _read(err)

    def kill(self) -> None:
        """SIGTERM to the whole group (and to descendants that left it: PySpark's worker daemon makes
        a group of its own), SIGKILL to what is left of them after ``grace`` seconds."""
        proc = self.proc
        if proc is None or self.killed:
            return
        self.killed = True
        strays = _strays(proc.pid)
        for sig, wait in ((signal.SIGTERM, self.grace), (signal.SIGKILL, 10.0)):
            if not self._alive() and not _running(strays):
                return
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                pass
            for p in _running(strays):
                try:
                    p.send_signal(sig)  # psutil checks that the pid is still that process
                except Exception:
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and (self._alive() or _running(strays)):
                time.sleep(0.05)

    def _alive(self) -> bool:
        """Whether a process of the group is left (zombies do not count: the leader is reaped here)."""
        assert self.proc is not None
        self.proc.poll()
        return _group_has_live_members(self.proc.pid)

    def _reap(self) -> None:
        """After the leader exited: what it left in its group (a JVM that outlives its driver) gets 2 s, then is
        killed."""
        deadline = time.monotonic() + 2.0
        while self.proc is not None and not self.killed and self._alive():
            if time.monotonic() > deadline:
                self.kill()
                break
            time.sleep(0.05)


# Run argv[2:] with SIGKILL on the death of the parent (pid argv[1]); exec keeps the setting.
_DIE_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG\n"
    "os.getppid() == int(sys.argv[1]) or os._exit(137)\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def _strays(pid: int) -> list[Any]:
    """The live descendants of ``pid`` outside its process group (psutil processes; [] without psutil)."""
    try:
        import psutil
    except ImportError:
        return []
    try:
        return [p for p in psutil.Process(pid).children(recursive=True) if _pgid(p.pid) not in (pid, None)]
    except psutil.Error:
        return []


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _running(procs: list[Any]) -> list[Any]:
    """The psutil processes of ``procs`` that still run (not gone, not zombies)."""
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != "zombie":
                out.append(p)
        except Exception:  # psutil.NoSuchProcess and kin
            pass
    return out


def _group_has_live_members(pgid: int) -> bool:
    """Whether a process group has members that are not zombies (Linux: /proc; elsewhere: any member)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not os.path.isdir("/proc/self"):
        return True
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":  # state, ppid, pgrp
            return True
    return False


def _read(fh: Any, limit: int = 1 << 20) -> str:
    """The last ``limit`` bytes of a binary file, as text."""
    fh.seek(0, os.SEEK_END)
    size = fh.tell()
    fh.seek(max(0, size - limit))
    return fh.read().decode("utf-8", "replace")
