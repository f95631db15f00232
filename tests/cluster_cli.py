"""``cbp`` commands on the standalone cluster from one driver process (tests/test_cluster.py and
tests/test_cluster_faults.py).

A ``cbp`` process that runs an epoch on the cluster starts a Spark driver JVM and an application with an
executor JVM on each worker. :class:`CliSession` is one process that runs the CLI's own code
(``cbp.cli.main``) for each command it is given, in turn, with the cluster's environment, and answers with
the command's exit code, stdout and stderr: a test's feeds, runs and reads are the commands a user types,
and its epochs share one driver and one application, as a long-lived driver's would (an Airflow worker's,
``cbp run --follow``). The workers have one core each, so while a session's application lives no other
driver gets executors: a session ends (``close``, or its ``with`` block) before another driver starts.
"""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

#: The session process: one JSON argv a line on stdin, one marked JSON answer a line on stdout (the
#: marker sets the answers apart from whatever the JVM writes to the same file descriptor).
SERVER = """
import contextlib, io, json, logging, sys
from cbp.cli import main

mark, reply = sys.argv[1], sys.stdout
for line in sys.stdin:
    log = logging.getLogger("cbp")  # the command sets its handler up on the stderr it is given
    log.handlers[:] = [h for h in log.handlers if not getattr(h, "_cbp_cli", False)]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(json.loads(line))
        except SystemExit as e:  # argparse refused the command line
            code = e.code if isinstance(e.code, int) else 2
    reply.write("\\n" + mark + json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue()}) + "\\n")
    reply.flush()
"""


class CliSession:
    """One driver process for a sequence of ``cbp`` commands: ``session("run", yaml, ...)`` is ``cbp run
    yaml ...``'s stdout (an assertion error with both streams if it exits non-zero); :meth:`call` gives the
    exit code and streams as a :class:`subprocess.CompletedProcess`."""

    def __init__(self, env: dict[str, str], timeout: float = 600) -> None:
        self.timeout = timeout
        self._mark = f"cbp-session-{uuid.uuid4().hex}:"
        self._log = tempfile.TemporaryFile("w+")  # the process's own stderr (the JVM's start, a crash)
        self._proc = subprocess.Popen(
            [sys.executable, "-c", SERVER, self._mark],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
            cwd=ROOT,
        )
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, name="cli-session-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            if line.startswith(self._mark):
                self._answers.put(json.loads(line[len(self._mark) :]))
        self._answers.put(None)  # the process ended

    @property
    def pid(self) -> int:
        """The driver process's id (its JVM is a child of it)."""
        return self._proc.pid

    def alive(self) -> bool:
        """Whether the driver process still runs."""
        return self._proc.poll() is None

    def submit(self, *args: str) -> None:
        """Start ``cbp ARGS...`` in the session without waiting: :meth:`answer` waits for its result."""
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(list(args)) + "\n")
        self._proc.stdin.flush()

    def call(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``cbp ARGS...`` in the session: its exit code, stdout and stderr."""
        self.submit(*args)
        return self.answer(*args)

    def answer(self, *args: str) -> subprocess.CompletedProcess[str]:
        """The exit code, stdout and stderr of the command submitted last, ``cbp ARGS...``, once it ends."""
        try:
            answer = self._answers.get(timeout=self.timeout)
        except queue.Empty:
            raise AssertionError(f"cbp {' '.join(args)}: no answer within {self.timeout}s") from None
        if answer is None:
            self._log.seek(0)
            raise AssertionError(f"the session ended during cbp {' '.join(args)}:\n{self._log.read()[-3000:]}")
        return subprocess.CompletedProcess(["cbp", *args], answer["code"], answer["out"], answer["err"])

    def __call__(self, *args: str) -> str:
        r = self.call(*args)
        assert r.returncode == 0, f"cbp {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr[-3000:]}"
        return r.stdout

    def close(self) -> None:
        """End the process (its Spark application with it) and the reader thread."""
        try:
            if self._proc.stdin is not None:
                self._proc.stdin.close()
            self._proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        finally:
            self._reader.join(timeout=30)
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._log.close()

    def __enter__(self) -> CliSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
