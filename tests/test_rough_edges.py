"""Issue 46 rough edges: ``cbp plan`` reads an added input as an input added (not a route_by change
of the others) and a ``signed`` toggle as a change that applies; ``cbp status`` after a rewind to
code equal to today's file says nothing differs; ``cbp state`` of a keyed-row stage shows the key
each row belongs to."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

import cbp
from cbp.cli import main

PIPE = """
pipeline: edges
flows:
  words: {external: true, schema: {w: string, v: string}}
  more: {external: true, schema: {w: string, v: string}}
  counts: {schema: {w: string, n: int}}
stages:
  count:
    translator: MOD:count
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
    outputs: [counts]
"""
MODULE = """
def count(key, state, words, out):
    count2(key, state, words, [], out)


def count2(key, state, words, more, out):
    prev = next(state, None)
    n = sum(r["_diff"] for records in (words, more) for r in records) + (prev["n"] if prev else 0)
    out.state.write({"w": key, "n": n})
    out.counts.write({"w": key, "n": n})
"""
WORDS = [{"w": "a", "v": "x"}, {"w": "b", "v": "y"}, {"w": "a", "v": "z"}]


def test_plan_added_input_is_no_route_by_change(spark, make_pipeline, tmp_path):
    home = str(tmp_path / "h")
    p = cbp.load(make_pipeline(PIPE, MODULE), home=home)
    p.feed("words", WORDS)
    p.run()
    two = PIPE.replace(
        "inputs: [{flow: words, route_by: w}]", "inputs: [{flow: words, route_by: w}, {flow: more, route_by: w}]"
    )
    two = two.replace("MOD:count", "MOD:count2")
    lines = cbp.load(make_pipeline(two, MODULE), home=home).plan().lines()
    assert any("input 'more' added" in line for line in lines) and not any("route_by" in line for line in lines), lines
    moved = two.replace("{flow: words, route_by: w}", "{flow: words, route_by: v}")  # a real change
    lines = cbp.load(make_pipeline(moved, MODULE), home=home).plan().lines()
    assert any("route_by changed" in line for line in lines), lines
    # signed: true on the stage, then on each input instead: a change that applies (no upgrade, no rebuild)
    for text in (
        two.replace("    partitions: 2\n", "    partitions: 2\n    signed: true\n"),
        two.replace("route_by: w}", "route_by: w, signed: true}"),
    ):
        q = cbp.load(make_pipeline(text, MODULE), home=home)
        assert not q.plan().needs_upgrade and {c.verdict for c in q.plan().changes} <= {"applies"}
    q.feed("words", [{"w": "a", "v": "q", "_diff": -1}])
    q.feed("more", [{"w": "c", "v": "x"}])
    q.run()
    assert {r["w"]: r["n"] for r in q.state("count")} == {"a": 1, "b": 1, "c": 1}
    assert all("_key" not in r for r in q.state("count"))  # whole-key state: as it was


def test_status_after_rewind_to_todays_code(spark, make_pipeline, tmp_path, capsys):
    yaml = make_pipeline(PIPE, MODULE)
    home = str(tmp_path / "h")
    module = next(f for f in Path(yaml).parent.iterdir() if f.suffix == ".py")
    today = module.read_text()
    p = cbp.load(yaml, home=home)
    p.feed("words", WORDS[:2])
    p.run()
    module.write_text(today + "\n# a comment: other code, the same counts\n")
    p.feed("words", WORDS[2:])
    p.run()
    assert p.status()["code"]["count"]["changed_at_epoch"] == 2
    module.write_text(today)  # back to the code epoch 1 ran
    assert p.status()["code"]["count"]["file_differs"]  # epoch 2 ran the other code
    p.rewind(1)
    code = p.status()["code"]["count"]
    assert not code["file_differs"] and code["changed_at_epoch"] is None and code["since_epoch"] == 1
    assert main(["status", str(yaml), "--home", home]) == 0
    assert "differs" not in capsys.readouterr().out
    p.run()  # the replay runs today's file: nothing differs
    assert not p.status()["code"]["count"]["file_differs"]
    assert {r["w"]: r["n"] for r in p.state("count")} == {"a": 2, "b": 1}


KEYED = """
pipeline: keyed_edges
flows:
  ops: {external: true, schema: {g: string, rk: string, v: int}}
stages:
  site:
    translator: MOD:put
    partitions: 2
    inputs: [{flow: ops, route_by: g}]
    state: {schema: {rk: string, v: int}, row_key: rk}
"""
KEYED_MOD = """
def put(key, state, ops, out):
    for op in ops:
        out.state.write({"rk": op["rk"], "v": op["v"]})
"""


def test_keyed_rows_state_shows_their_key(spark, make_pipeline, tmp_path, capsys):
    yaml = make_pipeline(KEYED, KEYED_MOD)
    home = str(tmp_path / "h")
    p = cbp.load(yaml, home=home)
    feeds = [
        [{"g": "a", "rk": "x", "v": 1}, {"g": "b", "rk": "x", "v": 1}, {"g": "a", "rk": "y", "v": 2}],
        [{"g": "b", "rk": "x", "v": 5}, {"g": "c", "rk": "y", "v": 2}],
    ]
    for n, ops in enumerate(feeds, 1):
        p.feed("ops", ops)
        p.run()
        df = pd.DataFrame([r for f in feeds[:n] for r in f]).groupby(["g", "rk"]).tail(1)  # from scratch
        want = [{"_key": r["g"], "rk": r["rk"], "v": r["v"]} for r in df.to_dict("records")]
        got = p.state("site")
        assert sorted(got, key=lambda r: (r["_key"], r["rk"])) == sorted(want, key=lambda r: (r["_key"], r["rk"]))
    assert main(["state", str(yaml), "--home", home, "site"]) == 0
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    want = [("a", "x", 1), ("a", "y", 2), ("b", "x", 5), ("c", "y", 2)]
    assert sorted((r["_key"], r["rk"], r["v"]) for r in printed) == want
