"""A Spark Connect server on this machine, bound to 127.0.0.1: started, checked and stopped by
``scripts/connect``. It runs from pip's pyspark (``jars/spark-connect_2.13-*.jar``) with Spark's
Delta connector from the jar cache (``state/jars``, ``bash scripts/jars``), in front of
``local[2]`` by default or of any master (``--master spark://...``: the standalone cluster of
``scripts/cluster``, whose workers have the jars at the same paths).

State lives in ``state/connect/`` (``CBP_CONNECT_STATE``): ``server.pid`` (the leader of the server's
process group: the server JVM, its Python workers), ``server.json`` (its URL and master) and
``logs/server.log``.

    python scripts/connect.py start [--master URL] [--port N]
    python scripts/connect.py status|stop
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from pathlib import Path

from services import HOST, free_port, launch, spark_env, spark_home, stop_group, tail

ROOT = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("CBP_CONNECT_STATE", ROOT / "state" / "connect"))
LOGS = STATE / "logs"
READY_TIMEOUT = float(os.environ.get("CBP_CONNECT_TIMEOUT", "90"))
STOP_TIMEOUT = 15.0
MARKER = "org.apache.spark.sql.connect.service.SparkConnectServer"
LOG4J = Path(__file__).resolve().parent / "connect-log4j2.properties"
LOG_LEVEL = os.environ.get("CBP_CONNECT_LOG_LEVEL", "warn")
#: The server JVM's JIT compilers (``CBP_CONNECT_JIT``): ``c1`` (the default, ``-XX:TieredStopAtLevel=1``) or ``tiered``
#: (HotSpot's default, C1 then C2). A small epoch's query path (the Connect service, analysis, planning, Arrow
#: results) keeps bringing new methods to C2's thresholds epoch after epoch (150 compilations an epoch after 8
#: warm-up epochs): with C1 only, a small epoch took 0.50x the wall and 0.59x the CPU time, a 300,000-record epoch
#: 0.93x and 1.01x (docs/benchmarks/connect.md, 30 November, night). ``CBP_DRIVER_JAVA_OPTIONS`` comes after it.
JIT_OPTIONS = {"c1": "-XX:TieredStopAtLevel=1", "tiered": ""}

#: What cbp's tasks need of the server (the settings ``get_spark`` gives a classic session). Static
#: ones can only be set here; a client sets none of them.
SERVER_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.adaptive.enabled": "false",  # a stage's shuffle keeps exactly its partition count
    "spark.sql.execution.arrow.maxRecordsPerBatch": "20000",
    "spark.sql.files.openCostInBytes": str(1 << 20),
    "spark.python.worker.reuse": "true",
    "spark.sql.execution.pyspark.udf.simplifiedTraceback.enabled": "false",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.databricks.delta.snapshotPartitions": "4",
    "spark.connect.grpc.binding.address": HOST,
    "spark.driver.host": HOST,
    "spark.driver.bindAddress": HOST,
}


class ConnectError(Exception):
    """The server did not start or stop; the message names the log to read."""


def jars() -> list[str]:
    """The Delta connector's jars (the jar cache's manifest), and pip's Spark Connect server jar."""
    cache = Path(os.environ.get("CBP_JARS_DIR") or ROOT / "state" / "jars")
    try:
        names = [n.strip() for n in (cache / "manifest.txt").read_text().splitlines() if n.strip()]
    except OSError:
        raise ConnectError(f"no jar cache in {cache} (run 'bash scripts/jars')") from None
    connect = sorted((spark_home() / "jars").glob("spark-connect_*.jar"))
    if not connect:
        raise ConnectError(f"pyspark in {spark_home()} ships no spark-connect jar (Spark 4 needed)")
    return [str(cache / n) for n in names] + [str(connect[-1])]


def jit_options() -> str:
    """The server JVM's options for its JIT compilers (:data:`JIT_OPTIONS`, by ``CBP_CONNECT_JIT``)."""
    which = os.environ.get("CBP_CONNECT_JIT", "c1").strip().lower() or "c1"
    if which not in JIT_OPTIONS:
        raise ConnectError(f"CBP_CONNECT_JIT={which!r}: expected one of {', '.join(JIT_OPTIONS)}")
    return JIT_OPTIONS[which]


def command(master: str, port: int) -> list[str]:
    """The server's ``spark-submit`` command line."""
    cp = os.pathsep.join(jars())
    conf = {
        **SERVER_CONF,
        "spark.connect.grpc.binding.port": str(port),
        "spark.driver.extraClassPath": cp,  # not --jars: Spark would copy 670 MiB into every session's directory
        "spark.pyspark.python": sys.executable,
        "spark.executorEnv.PYTHONPATH": str(ROOT),
        # its log at WARN (CBP_CONNECT_LOG_LEVEL=info for Spark's INFO lines: tens per query, some with its plan);
        # its JIT (jit_options); CBP_DRIVER_JAVA_OPTIONS after cbp's own, as for a driver JVM cbp starts (the server
        # is its sessions' driver)
        "spark.driver.extraJavaOptions": " ".join(
            o
            for o in (
                f"-Dlog4j2.configurationFile=file:{LOG4J} -Dcbp.connect.loglevel={LOG_LEVEL}",
                jit_options(),
                os.environ.get("CBP_DRIVER_JAVA_OPTIONS", "").strip(),
            )
            if o
        ),
    }
    if not master.startswith("local"):  # the standalone cluster's workers have the jars at the same paths
        conf.update({"spark.executor.extraClassPath": cp, "spark.executor.cores": "1", "spark.executor.memory": "1g"})
        # a shuffle's reduce task must not prefer the map output's host: the anchor's executor decides
        # where partition p runs (cbp.engine.driver.anchor)
        conf["spark.shuffle.reduceLocality.enabled"] = "false"
    args = [str(spark_home() / "bin" / "spark-submit"), "--master", master, "--name", "cbp-connect"]
    for k, v in conf.items():
        args += ["--conf", f"{k}={v}"]
    return [*args, "--class", MARKER, "spark-internal"]


def server_env() -> dict[str, str]:
    """The server's environment: loopback only, this interpreter and this checkout for its Python workers."""
    env = spark_env(ROOT)
    env.pop("SPARK_REMOTE", None)
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    return env


def pid() -> int | None:
    """The recorded server's pid if it still runs and is the server (not a reused pid)."""
    try:
        p = int((STATE / "server.pid").read_text().strip())
        cmdline = Path(f"/proc/{p}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        stat = Path(f"/proc/{p}/stat").read_text()
    except (OSError, ValueError):
        return None
    return p if MARKER in cmdline and stat.rsplit(")", 1)[1].split()[0] != "Z" else None


def _serving(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


def _info() -> dict[str, str | int]:
    try:
        return dict(json.loads((STATE / "server.json").read_text()))
    except (OSError, ValueError):
        return {}


def start(master: str, port: int | None) -> int:
    """Start the server unless it runs; wait until it listens; print its URL."""
    running = pid()
    if running is not None:
        print(f"Spark Connect server already up (pid {running}): {_info().get('url')}")
        return 0
    port = port or free_port()
    log_path = LOGS / "server.log"
    proc = launch(command(master, port), log_path, f"starting on port {port}, master {master}", STATE, server_env())
    (STATE / "server.pid").write_text(f"{proc.pid}\n")
    url = f"sc://{HOST}:{port}"
    (STATE / "server.json").write_text(json.dumps({"url": url, "port": port, "master": master}) + "\n")
    deadline = time.monotonic() + READY_TIMEOUT
    while not _serving(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            stop()
            raise ConnectError(f"the server did not start; see {log_path}:\n{tail(log_path)}")
        time.sleep(0.3)
    print(f"Spark Connect server up (pid {proc.pid}, master {master}, log {log_path}): {url}")
    print(f"export CBP_REMOTE={url}")
    return 0


def stop() -> int:
    """SIGTERM the server's process group (the JVM and its Python workers), SIGKILL it after
    :data:`STOP_TIMEOUT`; drop the pid file."""
    p = pid()
    if p is not None:
        stop_group(p, STOP_TIMEOUT)
    (STATE / "server.pid").unlink(missing_ok=True)
    (STATE / "server.json").unlink(missing_ok=True)
    print("Spark Connect server " + ("stopped" if p is not None else "was not running"))
    return 0


def status() -> int:
    """Print whether the server runs and listens; exit 0 only if it does."""
    p, info = pid(), _info()
    up = p is not None and _serving(int(info.get("port", 0) or 0))
    if up:
        print(f"Spark Connect server up (pid {p}, master {info.get('master')}): {info.get('url')}")
    else:
        print("Spark Connect server down (scripts/connect start starts it)")
    return 0 if up else 1


def main(argv: list[str]) -> int:
    """``start [--master URL] [--port N]``, ``stop`` or ``status``."""
    ap = argparse.ArgumentParser(prog="scripts/connect", description="A local Spark Connect server for cbp.")
    ap.add_argument("action", choices=["start", "stop", "status"])
    ap.add_argument("--master", default="local[2]", help="the Spark master behind the server (default local[2])")
    ap.add_argument("--port", type=int, default=None, help="the gRPC port (default: a free one)")
    args = ap.parse_args(argv)
    try:
        if args.action == "start":
            return start(args.master, args.port)
        return stop() if args.action == "stop" else status()
    except ConnectError as e:
        print(f"scripts/connect {args.action}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
