"""A follower on a home on S3 (a moto server, tests/moto_s3.py): it sees feeds through one HEAD
request per look, and its runner lease is renewed while it follows, so a second runner stays
``busy`` long after the lease's ttl. The follower thread is stopped by a fixture, pass or fail."""

from __future__ import annotations

import threading
import time
import uuid

import pytest
from moto_s3 import BUCKET, s3_server  # noqa: F401  (the module's S3 server fixture, named s3)

import cbp
from cbp.errors import BusyError

YAML = """
pipeline: follow_s3
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
def count(key, state, words, out):
    prev = next(state, None)
    out.state.write({"w": key, "n": sum(1 for _ in words) + (prev["n"] if prev else 0)})
"""


@pytest.fixture
def follower_thread():
    started = []

    def start(pipe, **options):
        stop, box = threading.Event(), {}

        def target():
            try:
                box["summary"] = pipe.follow(stop=stop, **options)
            except BaseException as e:  # noqa: BLE001
                box["error"] = e

        t = threading.Thread(target=target, daemon=True)
        started.append((t, stop))
        t.start()
        return t, stop, box

    yield start
    for _t, stop in started:
        stop.set()
    for t, _ in started:
        t.join(300)
    assert not any(t.is_alive() for t, _ in started)


def _until(cond, timeout=300.0, what="the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_follower_on_s3_runs_feeds_and_keeps_its_lease(spark, s3, make_pipeline, monkeypatch, follower_thread):
    monkeypatch.setenv("CBP_LEASE_TTL", "3")
    monkeypatch.setenv("CBP_LEASE_RENEW", "1")
    yaml = make_pipeline(YAML, MODULE)
    home = f"s3://{BUCKET}/homes/{uuid.uuid4().hex[:10]}"
    p = cbp.load(yaml, home=home)
    assert p.home.local_dir() is None
    rounds = []
    t, stop, box = follower_thread(p, poll=0.2, on_round=rounds.append)
    _until(lambda: rounds, what="the follower's first run")
    feeder = cbp.load(yaml, home=home)
    feeder.feed("words", [{"w": "a"}, {"w": "b"}, {"w": "a"}])
    _until(
        lambda: {r["w"]: r["n"] for r in cbp.load(yaml, home=home).state("count")} == {"a": 2, "b": 1},
        what="the feed to be run",
    )
    time.sleep(4.0)  # longer than the lease's ttl: only its renewals keep it
    with pytest.raises(BusyError) as e:
        cbp.load(yaml, home=home).run()
    assert e.value.code == "busy"
    feeder.feed("words", [{"w": "b"}])
    _until(
        lambda: {r["w"]: r["n"] for r in cbp.load(yaml, home=home).state("count")} == {"a": 2, "b": 2},
        what="the second feed",
    )
    stop.set()
    t.join(300)
    assert "error" not in box and box["summary"].epochs == 2
    assert cbp.load(yaml, home=home).run() == []  # the lease was released
