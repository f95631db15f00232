"""Processes shared by ``scripts/cluster.py`` and ``scripts/connect.py``: a service runs in a
session of its own (one process group, so stopping it stops its children too), writes to a log
file, and binds to loopback.

    >>> 1024 < free_port() < 65536
    True
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HOST = "127.0.0.1"


def free_port(host: str = HOST) -> int:
    """A port nobody listens on now, below the kernel's ephemeral range: a port ``bind(0)`` returns is in
    that range, where any process's outgoing connection may take it before the service binds it (seen
    on a loaded machine: Airflow's API server exiting with "address already in use")."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    ports = range(1024 if low <= 10000 else 10000, max(1025, low))
    for port in random.sample(ports, min(200, len(ports))):
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # every one tried is taken: the kernel's choice
        s.bind((host, 0))
        return int(s.getsockname()[1])


def spark_home() -> Path:
    """pip's pyspark is a Spark distribution: ``bin/spark-class``, ``bin/spark-submit`` and the jars live in it."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_env(root: Path) -> dict[str, str]:
    """This process's environment for a Spark JVM: loopback only, this interpreter for its Python
    workers, the checkout ``root`` importable, no Spark configuration directory of the user's."""
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=HOST,
        SPARK_LOCAL_HOSTNAME=HOST,
        PYSPARK_PYTHON=sys.executable,
        PYTHONPATH=os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p),
    )
    env.pop("SPARK_CONF_DIR", None)
    return env


def tail(path: Path, lines: int = 15) -> str:
    """The last lines of a log (for an error message)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def launch(command: list[str], log_path: Path, banner: str, cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """Start ``command`` in a session of its own, its output appended to ``log_path`` after ``banner``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        log.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {banner}\n".encode())
        log.flush()
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def group_alive(pgid: int) -> bool:
    """Whether any process of the group still runs (zombies do not count)."""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def stop_group(pgid: int, timeout: float) -> None:
    """SIGTERM the process group, SIGKILL it if anything of it still runs after ``timeout`` seconds."""
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.2)
    if group_alive(pgid):
        signal_group(pgid, signal.SIGKILL)
        time.sleep(0.5)
