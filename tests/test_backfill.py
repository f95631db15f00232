"""Backfill (issue 46, item 4): a stage added with ``backfill: true`` starts from its inputs' whole
consolidated contents, increments other stages read and that were garbage-collected included, or
the plan refuses and names what the home no longer holds. Every backfilled state is compared with a
fresh home fed the same increments with the final YAML, and with a pandas computation from scratch."""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

import cbp
from cbp.cli import main
from cbp.storage import LAYOUT

BASE = """
pipeline: bf
flows:
  words: {external: true, schema: {w: string}}
  deltas: {schema: {w: string, d: int}}
stages:
  count:
    translator: MOD:count
    partitions: 2
    signed: true
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
    outputs: [deltas]
  total:
    translator: MOD:total
    partitions: 1
    signed: true
    inputs: [{flow: deltas, route_by: MOD:one}]
    state: {schema: {t: int}}
"""
ADDED = """
  tally:
    translator: MOD:tally
    partitions: 3
    signed: true
    backfill: true
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
  sums:
    translator: MOD:sums
    partitions: 2
    signed: true
    backfill: true
    inputs: [{flow: deltas, route_by: w}]
    state: {schema: {w: string, d: int}}
"""
MODULE = """
def count(key, state, words, out):
    prev = next(state, None)
    d = sum(r["_diff"] for r in words)
    n = d + (prev["n"] if prev else 0)
    if n:
        out.state.write({"w": key, "n": n})
    if d:
        out.deltas.write({"w": key, "d": d})

def one(record):
    return "all"

def total(key, state, deltas, out):
    prev = next(state, None)
    out.state.write({"t": sum(r["d"] * r["_diff"] for r in deltas) + (prev["t"] if prev else 0)})

def tally(key, state, words, out):
    prev = next(state, None)
    n = sum(r["_diff"] for r in words) + (prev["n"] if prev else 0)
    if n:
        out.state.write({"w": key, "n": n})

def sums(key, state, deltas, out):
    prev = next(state, None)
    d = sum(r["d"] * r["_diff"] for r in deltas) + (prev["d"] if prev else 0)
    if d:
        out.state.write({"w": key, "d": d})

def seen(key, state, words, out):   # unsigned: counts the records it gets, and whether each was +1
    prev = next(state, None)
    rs = list(words)
    out.state.write({"w": key, "n": len(rs) + (prev["n"] if prev else 0),
                     "ones": all(r["_diff"] == 1 for r in rs) and (prev["ones"] if prev else True)})
"""


def signed_feeds(seed: int, n: int) -> list[list[dict]]:
    """``n`` feeds of words with repeats and retractions, never retracting more than was added."""
    rnd = random.Random(seed)
    have: dict[str, int] = {}
    feeds = []
    for _ in range(n):
        feed = []
        for _ in range(rnd.randrange(20, 40)):
            w = f"w{rnd.randrange(12)}"
            feed.append({"w": w})
            have[w] = have.get(w, 0) + 1
        for w in sorted(have):
            if have[w] and rnd.random() < 0.3:
                feed.append({"w": w, "_diff": -1})
                have[w] -= 1
        feeds.append(feed)
    return feeds


def from_scratch(feeds: list[list[dict]]) -> dict[str, int]:
    """Each word's net multiplicity over all feeds (pandas), zeros dropped."""
    df = pd.DataFrame([{"w": r["w"], "d": r.get("_diff", 1)} for f in feeds for r in f])
    g = df.groupby("w")["d"].sum()
    return {w: int(n) for w, n in g.items() if n}


def fresh(make_pipeline, tmp_path: Path, yaml: str, feeds: list[list[dict]], name: str):
    """A fresh home with ``yaml`` fed ``feeds``, a run after each."""
    p = cbp.load(make_pipeline(yaml, MODULE, module_name="bf_mod"), home=str(tmp_path / name))
    for f in feeds:
        p.feed("words", f)
        p.run()
    return p


def _words(p) -> dict[str, int]:
    return {r["w"]: r["n"] for r in p.state("tally")}


def test_added_stage_backfills_collected_increments_with_retractions(spark, make_pipeline, tmp_path, capsys):
    """The issue's scenario: 7 feeds read by 'count' (and collected), then 'tally' and 'sums' added with
    backfill, then 2 more feeds: their states equal a fresh home's and pandas', nothing counted twice."""
    feeds = signed_feeds(46, 9)
    home = str(tmp_path / "h")
    p = fresh(make_pipeline, tmp_path, BASE, feeds[:7], "h")
    before = p.output("words", consolidated=True)
    deltas = p.output("deltas", consolidated=True)
    new = make_pipeline(BASE + ADDED, MODULE, module_name="bf_mod")
    p = cbp.load(new, home=home)
    lines = p.plan().lines()
    stored = sum(len(f) for f in feeds[:7])
    want = f"flow 'words': 7 increment(s), {stored} records stored, {len(before)} records consolidated"
    assert any(want in line and "tally" in line for line in lines), lines
    assert any("flow 'deltas': " in line and f"{len(deltas)} records consolidated" in line for line in lines), lines
    assert main(["plan", str(new), "--home", home]) == 0
    assert want in capsys.readouterr().out
    p.upgrade()
    assert (
        p.output("words", consolidated=True) == before
    )  # the synthetic increment is not the flow's: not counted twice
    assert p.output("deltas", consolidated=True) == deltas
    p.run()
    assert _words(p) == from_scratch(feeds[:7])
    for f in feeds[7:]:
        p.feed("words", f)
        p.run()
    f = fresh(make_pipeline, tmp_path, BASE + ADDED, feeds, "fresh")
    assert _words(p) == _words(f) == from_scratch(feeds)
    assert p.state("sums") == f.state("sums")
    assert {r["w"]: r["d"] for r in p.state("sums")} == from_scratch(feeds)
    assert p.state("count") == f.state("count") and p.state("total") == f.state("total")
    assert p.output("words", consolidated=True) == f.output("words", consolidated=True)
    p.run()  # the synthetic increments were read and collected: still nothing counted twice
    assert p.output("words", consolidated=True) == f.output("words", consolidated=True)
    assert p.output("deltas", consolidated=True) == f.output("deltas", consolidated=True)


def test_unsigned_stage_gets_copies_of_plus_one(spark, make_pipeline, tmp_path):
    """A record whose multiplicity sums to n reaches an unsigned backfilled stage as n records of +1."""
    feeds = [[{"w": "a"}, {"w": "a"}, {"w": "b"}], [{"w": "a"}, {"w": "c"}, {"w": "c", "_diff": -1}], [{"w": "b"}]]
    p = fresh(make_pipeline, tmp_path, BASE, feeds, "h")
    seen = (
        ADDED.split("  sums:")[0]
        .replace("tally", "seen")
        .replace("    signed: true\n", "")
        .replace("state: {schema: {w: string, n: int}}", "state: {schema: {w: string, n: int, ones: bool}}")
    )
    p = cbp.load(make_pipeline(BASE + seen, MODULE, module_name="bf_mod"), home=str(tmp_path / "h"))
    assert any("(read as 5 records of +1: the input is not signed)" in line for line in p.plan().lines())
    p.upgrade()
    p.run()
    assert {r["w"]: (r["n"], r["ones"]) for r in p.state("seen")} == {"a": (3, True), "b": (2, True)}


def test_backfill_refused_when_the_home_no_longer_holds_the_increments(spark, make_pipeline, tmp_path):
    """A collected increment whose files are gone (vacuumed): plan and upgrade refuse, naming the flow
    and the increment; nothing changes; without 'backfill: true' the stage is added empty."""
    feeds = signed_feeds(7, 3)
    home = str(tmp_path / "h")
    p = fresh(make_pipeline, tmp_path, BASE, feeds, "h")
    shutil.rmtree(Path(home) / LAYOUT.increment_dir("words", 2))  # as a VACUUM past the retention would
    new = make_pipeline(BASE + ADDED, MODULE, module_name="bf_mod")
    p = cbp.load(new, home=home)
    refused = p.plan().refused
    assert [c.code for c in refused] == ["backfill-unavailable"]
    assert refused[0].name == "tally" and "flow 'words'" in refused[0].detail and "increment 2" in refused[0].detail
    with pytest.raises(cbp.UsageError) as e:
        p.upgrade()
    assert e.value.code == "plan-refused"
    assert main(["plan", str(new), "--home", home]) == 2
    empty = ADDED.replace("    backfill: true\n", "")
    p = cbp.load(make_pipeline(BASE + empty, MODULE, module_name="bf_mod"), home=home)
    p.run()
    assert p.state("tally") == []


def test_backfill_refused_when_a_record_is_retracted_more_than_added(spark, make_pipeline, tmp_path):
    """A flow whose consolidated contents hold a negative multiplicity (a signed reader let more
    retractions land than additions) cannot start a stage: plan refuses with negative-multiplicity,
    naming the flow; upgrade changes nothing."""
    feeds = [[{"w": "a"}, {"w": "b"}], [{"w": "a", "_diff": -1}, {"w": "b", "_diff": -2}]]
    home = str(tmp_path / "h")
    fresh(make_pipeline, tmp_path, BASE, feeds, "h")
    new = make_pipeline(BASE + ADDED, MODULE, module_name="bf_mod")
    p = cbp.load(new, home=home)
    refused = p.plan().refused
    assert [c.code for c in refused] == ["negative-multiplicity"]
    assert refused[0].name == "tally" and "flow 'words'" in refused[0].detail
    with pytest.raises(cbp.UsageError) as e:
        p.upgrade()
    assert e.value.code == "plan-refused"
    assert "tally" not in cbp.load(make_pipeline(BASE, MODULE, module_name="bf_mod"), home=home).status()["stages"]


def test_readded_stage_backfills(spark, make_pipeline, tmp_path):
    """'tally' runs, is removed (archived), feeds go on (collected), and is added back with backfill:
    its state is rebuilt from the whole contents, as a fresh home's."""
    feeds = signed_feeds(11, 6)
    home = str(tmp_path / "h")
    tally = ADDED.split("  sums:")[0]
    with_tally = BASE + tally.replace("    backfill: true\n", "")
    p = fresh(make_pipeline, tmp_path, with_tally, feeds[:2], "h")
    p = cbp.load(make_pipeline(BASE, MODULE, module_name="bf_mod"), home=home)
    p.upgrade()
    for f in feeds[2:5]:
        p.feed("words", f)
        p.run()
    p = cbp.load(make_pipeline(BASE + tally, MODULE, module_name="bf_mod"), home=home)
    assert any(re.search(r"backfill reads flow 'words': 5 increment", line) for line in p.plan().lines())
    p.upgrade()
    p.feed("words", feeds[5])
    p.run()
    assert _words(p) == from_scratch(feeds)
    assert p.status()["archived"] == {}


SOURCE = """
pipeline: bf_src
flows:
  orders:
    external: true
    source: {delta: "SRC"}
    schema: {order_id: int, customer: string, amount: int}
stages:
  totals:
    translator: MOD:totals
    partitions: 2
    signed: true
    inputs: [{flow: orders, route_by: customer}]
    state: {schema: {customer: string, orders: int, total: int}, grouping: inner}
"""
SOURCE_MOD = """
def totals(customer, state, orders, out):
    prev = next(state, None)
    n, t = (prev["orders"], prev["total"]) if prev else (0, 0)
    for o in orders:
        n += o["_diff"]
        t += o["_diff"] * o["amount"]
    if n:
        out.state.write({"customer": customer, "orders": n, "total": t})
"""


def test_backfill_from_a_delta_source(spark, make_pipeline, tmp_path):
    """A stage added on a Delta source flow after updates and deletes were synced (and collected) starts
    from the source's snapshot as landed: its totals equal a pandas groupby of the source table."""
    from deltalake import write_deltalake
    from test_sources import CDF, _change, _expected, _opts, _orders

    uri = str(tmp_path / "src")
    rnd = random.Random(3)
    write_deltalake(uri, _orders(list(range(20)), rnd), configuration=CDF, storage_options=_opts(uri))
    home = str(tmp_path / "h")
    p = cbp.load(make_pipeline(SOURCE.replace("SRC", uri), SOURCE_MOD, module_name="bf_src"), home=home)
    next_id = [100]
    for v in range(1, 5):
        _change(uri, v, rnd, next_id)
        p.run()
    added = (
        SOURCE
        + """
  again:
    translator: MOD:totals
    partitions: 3
    signed: true
    backfill: true
    inputs: [{flow: orders, route_by: customer}]
    state: {schema: {customer: string, orders: int, total: int}, grouping: inner}
"""
    )
    p = cbp.load(make_pipeline(added.replace("SRC", uri), SOURCE_MOD, module_name="bf_src"), home=home)
    p.upgrade()
    p.run()
    totals = lambda s: {r["customer"]: (r["orders"], r["total"]) for r in p.state(s)}  # noqa: E731
    assert totals("again") == totals("totals") == _expected(uri)
    _change(uri, 5, rnd, next_id)
    p.run()
    assert totals("again") == totals("totals") == _expected(uri)


@pytest.mark.parametrize("fault", ["kill:upgrade:written:1", "kill:upgrade:pending:1", "kill:upgrade:committed:0:1"])
def test_kill_inside_a_backfill_upgrade_leaves_old_or_new(spark, make_pipeline, tmp_path, fault):
    """A 'cbp upgrade' killed after writing the synthetic increments (nothing pending), at its pending
    record, or after one of the flows' commits: the next upgrade and run give the fresh home's states."""
    from crash_harness import cli

    feeds = signed_feeds(5, 4)
    home = str(tmp_path / "h")
    fresh(make_pipeline, tmp_path, BASE, feeds[:3], "h")
    new = make_pipeline(BASE + ADDED, MODULE, module_name="bf_mod")
    r = cli(["upgrade"], home, fault, yaml=new)
    assert r.returncode == -9, r.stderr[-2000:]
    q = cbp.load(new, home=home)
    q.upgrade()  # the old pipeline: upgraded now; a pending upgrade: finished first
    q.feed("words", feeds[3])
    q.run()
    assert _words(q) == from_scratch(feeds)
    assert {r["w"]: r["d"] for r in q.state("sums")} == from_scratch(feeds)
    assert {r["w"]: r.get("_diff", 1) for r in q.output("words", consolidated=True)} == from_scratch(feeds)
