"""Shared fixtures: one SparkSession for the whole test session, and small pipeline builders."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOWS = ROOT / "flows"

# Airflow (imported by cbp.airflow.triggers / cbp.airflow.dagfactory, also while collecting doctests) reads its
# configuration once, at import: point it at a throw-away home before anything imports it, so
# tests never touch a user's ~/airflow. tests/test_airflow.py creates the database there.
AIRFLOW_HOME = tempfile.mkdtemp(prefix="cbp-test-airflow-")
atexit.register(shutil.rmtree, AIRFLOW_HOME, True)  # the session's own: nothing left in /tmp
os.environ["AIRFLOW_HOME"] = AIRFLOW_HOME
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(ROOT / "dags")
os.environ["AIRFLOW__CORE__UNIT_TEST_MODE"] = "False"
os.environ["CBP_DAGS_CONFIG"] = os.path.join(AIRFLOW_HOME, "cbp.yaml")  # written by tests/test_airflow.py

# The suite's Spark drivers (this process's session and every ``cbp`` subprocess) are short-lived and run
# small epochs: the JVM's C1 compiler alone starts them with about a quarter less CPU than C1 + C2 (a tiny
# ``cbp run``: 9.6 -> 7.1 CPU seconds, docs/concepts/test-suite.md). Set it to "" to test with both.
os.environ.setdefault("CBP_DRIVER_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")

# A minimal stateful pipeline (word -> count) for tests that are about cbp, not about the pipeline.
WORD_COUNT = """
pipeline: counter
flows:
  words: {external: true, schema: {w: string}}
stages:
  count:
    translator: MOD:count
    signed: true
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
"""
WORD_COUNT_MODULE = """
import time

SLEEP = 0.0

def count(key, state, words, out):
    prev = next(state, None)
    time.sleep(SLEEP)
    n = sum(r["_diff"] for r in words) + (prev["n"] if prev else 0)
    if n:
        out.state.write({"w": key, "n": n})
"""


#: The Spark Connect server the suite runs against in Connect mode (``bash scripts/test --connect``), else "".
#: Then ``spark`` is a Connect session, and tests marked ``classic`` (what Connect lacks) are deselected.
CONNECT_URL = os.environ.get("CBP_REMOTE") or os.environ.get("SPARK_REMOTE") or ""


@pytest.fixture(scope="session")
def spark():
    """The session's SparkSession: classic (``local[2,2]``), or in Connect mode a Connect session to
    ``CBP_REMOTE`` (``get_spark`` opens one when it is set)."""
    from cbp.engine.driver.session import get_spark, is_connect

    os.environ.setdefault("CBP_SPARK_MASTER", "local[2,2]")  # 2 attempts per task, as in cbp's default
    if CONNECT_URL and os.environ.get("PYTEST_XDIST_WORKER") and ";session_id=" not in CONNECT_URL:
        # xdist workers run at once: each a Connect session of its own (temporary views, settings), not the
        # one cbp's commands share; the cbp processes its tests start inherit it
        os.environ["CBP_REMOTE"] = f"{CONNECT_URL.rstrip('/')}/;session_id={uuid.uuid4()}"
    session = get_spark()
    assert is_connect(session) == bool(CONNECT_URL)
    yield session


@pytest.fixture
def make_pipeline(tmp_path):
    """Write a YAML (and optional translator module) into a temp dir; return the YAML path."""

    counter = {"n": 0}

    def make(yaml_text: str, module: str | None = None, module_name: str | None = None) -> Path:
        counter["n"] += 1
        d = tmp_path / f"p{counter['n']}"
        d.mkdir()
        if module is not None:
            name = module_name or f"mod_{tmp_path.name}_{counter['n']}".replace("-", "_")
            (d / f"{name}.py").write_text(textwrap.dedent(module))
            yaml_text = yaml_text.replace("MOD", name)
            sys.modules.pop(name, None)
        path = d / "pipeline.yaml"
        path.write_text(textwrap.dedent(yaml_text))
        return path

    return make


class Background:
    """Processes and threads a test starts, stopped when the test ends, pass or fail (fixture ``background``).

    proc = background.popen([sys.executable, "-c", "..."], stdout=subprocess.PIPE, text=True)
    t = background.thread(work, stop=lambda: gate.touch())   # ``stop`` unblocks it at teardown
    lease = background.lease(store, "t", ttl=30)             # its renewals stop at teardown
    """

    def __init__(self) -> None:
        self._procs: list[subprocess.Popen] = []
        self._threads: list[tuple[threading.Thread, Callable[[], Any] | None]] = []
        self._leases: list[Any] = []

    def popen(self, *args: Any, **kw: Any) -> subprocess.Popen:
        """``subprocess.Popen(*args, **kw)``, killed (its whole group with ``start_new_session``) at teardown."""
        proc = subprocess.Popen(*args, **kw)
        self._procs.append(proc)
        return proc

    def thread(self, target: Callable[[], Any], *, stop: Callable[[], Any] | None = None) -> threading.Thread:
        """Start ``target`` in a daemon thread; at teardown ``stop()`` is called and the thread joined."""
        t = threading.Thread(target=target, daemon=True)
        self._threads.append((t, stop))
        t.start()
        return t

    def lease(self, *args: Any, **kw: Any) -> Any:
        """A :class:`cbp.storage.lease.Lease` whose renewal thread is stopped at teardown."""
        from cbp.storage.lease import Lease

        lease = Lease(*args, **kw)
        self._leases.append(lease)
        return lease

    def stop(self) -> list[str]:
        """Stop everything; return what would not stop."""
        left = []
        for proc in self._procs:
            if proc.poll() is None:
                try:
                    if os.getpgid(proc.pid) == proc.pid:
                        os.killpg(proc.pid, signal.SIGKILL)
                    else:
                        proc.kill()
                except ProcessLookupError:
                    pass
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                left.append(f"process {proc.pid} {proc.args!r}")
            for f in (proc.stdin, proc.stdout, proc.stderr):
                if f is not None:
                    f.close()
        for lease in self._leases:
            _stop_renewing(lease)
        for t, stop in self._threads:
            if stop is not None:
                stop()
            t.join(60)
            if t.is_alive():
                left.append(f"thread {t.name}")
        return left


def cdf_source(spark, uri: str, columns: str, values: str, dv: bool | None = None) -> None:
    """A Delta table at ``uri`` with change data feed, made by Spark SQL (``columns``: its DDL, ``values``: the
    rows of an ``INSERT ... VALUES``; ``dv``: deletion vectors set on or off, else Delta's default)."""
    props = "delta.enableChangeDataFeed = true"
    if dv is not None:
        props += f", delta.enableDeletionVectors = {str(dv).lower()}"
    spark.sql(f"CREATE TABLE delta.`{uri}` ({columns}) USING delta TBLPROPERTIES ({props})")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES {values}")


def free_port() -> int:
    """A free port for a server a test starts: ``scripts/services.py``'s (below the ephemeral range)."""
    return int(_services().free_port())


def _services() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("cbp_scripts_services", ROOT / "scripts" / "services.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _stop_renewing(lease: Any) -> None:
    """Stop a lease's renewal thread without writing to its store (which may be gone by now)."""
    lease._stop.set()
    t = lease._thread
    if t is not None and t is not threading.current_thread():
        t.join(30)


@pytest.fixture
def background():
    """Start processes and threads through this; they are stopped when the test ends, pass or fail."""
    bg = Background()
    yield bg
    left = bg.stop()
    assert not left, f"still running after the test: {left}"


@pytest.fixture(autouse=True)
def _lease_renewals_stopped(monkeypatch):
    """Whatever a test does, no lease renewal thread it started outlives it (a failed assert inside a
    ``with home.lock()`` still releases; a Lease a test made by hand would not)."""
    from cbp.storage.lease import Lease

    started: list[Any] = []
    original = Lease._start_renewing

    def tracked(self: Any) -> None:
        started.append(self)
        original(self)

    monkeypatch.setattr(Lease, "_start_renewing", tracked)
    yield
    for lease in started:
        _stop_renewing(lease)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its worker's hook of the same name)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Markers, xdist groups and order from tests/tiers.py (doctests of cbp/ match no entry there)."""
    import tiers

    for item in items:
        file, name = item.path.name, item.name
        for mark in sorted(tiers.marks_of(file, name)):
            item.add_marker(getattr(pytest.mark, mark))
        group = tiers.group_of(file, name)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        if group == "cluster":  # under xdist, its module may first wait for the cluster's file lock
            item.add_marker(pytest.mark.timeout(2700))
    items.sort(key=lambda item: tiers.rank(item.path.name, item.name))  # stable: the rest keep their order
    if CONNECT_URL:  # Connect mode: what needs a classic driver is deselected (its marker says why)
        classic = [item for item in items if item.get_closest_marker("classic") is not None]
        if classic:
            config.hook.pytest_deselected(items=classic)
            items[:] = [item for item in items if item.get_closest_marker("classic") is None]


def _release_cluster() -> None:
    """Stop the standalone cluster this process started for the cluster's group, if it holds one."""
    module = sys.modules.get("test_cluster")  # imported only where the group's tests run
    if module is not None:
        module.release_cluster()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """After the last test of the cluster's group (tests/tiers.py GROUPS: its files run one after the other on
    one worker) the cluster it started is stopped: once for both files, not once per module."""
    yield
    import tiers

    def grouped(it: pytest.Item | None) -> bool:
        return it is not None and tiers.GROUPS.get(it.path.name) == "cluster"

    if grouped(item) and not grouped(nextitem):
        _release_cluster()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """A cluster still held (a run cut short, ``-x``) is stopped with the session."""
    _release_cluster()


@pytest.hookimpl(optionalhook=True)  # only with xdist loaded (`-p no:xdist` runs without it)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scheduler, whatever ``--dist`` says: units of work of :func:`tiers.scope_of` (a whole file,
    a test of a file whose tests are independent, or a group that shares the standalone cluster), handed
    out in the order of the collection (costliest first, tests/tiers.py) as workers free up."""
    import tiers
    from xdist.scheduler import LoadScopeScheduling

    class Scheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return tiers.scope_of(nodeid)

    config.option.loadscopereorder = False  # keep tests/tiers.py's order
    return Scheduling(config, log)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``CBP_TEST_TIMES=FILE``, append each test's seconds (setup + call + teardown, one line per
    phase) as it ends, also from xdist workers and from runs cut short: what tests/tiers.py's ``slow``
    is chosen from."""
    times = os.environ.get("CBP_TEST_TIMES")
    if times and "PYTEST_XDIST_WORKER" not in os.environ:  # xdist's controller writes what its workers report
        with open(times, "a") as fh:
            fh.write(f"{report.duration:.2f} {report.when} {report.nodeid}\n")


def pytest_terminal_summary(terminalreporter):  # how many inputs each fuzz target tried
    from fuzzing import TRIED

    if TRIED:
        terminalreporter.section("fuzzing")
        for name, (count, took) in sorted(TRIED.items()):
            terminalreporter.write_line(f"fuzz target {name}: {count} inputs in {took:.0f} s")
