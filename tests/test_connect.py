"""cbp on a Spark Connect server (issue 49): a server started by ``scripts/connect`` for this module,
URLCount over feeds with retractions through the Python API (the small-epoch and the shuffle paths)
and through the CLI with ``--remote``, each compared with pandas from scratch.

A Connect session cannot share a process with the suite's classic one (pyspark's Connect mode is one
flag per process: the classic session's columns become Connect columns), so each test runs its
Connect side in one subprocess that does all of its steps."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pandas as pd
import pytest
from conftest import CONNECT_URL, ROOT, free_port

pytestmark = pytest.mark.connect

#: server URL -> its state directory (``server.pid`` in it), for counting the server's Python daemons.
_STATE: dict[str, str] = {}

FEEDS = [
    [{"url": u} for u in "a b a c d a".split()],
    [{"url": "a", "_diff": -1}, {"url": "e"}, {"url": "b"}],
    [{"url": "c", "_diff": -1}, {"url": "f"}, {"url": "a", "_diff": -1}],
]


def from_scratch(feeds: list[list[dict]]) -> dict[str, int]:
    """URLCount of all the feeds at once, with pandas."""
    df = pd.DataFrame([{"url": r["url"], "d": r.get("_diff", 1)} for f in feeds for r in f])
    sums = df.groupby("url")["d"].sum()
    return {u: int(n) for u, n in sums.items() if n}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A Spark Connect server in front of local[2] on a free port; stopped (with its children) at the end.
    In Connect mode (``scripts/test --connect``, no Java here) the run's own server (its state directory in
    ``CBP_CONNECT_STATE``)."""
    pytest.importorskip("grpc_status", reason="Spark Connect's client needs grpcio-status (pip install cbp[connect])")
    if CONNECT_URL:
        _STATE[CONNECT_URL] = os.environ.get("CBP_CONNECT_STATE", "")
        yield CONNECT_URL
        return
    state = tmp_path_factory.mktemp("connect-state")
    port = free_port()  # below the kernel's ephemeral range: no outgoing connection holds it
    env = {**os.environ, "CBP_CONNECT_STATE": str(state)}
    script = [sys.executable, str(ROOT / "scripts" / "connect.py")]
    try:
        subprocess.run([*script, "start", "--port", str(port)], env=env, check=True, capture_output=True, timeout=180)
        _STATE[f"sc://127.0.0.1:{port}"] = str(state)
        yield f"sc://127.0.0.1:{port}"
    finally:
        subprocess.run([*script, "stop"], env=env, capture_output=True, timeout=60)
        status = subprocess.run([*script, "status"], env=env, capture_output=True, timeout=60)
        assert status.returncode == 1, "the server still runs after 'scripts/connect stop'"


def _daemons(url: str) -> int:
    """How many processes the server at ``url`` has started (its Python daemons: one per session that ran
    Python)."""
    if not _STATE[url]:
        pytest.skip("needs the server's state directory (CBP_CONNECT_STATE) to count its daemons")
    with open(os.path.join(_STATE[url], "server.pid")) as f:
        pid = f.read().strip()
    ps = subprocess.run(["ps", "--ppid", pid, "--no-headers", "-o", "pid"], capture_output=True, text=True)
    return len(ps.stdout.split())


def _as_file(code: str) -> str:
    """``code`` in a script file: run by ``python -c``, a ``pyspark-client`` (no Spark installation) exits at
    its first Connect import (pyspark takes a ``__main__`` without a file for its own doctests)."""
    fd, path = tempfile.mkstemp(suffix=".py", prefix="cbp-connect-side-")
    with os.fdopen(fd, "w") as f:
        f.write(code)
    return path


def _connect_side(code: str, url: str, **env: str) -> dict:
    """Run ``code`` (it prints one JSON line last) in a fresh interpreter with a Connect session ``spark``."""
    head = textwrap.dedent(
        f"""
        import json, sys
        sys.path.insert(0, {str(ROOT / "flows")!r})
        from pyspark.sql import SparkSession
        import cbp
        from cbp.engine.driver.session import is_connect
        spark = SparkSession.builder.remote({url!r}).create()
        assert is_connect(spark)
        FEEDS = {FEEDS!r}
        """
    )
    script = _as_file(head + textwrap.dedent(code) + "\nspark.stop()\n")
    try:
        run = subprocess.run(
            [sys.executable, script],
            env={**os.environ, "PYTHONPATH": str(ROOT), **env},
            capture_output=True,
            text=True,
            timeout=600,
        )
    finally:
        os.unlink(script)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_url_count_through_the_python_api_on_connect(server, tmp_path):
    """Three epochs of one home, their jobs anchored as in front of a cluster (:mod:`cbp.engine.driver.anchor`):
    a small epoch (routed by the driver), then the shuffle path (``CBP_SMALL_EPOCH_RECORDS=0``), then a small
    epoch again; retractions in the last two; ``sql``,
    ``state_df`` and ``flow_df`` (and ``no-delta-jars`` when the server's Delta check says no); a rewind
    and the rerun; an upgrade that rewrites the state (partitions 4 -> 3); then a translator that raises,
    reported by its code; and a tagged job cancelled from another thread."""
    yaml = str(ROOT / "flows" / "url_count.yaml")
    got = _connect_side(
        f"""
        import os
        from cbp.engine.driver import anchor
        anchor._PLACING[spark.session_id] = True  # the anchor's jobs, as in front of a cluster (both paths)
        p = cbp.load({yaml!r}, {str(tmp_path / "home")!r}, spark=spark)
        epochs, states = [], []
        for i, f in enumerate(FEEDS):
            p.feed("urls", f)
            if i == 1:
                os.environ["CBP_SMALL_EPOCH_RECORDS"] = "0"
            epochs += [r.epoch for r in p.run()]
            os.environ.pop("CBP_SMALL_EPOCH_RECORDS", None)
            states.append({{r["url"]: r["count"] for r in p.state("url_count")}})
        counts = [{{r["url"]: r["count"] for r in p.output("counts", e)}} for e in (1, 2, 3)]
        # cbp sql, state_df and flow_df read the state and flows through the server's Delta connector
        sql = {{r["url"]: r["count"] for r in p.sql("SELECT url, count FROM url_count WHERE count > 0").collect()}}
        state_df = {{r["url"]: r["count"] for r in p.state_df("url_count").collect()}}
        flow_df = sorted((r["url"], r["count"], r["_diff"]) for r in p.flow_df("counts", 3).collect())
        from cbp.engine.driver import session as sess
        try:
            spark.read.format("cbp_no_such_source").load("/nowhere").columns
        except Exception as e:  # the marker the server's Delta probe looks for
            unknown_source = "DATA_SOURCE_NOT_FOUND" in str(e)
        sess._SERVER_DELTA[spark.session_id] = False  # as if the server had no Delta connector
        try:
            p.state_df("url_count")
            no_delta = None
        except cbp.errors.CbpError as e:
            no_delta = e.code
        sess._SERVER_DELTA.pop(spark.session_id)
        extension, sess._delta_extension = sess._delta_extension, lambda spark: False
        probed = sess.has_delta(spark)  # a server whose conf does not name Delta's extension: the probe read
        sess._delta_extension = extension
        sess._SERVER_DELTA.pop(spark.session_id)
        try:
            p.sql("SELECT no_such_column FROM url_count").collect()
            bad_sql = None
        except cbp.errors.CbpError as e:
            bad_sql = e.code
        # cbp rewind and the rerun, then cbp upgrade (partitions 4 -> 3: the state rewritten by a DataFrame job)
        p.rewind(2, "url_count")
        rewound = {{r["url"]: r["count"] for r in p.state("url_count")}}
        rerun = [r.epoch for r in p.run()]
        states.append({{r["url"]: r["count"] for r in p.state("url_count")}})
        y3 = {str(tmp_path / "uc3.yaml")!r}
        open(y3, "w").write(open({yaml!r}).read().replace("partitions: 4", "partitions: 3"))
        p = cbp.load(y3, {str(tmp_path / "home")!r}, spark=spark)
        p.upgrade()
        upgraded = {{r["url"]: r["count"] for r in p.state("url_count")}}
        p.feed("urls", [{{"url": "zz", "_diff": -1}}])  # more taken back than seen: the translator raises
        try:
            p.run()
            code = None
        except cbp.errors.CbpError as e:
            code = e.code
        import threading, time
        from cbp.engine.driver.dfjobs import JobTag

        def slow(batches):
            for b in batches:
                time.sleep(120)
                yield b

        tag = JobTag(spark, "cbp-test-cancel")
        threading.Timer(1.0, tag.cancel).start()  # as an epoch's deadline timer does
        try:
            with tag:
                spark.range(0, 2, 1, 2).mapInArrow(slow, "id long").collect()
            cancelled = False
        except Exception as e:
            cancelled = "CANCEL" in str(e).upper()
        from cbp.engine.driver.progress import Poller

        def nap(batches):
            for b in batches:
                time.sleep(3.5)  # longer than the server's progress report interval (2 s)
                yield b

        seen = []
        with Poller(seen.append, every=0.2) as poll:  # what cbp run's progress bar reads
            poll.epoch("url_count", 9)
            spark.range(0, 2, 1, 2).mapInArrow(nap, "id long").collect()
            poll.idle()
        progress = max((g.tasks_total, g.spark_stage.startswith("Spark stage")) for g in seen)
        got = {{"states": states, "epochs": epochs, "counts": counts, "code": code, "cancelled": cancelled}}
        got.update(progress=progress)
        got.update(sql=sql, state_df=state_df, flow_df=flow_df, no_delta=no_delta, unknown_source=unknown_source)
        got.update(probed=probed, bad_sql=bad_sql)
        got.update(upgraded=upgraded, rewound=rewound, rerun=rerun)
        sid = spark.session_id
        spark.stop()  # released: its id cannot be opened again
        try:
            sess.connect_spark({server!r} + "/;session_id=" + sid)
            got["closed"] = None
        except cbp.errors.CbpError as e:
            got["closed"] = e.code
        spark = SparkSession.builder.remote({server!r}).create()  # a new session, stopped at the end
        print(json.dumps(got))
        """,
        server,
    )
    assert got["closed"] == "connect-session-closed"
    assert got["epochs"] == [1, 2, 3]
    for i, feed in enumerate(FEEDS):
        now = from_scratch(FEEDS[: i + 1])
        assert got["states"][i] == now, i  # after each feed: the state is URLCount of the feeds so far
        assert got["counts"][i] == {r["url"]: now.get(r["url"], 0) for r in feed}, i  # the new counts (0: dropped)
    final = from_scratch(FEEDS)
    assert got["sql"] == got["state_df"] == got["upgraded"] == final  # read on the server, and after the rewrite
    assert got["flow_df"] == sorted([u, n, 1] for u, n in got["counts"][2].items())  # JSON: lists
    assert got["no_delta"] == "no-delta-jars" and got["unknown_source"] and got["probed"]
    assert got["bad_sql"] == "bad-sql"
    assert got["rewound"] == from_scratch(FEEDS[:2]) and got["rerun"] == [3] and got["states"][3] == final
    assert got["code"] == "user-code"  # the task's failure record reaches the client through Spark Connect
    assert got["cancelled"]  # a tagged job is interrupted by JobTag.cancel (spark.interruptTag)
    assert got["progress"] == [2, True]  # the progress handler's tasks of the running stage


def test_url_count_through_the_cli_with_remote(server, tmp_path, capsys):
    """Two ``cbp --remote`` runs share this user's session on the server (cbp names it,
    :mod:`cbp.engine.driver.connectsession`): one Python daemon on the server, not one each; a shared
    session the server closed is replaced by a new one; ``cbp sql`` reads the state on the server."""
    home = str(tmp_path / "home")
    yaml = str(ROOT / "flows" / "url_count.yaml")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "flows")])}
    env.update(XDG_CACHE_HOME=str(tmp_path / "cache"))  # the shared session ids: this test's own
    for name in ("CBP_REMOTE", "SPARK_REMOTE", "CBP_JVM_CACHE", "CBP_CONNECT_SESSION"):
        env.pop(name, None)
    ids = tmp_path / "cache" / "cbp" / "connect-sessions.json"

    def cbp(*args: str) -> str:
        run = subprocess.run(
            [sys.executable, "-m", "cbp.cli", *args], env=env, capture_output=True, text=True, timeout=600
        )
        assert run.returncode == 0, run.stderr[-4000:]
        return run.stdout

    def here(*args: str) -> str:
        """A command that opens no session (feed, state), run in this process: it needs no process of its own."""
        from cbp.cli import main

        capsys.readouterr()
        assert main(list(args)) == 0
        return capsys.readouterr().out

    remote = server  # no session id: the commands share the one cbp keeps for this user and server
    daemons = []
    for i, feed in enumerate(FEEDS[:2]):
        path = tmp_path / f"feed{i}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in feed))
        here("feed", yaml, "urls", str(path), "--home", home)
        ran = cbp("--remote", remote, "run", yaml, "--home", home)
        assert "stage epoch(s)" in ran
        daemons.append(_daemons(server))
    assert daemons[1] == daemons[0]  # the second command's session is the first's: no new Python daemon
    first = json.loads(ids.read_text())[server]
    named = f"{server}/;session_id={first}"
    release = f"from pyspark.sql import SparkSession; SparkSession.builder.remote({named!r}).create().stop()"
    script = _as_file(release)
    try:
        subprocess.run([sys.executable, script], env=env, check=True, capture_output=True, timeout=300)
    finally:
        os.unlink(script)
    state = [json.loads(line) for line in here("state", yaml, "url_count", "--home", home).splitlines()]
    assert {r["url"]: r["count"] for r in state} == from_scratch(FEEDS[:2])
    query = "SELECT url, count FROM url_count"
    rows = [json.loads(line) for line in cbp("--remote", remote, "sql", yaml, query, "--home", home).splitlines()]
    assert {r["url"]: r["count"] for r in rows} == from_scratch(FEEDS[:2])  # cbp sql on the server
    assert json.loads(ids.read_text())[server] != first  # the released session was replaced, and kept


def test_shuffle_records_and_bytes_on_connect_equal_classics(server, spark, tmp_path, monkeypatch):
    """URLCount's shuffle path (``CBP_SMALL_EPOCH_RECORDS=0``) for two epochs on the Connect server and on
    the suite's session: the records each epoch wrote to Spark's shuffle are the same and the bytes nearly,
    read on Connect from the job's own metrics (:func:`cbp.engine.driver.dfjobs.shuffle_metrics`), on
    classic from Spark's status store; and a job with no exchange reports none."""
    import cbp

    yaml = str(ROOT / "flows" / "url_count.yaml")
    code = f"""
        from cbp.engine.driver.dfjobs import shuffle_metrics
        p = cbp.load({yaml!r}, {str(tmp_path / "connect")!r}, spark=spark)
        got = []
        for f in FEEDS[:2]:
            p.feed("urls", f)
            got += [[r.shuffle_records, r.shuffle_bytes] for r in p.run()]
        plain = spark.range(0, 10, 1, 2)
        plain.toArrow()
        print(json.dumps({{"shuffled": got, "no_exchange": shuffle_metrics(plain)}}))
        """
    got = _connect_side(code, server, CBP_SMALL_EPOCH_RECORDS="0")
    monkeypatch.setenv("CBP_SMALL_EPOCH_RECORDS", "0")
    p = cbp.load(yaml, str(tmp_path / "here"), spark=spark)
    here = []
    for f in FEEDS[:2]:
        p.feed("urls", f)
        here += [[r.shuffle_records, r.shuffle_bytes] for r in p.run()]
    assert [n for n, _ in here] == [6, 3]  # direct mode: the records fed (state is read by the tasks)
    assert all(b > 0 for _, b in here)
    # the same records; the bytes within 5% (measured: 304 and 208 bytes on Connect, 301 and 207 on classic:
    # Spark's compressed shuffle blocks of the two sessions' plans, not byte for byte the same)
    assert [n for n, _ in got["shuffled"]] == [n for n, _ in here]
    assert all(abs(c - b) <= 0.05 * b for (_, c), (_, b) in zip(got["shuffled"], here))
    assert got["no_exchange"] == {}


@pytest.mark.classic(reason="checks that the suite's own session is a classic one")
def test_the_remote_setting_chooses_the_connect_path_without_a_server(spark, monkeypatch, capsys):
    """No server needed: ``CBP_REMOTE`` / ``SPARK_REMOTE`` name it, the plan's path follows, a URL that
    is not ``sc://`` is refused by its code, and the suite's classic session is not a Connect one."""
    from types import SimpleNamespace as NS

    from cbp.cli import main
    from cbp.controller.live import LazySpark
    from cbp.engine.driver.session import is_connect
    from cbp.engine.driver.taskplan import choose_path
    from cbp.settings import Settings

    assert not is_connect(spark)
    assert Settings.from_env({"SPARK_REMOTE": "sc://h:1"}).remote == "sc://h:1"
    assert Settings.from_env({"CBP_REMOTE": "sc://a:2", "SPARK_REMOTE": "sc://h:1"}).remote == "sc://a:2"
    monkeypatch.setenv("CBP_REMOTE", "sc://127.0.0.1:1")
    master = LazySpark().master()  # known without opening a session
    assert master == "sc://127.0.0.1:1"
    st = NS(record_wise=False, batch=False, row_key=(), state_schema=object(), grouping="inner", inputs=[])
    path = choose_path(st, "direct", master=master, new_records=None, env=Settings(placement=True))
    assert path.connect and not path.placed and not path.jvm_routing
    monkeypatch.delenv("CBP_REMOTE")
    assert main(["--remote", "http://127.0.0.1:1", "validate", str(ROOT / "flows" / "url_count.yaml")]) == 2
    assert "[usage]" in capsys.readouterr().err


def test_the_anchor_puts_partition_p_in_its_task(spark):
    """No server needed (the anchor is DataFrame API, classic or Connect): rows joined to the anchor land
    in Spark partition ``p % slots`` (broadcast, the small epochs' way), or in Spark's own
    ``repartition(P, by)`` partition (the shuffle path's way); the anchor is cached, one per session
    and partition count."""
    from pyspark.sql import functions as F

    from cbp.engine.driver import anchor

    rows = [(p, f"k{p}") for p in range(7)]
    df = spark.createDataFrame(rows, "p INT, k STRING")
    slots = 3
    small = anchor.anchored(
        spark, df.withColumn(anchor.ANCHOR, anchor.probe_column(F.col("p") % slots, slots)), slots, broadcast=True
    )
    got = {r["p"]: r["task"] for r in small.select("p", F.spark_partition_id().alias("task")).collect()}
    assert got == {p: p % slots for p in range(7)}
    assert anchor.ANCHOR not in small.columns
    large = anchor.anchored_shuffle(spark, df, F.col("k"), 4)
    got = {r["k"]: r["task"] for r in large.select("k", F.spark_partition_id().alias("task")).collect()}
    want = {
        r["k"]: r["task"] for r in df.repartition(4, "k").select("k", F.spark_partition_id().alias("task")).collect()
    }
    assert got == want
    assert anchor.anchor_frame(spark, 4) is anchor.anchor_frame(spark, 4) and anchor.anchor_frame(spark, 4).is_cached
    assert not anchor.placing(spark)  # the suite's local session: nothing to place


def test_round_trips_to_the_server_per_command_and_epoch(server, tmp_path):
    """The client's calls to the server (counted on its gRPC stub), in one process: opening the session asks
    and sets cbp's settings in one or two ``Config`` calls (it was one per setting, then one for each of the
    settings a small epoch asks: 7); a small epoch is one ``ExecutePlan``; a shuffle epoch asks the server no
    schema (``AnalyzePlan``) once the session has parsed the stage's DDLs (it asked three per epoch); ``cbp feed``,
    ``status`` and ``output`` make none; ``cbp sql`` asks no schema (it asked two). The state is URLCount of the
    feeds, as pandas computes it."""
    yaml = str(ROOT / "flows" / "url_count.yaml")
    more = [{"url": "g"}, {"url": "a"}, {"url": "b", "_diff": -1}]
    got = _connect_side(
        f"""
        import collections, os
        from pyspark.sql.connect.client import core
        from cbp.cli import main
        from cbp.engine.driver.session import connect_spark
        calls = collections.Counter()
        init = core.SparkConnectClient.__init__

        def counted_init(self, *a, **k):
            init(self, *a, **k)
            for name in ("ExecutePlan", "AnalyzePlan", "Config"):  # not ReleaseExecute: a thread's, off the path
                def call(*aa, _n=name, _o=getattr(self._stub, name), **kk):
                    calls[_n] += 1
                    return _o(*aa, **kk)
                setattr(self._stub, name, call)

        core.SparkConnectClient.__init__ = counted_init
        spark.stop()  # the helper's session (its client made before the count): cbp opens its own
        steps = {{}}

        def step(name, fn):
            before = calls.copy()
            fn()
            steps[name] = dict(calls - before)

        home = {str(tmp_path / "home")!r}
        session = {{}}
        step("open", lambda: session.update(spark=connect_spark({server!r})))
        p = cbp.load({yaml!r}, home, spark=session["spark"])
        feeds = FEEDS + [{more!r}]
        for i, f in enumerate(feeds):
            p.feed("urls", f)
            if i >= 2:
                os.environ["CBP_SMALL_EPOCH_RECORDS"] = "0"
            step(f"epoch{{i + 1}}", p.run)
        jsonl = {str(tmp_path / "f.jsonl")!r}
        open(jsonl, "w").write('{{"url": "h"}}\\n')
        for cmd in (["feed", {yaml!r}, "urls", jsonl], ["status", {yaml!r}], ["output", {yaml!r}, "counts"]):
            step(cmd[0], lambda cmd=cmd: main(["--remote", {server!r}, *cmd, "--home", home]))
        query = "SELECT url, count FROM url_count WHERE count > 1"

        def sql():  # rows to print (a result with none asks its columns of the server)
            assert main(["--remote", {server!r}, "sql", {yaml!r}, query, "--home", home]) == 0

        step("sql", sql)
        state = {{r["url"]: r["count"] for r in p.state("url_count")}}
        print(json.dumps({{"steps": steps, "state": state}}))
        spark = session["spark"]
        """,
        server,
        CBP_CONNECT_SESSION="process",
    )
    steps = got["steps"]
    assert got["state"] == from_scratch([*FEEDS, more]), steps
    assert steps["open"].get("Config", 0) <= 2 and set(steps["open"]) <= {"Config"}  # get, and set what differs
    assert steps["epoch1"].get("ExecutePlan") == 1 and "AnalyzePlan" not in steps["epoch1"], steps
    assert steps["epoch1"].get("Config", 0) <= 1  # pyspark's own, once per client (its plan compression)
    assert steps["epoch2"] == {"ExecutePlan": 1}  # a small epoch: the job
    assert steps["epoch3"].get("AnalyzePlan", 0) <= 2  # the stage's two DDLs (its input's, its envelopes'), parsed once
    assert "AnalyzePlan" not in steps["epoch4"] and steps["epoch4"].get("ExecutePlan") == 1  # a shuffle epoch
    assert steps["feed"] == steps["status"] == steps["output"] == {}
    # cbp sql: the statement and the query's job, and pyspark's own Config (binaryAsBytes, in collect); no schema
    # asked (it asked two: the result's columns, and whether the state table has keyed rows)
    assert "AnalyzePlan" not in steps["sql"] and steps["sql"].get("Config", 0) <= 1, steps


def test_a_connect_servers_tasks_claim_the_partitions_their_worker_ran_last(tmp_path, monkeypatch):
    """No server needed: the functions of a small epoch's job on a Connect server in local mode
    (:func:`cbp.engine.task.arrowtasks.server_claiming_batches`) run here as two Python workers (pids 101
    and 202) running the job's two tasks at once, one partition at a time each. In the first job each worker
    runs its task's share; in the next two the workers run the other task (Spark hands a job's tasks to
    whichever idle worker it dequeues), and each worker claims again the partitions it ran (it caches their
    state), each partition run once; the last job's claims directory is removed by the next job's tasks."""
    from types import SimpleNamespace

    import pyarrow as pa
    from pyspark import TaskContext

    from cbp.engine.task import arrowtasks
    from cbp.engine.task.arrowtasks import server_claiming_batches

    monkeypatch.setattr(arrowtasks.tempfile, "gettempdir", lambda: str(tmp_path))
    blobs = arrowtasks.blobs
    monkeypatch.setattr(arrowtasks, "blobs", lambda messages: blobs(messages, per_batch=1))  # a yield per partition
    plan = SimpleNamespace(home=SimpleNamespace(location=str(tmp_path / "home")), stage=SimpleNamespace(name="s"))
    ran: list[tuple[int, int]] = []  # (partition, worker pid) in the order they ran
    now = {"pid": 0}
    monkeypatch.setattr(arrowtasks.os, "getpid", lambda: now["pid"])

    def task(_plan, batches, p):
        list(batches)
        ran.append((p, now["pid"]))
        yield pa.record_batch({"part": [p]})

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, pa.schema([("k", pa.int64())])) as w:
        w.write_table(pa.table({"k": [1]}))
    payloads = [(p, sink.getvalue().to_pybytes()) for p in range(4)]
    jobs, done = [], None
    for workers in ((101, 202), (202, 101), (202, 101)):  # task i run by workers[i]
        jobs.append(f"job{len(jobs)}")
        gens = []
        for i, pid in enumerate(workers):
            ids = iter([pa.record_batch({"id": [i]})])
            gens.append((pid, i, server_claiming_batches(plan, task, jobs[-1], done, payloads, 2, ids)))
        done, before = jobs[-1], len(ran)
        while gens:  # the two tasks in turns, a partition each time
            for g in list(gens):
                now["pid"] = g[0]
                context = SimpleNamespace(partitionId=lambda i=g[1]: i, getLocalProperty=lambda _k: None)
                TaskContext._setTaskContext(context)
                try:
                    next(g[2])
                except StopIteration:
                    gens.remove(g)
        TaskContext._setTaskContext(None)
        assert sorted(p for p, _ in ran[before:]) == [0, 1, 2, 3]  # each partition once
    by_job = [dict(ran[4 * j : 4 * j + 4]) for j in range(3)]
    assert by_job[0] == {0: 101, 1: 202, 2: 101, 3: 202}  # the first job: task i's share (p % 2 == i)
    assert by_job[1] == by_job[2] == by_job[0]  # the tasks swapped workers, the partitions did not
    left = sorted(n for n in os.listdir(tmp_path / arrowtasks.CLAIMS) if not n.endswith(".pid"))
    assert len(left) == 1 and left[0].endswith(jobs[-1])  # the earlier jobs' claims removed


CLIENT = ROOT / ".venv-client" / "bin" / "python"


def test_a_from_scratch_comparison_from_a_client_without_java(server, tmp_path):
    """A from-scratch comparison test (URLCount against pandas after each of 4 epochs, a ``file://`` home) passes from
    ``.venv-client`` (pyspark-client: no jars, no py4j) with no Java on ``PATH`` and ``CBP_REMOTE`` naming
    the server: what ``bash scripts/test --connect`` does for the whole suite, for one small test."""
    if not CLIENT.exists():
        pytest.skip("needs .venv-client (pyspark-client without Java): 'bash scripts/client-env' makes it")
    spec = importlib.util.spec_from_file_location("cbp_scripts_nojava", ROOT / "scripts" / "nojava.py")
    assert spec is not None and spec.loader is not None
    nojava = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nojava)
    env = nojava.env_without_java(os.environ, tmp_path / "bin")
    assert shutil.which("java", path=env["PATH"]) is None
    env.update(CBP_REMOTE=server, PYTHONPATH=str(ROOT))
    for key in ("SPARK_REMOTE", "PYTEST_XDIST_WORKER", "PYTEST_CURRENT_TEST", "CBP_TEST_TIMES"):
        env.pop(key, None)
    test = "tests/test_url_count.py::test_home_given_as_uri[direct]"
    args = [str(CLIENT), "-m", "pytest", "-q", "-p", "no:cacheprovider", test]
    run = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "1 passed" in run.stdout  # four epochs, each against pandas


def test_a_path_without_java_keeps_the_programs_that_only_sit_beside_a_link_to_java(tmp_path):
    """``scripts/nojava.py`` drops a JDK's programs from ``PATH``, not the shell: on Debian ``/usr/bin/java``
    is a link (to ``/etc/alternatives/java``) and ``/usr/bin/sh`` a link to ``dash`` beside it; ``sh`` must
    stay (``test_airflow_safety.py``'s process-group test runs ``sh``, and failed in Connect mode without it)."""
    spec = importlib.util.spec_from_file_location("cbp_scripts_nojava", ROOT / "scripts" / "nojava.py")
    assert spec is not None and spec.loader is not None
    nojava = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(nojava)
    jdk, usr = tmp_path / "jvm" / "jdk" / "bin", tmp_path / "usr" / "bin"
    jdk.mkdir(parents=True)
    usr.mkdir(parents=True)
    for name in ("java", "keytool"):
        (jdk / name).write_text("#!/bin/false\n")
        (jdk / name).chmod(0o755)
        (usr / name).symlink_to(jdk / name)
    (usr / "dash").write_text("#!/bin/false\n")
    (usr / "dash").chmod(0o755)
    (usr / "sh").symlink_to("dash")
    path = nojava.path_without_java(str(usr), tmp_path / "shadow")
    assert [shutil.which(p, path=path) is not None for p in ("java", "keytool", "sh", "dash")] == [0, 0, 1, 1]
