"""Crash-test harness: run a pipeline through the ``cbp`` command line, kill it with SIGKILL at
chosen moments (see :mod:`cbp.faults`), restart it, and compare everything it produced with an
uninterrupted run and with a from-scratch computation (networkx).

Used by ``tests/test_crash.py`` (short, in CI) and ``bench/crash_recovery.py`` (long).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import random
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
from deltalake import DeltaTable

import cbp
from cbp.engine.task.bipindex import latest_rows

YAML = Path(__file__).resolve().parent / "crash" / "components.yaml"
STAGES = ("parse", "cc", "size")
STATEFUL = ("cc", "size")

#: Kill points spread over every phase of a feed, a stage epoch, a garbage collection and a
#: recovery, in groups that must hit one operation in turn: (operation, [CBP_FAULT, ...]).
#: ``<point>:<n>`` means the n-th time the process reaches the point (see cbp.faults).
KILLS: list[tuple[str, list[str]]] = [
    ("feed", ["kill:feed:written:1"]),  # increment files written, nothing pending yet
    ("feed", ["kill:feed:pending:1"]),  # pending record written, no Delta commit
    (
        "feed",
        [
            "kill:feed:committed:0:1",  # increment committed to Delta, snapshot not written
            "kill:recover:snapshot:1",
        ],
    ),  # ... killed again while recovering it (a feed recovers too)
    ("feed", ["kill:feed:snapshot:1"]),  # snapshot written, pending record not yet cleared
    (
        "run",
        [
            "kill:epoch:intention:1",  # intention written, Spark job not started (parse)
            "kill-driver:task:state-written:1",  # inside the Spark job: a task wrote its state files
            "kill:epoch:ran:2",  # Spark job done, nothing pending
            "kill:gc:pending:1",
        ],
    ),  # all epochs done; garbage collection pending
    (
        "run",
        [
            "kill:epoch:pending:3",  # pending written, no Delta commit
            "kill:recover:committed:0:1",  # killed again while recovering: first commit redone
            "kill:recover:snapshot:1",  # ... and again after the recovered snapshot
            "kill:epoch:committed:0:2",  # state committed, outputs not
            "kill:gc:committed:0:1",
        ],
    ),  # garbage collection half committed
    (
        "run",
        [
            "kill:epoch:committed:1:2",  # state + first output committed
            "kill:epoch:committed:2:1",  # state + both outputs of cc committed, no snapshot
            "kill-driver:task:outputs-written:1",  # inside the Spark job: outputs written
            "kill:epoch:snapshot:6",  # snapshot written, intention/pending not cleared (the run's last epoch)
            "kill:gc:snapshot:1",
        ],
    ),  # garbage collection committed, not cleared
    (
        "run",
        [
            "epochs:3",  # not a kill: the run's first 3 epochs, in the test's process (see run_victim)
            "kill:epoch:intention:1",  # a later epoch of the cycle (the run's 4th), before its Spark job
            "kill:epoch:ran:1",  # an interrupted epoch ...
            "kill:epoch:ran:1",
        ],
    ),  # ... killed again while it is re-run
]


#: The third group kills its run's last epoch (``snapshot:6``: seed ``SHALLOW[0]``'s third run makes 10 epochs, of
#: which the process killed there runs the last 6) right before the garbage collection's kill, so that the process
#: killed in the collection only finishes that epoch's commit and collects: it starts no Spark driver (about 10
#: CPU s). The other groups' collections cannot do without: the epoch before them runs again (``ran``), or is killed
#: at a Delta commit, which a run's last epoch here (no label moves: nothing to commit) does not make.


#: Compaction's kill points (:mod:`cbp.controller.compaction`), each on a run of its own: with a retention of one
#: epoch and ``compact_files=2`` (:func:`compacting_home`), every run that commits epochs trims and then compacts
#: the flow nobody reads (``sizes``).
COMPACT_KILLS: list[tuple[str, list[str]]] = [
    ("run", ["kill:compact:written:1"]),  # the consolidated file written, named by no Delta version
    ("run", ["kill:compact:pending:1"]),  # the pending record written, no Delta commit
    ("run", ["kill:compact:committed:0:1"]),  # removes and the add committed, the snapshot not written
    ("run", ["kill:compact:snapshot:1"]),  # the snapshot written, the pending record not cleared
]


#: Seeds of :func:`increments` (4 increments, 30 nodes, 12 edges each) whose labels settle in few rounds of cc's
#: loopback: every epoch is a Spark job in the test's process or in each killed ``cbp run`` before its kill point.
#: Over the 4 runs, by a pure-Python replay of the translators (an epoch of parse, then cc and size until no label
#: moves): seed 60 makes 8, 10, 10, 6 epochs and seed 106 10, 8, 8, 6 (seeds 11, 13 and 3: 51, 44 and 48 epochs in
#: all; the median of seeds 1-299: 44). Both still join 28-29 of the 30 nodes into one component through the
#: runs, and every kill point of :data:`KILLS` is reached (the harness fails a fault that is not).
SHALLOW = (60, 106)


def increments(seed: int = 7, n: int = 6, nodes: int = 60, edges: int = 18) -> list[list[dict[str, str]]]:
    """``n`` increments of random edges ("a b" lines) over ``nodes`` nodes."""
    rng = random.Random(seed)
    return [[{"text": f"{rng.randrange(nodes)} {rng.randrange(nodes)}"} for _ in range(edges)] for _ in range(n)]


def operations(incs: list[list[dict[str, str]]]) -> list[tuple[str, int]]:
    """feed 1, run, feed 2, run, ...: what a user (or Airflow) does."""
    ops: list[tuple[str, int]] = []
    for i in range(len(incs)):
        ops += [("feed", i), ("run", i)]
    return ops


#: ``cbp`` in a process of its own whose Spark driver is the test process's JVM (:func:`cli`'s ``on_test_jvm``):
#: pyspark's gateway reached by PYSPARK_GATEWAY_PORT/SECRET (no JVM started), its SparkContext and default session
#: taken as this process's (``cbp.engine.driver.session.get_spark`` returns the active session), then the command.
_ON_TEST_JVM = """\
import sys

from pyspark import SparkConf, SparkContext
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

gateway = launch_gateway()
jvm = gateway.jvm
jsc = jvm.org.apache.spark.api.java.JavaSparkContext(jvm.org.apache.spark.SparkContext.getOrCreate())
SparkSession(SparkContext(conf=SparkConf(_jconf=jsc.sc().conf()), gateway=gateway, jsc=jsc))

from cbp.cli import main

sys.exit(main(sys.argv[1:]))
"""


def _test_jvm() -> dict[str, str] | None:
    """How a child reaches this process's classic Spark driver JVM (its py4j gateway), or None (no session yet, or a
    Spark Connect one)."""
    try:
        from pyspark import SparkContext
    except ImportError:  # pyspark-client (the suite's Connect mode): no py4j
        return None
    sc = SparkContext._active_spark_context
    if sc is None or sc._gateway is None:
        return None
    params = sc._gateway.gateway_parameters
    return {"PYSPARK_GATEWAY_PORT": str(params.port), "PYSPARK_GATEWAY_SECRET": params.auth_token}


def cli(
    args: list[str],
    home: str,
    fault: str | None = None,
    timeout: float = 900,
    yaml: Path | None = None,
    on_test_jvm: bool = False,
) -> subprocess.CompletedProcess[str]:
    """``cbp <command> components.yaml --home <home> <args...>`` in a new process (``yaml``: another pipeline).

    ``fault`` is a ``CBP_FAULT`` value, or ``after:<seconds>`` for a SIGKILL from outside after
    that long (if the process is still running then). With ``on_test_jvm``, a ``kill:...`` fault (a point of the
    driver, after every Spark job the process started has ended) and a classic session in this process, the new
    process's Spark driver is this process's JVM, which outlives it (:data:`_ON_TEST_JVM`, :func:`run_victim`).
    """
    env = dict(os.environ)
    env.pop("CBP_FAULT", None)
    if fault and not fault.startswith("after:"):
        env["CBP_FAULT"] = fault
    env.setdefault("CBP_SPARK_MASTER", "local[2,2]")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "cbp.cli", args[0], str(yaml or YAML), "--home", home, *args[1:]]
    gateway = _test_jvm() if on_test_jvm and (fault or "").startswith("kill:") else None
    if gateway is not None:
        env.update(gateway)
        cmd[1:3] = ["-c", _ON_TEST_JVM]
    if not (fault and fault.startswith("after:")):
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=float(fault.split(":", 1)[1]))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@dataclass
class Attempt:
    op: str
    index: int
    fault: str | None
    returncode: int
    seconds: float
    stderr: str
    stdout: str


@dataclass
class VictimLog:
    attempts: list[Attempt] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)  # faults never reached (strict=False only)

    def killed(self) -> list[Attempt]:
        return [a for a in self.attempts if a.fault]


def run_victim(
    home: str,
    incs: list[list[dict[str, str]]],
    plan: dict[int, list[str]],
    workdir: Path,
    status_after_kill: bool = False,
    strict: bool = True,
    done: int = 0,
    recover_here: bool = False,
    on_test_jvm: bool = False,
) -> VictimLog:
    """Do the operations through the CLI; before operation ``i`` succeeds, kill it once per fault in ``plan[i]``.

    With ``recover_here`` the attempt without a fault that ends an operation (after its kills: the recovery)
    runs in this process (:func:`cli_here`), not in a ``cbp`` process of its own.

    The first ``done`` operations were done already, without faults (in the test's process: cheaper than a
    ``cbp`` process with its own Spark driver for each, see :func:`run_reference`'s ``count``).

    A fault ``epochs:<n>`` is no kill: the run's first ``n`` epochs, in this process (``cbp run --max-epochs``,
    :func:`cli_here`), so that the next kill (``kill:epoch:intention:1``, before the epoch's Spark job) finds the
    run's later epoch first and its process never starts a Spark driver (about 10 CPU s each).

    With ``on_test_jvm`` a ``cbp run`` killed at a point of the driver (``kill:...``) is a process of its own as
    before, SIGKILLed there, but its Spark driver is the test process's JVM (:func:`cli`), not one it starts (about
    10 CPU s): a kill at a driver's point follows the end of every Spark job the process started (none runs across
    a point), and everything the process made durable it wrote itself or its jobs' tasks wrote, so the JVM that
    outlives it holds nothing of the crash. A kill inside a Spark job (``kill-driver:task:...``, the driver killed
    while the job's tasks run) keeps a driver JVM of its own, which dies with it, as on a real crash.

    Every faulted attempt must be killed (SIGKILL): a fault that is not reached fails the harness,
    unless ``strict`` is off (then it and the operation's later faults are listed in ``missed``).
    """
    log = VictimLog()
    for i, (op, k) in enumerate(operations(incs)):
        if i < done:
            assert not plan.get(i), f"operation {i} has faults but was done already"
            continue
        if op == "feed":
            src = workdir / f"inc{k}.jsonl"
            src.write_text("".join(json.dumps(r) + "\n" for r in incs[k]))
            args = ["feed", "lines", str(src), "--id", f"inc{k}"]
        else:
            args = ["run"]
        for fault in plan.get(i, []) + [None]:  # type: ignore[operator]
            if fault and fault.startswith("epochs:"):  # the first epochs of a run, never killed: in this process
                r = cli_here([*args, "--max-epochs", fault.split(":")[1]], home)
                assert r.returncode == 0, f"operation {i} ({op}) failed: {r.stderr[-3000:]}"
                continue
            t0 = time.perf_counter()
            shared = on_test_jvm and op == "run"  # a feed starts no Spark driver
            r = cli_here(args, home) if recover_here and fault is None else cli(args, home, fault, on_test_jvm=shared)
            a = Attempt(op, i, fault, r.returncode, time.perf_counter() - t0, r.stderr, r.stdout)
            log.attempts.append(a)
            if fault and fault.startswith("after:"):
                if r.returncode not in (0, -9):
                    raise AssertionError(f"operation {i} ({op}) failed (exit {r.returncode}):\n{r.stderr[-3000:]}")
                a.fault = fault if r.returncode == -9 else None  # it may have finished before the timer
                if r.returncode == 0:
                    break
                continue
            if fault and r.returncode == 0 and not strict:  # the point was not reached: the operation is done
                a.fault = None
                log.missed += plan[i][plan[i].index(fault) :]
                break
            if fault and r.returncode != -9:
                raise AssertionError(
                    f"operation {i} ({op}) with CBP_FAULT={fault} was not killed (exit "
                    f"{r.returncode}):\n{r.stderr[-3000:]}"
                )
            if not fault and r.returncode != 0:
                raise AssertionError(
                    f"operation {i} ({op}) failed after recovery (exit {r.returncode}):\n{r.stderr[-3000:]}"
                )
            if fault and status_after_kill:
                a.stdout += "\n[status]\n" + status_text(home)
    return log


def cli_here(args: list[str], home: str, yaml: Path | None = None) -> subprocess.CompletedProcess[str]:
    """:func:`cli` without a fault, in this process: the command's own code (``cbp.cli.main``) on the test
    session's SparkSession, reading the home from its files as a restarted process would, and its exit code,
    stdout and stderr (cbp's messages: ``recovered: ...``). A ``cbp run`` process starts a Spark driver of its
    own (about 9 CPU s); a kill needs one, the recovery after it does not."""
    from cbp.cli import main

    cmd = ["cbp", args[0], str(yaml or YAML), "--home", home, *args[1:]]
    env = os.environ.pop("CBP_FAULT", None)
    log, root = logging.getLogger("cbp"), logging.getLogger()  # the command sets them up for a terminal
    handlers, level, propagate, root_level = list(log.handlers), log.level, log.propagate, root.level
    log.handlers[:] = [h for h in handlers if not getattr(h, "_cbp_cli", False)]  # its own, on this stderr
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(cmd[1:])
    finally:
        log.handlers[:] = handlers
        log.setLevel(level)
        log.propagate = propagate
        root.setLevel(root_level)
        if env is not None:
            os.environ["CBP_FAULT"] = env
    return subprocess.CompletedProcess(cmd, code, out.getvalue(), err.getvalue())


def status_text(home: str) -> str:
    """What ``cbp status`` prints for the home: the command's own code (``cbp.cli.main``) in this process,
    which reads the home as a new process would (status starts no Spark; a process of its own for each of
    the sweep's 22 kills cost about a second of CPU and two of wall time each)."""
    from cbp.cli import main

    log = logging.getLogger("cbp")  # the command sets up its logger for a terminal: put it back as it was
    handlers, level, propagate = list(log.handlers), log.level, log.propagate
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            main(["status", str(YAML), "--home", home])
    finally:
        log.handlers[:] = handlers
        log.setLevel(level)
        log.propagate = propagate
    return out.getvalue()


def run_reference(home: str, incs: list[list[dict[str, str]]], spark: Any = None, count: int | None = None) -> None:
    """The same operations, uninterrupted, in this process (the first ``count`` increments' feeds and runs:
    a victim's prefix without faults, then :func:`run_victim` with ``done=2 * count``)."""
    p = cbp.load(YAML, home=home, spark=spark)
    for k, inc in enumerate(incs[:count]):
        p.feed("lines", inc, feed_id=f"inc{k}")
        p.run()


def _canon(records: list[dict[str, Any]]) -> list[str]:
    return sorted(json.dumps(r, sort_keys=True) for r in records)


def results(home: str, spark: Any = None) -> dict[str, Any]:
    """Everything a run produced: epochs with their inputs and outputs, every output increment's
    records, the state through cbp and through a plain Delta reader, and leftovers of recovery."""
    p = cbp.load(YAML, home=home, spark=spark)
    out: dict[str, Any] = {"epochs": {}, "outputs": {}, "state": {}, "delta_state": {}}
    for s in STAGES:
        n = p.epochs(s)
        records = {e: p.epoch_record(s, e) for e in range(1, n + 1)}
        out["epochs"][s] = {str(e): {"inputs": r.inputs, "outputs": r.outputs} for e, r in records.items()}
        for e in range(1, n + 1):
            for f in p.spec.stages[s].outputs:
                out["outputs"][f"{f}@{s}:{e}"] = _canon(p.output(f, epoch=e))
    for s in STATEFUL:
        out["state"][s] = _canon(p.state(s))
        table = DeltaTable(
            os.path.join(home, "stages", s, "state"), storage_options=p.home.storage_options
        )  # an s3:// home too
        rows = latest_rows(table.to_pyarrow_table())
        fields = list(p.spec.stages[s].state_schema.fields)  # type: ignore[union-attr]
        out["delta_state"][s] = _canon(rows.select(fields).to_pylist())
    out["leftovers"] = {"pending": p.home.pending() is not None, "intentions": sorted(p.home.intentions())}
    return out


def compacting_home(home: str, spark: Any = None) -> None:
    """A new home that trims all but the last epoch and compacts ``sizes`` once 2 of its files are out of reach."""
    cbp.load(YAML, home=home, spark=spark).set_retention(epochs=1, compact_files=2)


def compacted_results(home: str, spark: Any = None) -> dict[str, Any]:
    """What a compacting home produced that retention keeps: the epochs run, the state (through cbp and a
    plain Delta reader), the ``sizes`` table as any Delta reader sees it (``_diff`` summed per record), the
    compacted files in it, and leftovers of recovery."""
    p = cbp.load(YAML, home=home, spark=spark)
    out: dict[str, Any] = {"epochs": {s: p.epochs(s) for s in STAGES}, "state": {}, "delta_state": {}}
    for s in STATEFUL:
        out["state"][s] = _canon(p.state(s))
        rows = latest_rows(DeltaTable(os.path.join(home, "stages", s, "state")).to_pyarrow_table())
        out["delta_state"][s] = _canon(rows.select(list(p.spec.stages[s].state_schema.fields)).to_pylist())  # type: ignore[union-attr]
    sizes = DeltaTable(os.path.join(home, "flows", "sizes"))
    summed: dict[tuple[int, int], int] = {}
    for r in sizes.to_pyarrow_table(columns=["label", "size", "_diff"]).to_pylist():
        key = (r["label"], r["size"])
        summed[key] = summed.get(key, 0) + (1 if r["_diff"] is None else r["_diff"])
    out["sizes"] = _canon([{"label": k[0], "size": k[1]} for k, d in summed.items() for _ in range(d)])
    out["compacted_files"] = sum(1 for f in sizes.file_uris() if f.rsplit("/", 1)[-1].startswith("c"))
    out["leftovers"] = {"pending": p.home.pending() is not None, "intentions": sorted(p.home.intentions())}
    return out


def expected(incs: list[list[dict[str, str]]]) -> dict[str, list[str]]:
    """From scratch with networkx: each node's label is its component's smallest node; sizes per label."""
    g = nx.Graph()
    for inc in incs:
        for r in inc:
            a, b = map(int, r["text"].split())
            g.add_edge(a, b)
    cc, size = [], []
    for comp in nx.connected_components(g):
        label = min(comp)
        size.append({"label": label, "size": len(comp)})
        cc += [{"node": n, "label": label, "nbrs": sorted(set(g.neighbors(n)) - {n})} for n in comp]
    return {"cc": _canon(cc), "size": _canon(size)}


def plan_chained(ops: int, kills: list[tuple[str, list[str]]], spread: bool = True) -> dict[int, list[str]]:
    """Put the groups of kills on the operations of their kind, in order: spread evenly, or on the first ones."""
    slots = {"feed": [i for i in range(ops) if i % 2 == 0], "run": [i for i in range(ops) if i % 2 == 1]}
    groups = {kind: [g for k, g in kills if k == kind] for kind in slots}
    plan: dict[int, list[str]] = {}
    for kind, gs in groups.items():
        for n, g in enumerate(gs):
            i = slots[kind][n * len(slots[kind]) // len(gs) if spread else min(n, len(slots[kind]) - 1)]
            plan.setdefault(i, []).extend(g)
    return plan


def kill_count(kills: list[tuple[str, list[str]]]) -> int:
    """The kills of the groups (``epochs:<n>``, epochs run in the test's process, is none)."""
    return sum(1 for _, g in kills for f in g if not f.startswith("epochs:"))


#: A word count whose translator waits on a gate file: the epoch's Spark job is provably in
#: progress from the moment ``started`` appears (next to the module) until ``go`` is made; it
#: makes ``finished`` once through. (The two minutes are a guard for a test that never opens
#: the gate, not a bound on anything.)
GATED_COUNT = """
import os, time

def count(key, state, words, out):
    here = os.path.dirname(__file__)
    open(os.path.join(here, "started"), "a").close()  # the epoch's job is running now
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(here, "go")) and time.time() < deadline:
        time.sleep(0.05)
    open(os.path.join(here, "finished"), "a").close()
    prev = next(state, None)
    out.state.write({"w": key, "n": sum(1 for _ in words) + (prev["n"] if prev else 0)})
"""


class Gate:
    """The files of :data:`GATED_COUNT` next to a pipeline YAML."""

    def __init__(self, yaml: Path) -> None:
        self.started, self.go, self.finished = (yaml.parent / n for n in ("started", "go", "finished"))

    def close(self) -> None:
        """Make the next job wait at the gate."""
        for p in (self.started, self.go, self.finished):
            p.unlink(missing_ok=True)

    def wait_started(self, alive: Any) -> None:
        """Return once a job waits at the gate; ``alive()`` says whether the runner still runs (a
        runner that ended first fails the test instead of waiting for ever)."""
        while not self.started.exists():
            assert alive(), "the runner ended before its epoch's job started"
            time.sleep(0.05)

    def in_progress(self) -> bool:
        """Whether a job waits at the gate (started, not through)."""
        return self.started.exists() and not self.finished.exists()


def counts(feeds: list[list[dict[str, str]]]) -> dict[str, int]:
    """The word counts of ``feeds`` computed from scratch."""
    out: dict[str, int] = {}
    for feed in feeds:
        for r in feed:
            out[r["w"]] = out.get(r["w"], 0) + 1
    return out


def cli_process(
    args: list[str], home: str, yaml: Path, fault: str | None = None, on_test_jvm: bool = False
) -> dict[str, Any]:
    """``subprocess.Popen`` keyword arguments for ``cbp <command> <yaml> --home <home> <args...>``
    in a new session (so that the process and its JVM can be killed as one group). ``on_test_jvm``: as
    :func:`cli`'s (a ``kill:...`` fault only: a process killed from outside during its job keeps its own JVM)."""
    env = dict(os.environ)
    env.pop("CBP_FAULT", None)
    if fault:
        env["CBP_FAULT"] = fault
    env.setdefault("CBP_SPARK_MASTER", "local[2,2]")
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "cbp.cli", args[0], str(yaml), "--home", home, *args[1:]]
    gateway = _test_jvm() if on_test_jvm and (fault or "").startswith("kill:") else None
    if gateway is not None:
        env.update(gateway)
        cmd[1:3] = ["-c", _ON_TEST_JVM]
    return {
        "args": cmd,
        "env": env,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.PIPE,
        "text": True,
        "start_new_session": True,
    }
