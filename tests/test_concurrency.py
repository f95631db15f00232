"""Feeds, reads and conflicting changes while an epoch's Spark job runs, and the home lock across processes."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
from pathlib import Path

import crash_harness as ch
from conftest import WORD_COUNT

import cbp
from cbp.storage import Home

WORDS = [[{"w": "a"}, {"w": "b"}], [{"w": "a"}, {"w": "c"}], [{"w": "a"}], [{"w": "b"}, {"w": "d"}]]


def _gated(make_pipeline, tmp_path, notes: list[str] | None = None) -> tuple[cbp.Pipeline, cbp.Pipeline, ch.Gate]:
    """A runner and another Pipeline object on the same home (as another process would be), and
    the gate of their translator (open)."""
    path = make_pipeline(WORD_COUNT, ch.GATED_COUNT)
    home = str(tmp_path / "h")
    runner = cbp.Pipeline(path, home, notify=notes.append if notes is not None else None)
    gate = ch.Gate(path)
    gate.go.touch()
    return runner, cbp.load(path, home=home), gate


def _run_gated(runner: cbp.Pipeline, gate: ch.Gate, background) -> tuple[dict, threading.Thread]:
    """Start ``runner.run()`` with the gate closed; return once its epoch's job waits at the gate."""
    gate.close()
    result: dict = {}

    def run() -> None:
        try:
            result["reports"] = runner.run()
        except Exception as e:  # the test looks at it
            result["error"] = e

    t = background.thread(run, stop=gate.go.touch)
    gate.wait_started(t.is_alive)
    return result, t


def test_feed_status_and_output_during_a_job_do_not_wait(spark, make_pipeline, tmp_path, background):
    """While an epoch's Spark job surely runs (its translator waits on a gate), feeds land and
    return, and status and output reads answer, all before the job ends; the epoch commits what
    it read, the next epoch of the same run reads the feeds, and the counts are those of all feeds."""
    runner, feeder, gate = _gated(make_pipeline, tmp_path)
    runner.feed("words", WORDS[0])
    result, t = _run_gated(runner, gate, background)
    landed = [feeder.feed("words", WORDS[1]), feeder.feed("words", WORDS[2])]
    status = feeder.status()
    seen = [r["w"] for r in feeder.output("words", epoch=2)]
    assert gate.in_progress() and t.is_alive()  # all of it while the job waited at the gate
    assert [x.feed for x in landed] == [2, 3] and seen == ["a", "c"]
    assert status["runner"] is not None and status["stages"]["count"]["epochs"] == 0
    assert [i["recovery"] for i in status["interrupted"]] == ["under way in the running cbp run"]
    assert status["stages"]["count"]["connectors"]["words"]["pending"] == 3
    gate.go.touch()
    t.join()
    assert [r.epoch for r in result["reports"]] == [1, 2]
    assert runner.epoch_record("count", 1).inputs == {"words": [1]}  # epoch 1 read only the feed before it
    assert runner.epoch_record("count", 2).inputs == {"words": [2, 3]}  # the next one what landed meanwhile
    assert {r["w"]: r["n"] for r in runner.state("count")} == ch.counts(WORDS[:3])
    assert runner.status()["stages"]["count"]["connectors"]["words"]["pending"] == 0
    assert runner.home.pending() is None and not runner.home.intentions()


def test_unfeed_during_a_job_refuses_its_commit_and_it_plans_again(spark, make_pipeline, tmp_path, background):
    """A feed withdrawn while the epoch that reads it runs: the epoch's commit is refused (nothing
    of it committed, its intention gone) and the epoch is planned again without it."""
    notes: list[str] = []
    runner, feeder, gate = _gated(make_pipeline, tmp_path, notes)
    runner.feed("words", WORDS[0])
    runner.run()
    runner.feed("words", WORDS[1])
    result, t = _run_gated(runner, gate, background)
    assert feeder.unfeed("words", 2)["increments"] == [2]
    feeder.feed("words", WORDS[2])
    assert gate.in_progress() and t.is_alive()
    gate.go.touch()
    t.join()
    assert [r.epoch for r in result["reports"]] == [2]
    assert runner.epoch_record("count", 2).inputs == {"words": [3]}
    assert {r["w"]: r["n"] for r in runner.state("count")} == ch.counts([WORDS[0], WORDS[2]])
    assert any("stage 'count' epoch 2 was not committed" in n for n in notes), notes
    assert runner.home.pending() is None and not runner.home.intentions()


def test_rewind_during_a_job_refuses_its_commit_and_it_plans_again(
    spark, make_pipeline, tmp_path, background, monkeypatch
):
    """A rewind made while an epoch's job runs (possible only once the runner lost its lock, as a
    lease that expired while it stalled: emulated by letting the rewind skip the runner lock):
    the epoch's commit is refused, and it is planned again on the rewound home; the counts are
    those of all feeds."""
    runner, feeder, gate = _gated(make_pipeline, tmp_path)
    for feed in WORDS[:2]:
        runner.feed("words", feed)
        runner.run()
    runner.feed("words", WORDS[2])
    result, t = _run_gated(runner, gate, background)
    with monkeypatch.context() as m:
        m.setattr(Home, "runner_lock", lambda self, command, took_over=None: contextlib.nullcontext())
        feeder.rewind(1)
    assert gate.in_progress() and t.is_alive()
    gate.go.touch()
    t.join()
    assert [r.epoch for r in result["reports"]] == [2]
    assert runner.epoch_record("count", 2).inputs == {"words": [2, 3]}
    assert {r["w"]: r["n"] for r in runner.state("count")} == ch.counts(WORDS[:3])
    assert runner.home.pending() is None and not runner.home.intentions()


def test_upgrade_during_a_job_refuses_its_commit(spark, make_pipeline, tmp_path, background, monkeypatch):
    """An upgrade made while an epoch's job runs (the runner lock skipped, as after a lost lease):
    the runner's commit is refused (``pipeline-changed``: its YAML is the old one), nothing of the
    epoch is committed and its intention is gone; a run with the new YAML ends with the counts of
    all feeds, in the new partitioning."""
    runner, _, gate = _gated(make_pipeline, tmp_path)
    runner.feed("words", WORDS[0])
    runner.run()
    runner.feed("words", WORDS[1])
    old_yaml = Path(runner.spec.path)
    new_yaml = old_yaml.parent / "upgraded.yaml"
    new_yaml.write_text(old_yaml.read_text().replace("partitions: 2", "partitions: 3"))
    upgraded = cbp.load(new_yaml, home=str(tmp_path / "h"))
    result, t = _run_gated(runner, gate, background)
    with monkeypatch.context() as m:
        m.setattr(Home, "runner_lock", lambda self, command, took_over=None: contextlib.nullcontext())
        assert upgraded.upgrade().needs_upgrade
    assert gate.in_progress() and t.is_alive()
    gate.go.touch()
    t.join()
    assert getattr(result.get("error"), "code", None) == "pipeline-changed", result
    assert upgraded.epochs("count") == 1 and not upgraded.home.intentions() and upgraded.home.pending() is None
    assert [r.epoch for r in upgraded.run()] == [2]
    assert upgraded.epoch_record("count", 2).inputs == {"words": [2]}
    assert {r["w"]: r["n"] for r in upgraded.state("count")} == ch.counts(WORDS[:2])


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
