"""A Spark standalone cluster (a master, two workers) and an S3-compatible object store (moto)
on this machine, everything on 127.0.0.1; started, checked and stopped by ``scripts/cluster``.

State lives in ``state/cluster/``: one ``<name>.pid`` per process this script started (each is
the leader of its own process group: a worker's group holds its executor JVMs and their Python
workers), ``cluster.json`` (the ports chosen on the first ``up``), ``env.sh`` (what a driver
sources) and ``logs/<name>.log``.

    python scripts/cluster.py up|down|status
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services import HOST, free_port, launch, spark_env, spark_home, stop_group, tail

ROOT = Path(__file__).resolve().parents[1]
STATE = Path(os.environ.get("CBP_CLUSTER_STATE", ROOT / "state" / "cluster"))
LOGS = STATE / "logs"
WORKERS = 2
READY_TIMEOUT = float(os.environ.get("CBP_CLUSTER_TIMEOUT", "90"))
STOP_TIMEOUT = 15.0
S3_KEY, S3_SECRET, S3_REGION = "cbp-local", "cbp-local-secret", "us-east-1"
BUCKET = os.environ.get("CBP_CLUSTER_BUCKET", "cbp")

#: The port settings, each overridable by ``CBP_CLUSTER_<NAME>`` on the first ``up``.
PORT_NAMES = ["master_port", "master_ui", "s3_port"] + [f"worker{i}_ui" for i in range(1, WORKERS + 1)]


class ClusterError(Exception):
    """Something did not start or stop; the message names the log to read."""


@dataclass
class Component:
    """One process of the cluster: its name, the text its command line must contain, how to start it."""

    name: str
    marker: str

    @property
    def pid_file(self) -> Path:
        return STATE / f"{self.name}.pid"

    @property
    def log(self) -> Path:
        return LOGS / f"{self.name}.log"

    def pid(self) -> int | None:
        """The recorded pid if that process still runs and is this component (not a reused pid)."""
        try:
            pid = int(self.pid_file.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except (OSError, ValueError):
            return None
        if self.marker not in cmdline or stat.rsplit(")", 1)[1].split()[0] == "Z":
            return None
        return pid


def components() -> list[Component]:
    """Master first, then the workers, then the object store (the order ``up`` starts them in)."""
    workers = [Component(f"worker-{i}", f"--work-dir {STATE / f'work-{i}'}") for i in range(1, WORKERS + 1)]
    return [Component("master", "org.apache.spark.deploy.master.Master"), *workers, Component("s3", "moto_server")]


# ------------------------------------------------------------------ ports and environment
def ports() -> dict[str, int]:
    """The cluster's ports: those recorded by an earlier ``up``, else from the environment or free ones."""
    path = STATE / "cluster.json"
    if path.exists():
        return dict(json.loads(path.read_text())["ports"])
    chosen = {n: int(os.environ.get(f"CBP_CLUSTER_{n.upper()}", 0)) or free_port() for n in PORT_NAMES}
    STATE.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"ports": chosen}, indent=1) + "\n")
    return chosen


def base_env() -> dict[str, str]:
    """The environment of every process started here: loopback only, this interpreter, this checkout."""
    env = spark_env(ROOT)
    env.update(
        SPARK_PUBLIC_DNS=HOST,
        PYSPARK_DRIVER_PYTHON=sys.executable,
        SPARK_LOG_DIR=str(LOGS),
        SPARK_NO_DAEMONIZE="1",
    )
    # No REST server (it would take port 6066); a taken port is an error, not a silent move to the next one.
    env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false -Dspark.port.maxRetries=0"
    env["SPARK_WORKER_OPTS"] = "-Dspark.port.maxRetries=0"
    return env


def driver_conf(p: dict[str, int]) -> dict[str, str]:
    """The Spark settings a cbp driver needs for this cluster (``CBP_SPARK_CONF`` in env.sh)."""
    return {
        "spark.driver.host": HOST,
        "spark.driver.bindAddress": HOST,
        "spark.ui.enabled": "false",  # cbp's default; if switched on it binds to SPARK_LOCAL_IP (127.0.0.1)
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYTHONPATH": str(ROOT),
        "spark.executorEnv.SPARK_LOCAL_IP": HOST,
        "spark.executor.cores": "1",
        "spark.cores.max": str(WORKERS),
        "spark.executor.memory": "1g",
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",  # wait for both executors before the first job
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "60s",
        "spark.task.maxFailures": "4",
    }


def env_sh(p: dict[str, int]) -> str:
    """The text of ``state/cluster/env.sh``."""
    conf = ";".join(f"{k}={v}" for k, v in driver_conf(p).items())
    lines = {
        "CBP_SPARK_MASTER": f"spark://{HOST}:{p['master_port']}",
        "CBP_SPARK_CONF": conf,
        "SPARK_LOCAL_IP": HOST,
        "SPARK_LOCAL_HOSTNAME": HOST,
        "PYSPARK_PYTHON": sys.executable,
        "PYSPARK_DRIVER_PYTHON": sys.executable,
        "AWS_ENDPOINT_URL": f"http://{HOST}:{p['s3_port']}",
        "AWS_ACCESS_KEY_ID": S3_KEY,
        "AWS_SECRET_ACCESS_KEY": S3_SECRET,
        "AWS_REGION": S3_REGION,
        "AWS_DEFAULT_REGION": S3_REGION,
        "AWS_ALLOW_HTTP": "true",  # delta-rs / object_store refuse plain http endpoints without it
        "CBP_S3_BUCKET": BUCKET,
        "CBP_JARS_ON_WORKERS": "1",  # the workers run on this machine: Delta and S3A jars from state/jars, not shipped
    }
    out = [f"# written by scripts/cluster up; source it to run cbp on the cluster ({STATE})"]
    out += [f"export {k}='{v}'" for k, v in lines.items()]
    out.append(
        f"export PYTHONPATH='{ROOT}'${{PYTHONPATH:+:$PYTHONPATH}}  # the driver runs the same checkout as the executors"
    )
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------ starting
def command(c: Component, p: dict[str, int]) -> list[str]:
    """The command line of a component."""
    spark_class = str(spark_home() / "bin" / "spark-class")
    if c.name == "master":
        return [
            spark_class,
            "org.apache.spark.deploy.master.Master",
            "--host",
            HOST,
            "--port",
            str(p["master_port"]),
            "--webui-port",
            str(p["master_ui"]),
        ]
    if c.name.startswith("worker-"):
        i = int(c.name.split("-")[1])
        return [
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            f"spark://{HOST}:{p['master_port']}",
            "--host",
            HOST,
            "--cores",
            "1",
            "--memory",
            "2g",
            "--work-dir",
            str(STATE / f"work-{i}"),
            "--webui-port",
            str(p[f"worker{i}_ui"]),
        ]
    return [str(Path(sys.executable).parent / "moto_server"), "-H", HOST, "-p", str(p["s3_port"])]


def start(c: Component, p: dict[str, int]) -> int:
    """Start a component in its own session (process group); record its pid."""
    if c.name.startswith("worker-"):
        (STATE / f"work-{c.name.split('-')[1]}").mkdir(parents=True, exist_ok=True)
    proc = launch(command(c, p), c.log, f"starting {c.name}", STATE, base_env())
    c.pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def http_json(url: str, timeout: float = 3.0) -> Any:
    """GET a JSON document (the master's and workers' ``/json``)."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def _s3_client(p: dict[str, int]) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=f"http://{HOST}:{p['s3_port']}",
        aws_access_key_id=S3_KEY,
        aws_secret_access_key=S3_SECRET,
        region_name=S3_REGION,
    )


def alive_workers(p: dict[str, int]) -> set[str]:
    """Web UI addresses of the workers the master lists as ALIVE."""
    doc = http_json(f"http://{HOST}:{p['master_ui']}/json")
    return {w.get("webuiaddress", "") for w in doc.get("workers", []) if w.get("state") == "ALIVE"}


def ready(c: Component, p: dict[str, int]) -> bool:
    """Whether a started component serves: the master answers, a worker is registered, the bucket exists."""
    try:
        if c.name == "master":
            return http_json(f"http://{HOST}:{p['master_ui']}/json").get("status") == "ALIVE"
        if c.name.startswith("worker-"):
            return f"http://{HOST}:{p['worker' + c.name.split('-')[1] + '_ui']}" in alive_workers(p)
        s3 = _s3_client(p)
        try:
            s3.head_bucket(Bucket=BUCKET)
        except s3.exceptions.ClientError:
            s3.create_bucket(Bucket=BUCKET)
            s3.head_bucket(Bucket=BUCKET)
        return True
    except Exception:  # not serving yet: connection refused, timeouts, 404s
        return False


def wait_for(c: Component, pid: int, check: Callable[[], bool], what: str) -> None:
    """Wait until ``check()`` holds; fail naming the log if process ``pid`` died or the time is up."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if not _running(pid):
            raise ClusterError(f"{c.name} exited before it was {what}; see {c.log}:\n{tail(c.log)}")
        if check():
            return
        time.sleep(0.5)
    raise ClusterError(f"{c.name} was not {what} after {READY_TIMEOUT:.0f} s; see {c.log}:\n{tail(c.log)}")


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def up() -> int:
    """Start what is not running (all of it the first time), wait until it serves, write env.sh."""
    p = ports()
    started = []
    for c in components():
        running = c.pid()
        if running is not None:
            wait_for(c, running, lambda c=c: ready(c, p), "ready")  # type: ignore[misc]  # e.g. a worker re-registering
            print(f"{c.name}: already up (pid {running})")
            continue
        pid = start(c, p)
        started.append(c.name)
        print(f"{c.name}: started (pid {pid}, log {c.log})")
        wait_for(c, pid, lambda c=c: ready(c, p), "ready")  # type: ignore[misc]
    (STATE / "env.sh").write_text(env_sh(p))
    print("cluster " + ("already up" if not started else "up") + f": {_summary(p)}")
    print(f"source {STATE / 'env.sh'}")
    return 0


def _summary(p: dict[str, int]) -> str:
    return (
        f"master spark://{HOST}:{p['master_port']} (UI http://{HOST}:{p['master_ui']}), "
        f"{WORKERS} workers, S3 http://{HOST}:{p['s3_port']} bucket '{BUCKET}'"
    )


# ------------------------------------------------------------------ stopping and status
def stop(c: Component) -> bool:
    """SIGTERM the component's process group, SIGKILL it after :data:`STOP_TIMEOUT`; drop the pid file."""
    pid = c.pid()
    if pid is not None:
        stop_group(pid, STOP_TIMEOUT)
    c.pid_file.unlink(missing_ok=True)
    return pid is not None


def down() -> int:
    """Stop the processes ``up`` started (object store and workers first, the master last)."""
    for c in reversed(components()):
        was = stop(c)
        print(f"{c.name}: {'stopped' if was else 'was not running'}")
    (STATE / "env.sh").unlink(missing_ok=True)
    (STATE / "cluster.json").unlink(missing_ok=True)  # the next 'up' picks free ports again
    return 0


def status() -> int:
    """Print what runs; exit 0 only when every component runs and serves."""
    p = ports() if (STATE / "cluster.json").exists() else None
    ok = p is not None
    for c in components():
        pid = c.pid()
        serving = p is not None and pid is not None and ready(c, p)
        ok = ok and serving
        print(
            f"{c.name:9} {'up' if serving else 'running, not ready' if pid else 'down':18} "
            f"{'pid ' + str(pid) if pid else ''}  log {c.log}"
        )
    if p is not None and ok:
        print(f"cluster up: {_summary(p)}")
        print(f"env: {STATE / 'env.sh'}")
    else:
        print("cluster not up (scripts/cluster up starts what is missing)")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    """``up``, ``down`` or ``status``."""
    if len(argv) != 1 or argv[0] not in ("up", "down", "status"):
        print("usage: scripts/cluster up|down|status", file=sys.stderr)
        return 2
    try:
        return {"up": up, "down": down, "status": status}[argv[0]]()
    except ClusterError as e:
        print(f"scripts/cluster {argv[0]}: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
