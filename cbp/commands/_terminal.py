"""Internal: what the CLI shows on the terminal: cbp's warnings, Spark's lines only with ``--verbose``
(:func:`setup`), and a running ``cbp run``'s progress bar on stderr (:class:`EpochDisplay`).

The bar shows only on a terminal, and only for an epoch that takes longer than :data:`AFTER` seconds: the stage
and epoch, Spark's tasks done of all, the records read so far (on Spark Connect: the tasks the server's
progress reports give, and the stage instead of records), the time taken. The bar goes away
when the epoch ends, before its report line is printed (on stdout, as without a terminal).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from typing import Any

from ..engine.driver.progress import Progress
from ..spec.typedvalues import to_json

__all__ = ["AFTER", "EpochDisplay", "json_line", "setup"]

AFTER = 2.0  # seconds an epoch runs before its bar shows


def json_line(rec: Any) -> str:
    r"""``rec`` as one line of JSON, UTF-8 as it is, except the line and paragraph separators
    U+2028/U+2029, escaped: Python's ``str.splitlines`` and JavaScript break lines at them. A
    date, timestamp, decimal or binary value is written in the JSON form a feed reads
    (:func:`cbp.spec.typedvalues.to_json`).

        >>> json_line({"s": "a\u2028b", "t": "é"})
        '{"s": "a\\u2028b", "t": "é"}'
    """
    line = json.dumps(rec, ensure_ascii=False, default=to_json)  # date, timestamp, decimal, binary: their JSON form
    return line.replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def setup(verbose: bool) -> None:
    """cbp's own warnings (logger ``cbp``) on stderr; Spark's and the JVM's lines only when ``verbose``."""
    if verbose:
        os.environ["CBP_VERBOSE"] = "1"  # read where the Spark JVM starts (cbp.engine.driver.jvmlog)
    log = logging.getLogger("cbp")
    if not any(getattr(h, "_cbp_cli", False) for h in log.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("cbp: %(levelname)s: %(message)s"))
        handler._cbp_cli = True  # type: ignore[attr-defined]
        log.addHandler(handler)
    log.setLevel(logging.WARNING)
    log.propagate = False


class EpochDisplay:
    """``progress(p)`` from :meth:`cbp.Pipeline.run`'s poller thread; ``done(stage, epoch)`` when an epoch ends."""

    def __init__(self, after: float = AFTER) -> None:
        self.after = after
        self._lock = threading.Lock()
        self._bar: Any = None
        self._task: Any = None
        self._of: tuple[str, int] | None = None
        self._ended: set[tuple[str, int]] = set()
        # the terminal itself: while Spark's JVM starts, fd 2 is a pipe (cbp.engine.driver.jvmlog.launching)
        self._out = os.fdopen(os.dup(sys.stderr.fileno()), "w", buffering=1)

    def progress(self, p: Progress) -> None:
        with self._lock:
            if p.elapsed < self.after or (p.stage, p.epoch) in self._ended:  # a late look at an epoch that ended
                return
            if self._bar is None or self._of != (p.stage, p.epoch):
                self._close()
                self._open(p)
            records = f"{p.records_read:,} records read" if p.records_read is not None else p.spark_stage
            self._bar.update(
                self._task,
                completed=p.tasks_done,
                total=max(p.tasks_total, 1) if p.tasks_total else None,
                records=records,
                spark=p.spark_stage[:40],
            )

    def done(self, stage: str, epoch: int) -> None:
        with self._lock:
            self._ended.add((stage, epoch))
            self._close()

    def _open(self, p: Progress) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            SpinnerColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import (
            Progress as Bar,
        )

        self._bar = Bar(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("tasks  {task.fields[records]}"),
            TimeElapsedColumn(),
            console=Console(file=self._out),
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._task = self._bar.add_task(f"{p.stage} epoch {p.epoch}", total=None, records="", spark="")
        self._of = (p.stage, p.epoch)
        self._bar.start()

    def _close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
        self._bar, self._task, self._of = None, None, None
