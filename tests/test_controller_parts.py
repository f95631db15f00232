"""The controller's parts share one live spec and snapshot (issue 37, item 7): when the snapshot is
swapped (another Pipeline object moved the home on) or the spec is (a changed home read as it was
recorded), every part sees the new one; a Pipeline calls the parts with no layer of forwards
between (issue 47, item 2). The layout rules (no mixins, modules that say what they read and
write) are in test_code_layout.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from cbp.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[1]


def _parts(p):
    return {name: part for name, part in vars(p.parts).items() if hasattr(part, "live")}


def _forwarders():
    spec = importlib.util.spec_from_file_location("forwarders", ROOT / "scripts" / "forwarders.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up
    spec.loader.exec_module(mod)
    return mod


def test_parts_see_the_snapshot_another_writer_committed(tmp_path):
    home = str(tmp_path / "home")
    p = Pipeline(ROOT / "flows" / "url_count.yaml", home)
    q = Pipeline(ROOT / "flows" / "url_count.yaml", home)
    live = p.parts.live
    parts = _parts(p)
    assert {"journal", "landing", "epochs", "scheduler", "reads", "rewind", "upgrade"} <= set(parts)
    assert all(part.live is live for part in parts.values())
    before = live.st
    q.feed("urls", [{"url": "http://a/"}, {"url": "http://b/"}])  # another Pipeline object commits a feed
    assert p.status()["stages"]["url_count"]["connectors"]["urls"] == {"pending": 1, "complete": 1, "records": 2}
    assert live.st is not before and all(part.live.st is live.st for part in parts.values())
    assert p.feed("urls", [{"url": "http://c/"}]) == [2]  # lands on the snapshot q committed, not on a stale one
    q.parts.journal.refresh()
    assert p.parts.scheduler.frames("url_count") == q.parts.scheduler.frames("url_count") == {"urls": [1, 2]}


def test_notes_reach_every_part(tmp_path):
    p = Pipeline(ROOT / "flows" / "url_count.yaml", str(tmp_path / "home"))
    heard: list[str] = []
    p.parts.notice.listener = heard.append
    p.feed("urls", [{"url": "http://a/"}])
    p.feed("urls", [{"url": "http://a/"}])  # a duplicate feed: the feeds part tells the listener
    assert any("duplicate-feed" in m for m in heard)
    assert p.parts.notice.listened


def test_one_layer_between_users_and_the_parts():
    """Pipeline calls the parts themselves (issue 47, item 2): the composition of the parts
    forwards nothing, and no Pipeline member forwards under another name."""
    fwd = _forwarders()
    assert not [m for m in fwd.members(str(ROOT / "cbp" / "controller" / "__init__.py"), "Parts") if m.target]
    assert not [m.name for m in fwd.members(str(ROOT / "cbp" / "pipeline.py"), "Pipeline") if m.renames]
    assert not hasattr(__import__("cbp.controller", fromlist=["x"]), "Controller")


def test_a_change_is_typed_and_its_json_is_what_older_homes_wrote():
    """A commit's targets are typed; their JSON is the pending record's paths every cbp wrote, and
    a path cbp does not know is ``home-corrupt`` (issue 47, item 2)."""
    import pytest

    from cbp.controller.change import Commit, EntryVersion, FlowVersion, IncrementVersion, StateVersion
    from cbp.errors import RuntimeStateError

    old = {
        "table": "flows/w",
        "partition_by": "_inc",
        "adds": [{"path": "_inc=3/a.parquet", "partition": 3, "rows": 2}],
        "removes": [],
        "app": "cbp:count",
        "version": 7,
        "targets": [
            ["stages", "count", "state_version"],
            ["flows", "w", "version"],
            ["flows", "w", "incs", "3", "version"],
            ["@entry", "history/epochs/count/1.json", "state_version"],
        ],
    }
    c = Commit.from_json(old)
    assert c.targets == (
        StateVersion("count"),
        FlowVersion("w"),
        IncrementVersion("w", 3),
        EntryVersion("history/epochs/count/1.json", "state_version"),
    )
    assert c.to_json() == old
    with pytest.raises(RuntimeStateError) as e:
        Commit.from_json({**old, "targets": [["flows", "w", "frames"]]})
    assert e.value.code == "home-corrupt"


def test_only_the_journal_applies_changes():
    """Delta commits are made, and a change's snapshot updates applied, only in the journal."""
    import ast

    calls: dict[str, set[str]] = {}
    for f in sorted((ROOT / "cbp").rglob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in ("commit_once", "write_pending") or ast.unparse(node.func) == "update.apply":
                    calls.setdefault(node.func.attr, set()).add(str(f.relative_to(ROOT)))
    assert calls == {
        "commit_once": {"cbp/controller/journal.py"},
        "write_pending": {"cbp/controller/journal.py"},
        "apply": {"cbp/controller/journal.py"},
    }


def test_a_feed_is_one_typed_change_applied_by_the_journal(tmp_path, monkeypatch):
    """The landing part hands the journal one frozen Change (its Delta commit with typed targets,
    its entries); what the home holds after it equals a fresh home's after the same feeds."""
    import dataclasses

    import pytest

    from cbp.controller.change import Change, FlowVersion, IncrementVersion

    p = Pipeline(ROOT / "flows" / "url_count.yaml", str(tmp_path / "home"))
    seen: list[Change] = []
    real = p.parts.journal.commit

    def commit(change: Change) -> None:
        seen.append(change)
        real(change)

    monkeypatch.setattr(p.parts.journal, "commit", commit)
    p.feed("urls", [{"url": "http://a/"}, {"url": "http://b/"}])
    p.feed("urls", [{"url": "http://c/"}])
    assert [c.kind for c in seen] == ["feed", "feed"]
    assert [c.commits[0].targets for c in seen] == [
        (FlowVersion("urls"), IncrementVersion("urls", 1)),
        (FlowVersion("urls"), IncrementVersion("urls", 2)),
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        seen[0].kind = "gc"  # type: ignore[misc]
    fresh = Pipeline(ROOT / "flows" / "url_count.yaml", str(tmp_path / "fresh"))
    fresh.feed("urls", [{"url": "http://a/"}, {"url": "http://b/"}, {"url": "http://c/"}])
    key = sorted(r["url"] for r in p.output("urls"))
    assert key == sorted(r["url"] for r in fresh.output("urls")) == ["http://a/", "http://b/", "http://c/"]
    assert p.parts.live.st.flows["urls"].incs[2].version == p.parts.live.st.flows["urls"].version


def test_history_entries_are_typed_and_read_every_older_form():
    """Feed, feed-id, collected-increment and rewind entries are frozen records; their JSON is what
    cbp writes, and the forms older homes hold load (issue 47, item 2)."""
    import dataclasses

    import pytest

    from cbp.controller.entries import CollectedEntry, FeedEntry, FeedIdEntry, RewindEntry, parse
    from cbp.errors import RuntimeStateError

    new_feed = {"incs": [3], "records": 2, "id": "a.csv", "seq": 7, "hash": "ab", "duplicate_of": 1}
    assert FeedEntry.from_json(new_feed).to_json() == new_feed
    withdrawn = {**new_feed, "incs": [], "records": 0, "withdrawn": {"incs": [3], "records": 2, "version": 4, "seq": 9}}
    assert FeedEntry.from_json(withdrawn).to_json() == withdrawn
    assert FeedEntry.from_json({"incs": [1, 2]}) == FeedEntry((1, 2))  # format 1
    assert FeedEntry.from_json({**new_feed, "keyed_version": 5}).keyed_version == 5
    for doc in ({"id": "a.csv", "feed": 2, "incs": [2]}, {"id": None, "withdrawn_feed": 2}):
        assert FeedIdEntry.from_json(doc).to_json() == doc
    meta = {"frame": 3, "records": 2, "version": 1, "producer": "feed:3", "complete": True, "srcs": [3]}
    for doc in (
        {"inc": 3, "version": None, "meta": meta},
        {"inc": 3, "version": 4, "meta": meta, "undone": 9, "withdrawn": True},
        {"inc": 3, "version": 4},  # format 1
    ):
        assert CollectedEntry.from_json(doc).to_json() == doc
    old_meta = {k: v for k, v in meta.items() if k != "srcs"}  # before increments kept their sources
    assert CollectedEntry.from_json({"inc": 3, "version": 4, "meta": old_meta}).meta.srcs == []
    rewind = {
        "seq": 12,
        "to": {"stage": "count", "epoch": 1, "seq": 5},
        "at": 1.5,
        "undone": {"count": [{"state_version": 3, "inputs": {"w": [2]}, "outputs": {}, "epoch": 2, "versions": {}}]},
        "collected_undone": {"w": {"2": {"inc": 2, "version": 1}}},
        "restored": {"w": [2]},
    }
    r = RewindEntry.from_json(rewind)
    assert r.undone["count"][0].entry.state_version == 3 and r.collected_undone["w"][2].version == 1
    assert RewindEntry.from_json(r.to_json()) == r
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.seq = 1  # type: ignore[misc]
    with pytest.raises(RuntimeStateError) as e:
        parse(FeedEntry.from_json, {"records": 2}, "history/feeds/w/1.json")
    assert e.value.code == "damaged-home"


def test_a_feed_changes_the_snapshot_only_through_its_change(tmp_path, monkeypatch):
    """Landing a feed leaves ``live.st`` as it was until the journal applies the feed's Change:
    its snapshot updates (counters, the new increment on every reader's connector) and typed entries."""
    from cbp.controller.change import FlowCounters, IncrementAdded
    from cbp.controller.entries import FeedEntry, FeedHashEntry, FeedIdEntry

    p = Pipeline(ROOT / "flows" / "url_count.yaml", str(tmp_path / "home"))
    p.feed("urls", [{"url": "http://a/"}])
    real = p.parts.journal.commit
    seen = []

    def commit(change):
        seen.append((change, p.parts.live.st.to_json()))
        real(change)

    monkeypatch.setattr(p.parts.journal, "commit", commit)
    before = p.parts.live.st.to_json()
    assert p.feed("urls", [{"url": "http://b/"}, {"url": "http://c/"}], feed_id="f2") == [2]
    ((change, at_commit),) = seen
    assert at_commit == before  # nothing changed in place
    counters = [u for u in change.updates if isinstance(u, FlowCounters)]
    (added,) = [u for u in change.updates if isinstance(u, IncrementAdded)]
    assert counters[0] == FlowCounters("urls", 2, 2) and all(u.flow == "urls" for u in change.updates)
    assert (added.inc, added.increment.records, added.readers) == (2, 2, ("url_count",))
    assert [type(e) for _, e in change.entries] == [FeedEntry, FeedIdEntry, FeedHashEntry]
    st = p.parts.live.st
    assert st.flows["urls"].feeds == 2 and st.connector("url_count", "urls") == [1, 2]
    e = p.parts.history.feed(st, "urls", 2)
    assert (e.incs, e.records, e.id, e.seq) == ((2,), 2, "f2", at_commit["seq"] + 1) and e.hash


def test_feed_hash_and_pipeline_entries_are_typed_and_read_as_older_homes_wrote(tmp_path):
    """Feed-hash and recorded-pipeline entries are frozen records whose JSON is what every cbp
    wrote; a home whose entries an older cbp wrote (by hand here, as it wrote them) still opens:
    its feed hashes warn of a repeated feed, its recorded YAML is read back (issue 47, item 2)."""
    import json

    from cbp.controller.entries import FeedHashEntry, PipelineEntry, parse
    from cbp.controller.evolution import pipeline_entry
    from cbp.errors import RuntimeStateError
    from cbp.storage import LAYOUT

    old_hash = {"hash": "ab12", "feeds": [1, 3]}
    assert FeedHashEntry.from_json(old_hash).to_json() == old_hash
    assert FeedHashEntry.from_json(old_hash).without(1) == FeedHashEntry("ab12", (3,))
    old_pipeline = {"n": 1, "kind": "created", "yaml": "pipeline: p\n", "path": "p.yaml", "plan": [], "at": 1.5}
    e = PipelineEntry.from_json(old_pipeline)  # before the entry held the definition
    assert (e.n, e.kind, e.yaml, e.definition) == (1, "created", "pipeline: p\n", None)
    assert PipelineEntry.from_json(e.to_json()) == e
    try:
        parse(PipelineEntry.from_json, {"kind": "created"}, "history/pipeline/1.json")
    except RuntimeStateError as err:
        assert err.code == "damaged-home"
    else:
        raise AssertionError("an entry without its number loaded")

    yaml = ROOT / "flows" / "url_count.yaml"
    home = tmp_path / "home"
    p = Pipeline(yaml, str(home))
    p.feed("urls", [{"url": "http://a/"}])
    (h,) = [f for f in (home / LAYOUT.HISTORY / "flows" / "urls" / "hashes").iterdir()]
    written = json.loads(h.read_text())
    assert written == {"hash": written["hash"], "feeds": [1]} and written["hash"].startswith(h.stem)  # as ever
    h.write_text(json.dumps({"feeds": ["1"], "hash": written["hash"]}))  # numbers as strings: accepted as ever
    rec = p.parts.live.st.shapes["pipeline"]
    entry = home / pipeline_entry(rec["n"])
    doc = json.loads(entry.read_text())
    assert doc["yaml"] == yaml.read_text() and doc["kind"] == "created"
    entry.write_text(json.dumps({k: v for k, v in doc.items() if k not in ("definition", "plan", "path")}))
    q = Pipeline(yaml, str(home))
    heard: list[str] = []
    q.parts.notice.listener = heard.append
    q.feed("urls", [{"url": "http://a/"}])  # the same records again: warned, as feed 1's hash says
    assert any("duplicate-feed" in m for m in heard)
    assert json.loads(h.read_text())["feeds"] == [1, 2]
    assert q.parts.evolution.recorded_spec() is not None  # the recorded YAML, read from the old entry


def test_an_epoch_plan_changes_nothing_in_place(tmp_path, monkeypatch, spark):
    """A stage epoch's plan reads the snapshot and changes nothing in it: the output ids it takes
    and the scheduler's position travel in its Planned value, and its commit makes them typed
    updates of its Change; no part but the journal assigns ``live.st`` (issue 47, item 2)."""
    import ast

    from cbp.controller.change import FlowCounters, SchedSet

    yaml = ROOT / "flows" / "url_count.yaml"
    p = Pipeline(yaml, str(tmp_path / "home"))
    p.feed("urls", [{"url": "http://a/x"}, {"url": "http://b/y"}])
    real_plan, real_commit = p.parts.epochs.plan, p.parts.journal.commit
    seen: list[tuple[str, object, object]] = []

    def plan(*args, **kwargs):
        before = p.parts.live.st.to_json()
        planned = real_plan(*args, **kwargs)
        seen.append(("plan", before, p.parts.live.st.to_json()))
        return planned

    def commit(change):
        seen.append(("commit", change, None))
        real_commit(change)

    monkeypatch.setattr(p.parts.epochs, "plan", plan)
    monkeypatch.setattr(p.parts.journal, "commit", commit)
    (rep,) = p.run()
    (_, before, after), (_, change, _) = seen[0], seen[1]
    assert before == after  # nothing changed in place by the plan
    assert change.kind == "epoch"
    (sched,) = [u for u in change.updates if isinstance(u, SchedSet)]
    assert sched.sched.ran and sched.sched.pos == 1
    out = p.parts.live.spec.stages["url_count"].outputs
    assert {u.flow for u in change.updates if isinstance(u, FlowCounters)} == set(out)
    assert p.parts.live.st.sched == sched.sched
    p.feed("urls", [{"url": "http://a/x"}])
    p.run()  # a second epoch, on the snapshot the first committed
    import pandas as pd

    fed = pd.DataFrame({"url": ["http://a/x", "http://b/y", "http://a/x"]})
    scratch = fed.groupby("url").size().to_dict()
    assert {r["url"]: r["count"] for r in p.state("url_count")} == scratch
    assert rep.records_in == 2 and p.parts.live.st.flows[out[0]].next_inc == 3
    assigned = set()
    for f in sorted((ROOT / "cbp" / "controller").glob("*.py")):
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            for t in targets:
                if isinstance(t, ast.Attribute | ast.Subscript) and ast.unparse(t).startswith("self.live.st"):
                    assigned.add(f.name)
    assert assigned == {"journal.py"}
