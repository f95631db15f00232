"""Feeds that land while a run works, and the home lock across processes."""

from __future__ import annotations

import subprocess
import sys
import time

from conftest import WORD_COUNT

import cbp
from cbp.storage import Home

GATED = """
import os, time

def count(key, state, words, out):
    here = os.path.dirname(__file__)
    open(os.path.join(here, "started"), "a").close()  # the epoch is running now
    deadline = time.time() + 120
    while not os.path.exists(os.path.join(here, "go")) and time.time() < deadline:
        time.sleep(0.05)
    prev = next(state, None)
    out.state.write({"w": key, "n": sum(1 for _ in words) + (prev["n"] if prev else 0)})
"""


def test_feed_during_run_is_not_lost(spark, make_pipeline, tmp_path, background):
    """A feed made while an epoch surely runs (its translator waits on a gate) waits for the epoch's
    commit, is kept, and a later epoch (of this run or the next) reads it."""
    path = make_pipeline(WORD_COUNT, GATED)
    started, go = path.parent / "started", path.parent / "go"
    home = str(tmp_path / "h")
    runner = cbp.load(path, home=home)
    runner.feed("words", [{"w": "a"}, {"w": "b"}])
    feeder = cbp.load(path, home=home)  # another Pipeline object on the same home, as another process would be
    result: dict = {}
    t = background.thread(
        lambda: result.setdefault("reports", runner.run()), stop=go.touch
    )  # a failed assert opens the gate
    deadline = time.time() + 120
    while not started.exists() and time.time() < deadline:
        time.sleep(0.05)
    assert started.exists(), "the first epoch never started"
    # the feeds are made while epoch 1 waits in its translator; they wait for the epoch's commit
    feeds = background.thread(
        lambda: (feeder.feed("words", [{"w": "a"}, {"w": "c"}]), feeder.feed("words", [{"w": "a"}]))
    )
    feeds.join(timeout=3)
    assert feeds.is_alive(), "a feed landed in the middle of an epoch instead of waiting for its commit"
    go.touch()
    feeds.join()
    t.join()
    runner.run()
    assert {r["w"]: r["n"] for r in runner.state("count")} == {"a": 3, "b": 1, "c": 1}
    assert runner.status()["stages"]["count"]["connectors"]["words"]["pending"] == 0
    assert runner.epoch_record("count", 1).inputs == {"words": [1]}  # epoch 1 read only the feed before it
    assert [r["w"] for r in runner.output("words", epoch=3)] == ["a"]  # feeds are numbered in landing order


def test_lock_is_held_across_processes(tmp_path, capsys, background):
    """While another process holds the home's lock, a change waits for it and says so."""
    home = tmp_path / "h"
    holder = background.popen(
        [
            sys.executable,
            "-c",
            "import sys; from cbp.storage import Home\n"
            f"with Home({str(home)!r}).lock():\n    print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    events: list[str] = []

    def waiting() -> None:
        events.append("waiting")
        holder.stdin.close()  # type: ignore[union-attr]  (the holder lets go once this process waits)

    with Home(str(home)).lock(waiting=waiting):
        events.append("held")
    assert holder.wait(timeout=30) == 0
    assert events == ["waiting", "held"]  # it waited for the other process, then got the lock
    with Home(str(home)).lock():  # and the lock is free again (also after the holder exited)
        with Home(str(home)).lock():  # re-entrant within a process
            pass
