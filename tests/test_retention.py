"""History and log retention (cbp.controller.retention, cbp.storage.logretention): what falls out of the
retention is deleted as epochs commit, nothing live is, results equal a from-scratch computation,
rewind and history reach back exactly to the horizon, a kill during trimming recovers exactly."""

from __future__ import annotations

import collections
import os
from pathlib import Path

import crash_harness as ch
import pytest
from deltalake import DeltaTable

import cbp
from cbp.controller.retention import RECORD, horizon
from cbp.engine.task.bipindex import latest_rows
from cbp.errors import CbpError
from cbp.storage.logretention import parse_log_name

ROOT = Path(__file__).resolve().parents[1]
YAML = ROOT / "flows" / "url_count.yaml"
HIST = "_cbp/history"


def _files(home: Path, rel: str) -> list[str]:
    d = home / rel
    return sorted(os.listdir(d)) if d.is_dir() else []


def _log_versions(home: Path, table: str) -> list[int]:
    return sorted(p[0] for n in _files(home, f"{table}/_delta_log") if (p := parse_log_name(n)) and p[1] == "commit")


def _data_files(home: Path, table: str) -> int:
    return sum(len(fs) for d, _, fs in os.walk(home / table) if "_delta_log" not in d)


def _rounds(p: cbp.Pipeline, fed: list[dict[str, str]], start: int, n: int) -> None:
    """Rounds of one tiny feed + run; after each, the state equals the counts from scratch."""
    for k in range(start, start + n):
        recs = [{"url": f"http://a/{k}"}, {"url": f"http://a/{k // 3}"}]
        fed += recs
        p.feed("urls", recs, feed_id=f"round-{k}")
        p.run()
        got = {r["url"]: r["count"] for r in p.state("url_count")}
        assert got == dict(collections.Counter(r["url"] for r in fed)), f"round {k}"


def _state_results(home: str, spark) -> dict:
    """The crash pipeline's state through cbp and through a plain Delta reader, and recovery's leftovers
    (crash_harness.results reads every epoch's record too, which retention trimmed)."""
    p = cbp.load(ch.YAML, home=home, spark=spark)
    out: dict = {"state": {}, "delta_state": {}}
    for s in ch.STATEFUL:
        out["state"][s] = ch._canon(p.state(s))
        rows = latest_rows(DeltaTable(os.path.join(home, "stages", s, "state")).to_pyarrow_table())
        fields = list(p.spec.stages[s].state_schema.fields)  # type: ignore[union-attr]
        out["delta_state"][s] = ch._canon(rows.select(fields).to_pylist())
    out["leftovers"] = {"pending": p.home.pending() is not None, "intentions": sorted(p.home.intentions())}
    return out


def _code(fn) -> str | None:
    try:
        fn()
    except CbpError as e:
        return e.code
    return None


@pytest.mark.parametrize("keep", [0, 1])
def test_retention_trims_history_and_logs_and_results_equal_from_scratch(spark, tmp_path, keep):
    home = tmp_path / "home"
    p = cbp.load(YAML, home=str(home), spark=spark)
    p.set_retention(epochs=keep)
    fed: list[dict[str, str]] = []
    _rounds(p, fed, 1, 24)
    h = horizon(p.home)
    assert h is not None
    first = h["stages"]["url_count"]
    assert first >= 24 - 2  # trimmed up to the last epoch or so (a pass per epoch at this retention)
    # history entries: only those from the horizon on, a bounded number whatever the epochs run
    epochs = [int(n[:-5]) for n in _files(home, f"{HIST}/stages/url_count/epochs")]
    assert epochs and min(epochs) == first and len(epochs) <= 3
    assert len(_files(home, f"{HIST}/snapshots")) <= 3
    for sub in ("feeds", "feed_ids", "hashes", "collected"):
        assert len(_files(home, f"{HIST}/flows/urls/{sub}")) <= 4, sub
    assert len(_files(home, f"{HIST}/flows/counts/collected")) <= 3
    # Delta logs: started at a checkpoint; the landed feeds every stage read and that were collected: deleted
    for table in ("flows/urls", "stages/url_count/state"):
        versions = _log_versions(home, table)
        assert versions[0] > 0, table
        assert DeltaTable(str(home / table)).version() == versions[-1]
    assert len(_log_versions(home, "flows/urls")) < 30
    assert _data_files(home, "flows/urls") < 24
    # history starts at the horizon; rewinds before it are refused, naming it
    ran = [ep["epoch"] for ev in p.history() if ev["kind"] == "run" for ep in ev["epochs"]]
    assert ran == list(range(first, 25))
    assert _code(lambda: p.rewind(3)) == "rewind-expired"
    assert _code(lambda: p.rewind(0)) == "rewind-expired"
    assert p.epochs("url_count") == 24  # nothing changed
    # a new Pipeline object loads the home; more rounds keep equal to from scratch
    p2 = cbp.load(YAML, home=str(home), spark=spark)
    _rounds(p2, fed, 25, 3)


def test_rewind_to_the_horizon_then_replay_equals_from_scratch(spark, tmp_path):
    home = tmp_path / "home"
    p = cbp.load(YAML, home=str(home), spark=spark)
    p.set_retention(epochs=4)  # a pass every epoch (a quarter of 4)
    fed: list[dict[str, str]] = []
    _rounds(p, fed, 1, 14)
    first = horizon(p.home)["stages"]["url_count"]  # type: ignore[index]
    assert 10 <= first <= 11
    assert _code(lambda: p.rewind(first - 1)) == "rewind-expired"
    report = p.rewind(first)
    assert report.undone == {"url_count": list(range(first + 1, 15))}
    p.run()  # the undone feeds again, with the rewind's record within reach (the logs wait for it)
    got = {r["url"]: r["count"] for r in p.state("url_count")}
    assert got == dict(collections.Counter(r["url"] for r in fed))
    _rounds(p, fed, 15, 6)  # the rewind falls out of the retention; trimming goes on
    assert horizon(p.home)["stages"]["url_count"] > first  # type: ignore[index]
    assert not _files(home, f"{HIST}/rewinds")


def test_home_without_setting_keeps_the_default_then_trims_once_set(spark, tmp_path):
    home = tmp_path / "home"
    p = cbp.load(YAML, home=str(home), spark=spark)
    fed: list[dict[str, str]] = []
    _rounds(p, fed, 1, 4)  # a home as every cbp before retention made it: no setting recorded
    assert not (home / RECORD).exists() and horizon(p.home) is None
    assert len(_files(home, f"{HIST}/stages/url_count/epochs")) == 4  # the default (30 days) keeps them
    p2 = cbp.load(YAML, home=str(home), spark=spark)
    p2.set_retention(days=0)  # every epoch is older than 0 days: the next pass trims all but the last
    _rounds(p2, fed, 5, 1)
    assert horizon(p2.home)["stages"]["url_count"] == 5  # type: ignore[index]
    assert _files(home, f"{HIST}/stages/url_count/epochs") == ["000000000005.json"]
    assert _code(lambda: p2.set_retention(epochs=-1)) == "bad-option"


def test_someone_elses_optimize_and_vacuum_do_not_break_it(spark, tmp_path):
    home = tmp_path / "home"
    p = cbp.load(YAML, home=str(home), spark=spark)
    p.set_retention(epochs=1)
    fed: list[dict[str, str]] = []
    _rounds(p, fed, 1, 12)
    for table in ("flows/urls", "flows/counts"):
        dt = DeltaTable(str(home / table))
        if table == "flows/counts":
            dt.optimize.compact()
        dt.create_checkpoint()
        dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
        dt.cleanup_metadata()
    _rounds(p, fed, 13, 14)
    assert horizon(p.home)["stages"]["url_count"] >= 24  # type: ignore[index]


def test_kill_during_trimming_recovers_exactly(spark, tmp_path):
    """A cyclic pipeline (cc's loopback), retention 1 epoch: SIGKILL at each step of trimming, then
    the same operations go on; the state equals networkx's from scratch and a plain Delta reader's."""
    home = str(tmp_path / "home")
    cbp.load(ch.YAML, home=home, spark=spark).set_retention(epochs=1)
    incs = ch.increments(seed=ch.SHALLOW[0], n=4, nodes=30, edges=12)
    kills = [
        ("run", ["kill:retention:horizon:1"]),
        ("run", ["kill:retention:epoch:2", "kill:retention:feed:1"]),
        ("run", ["kill:retention:log:1"]),
    ]
    plan = ch.plan_chained(len(ch.operations(incs)), kills, spread=False)
    plan = {i + 2: f for i, f in plan.items()}  # from the second run on: there is history to trim
    ch.run_reference(home, incs, spark, count=1)  # the first feed and run, never killed: in this process
    log = ch.run_victim(home, incs, plan, tmp_path, strict=False, done=2, recover_here=True, on_test_jvm=True)
    assert len(log.killed()) >= 3, [a.fault for a in log.attempts]
    got = _state_results(home, spark)
    want = ch.expected(incs)
    assert got["state"] == want and got["delta_state"] == want
    assert got["leftovers"] == {"pending": False, "intentions": []}
    assert horizon(cbp.load(ch.YAML, home=home, spark=spark).home) is not None
