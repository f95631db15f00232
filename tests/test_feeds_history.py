"""Duplicate feeds are warned about, a feed no stage read can be withdrawn (cbp unfeed), and
cbp history / status say per run which feeds each stage epoch read and what it wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from crash_harness import cli_here

import cbp
from cbp.errors import CbpError

ROOT = Path(__file__).resolve().parents[1]

YAML = """
pipeline: counter
flows:
  words: {external: true, schema: {w: string}}
  deltas: {schema: {w: string, d: int}}
stages:
  count:
    translator: MOD:count
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    outputs: [deltas]
    state: {schema: {w: string, n: int}}
"""
CODE = """
def count(key, state, words, out):
    prev = next(state, None)
    n = sum(1 for _ in words)
    out.state.write({"w": key, "n": n + (prev["n"] if prev else 0)})
    out.write("deltas", {"w": key, "d": n})
"""
A = [{"w": "a"}, {"w": "b"}]
B = [{"w": "c"}]


def _cli(*args: str, fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CBP_FAULT"}
    if fault:
        env["CBP_FAULT"] = fault
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "cbp.cli", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_duplicate_feed_warns_and_unfeed_withdraws_it(spark, make_pipeline, tmp_path):
    y = make_pipeline(YAML, CODE)
    home = str(tmp_path / "home")
    p = cbp.load(y, home, spark=spark)
    p.feed("words", A)
    p.run()
    p.feed("words", B, feed_id="b")
    with pytest.warns(cbp.DuplicateFeedWarning, match="feed 3 of flow 'words' has the same records as feed 1"):
        p.feed("words", A)
    heard: list[str] = []
    p.parts.notice.listener = heard.append
    with pytest.raises(CbpError) as e:  # feed 3 retried with an id while pending: refused
        p.feed("words", A, feed_id="again")
    assert e.value.code == "duplicate-feed" and "feed 3" in str(e.value)
    p.feed("words", A, feed_id="again", force=True)  # meant: lands as a feed of its own, no warning
    assert not heard
    assert [d["feed"] for d in p.status()["duplicate_feeds"]] == [3]
    for args, code in [(("words", 1), "feed-read"), (("words", 9), "unknown-feed"), (("deltas", 1), "not-external")]:
        with pytest.raises(CbpError) as e:
            p.unfeed(*args)
        assert e.value.code == code, args
    assert p.unfeed("words", 3) == {"flow": "words", "feed": 3, "increments": [3], "records": 2}
    with pytest.raises(CbpError) as e:
        p.unfeed("words", 3)
    assert e.value.code == "unknown-feed"
    assert p.output("words", epoch=3) == [] and p.status()["duplicate_feeds"] == []
    assert p.status()["stages"]["count"]["connectors"]["words"]["pending"] == 2
    r = _cli(
        "unfeed", str(y), "--home", home, "words", "--feed", "2"
    )  # the command line, with a feed id that may land again
    assert r.returncode == 0 and "withdrew feed 2 of 'words': 1 record(s), increment(s) 2" in r.stdout, r.stderr
    p = cbp.load(y, home, spark=spark)
    assert list(p.feed("words", B, feed_id="b")) == [5]  # withdrawn: its id lands again
    p.run()
    fed = A + A + B  # feeds 1, 4 and 5
    want = pd.DataFrame(fed).groupby("w").size().to_dict()
    assert {r["w"]: r["n"] for r in p.state("count")} == want
    assert sorted(r["w"] for r in p.output("words")) == sorted(r["w"] for r in fed)
    r = _cli("feed", str(y), "--home", home, "words", str(_jsonl(tmp_path, B)))
    assert (
        r.returncode == 0
        and "warning [duplicate-feed]: feed 6 of flow 'words' has the same records as feed 5" in r.stderr
    )
    assert "DuplicateFeedWarning" not in r.stderr  # said once
    r = _cli("status", str(y), "--home", home)
    assert "pending feed 6 of 'words' has the same records as feed 5" in r.stdout


def test_refeed_with_id_of_a_pending_feed_without_one_is_refused(spark, make_pipeline, tmp_path):
    """A feed landed without --id, then the same records with --id while it is pending: the retry is
    refused (duplicate-feed, exit 3, nothing landed); once read, or with --force, such a feed lands. The
    ``cbp feed`` commands' own code in the test's process (``crash_harness.cli_here``: exit code, stdout, stderr)."""
    y = make_pipeline(YAML, CODE)
    home = str(tmp_path / "home")
    f = _jsonl(tmp_path, A)
    assert cli_here(["feed", "words", str(f)], home, y).returncode == 0
    r = cli_here(["feed", "words", str(f), "--id", "f.jsonl"], home, y)
    assert r.returncode == 3 and "[duplicate-feed]" in r.stderr and "feed 1" in r.stderr, r.stderr
    p = cbp.load(y, home, spark=spark)
    assert p.parts.reads.feeds("words") == 1
    p.run()
    assert {r["w"]: r["n"] for r in p.state("count")} == pd.DataFrame(A).groupby("w").size().to_dict()
    with pytest.warns(cbp.DuplicateFeedWarning):
        p.feed("words", A)  # feed 2, no id, pending
    with pytest.raises(CbpError) as e:
        p.feed("words", A, feed_id="x")
    assert e.value.code == "duplicate-feed" and "feed 2" in str(e.value)
    p.run()
    assert list(p.feed("words", A, feed_id="x")) == [3]  # feed 2 was read: the id'd feed is a feed of its own
    r = cli_here(["feed", "words", str(f)], home, y)  # feed 4, no id (warned), pending
    r = cli_here(["feed", "words", str(f), "--id", "y", "--force"], home, y)
    assert r.returncode == 0 and "as feed 5" in r.stdout, r.stderr
    p = cbp.load(y, home, spark=spark)
    p.run()
    assert {r["w"]: r["n"] for r in p.state("count")} == pd.DataFrame(A * 5).groupby("w").size().to_dict()


def _jsonl(tmp_path: Path, recs: list[dict]) -> Path:
    f = tmp_path / "f.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return f


def test_unfeed_killed_reads_as_before_or_after(spark, make_pipeline, tmp_path):
    y = make_pipeline(YAML, CODE)
    for n, fault in enumerate(["kill:unfeed:pending:1", "kill:unfeed:committed:0:1", "kill:unfeed:snapshot:1"]):
        home = str(tmp_path / f"h{n}")
        p = cbp.load(y, home, spark=spark)
        p.feed("words", A)
        p.feed("words", B)
        r = _cli("unfeed", str(y), "--home", home, "words", "--feed", "2", fault=fault)
        assert r.returncode == -9, (fault, r.stderr)
        p = cbp.load(y, home, spark=spark)
        assert sorted(map(str, p.output("words"))) in (sorted(map(str, A + B)), sorted(map(str, A))), fault
        r = _cli("status", str(y), "--home", home)
        assert r.returncode == 0
        p.feed("words", [])  # a change: finishes the interrupted withdrawal
        assert sorted(map(str, p.output("words"))) == sorted(map(str, A)), fault
        assert p.status()["stages"]["count"]["connectors"]["words"]["pending"] == 1


def test_history_lists_runs_feeds_read_and_writes(spark, make_pipeline, tmp_path):
    y = make_pipeline(YAML, CODE)
    home = str(tmp_path / "home")
    p = cbp.load(y, home, spark=spark)
    p.feed("words", A)
    p.run(command="run-1")
    p.feed("words", B)
    p.feed("words", A + B)
    p.run(command="run-2")
    assert p.status()["last_run"]["run"]["command"] == "run-2"
    ev = p.history()
    assert [e["kind"] for e in ev] == ["run", "run"]
    assert ev[1]["epochs"][0]["read"] == {"words": {"increments": [2, 3], "feeds": [2, 3]}}
    assert ev[1]["epochs"][0]["wrote"]["deltas"]["records"] == 3
    p.rewind(1)
    ev = p.history()
    assert [e["kind"] for e in ev] == ["run", "rewind"] and ev[1]["undone"] == {"count": [2]}
    assert ev[1]["undone_epochs"][0]["read"]["words"]["feeds"] == [2, 3]
    r = _cli("history", str(y), "--home", home)
    assert r.returncode == 0 and "run 1: run-1" in r.stdout and "[undone]" in r.stdout
    assert "read words: feeds 2, 3 (increments 2, 3)" in r.stdout
    r = _cli("history", str(y), "--home", home, "--json")
    assert [e["kind"] for e in json.loads(r.stdout)["events"]] == ["run", "rewind"]


def test_a_keyed_flows_feed_cannot_be_withdrawn(make_pipeline, tmp_path):
    """A keyed flow's feed also moved the current row per key: withdrawing it alone would leave the
    keyed table and the flow disagreeing, so it is refused (the opposite change is the way)."""
    y = make_pipeline(
        YAML.replace(
            "words: {external: true, schema: {w: string}}", "words: {external: true, key: [w], schema: {w: string}}"
        ),
        CODE,
    )
    p = cbp.load(y, str(tmp_path / "home"))
    p.feed("words", A)
    with pytest.raises(CbpError) as e:
        p.unfeed("words", 1)
    assert e.value.code == "feed-keyed"
    assert sorted(r["w"] for r in p.output("words")) == ["a", "b"]  # nothing withdrawn


def test_a_feed_hashes_its_records_once_however_many_feeds_came_before(make_pipeline, tmp_path, monkeypatch):
    """A feed with an id hashes its records once (the refusal of a retried delivery and the feed's
    hash entry share it), and reads its hash's entry once: the same count at the 2nd feed as at
    the 30th, whatever the home holds already."""
    from cbp.controller import feeds as feeds_mod

    y = make_pipeline(YAML, CODE)
    p = cbp.load(y, str(tmp_path / "home"))
    hashed: list[int] = []
    read: list[str] = []
    real_hash, real_entry = feeds_mod.content_hash, feeds_mod.Feeds.hash_entry

    def counting_hash(table):
        hashed.append(table.num_rows)
        return real_hash(table)

    def counting_entry(self, flow, digest):
        read.append(digest)
        return real_entry(self, flow, digest)

    monkeypatch.setattr(feeds_mod, "content_hash", counting_hash)
    monkeypatch.setattr(feeds_mod.Feeds, "hash_entry", counting_entry)
    per_feed = []
    for n in range(1, 31):
        hashed.clear()
        read.clear()
        p.feed("words", [{"w": f"w{n}"}, {"w": "a"}], feed_id=f"f-{n}")
        per_feed.append((len(hashed), len(read)))
    assert per_feed == [(1, 1)] * 30
    # without an id: hashed once as well, and a repeat is still told from the hash's entry
    hashed.clear()
    with pytest.warns(cbp.DuplicateFeedWarning if hasattr(cbp, "DuplicateFeedWarning") else UserWarning):
        p.feed("words", [{"w": "w30"}, {"w": "a"}])
    assert len(hashed) == 1
    # the retried delivery of that feed with an id is refused, from the same single hash
    hashed.clear()
    with pytest.raises(CbpError) as e:
        p.feed("words", [{"w": "w30"}, {"w": "a"}], feed_id="late-id")
    assert e.value.code == "duplicate-feed" and len(hashed) == 1
    hist = [json.loads(f.read_text()) for f in (tmp_path / "home").rglob("hashes/*.json")]
    assert sorted(len(h["feeds"]) for h in hist) == [1] * 29 + [2]


def test_feeds_leave_a_due_checkpoint_to_the_next_epoch_but_not_past_the_interval(make_pipeline, tmp_path):
    """A feed's Delta commit writes no checkpoint before the table's interval (100 versions): the
    one that falls due sooner (the commits since the last hold a tenth of its actions) is left to
    the next epoch (``write_due_checkpoints``), so a feed costs the same in a home whose tables
    hold many files as in a new one; past the interval a feed writes it. The flow reads the same."""
    y = make_pipeline(YAML, CODE)
    home = tmp_path / "home"
    p = cbp.load(y, str(home))
    log = home / "flows" / "words" / "_delta_log"
    fed = []

    def checkpoints() -> list[int]:
        return sorted(int(f.name.split(".")[0]) for f in log.glob("*.checkpoint.parquet"))

    for n in range(1, 31):  # a checkpoint was due from the 10th commit on
        fed.append({"w": f"w{n}"})
        p.feed("words", [fed[-1]], feed_id=f"f-{n}")
    assert checkpoints() == []
    assert p.home.write_due_checkpoints() == ["flows/words"]  # what an epoch's commit does next
    first = checkpoints()
    assert len(first) == 1 and p.home.write_due_checkpoints() == []
    for n in range(31, 31 + 110):  # no epoch: the interval bounds the log a reader replays
        fed.append({"w": f"w{n}"})
        p.feed("words", [fed[-1]], feed_id=f"f-{n}")
    assert checkpoints() == [first[0], first[0] + 100]
    assert sorted(r["w"] for r in p.output("words")) == sorted(r["w"] for r in fed)
