"""Which executor runs this task: :func:`executor_name` walks up the process tree (see
:mod:`cbp.engine.driver.locality`, which keeps a state partition on the executor that ran it)."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

__all__ = ["executor_name"]

_NAME: str | None = None


def _ancestors(pid: int, depth: int = 8) -> Iterator[list[str]]:
    """The command lines of ``pid`` and its ancestors (Linux ``/proc``; nothing elsewhere)."""
    for _ in range(depth):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                args = [a.decode(errors="replace") for a in f.read().split(b"\0")]
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return
        yield args
        if pid <= 1:
            return


def executor_name() -> str:
    """This process's executor as ``"<executor id>@<host>"`` (``"driver@<host>"`` in local mode)."""
    global _NAME
    if _NAME is None:
        name = f"driver@{os.environ.get('SPARK_LOCAL_HOSTNAME') or socket.gethostname()}"
        for args in _ancestors(os.getpid()):
            if "--executor-id" in args and "--hostname" in args:
                try:
                    name = f"{args[args.index('--executor-id') + 1]}@{args[args.index('--hostname') + 1]}"
                except IndexError:
                    pass
                break
        _NAME = name
    return _NAME
