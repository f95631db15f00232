"""Faults and long runs on the Spark standalone cluster of ``scripts/cluster`` with ``s3://`` homes.

- The driver (``cbp run`` and its Spark JVM: their process group) is SIGKILLed in the middle of
  an epoch at kill points of the crash harness (tests/crash_harness.py, :mod:`cbp.faults`): after
  the intention is written, inside the Spark job after a task wrote its files, between two Delta
  commits of a pending record, after the last commit before the snapshot. The home is on the
  cluster's S3 server, so the killed driver leaves its runner lease behind: the next ``cbp run``
  is refused with ``busy`` (exit 6) until the lease expires (``CBP_LEASE_TTL``), then takes over
  with a notice naming the killed pid, and recovers exactly: the results equal an uninterrupted
  local run's and networkx's. Each of these drivers takes one executor (``spark.cores.max=1``): the
  kill inside a task needs one, and a second executor JVM was started and killed with every driver.
- Three crawl rounds of flows/crawl_queue.yaml on the cluster with an ``s3://`` home equal the same
  three rounds in local mode on a local home, and after each round the queue is the from-scratch
  queue.

Like tests/test_cluster.py (whose fixtures and helpers this module uses) the tests run only when a
cluster is up or can be started (``CBP_TEST_CLUSTER=0`` skips) and every driver on the cluster is a ``cbp``
process (the crawl's rounds in the group's shared one: tests/cluster_cli.py, the fixture ``cli``); commands
that start no Spark (a feed, a refused run) and the local-mode references run in the pytest process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import crash_harness as ch
import pytest
from cluster_cli import CliSession
from crawl_site import HOST, make_site
from test_cluster import (  # noqa: F401  (the fixtures cluster, cli and own_application)
    ROOT,
    _local_env,
    cbp,
    cli_fixture,
    cluster_fixture,
    jsonl,
    own_application_fixture,
)
from test_crawl_queue import _check_round

from cbp.airflow.dagfactory import task_environ

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.classic(
        reason="starts scripts/cluster (JVMs: no Java in a Connect client) and runs classic cbp drivers on it; "
        "Connect in front of the cluster is measured by bench/connect_epochs.py --cluster"
    ),
]

TTL = 6  # seconds: CBP_LEASE_TTL of the drivers here, so a killed driver's lease expires soon
#: operation index (ch.operations: feed 0, run 0) -> the kills before it succeeds: each in the take-over of
#: the one before (a driver each; the one that succeeds is the fourth)
KILLS = {
    1: [
        "kill:epoch:intention:1",  # intention written, Spark job not started
        "kill-driver:task:outputs-written:1",  # inside the Spark job on an executor: a task wrote its files
        "kill:epoch:committed:0:1",  # pending record written, first Delta commit made, not the others
    ],
}
# (the local crash suite, tests/test_crash.py, covers every kill point; three here keep CI's time; one increment:
# a second one's feed, run and reference added a driver on the cluster and no kill)
CRAWL = str(ROOT / "flows" / "crawl_queue.yaml")


def _s3_home(env: dict[str, str], name: str) -> str:
    return f"s3://{env['CBP_S3_BUCKET']}/test-{uuid.uuid4().hex[:8]}/{name}"


def _aws(env: dict[str, str]) -> Any:
    """This process's AWS_* variables set to the cluster's S3 server (for reading s3 homes in-process)."""
    return task_environ({k: v for k, v in env.items() if k.startswith("AWS_")})


def _group(pgid: int) -> list[str]:
    """The command names of the processes in process group ``pgid``."""
    names = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:
            names.append(text.split("(", 1)[1].rsplit(")", 1)[0])
    return names


def driver(
    env: dict[str, str], args: list[str], home: str, fault: str | None = None, timeout: float = 900
) -> tuple[subprocess.CompletedProcess, int, list[str]]:
    """``cbp <args[0]> components.yaml --home HOME ...`` as the leader of its own process group.

    When the driver dies (a fault's SIGKILL), whatever is left of its group (its Spark JVM) is
    SIGKILLed at once too: returns the result, the driver's pid and the names of the processes killed that way."""
    env = {**env, "CBP_LEASE_TTL": str(TTL), "CBP_LEASE_RENEW": "1", "PYTHONPATH": f"{ROOT}:{ROOT / 'tests'}"}
    env["CBP_SPARK_CONF"] = f"{env.get('CBP_SPARK_CONF', '')};spark.cores.max=1"  # one executor JVM (the last wins)
    env.pop("CBP_FAULT", None)
    if fault:
        env["CBP_FAULT"] = fault
    cmd = [sys.executable, "-m", "cbp.cli", args[0], str(ch.YAML), "--home", home, *args[1:]]
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, text=True, env=env, cwd=ROOT, start_new_session=True)
        try:
            code = proc.wait(timeout)
        finally:
            left = _group(proc.pid) if proc.poll() != 0 else []  # after a clean exit the JVM ends by itself
            if left:
                os.killpg(proc.pid, signal.SIGKILL)
        out.seek(0)
        err.seek(0)
        return subprocess.CompletedProcess(cmd, code, out.read(), err.read()), proc.pid, left


def _victim(env: dict[str, str], home: str, incs: list[list[dict[str, str]]], tmp: Path) -> list[dict[str, Any]]:
    """Feed and run as a user would; before a run succeeds, SIGKILL it at each of its KILLS.

    After each kill: a run at once is refused (exit 6, the killed driver's lease is live), one
    after the lease expired takes the home over (a notice naming the killed pid) and goes on. Every run
    that gets to Spark is a driver process of its own (a kill needs one; the take-over is a new process);
    the feeds and the refused runs, which start no Spark, run ``cbp.cli.main`` in this process."""
    log: list[dict[str, Any]] = []
    for i, (op, k) in enumerate(ch.operations(incs)):
        if op == "feed":
            src = tmp / f"inc{k}.jsonl"
            src.write_text("".join(json.dumps(r) + "\n" for r in incs[k]))
            with _aws(env):  # a feed starts no Spark: the command's own code in this process
                r = ch.cli_here(["feed", "lines", str(src), "--id", f"inc{k}"], home)
            assert r.returncode == 0, r.stderr[-3000:]
            continue
        killed: int | None = None
        killed_at = 0.0
        for fault in KILLS.get(i, []) + [None]:  # type: ignore[operator]
            if killed is not None:
                with _aws(env):  # refused before it starts Spark: the command's own code in this process
                    busy = ch.cli_here(["run"], home)
                assert busy.returncode == 6, (
                    f"a run right after the kill: exit {busy.returncode}\n{busy.stderr[-2000:]}"
                )
                # the killed driver's lease expires: its last record said "expires" before its death + TTL
                time.sleep(max(0.0, killed_at + TTL + 1 - time.monotonic()))
            t0 = time.monotonic()
            r, pid, left = driver(env, ["run"], home, fault)
            entry = {
                "op": i,
                "fault": fault,
                "pid": pid,
                "exit": r.returncode,
                "seconds": round(time.monotonic() - t0, 1),
                "group_killed": left,
                "took_over": killed is not None and f"pid {killed} " in r.stderr,
            }
            log.append(entry)
            if killed is not None:
                assert entry["took_over"] and "took over" in r.stderr, (
                    f"no take-over notice for pid {killed}:\n{r.stderr[-3000:]}"
                )
            if fault:
                assert r.returncode == -signal.SIGKILL, (
                    f"{fault} was not reached (exit {r.returncode}):\n{r.stderr[-3000:]}"
                )
                killed, killed_at = pid, time.monotonic()  # after its death: its lease renewals have stopped
            else:
                assert r.returncode == 0, f"run {i} after recovery failed:\n{r.stderr[-3000:]}"
    return log


def _crawl_rounds(
    cli: CliSession | None, home: str, corpus: Path, seed: str, rounds: int, aws: dict[str, str]
) -> dict[str, Any]:
    """``cbp crawl ... --run`` one round at a time (in the driver process ``cli``, else in this one, on the
    test session's local SparkSession); after each, the queue is checked against the from-scratch queue.
    Returns what the rounds produced (the queue per threshold epoch, pages, state)."""
    import cbp as cbp_api

    ever: dict[str, float] = {}
    times = []
    for n in range(rounds):
        with _aws(aws):
            before = cbp_api.load(CRAWL, home=home).status()["stages"]["threshold"]["epochs"]
        t0 = time.monotonic()
        argv = ["crawl", CRAWL, "--home", home, "--corpus", str(corpus), "--max-pages", "12", "--run"]
        argv += ["--seed", seed] if n == 0 else []
        if cli is None:
            from cbp.cli import main

            assert main(argv) == 0
        else:
            cli(*argv)
        times.append(round(time.monotonic() - t0, 1))
        with _aws(aws):
            p = cbp_api.load(CRAWL, home=home)
            _check_round(p, ever, p.output("pages"), before)
    with _aws(aws):
        p = cbp_api.load(CRAWL, home=home)
        st = p.status()["stages"]
        queue = {
            e: jsonl("\n".join(json.dumps(r) for r in p.output("crawl_queue", epoch=e)))
            for e in range(1, st["threshold"]["epochs"] + 1)
        }
        return {
            "epochs": {s: v["epochs"] for s, v in st.items()},
            "queue": queue,
            "pages": sorted(r["url"] for r in p.output("pages")),
            "merge": jsonl("\n".join(json.dumps(r) for r in p.state("merge"))),
            "count_links": jsonl("\n".join(json.dumps(r) for r in p.state("count_links"))),
            "seconds": times,
        }


def test_three_crawl_rounds_on_cluster_with_s3_home_equal_local(cluster, cli, spark, tmp_path):
    """Three rounds of ``cbp crawl --run`` (corpus on the local disk, home on S3, epochs on the
    cluster, the rounds in one driver process: the group's shared one) equal the same rounds in local mode
    on a local home; each round's queue is the from-scratch queue over the pages crawled so far."""
    seed = make_site(str(tmp_path))
    corpus = tmp_path / HOST
    on_cluster = _crawl_rounds(cli, _s3_home(cluster, "crawl_queue"), corpus, seed, 3, cluster)
    local = _crawl_rounds(None, str(tmp_path / "home-local"), corpus, seed, 3, {})
    for part in ("epochs", "queue", "pages", "merge", "count_links"):
        assert on_cluster[part] == local[part], part
    assert len(on_cluster["pages"]) > 12 and on_cluster["epochs"]["threshold"] >= 2
    print(
        f"crawl rounds (s) on the cluster {on_cluster['seconds']}, local {local['seconds']}; "
        f"{len(on_cluster['pages'])} pages, epochs {on_cluster['epochs']}"
    )


def test_driver_killed_mid_epoch_on_s3_home_recovers_exactly(own_application, spark, tmp_path):
    """Three SIGKILLs of the driver and its JVM (see KILLS) on the cluster with an s3:// home; each
    time the next run is refused while the lease lives, then takes over and recovers: epochs,
    output increments and state equal an uninterrupted local run's and the from-scratch components."""
    # every kill is in the run's first epoch; seed 12 makes 8 epochs in all (seed 11: 12), each one a job on the
    # cluster in the driver that succeeds and one in the local reference (crash_harness.SHALLOW says how counted)
    incs = ch.increments(seed=12, n=1, nodes=30, edges=12)
    ref = str(tmp_path / "reference")
    t0 = time.monotonic()
    ch.run_reference(ref, incs, spark)  # uninterrupted, local mode, local home: the same feeds (ids too) and runs
    t_ref = time.monotonic() - t0
    want = ch.results(ref)
    assert want["state"] == ch.expected(incs)

    home = _s3_home(own_application, "components")
    t0 = time.monotonic()
    log = _victim(own_application, home, incs, tmp_path)
    t_victim = time.monotonic() - t0
    with _aws(own_application):
        got = ch.results(home)
    assert got["leftovers"] == {"pending": False, "intentions": []}
    for part in ("epochs", "outputs", "state", "delta_state"):
        assert got[part] == want[part], part
    kills = [e for e in log if e["fault"]]
    assert len(kills) == sum(len(v) for v in KILLS.values())
    assert sum(e["took_over"] for e in log) == len(kills)
    assert any("java" in e["group_killed"] for e in kills)  # the driver's Spark JVM was SIGKILLed with it
    print(f"reference (local) {t_ref:.0f}s; victim on the cluster with {len(kills)} kills {t_victim:.0f}s")
    for e in log:
        print(json.dumps(e))
