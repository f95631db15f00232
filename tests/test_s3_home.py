"""Homes on S3: a real S3 API (moto's server on loopback), delta-rs with conditional puts, leases.

The server (fixture ``s3`` of tests/moto_s3.py) is started once per module on 127.0.0.1 and a free
port; the AWS_* variables point this process at it, and Spark's Python workers get the settings in
their task plans (a pickled Home carries them), not from their environment.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from conftest import FLOWS, ROOT
from moto_s3 import BUCKET, s3_server  # noqa: F401  (the module's S3 server fixture, named s3)

from cbp.errors import BusyError, CbpError
from cbp.storage import Home
from cbp.storage.lease import KEEP, PRUNE_EVERY, Lease, S3Objects
from cbp.storage.tables import TABLE_CONFIG
from cbp.testing import Increment, replay

HOLDER = str(Path(__file__).with_name("s3_lease_holder.py"))


def _home() -> str:
    return f"s3://{BUCKET}/homes/{uuid.uuid4().hex[:10]}"


def _env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")]), **extra}


def _start(background, *args: str, stdin: int | None = None, **env: str) -> subprocess.Popen:
    """A lease holder in a subprocess, killed when the test ends (fixture ``background``)."""
    return background.popen(
        [sys.executable, HOLDER, *args],
        stdin=stdin,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(**env),
    )


def _wait_held(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline().strip()  # type: ignore[union-attr]
    assert line == "held", f"holder said {line!r}: {proc.stderr.read() if proc.poll() is not None else ''}"  # type: ignore[union-attr]


# ------------------------------------------------------------------ a pipeline on S3
def _increments() -> list[list[dict]]:
    return [[{"url": f"http://s{i % 3}.example/p{(i * 7) % 11}"} for i in range(n)] for n in (20, 0, 7, 13)]


def test_url_count_on_s3_equals_local(spark, s3, tmp_path):
    """feed + run + state + output of flows/url_count.yaml on an s3:// home, as on a local one.

    The SparkSession (fixture ``spark``) starts before ``s3`` sets the AWS_* variables, so its
    Python workers get the settings only the way a cluster's executors (or a Spark Connect
    server's) would: from the driver, inside the pickled task plan."""
    incs = [Increment("urls", inc) for inc in _increments()]
    home = _home()
    remote = replay(FLOWS / "url_count.yaml", incs, home=home, max_state_files=2)
    local = replay(FLOWS / "url_count.yaml", incs, home=str(tmp_path / "home"), max_state_files=2)
    key = lambda r: (r["url"], r["count"])  # noqa: E731
    for a, b in zip(remote.steps, local.steps):
        assert sorted(a.outputs.get("counts", []), key=key) == sorted(b.outputs.get("counts", []), key=key)
        assert sorted(a.state["url_count"], key=key) == sorted(b.state["url_count"], key=key)
    p = remote.pipeline
    assert sorted(p.output("counts", epoch=1), key=key) == sorted(local.pipeline.output("counts", epoch=1), key=key)
    assert p.status()["stages"]["url_count"]["epochs"] == 3
    assert Home(home).runner_info() is None and not Home(home).runner_active()
    listed = s3.list_objects_v2(
        Bucket=BUCKET, Prefix=home.split(f"{BUCKET}/", 1)[1] + "/stages/url_count/state/_delta_log/"
    )
    assert listed.get("KeyCount", 0) > 0  # the state is a Delta table on S3
    objects = {
        o["Key"]: o["Size"]
        for page in s3.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix=home.split(f"{BUCKET}/", 1)[1] + "/"
        )
        for o in page.get("Contents", [])
    }
    assert not [k for k in objects if k.endswith("/")]  # no directory marker objects (one request each)
    for rel in (
        "stages/url_count/state",
        "flows/urls",
        "flows/counts",
    ):  # sizes counted while writing = the objects' sizes
        dt = Home(home).table(rel, version=1)  # (the read increments of urls have left its newest version)
        assert dt.metadata().configuration.get("delta.checkpointInterval") == TABLE_CONFIG["delta.checkpointInterval"]
        adds = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
        assert adds and all(
            objects[f"{home.split(f'{BUCKET}/', 1)[1]}/{rel}/{a['path']}"] == a["size_bytes"] for a in adds
        )


def test_home_unpickled_on_an_executor_builds_the_same_filesystem(s3, monkeypatch):
    """The pickled Home carries the driver's settings: an executor without AWS_* variables (a
    Spark Connect server's, a cluster's) reads, writes, lists and deletes with them."""
    from cbp.storage import objectstore

    data = pickle.dumps(Home(_home()))
    for key in objectstore.ENV_VARS:
        monkeypatch.delenv(key, raising=False)
    h = pickle.loads(data)
    h.write_bytes("x/y.json", b"{}")
    assert h.read_bytes("x/y.json") == b"{}"
    assert h.list_dir("x") == ["y.json"]
    h.delete_file("x/y.json")  # through boto3, as a rewrite's failed task cleans up
    assert h.list_dir("x") == []
    assert h.storage_options is not None and h.storage_options["conditional_put"] == "etag"
    assert h.storage_options["AWS_SECRET_ACCESS_KEY"] == "testing"
    assert "secret_key=***" in repr(h._store) and "testing" not in repr(h)  # no secret in a log line
    assert pickle.loads(pickle.dumps(Home("/tmp/local-home"))).__getstate__()["store"] is None


def test_unreachable_bucket_is_a_typed_error(s3):
    with pytest.raises(CbpError) as e:
        with Home("s3://no-such-bucket-cbp/h").runner_lock("x"):
            pass
    assert e.value.code == "io"


def test_airflow_dags_say_they_need_a_local_home(s3, tmp_path):
    from cbp.airflow.dagfactory import load_config

    cfg = tmp_path / "cbp.yaml"
    cfg.write_text("homes: s3://bucket/homes\n")
    with pytest.raises(CbpError) as e:
        load_config(str(cfg))
    assert e.value.code == "needs-local-home"


# ------------------------------------------------------------------ leases
def test_second_runner_is_refused_with_busy(s3, background, monkeypatch):
    home = _home()
    holder = _start(background, "runner", home)
    tries: list[str] = []
    try_acquire = Lease.try_acquire
    monkeypatch.setattr(Lease, "try_acquire", lambda self: tries.append(self.name) or try_acquire(self))
    try:
        _wait_held(holder)
        with pytest.raises(BusyError) as e:
            with Home(home).runner_lock("second"):
                pass
        assert e.value.code == "busy" and tries == ["runner"]  # refused at the first try: no waiting
        assert str(holder.pid) in str(e.value)  # the holder is named, as on a local disk
        assert Home(home).runner_active()
    finally:
        holder.kill()
        holder.wait()


def test_second_cbp_run_on_an_s3_home_exits_busy(s3, background):
    home = _home()
    holder = _start(background, "runner", home)
    try:
        _wait_held(holder)
        cli = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from cbp.cli import main; sys.exit(main())",
                "run",
                str(FLOWS / "url_count.yaml"),
                "--home",
                home,
            ],
            capture_output=True,
            text=True,
            env=_env(),
            timeout=300,
        )
        assert cli.returncode == 6, cli.stderr[-2000:]  # BusyError's exit code, as on a local disk
        assert str(holder.pid) in cli.stderr
    finally:
        holder.kill()
        holder.wait()


def test_runner_lock_is_released_and_taken_again(s3):
    h = Home(_home())
    with h.runner_lock("first"):
        assert h.runner_active() and h.runner_info()["command"] == "first"
        with pytest.raises(BusyError):
            with h.runner_lock("nested"):
                pass
    assert not h.runner_active() and h.runner_info() is None
    with h.runner_lock("again"):
        pass


def test_mutation_lock_waits_then_proceeds(s3, background):
    """The holder lets go only once this process has said it waits (events, not seconds, order it)."""
    home = _home()
    holder = _start(background, "mutation", home, stdin=subprocess.PIPE, CBP_LEASE_TTL="6")
    try:
        _wait_held(holder)
        calls = []

        def waiting() -> None:
            calls.append("waiting")
            holder.stdin.close()  # type: ignore[union-attr]  (the holder's cue to release)

        h = Home(home)
        with h.lock(waiting):
            with h.lock():  # re-entrant within the process
                calls.append("held")
        assert calls == ["waiting", "held"]
        assert holder.wait(30) == 0
    finally:
        holder.kill()


def test_killed_runner_is_taken_over_after_expiry(s3, monkeypatch, background):
    """A SIGKILLed holder's lease is refused to others until it expires, then taken over (the
    successor is told whom it replaced). The holder's records last 60 s; then this process's lease
    clock is moved past them by hand, so neither check depends on how fast the machine is."""
    import cbp.storage.lease

    home = _home()
    holder = _start(background, "runner", home, CBP_LEASE_TTL="60", CBP_LEASE_RENEW="1")
    _wait_held(holder)
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    with pytest.raises(BusyError) as e:  # not yet expired
        with Home(home).runner_lock("too early"):
            pass
    assert e.value.code == "busy"
    clock = _Clock()
    monkeypatch.setattr(cbp.storage.lease, "time", clock)
    clock.ahead = 120  # past the expiry of the holder's last record (at most 60 s after its last renewal)
    seen: list[dict] = []
    with Home(home).runner_lock("successor", took_over=seen.append):
        pass
    assert len(seen) == 1 and seen[0]["pid"] == holder.pid and seen[0]["command"] == "holder runner"


def test_racing_runners_exactly_one_wins(s3, background):
    home = _home()
    start = time.time() + 4  # every racer has imported cbp by then
    racers = [_start(background, "race", home, str(start), stdin=subprocess.PIPE) for _ in range(3)]
    said = [r.stdout.readline().strip() for r in racers]  # type: ignore[union-attr]  (the winner holds on meanwhile)
    for r in racers:
        r.stdin.close()  # type: ignore[union-attr]
        assert r.wait(60) == 0
    assert sorted(said) == ["busy", "busy", "won"], said


def test_renewal_keeps_the_lease_and_old_records_are_pruned(s3, background):
    """The renewal thread writes records that outlive the first one (so the lease is held past its
    first expiry), and old records are pruned. Nothing here depends on how fast this machine is: the
    test waits (with a generous deadline) for renewals to happen, then drives more by hand."""
    store = S3Objects(_home())
    lease = background.lease(store, "t", {"who": "me"}, ttl=60, renew=0.2)
    ok, _ = lease.try_acquire()
    assert ok
    first = lease.current()
    assert first is not None and first.holder == lease.token
    deadline = time.monotonic() + 120
    while lease.seq < 3:  # two renewals by the thread
        assert time.monotonic() < deadline, f"the renewal thread renewed {lease.seq - 1} times in 120 s"
        time.sleep(0.1)
    other = background.lease(store, "t", ttl=60)
    top = other.current()
    assert top is not None and top.holder == lease.token and top.seq > first.seq
    assert top.expires > first.expires and top.live(now=first.expires)  # a renewal outlives the first record
    ok2, rec = other.try_acquire()
    assert not ok2 and rec is not None and rec.info == {"who": "me"}
    while lease.seq <= 2 * PRUNE_EVERY:  # renewals driven by hand (the thread may add its own: same rule)
        assert lease.renew()
    assert len(store.list("_cbp/leases/t")) <= KEEP + PRUNE_EVERY
    lease.release()
    assert other.try_acquire()[0]
    other.release()


def test_concurrent_delta_commits_on_s3_lose_nothing(s3, background):
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    table = f"{_home()}/t"
    write_deltalake(
        table,
        pa.table({"tag": pa.array([], pa.string()), "i": pa.array([], pa.int64())}),
        storage_options=Home(table).storage_options,
    )
    procs = [_start(background, "append", table, "12", tag) for tag in ("a", "b")]
    for p in procs:
        out, err = p.communicate(timeout=240)
        assert p.returncode == 0 and out.strip() == "done", err[-2000:]
    rows = DeltaTable(table, storage_options=Home(table).storage_options).to_pyarrow_table().to_pylist()
    assert sorted((r["tag"], r["i"]) for r in rows) == sorted((t, i) for t in "ab" for i in range(12))


def test_threads_of_one_process_share_the_mutation_lock(s3):
    h = Home(_home())
    inside, peak = [0], [0]
    guard = threading.Lock()

    def work() -> None:
        with h.lock():
            with guard:
                inside[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.05)
            with guard:
                inside[0] -= 1

    ts = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    assert peak[0] == 1


def test_a_holder_whose_lease_ran_out_commits_nothing(s3, monkeypatch):
    """A process stalled past its lease's expiry (renewals stopped) may have been replaced by another
    holder: its next commit is refused (BusyError ``lease-lost``), nothing of it lands, and the home
    goes on as if it had never tried."""
    import cbp

    monkeypatch.setenv("CBP_LEASE_TTL", "3")
    monkeypatch.setenv("CBP_LEASE_RENEW", "1")
    home = _home()
    p = cbp.load(FLOWS / "url_count.yaml", home=home)
    p.feed("urls", [{"url": "http://a/"}])
    with monkeypatch.context() as m:
        m.setattr(Lease, "renew", lambda self: True)  # the renewals stall (as in a process paused by the OS)
        with pytest.raises(BusyError) as e:
            with Home(home).lock():
                time.sleep(3.3)  # the mutation lease expires: another process may take it now
                thief = Lease(S3Objects(home), "mutation", {"who": "thief"})
                assert thief.try_acquire()[0]
                p.feed("urls", [{"url": "http://lost/"}])  # re-enters the expired lock: its commit is fenced off
        thief.release()
    assert e.value.code == "lease-lost"
    fresh = cbp.load(FLOWS / "url_count.yaml", home=home)
    assert fresh.feeds("urls") == 1 and fresh.output("urls") == [{"url": "http://a/"}]
    fresh.feed("urls", [{"url": "http://b/"}])  # the home works on
    assert fresh.feeds("urls") == 2


class _Clock:
    """The time cbp.storage.lease reads, moved on by hand: the real time plus ``ahead`` seconds."""

    def __init__(self) -> None:
        self.ahead = 0.0

    def time(self) -> float:
        return time.time() + self.ahead

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


def test_the_fence_leaves_a_renewing_holder_alone_whatever_its_renewal_interval(s3, monkeypatch):
    """With renewals set close to the ttl a live holder's lease gets low between renewals;
    that is not a lost lease: the fence lets its commits through, and still stops a stalled one.
    The lease's clock is moved on by hand (its renewal thread, waiting 80 real seconds, does not
    run), so each check has seconds of margin however slow the machine is."""
    import cbp.storage.lease

    clock = _Clock()
    monkeypatch.setattr(cbp.storage.lease, "time", clock)
    monkeypatch.setenv("CBP_LEASE_TTL", "100")
    monkeypatch.setenv("CBP_LEASE_RENEW", "80")  # the fence's line: (100 - 80) / 2 = 10 s left
    h = Home(_home())
    with h.lock():
        clock.ahead = 78  # just before the first renewal (at 80 s): ~22 s of the lease left, as always then
        h.fence("a commit just before a renewal")
    clock.ahead = 0
    with monkeypatch.context() as m:
        m.setattr(Lease, "renew", lambda self: True)  # stalled renewals
        with pytest.raises(BusyError) as e:
            with h.lock():
                clock.ahead = 95  # ~5 s left: below (100 - 80) / 2
                h.fence("a commit of a stalled holder")
    assert e.value.code == "lease-lost"
