"""Model features: multi-key RouteBy, OrderBy, outer grouping, dropping state, loopback cycles,
RunnableAny, record-wise stages, max-epochs, garbage collection, and Delta tables any reader can read."""

from __future__ import annotations

import collections

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable

import cbp
from cbp.engine.task.bipindex import latest_rows

INDEX = """
pipeline: inverted
flows:
  docs: {external: true, schema: {id: int, words: list<string>}}
  order: {schema: {word: string, ids: list<int>}}
stages:
  index:
    translator: MOD:index
    partitions: 3
    inputs: [{flow: docs, route_by: "MOD:words", order_by: id}]
    state: {schema: {word: string, ids: list<int>, calls: int}, grouping: outer}
    outputs: [order]
"""
INDEX_MODULE = """
def words(doc):
    return doc["words"]  # a key listed twice ("a", "a") still delivers the record once

def index(word, state, docs, out):
    prev = next(state, None)
    new_ids = [d["id"] for d in docs]
    if new_ids:
        out.order.write({"word": word, "ids": new_ids})
    if word == "drop":
        return  # not re-emitting the state drops it
    ids = (prev["ids"] if prev else []) + new_ids
    out.state.write({"word": word, "ids": ids, "calls": (prev["calls"] if prev else 0) + 1})
"""


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
def test_multikey_route_order_outer_and_drop(spark, make_pipeline, tmp_path, mode):
    p = cbp.load(make_pipeline(INDEX, INDEX_MODULE), home=str(tmp_path / "h"), mode=mode)
    batches = [
        [{"id": 5, "words": ["a", "b", "drop"]}, {"id": 2, "words": ["a", "a"]}, {"id": 9, "words": ["c"]}],
        [{"id": 7, "words": ["b"]}, {"id": 1, "words": ["b", "d"]}],
        [{"id": 3, "words": ["drop", "e"]}],
    ]
    first_epoch: dict[str, int] = {}
    for epoch, batch in enumerate(batches, 1):
        p.feed("docs", batch)
        [rep] = p.run()
        assert rep.epoch == epoch
        for d in batch:
            for w in d["words"]:
                first_epoch.setdefault(w, epoch)
        # OrderBy: each word's new ids arrive sorted by id, whatever the feed order
        for r in p.output("order", epoch=epoch):
            assert r["ids"] == sorted(r["ids"])
    state = {r["word"]: r for r in p.state("index")}
    assert "drop" not in state
    expected_ids = collections.defaultdict(list)
    for batch in batches:
        for d in sorted(batch, key=lambda d: d["id"]):
            for w in sorted(set(d["words"])):
                expected_ids[w].append(d["id"])
    assert {w: r["ids"] for w, r in state.items()} == {w: ids for w, ids in expected_ids.items() if w != "drop"}
    # outer grouping: every stored key is called in every epoch after it appeared
    assert {w: r["calls"] for w, r in state.items()} == {w: 4 - e for w, e in first_epoch.items() if w != "drop"}


WALK = """
pipeline: walk
flows:
  start: {external: true, schema: {node: int, hops: int}}
  msg: {schema: {node: int, hops: int}}
  visits: {schema: {node: int, count: int}}
stages:
  walk:
    translator: MOD:walk
    runnable: any
    partitions: 2
    inputs: [{flow: start, route_by: node}, {flow: msg, route_by: node}]
    state: {schema: {node: int, count: int}}
    outputs: [msg, visits]
    params: {modulus: 17}
"""
WALK_MODULE = """
def walk(node, state, start, msg, out):
    prev = next(state, None)
    count = prev["count"] if prev else 0
    for m in list(start) + list(msg):
        count += 1
        if m["hops"] > 0:
            out.msg.write({"node": (node * 3 + 1) % out.params["modulus"], "hops": m["hops"] - 1})
    out.state.write({"node": node, "count": count})
    out.visits.write({"node": node, "count": count})
"""


def simulate_walk(starts):
    visits = collections.Counter()
    frontier = list(starts)
    epochs = 0
    while frontier:
        epochs += 1
        nxt = []
        for node, hops in frontier:
            visits[node] += 1
            if hops > 0:
                nxt.append(((node * 3 + 1) % 17, hops - 1))
        frontier = nxt
    return dict(visits), epochs


def test_loopback_cycle_runs_to_quiescence_and_resumes(spark, make_pipeline, tmp_path):
    path = make_pipeline(WALK, WALK_MODULE)
    p = cbp.load(path, home=str(tmp_path / "h"))
    p.feed("start", [{"node": 1, "hops": 6}, {"node": 4, "hops": 2}])
    reps = p.run(max_epochs=3)
    assert len(reps) == 3
    assert p.status()["stages"]["walk"]["runnable"] is True
    reps += cbp.load(path, home=str(tmp_path / "h")).run()  # a new controller resumes from the snapshot
    expected, n_epochs = simulate_walk([(1, 6), (4, 2)])
    assert [r.epoch for r in reps] == list(range(1, n_epochs + 1))
    assert {r["node"]: r["count"] for r in p.state("walk")} == expected
    assert p.status()["stages"]["walk"]["runnable"] is False
    # the loopback flow's consumed increments were garbage-collected, yet stay readable per epoch
    dt = DeltaTable(str(tmp_path / "h" / "flows" / "msg"))
    assert dt.to_pyarrow_table().num_rows == 0
    assert sorted(p.output("msg", epoch=1), key=lambda r: r["node"]) == [
        {"node": 4, "hops": 5},
        {"node": 13, "hops": 1},
    ]


PIPE = """
pipeline: words
flows:
  lines: {external: true, schema: {text: string}}
  words: {schema: {w: string}}
  counts: {schema: {w: string, n: int}}
stages:
  split:
    translator: MOD:split
    inputs: [lines]
    outputs: [words]
  count:
    translator: MOD:count
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
    outputs: [counts]
"""
PIPE_MODULE = """
def split(key, state, lines, out):
    assert key is None  # RouteByRcd: each record is its own group
    for line in lines:
        for w in line["text"].split():
            out.words.write({"w": w.lower()})

def count(w, state, words, out):
    prev = next(state, None)
    n = sum(1 for _ in words) + (prev["n"] if prev else 0)
    out.state.write({"w": w, "n": n})
    out.counts.write({"w": w, "n": n})
"""


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
def test_recordwise_then_stateful_chain(spark, make_pipeline, tmp_path, mode):
    p = cbp.load(make_pipeline(PIPE, PIPE_MODULE), home=str(tmp_path / "h"), mode=mode)
    texts = [["The cat", "the dog and THE cat"], ["a dog"], ["cat cat cat", "", "z"]]
    all_words: list[str] = []
    for batch in texts:
        p.feed("lines", [{"text": t} for t in batch])
        reps = p.run()
        assert [r.stage for r in reps] == ["split", "count"]
        all_words += [w.lower() for t in batch for w in t.split()]
        expected = pd.Series(all_words).value_counts().to_dict()
        assert {r["w"]: r["n"] for r in p.state("count")} == expected
    status = p.status()["stages"]
    assert all(c["pending"] == 0 for s in status.values() for c in s["connectors"].values())


def test_state_table_is_plain_delta(spark, make_pipeline, tmp_path):
    p = cbp.load(make_pipeline(PIPE, PIPE_MODULE), home=str(tmp_path / "h"))
    for batch in (["x y x"], ["y z"], ["x"]):
        p.feed("lines", [{"text": t} for t in batch])
        p.run()
    uri = str(tmp_path / "h" / "stages" / "count" / "state")
    dt = DeltaTable(uri)
    rows = latest_rows(pa.table(dt.to_pyarrow_table()))
    assert sorted((r["w"], r["n"]) for r in rows.to_pylist()) == [("x", 3), ("y", 2), ("z", 1)]
    # Spark reads the same files
    df = spark.read.parquet(*dt.file_uris())
    assert df.where("_alive").select("w").distinct().count() == 3
    # output flows are Delta tables too; terminal outputs are kept
    counts = DeltaTable(str(tmp_path / "h" / "flows" / "counts")).to_pyarrow_table()
    assert counts.num_rows == 2 + 2 + 1  # the keys that changed in each epoch


FRAMED = """
pipeline: framed
flows:
  events: {external: true, schema: {user: string, day: int}}
  daily: {schema: {user: string, day: int}}
  totals: {schema: {day: int, users: int}}
stages:
  pass:
    translator: MOD:passthrough
    inputs: [events]
    outputs: [daily]
  per_day:
    translator: MOD:per_day
    partitions: 2
    inputs: [{flow: daily, route_by: day, frame_by: day}]
    state: {schema: {day: int, users: int}}
    outputs: [totals]
"""
FRAMED_MODULE = """
def passthrough(key, state, events, out):
    for e in events:
        out.daily.write(e)

def per_day(day, state, daily, out):
    prev = next(state, None)
    n = len({d["user"] for d in daily}) + (prev["users"] if prev else 0)
    out.state.write({"day": day, "users": n})
    out.totals.write({"day": day, "users": n})
"""


def test_frame_by_on_a_stage_output(spark, make_pipeline, tmp_path):
    """A stage's output flow framed by a field: one increment per day, complete once a later day appears."""
    p = cbp.load(make_pipeline(FRAMED, FRAMED_MODULE), home=str(tmp_path / "h"))
    p.feed("events", [{"user": "a", "day": 1}, {"user": "b", "day": 1}])
    reps = p.run()
    assert [r.stage for r in reps] == ["pass"]  # day 1 is not complete yet
    p.feed("events", [{"user": "c", "day": 2}])
    reps = p.run()
    assert [r.stage for r in reps] == ["pass", "per_day"]
    assert p.output("totals") == [{"day": 1, "users": 2}]
    frames = p.parts.scheduler.frames("per_day")
    assert frames == {"daily": []}  # day 2 is open
    p.feed("events", [{"user": "d", "day": 2}])  # pass epoch 3 extends the open day-2 increment
    p.run()
    assert p.parts.scheduler.frames("per_day") == {"daily": []}
    assert p.output("daily", epoch=2) == [{"user": "c", "day": 2}]  # only what that epoch wrote
    assert p.output("daily", epoch=3) == [{"user": "d", "day": 2}]
    assert sorted(r["user"] for r in p.output("daily")) == [
        "a",
        "b",
        "c",
        "d",
    ]  # day 1 consumed and collected: by time travel
    assert sorted(r["user"] for r in p.output("daily", epoch=1)) == ["a", "b"]  # time travel
    with pytest.raises(cbp.UsageError, match="has not run epoch 9"):
        p.output("daily", epoch=9)
    p.feed("events", [{"user": "e", "day": 3}])
    p.run()
    assert p.output("totals") == [{"day": 1, "users": 2}, {"day": 2, "users": 2}]


KV = """
pipeline: kv
flows:
  ops: {external: true, schema: {k: string, v: "int?"}}
  seen: {schema: {k: string, prev: "int?"}}
stages:
  kv:
    translator: MOD:kv
    partitions: 2
    inputs: [{flow: ops, route_by: k}]
    state: {schema: {k: string, v: int}}
    outputs: [seen]
"""
KV_MODULE = """
def kv(k, state, ops, out):
    prev = next(state, None)
    out.seen.write({"k": k, "prev": prev["v"] if prev else None})
    v = prev["v"] if prev else None
    for op in ops:
        v = op["v"]          # None deletes the key
    if v is not None:
        out.state.write({"k": k, "v": v})
"""


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
def test_updates_deletes_and_both_kinds_of_compaction(spark, make_pipeline, tmp_path, mode):
    """The index view (what translate reads) and the Delta view (any reader) agree with a dict model.
    Black-box mode (its state read whole by each epoch's job, no index) on the first 8 of the 15 increments:
    updates and deletes of hot and cold keys alike; the compactions are direct mode's, asserted there."""
    import glob
    import random

    from cbp.testing import Increment, replay

    rng = random.Random(3)
    keys = [f"k{i}" for i in range(300)]
    incs = [[{"k": k, "v": i} for i, k in enumerate(keys)]]  # a big first increment: the base
    for step in range(14 if mode == "direct" else 7):
        incs.append(
            [
                {"k": rng.choice(keys[:60] if step % 2 else keys), "v": rng.choice([None, step, step + 1])}
                for _ in range(rng.randint(20, 70))
            ]
        )
    r = replay(
        make_pipeline(KV, KV_MODULE),
        [Increment("ops", i) for i in incs],
        home=str(tmp_path / "h"),
        mode=mode,
        max_state_files=3,
    )
    model: dict[str, int] = {}
    for step, inc in zip(r.steps, incs):
        expect_prev = {op["k"]: model.get(op["k"]) for op in inc}
        assert {x["k"]: x["prev"] for x in step.outputs["seen"]} == expect_prev
        for op in inc:
            if op["v"] is None:
                model.pop(op["k"], None)
            else:
                model[op["k"]] = op["v"]
        assert {x["k"]: x["v"] for x in step.state["kv"]} == model
    if mode == "direct":
        log = "".join(
            open(f).read() for f in glob.glob(str(tmp_path / "h" / "stages" / "kv" / "state" / "_delta_log" / "*.json"))
        )
        assert "-merged-" in log and "-compact-" in log  # delta-only and full compactions both happened


@pytest.mark.parametrize("cache_mb", [0, 64])
def test_inner_reads_through_row_groups_or_cache(spark, make_pipeline, tmp_path, cache_mb):
    """Small row groups: with the cache off, an inner epoch reads only the row groups of its keys
    (counted by the tasks: at most one row group per key it reads, of 100+ in the state)."""
    import random

    p = cbp.Pipeline(
        make_pipeline(KV, KV_MODULE),
        home=str(tmp_path / "h"),
        state_row_group=4,
        state_cache_mb=cache_mb,
        max_state_files=3,
    )
    rng = random.Random(9)
    model: dict[str, int] = {}
    batches = [[{"k": f"k{i}", "v": i} for i in range(400)]]
    batches += [
        [{"k": f"k{rng.randint(0, 450)}", "v": rng.choice([None, s, -s])} for _ in range(rng.randint(1, 6))]
        for s in range(1, 12)
    ]
    for batch in batches:
        p.feed("ops", batch)
        [rep] = p.run()
        seen = {x["k"]: x["prev"] for x in p.output("seen", epoch=rep.epoch)}
        assert seen == {op["k"]: model.get(op["k"]) for op in batch}
        for op in batch:
            if op["v"] is None:
                model.pop(op["k"], None)
            else:
                model[op["k"]] = op["v"]
        assert rep.keys_read == sum(1 for k in {op["k"] for op in batch} if k in seen and seen[k] is not None)
        if cache_mb == 0:  # each key's newest row is in one row group: at most one read per key that has state
            assert rep.row_groups_read <= rep.keys_read, (rep.row_groups_read, rep.keys_read)
            assert rep.row_groups_read >= (1 if rep.keys_read else 0)
    assert {x["k"]: x["v"] for x in p.state("kv")} == model


def test_runnable_state_is_kept_between_calls(spark, make_pipeline, tmp_path):
    """A Runnable's state survives "not runnable" answers (and in-place changes to it), across processes."""
    from conftest import WORD_COUNT, WORD_COUNT_MODULE

    module = (
        WORD_COUNT_MODULE
        + """
def patient(frames, state):
    state = state or {"asked": 0}
    state["asked"] += 1  # changed in place on purpose
    if state["asked"] < 3 or not frames["words"]:
        return set(), set(), state
    return {"words"}, {"words"}, state
"""
    )
    path = make_pipeline(WORD_COUNT + "    runnable: MOD:patient\n", module)
    home = str(tmp_path / "h")
    cbp.load(path, home=home).feed("words", [{"w": "a"}])
    assert cbp.load(path, home=home).run() == []  # asked 1
    assert cbp.load(path, home=home).run() == []  # asked 2
    [rep] = cbp.load(path, home=home).run()  # asked 3: runs
    assert rep.stage == "count" and cbp.load(path, home=home).state("count") == [{"w": "a", "n": 1}]


MUTATE = """
pipeline: mutate
flows:
  words: {external: true, schema: {w: string, doc: string}}
stages:
  tally:
    translator: MOD:tally
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int, docs: list<string>, seen: json}}
"""
MUTATE_MODULE = """
def tally(w, state, words, out):
    prev = next(state, None) or {"w": w, "n": 0, "docs": [], "seen": {"docs": []}}
    for r in words:           # the old state changed in place, then written back
        prev["n"] += 1
        prev["docs"].append(r["doc"])
        prev["seen"]["docs"].append(r["doc"])
    out.state.write(prev)
"""


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
@pytest.mark.parametrize("cache_mb", [0, 64])
def test_state_changed_in_place_is_written(spark, make_pipeline, tmp_path, mode, cache_mb):
    """A translator that changes its old state record in place (a scalar, a list, a JSON value)
    and writes it back: every change is kept, as if it had built a new record."""
    p = cbp.Pipeline(make_pipeline(MUTATE, MUTATE_MODULE), home=str(tmp_path / "h"), mode=mode, state_cache_mb=cache_mb)
    fed: list[dict[str, str]] = []
    for i in range(4):
        inc = [{"w": w, "doc": f"d{i}{j}"} for j, w in enumerate(["a", "b", "a", "c"][: i + 2])]
        fed += inc
        p.feed("words", inc)
        rep = p.run()
        assert rep[0].keys_written == len({r["w"] for r in inc})
    want = collections.defaultdict(list)
    for r in fed:
        want[r["w"]].append(r["doc"])
    got = {r["w"]: r for r in p.state("tally")}
    assert {w: (r["n"], sorted(r["docs"]), sorted(r["seen"]["docs"])) for w, r in got.items()} == {
        w: (len(d), sorted(d), sorted(d)) for w, d in want.items()
    }


def test_a_runnable_s_counts_must_be_whole_numbers():
    """``{flow: 1.5}`` was read as 1 and ``{flow: -1}`` as 0, without a word."""
    from cbp.model import normalize_runnable_result

    frames = {"a": [1, 2], "b": [1]}
    assert normalize_runnable_result(({"a": 2, "b": 0}, {"a": 1}, None), frames, "w")[:2] == ({"a": 2}, {"a": 1})
    for bad in ({"a": 1.5}, {"a": -1}, {"a": True}, {"a": "1"}):
        with pytest.raises(TypeError, match="whole number"):
            normalize_runnable_result((bad, set(), None), frames, "w")
