"""Airflow, safe by default: loopback only, an owner-only admin password, bounded run tasks whose
``cbp run`` dies with them (Spark JVM included), and an inbox that one bad file does not block.

The Airflow processes are real where it matters: ``airflow config get-value`` reads the
environment the script and the README give, and one test starts Airflow the way
``scripts/airflow_loop.py`` does and looks at every socket it listens on.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import FLOWS, ROOT, WORD_COUNT, free_port

from cbp.errors import CbpError

pytest.importorskip("airflow", reason="needs apache-airflow (pip install -e '.[airflow]')")
psutil = pytest.importorskip("psutil", reason="needs psutil (pip install -e '.[dev]')")


# ---------------------------------------------------------------------------- helpers
def _loop():
    """scripts/airflow_loop.py as a module."""
    spec = importlib.util.spec_from_file_location("airflow_loop", ROOT / "scripts" / "airflow_loop.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _airflow_section() -> str:
    return (ROOT / "docs" / "howto" / "airflow.md").read_text()  # the Airflow guide of the docs site


def _config(env: dict[str, str], *keys: tuple[str, str]) -> list[str]:
    """What Airflow itself reads for each ``(section, key)`` in this environment (``conf.get``, as
    ``airflow config get-value`` does), all read by one process."""
    code = (
        "import json, sys\n"
        "from airflow.configuration import conf\n"
        "print(json.dumps([conf.get(s, k) for s, k in json.loads(sys.argv[1])]))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, json.dumps(keys)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def _group_alive(pgid: int) -> list[int]:
    """Pids of the live (not zombie) processes of a process group."""
    out = []
    for p in psutil.process_iter(["pid", "status"]):
        try:
            if os.getpgid(p.pid) == pgid and p.info["status"] != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return out


def _listening(pgid: int) -> dict[tuple[str, int], int]:
    """(address, port) -> pid of every TCP socket the process group listens on."""
    out = {}
    for pid in _group_alive(pgid):
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except psutil.Error:
            continue
        out.update({(c.laddr.ip, c.laddr.port): pid for c in conns if c.status == psutil.CONN_LISTEN})
    return out


def _running(procs: list) -> list:
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


# ---------------------------------------------------------------------------- loopback and secrets
def test_loop_script_environment_binds_loopback_on_the_readme_port(tmp_path):
    al = _loop()
    section = _airflow_section()
    m = re.search(r"scripts/airflow-loop`.*?port (\d+)", section, re.S)
    assert m, "the README's Airflow section names the loop's port"
    assert al.PORT == int(m.group(1)) == 8181
    env = al.airflow_env(tmp_path / "airflow", tmp_path / "cbp.yaml")
    read = _config(
        env,
        ("api", "host"),
        ("api", "port"),
        ("core", "execution_api_server_url"),
        ("scheduler", "scheduler_health_check_server_host"),
        ("core", "simple_auth_manager_passwords_file"),
    )
    assert read == [
        "127.0.0.1",
        "8181",
        "http://127.0.0.1:8181/execution/",
        "127.0.0.1",
        str(tmp_path / "airflow" / al.PASSWORDS),
    ]
    r = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "airflow_loop.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "default 8181" in r.stdout and "127.0.0.1" in r.stdout
    # the components standalone starts, but not its log servers (they bind every interface)
    assert (
        al.SERVE.count("--skip-serve-logs") == 2 and "airflow api-server" in al.SERVE and "standalone" not in al.SERVE
    )


def _documented_env() -> tuple[dict[str, str], str]:
    """The variables the README's manual steps export, and the block of commands."""
    section = _airflow_section()
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    joined = block.replace("\\\n", " ")
    exported: dict[str, str] = {}
    for line in joined.splitlines():
        line = line.split("#", 1)[0].strip()
        if line.startswith("export "):
            for word in shlex.split(line[len("export ") :]):
                k, _, v = word.partition("=")
                exported[k] = v.replace("$PWD", str(ROOT))
    return exported, block


def test_readme_manual_steps_bind_loopback_and_start_airflow_like_the_script(tmp_path):
    al = _loop()
    exported, block = _documented_env()
    ui = re.search(r"The UI is on http://([0-9.]+):(\d+)", _airflow_section())
    assert ui, "the README says where the UI is"
    host, port = ui.group(1), ui.group(2)
    assert host == "127.0.0.1"
    assert exported.get("AIRFLOW__API__HOST") == "127.0.0.1"
    assert exported.get("AIRFLOW__API__PORT") == port
    assert exported.get("AIRFLOW__CORE__EXECUTION_API_SERVER_URL") == f"http://127.0.0.1:{port}/execution/"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW__")}
    env.update({k: v for k, v in exported.items() if k.startswith("AIRFLOW__")}, AIRFLOW_HOME=str(tmp_path / "airflow"))
    assert _config(env, ("api", "host"), ("api", "port")) == ["127.0.0.1", port]
    # started as the script starts it: umask 077 before the log (which gets the admin password) is opened
    flat = " ".join(block.split())
    assert " ".join(al.SERVE.split()) in flat
    launch = flat[flat.index("setsid") :]
    assert launch.index("umask 077") < launch.index("exec >") < launch.index("airflow db migrate")
    assert "airflow standalone" not in flat


def test_prepare_airflow_home_makes_it_and_an_old_password_file_owner_only(tmp_path):
    al = _loop()
    home = tmp_path / "airflow"
    home.mkdir(mode=0o755)
    pw = home / al.PASSWORDS
    pw.write_text('{"admin": "x"}\n')
    os.chmod(pw, 0o644)
    al.prepare_airflow_home(home)
    assert stat.S_IMODE(home.stat().st_mode) == 0o700
    assert stat.S_IMODE(pw.stat().st_mode) == 0o600


def test_airflow_started_by_the_script_listens_on_loopback_only_and_keeps_its_password_private(tmp_path):
    """Start Airflow as scripts/airflow_loop.py does (a free port instead of 8181), look, stop it."""
    al = _loop()
    port = free_port()
    home = tmp_path / "airflow"
    al.prepare_airflow_home(home)
    (tmp_path / "flows").mkdir()
    cfg = tmp_path / "cbp.yaml"
    cfg.write_text(f"flows: {tmp_path / 'flows'}\nhomes: {tmp_path / 'homes'}\ninbox: {tmp_path / 'inbox'}\n")
    env = al.airflow_env(home, cfg, port)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    proc = al.start_airflow(env, tmp_path / "airflow.log")
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            assert proc.poll() is None, (tmp_path / "airflow.log").read_text()[-3000:]
            if ("127.0.0.1", port) in _listening(proc.pid) and (home / al.PASSWORDS).exists():
                break
            time.sleep(1)
        time.sleep(5)  # scheduler, triggerer, dag processor and the executor's workers are up by now: look again
        listening = _listening(proc.pid)
        assert ("127.0.0.1", port) in listening, (listening, (tmp_path / "airflow.log").read_text()[-3000:])
        assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening  # nothing on 0.0.0.0 or ::
        pw = home / al.PASSWORDS
        assert stat.S_IMODE(pw.stat().st_mode) == 0o600 and "admin" in json.loads(pw.read_text())
        assert stat.S_IMODE((tmp_path / "airflow.log").stat().st_mode) == 0o600
        assert stat.S_IMODE(home.stat().st_mode) == 0o700
        assert stat.S_IMODE((home / "airflow.db").stat().st_mode) == 0o600
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:  # the API answers on loopback
            s.sendall(b"GET /api/v2/version HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            assert b"200" in s.recv(200).split(b"\r\n")[0]
    finally:
        al.stop_airflow(proc, grace=30)
    assert _group_alive(proc.pid) == []


# ---------------------------------------------------------------------------- execution timeouts
def _config_file(tmp_path: Path, flows: Path, extra: str = "") -> Path:
    (tmp_path / "corpus").mkdir(exist_ok=True)
    cfg = tmp_path / "cbp.yaml"
    cfg.write_text(
        f"flows: {flows}\nhomes: {tmp_path / 'state'}\ninbox: {tmp_path / 'inbox'}\n{extra}"
        f"crawlers:\n  crawl_queue:\n    corpus: {tmp_path / 'corpus'}\n    seed: http://h/\n"
    )
    return cfg


def test_run_and_crawl_tasks_have_the_configured_execution_timeout(tmp_path):
    from datetime import timedelta

    from cbp.airflow.dagfactory import load_config, make_dags

    dags = make_dags(
        str(
            _config_file(
                tmp_path, FLOWS, "run_timeout_minutes: 7\ncrawl_timeout_minutes: 3\nepoch_timeout_seconds: 45\n"
            )
        )
    )
    pipelines = [d for name, d in dags.items() if not name.endswith("_crawler")]
    assert len(pipelines) >= 3
    for d in pipelines:
        assert d.task_dict["run"].execution_timeout == timedelta(minutes=7), d.dag_id
        assert d.task_dict["run"].epoch_timeout == 45
        assert d.task_dict["land_inbox"].execution_timeout == timedelta(minutes=7)
    assert dags["cbp_crawl_queue_crawler"].task_dict["crawl_round"].execution_timeout == timedelta(minutes=3)
    # defaults: every task bounded, no epoch limit passed on
    dags = make_dags(str(_config_file(tmp_path, FLOWS)))
    assert dags["cbp_url_count"].task_dict["run"].execution_timeout == timedelta(minutes=120)
    assert dags["cbp_url_count"].task_dict["run"].epoch_timeout is None
    assert dags["cbp_crawl_queue_crawler"].task_dict["crawl_round"].execution_timeout == timedelta(minutes=30)
    for bad in ("0", "-1", "abc", "null", ".inf"):
        with pytest.raises(CbpError, match="run_timeout_minutes") as e:
            load_config(str(_config_file(tmp_path, FLOWS, f"run_timeout_minutes: {bad}\n")))
        assert e.value.code == "bad-config"


def test_two_yamls_of_one_pipeline_name_are_refused(tmp_path):
    """A second YAML with the same pipeline name would replace the first's DAG (and share its home)."""
    import shutil

    from cbp.airflow.dagfactory import make_dags

    flows = tmp_path / "flows"
    flows.mkdir()
    for f in ("url_count.yaml", "url_count.py", "crawl_queue.yaml", "crawl_queue.py"):
        shutil.copy(FLOWS / f, flows / f)
    assert set(make_dags(str(_config_file(tmp_path, flows)))) == {
        "cbp_url_count",
        "cbp_crawl_queue",
        "cbp_crawl_queue_crawler",
    }
    (flows / "url_count_copy.yaml").write_text((FLOWS / "url_count.yaml").read_text())
    dags = make_dags(str(_config_file(tmp_path, flows)))  # neither YAML runs: cbp_url_count fails with the reason
    assert set(dags) == {"cbp_url_count", "cbp_crawl_queue", "cbp_crawl_queue_crawler"}
    assert set(dags["cbp_url_count"].task_dict) == {"broken"} and "broken" in dags["cbp_url_count"].tags
    with pytest.raises(
        CbpError, match="url_count_copy.yaml and .*url_count.yaml both declare pipeline 'url_count'"
    ) as e:
        dags["cbp_url_count"].task_dict["broken"].python_callable()
    assert e.value.code == "duplicate-pipeline"


def test_epoch_timeout_is_passed_to_cbp_run_only_when_set(tmp_path, make_pipeline):
    from cbp.airflow.dagfactory import run_pipeline

    path = str(make_pipeline(WORD_COUNT, "def count(key, state, words, out):\n    pass\n"))
    cmds = []

    class Stop(Exception):
        pass

    def started(group):
        cmds.append(group.cmd)
        raise Stop

    for kw in ({}, {"epoch_timeout": 45.0}):
        with pytest.raises(Stop):
            run_pipeline(path, str(tmp_path / "h"), started=started, **kw)
    assert "--epoch-timeout" not in cmds[0]
    assert cmds[1][cmds[1].index("--epoch-timeout") + 1] == "45"


def test_process_group_timeout_kills_every_process_of_the_group():
    from cbp.airflow.dagfactory import ProcessGroup

    g = ProcessGroup(["sh", "-c", "sleep 300 & sleep 300 & wait"], grace=2)
    with pytest.raises(TimeoutError, match="process group was killed"):
        g.run(timeout=1.5)
    assert g.proc.returncode is not None and g.proc.returncode < 0  # killed by a signal, not done sleeping
    assert _group_alive(g.proc.pid) == []


def test_cbp_run_dies_with_a_task_process_killed_by_sigkill(tmp_path):
    """The one exit no handler sees: the command gets SIGKILL when its parent dies (PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("needs Linux (PR_SET_PDEATHSIG)")
    pidfile = tmp_path / "pid"
    code = (
        "import sys, threading, time\n"
        "from cbp.airflow.dagfactory import ProcessGroup\n"
        "g = ProcessGroup(['sleep', '300'])\n"
        "def tell():\n"
        "    while g.proc is None: time.sleep(0.05)\n"
        f"    open({str(pidfile)!r}, 'w').write(str(g.proc.pid))\n"
        "threading.Thread(target=tell, daemon=True).start()\n"
        "g.run()\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        child = psutil.Process(int(pidfile.read_text()))
        time.sleep(0.5)  # the wrapper has set PR_SET_PDEATHSIG and exec'd sleep
        assert child.is_running() and "sleep" in " ".join(child.cmdline())
    finally:
        parent.kill()
        parent.wait()
    gone, alive = psutil.wait_procs([child], timeout=10)
    assert not _running(alive)


SLEEPY = """
import os, time

MARKER = {marker!r}

def count(key, state, words, out):
    open(MARKER, "a").close()  # the translator runs: Spark's JVM and Python workers are up
    time.sleep(3600)
    out.state.write({{"w": key, "n": 1}})
"""


def _sleepy_run_task(tmp_path: Path, make_pipeline, settings: str, words: list[dict]):
    """The run task of a factory-built DAG (``settings`` in its cbp.yaml) for a word count whose
    translator sleeps for an hour, with ``words`` fed; and the pipeline, and the translator's marker."""
    import cbp
    from cbp.airflow.dagfactory import make_dags

    marker = tmp_path / "translator-started"
    path = make_pipeline(WORD_COUNT, SLEEPY.format(marker=str(marker)))
    flows = tmp_path / "flows"
    flows.mkdir()
    shutil.copy(path, flows / "counter.yaml")
    for f in path.parent.glob("*.py"):
        shutil.copy(f, flows / f.name)
    cfg = tmp_path / "cbp.yaml"
    cfg.write_text(f"flows: {flows}\nhomes: {tmp_path / 'state'}\ninbox: {tmp_path / 'inbox'}\n{settings}")
    op = make_dags(str(cfg))["cbp_counter"].task_dict["run"]
    p = cbp.load(flows / "counter.yaml", home=str(tmp_path / "state" / "counter"))
    p.feed("words", words)
    return op, p, marker


@pytest.mark.classic(reason="checks that the task's process group held cbp run's driver JVM: on Connect there is none")
def test_run_task_past_its_execution_timeout_kills_cbp_run_and_its_spark_jvm(tmp_path, make_pipeline):
    """The run task of a factory-built DAG, executed as Airflow's task runner does: inside
    ``timeout(execution_timeout)``, ``on_kill`` on AirflowTaskTimeout. The timer is brought forward
    once the sleeping translator runs, so the timeout fires in the middle of a Spark job."""
    from airflow.sdk.exceptions import AirflowTaskTimeout
    from airflow.sdk.execution_time.timeout import timeout

    op, p, marker = _sleepy_run_task(tmp_path, make_pipeline, "run_timeout_minutes: 5\n", [{"w": "a"}, {"w": "b"}])

    seen: dict[str, list] = {"procs": [], "names": []}

    def bring_forward() -> None:
        try:
            deadline = time.monotonic() + 280
            while not marker.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
            leader = psutil.Process(op._group.proc.pid)
            seen["pgid"] = [leader.pid]
            for proc in [leader, *leader.children(recursive=True)]:
                try:
                    seen["names"].append(" ".join(proc.cmdline()))
                    seen["procs"].append(proc)
                except psutil.Error:  # a Python worker that just ended
                    pass
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0.5)  # the execution_timeout fires now

    watcher = threading.Thread(target=bring_forward, daemon=True)
    watcher.start()
    with pytest.raises(AirflowTaskTimeout):  # the translator sleeps an hour: only the timeout ends the task
        try:  # airflow.sdk.execution_time.task_runner._execute_task, with op.execution_timeout
            with timeout(op.execution_timeout.total_seconds()):
                op.execute(context={})
        except AirflowTaskTimeout:
            op.on_kill()
            raise
    watcher.join(10)
    assert marker.exists(), "the translator never ran"
    names = " ".join(seen["names"])
    assert "java" in names and "cbp.cli" in names  # the group held cbp run and its JVM when the timeout fired
    gone, alive = psutil.wait_procs(seen["procs"], timeout=30)
    assert not _running(alive), [proc.cmdline() for proc in _running(alive)]
    assert _group_alive(seen["pgid"][0]) == []
    assert p.status()["stages"]["count"]["epochs"] == 0  # nothing committed


def test_epoch_timeout_setting_reaches_cbp_run_and_cancels_a_runaway_epoch(tmp_path, make_pipeline):
    """``epoch_timeout_seconds`` in the DAGs' YAML becomes ``cbp run --epoch-timeout``: the epoch is
    cancelled, cbp run exits 4 and the run task fails with that (long before its execution_timeout)."""
    op, p, marker = _sleepy_run_task(
        tmp_path, make_pipeline, "run_timeout_minutes: 10\nepoch_timeout_seconds: 5\n", [{"w": "a"}]
    )
    with pytest.raises(RuntimeError, match="exit code 4") as e:  # the translator sleeps an hour
        op.execute(context={})
    assert "time limit of 5 s" in str(e.value)  # cbp run's own message: the epoch limit, not the task's
    assert _group_alive(op._group.proc.pid) == []
    assert p.status()["stages"]["count"]["epochs"] == 0  # nothing committed


# ---------------------------------------------------------------------------- the inbox
WORDS = [{"w": "x"}, {"w": "y"}, {"w": "x"}]
TRIVIAL = "def count(key, state, words, out):\n    pass\n"


def _good(d: Path, name: str, recs=WORDS) -> Path:
    f = d / name
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return f


BAD = {
    "bad-json": (lambda f: f.write_text('{"w": "a"}\n{"w": \n'), "bad-record", ":2:"),
    "bad-record": (lambda f: f.write_text('{"w": 42}\n'), "bad-record", ":1:"),
    "wrong-flow": (lambda f: f.write_text('{"url": "http://a/"}\n'), "bad-record", "'w'"),
    "not-utf8": (lambda f: f.write_bytes(b'{"w": "caf\xe9"}\n'), "bad-record", "UTF-8"),
    "deep": (lambda f: f.write_text("[" * 200000 + "\n"), "bad-record", ""),
    "symlink": (lambda f: f.symlink_to("/etc/hostname"), "not-a-regular-file", "symbolic link"),
    "unreadable": (lambda f: f.write_text('{"w": "a"}\n'), "unreadable", "Permission denied"),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_a_bad_inbox_file_is_rejected_with_its_error_and_the_next_one_lands(kind, tmp_path, make_pipeline, monkeypatch):
    import cbp
    from cbp.airflow.dagfactory import land_inbox
    from cbp.airflow.triggers import IncrementLanded, landed_feeds

    yaml = str(make_pipeline(WORD_COUNT, TRIVIAL))
    home, inbox = str(tmp_path / "home"), tmp_path / "inbox"
    d = inbox / "words"
    d.mkdir(parents=True)
    make, code, detail = BAD[kind]
    bad = d / "a.jsonl"
    make(bad)
    _good(d, "b.jsonl")
    if kind == "unreadable":  # root reads any file: make this one fail as a chmod 000 file would for anyone else
        real_open = os.open

        def deny(p, *a, **k):
            if os.fspath(p) in (str(bad), bad.name):  # by path, or by name in the inbox's directory
                raise PermissionError(13, "Permission denied", str(p))
            return real_open(p, *a, **k)

        monkeypatch.setattr(os, "open", deny)
    watcher = IncrementLanded(home, "words", inbox=str(d), settle=0)
    assert watcher.check()["inbox_files"] == ["a.jsonl", "b.jsonl"]

    res = land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert res["landed"] == {"words": ["b.jsonl"]}
    assert list(res["rejected"]["words"]) == ["a.jsonl"] and res["rejected"]["words"]["a.jsonl"].startswith(f"{code}: ")
    assert sorted(os.listdir(d)) == ["landed", "rejected"]
    assert os.listdir(d / "landed") == ["b.jsonl"]
    assert sorted(os.listdir(d / "rejected")) == ["a.jsonl", "a.jsonl.error.txt"]
    err = (d / "rejected" / "a.jsonl.error.txt").read_text()
    assert err.startswith(f"{code}: ") and detail in err, err
    assert os.path.islink(d / "rejected" / "a.jsonl") == (kind == "symlink")  # moved as it was, never followed
    assert cbp.load(yaml, home=home).output("words") == WORDS and landed_feeds(home, "words") == 1
    assert watcher.check() is None  # the rejected file is not announced again

    # a retry (the good file back, as if the task died before moving it) lands nothing twice
    shutil.copy(d / "landed" / "b.jsonl", d / "b.jsonl")
    monkeypatch.undo()
    res = land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert res == {"landed": {"words": ["b.jsonl"]}, "rejected": {}}
    assert cbp.load(yaml, home=home).output("words") == WORDS and landed_feeds(home, "words") == 1
    assert sorted(os.listdir(d / "rejected")) == ["a.jsonl", "a.jsonl.error.txt"]


def test_retried_inbox_lands_each_file_once_and_a_new_file_under_an_old_name_too(tmp_path, make_pipeline):
    import cbp
    from cbp.airflow.dagfactory import land_inbox
    from cbp.airflow.triggers import IncrementLanded, landed_feeds

    yaml = str(make_pipeline(WORD_COUNT, TRIVIAL))
    home, inbox = str(tmp_path / "home"), tmp_path / "inbox"
    d = inbox / "words"
    d.mkdir(parents=True)
    (d / "a.jsonl").write_text("not json\n")
    _good(d, "b.jsonl")
    watcher = IncrementLanded(home, "words", inbox=str(d), settle=0)
    assert watcher.check() is not None
    land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert land_inbox(yaml, home, str(inbox), ["words"], settle=0) == {
        "landed": {},
        "rejected": {},
    }  # the retry: nothing to do
    assert landed_feeds(home, "words") == 1 and watcher.check() is None
    # the same bad name again (another bad file): rejected beside the first, which is kept; announced again
    (d / "a.jsonl").write_text('{"w": 1}\n')
    assert watcher.check()["inbox_files"] == ["a.jsonl"]
    res = land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert list(res["rejected"]["words"]) == ["a.1.jsonl"]
    assert (d / "rejected" / "a.jsonl").read_text() == "not json\n" and (
        d / "rejected" / "a.1.jsonl"
    ).read_text() == '{"w": 1}\n'
    assert (d / "rejected" / "a.1.jsonl.error.txt").read_text().startswith("bad-record: ")
    # another file under a landed name, of the same size, is new data: it lands
    _good(d, "b.jsonl", [{"w": "q"}, {"w": "r"}, {"w": "q"}])
    assert (d / "b.jsonl").stat().st_size == (d / "landed" / "b.jsonl").stat().st_size
    assert watcher.check()["inbox_files"] == ["b.jsonl"]
    res = land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert res["landed"] == {"words": ["b.jsonl"]}
    assert landed_feeds(home, "words") == 2
    assert sorted(r["w"] for r in cbp.load(yaml, home=home).output("words")) == ["q", "q", "r", "x", "x", "y"]
    assert watcher.check() is None


def test_an_inbox_failure_that_is_not_the_file_s_fault_rejects_nothing(tmp_path, make_pipeline):
    from cbp.airflow.dagfactory import land_inbox

    yaml = str(make_pipeline(WORD_COUNT, TRIVIAL))
    home = tmp_path / "home"
    home.write_text("a file where the home directory should be\n")
    d = tmp_path / "inbox" / "words"
    d.mkdir(parents=True)
    _good(d, "b.jsonl")
    with pytest.raises(CbpError) as e:
        land_inbox(yaml, str(home), str(tmp_path / "inbox"), ["words"], settle=0)
    assert e.value.code == "bad-home"
    assert os.listdir(d) == ["b.jsonl"]  # still waiting: the retry (once the home is fixed) lands it


def test_fifos_and_directories_in_the_inbox_are_left_alone(tmp_path):
    from cbp.airflow.triggers import inbox_files

    d = tmp_path / "in"
    d.mkdir()
    os.mkfifo(d / "pipe.jsonl")  # opening it would block the task forever
    (d / "dir.jsonl").mkdir()
    (d / "note.txt").write_text("x")
    (d / "ok.jsonl").write_text("")
    (d / "link.jsonl").symlink_to(d / "nowhere")
    assert inbox_files(str(d), settle=0) == ["link.jsonl", "ok.jsonl"]


def test_parquet_inbox_files_land_and_a_bad_one_is_rejected_under_its_own_suffix(tmp_path, make_pipeline):
    import pyarrow as pa
    import pyarrow.parquet as pq

    import cbp
    from cbp.airflow.inbox import REJECTED, land_inbox
    from cbp.airflow.triggers import IncrementLanded

    yaml = str(make_pipeline(WORD_COUNT, TRIVIAL))
    home, inbox = str(tmp_path / "home"), tmp_path / "inbox"
    d = inbox / "words"
    (d / REJECTED).mkdir(parents=True)
    pq.write_table(pa.table({"w": ["x", "y", "x"]}), d / "b.parquet")
    pq.write_table(pa.table({"w": [1, 2]}), d / "a.parquet")
    (d / REJECTED / "a.parquet").write_bytes(b"an earlier rejected file of that name")
    assert IncrementLanded(home, "words", inbox=str(d), settle=0).check()["inbox_files"] == ["a.parquet", "b.parquet"]
    res = land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert res["landed"] == {"words": ["b.parquet"]}
    assert list(res["rejected"]["words"]) == ["a.1.parquet"] and res["rejected"]["words"]["a.1.parquet"].startswith(
        "bad-record: "
    )
    assert sorted(os.listdir(d / REJECTED)) == ["a.1.parquet", "a.1.parquet.error.txt", "a.parquet"]
    assert cbp.load(yaml, home=home).output("words") == WORDS
