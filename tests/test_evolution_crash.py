"""Kill points inside 'cbp upgrade' (see cbp/faults.py): a kill anywhere leaves the old pipeline or
the new one, never a mix; the next writer finishes a pending upgrade."""

from __future__ import annotations

import shutil

from crash_harness import cli, cli_here

import cbp

OLD = """
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
NEW = (
    OLD.replace("partitions: 2", "partitions: 3")
    .replace("state: {schema: {w: string, n: int}}", "state: {schema: {w: string, n: int, x: {type: int, default: 7}}}")
    .replace("changes: {schema: {w: string, n: int}}", 'changes: {schema: {w: string, n: int, v: "string?"}}')
    # and a flow migration: the pending feed's field renamed through MOD:rename (the kills cover it too)
    .replace(
        "words: {external: true, schema: {w: string}}",
        "words: {external: true, schema: {word: string}, migrate: MOD:rename}",
    )
    .replace("route_by: w}", "route_by: word}")
)
MODULE = """
def count(key, state, words, out):
    prev = next(state, None)
    n = sum(1 for _ in words) + (prev["n"] if prev else 0)
    out.state.write({"w": key, "n": n, **({"x": prev.get("x", 7)} if prev and "x" in prev else {})})
    out.changes.write({"w": key, "n": n})

def rename(rec):
    return {"word": rec["w"]}
"""
#: files written, nothing pending (old pipeline); one of the two Delta commits made (new, once finished);
#: killed at the pending record and again while the next writer finishes it (new). Each is a new process, its Spark
#: driver the test process's JVM (crash_harness.cli's on_test_jvm: a kill at a driver's point, after the upgrade's
#: jobs); tests/test_crash.py covers the journal's other points.
KILLS = ["kill:upgrade:written:1", "kill:upgrade:committed:0:1", "kill:recover:snapshot:1"]


def _state(p):
    return sorted(p.state("count"), key=lambda r: r["w"])


def test_kill_inside_upgrade_leaves_old_or_new(spark, make_pipeline, tmp_path):
    old = make_pipeline(OLD, MODULE, module_name="evo_crash")
    new = make_pipeline(NEW, MODULE, module_name="evo_crash")
    base = str(tmp_path / "base")
    p = cbp.load(old, home=base)
    for recs in ([{"w": "a"}, {"w": "b"}, {"w": "a"}], [{"w": "c"}]):
        p.feed("words", recs)
        p.run()
    p.feed("words", [{"w": "d"}, {"w": "a"}])  # pending while the upgrade runs (migrated: 'w' renamed 'word')
    before = _state(p)
    clean = str(tmp_path / "clean")
    shutil.copytree(base, clean)
    want = _state_after(cbp.load(new, home=clean))
    for n, fault in enumerate(KILLS):
        home = str(tmp_path / f"h{n}")
        shutil.copytree(base, home)
        if fault.startswith(
            "kill:recover"
        ):  # killed at the pending record, then again while the next writer recovers it
            assert cli(["upgrade"], home, "kill:upgrade:pending:1", yaml=new, on_test_jvm=True).returncode == -9
            assert cli_here(["status"], home, yaml=new).returncode == 0  # a reader does not recover
        r = cli(["upgrade"], home, fault, yaml=new, on_test_jvm=True)  # on this process's JVM (crash_harness.cli)
        assert r.returncode == -9, (fault, r.stderr[-2000:])
        q = cbp.load(new, home=home)
        if q.plan().needs_upgrade:  # the old pipeline, as it was
            assert _state(q) == before, fault
            assert not cbp.load(old, home=home).plan().needs_upgrade
        else:
            assert sorted(r["w"] for r in _state(q)) == sorted(r["w"] for r in before), fault
        assert _state_after(q) == want, fault


def _state_after(p):
    """Upgrade (finishing any pending one first), run the pending feed, the state."""
    p.upgrade()
    p.run()
    assert not p.plan().needs_upgrade
    return _state(p)
