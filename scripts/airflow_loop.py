#!/usr/bin/env python
"""The crawl loop under a real Airflow, unattended: the components of ``airflow standalone`` with cbp's DAGs.

1. downloads the corpus (python3.11-doc, ~530 HTML pages) into bench/data/ if needed;
2. starts Airflow as ``airflow standalone`` would (SQLite, LocalExecutor, simple auth manager; its
   own AIRFLOW_HOME under state/airflow-loop/), with ``dags/`` as DAGs folder and a config whose
   homes are under state/airflow-loop/, but safe by default: the API server and UI listen on
   http://127.0.0.1:8181 only, the log servers that standalone would open on every interface
   (8793, 8794) are not started (the UI reads task logs from the local files), everything runs
   with umask 077 (the admin password file, logs, database: owner only; AIRFLOW_HOME is 0700) in
   one process group (``SERVE``; the manual steps of docs/howto/airflow.md start the same command);
3. lands the seed with ``cbp crawl --seed`` (outside Airflow: the AssetWatcher of ``pages`` sees it);
4. watches the loop advance: after each crawl round (crawler DAG) and the pipeline run that
   follows it (pipeline DAG), prints the round, the DAG runs and the queue, and checks the queue
   against the from-scratch computation over the pages crawled so far;
5. stops Airflow (its process group, and any task process that left it) after ``--rounds`` rounds
   (or when the loop is quiet for ``--idle`` seconds).

    bash scripts/airflow-loop              # 4 rounds of 100 pages
    bash scripts/airflow-loop --rounds 6 --max-pages 50
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "python3.11-doc"
SEED = f"http://{PACKAGE}/usr/share/doc/python3.11/html/index.html"
HOST = "127.0.0.1"  # Airflow's API server and UI listen on loopback only (Airflow's own default is 0.0.0.0)
PORT = 8181  # not Airflow's 8080, so the loop does not clash with another Airflow on this machine
UMASK = 0o077  # what Airflow creates (the admin password file, logs, the SQLite DB) is readable by its owner only
PASSWORDS = "simple_auth_manager_passwords.json.generated"
# What `airflow standalone` starts, minus its log servers (they listen on every interface; the UI
# reads task logs from the local files), run by a bash in a process group of its own that stops
# all of them when any one exits. The manual steps of docs/howto/airflow.md run the same line, after `umask 077`.
SERVE = (
    "airflow db migrate > /dev/null && { airflow api-server & airflow scheduler --skip-serve-logs & "
    "airflow dag-processor & airflow triggerer --skip-serve-logs & wait -n; kill 0; }"
)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def airflow_env(airflow_home: Path, dags_config: Path, port: int = PORT, base: dict | None = None) -> dict[str, str]:
    """The environment of every Airflow process the loop starts: loopback only, owner-only password file."""
    env = dict(os.environ if base is None else base)
    env.update(
        AIRFLOW_HOME=str(airflow_home),
        AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
        AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="10",
        AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK="False",
        AIRFLOW__CORE__PARALLELISM="4",
        AIRFLOW__API__HOST=HOST,
        AIRFLOW__API__PORT=str(port),
        AIRFLOW__SCHEDULER__SCHEDULER_HEALTH_CHECK_SERVER_HOST=HOST,
        AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://{HOST}:{port}/execution/",
        AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE=str(airflow_home / PASSWORDS),
        CBP_DAGS_CONFIG=str(dags_config),
    )
    return env


def prepare_airflow_home(airflow_home: Path) -> None:
    """AIRFLOW_HOME as a directory only its owner can enter; an existing password file made owner-only."""
    airflow_home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(airflow_home, 0o700)
    pw = airflow_home / PASSWORDS
    if pw.exists():
        os.chmod(pw, 0o600)


def port_free(port: int, host: str = HOST) -> bool:
    """Whether nothing listens on host:port yet."""
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def start_airflow(env: dict[str, str], logfile: Path, serve: str = SERVE) -> subprocess.Popen:
    """Start Airflow (``serve``, a bash command line) in its own session with umask 077, output to ``logfile``
    (0600)."""
    fd = os.open(logfile, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as logf:
        return subprocess.Popen(
            ["bash", "-c", serve],
            env=env,
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            umask=UMASK,
        )


def stop_airflow(proc: subprocess.Popen, grace: float = 60) -> None:
    """Stop Airflow: SIGTERM to its process group and to the process groups of its task processes
    (they have their own), SIGKILL after ``grace`` seconds to whatever of them is still there."""
    import psutil  # an Airflow dependency

    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        pass
    for p in tree:
        try:
            if p.pid != os.getpgid(p.pid):  # task runners lead groups of their own: TERM them too
                continue
            os.killpg(p.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    _, alive = psutil.wait_procs(tree, timeout=max(1.0, grace / 2))
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()
    _wait_group_gone(proc.pid)


def _wait_group_gone(pgid: int, timeout: float = 60) -> None:
    """Wait until no live process of group ``pgid`` is left (a SIGKILLed process on a busy machine
    can take a while to die), SIGKILLing any that appear, up to ``timeout`` seconds."""
    import psutil

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = []
        for p in psutil.process_iter(["pid", "status"]):
            try:
                if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                    alive.append(p)
            except (ProcessLookupError, psutil.Error):
                pass
        if not alive:
            return
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        psutil.wait_procs(alive, timeout=1.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4, help="crawl rounds to watch (default 4)")
    ap.add_argument("--max-pages", type=int, default=100, help="pages per crawl round (default 100)")
    ap.add_argument(
        "--revisit-min",
        type=float,
        default=60.0,
        help="seconds before a page is revisited at the earliest (the crawler DAG also runs this often; default 60)",
    )
    ap.add_argument(
        "--work", default=str(ROOT / "state" / "airflow-loop"), help="AIRFLOW_HOME and cbp homes go here (wiped first)"
    )
    ap.add_argument("--idle", type=float, default=300, help="give up when nothing happens for this many seconds")
    ap.add_argument(
        "--port", type=int, default=PORT, help=f"port of Airflow's API server and UI, on {HOST} only (default {PORT})"
    )
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from cbp_crawl.corpus import fetch_debian_doc

    if not port_free(args.port):
        log(f"{HOST}:{args.port} is in use (another Airflow?); pick another --port")
        return 1
    corpus = fetch_debian_doc(PACKAGE, str(ROOT / "bench" / "data"))
    if corpus is None:
        log(f"could not download {PACKAGE} (apt-get download {PACKAGE})")
        return 1
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    prepare_airflow_home(work / "airflow")
    config = work / "cbp.yaml"
    config.write_text(
        f"flows: {ROOT / 'flows'}\nhomes: {work / 'homes'}\ninbox: {work / 'inbox'}\npoke_interval: 2\n"
        f"crawlers:\n  crawl_queue:\n    corpus: {corpus}\n    hosts: [{PACKAGE}]\n    seed: {SEED}\n"
        f"    max_pages: {args.max_pages}\n    revisit_min: {args.revisit_min}\n    revisit_max: "
        f"{args.revisit_min * 10}\n"
    )
    env = airflow_env(work / "airflow", config, args.port)
    bindir = Path(sys.executable).parent
    airflow = str(bindir / "airflow")
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"  # SERVE starts the components as `airflow ...`
    home = work / "homes" / "crawl_queue"
    yaml = ROOT / "flows" / "crawl_queue.yaml"

    log(f"starting Airflow on http://{HOST}:{args.port} (AIRFLOW_HOME={work / 'airflow'}, log {work / 'airflow.log'})")
    proc = start_airflow(env, work / "airflow.log")

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        return watch(args, env, airflow, proc, home, yaml, corpus, work)
    finally:
        log("stopping Airflow")
        stop_airflow(proc)


def airflow_json(airflow: str, env: dict, *cmd: str) -> list[dict]:
    """The JSON list an ``airflow ... -o json`` command prints (it may print warnings around it)."""
    r = subprocess.run([airflow, *cmd, "-o", "json"], env=env, capture_output=True, text=True, umask=UMASK)
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("["):
            try:
                return json.loads(line)
            except ValueError:
                return []
    return []


def dag_runs(airflow: str, env: dict, dag_id: str) -> list[dict]:
    return airflow_json(airflow, env, "dags", "list-runs", dag_id)


def watch(args, env, airflow, proc, home, yaml, corpus, work) -> int:
    t0 = time.time()
    while True:  # wait until the DAG processor has parsed our DAGs
        if proc.poll() is not None:
            log(f"Airflow exited with {proc.returncode}; see {work / 'airflow.log'}")
            return 1
        ids = {d["dag_id"] for d in airflow_json(airflow, env, "dags", "list")}
        if {"cbp_crawl_queue", "cbp_crawl_queue_crawler"} <= ids:
            break
        if time.time() - t0 > 300:
            log("the DAGs did not show up within 5 minutes; see the log")
            return 1
        time.sleep(3)
    log(
        f"DAGs parsed after {time.time() - t0:.0f}s: cbp_crawl_queue, cbp_crawl_queue_crawler (and one per "
        f"flows/*.yaml)"
    )
    for d in ("cbp_crawl_queue", "cbp_crawl_queue_crawler"):
        subprocess.run([airflow, "dags", "unpause", d], env=env, capture_output=True, text=True, umask=UMASK)
    cbp = [sys.executable, "-m", "cbp.cli"]
    log(f"landing the seed: cbp crawl {yaml.name} --home {home} --corpus {corpus} --host {PACKAGE} --seed {SEED}")
    r = subprocess.run(
        cbp
        + [
            "crawl",
            str(yaml),
            "--home",
            str(home),
            "--corpus",
            corpus,
            "--host",
            PACKAGE,
            "--seed",
            SEED,
            "--max-pages",
            str(args.max_pages),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    print("  " + r.stdout.strip(), flush=True)
    if r.returncode != 0:
        log(f"cbp crawl failed: {r.stderr.strip()[-500:]}")
        return 1

    import cbp as cbp_api
    from cbp_crawl.reference import queue_from_scratch

    # Round k+1 starts after the pipeline DAG processed round k, and the crawler records which queue
    # epochs it had read by then: so round k+1's record tells the queue after round k, and that is
    # checked against the from-scratch queue over the pages of rounds 1..k.
    checked = 1  # rounds whose queue was checked (round 1 is the seed alone: checked when round 2 starts)
    last_change = time.time()
    failures = 0
    state_file = home / "_crawler" / "state.json"
    while checked <= args.rounds:
        time.sleep(3)
        rounds = json.loads(state_file.read_text()).get("rounds", []) if state_file.exists() else []
        runs = dag_runs(airflow, env, "cbp_crawl_queue") if len(rounds) > checked else []
        while len(rounds) > checked:
            done, nxt = rounds[checked - 1], rounds[checked]
            last_change = time.time()
            p = cbp_api.load(yaml, home=str(home))
            feeds = [r["feed"] for r in rounds[:checked] if r["feed"]]
            versions = [p.output("pages", epoch=f) for f in feeds]
            crawled = {x["url"] for v in versions for x in v}
            signed: dict = {}  # the queue with its retractions (_diff -1) summed in
            for e in range(1, nxt["cursor"] + 1):
                for q in p.output("crawl_queue", epoch=e):
                    signed[(q["url"], q["score"])] = signed.get((q["url"], q["score"]), 0) + q.get("_diff", 1)
            queue = {u: s for (u, s), n in signed.items() if n > 0 and u not in crawled}
            want = queue_from_scratch(versions, feeds=True)
            same = set(queue) == set(want)  # (scores are those at queueing time; the tests check them per epoch)
            failures += not same
            ok = sum(1 for r in runs if r.get("state") == "success")
            log(
                f"round {done['round']} ({done['landed']} pages landed at {done['at']}, {done['failed']} unfetchable; "
                f"revisited "
                f"{done.get('revisited', 0)}: {done.get('unchanged', 0)} unchanged, {done.get('changed', 0)} changed, "
                f"{done.get('gone', 0)} gone) processed; "
                f"{len(crawled)} pages crawled, {len(queue)} URLs waiting in the queue, from-scratch queue: "
                f"{'equal' if same else 'DIFFERENT'} "
                f"({ok} successful pipeline DAG runs so far)"
            )
            for url, score in sorted(queue.items(), key=lambda kv: (-kv[1], kv[0]))[:5]:
                print(f"    {score:7.2f}  {url}", flush=True)
            checked += 1
        if proc.poll() is not None:
            log(f"Airflow exited with {proc.returncode}; see {work / 'airflow.log'}")
            return 1
        if time.time() - last_change > args.idle:
            log(f"nothing happened for {args.idle:.0f}s; stopping (see {work / 'airflow.log'})")
            return 1
    log(
        f"watched {checked - 1} crawl rounds go through Airflow in {time.time() - t0:.0f}s; "
        f"queue {'always equal to' if not failures else 'DIFFERED from'} the from-scratch computation"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
