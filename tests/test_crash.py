"""Durable epochs: SIGKILL at many moments, a Spark task that dies once, and recovery to exactly
the results of an uninterrupted run (paper 001 §4.3). The long version: bench/crash_recovery.py."""

from __future__ import annotations

import os
import signal
from typing import Any

import crash_harness as ch
from conftest import WORD_COUNT

import cbp


def test_sigkill_at_many_moments_recovers_exactly(spark, tmp_path):
    """22 SIGKILLs over every phase of feeds, stage epochs (a 3-stage pipeline with a loopback cycle),
    garbage collection and recovery itself; the restarted runs end with the same epochs, the same
    records in every output increment and the same state as an uninterrupted run, and as networkx."""
    incs = ch.increments(seed=ch.SHALLOW[0], n=4, nodes=30, edges=12)
    ref = str(tmp_path / "reference")
    ch.run_reference(ref, incs, spark)
    want = ch.results(ref, spark)
    assert want["state"] == ch.expected(incs)

    ops = len(ch.operations(incs))
    plan = ch.plan_chained(ops, ch.KILLS)
    assert ch.kill_count([("run", v) for v in plan.values()]) == ch.kill_count(ch.KILLS) >= 20
    victim = str(tmp_path / "victim")
    log = ch.run_victim(victim, incs, plan, tmp_path, status_after_kill=True, recover_here=True, on_test_jvm=True)
    assert len(log.killed()) == ch.kill_count(ch.KILLS)  # every kill point was reached (the harness checks exit -9)
    got = ch.results(victim, spark)
    assert got["leftovers"] == {"pending": False, "intentions": []}
    for part in ("epochs", "outputs", "state", "delta_state"):
        assert got[part] == want[part], part
    # recovery was reported, and status explained what it would do while the home was interrupted
    said = "\n".join(a.stderr for a in log.attempts if not a.fault)
    assert (
        "recovered: finished committing" in said and "which was interrupted: re-running it with the same inputs" in said
    )
    statuses = "\n".join(a.stdout for a in log.killed())
    assert "interrupted commit of stage" in statuses and "Delta commits made" in statuses
    assert "the next 'cbp run' re-runs stage" in statuses


def test_sigkill_during_compaction_recovers_exactly(spark, tmp_path):
    """SIGKILL at each of compaction's four points (a run of its own for each, the runs before them here):
    the recovered home has the same epochs, state and ``sizes`` table (as a Delta reader sums it) as an
    uninterrupted run with the same retention (the state as networkx), with the flow compacted."""
    incs = ch.increments(seed=7, n=5, nodes=30, edges=8)  # the first run, then one run per kill point
    ref, victim = str(tmp_path / "reference"), str(tmp_path / "victim")
    for home in (ref, victim):
        ch.compacting_home(home, spark)
    ch.run_reference(ref, incs, spark)
    want = ch.compacted_results(ref, spark)
    assert want["state"] == ch.expected(incs) and want["compacted_files"] >= 1
    ch.run_reference(victim, incs, spark, count=1)  # the first feed and run: no kill
    plan = {2 * k + 1: faults for k, (_, faults) in zip(range(1, len(incs)), ch.COMPACT_KILLS)}  # runs 2-5
    log = ch.run_victim(victim, incs, plan, tmp_path, done=2, recover_here=True, on_test_jvm=True)
    assert len(log.killed()) == ch.kill_count(ch.COMPACT_KILLS) == 4  # every point reached (exit -9)
    got = ch.compacted_results(victim, spark)
    assert got["leftovers"] == {"pending": False, "intentions": []}
    for part in ("epochs", "state", "delta_state", "sizes"):
        assert got[part] == want[part], part
    assert got["compacted_files"] >= 1


def test_task_that_dies_once_is_retried_without_leftovers(spark, tmp_path, monkeypatch):
    """A Python worker that exits after writing its state files (a lost executor): Spark retries
    the task, and the files of the failed attempt never become visible."""
    # the task dies in the first job; the second increment's epochs build on what its retry wrote
    incs = ch.increments(seed=ch.SHALLOW[0], n=2, nodes=30, edges=12)
    ref = str(tmp_path / "reference")
    ch.run_reference(ref, incs, spark)
    marker = tmp_path / "task-died-once"
    monkeypatch.setenv("CBP_FAULT", f"task-exit:task:state-written:{marker}")
    ch.run_reference(str(tmp_path / "victim"), incs, spark)
    monkeypatch.delenv("CBP_FAULT")
    assert marker.exists()  # the fault fired
    got, want = ch.results(str(tmp_path / "victim"), spark), ch.results(ref, spark)
    for part in ("epochs", "outputs", "state", "delta_state"):
        assert got[part] == want[part], part
    assert got["state"] == ch.expected(incs)


def test_rewind_killed_and_recovered_then_replayed_equals_reference(spark, tmp_path):
    """'cbp rewind --stage parse --to-epoch 2' on the 3-stage pipeline with a loopback cycle,
    killed after its Delta commits began, killed again while the next command recovers it, and
    once more at its snapshot: the replay that follows ends with networkx's answer and the
    reference run's state."""
    import shutil

    incs = ch.increments(seed=ch.SHALLOW[1], n=4, nodes=30, edges=12)
    ref = str(tmp_path / "reference")
    ch.run_reference(ref, incs, spark)
    want = ch.results(ref, spark)
    home = str(tmp_path / "victim")
    shutil.copytree(ref, home)
    rewind = ["rewind", "--stage", "parse", "--to-epoch", "2"]
    for fault in ("kill:rewind:committed:1:1", "kill:recover:committed:2:1", "kill:recover:snapshot:1"):
        r = ch.cli(rewind, home, fault)
        assert r.returncode == -9, (fault, r.stderr)
    r = ch.cli_here(rewind, home)  # the commands after the kills: in this process
    assert r.returncode == 0 and "nothing to rewind" in r.stderr, r.stderr  # the recovery finished it
    r = ch.cli_here(["run"], home)
    assert r.returncode == 0, r.stderr
    got = ch.results(home, spark)
    assert got["state"] == want["state"] == ch.expected(incs)
    assert got["delta_state"] == want["delta_state"]
    assert got["leftovers"] == {"pending": False, "intentions": []}
    assert got["epochs"]["parse"]["3"]["inputs"] == {"lines": [3, 4]}  # the replay read both feeds since parse epoch 2


#: Kill points of feeds with retractions and of the epochs that read them (URLCount): (operation index, faults)
SIGNED_KILLS = {
    0: ["kill:feed:written:1"],
    2: ["kill:feed:committed:0:1"],
    4: ["kill:feed:pending:1"],
    1: ["kill:epoch:ran:1"],
    3: ["kill-driver:task:outputs-written:1"],
    5: ["kill:epoch:committed:0:1"],
}


def test_feeds_with_retractions_survive_sigkill_exactly(spark, tmp_path):
    """Feeds that retract what earlier feeds landed, killed while landing and while the epochs
    that read them run: nothing lost, nothing twice (the same consolidated flow, counts and state
    as an uninterrupted run, and as pandas)."""
    import json

    import pandas as pd
    from conftest import FLOWS

    import cbp

    yaml = FLOWS / "url_count.yaml"
    incs = [
        [{"url": f"u{i % 5}", "_diff": 2} for i in range(10)],
        [{"url": "u1", "_diff": -3}, {"url": "u2", "_diff": -3}, {"url": "u9"}, {"url": "u9", "_diff": -1}],
        [{"url": "u2", "_diff": -1}, {"url": "u3"}, {"url": "u1", "_diff": -1}],
    ]
    ref = cbp.load(yaml, home=str(tmp_path / "reference"), spark=spark)
    for k, inc in enumerate(incs):
        ref.feed("urls", inc, feed_id=f"inc{k}")
        ref.run()
    victim = str(tmp_path / "victim")
    for i in range(2 * len(incs)):
        k = i // 2
        if i % 2 == 0:
            src = tmp_path / f"inc{k}.jsonl"
            src.write_text("".join(json.dumps(r) + "\n" for r in incs[k]))
            args = ["feed", "urls", str(src), "--id", f"inc{k}"]
        else:
            args = ["run"]
        for fault in SIGNED_KILLS.get(i, []) + [None]:  # each kill in a process; the recovery after it here
            if fault:  # a run killed at a driver's point: on this process's JVM (crash_harness.run_victim)
                r = ch.cli(args, victim, fault, yaml=yaml, on_test_jvm=args[0] == "run")
            else:
                r = ch.cli_here(args, victim, yaml=yaml)
            assert r.returncode == (-9 if fault else 0), (i, fault, r.stderr[-2000:])
    got = cbp.load(yaml, home=victim, spark=spark)
    df = pd.DataFrame([{"url": r["url"], "d": r.get("_diff", 1)} for inc in incs for r in inc])
    counts = {u: int(c) for u, c in df.groupby("url")["d"].sum().items() if c}
    assert {r["url"]: r["count"] for r in got.state("url_count")} == counts
    for p in (got, ref):
        assert {r["url"]: r.get("_diff", 1) for r in p.output("urls", consolidated=True)} == counts
    assert got.epochs("url_count") == ref.epochs("url_count")
    for e in range(1, ref.epochs("url_count") + 1):
        assert sorted(map(json.dumps, got.output("counts", epoch=e))) == sorted(
            map(json.dumps, ref.output("counts", epoch=e))
        )
    assert got.home.pending() is None and not got.home.intentions()


WORDS = [[{"w": "a"}, {"w": "b"}], [{"w": "a"}, {"w": "c"}]]


def _killed_with_a_feed_during_its_job(make_pipeline, tmp_path, background, fault: str | None) -> tuple[Any, Any]:
    """``cbp run`` of a gated word count on feed 1; feed 2 lands while the epoch's job waits at the
    gate. Without ``fault`` the run is killed (SIGKILL to its process group) while its job runs;
    with one, the gate opens and the fault kills it. Returns the YAML and the home."""
    yaml = make_pipeline(WORD_COUNT, ch.GATED_COUNT)
    gate, home = ch.Gate(yaml), str(tmp_path / "h")
    feeder = cbp.load(yaml, home=home)
    feeder.feed("words", WORDS[0])
    gate.close()
    proc = background.popen(**ch.cli_process(["run"], home, yaml, fault, on_test_jvm=True))  # with a fault only
    gate.wait_started(lambda: proc.poll() is None)
    assert feeder.feed("words", WORDS[1]).feed == 2  # lands while the job runs without the home's lock
    assert gate.in_progress() and proc.poll() is None
    if fault is None:
        os.killpg(proc.pid, signal.SIGKILL)
    gate.go.touch()
    _, err = proc.communicate()
    assert proc.returncode == -9, err[-2000:]
    status = feeder.status()
    assert [(i["kind"], i["epoch"]) for i in status["interrupted"]] == [("epoch", 1)]
    assert status["stages"]["count"]["epochs"] == 0
    assert status["stages"]["count"]["connectors"]["words"]["pending"] == 2  # feed 2 is kept, pending
    return yaml, home


def _recovered_exactly(yaml: Any, home: str) -> None:
    """The next ``cbp run`` (in this process) re-runs epoch 1 with its inputs, then reads feed 2: the counts of
    both feeds."""
    r = ch.cli_here(["run"], home, yaml=yaml)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "which was interrupted: re-running it with the same inputs" in r.stderr
    p = cbp.load(yaml, home=home)
    assert {x["w"]: x["n"] for x in p.state("count")} == ch.counts(WORDS)
    assert p.epoch_record("count", 1).inputs == {"words": [1]}
    assert p.epoch_record("count", 2).inputs == {"words": [2]}
    assert p.home.pending() is None and not p.home.intentions()


def test_kill_while_the_job_runs_unlocked_and_a_feed_lands(make_pipeline, tmp_path, background):
    """SIGKILL to a run whose epoch's job runs (without the home's lock) while a feed lands: the
    feed is kept; the next run re-runs the epoch with its inputs, then reads the feed; exact."""
    _recovered_exactly(*_killed_with_a_feed_during_its_job(make_pipeline, tmp_path, background, None))


def test_kill_between_the_commit_check_and_its_write(spark, make_pipeline, tmp_path, background):
    """A run killed after its commit re-read the snapshot (with a feed that landed during the job)
    and found no conflict, before it wrote anything: nothing of the epoch was committed, the feed
    is kept, and the next run ends exactly. (``spark``: the session the killed run's driver is, and the
    recovery's.)"""
    _recovered_exactly(*_killed_with_a_feed_during_its_job(make_pipeline, tmp_path, background, "kill:epoch:checked:1"))
