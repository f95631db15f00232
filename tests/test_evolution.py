"""Pipeline evolution (issue 37): plan, upgrade, schema and partition migrations, stages removed
and added back. Every upgraded home is checked against a fresh pipeline run on the same
increments with the new YAML."""

from __future__ import annotations

import shutil

import pytest

import cbp
from cbp.cli import main

COUNT = """
pipeline: evo
flows:
  words: {external: true, schema: {w: string}}
  changes: {schema: {w: string, n: int}}
stages:
  count:
    translator: MOD:count
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
    outputs: [changes]
"""
MODULE = """
def count(key, state, words, out):
    prev = next(state, None)
    n = sum(1 for _ in words) + (prev["n"] if prev else 0)
    out.state.write({"w": key, "n": n})
    out.changes.write({"w": key, "n": int(n)})

def count_x(key, state, words, out):   # a state with a field x that keeps what it had (default or null)
    prev = next(state, None)
    n = sum(1 for _ in words) + (prev["n"] if prev else 0)
    out.state.write({"w": key, "n": n, "x": prev["x"] if prev else 7})
    out.changes.write({"w": key, "n": n})

def count_text(key, state, words, out):  # a state whose count is text (after migrate)
    prev = next(state, None)
    n = sum(1 for _ in words) + (int(prev["c"]) if prev else 0)
    out.state.write({"w": key, "c": str(n)})
    out.changes.write({"w": key, "n": n})

def to_text(row):
    return None if row["w"] == "gone" else {"w": row["w"], "c": str(row["n"])}
"""
FEEDS = [[{"w": "a"}, {"w": "b"}, {"w": "a"}, {"w": "gone"}], [{"w": "b"}, {"w": "c"}], [{"w": "a"}, {"w": "d"}]]

STATE = "state: {schema: {w: string, n: int}}"
CHANGES = {  # name: (replacements in the YAML, translator)
    "add-nullable": ([(STATE, 'state: {schema: {w: string, n: int, x: "int?"}}')], "count_x"),
    "add-default": ([(STATE, "state: {schema: {w: string, n: int, x: {type: int, default: 7}}}")], "count_x"),
    "widen-float": ([(STATE, "state: {schema: {w: string, n: float}}")], "count"),
    "widen-nullable": ([(STATE, 'state: {schema: {w: string, n: "int?"}}')], "count"),
    "partitions": ([("partitions: 2", "partitions: 3")], "count"),
    "partitions-and-field": (
        [("partitions: 2", "partitions: 5"), (STATE, 'state: {schema: {w: string, n: int, x: "int?"}}')],
        "count_x",
    ),
    "migrate": ([(STATE, "state: {schema: {w: string, c: string}}\n    migrate: MOD:to_text")], "count_text"),
}


def _yaml(changes, translator):
    text = COUNT
    for a, b in changes:
        text = text.replace(a, b)
    return text.replace("translator: MOD:count", f"translator: MOD:{translator}")


def _key(r):
    return sorted((k, str(v)) for k, v in r.items())


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_upgrade_equals_a_fresh_run(spark, make_pipeline, tmp_path, change):
    """A home with two epochs, upgraded, one more epoch: state and the last outputs as a fresh run with the new YAML."""
    replace, translator = CHANGES[change]
    old = make_pipeline(COUNT, MODULE)
    new = make_pipeline(_yaml(replace, translator), MODULE)
    home = str(tmp_path / "h")
    p = cbp.load(old, home=home)
    for recs in FEEDS[:2]:
        p.feed("words", recs)
        p.run()
    p = cbp.load(new, home=home)
    with pytest.raises(cbp.UsageError) as e:
        p.run()
    assert e.value.code == "pipeline-changed"
    plan = p.plan()
    assert [c.verdict for c in plan.changes if c.data] == ["migrates"] and not plan.refused and plan.needs_upgrade
    p.upgrade()
    assert not cbp.load(new, home=home).plan().needs_upgrade
    p.feed("words", FEEDS[2])
    p.run()
    if change == "migrate":  # the fresh run starts from the migrated old rows: feed it those first
        fresh_feeds = [[{"w": w} for w in ("a", "a", "b", "b", "c")], FEEDS[2]]
    else:
        fresh_feeds = [FEEDS[0] + FEEDS[1], FEEDS[2]]
    f = cbp.load(new, home=str(tmp_path / "fresh"))
    for recs in fresh_feeds:
        f.feed("words", recs)
        f.run()
    want = f.state("count")
    if (
        change.startswith("add-") or change == "partitions-and-field"
    ):  # keys stored before the upgrade keep the x it gave them (the translator carries x over)
        default = 7 if change == "add-default" else None
        want = [{**r, "x": default if r["w"] in ("a", "b", "c", "gone") else r["x"]} for r in want]
    assert sorted(map(_key, p.state("count"))) == sorted(map(_key, want))
    last = lambda q: sorted(map(_key, q.output("changes", epoch=q.epochs("count"))))  # noqa: E731
    assert last(p) == last(f)


REMOVED = """
pipeline: evo
flows:
  words: {external: true, schema: {w: string}}
  counts: {schema: {w: string, d: int}}
stages:
  count:
    translator: MOD:count
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
    outputs: [counts]
"""
TOTAL = (
    REMOVED
    + """
  total:
    translator: MOD:total
    partitions: 1
    inputs: [{flow: counts, route_by: MOD:one}]
    state: {schema: {t: int}}
"""
)
TOTAL_MODULE = """
def count(key, state, words, out):
    prev = next(state, None)
    d = sum(1 for _ in words)
    out.state.write({"w": key, "n": d + (prev["n"] if prev else 0)})
    out.counts.write({"w": key, "d": d})

def one(record):
    return "all"

def total(key, state, counts, out):
    prev = next(state, None)
    out.state.write({"t": sum(r["d"] for r in counts) + (prev["t"] if prev else 0)})
"""


@pytest.mark.parametrize("how", ["plain", "restore", "backfill", "discard"])
def test_stage_removed_and_added_back_is_never_silently_resumed(spark, make_pipeline, tmp_path, how):
    """The reproduction of issue 37: 3 records, `total` removed, 5 records, `total` back, 2 records:
    t=10 (restored), 10 (backfilled from the whole contents of 'counts'), 2 (started empty on request), or a refusal;
    never 5."""
    full = make_pipeline(TOTAL, TOTAL_MODULE, module_name="evo_total")
    less = make_pipeline(REMOVED, TOTAL_MODULE, module_name="evo_total")
    back = make_pipeline(
        TOTAL.replace("partitions: 1", "partitions: 1\n    backfill: true") if how == "backfill" else TOTAL,
        TOTAL_MODULE,
        module_name="evo_total",
    )
    home = str(tmp_path / "h")
    p = cbp.load(full, home=home)
    p.feed("words", [{"w": "a"}, {"w": "b"}, {"w": "a"}])
    p.run()
    p = cbp.load(less, home=home)
    assert [c.kind for c in p.plan().changes] == ["archive"]
    p.upgrade()
    p.feed("words", [{"w": "c"}] * 5)
    p.run()
    p = cbp.load(back, home=home)
    assert "total" in p.status()["archived"]
    if how == "plain":
        plan = p.plan()
        assert [c.code for c in plan.refused] == ["archived-stage"]
        with pytest.raises(cbp.UsageError) as e:
            p.upgrade()
        assert e.value.code == "plan-refused"
        with pytest.raises(cbp.UsageError) as e:
            p.run()
        assert e.value.code == "pipeline-changed"
        assert main(["plan", str(back), "--home", home]) == 2
        return
    p.upgrade(
        restore_archived=["total"] if how == "restore" else [], discard_archived=["total"] if how == "discard" else []
    )
    p.feed("words", [{"w": "d"}] * 2)
    p.run()
    # backfill reads the whole contents of 'counts' (the first 3 too, read by 'total' and collected before it left)
    assert p.state("total") == [{"t": {"discard": 2, "backfill": 10, "restore": 10}[how]}]
    assert p.status()["archived"] == {}


def test_restore_refused_when_missed_increments_were_collected(spark, make_pipeline, tmp_path):
    """A flow another stage reads loses the increments the archived stage missed: restoring it is refused by code."""
    two = (
        TOTAL
        + """
  again:
    translator: MOD:total
    partitions: 1
    inputs: [{flow: counts, route_by: MOD:one}]
    state: {schema: {t: int}}
"""
    )
    less = two.replace(TOTAL, REMOVED)
    full = make_pipeline(two, TOTAL_MODULE, module_name="evo_total")
    home = str(tmp_path / "h")
    p = cbp.load(full, home=home)
    p.feed("words", [{"w": "a"}])
    p.run()
    p = cbp.load(make_pipeline(less, TOTAL_MODULE, module_name="evo_total"), home=home)
    p.upgrade()
    p.feed("words", [{"w": "b"}])
    p.run()  # 'again' reads the new increment of counts, which is then collected
    p = cbp.load(full, home=home)
    with pytest.raises(cbp.UsageError) as e:
        p.upgrade(restore_archived=["total"])
    assert e.value.code == "archive-increments-collected"
    assert "'backfill: true'" in str(e.value) and "--discard-archived total" in str(e.value)
    # each remedy the message names works: backfill rebuilds 'total' from all of 'counts' (a, b), as a fresh home has it
    backfill = make_pipeline(
        two.replace("  total:\n", "  total:\n    backfill: true\n"), TOTAL_MODULE, module_name="evo_total"
    )
    keep = tmp_path / "h-copy"
    shutil.copytree(home, keep)
    p = cbp.load(backfill, home=home)
    p.upgrade()
    p.run()
    fresh = cbp.load(full, home=str(tmp_path / "fresh"))
    for w in ("a", "b"):
        fresh.feed("words", [{"w": w}])
        fresh.run()
    assert p.state("total") == fresh.state("total") == [{"t": 2}]
    p = cbp.load(full, home=str(keep))
    p.upgrade(discard_archived=["total"])
    p.run()
    assert p.state("total") == []


def test_refused_change_and_read_only_commands_on_a_changed_home(spark, make_pipeline, tmp_path, capsys):
    """string -> int without migrate is refused (exit 2); status/state/output still read the home as recorded."""
    old = make_pipeline(COUNT, MODULE)
    home = str(tmp_path / "h")
    p = cbp.load(old, home=home)
    p.feed("words", FEEDS[0])
    p.run()
    bad = make_pipeline(
        COUNT.replace("changes: {schema: {w: string, n: int}}", "changes: {schema: {w: int, n: int}}").replace(
            STATE, "state: {schema: {w: string, n: string}}"
        ),
        MODULE,
    )
    q = cbp.load(bad, home=home)
    assert sorted(c.code for c in q.plan().refused) == ["schema-refused", "schema-refused"]
    assert main(["plan", str(bad), "--home", home]) == 2
    assert main(["validate", str(bad), "--home", home]) == 2
    assert sorted(r["n"] for r in q.state("count")) == [1, 1, 2]  # as recorded: n is still an int
    assert len(q.output("changes")) == 3
    assert main(["status", str(bad), "--home", home]) == 0
    err = capsys.readouterr().err
    assert "differs from the pipeline recorded" in err
    assert main(["feed", str(bad), "--home", home, "words", "/dev/null"]) == 2


def test_flow_schema_change_rewrites_pending_increments(spark, make_pipeline, tmp_path):
    """A nullable field added to an external flow with a pending increment: the increment is rewritten, the run goes
    on."""
    old = make_pipeline(COUNT, MODULE)
    new = make_pipeline(
        COUNT.replace(
            "words: {external: true, schema: {w: string}}", 'words: {external: true, schema: {w: string, v: "int?"}}'
        ),
        MODULE,
    )
    home = str(tmp_path / "h")
    p = cbp.load(old, home=home)
    p.feed("words", FEEDS[0])
    p.run()
    p.feed("words", FEEDS[1])  # pending
    p = cbp.load(new, home=home)
    assert [c.kind for c in p.plan().changes if c.data] == ["flow-schema"]
    p.run(upgrade=True)
    p.feed("words", [{"w": "a", "v": 3}])
    p.run()
    assert {r["w"]: r["n"] for r in p.state("count")} == {"a": 3, "b": 2, "c": 1, "gone": 1}
    assert sorted(r["w"] for r in p.output("words")) == sorted([r["w"] for r in FEEDS[0] + FEEDS[1]] + ["a"])


def test_translator_change_applies_and_status_shows_it(spark, make_pipeline, tmp_path):
    """A new translator (or a new input) touches no stored data: the run goes on, the home records the
    YAML, status says at which epoch the code changed and warns of a stage waiting on a flow nobody fed."""
    home = str(tmp_path / "h")
    p = cbp.load(make_pipeline(COUNT, MODULE), home=home)
    p.feed("words", FEEDS[0])
    p.run()
    two = COUNT.replace(
        "words: {external: true, schema: {w: string}}",
        "words: {external: true, schema: {w: string}}\n  more: {external: true, schema: {w: string}}",
    )
    two = two.replace(
        "inputs: [{flow: words, route_by: w}]", "inputs: [{flow: words, route_by: w}, {flow: more, route_by: w}]"
    )
    module = MODULE.replace(
        "def count(key, state, words, out):",
        "def count(key, state, words, more, out):\n    words = list(words) + list(more)",
    )
    q = cbp.load(make_pipeline(two, module), home=home)
    plan = q.plan()
    assert not plan.needs_upgrade and {c.verdict for c in plan.changes} == {"applies"}
    assert any("waits for an increment on every input" in line for line in plan.lines())
    q.feed("words", FEEDS[1])
    assert q.run() == []  # 'more' was never fed
    status = q.status()
    assert any("'more', which nobody has fed" in w for w in status["warnings"])
    q.feed("more", [{"w": "a"}])
    q.run()
    status = q.status()
    assert status["code"]["count"]["changed_at_epoch"] == 2 and not status["warnings"]
    assert {r["w"]: r["n"] for r in q.state("count")} == {"a": 3, "b": 2, "c": 1, "gone": 1}
    assert q.parts.evolution.recorded_definition()["stages"]["count"]["inputs"] == ["words", "more"]


def test_migrate_that_fails_changes_nothing(spark, make_pipeline, tmp_path):
    """A migrate function that raises (or returns a record of the wrong shape) is migrate-failed naming the key; the
    home is as it was."""
    home = str(tmp_path / "h")
    p = cbp.load(make_pipeline(COUNT, MODULE), home=home)
    p.feed("words", FEEDS[0])
    p.run()
    before = sorted(map(_key, p.state("count")))
    bad = MODULE + "\ndef broken(row):\n    return {'w': row['w'], 'c': row['n']}   # an int for a string field\n"
    q = cbp.load(
        make_pipeline(
            COUNT.replace(STATE, "state: {schema: {w: string, c: string}}\n    migrate: MOD:broken").replace(
                "translator: MOD:count", "translator: MOD:count_text"
            ),
            bad,
        ),
        home=home,
    )
    with pytest.raises(cbp.UserCodeError) as e:
        q.upgrade()
    assert e.value.code == "migrate-failed" and "key" in str(e.value)
    assert q.plan().needs_upgrade and sorted(map(_key, q.state("count"))) == before
    state_dir = tmp_path / "h" / "stages" / "count" / "state"
    assert not [f for f in state_dir.rglob("*.parquet") if "-u" in f.name]  # the rewrite's files were removed


def test_home_of_an_older_cbp_takes_its_shapes_as_recorded(spark, tmp_path):
    """A home written before pipelines were recorded: its schemas and partitions are the recorded pipeline
    (the same YAML plans nothing; partitions 4 -> 2 plans a rewrite) and its next write records the YAML."""
    import shutil
    from pathlib import Path

    from cbp.controller.plan import PIPELINE

    fixture = Path(__file__).parent / "fixtures" / "home-v1" / "url_count"
    home = tmp_path / "old"
    shutil.copytree(fixture, home)
    yaml = Path(__file__).parents[1] / "flows" / "url_count.yaml"
    p = cbp.load(yaml, home=str(home))
    assert not p.plan().changes and PIPELINE not in p.parts.evolution.committed_snapshot().shapes
    smaller = tmp_path / "url_count.yaml"
    smaller.write_text(yaml.read_text().replace("partitions: 4", "partitions: 2"))
    shutil.copy(yaml.parent / "url_count.py", tmp_path / "url_count.py")
    assert [c.kind for c in cbp.load(smaller, home=str(home)).plan().changes] == ["state-rewrite"]
    p.feed("urls", [{"url": "a"}])
    rec = p.parts.evolution.committed_snapshot().shapes[PIPELINE]
    assert p.home.read_json(rec["entry"])["yaml"] == yaml.read_text()


def test_rewind_refuses_to_cross_an_upgrade_that_changed_storage(spark, make_pipeline, tmp_path):
    """A rewind to before a repartition would put back state files of the old partition count under
    the new YAML: refused (rewind-across-upgrade); a rewind to after the upgrade works."""
    old = make_pipeline(COUNT, MODULE)
    home = str(tmp_path / "home")
    p = cbp.load(old, home, spark=spark)
    for feed in FEEDS[:2]:
        p.feed("words", feed)
        p.run()
    new = old.parent / "new.yaml"
    new.write_text(old.read_text().replace("partitions: 2", "partitions: 3"))
    q = cbp.load(new, home, spark=spark)
    q.upgrade()
    q.feed("words", FEEDS[2])
    q.run()
    q.feed("words", FEEDS[0])
    q.run()
    with pytest.raises(cbp.CbpError) as e:
        q.rewind(1)
    assert e.value.code == "rewind-across-upgrade"
    q.rewind(3)
    q.run()
    fresh = cbp.load(new, str(tmp_path / "fresh"), spark=spark)
    for feed in FEEDS + [FEEDS[0]]:
        fresh.feed("words", feed)
    fresh.run()
    assert sorted(map(str, q.state("count"))) == sorted(map(str, fresh.state("count")))


def test_a_keyed_flows_schema_change_is_refused(make_pipeline, tmp_path):
    """A keyed flow keeps its current rows per key in a table of its own, which an upgrade does
    not migrate: a changed schema or key of a keyed flow holding data is refused, not half-applied."""
    keyed = COUNT.replace(
        "words: {external: true, schema: {w: string}}", "words: {external: true, key: [w], schema: {w: string}}"
    )
    old = make_pipeline(keyed, MODULE)
    home = str(tmp_path / "home")
    cbp.load(old, home).feed("words", [{"w": "a"}])
    new = old.parent / "new.yaml"
    new.write_text(old.read_text().replace("schema: {w: string}}", 'schema: {w: string, v: "int?"}}', 1))
    plan = cbp.load(new, home).plan()
    assert [c.code for c in plan.refused] == ["keyed-refused"]
