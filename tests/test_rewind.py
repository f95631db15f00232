"""cbp rewind: back to after a stage epoch, feeds since kept pending, the next run with fixed code
equal to a fresh run with that code (local and s3:// homes, a multi-stage pipeline with a loopback
flow), undone epochs still readable, refusals with codes, and SIGKILL at every step of a rewind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
from moto_s3 import BUCKET, s3_server  # noqa: F401  (the module's S3 server fixture, named s3)

import cbp
from cbp.errors import CbpError

ROOT = Path(__file__).resolve().parents[1]
CRASH = Path(__file__).resolve().parent / "crash"

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
    if BUG and key == "b":
        n *= 10
    out.state.write({"w": key, "n": n + (prev["n"] if prev else 0)})
    out.write("deltas", {"w": key, "d": n})
"""
FEEDS = [
    [{"w": "a"}, {"w": "b"}],
    [{"w": "b"}, {"w": "c"}],
    [{"w": "c"}, {"w": "b"}, {"w": "b"}],
    [{"w": "a"}, {"w": "d"}],
]


def _versions(tmp_path: Path, tag: str) -> tuple[Path, Path]:
    """The pipeline with the fixed translator and with the buggy one (two modules: Spark's Python
    workers keep a module they imported, so a fix is a module of its own here)."""
    d = tmp_path / f"code-{tag}"
    d.mkdir()
    out = []
    for bug in (False, True):
        name = f"wc_{tag}_{'bug' if bug else 'fix'}".replace("-", "_")
        (d / f"{name}.py").write_text(f"BUG = {bug}\n" + CODE)
        y = d / f"{name}.yaml"
        y.write_text(YAML.replace("MOD", name))
        out.append(y)
    return out[0], out[1]


def _canon(records: list[dict]) -> Counter:
    return Counter(tuple(sorted(r.items())) for r in records)


def _buggy_history(fixed: Path, buggy: Path, home: str, spark) -> None:
    """Epochs 1-2 with the right code, 3-4 after a buggy deploy."""
    for k, f in enumerate(FEEDS):
        p = cbp.load(fixed if k < 2 else buggy, home, spark=spark)
        p.feed("words", f)
        p.run()


def _fresh(fixed: Path, home: str, spark) -> cbp.Pipeline:
    """What the rewound pipeline must equal: feeds 1 and 2 run one by one, then 3 and 4 in one epoch."""
    p = cbp.load(fixed, home, spark=spark)
    for k, f in enumerate(FEEDS):
        p.feed("words", f)
        if k != 2:
            p.run()
    return p


def _rewind_and_compare(tmp_path: Path, home: str, spark, tag: str) -> cbp.Pipeline:
    fixed, buggy = _versions(tmp_path, tag)
    _buggy_history(fixed, buggy, home, spark)
    p = cbp.load(fixed, home, spark=spark)
    first_two = _canon(p.output("deltas", epoch=1)) + _canon(p.output("deltas", epoch=2))
    assert p.state("count")[1] == {"w": "b", "n": 22}  # the bug
    rep = p.rewind(2, stage="count")
    assert rep.undone == {"count": [3, 4]} and rep.pending == {"words": 2}
    assert rep.restored["words"] == [3, 4]  # collected after epoch 2: back from the table's history
    assert p.epochs("count") == 2 and p.status()["stages"]["count"]["connectors"]["words"]["pending"] == 2
    assert p.state("count") == [{"w": "a", "n": 1}, {"w": "b", "n": 2}, {"w": "c", "n": 1}]
    assert _canon(p.output("deltas")) == first_two  # what epochs 1-2 wrote, nothing of 3-4
    assert _canon(p.undone_output("deltas", 3)) == _canon(
        [{"w": "b", "d": 20}, {"w": "c", "d": 1}]
    )  # the undone epoch stays readable
    reps = p.run()
    assert [r.epoch for r in reps] == [3]
    want = _fresh(fixed, str(tmp_path / f"fresh-{tag}"), spark)
    assert p.state("count") == want.state("count")
    assert _canon(p.output("deltas")) == _canon(want.output("deltas"))
    assert _canon(p.output("deltas", epoch=3)) == _canon(want.output("deltas", epoch=3))
    scratch = pd.DataFrame([r for f in FEEDS for r in f]).groupby("w").size()
    assert {r["w"]: r["n"] for r in p.state("count")} == scratch.to_dict()
    d = pd.DataFrame(p.output("deltas")).groupby("w")["d"].sum()
    assert d.to_dict() == scratch.to_dict()
    return p


def test_rewind_then_fixed_code_equals_fresh_run(spark, tmp_path):
    p = _rewind_and_compare(tmp_path, str(tmp_path / "home"), spark, "local")
    recs = p.parts.history.epoch(p.parts.live.st, "count", 3)
    assert recs is not None and recs["inputs"] == {"words": [3, 4]}  # the new epoch 3 read both feeds


def test_rewind_on_s3_home_equals_fresh_run(spark, s3, tmp_path):
    _rewind_and_compare(tmp_path, f"s3://{BUCKET}/homes/{uuid.uuid4().hex[:10]}", spark, "s3")


def test_rewind_refusals_have_codes(spark, tmp_path):
    fixed, buggy = _versions(tmp_path, "refuse")
    home = str(tmp_path / "home")
    _buggy_history(fixed, buggy, home, spark)
    p = cbp.load(fixed, home, spark=spark)
    for args, code in [((7,), "unknown-epoch"), ((-1,), "bad-option"), ((1, "nope"), "unknown-stage")]:
        with pytest.raises(CbpError) as e:
            p.rewind(*args)
        assert e.value.code == code, args
    rep = p.rewind(4)  # nothing after epoch 4: nothing changes
    assert rep.undone == {} and p.epochs("count") == 4
    # a user's VACUUM removed the files of the feeds collected since epoch 2: refused, nothing changed
    gone = p.home.table("flows/words").vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert any("_inc=3" in g for g in gone)
    with pytest.raises(CbpError) as e:
        p.rewind(2)
    assert e.value.code == "rewind-vacuumed" and p.epochs("count") == 4
    assert p.state("count")[1] == {"w": "b", "n": 22}


COMPONENTS_BUG = """
from components import parse as _parse


def parse(key, state, lines, out):
    class Drop:  # the bug: edges with an end divisible by 7 are lost
        def __init__(self, w):
            self.w = w

        def write(self, r):
            if r["src"] % 7 and r["dst"] % 7:
                self.w.write(r)

    class Out:
        edges = Drop(out.edges)

    _parse(key, state, lines, Out())
"""


def test_an_abandoned_rerun_keeps_the_undone_epochs_state_files(spark, tmp_path):
    """After a rewind, a re-run of epoch 3 that fails (its files are dropped) leaves the state files
    of the undone epoch 3: Delta time travel to it still reads, and a later run equals a fresh one."""
    from deltalake import DeltaTable

    fixed, buggy = _versions(tmp_path, "abandon")
    home = str(tmp_path / "home")
    _buggy_history(fixed, buggy, home, spark)
    failing = fixed.with_name("wc_abandon_fails.py")
    failing.write_text(
        "BUG = False\n"
        + CODE.replace(
            "    prev = next(state, None)",
            "    if key == 'c':\n        raise ValueError('boom')\n    prev = next(state, None)",
        )
    )
    (yaml_failing := fixed.with_name("wc_abandon_fails.yaml")).write_text(YAML.replace("MOD", "wc_abandon_fails"))
    p = cbp.load(fixed, home, spark=spark)
    p.rewind(2, stage="count")
    undone = {e["epoch"]: e["state_version"] for e in p.parts.rewind.rewinds()[-1]["undone"]["count"]}
    from cbp.storage import LAYOUT

    uri = p.home.uri(LAYOUT.state("count"))
    before = {e: DeltaTable(uri, version=v).to_pyarrow_table().num_rows for e, v in undone.items()}
    with pytest.raises(CbpError):
        cbp.load(yaml_failing, home, spark=spark).run()
    assert {e: DeltaTable(uri, version=v).to_pyarrow_table().num_rows for e, v in undone.items()} == before
    p = cbp.load(fixed, home, spark=spark)
    p.run()
    want = _fresh(fixed, str(tmp_path / "fresh"), spark)
    assert p.state("count") == want.state("count")


def test_rewind_multi_stage_with_loopback(spark, tmp_path):
    """components.yaml (parse -> cc with its loopback flow -> size): parse epochs 3-4 ran buggy
    code; back to after parse epoch 2, the next run with the fixed code gives networkx's answer
    and a fresh run's state, and no output of an undone epoch is read again."""
    import crash_harness as ch

    # this file imported CRASH's components.py itself (above): a module already loaded from a directory that no
    # pipeline of this process came from is kept, not shipped by value, and a Python worker cannot import it
    sys.modules.pop("components", None)
    d = tmp_path / "code"
    d.mkdir()
    shutil.copy(CRASH / "components.py", d / "components.py")
    (d / "components_bug.py").write_text(COMPONENTS_BUG)
    fixed = d / "components.yaml"
    shutil.copy(CRASH / "components.yaml", fixed)
    buggy = d / "components_bug.yaml"
    buggy.write_text(fixed.read_text().replace("translator: components:parse", "translator: components_bug:parse"))
    incs = ch.increments(seed=ch.SHALLOW[1], n=4, nodes=30, edges=12)
    home = str(tmp_path / "home")
    for k, inc in enumerate(incs):
        p = cbp.load(fixed if k < 2 else buggy, home, spark=spark)
        p.feed("lines", inc)
        p.run()
    assert ch._canon(p.state("cc")) != ch.expected(incs)["cc"]
    p = cbp.load(fixed, home, spark=spark)
    with pytest.raises(CbpError) as e:
        p.rewind(2)
    assert e.value.code == "rewind-needs-stage"
    rep = p.rewind(2, stage="parse")
    assert rep.undone["parse"] == [3, 4] and rep.undone["cc"] and rep.pending == {"lines": 2}
    assert p.epochs("parse") == 2
    p.run()
    assert ch._canon(p.state("cc")) == ch.expected(incs)["cc"]
    assert ch._canon(p.state("size")) == ch.expected(incs)["size"]
    fresh = cbp.load(fixed, str(tmp_path / "fresh"), spark=spark)
    for inc in incs:
        fresh.feed("lines", inc)
        fresh.run()
    for s in ("cc", "size"):
        assert p.state(s) == fresh.state(s)
    for s, fl in (
        ("parse", "edges"),
        ("cc", "moves"),
        ("size", "sizes"),
    ):  # live outputs are exactly the current epochs'
        assert _canon(p.output(fl)) == sum(
            (_canon(p.output(fl, epoch=e)) for e in range(1, p.epochs(s) + 1)), Counter()
        )


# ------------------------------------------------------------------ SIGKILL inside a rewind
KILLS = [
    "kill:rewind:planned:1",
    "kill:rewind:pending:1",
    "kill:rewind:committed:0:1",
    "kill:rewind:committed:1:1",
    "kill:rewind:snapshot:1",
]


def _cli(args: list[str], fault: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CBP_FAULT"}
    if fault:
        env["CBP_FAULT"] = fault
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-m", "cbp.cli", *args], capture_output=True, text=True, env=env, timeout=300
    )


def _view(p: cbp.Pipeline) -> tuple:
    st = p.status()["stages"]["count"]
    return (
        p.epochs("count"),
        st["connectors"]["words"]["pending"],
        p.state("count"),
        sorted(map(str, p.output("deltas"))),
    )


def test_sigkill_at_every_step_of_a_rewind(spark, tmp_path):
    """Killed anywhere in 'cbp rewind', the home reads as before or as after it; the next command
    finishes it (or it is done again), and the result equals an uninterrupted rewind."""
    fixed, buggy = _versions(tmp_path, "kill")
    base = str(tmp_path / "base")
    _buggy_history(fixed, buggy, base, spark)
    before = _view(cbp.load(fixed, base, spark=spark))
    clean = str(tmp_path / "clean")
    shutil.copytree(base, clean)
    import crash_harness as ch

    r = ch.cli_here(["rewind", "--to-epoch", "2"], clean, yaml=fixed)  # the commands not killed: in this process
    assert r.returncode == 0, r.stderr
    assert "rewound to after stage 'count' epoch 2" in r.stdout
    after = _view(cbp.load(fixed, clean, spark=spark))
    assert after != before and after[:2] == (2, 2)
    for n, fault in enumerate(KILLS):
        home = str(tmp_path / f"victim{n}")
        shutil.copytree(base, home)
        r = _cli(["rewind", str(fixed), "--home", home, "--to-epoch", "2"], fault)
        assert r.returncode == -9, (fault, r.stderr)
        seen = _view(cbp.load(fixed, home, spark=spark))
        assert seen in (before, after), fault
        r = ch.cli_here(["rewind", "--to-epoch", "2"], home, yaml=fixed)
        assert r.returncode == 0, (fault, r.stderr)
        assert _view(cbp.load(fixed, home, spark=spark)) == after, fault
        p = cbp.load(fixed, home, spark=spark)
        assert p.home.pending() is None and not p.home.intentions()
    p = cbp.load(fixed, home, spark=spark)  # the last victim runs on with the fixed code: a fresh run's result
    p.run()
    want = _fresh(fixed, str(tmp_path / "fresh"), spark)
    assert p.state("count") == want.state("count") and _canon(p.output("deltas")) == _canon(want.output("deltas"))


FRAMED = """
pipeline: framed
flows:
  events: {external: true, schema: {user: string, day: int}}
  daily: {schema: {user: string, day: int}}
stages:
  pass:
    translator: MOD:passthrough
    partitions: 2
    inputs: [{flow: events, route_by: user}]
    outputs: [daily]
  per_day:
    translator: MOD:per_day
    partitions: 2
    inputs: [{flow: daily, route_by: day, frame_by: day}]
    state: {schema: {day: int, users: list<string>}}
"""
FRAMED_MODULE = """
def passthrough(user, state, events, out):
    for e in sorted(events, key=lambda e: e["day"]):
        out.daily.write(e)

def per_day(day, state, daily, out):
    prev = next(state, None)
    out.state.write({"day": day, "users": sorted(set(prev["users"] if prev else []) | {d["user"] for d in daily})})
"""


def test_rewind_with_framed_increments_open_across_epochs(spark, make_pipeline, tmp_path):
    """A flow framed by a field whose open increment (a day) grew over the undone epochs: back to
    how it was, and the replay frames the same days as a fresh run."""
    y = make_pipeline(FRAMED, FRAMED_MODULE)
    days = [[(1, "a"), (1, "b"), (2, "a")], [(2, "c"), (3, "a")], [(3, "b"), (4, "c")], [(4, "a"), (5, "b")]]
    feeds = [[{"user": u, "day": d} for d, u in f] for f in days]
    p = cbp.load(y, str(tmp_path / "home"), spark=spark)
    for f in feeds:
        p.feed("events", f)
        p.run()
    before = p.state("per_day")
    rep = p.rewind(1, stage="pass")
    assert rep.undone["pass"] == [2, 3, 4] and rep.pending == {"events": 3}
    assert p.state("per_day") == [] and p.epochs("per_day") == 0  # per_day's first epoch came after pass epoch 1
    p.run()
    assert p.state("per_day") == before
    fresh = cbp.load(y, str(tmp_path / "fresh"), spark=spark)
    fresh.feed("events", feeds[0])
    fresh.run()
    for f in feeds[1:]:
        fresh.feed("events", f)
    fresh.run()
    assert p.state("per_day") == fresh.state("per_day")
    scratch = (
        pd.DataFrame([r for f in feeds for r in f]).groupby("day")["user"].apply(lambda u: sorted(set(u))).to_dict()
    )
    # (a day's records can come from two tasks of 'pass' in either order, so a day can be two increments, one
    # still open: each day's users are some of that day's, the same in the replay as in the fresh run)
    assert all(set(r["users"]) <= set(scratch[r["day"]]) for r in p.state("per_day"))
    assert {1, 2, 3} <= {r["day"] for r in p.state("per_day") if r["users"] == scratch[r["day"]]}


def test_rewind_a_home_of_an_earlier_release(spark, tmp_path):
    """tests/fixtures/home-v1 (format 1): its epochs kept no snapshot (rewind-unavailable), but
    back to the beginning works: every feed pending again, the replay counts them all."""
    from fixtures.old_home import replay

    old = Path(__file__).parent / "fixtures" / "home-v1"
    shutil.copytree(old, tmp_path / "old")
    p = replay(str(tmp_path / "old"), spark, steps=[])["url_count"]
    with pytest.raises(CbpError) as e:
        p.rewind(1)
    assert e.value.code == "rewind-unavailable"
    rep = p.rewind(0)
    assert rep.undone == {"url_count": [1, 2]} and rep.pending == {"urls": 3}
    assert p.state("url_count") == [] and p.output("counts") == []
    p.run()
    assert {r["url"]: r["count"] for r in p.state("url_count")} == {"a": 3, "b": 2, "c": 1, "d": 1}
