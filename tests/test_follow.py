"""Continuous mode (cbp.follow, ``cbp run --follow``): a follower picks up feeds made by other
processes and inbox files, honours the minimum interval, stops after the epoch in flight, and
keeps the runner lock. Every follower thread or process a test starts is stopped by a fixture."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest
from conftest import ROOT

import cbp
from cbp.errors import BusyError

YAML = """
pipeline: follow_count
flows:
  words: {external: true, schema: {w: string}}
stages:
  count:
    translator: MOD:count
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
"""
MODULE = """
import os, time

MARKER = {marker!r}
SLEEP = {sleep!r}

def count(key, state, words, out):
    prev = next(state, None)
    n = sum(1 for _ in words)
    if SLEEP and key == "slow":  # an epoch that takes a while: the test acts while it is in flight
        open(MARKER + "." + str(os.getpid()), "w").close()
        time.sleep(SLEEP)
    out.state.write({{"w": key, "n": n + (prev["n"] if prev else 0)}})
"""


def _make(make_pipeline, tmp_path, sleep: float = 0.0):
    marker = str(tmp_path / "in-flight")
    return make_pipeline(YAML, MODULE.format(marker=marker, sleep=sleep)), marker


def _until(cond, timeout: float = 240.0, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def _in_flight(marker: str) -> bool:
    d, base = os.path.split(marker)
    return any(n.startswith(os.path.basename(base) + ".") for n in os.listdir(d))


def _counts(p) -> dict:
    return {r["w"]: r["n"] for r in p.state("count")}


def _cli(*args, timeout=300):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "cbp.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=timeout,
    )


@pytest.fixture
def followers():
    """Start ``pipe.follow(...)`` in a thread; every one is stopped (and joined) at the end, pass or fail."""
    started = []

    def start(pipe, **options):
        stop = threading.Event()
        box: dict = {}

        def target():
            try:
                box["summary"] = pipe.follow(stop=stop, **options)
            except BaseException as e:  # noqa: BLE001 - the test looks at it
                box["error"] = e

        t = threading.Thread(target=target, name="test-follower", daemon=True)
        h = SimpleNamespace(thread=t, stop=stop, box=box, pipe=pipe)
        started.append(h)
        t.start()
        return h

    yield start
    for h in started:
        h.stop.set()
    for h in started:
        h.thread.join(300)
    assert not [h for h in started if h.thread.is_alive()], "a follower thread did not stop"


@pytest.fixture
def processes():
    """Start processes in their own process groups; each is SIGTERMed (then killed) at the end, pass or fail."""
    started: list[subprocess.Popen] = []

    def start(cmd, **kw):
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        p = subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            start_new_session=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **kw,
        )
        started.append(p)
        return p

    yield start
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)  # the follower only; then the whole group
            try:
                p.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(30)


def test_a_follower_runs_feeds_made_by_another_process_and_holds_the_runner_lock(
    spark, make_pipeline, tmp_path, followers
):
    yaml, _ = _make(make_pipeline, tmp_path)
    home = str(tmp_path / "home")
    p = cbp.load(yaml, home=home)
    p.feed("words", [{"w": "a"}, {"w": "b"}])
    h = followers(p)
    _until(lambda: p.epochs("count") == 1, what="the first epoch")
    fed: list[str] = ["a", "b"]
    for n, words in enumerate([["a", "c", "c"], ["b", "d"]]):
        f = tmp_path / f"feed{n}.jsonl"
        f.write_text("".join(json.dumps({"w": w}) + "\n" for w in words))
        r = _cli("feed", yaml, "--home", home, "words", f)  # another process, while the follower holds the runner lock
        assert r.returncode == 0, r.stderr
        fed += words
        _until(
            lambda fed=fed: _counts(cbp.load(yaml, home=home)) == dict(collections.Counter(fed)),
            what="the feed to be run",
        )
    # from scratch: a count of every word fed
    assert _counts(cbp.load(yaml, home=home)) == dict(collections.Counter(fed))
    # one runner per home: a cbp run in another process, a runner in this one, a second follower
    r = _cli("run", yaml, "--home", home)
    assert r.returncode == 6 and "[busy]" in r.stderr
    with pytest.raises(BusyError) as e:
        cbp.load(yaml, home=home).run()
    assert e.value.code == "busy"
    with pytest.raises(BusyError) as e:
        cbp.load(yaml, home=home).follow(stop=lambda: True)
    assert e.value.code == "busy"
    h.stop.set()
    h.thread.join(300)
    assert "error" not in h.box and h.box["summary"].epochs == p.epochs("count") == 3
    assert cbp.load(yaml, home=home).run() == []  # the lock is free again: nothing left to run


def test_a_follower_that_cannot_take_the_runner_lock_fails_busy(make_pipeline, tmp_path):
    yaml, _ = _make(make_pipeline, tmp_path)
    home = str(tmp_path / "home")
    other = cbp.load(yaml, home=home)
    with other.home.runner_lock("a test holding the lock"):
        r = _cli("run", "--follow", yaml, "--home", home)  # refused before Spark starts
        assert r.returncode == 6 and "[busy]" in r.stderr


def test_min_interval_spaces_the_runs_and_stop_is_honoured_while_it_waits(spark, make_pipeline, tmp_path, followers):
    yaml, _ = _make(make_pipeline, tmp_path)
    home = str(tmp_path / "home")
    p = cbp.load(yaml, home=home)
    feeder = cbp.load(yaml, home=home)
    feeder.feed("words", [{"w": "a"}])
    h = followers(p, min_interval=1.5)
    _until(lambda: p.epochs("count") == 1, what="the first epoch")
    for w in ("b", "c", "d"):
        feeder.feed("words", [{"w": w}])
    _until(lambda: _counts(cbp.load(yaml, home=home)) == {"a": 1, "b": 1, "c": 1, "d": 1}, what="every feed to be run")
    h.stop.set()
    h.thread.join(300)
    starts = h.box["summary"].round_starts
    assert len(starts) >= 2 and all(
        b - a >= 1.5 for a, b in zip(starts, starts[1:])
    )  # the follower's own clock: an ordering
    # a long interval holds the next run back, and a stop asked meanwhile ends the follower without running it
    first = threading.Event()
    h2 = followers(cbp.load(yaml, home=home), min_interval=3600, on_round=lambda reports: first.set())
    assert first.wait(300)  # its first run (nothing to do) starts the interval
    feeder.feed("words", [{"w": "e"}])
    time.sleep(1.0)
    h2.stop.set()
    h2.thread.join(300)
    assert not h2.thread.is_alive() and "error" not in h2.box
    assert h2.box["summary"].rounds == 1 and "e" not in _counts(cbp.load(yaml, home=home))


def test_stop_waits_for_the_epoch_in_flight(spark, make_pipeline, tmp_path, followers):
    yaml, marker = _make(make_pipeline, tmp_path, sleep=3.0)
    home = str(tmp_path / "home")
    p = cbp.load(yaml, home=home)
    p.feed("words", [{"w": "slow"}, {"w": "x"}])
    h = followers(p)
    _until(lambda: _in_flight(marker), what="the epoch to be in flight")
    h.stop.set()  # asked while the epoch is in flight
    # lands while the epoch's job runs (no wait for it: the mutation lock is free then); the
    # epoch in flight does not read it, and the follower, asked to stop, does not run it after
    cbp.load(yaml, home=home).feed("words", [{"w": "y"}])
    h.thread.join(300)
    assert "error" not in h.box and h.box["summary"].epochs == 1
    q = cbp.load(yaml, home=home)
    assert q.epochs("count") == 1 and _counts(q) == {"slow": 1, "x": 1}
    assert q.status()["stages"]["count"]["connectors"]["words"]["pending"] == 1 and not q.status()["interrupted"]


@pytest.mark.parametrize("how", ["SIGTERM to the follower", "Ctrl-C: SIGINT to its process group"])
def test_sigterm_or_ctrl_c_stops_the_follower_process_after_the_epoch_in_flight(
    how, make_pipeline, tmp_path, processes
):
    yaml, marker = _make(make_pipeline, tmp_path, sleep=4.0)
    home = str(tmp_path / "home")
    p = cbp.load(yaml, home=home)
    p.feed("words", [{"w": "slow"}, {"w": "x"}, {"w": "x"}])
    proc = processes([sys.executable, "-m", "cbp.cli", "run", "--follow", str(yaml), "--home", home])
    _until(lambda: _in_flight(marker) or proc.poll() is not None, what="the follower's epoch to be in flight")
    assert proc.poll() is None, proc.communicate()
    if how.startswith("SIGTERM"):
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal sends: to the follower, its JVM (which ignores it), ...
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    name = "SIGTERM" if how.startswith("SIGTERM") else "SIGINT"
    assert f"{name}: stopping after the epoch in flight" in err and out.strip().splitlines()[-1].startswith(
        "stopped: 1 run(s), 1 stage epoch(s)"
    )
    q = cbp.load(yaml, home=home)
    assert (
        q.epochs("count") == 1
        and _counts(q) == {"slow": 1, "x": 2}
        and not q.status()["interrupted"]
        and not q.status()["runner"]
    )


def test_inbox_files_are_landed_and_run(spark, make_pipeline, tmp_path, followers):
    from cbp.commands._follow import inbox_source

    yaml, _ = _make(make_pipeline, tmp_path)
    home, inbox = str(tmp_path / "home"), tmp_path / "inbox"
    (inbox / "words").mkdir(parents=True)
    p = cbp.load(yaml, home=home)
    h = followers(p, sources=[inbox_source(p, str(inbox), settle=0.0)])
    _until(lambda: h.pipe.home.runner_info() is not None, what="the follower to take the lock")
    (inbox / "words" / "bad.jsonl").write_text('{"w": 1}\n')
    tmp = inbox / "words" / "day1.jsonl.part"  # written under a temporary name, then renamed: landed whole
    tmp.write_text("".join(json.dumps({"w": w}) + "\n" for w in ["a", "b", "a"]))
    tmp.rename(inbox / "words" / "day1.jsonl")
    _until(lambda: _counts(cbp.load(yaml, home=home)) == {"a": 2, "b": 1}, what="the inbox file to be run")
    assert os.listdir(inbox / "words" / "landed") == ["day1.jsonl"]
    assert sorted(os.listdir(inbox / "words" / "rejected")) == ["bad.jsonl", "bad.jsonl.error.txt"]


def test_cli_options_that_do_not_go_together(make_pipeline, tmp_path):
    from cbp.cli import main

    yaml, _ = _make(make_pipeline, tmp_path)
    home = str(tmp_path / "home")
    assert main(["run", str(yaml), "--home", home, "--inbox", str(tmp_path)]) == 2
    assert main(["run", "--follow", str(yaml), "--home", home, "--max-epochs", "1"]) == 2
    with pytest.raises(SystemExit):
        main(["run", "--follow", str(yaml), "--home", home, "--min-interval", "-1"])


def test_sync_hook_is_used_only_with_a_delta_source():
    from cbp.follow import sync_hook

    calls = []
    flows = {"plain": SimpleNamespace(source=None), "table": SimpleNamespace(source={"delta": "/tmp/t"})}
    landed = [[SimpleNamespace(versions=[]), SimpleNamespace(versions=[4, 5])], [SimpleNamespace(versions=[])]]
    pipe = SimpleNamespace(spec=SimpleNamespace(flows=flows), sync=lambda: calls.append(1) or landed[len(calls) - 1])
    hook = sync_hook(pipe, every=3600)
    assert hook() is True and hook() is False and calls == [1]  # at most once per `every`
    hook = sync_hook(pipe, every=0)
    assert hook() is False and calls == [1, 1]  # a sync that landed no version
    assert sync_hook(SimpleNamespace(spec=SimpleNamespace(flows={"plain": flows["plain"]}), sync=pipe.sync)) is None
    assert (
        sync_hook(SimpleNamespace(spec=SimpleNamespace(flows=flows))) is None
    )  # a Pipeline without sync() (before `sources` is merged)


def test_follower_options(make_pipeline, tmp_path):
    from cbp.errors import UsageError
    from cbp.follow import MIN_POLL, POLL_LOCAL, Follower

    yaml, _ = _make(make_pipeline, tmp_path)
    p = cbp.load(yaml, home=str(tmp_path / "home"))
    assert Follower(p).poll == POLL_LOCAL and Follower(p, poll=0).poll == MIN_POLL  # never a busy wait
    for bad in ({"min_interval": -1}, {"min_interval": float("nan")}, {"poll": "1"}, {"stop": 3}):
        with pytest.raises(UsageError) as e:
            Follower(p, **bad)
        assert e.value.code == "bad-option"


def test_a_source_that_refreshes_the_controller_does_not_hide_a_feed(spark, make_pipeline, tmp_path, followers):
    """A Delta source's sync() takes the lock and re-reads the snapshot between runs; a feed landed
    just before is still seen (not only by the 60 s recheck, turned off here)."""
    yaml, _ = _make(make_pipeline, tmp_path)
    home = str(tmp_path / "home")
    p = cbp.load(yaml, home=home)
    first = threading.Event()
    followers(
        p, recheck=3600, on_round=lambda reports: first.set(), sources=[lambda: p.parts.journal.refresh() or False]
    )
    assert first.wait(300)
    cbp.load(yaml, home=home).feed("words", [{"w": "a"}])
    _until(lambda: _counts(cbp.load(yaml, home=home)) == {"a": 1}, timeout=120, what="the feed to be run")
