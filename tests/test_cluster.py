"""cbp on a real Spark standalone cluster (``scripts/cluster``): a master, two workers with their own
executor JVMs and Python workers, and an S3-compatible object store, all on 127.0.0.1.

Uses the cluster that is up (``scripts/cluster up``; then ``state/cluster/env.sh`` exists and
``scripts/cluster status`` succeeds), else starts one and stops it at the end; with
``CBP_TEST_CLUSTER=0`` every test here is skipped but the last, which checks without Spark that
translators and their helper modules travel to executors by value. Every driver on the cluster is a
``cbp`` process with env.sh's variables: the commands of the tests that only run commands (URLCount on
both homes, clustering, the worker kill's feed, run and reads, tests/test_cluster_faults.py's crawl rounds)
run in one such process, in turn (tests/cluster_cli.py: ``cbp.cli.main`` per command; one driver and one
application for their epochs, as a long-lived driver's would be: the fixture ``cli``); a test that needs an
application of its own (the driver kills, last) ends it first. The local-mode
reference of the worker kill runs in the pytest process on the test session's local SparkSession.
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from cluster_cli import CliSession

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / "state" / "cluster"
SCRIPT = ROOT / "scripts" / "cluster"
CBP = str(Path(sys.executable).parent / "cbp")
URLS = str(ROOT / "flows" / "url_count.yaml")

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.classic(
        reason="starts scripts/cluster (JVMs: no Java in a Connect client) and runs classic cbp drivers on it; "
        "Connect in front of the cluster is measured by bench/connect_epochs.py --cluster"
    ),
]

#: What env.sh sets; removed from the local-mode reference's environment.
CLUSTER_VARS = ("CBP_SPARK_MASTER", "CBP_SPARK_CONF", "AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def _script(cmd: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = {**os.environ, "CBP_PYTHON": sys.executable}
    return subprocess.run([str(SCRIPT), cmd], env=env, capture_output=True, text=True, timeout=timeout)


def _sourced(env_sh: Path) -> dict[str, str]:
    """The environment after sourcing env.sh."""
    out = subprocess.run(["bash", "-c", f"source '{env_sh}' && env -0"], capture_output=True, check=True)
    env = dict(item.split("=", 1) for item in out.stdout.decode().split("\0") if "=" in item)
    # the executors of the suite's short applications JIT with C1 only, as its drivers do (tests/conftest.py)
    opts = env.get("CBP_DRIVER_JAVA_OPTIONS", "")
    if opts:
        env["CBP_SPARK_CONF"] = ";".join(
            x for x in (env.get("CBP_SPARK_CONF", ""), f"spark.executor.extraJavaOptions={opts}") if x
        )
    return env


class _Held:
    """The cluster this process holds: from the first test that asks for it to the last of the group's tests
    that follow each other (tests/test_cluster.py, then tests/test_cluster_faults.py: one unit of work,
    tests/tiers.py's GROUPS), so that the two modules do not each start and stop one."""

    lock: IO[str] | None = None
    env: dict[str, str] = {}
    ours = False


def release_cluster() -> None:
    """Stop the cluster this process started (if it did) and release the lock: tests/conftest.py calls it
    after the last test of the cluster's group, and at the end of the session."""
    end_shared_driver()
    if _Held.lock is None:
        return
    try:
        if _Held.ours:
            _script("down")
    finally:
        _Held.lock.close()  # releases the file lock
        _Held.lock, _Held.env, _Held.ours = None, {}, False


@pytest.fixture(scope="module", name="cluster")
def cluster_fixture() -> Iterator[dict[str, str]]:
    """The running cluster's driver environment; starts one (stopped by :func:`release_cluster`) when none is up.

    One process at a time holds it (a file lock beside ``state/cluster``), from the group's first test to its
    last: a hand-run module or another work tree's suite must not share it, and one's ``down`` must not stop
    another's cluster.
    """
    if _Held.lock is None:
        STATE.parent.mkdir(parents=True, exist_ok=True)
        lock = open(STATE.parent / "cluster.lock", "w")  # noqa: SIM115 - held across modules, closed by release_cluster
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when this process dies
        _Held.lock = lock
        env_sh = STATE / "env.sh"
        if not (env_sh.exists() and _script("status", 60).returncode == 0):
            if os.environ.get("CBP_TEST_CLUSTER") == "0":
                release_cluster()
                pytest.skip("needs the standalone cluster of scripts/cluster (CBP_TEST_CLUSTER=0: none started)")
            r = _script("up")
            _Held.ours = r.returncode == 0
            if not _Held.ours:
                release_cluster()
            assert r.returncode == 0, r.stdout + r.stderr
        _Held.env = _sourced(env_sh)
    yield _Held.env


class _Shared:
    """The driver process the command-only tests share (the fixture ``cli``), while it lives."""

    session: CliSession | None = None


@pytest.fixture(name="cli")
def cli_fixture(cluster: dict[str, str]) -> CliSession:
    """The driver process on the cluster that the group's command-only tests share (started by the first,
    ended by a test that needs an application of its own or by :func:`release_cluster`): one driver JVM and
    one application with an executor on each worker for all their epochs, instead of one of each per test.
    Each test keeps homes of its own."""
    if _Shared.session is None or not _Shared.session.alive():
        end_shared_driver()
        _Shared.session = CliSession(cluster)
    return _Shared.session


@pytest.fixture(name="own_application")
def own_application_fixture(cluster: dict[str, str]) -> dict[str, str]:
    """The cluster, with the shared driver ended: its application holds both workers' only cores, so a driver
    of the test's own would get no executor while it lives."""
    end_shared_driver()
    return cluster


def end_shared_driver() -> None:
    """End the shared driver process, if one runs (its application with it)."""
    session, _Shared.session = _Shared.session, None
    if session is not None:
        session.close()


def _local_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in CLUSTER_VARS}
    env.update(
        CBP_SPARK_MASTER="local[2,2]", PYTHONPATH=str(ROOT), SPARK_LOCAL_IP="127.0.0.1"
    )  # the reference binds to loopback too
    return env


def cbp(env: dict[str, str], *args: str, timeout: float = 600) -> str:
    """Run the ``cbp`` CLI; its stdout (fails with both streams when it exits non-zero)."""
    r = subprocess.run([CBP, *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"cbp {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr[-3000:]}"
    return r.stdout


def jsonl(text: str) -> list[dict[str, Any]]:
    return sorted((json.loads(x) for x in text.splitlines() if x.strip()), key=lambda r: json.dumps(r, sort_keys=True))


def increments(n: int, size: int, seed: int = 7) -> list[list[dict[str, str]]]:
    """``n`` increments of URLs over a small vocabulary, so that later increments hit stored keys."""
    rnd = random.Random(seed)
    return [
        [{"url": f"http://h{rnd.randrange(6)}.example/p{rnd.randrange(120)}"} for _ in range(size)] for _ in range(n)
    ]


def write_jsonl(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def task_counts() -> dict[int, dict[Path, int]]:
    """Per worker, the tasks each executor in its work dir (of any application) has logged as finished so far."""
    return {
        i: {
            p: p.read_text(errors="replace").count("Finished task")
            for p in (STATE / f"work-{i}").glob("app-*/*/stderr")
        }
        for i in (1, 2)
    }


def finished_tasks(before: dict[int, dict[Path, int]]) -> dict[int, int]:
    """Per worker, the tasks its executors finished since ``before`` (:func:`task_counts`)."""
    return {i: sum(n - before[i].get(p, 0) for p, n in logs.items()) for i, logs in task_counts().items()}


def pipeline_run(
    cli: CliSession,
    yaml: str,
    home: str,
    feeds: list[list[dict[str, Any]]],
    tmp: Path,
    flow: str = "urls",
    output: str = "counts",
    stage: str = "url_count",
) -> dict[str, Any]:
    """Feed and run increment by increment (the commands in ``cli``, one driver); each epoch's output, the
    final state and the status."""
    outs = []
    for n, recs in enumerate(feeds, 1):
        cli("feed", yaml, flow, write_jsonl(tmp / f"{uuid.uuid4().hex}.jsonl", recs), "--home", home)
        cli("run", yaml, "--home", home, "--quiet")
        outs.append(jsonl(cli("output", yaml, output, "--epoch", str(n), "--home", home)))
    return {
        "outputs": outs,
        "state": jsonl(cli("state", yaml, stage, "--home", home)),
        "status": json.loads(cli("status", yaml, "--home", home, "--json")),
    }


def from_scratch(feeds: list[list[dict[str, Any]]]) -> tuple[list[list[dict[str, Any]]], list[dict[str, Any]]]:
    """URLCount computed directly: each epoch's changed counts, and the final counts."""
    total: collections.Counter = collections.Counter()
    outs = []
    for recs in feeds:
        total.update(r["url"] for r in recs)
        seen = {r["url"] for r in recs}
        outs.append(jsonl("\n".join(json.dumps({"url": u, "count": total[u]}) for u in seen)))
    return outs, jsonl("\n".join(json.dumps({"url": u, "count": c}) for u, c in total.items()))


def _home(kind: str, tmp_path: Path, env: dict[str, str]) -> str:
    if kind == "local":
        return str(tmp_path / "home-cluster")
    return f"s3://{env['CBP_S3_BUCKET']}/test-{uuid.uuid4().hex[:8]}/url_count"


@pytest.mark.parametrize("home_kind", ["local", "s3"])
def test_url_count_on_cluster(cluster, cli, tmp_path, home_kind):
    """flows/url_count.yaml through the CLI on the cluster (its commands in the shared driver) equals the
    from-scratch counts (the same feeds in local mode are tests/test_url_count.py's), and its tasks ran in
    the executors of both workers."""
    feeds = increments(2, 1500)
    before = task_counts()
    t0 = time.monotonic()
    home = _home(home_kind, tmp_path, cluster)
    outs, state = from_scratch(feeds)
    on_cluster = pipeline_run(cli, URLS, home, feeds, tmp_path)
    if home_kind == "s3":  # Spark SQL through the Delta connector and S3A, on the cluster, equals cbp state
        assert jsonl(cli("sql", URLS, "SELECT url, count FROM url_count", "--home", home)) == state
    took = time.monotonic() - t0
    ran = finished_tasks(before)
    archive, mapped = executors_archive(cli.pid)  # executors start from the driver's class archive, if it has one
    assert archive is None or (len(mapped) == 2 and all(mapped.values())), (archive, mapped)
    assert on_cluster["outputs"] == outs
    assert on_cluster["state"] == state
    st = on_cluster["status"]["stages"]["url_count"]
    assert st["epochs"] == 2 and st["runnable"] is False
    assert ran[1] > 0 and ran[2] > 0, f"tasks per worker: {ran}"
    print(f"cluster: 2 feeds + runs in {took:.1f}s; tasks finished per worker {ran}")


def test_clustering_with_multicast_on_cluster(cluster, cli, tmp_path):
    """flows/clustering.yaml (RouteBy functions, multicast bindings; its small epochs routed by a Spark
    job on the executors, then by the driver) on the cluster with its home on S3 (the commands in the
    shared driver): after each increment every node's coefficient equals networkx's."""
    import networkx as nx

    rnd = random.Random(11)
    nodes = [f"n{i}" for i in range(40)]
    yaml = str(ROOT / "flows" / "clustering.yaml")
    home = f"s3://{cluster['CBP_S3_BUCKET']}/test-{uuid.uuid4().hex[:8]}/clustering"
    g = nx.Graph()
    for step in range(2):
        edges = [(rnd.choice(nodes), rnd.choice(nodes)) for _ in range(120)]
        g.add_edges_from((a, b) for a, b in edges if a != b)
        feed = write_jsonl(tmp_path / f"e{step}.jsonl", [{"src": a, "dst": b} for a, b in edges])
        cli("feed", yaml, "edges", feed, "--home", home)
        cli("run", yaml, "--home", home, "--quiet")
        got = {r["node"]: r["coefficient"] for r in jsonl(cli("state", yaml, "clustering", "--home", home))}
        want = nx.clustering(g)
        assert set(got) == set(want) and all(abs(got[v] - want[v]) <= 1e-9 for v in want), step


# ============================================================== locality: partition p stays on its executor
# (branch 'locality'; cbp.engine.driver.locality) One driver process runs several epochs, as a long-lived
# `cbp run` or Airflow worker would, so the executors and their state caches live across epochs.
def test_partition_stays_on_its_executor(cli, tmp_path):
    """3 epochs of url_count in one driver on the cluster (the shared one): from epoch 2 on, every partition
    runs on the executor that ran it before; both executors are used; the last epoch reads state from the
    cache. Where each epoch ran is what ``cbp status --json`` reports of it (the epoch's history entry)."""
    feeds = [[{"url": f"http://h{i % 7}.example/p{i}"} for i in range(2000)]] + increments(2, 400, seed=11)
    feeds[1] += [{"url": f"http://h{i % 7}.example/p{i}"} for i in range(0, 2000, 5)]
    feeds[2] += [{"url": f"http://h{i % 7}.example/p{i}"} for i in range(1, 2000, 5)]  # keys of epoch 1's files
    home = str(tmp_path / "home")
    reports = []
    for n, recs in enumerate(feeds):
        cli("feed", URLS, "urls", write_jsonl(tmp_path / f"feed{n}.jsonl", recs), "--home", home)
        cli("run", URLS, "--home", home, "--quiet")
        reports.append(json.loads(cli("status", URLS, "--home", home, "--json"))["stages"]["url_count"]["last_epoch"])
    assert [x["epoch"] for x in reports] == [1, 2, 3]
    maps = [x["executors"] for x in reports]
    print("partition -> executor per epoch:", maps, "hit rates:", [x["cache_hit_rate"] for x in reports])
    assert all(set(m) == {"0", "1", "2", "3"} for m in maps)
    assert len(set(maps[0].values())) == 2 and not any(v.startswith("driver@") for v in maps[0].values())
    assert maps[1] == maps[2]  # stable from epoch 2 on (Spark places epoch 1; cbp evens it out for epoch 2)
    assert sorted(list(maps[1].values()).count(e) for e in set(maps[1].values())) == [2, 2]
    assert reports[2]["cache_lookups"] > 0 and reports[2]["cache_hit_rate"] > 0


SLOW_YAML = """
pipeline: slow_count
flows:
  words:  {external: true, schema: {w: string}}
  placed: {schema: {w: string, where: string}}
stages:
  count:
    translator: slow_count:count
    partitions: 4
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
    outputs: [placed]
    params: {marks: MARKS, sleep: 0.4}
"""
SLOW_MODULE = """
import os
import time

from slow_helper import add  # a sibling module: must reach the executors too


def count(key, state, words, out):
    with open(os.path.join(out.params["marks"], f"{os.getpid()}-{key}"), "w") as f:
        f.write(os.getcwd())  # the Python worker's directory: state/cluster/work-N/<app>/<executor>
    time.sleep(out.params["sleep"])
    prev = next(state, None)
    out.state.write({"w": key, "n": add(sum(1 for _ in words), prev["n"] if prev else 0)})
    out.placed.write({"w": key, "where": os.getcwd()})
"""


def _slow_flow(tmp_path: Path) -> tuple[str, Path]:
    """A stage that sleeps per key and records where it ran, in a directory executors cannot import from."""
    d = tmp_path / "flow"
    d.mkdir()
    marks = tmp_path / "marks"
    marks.mkdir()
    (d / "slow_count.py").write_text(textwrap.dedent(SLOW_MODULE))
    (d / "slow_helper.py").write_text("def add(a, b):\n    return a + b\n")
    (d / "slow.yaml").write_text(textwrap.dedent(SLOW_YAML).replace("MARKS", str(marks)))
    return str(d / "slow.yaml"), marks


def _wait_for_mark(marks: Path, worker: int, cli: CliSession, timeout: float = 300) -> None:
    """Wait until a translator call runs in an executor of ``worker``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(f"/work-{worker}/" in m.read_text() for m in marks.iterdir() if m.stat().st_size):
            return
        assert cli.alive(), f"the driver ended before a task ran on worker-{worker}"
        time.sleep(0.1)
    raise AssertionError(f"no task ran on worker-{worker} within {timeout}s")


def _process_groups() -> set[int]:
    """The process groups ``scripts/cluster up`` started (each component leads its own)."""
    return {int(p.read_text()) for p in STATE.glob("*.pid")}


def listeners(driver_pid: int) -> list[tuple[str, str]]:
    """Listening TCP sockets (address, process) of the cluster's processes, their executors and Python
    workers, and the driver ``driver_pid`` with its children (its JVM), from ``ss -ltnpH``."""
    groups, parents = _process_groups(), {}
    ours = {driver_pid}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            f = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(stat.parent.name)
        parents[pid] = int(f[1])
        if int(f[2]) in groups:
            ours.add(pid)
    for pid in parents:  # the driver's descendants
        p = pid
        while p > 1 and p not in ours and p in parents:
            p = parents[p]
        if p == driver_pid:
            ours.add(pid)
    found = []
    for line in subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout.splitlines():
        cols = line.split()
        pids = {int(x) for x in re.findall(r"pid=(\d+)", line)}
        if pids & ours:
            found.append((cols[3], cols[-1]))
    return found


def _cmdline(pid: int | str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def executors_archive(driver_pid: int) -> tuple[str | None, dict[int, bool]]:
    """The class archive the Spark JVM of the driver process ``driver_pid`` started from (``-XX:SharedArchiveFile``,
    None when it started without), and for each executor JVM of the cluster's workers whether it has mapped that
    file (cbp.engine.driver.session.executor_archive)."""
    groups, archive, executors = _process_groups(), None, []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            f = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid, cmd = int(stat.parent.name), _cmdline(stat.parent.name)
        if int(f[1]) == driver_pid and "SparkSubmit" in cmd:
            found = re.search(r"-XX:SharedArchiveFile=(\S+)", cmd)
            archive = found.group(1) if found else None
        elif int(f[2]) in groups and "CoarseGrainedExecutorBackend" in cmd:
            executors.append(pid)
    if archive is None:
        return None, {}
    mapped = {}
    for pid in executors:
        try:
            mapped[pid] = archive in Path(f"/proc/{pid}/maps").read_text()
        except OSError:
            continue
    return archive, mapped


def _kill_worker(worker: int) -> int:
    """SIGKILL worker ``worker``'s process group: the worker JVM, its executor JVM and their Python workers."""
    pid = int((STATE / f"worker-{worker}.pid").read_text())
    os.killpg(pid, signal.SIGKILL)
    return pid


def test_worker_killed_mid_epoch(cluster, cli, spark, tmp_path):
    """SIGKILL a worker and its executor while the epoch's tasks run (``cbp run`` in the shared driver):
    Spark reruns them on the other worker and the epoch's results equal an uninterrupted run's (local mode,
    in this process) and the from-scratch counts; then the worker is brought back."""
    yaml, marks = _slow_flow(tmp_path)
    words = [{"w": f"w{i % 40}"} for i in range(120)]
    home = str(tmp_path / "home-killed")
    cli("feed", yaml, "words", write_jsonl(tmp_path / "words.jsonl", words), "--home", home)
    cli.submit("run", yaml, "--home", home)
    run = None
    try:
        _wait_for_mark(marks, 1, cli)
        listening = listeners(cli.pid)
        _kill_worker(1)
        killed_at = time.monotonic()
        run = cli.answer("run", yaml, "--home", home)
        took = time.monotonic() - killed_at
    finally:
        if run is None:  # the run's answer is still to come: no later test may read it as its own
            end_shared_driver()
        restored = _script("up")
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert restored.returncode == 0 and "worker-1: started" in restored.stdout, restored.stdout + restored.stderr
    where = jsonl(cli("output", yaml, "placed", "--home", home))
    state = jsonl(cli("state", yaml, "count", "--home", home))
    expected = jsonl(
        "\n".join(json.dumps({"w": w, "n": n}) for w, n in collections.Counter(r["w"] for r in words).items())
    )
    assert state == expected
    placed = {r["w"]: r["where"] for r in where}
    assert len(placed) == len(where) == 40
    called_on_1 = {m.name.split("-", 1)[1] for m in marks.iterdir() if "/work-1/" in m.read_text()}
    moved = {k for k in called_on_1 if "/work-2/" in placed[k]}
    assert moved, f"no key called on worker-1 was re-run on worker-2: {placed}"
    reference = _uninterrupted(spark, tmp_path, yaml, words)
    assert state == reference
    assert listening and all(addr.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:")) for addr, _ in listening), listening
    print(
        f"worker-1 killed; cbp run ended {took:.1f}s later; {len(moved)} keys re-run on worker-2; "
        f"{len(listening)} listening sockets of the cluster and the driver, all on 127.0.0.1"
    )


def _uninterrupted(spark: Any, tmp_path: Path, yaml: str, words: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same epoch in local mode, without a kill (and without the sleeps), in this process on the test
    session's SparkSession (the same feed file, the same translator shipped to its Python workers)."""
    import cbp as cbp_api

    fast = tmp_path / "flow" / "fast.yaml"
    fast.write_text(Path(yaml).read_text().replace("sleep: 0.4", "sleep: 0"))
    p = cbp_api.load(str(fast), home=str(tmp_path / "home-local"), spark=spark)
    p.feed("words", str(tmp_path / "words.jsonl"))
    p.run()
    return jsonl("\n".join(json.dumps(r) for r in p.state("count")))


def test_translator_and_helpers_ship_by_value(tmp_path):
    """Without a cluster: a translator and the helper module it imports from beside the YAML are
    pickled by value, so a process that cannot import them (an executor) still runs them."""
    from pyspark import cloudpickle

    from cbp.spec.resolve import resolve_callable

    (tmp_path / "ship_helper_x1.py").write_text("def add(a, b):\n    return a + b\n")
    (tmp_path / "ship_mod_x1.py").write_text("from ship_helper_x1 import add\n\ndef fn(x):\n    return add(x, 1)\n")
    fn = resolve_callable("ship_mod_x1:fn", str(tmp_path))
    blob = tmp_path / "fn.pickle"
    blob.write_bytes(cloudpickle.dumps(fn))
    code = f"import pickle, sys; print(pickle.loads(open({str(blob)!r}, 'rb').read())(41))"
    r = subprocess.run(
        [sys.executable, "-c", code],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert r.returncode == 0 and r.stdout.strip() == "42", r.stderr
