"""Flow schema changes through a flow's ``migrate:`` (issue 37 item 3): an external and an internal
flow change types and names in ways cbp cannot make itself; ``cbp upgrade`` runs their live
increments through the functions. The upgraded home is checked against a fresh pipeline fed the
migrated equivalents; a failing function changes nothing; increments collected before the
upgrade read as recorded."""

from __future__ import annotations

import pytest

import cbp

OLD = """
pipeline: fm
flows:
  words: {external: true, schema: {w: string, k: string}}
  changes: {schema: {w: string, n: int}}
  totals: {schema: {w: string, t: int}}
stages:
  count:
    translator: MOD:count
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
    outputs: [changes]
  total:
    translator: MOD:total
    partitions: 1
    inputs: [{flow: changes, route_by: w}]
    state: {schema: {w: string, t: int}}
    outputs: [totals]
"""
NEW = (
    OLD.replace(
        "words: {external: true, schema: {w: string, k: string}}",
        "words: {external: true, schema: {w: string, k: int}, migrate: MOD:parse_k}",
    )
    .replace("changes: {schema: {w: string, n: int}}", "changes: {schema: {w: string, c: int}, migrate: MOD:rename_n}")
    .replace("MOD:count", "MOD:count2")
    .replace("MOD:total", "MOD:total2")
)
MODULE = """
def count(key, state, words, out):
    prev = next(state, None)
    n = sum(int(r["k"]) for r in words) + (prev["n"] if prev else 0)
    out.state.write({"w": key, "n": n})
    out.changes.write({"w": key, "n": n})

def total(key, state, changes, out):
    prev = next(state, None)
    t = max([r["n"] for r in changes] + [prev["t"] if prev else 0])
    out.state.write({"w": key, "t": t})
    out.totals.write({"w": key, "t": t})

def count2(key, state, words, out):
    prev = next(state, None)
    n = sum(r["k"] for r in words) + (prev["n"] if prev else 0)
    out.state.write({"w": key, "n": n})
    out.changes.write({"w": key, "c": n})

def total2(key, state, changes, out):
    prev = next(state, None)
    t = max([r["c"] for r in changes] + [prev["t"] if prev else 0])
    out.state.write({"w": key, "t": t})
    out.totals.write({"w": key, "t": t})

def parse_k(rec):
    return None if rec["w"] == "skip" else {"w": rec["w"], "k": int(rec["k"])}

def rename_n(rec):
    return {"w": rec["w"], "c": rec["n"]}

def broken(rec):
    raise ValueError("no parse for " + rec["k"])

def wrong(rec):
    return {"w": rec["w"], "k": "not an int"}
"""
FEEDS = [
    [{"w": "a", "k": "2"}, {"w": "b", "k": "1"}],
    [{"w": "a", "k": "3"}, {"w": "c", "k": "5"}],
    [{"w": "b", "k": "4"}, {"w": "d", "k": "1"}],
    [{"w": "a", "k": "1"}, {"w": "skip", "k": "9"}, {"w": "e", "k": "7"}],
]
LATER = [{"w": "e", "k": 2}, {"w": "f", "k": 1}]


def _parsed(feed):
    return [{"w": r["w"], "k": int(r["k"])} for r in feed if r["w"] != "skip"]


def _fill(p, feeds):
    """Three feeds run through both stages but the last 'changes' increment (pending for 'total'), a fourth feed
    pending."""
    for recs in feeds[:2]:
        p.feed("words", recs)
        p.run()
    p.feed("words", feeds[2])
    assert len(p.run(max_epochs=1)) == 1 and p.epochs("count") == 3 and p.epochs("total") == 2
    p.feed("words", feeds[3])


def _key(r):
    return sorted((k, str(v)) for k, v in r.items())


def _rows(recs):
    return sorted(map(_key, recs))


def test_flow_migrate_equals_a_fresh_run(spark, make_pipeline, tmp_path):
    old, new = make_pipeline(OLD, MODULE), make_pipeline(NEW, MODULE)
    home = str(tmp_path / "h")
    _fill(cbp.load(old, home=home), FEEDS)
    p = cbp.load(new, home=home)
    plan = p.plan()
    assert not plan.refused and [(c.name, c.kind) for c in plan.changes if c.data] == [
        ("words", "flow-schema"),
        ("changes", "flow-schema"),
    ]
    assert all("with a migration" in line for line in plan.lines() if "flow '" in line)
    p.upgrade()
    assert not cbp.load(new, home=home).plan().needs_upgrade
    assert _rows(p.output("words", epoch=4)) == _rows(_parsed(FEEDS[3]))  # the pending feed, migrated: 'skip' dropped
    p.feed("words", LATER)
    p.run()
    f = cbp.load(new, home=str(tmp_path / "fresh"))
    _fill(f, [_parsed(x) for x in FEEDS])
    f.feed("words", LATER)
    f.run()
    for s in ("count", "total"):
        assert p.epochs(s) == f.epochs(s) and _rows(p.state(s)) == _rows(f.state(s)), s
    for fl, s in (("changes", "count"), ("totals", "total")):
        for e in range(3, p.epochs(s) + 1):  # epochs after the upgrade, and the migrated increment of count's epoch 3
            assert _rows(p.output(fl, epoch=e)) == _rows(f.output(fl, epoch=e)), (fl, e)
    # increments collected before the upgrade read as recorded (the old fields and types), without a traceback
    assert _rows(p.output("words", epoch=1)) == _rows(FEEDS[0])
    assert _rows(p.output("changes", epoch=1)) == _rows([{"w": "a", "n": 2}, {"w": "b", "n": 1}])
    consolidated = p.output("changes", consolidated=True)
    assert (
        {"w": "a", "n": 2} in consolidated and {"w": "b", "c": 5} in consolidated and {"w": "a", "c": 6} in consolidated
    )


@pytest.mark.parametrize("fn", ["broken", "wrong"])
def test_flow_migrate_that_fails_changes_nothing(spark, make_pipeline, tmp_path, fn):
    """A migrate that raises, or returns a record that does not fit, is migrate-failed naming the flow,
    the function and the record; nothing changed: the old YAML still runs on the home."""
    old = make_pipeline(OLD, MODULE)
    home = str(tmp_path / "h")
    p = cbp.load(old, home=home)
    _fill(p, FEEDS)
    before = {s: _rows(p.state(s)) for s in ("count", "total")}
    words_dir = tmp_path / "h" / "flows" / "words"
    files = sorted(map(str, words_dir.rglob("*.parquet")))
    q = cbp.load(make_pipeline(NEW.replace("MOD:parse_k", f"MOD:{fn}"), MODULE), home=home)
    with pytest.raises(cbp.UserCodeError) as e:
        q.upgrade()
    assert e.value.code == "migrate-failed" and "'words'" in str(e.value) and fn in str(e.value)
    assert q.plan().needs_upgrade and sorted(map(str, words_dir.rglob("*.parquet"))) == files
    p = cbp.load(old, home=home)
    assert not p.plan().needs_upgrade and {s: _rows(p.state(s)) for s in before} == before
    p.run()
    assert {r["w"]: r["n"] for r in p.state("count")}["skip"] == 9


def test_flow_migrate_plan_needs_a_new_function(make_pipeline, tmp_path):
    """Without a migrate (or with the one recorded already) a non-widening flow change is refused;
    a keyed flow stays refused with one."""
    old = make_pipeline(OLD, MODULE)
    home = str(tmp_path / "h")
    cbp.load(old, home=home).feed("words", FEEDS[0])
    bare = NEW.replace(", migrate: MOD:parse_k", "")
    assert [c.code for c in cbp.load(make_pipeline(bare, MODULE), home=home).plan().refused] == ["schema-refused"]
    keyed = OLD.replace("words: {external: true,", "words: {external: true, key: [w],")
    home2 = str(tmp_path / "k")
    cbp.load(make_pipeline(keyed, MODULE), home=home2).feed("words", FEEDS[0])
    new_keyed = NEW.replace("words: {external: true,", "words: {external: true, key: [w],")
    assert [c.code for c in cbp.load(make_pipeline(new_keyed, MODULE), home=home2).plan().refused] == ["keyed-refused"]


def test_flow_migrate_runs_once_and_undone_epochs_read_as_recorded(spark, make_pipeline, tmp_path):
    """After a rewind, the restored feeds are migrated by the upgrade and the undone epoch's output
    reads as recorded; the same migrate, recorded, does not run again: a later non-widening change needs a new one."""
    old, new = make_pipeline(OLD, MODULE, module_name="fm_once"), make_pipeline(NEW, MODULE, module_name="fm_once")
    home = str(tmp_path / "h")
    p = cbp.load(old, home=home)
    for recs in FEEDS[:2]:
        p.feed("words", recs)
        p.run()
    p.rewind(1, stage="count")
    p = cbp.load(new, home=home)
    p.upgrade()
    assert _rows(p.undone_output("changes", 2)) == _rows([{"w": "a", "n": 5}, {"w": "c", "n": 5}])
    p.run()
    assert {r["w"]: r["n"] for r in p.state("count")} == {"a": 5, "b": 1, "c": 5}
    again = NEW.replace("schema: {w: string, k: int}", "schema: {w: string, k: string}")
    plan = cbp.load(make_pipeline(again, MODULE, module_name="fm_once"), home=home).plan()
    assert [(c.name, c.code) for c in plan.refused] == [("words", "schema-refused")], plan.lines()


def test_flow_migrate_is_resolved_like_a_stages(make_pipeline):
    """A flow's migrate that does not import, or cannot be called with one record, is a spec error."""
    for fn, code in (("MOD:nowhere", "bad-import"), ("MOD:count", "bad-signature")):
        with pytest.raises(cbp.SpecError) as e:
            cbp.load(make_pipeline(NEW.replace("MOD:parse_k", fn), MODULE))
        assert e.value.code == code and "flow 'words' migrate" in str(e.value)
