"""Handing a pipeline to a follower: the Airflow DAG's ``run`` task for the pipelines named in
``follow:`` of ``dags/cbp.yaml`` (:mod:`cbp.airflow.config`).

Instead of a ``cbp run`` per increment (a fresh Spark driver each time), the task makes sure that
one ``cbp run --follow`` process follows the pipeline's home (:mod:`cbp.follow`) and returns: the
follower runs every increment as it lands, the inbox's files included (``--inbox``, the same
landing as the DAG's ``land_inbox`` task). The follower is started detached (a session of its
own: it outlives the task), its pid, start time and command recorded in
``<markers>/follower.json``, its output appended to ``<markers>/follower.log``. It is not started
twice: under an ``flock`` of ``<markers>/follower.lock``, a recorded follower that still runs
(same pid and start time) is left alone, and so is a follower that holds the home's runner lock
and was started by hand. :func:`stop_follower` stops it (SIGTERM: after the epoch in flight).

Example (it starts and stops a process)::

    ensure_follower("flows/url_count.yaml", "state/url_count", markers="state/url_count/_airflow")
    # {'follower': 81234, 'started': True}
    stop_follower("state/url_count/_airflow")
    # True
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import RuntimeStateError
from ..storage import Home
from .inbox import INBOX_SETTLE_SECONDS

__all__ = ["ensure_follower", "stop_follower", "follower_record", "follower_running", "RECORD", "LOG"]

RECORD = "follower.json"
LOG = "follower.log"
_STARTED: dict[int, subprocess.Popen] = {}  # followers this process started (reaped by stop_follower)


@contextmanager
def _flock(path: str) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _create_time(pid: int) -> float | None:
    import psutil

    try:
        p = psutil.Process(pid)
        return None if p.status() == psutil.STATUS_ZOMBIE else p.create_time()
    except psutil.Error:
        return None


def follower_record(markers: str) -> dict[str, Any] | None:
    """What ``<markers>/follower.json`` says (None if there is none, or it is not one)."""
    try:
        with open(os.path.join(markers, RECORD), encoding="utf-8") as fh:
            rec = json.load(fh)
    except (OSError, ValueError):
        return None
    return rec if isinstance(rec, dict) and isinstance(rec.get("pid"), int) else None


def follower_running(markers: str) -> int | None:
    """The pid of the recorded follower if it still runs (same pid and start time), else None."""
    rec = follower_record(markers)
    if rec is None:
        return None
    started = _create_time(rec["pid"])
    return rec["pid"] if started is not None and abs(started - float(rec.get("create_time", -1))) < 1.0 else None


def _command(
    yaml_path: str, home: str, markers: str, inbox: str | None, settle: float, min_interval: float
) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "cbp.cli",
        "run",
        "--follow",
        os.path.abspath(yaml_path),
        "--home",
        home,
        "--markers",
        markers,
        "--min-interval",
        f"{min_interval:g}",
    ]
    if inbox is not None:
        cmd += ["--inbox", inbox, "--settle", f"{settle:g}"]
    return cmd


def _wait_started(proc: subprocess.Popen, home: Home, log: str, wait: float) -> None:
    """Wait until the new follower holds the home's runner lock; its error if it exited first."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if (home.runner_info() or {}).get("pid") == proc.pid:
            return
        if proc.poll() is not None:
            with open(log, "rb") as fh:
                fh.seek(max(0, os.path.getsize(log) - 4000))
                tail = fh.read().decode("utf-8", "replace").strip().splitlines()
            raise RuntimeStateError(
                f"the follower of {home.location} exited {proc.returncode} at its start: "
                f"{tail[-1] if tail else '(no message)'} "
                f"(see {log})",
                code="follower-failed",
                path=log,
            )
        time.sleep(0.1)
    raise RuntimeStateError(
        f"the follower of {home.location} (pid {proc.pid}) did not take the runner lock within {wait:g} s; see {log}",
        code="follower-failed",
        path=log,
    )


def ensure_follower(
    yaml_path: str,
    home: str,
    *,
    markers: str,
    inbox: str | None = None,
    settle: float = INBOX_SETTLE_SECONDS,
    min_interval: float = 0.0,
    env: dict[str, str] | None = None,
    wait: float = 120.0,
) -> dict[str, Any]:
    """Make sure a ``cbp run --follow`` process follows ``home`` (see the module docstring):
    ``{"follower": pid, "started": bool}``. A follower that exits at its start (e.g. ``busy``: a
    ``cbp run`` holds the home) is ``follower-failed`` with its last line."""
    os.makedirs(markers, exist_ok=True)
    h = Home(home)
    with _flock(os.path.join(markers, "follower.lock")):
        pid = follower_running(markers)
        if pid is not None:
            return {"follower": pid, "started": False}
        holder = h.runner_info() or {}
        if h.runner_active() and "--follow" in str(holder.get("command", "")):
            return {"follower": holder.get("pid"), "started": False, "elsewhere": holder.get("host")}
        log = os.path.join(markers, LOG)
        cmd = _command(yaml_path, home, markers, inbox, settle, min_interval)
        with open(log, "ab") as out:
            out.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(cmd)}\n".encode())
            out.flush()
            proc = subprocess.Popen(
                cmd,
                env={**os.environ, **(env or {})},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=out,
                start_new_session=True,
                close_fds=True,
                cwd=os.path.dirname(os.path.abspath(yaml_path)),
            )
        _STARTED[proc.pid] = proc
        rec = {"pid": proc.pid, "create_time": _create_time(proc.pid) or time.time(), "command": cmd, "home": home}
        tmp = os.path.join(markers, f"{RECORD}.tmp-{os.getpid()}")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(rec, fh)
        os.replace(tmp, os.path.join(markers, RECORD))
        _wait_started(proc, h, log, wait)
        return {"follower": proc.pid, "started": True}


def stop_follower(markers: str, timeout: float = 120.0) -> bool:
    """Stop the recorded follower (SIGTERM: it stops after the epoch in flight; SIGKILL to its
    process group after ``timeout`` seconds) and remove its record; False if none was running."""
    pid = follower_running(markers)
    try:
        os.unlink(os.path.join(markers, RECORD))
    except FileNotFoundError:
        pass
    if pid is None:
        return False
    # SIGTERM to the follower only (its Spark JVM, in its process group, would die mid-epoch); SIGKILL to the
    # whole group
    for kill, sig, wait in ((os.kill, signal.SIGTERM, timeout), (os.killpg, signal.SIGKILL, 30.0)):
        try:
            kill(pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and _create_time(pid) is not None:
            time.sleep(0.1)
        if _create_time(pid) is None:
            break
    proc = _STARTED.pop(pid, None)
    if proc is not None:
        proc.wait(30)
    return True
