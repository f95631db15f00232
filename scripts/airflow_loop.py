#!/usr/bin/env python
"""The crawl loop under a real Airflow, unattended: ``airflow standalone`` with cbp's DAGs.

1. downloads the corpus (python3.11-doc, ~530 HTML pages) into bench/data/ if needed;
2. starts ``airflow standalone`` (SQLite, its own AIRFLOW_HOME under state/airflow-loop/) with
   ``dags/`` as DAGs folder and a config whose homes are under state/airflow-loop/;
3. lands the seed with ``cbp crawl --seed`` (outside Airflow: the AssetWatcher of ``pages`` sees it);
4. watches the loop advance: after each crawl round (crawler DAG) and the pipeline run that
   follows it (pipeline DAG), prints the round, the DAG runs and the queue, and checks the queue
   against the from-scratch computation over the pages crawled so far;
5. stops Airflow after ``--rounds`` rounds (or when the loop is quiet for ``--idle`` seconds).

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


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=4, help="crawl rounds to watch (default 4)")
    ap.add_argument("--max-pages", type=int, default=100, help="pages per crawl round (default 100)")
    ap.add_argument("--work", default=str(ROOT / "state" / "airflow-loop"), help="AIRFLOW_HOME and cbp homes go here (wiped first)")
    ap.add_argument("--idle", type=float, default=300, help="give up when nothing happens for this many seconds")
    ap.add_argument("--port", type=int, default=8080, help="port of Airflow's API server and UI (default 8080)")
    args = ap.parse_args()

    sys.path.insert(0, str(ROOT))
    from cbp.corpus import fetch_debian_doc

    corpus = fetch_debian_doc(PACKAGE, str(ROOT / "bench" / "data"))
    if corpus is None:
        log(f"could not download {PACKAGE} (apt-get download {PACKAGE})")
        return 1
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    (work / "airflow").mkdir(parents=True)
    config = work / "cbp.yaml"
    config.write_text(f"flows: {ROOT / 'flows'}\nhomes: {work / 'homes'}\ninbox: {work / 'inbox'}\npoke_interval: 2\n"
                      f"crawlers:\n  crawl_queue:\n    corpus: {corpus}\n    hosts: [{PACKAGE}]\n    seed: {SEED}\n"
                      f"    max_pages: {args.max_pages}\n")
    env = dict(os.environ, AIRFLOW_HOME=str(work / "airflow"), AIRFLOW__CORE__DAGS_FOLDER=str(ROOT / "dags"),
               AIRFLOW__CORE__LOAD_EXAMPLES="False", AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="False",
               AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="10", AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK="False",
               AIRFLOW__CORE__PARALLELISM="4", AIRFLOW__API__PORT=str(args.port),
               AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://localhost:{args.port}/execution/",
               CBP_DAGS_CONFIG=str(config))
    bindir = Path(sys.executable).parent
    airflow = str(bindir / "airflow")
    env["PATH"] = f"{bindir}{os.pathsep}{env.get('PATH', '')}"  # standalone starts its components as `airflow ...`
    home = work / "homes" / "crawl_queue"
    yaml = ROOT / "flows" / "crawl_queue.yaml"

    log(f"starting airflow standalone (AIRFLOW_HOME={work / 'airflow'}, log {work / 'standalone.log'})")
    logf = open(work / "standalone.log", "w")
    proc = subprocess.Popen([airflow, "standalone"], env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        return watch(args, env, airflow, proc, home, yaml, corpus, work)
    finally:
        log("stopping airflow standalone")
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def airflow_json(airflow: str, env: dict, *cmd: str) -> list[dict]:
    """The JSON list an ``airflow ... -o json`` command prints (it may print warnings around it)."""
    r = subprocess.run([airflow, *cmd, "-o", "json"], env=env, capture_output=True, text=True)
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
            log(f"airflow standalone exited with {proc.returncode}; see {work / 'standalone.log'}")
            return 1
        ids = {d["dag_id"] for d in airflow_json(airflow, env, "dags", "list")}
        if {"cbp_crawl_queue", "cbp_crawl_queue_crawler"} <= ids:
            break
        if time.time() - t0 > 300:
            log("the DAGs did not show up within 5 minutes; see the log")
            return 1
        time.sleep(3)
    log(f"DAGs parsed after {time.time() - t0:.0f}s: cbp_crawl_queue, cbp_crawl_queue_crawler (and one per flows/*.yaml)")
    for d in ("cbp_crawl_queue", "cbp_crawl_queue_crawler"):
        subprocess.run([airflow, "dags", "unpause", d], env=env, capture_output=True, text=True)
    cbp = [sys.executable, "-m", "cbp.cli"]
    log(f"landing the seed: cbp crawl {yaml.name} --home {home} --corpus {corpus} --host {PACKAGE} --seed {SEED}")
    r = subprocess.run(cbp + ["crawl", str(yaml), "--home", str(home), "--corpus", corpus, "--host", PACKAGE, "--seed", SEED,
                              "--max-pages", str(args.max_pages)], capture_output=True, text=True, cwd=ROOT)
    print("  " + r.stdout.strip(), flush=True)
    if r.returncode != 0:
        log(f"cbp crawl failed: {r.stderr.strip()[-500:]}")
        return 1

    import cbp as cbp_api
    from cbp.crawl_reference import queue_from_scratch

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
            pages = [x for f in feeds for x in p.output("pages", epoch=f)]
            crawled = {x["url"] for x in pages}
            queue = {q["url"]: q["score"] for e in range(1, nxt["cursor"] + 1) for q in p.output("crawl_queue", epoch=e) if q["url"] not in crawled}
            want = queue_from_scratch(pages)
            same = set(queue) == set(want)  # (scores are those at queueing time; the tests check them per epoch)
            failures += not same
            ok = sum(1 for r in runs if r.get("state") == "success")
            log(f"round {done['round']} ({done['landed']} pages landed at {done['at']}, {done['failed']} unfetchable) processed; "
                f"{len(crawled)} pages crawled, {len(queue)} URLs waiting in the queue, from-scratch queue: {'equal' if same else 'DIFFERENT'} "
                f"({ok} successful pipeline DAG runs so far)")
            for url, score in sorted(queue.items(), key=lambda kv: (-kv[1], kv[0]))[:5]:
                print(f"    {score:7.2f}  {url}", flush=True)
            checked += 1
        if proc.poll() is not None:
            log(f"airflow standalone exited with {proc.returncode}; see {work / 'standalone.log'}")
            return 1
        if time.time() - last_change > args.idle:
            log(f"nothing happened for {args.idle:.0f}s; stopping (see {work / 'standalone.log'})")
            return 1
    log(f"watched {checked - 1} crawl rounds go through Airflow in {time.time() - t0:.0f}s; "
        f"queue {'always equal to' if not failures else 'DIFFERED from'} the from-scratch computation")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
