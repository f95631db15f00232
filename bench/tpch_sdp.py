#!/usr/bin/env python
"""The Spark Declarative Pipelines (SDP) arm of ``bench/tpch.py``: a TPC-H query as an SDP materialized view,
refreshed with the ``spark-pipelines`` CLI.

One Spark Connect server (``local[2]``, its own warehouse directory, Spark's defaults otherwise) serves every
run: ``spark-pipelines --remote sc://127.0.0.1:PORT run`` talks to it (the CLI's ``--remote``, passed to
``spark-submit``; without it each run starts a server and its JVM of its own: minutes a run here). A run
still starts the CLI's launcher JVM and its Python client.

Per query, a project ``where/<query>/`` holds ``spark-pipeline.yml``, ``flows/tpch/<query>.sql`` as it is
(``CREATE MATERIALIZED VIEW ...``) and ``tables.py``, the tables it reads as SDP temporary views over the
Parquet files of the Delta tables' current snapshot (``DeltaTable.file_uris()``: what Spark SQL's recompute
reads), rewritten before each run. Every refresh of a materialized view recomputes it in full (Spark's
docs; SPARK-56451). The refresh's time is from the pipeline's event log: the view's flow ``RUNNING`` to
``COMPLETED`` (the CLI prints each event with the server's timestamp, to the second: a ``sitecustomize``
given to the CLI's Python only prints them to the microsecond).

    with Server(Path("/tmp/sdp")) as server:
        project = write_project(Path("/tmp/sdp/q1"), "q1", Path("/tmp/tpch"), ["lineitem"])
        print(refresh(server, project, "q1"))   # {'refresh': 3.1, 'cli_seconds': 14.2, ...}
        print(len(view_rows(server, "q1")))     # 4
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pyspark

sys.path.insert(0, str(Path(__file__).resolve().parent))
import treecpu  # noqa: E402

HOST = "127.0.0.1"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
SPARK_HOME = Path(pyspark.__file__).resolve().parent
CLI = Path(sys.executable).parent / "spark-pipelines"
FLOWS = Path(__file__).resolve().parents[1] / "flows" / "tpch"
# the CLI prints each event "%Y-%m-%d %H:%M:%S: message"; this prints the same with microseconds
PRECISE = """import pyspark.pipelines.logging_utils as _lu

def _precise(message, timestamp):
    print(f"{timestamp.strftime('%Y-%m-%d %H:%M:%S.%f')}: {message}", flush=True)

_lu.log_with_provided_timestamp = _precise
"""
EVENT = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?): (.*)$")
TABLES_PY = '''"""The TPC-H tables {query} reads: the Parquet files of their Delta tables' current snapshot."""

from pyspark import pipelines as dp

FILES = {files!r}

for _name, _files in FILES.items():
    dp.temporary_view(name=_name)(lambda _files=_files: spark.read.parquet(*_files))  # noqa: F821
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _env() -> dict[str, str]:
    env = dict(os.environ, SPARK_HOME=str(SPARK_HOME), SPARK_LOCAL_IP=HOST, PYSPARK_PYTHON=sys.executable)
    for key in ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_CONF_DIR"):
        env.pop(key, None)
    return env


class Server:
    """A Spark Connect server for the CLI's runs: started in a session of its own, stopped with its process
    group (the JVM and its Python workers). A context manager."""

    def __init__(self, where: Path, memory: str = "2g", ready_timeout: float = 300.0) -> None:
        self.where, self.memory, self.ready_timeout = where.resolve(), memory, ready_timeout
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._client: Any = None
        self._meter: treecpu.TreeCPU | None = None

    @property
    def url(self) -> str:
        return f"sc://{HOST}:{self.port}"

    def start(self) -> None:
        """Start the server; return when it listens (or raise, the log's tail in the message)."""
        shutil.rmtree(self.where / "warehouse", ignore_errors=True)
        self.where.mkdir(parents=True, exist_ok=True)
        self.port = _free_port()
        conf = {
            "spark.connect.grpc.binding.address": HOST,
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": HOST,
            "spark.driver.bindAddress": HOST,
            "spark.ui.enabled": "false",
            "spark.sql.warehouse.dir": str(self.where / "warehouse"),  # static: only the server can set it
            "spark.sql.session.timeZone": "UTC",
        }
        args = [str(SPARK_HOME / "bin" / "spark-submit"), "--master", "local[2]", "--driver-memory", self.memory]
        for key, value in conf.items():
            args += ["--conf", f"{key}={value}"]
        log = open(self.where / "server.log", "ab")  # noqa: SIM115 (the server writes it while it runs)
        self.proc = subprocess.Popen(
            [*args, "--class", SERVER_CLASS, "spark-internal"],
            cwd=self.where,
            env=_env(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + self.ready_timeout
        while not self._listening():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.where / "server.log").read_text(errors="replace").splitlines()[-15:]
                self.stop()
                raise RuntimeError("the Spark Connect server did not start:\n" + "\n".join(tail))
            time.sleep(0.5)
        self._meter = treecpu.TreeCPU(self.proc.pid)  # from its start: its Python workers may exit before a refresh

    def _listening(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=1):
                return True
        except OSError:
            return False

    def cpu_seconds(self) -> float:
        """CPU seconds of the server's JVM and its Python workers so far, those that exited included."""
        if self.proc is None:
            return 0.0
        if self._meter is None:
            self._meter = treecpu.TreeCPU(self.proc.pid)
        return self._meter.total()

    def client(self) -> Any:
        """A Spark Connect session of this process on the server (to read a view's rows)."""
        if self._client is None:
            from pyspark.sql.connect.session import SparkSession as RemoteSession

            self._client = RemoteSession.builder.remote(self.url).create()
        return self._client

    def stop(self) -> None:
        """Stop the client session and the server's process group (SIGTERM, then SIGKILL after 20 s)."""
        if self._client is not None:
            try:
                self._client.stop()
            except Exception:  # the server may be gone already
                pass
            self._client = None
        if self._meter is not None:
            self._meter.stop()
            self._meter = None
        if self.proc is None:
            return
        for sig, wait in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=wait)
                break
            except subprocess.TimeoutExpired:
                continue
        self.proc = None

    def __enter__(self) -> Server:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def write_project(where: Path, query: str, data: Path, tables: list[str]) -> Path:
    """The SDP project of ``query`` under ``where`` over the current snapshot of ``tables`` under ``data``
    (``tables.py`` rewritten: call it again after a change); return its ``spark-pipeline.yml``."""
    from deltalake import DeltaTable

    where, data = where.resolve(), data.resolve()
    where.mkdir(parents=True, exist_ok=True)
    shutil.copy(FLOWS / f"{query}.sql", where / f"{query}.sql")
    files = {t: DeltaTable(str(data / t)).file_uris() for t in tables}
    (where / "tables.py").write_text(TABLES_PY.format(query=query, files=files))
    spec = where / "spark-pipeline.yml"
    spec.write_text(
        f"name: tpch_{query}\n"
        f"storage: {(where / 'storage').resolve().as_uri()}\n"
        "libraries:\n"
        "  - glob: {include: tables.py}\n"
        f"  - glob: {{include: {query}.sql}}\n"
    )
    site = where / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(PRECISE)
    return spec


def refresh(server: Server, spec: Path, query: str) -> dict[str, Any]:
    """One ``spark-pipelines run`` of the project ``spec`` on ``server``: the view's refresh (its flow's
    RUNNING to COMPLETED in the event log, seconds), the CLI's wall and CPU seconds (its launcher JVM and
    Python), the server's CPU seconds during the run."""
    env = _env()
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(spec.parent / "site"), env.get("PYTHONPATH", "")) if p)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_cpu, t0 = server.cpu_seconds(), time.perf_counter()
    done = subprocess.run(
        [str(CLI), "--remote", server.url, "run", "--spec", str(spec)],
        cwd=spec.parent,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = done.stdout + done.stderr
    (spec.parent / "cli.log").open("a").write(out)
    if done.returncode != 0:
        raise RuntimeError(f"spark-pipelines failed ({done.returncode}): {out[-2000:]}")
    return {
        "refresh": flow_seconds(out, query),
        "cli_seconds": wall,
        "cli_cpu": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
        "server_cpu": server.cpu_seconds() - server_cpu,
    }


def flow_seconds(log: str, query: str) -> float:
    """Seconds from the flow of view ``query`` RUNNING to its COMPLETED, from the CLI's printed event log.

    >>> flow_seconds("2026-11-29 10:00:01.250000: Flow spark_catalog.default.q1 is RUNNING.\\n"
    ...              "2026-11-29 10:00:04.000000: Flow spark_catalog.default.q1 has COMPLETED.", "q1")
    2.75
    """
    running = completed = None
    for line in log.splitlines():
        m = EVENT.match(line.strip())
        if not m or not re.search(rf"\bFlow [`'\"]?(?:\S*\.)?{query}[`'\"]?\s", m.group(2)):
            continue
        stamp = datetime.fromisoformat(m.group(1))
        if "RUNNING" in m.group(2) and running is None:
            running = stamp
        elif "COMPLETED" in m.group(2):
            completed = stamp
    if running is None or completed is None:
        raise RuntimeError(f"no RUNNING and COMPLETED events of flow {query} in the CLI's output:\n{log[-2000:]}")
    return (completed - running).total_seconds()


def view_rows(server: Server, query: str) -> list[tuple]:
    """The rows of the materialized view ``query`` on ``server`` (its file listing refreshed first: a refresh
    rewrote its files)."""
    name = f"spark_catalog.default.{query}"
    server.client().catalog.refreshTable(name)
    return [tuple(r) for r in server.client().table(name).collect()]
