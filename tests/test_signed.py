"""Signed records through the engine: consolidation (+r and -r cancel before any translator sees
them), translators that read and write ``_diff`` (per-key, batch, record-wise), broadcast and
multicast records that carry a retraction, and URLCount with retractions against pandas after
every epoch in both modes, per-key and vectorised, on the small-epoch and the shuffle paths."""

from __future__ import annotations

import random

import pandas as pd
import pytest
from conftest import FLOWS

import cbp
from cbp.errors import UserCodeError
from cbp.testing import Increment, replay

# ------------------------------------------------------------------ URLCount with retractions


def signed_increments(seed: int, n: int = 5) -> list[list[dict]]:
    """Feeds of sightings and retractions of URLs seen before (never more than were seen), and
    in each feed a URL added and taken back at once (it must reach no translator)."""
    rng = random.Random(seed)
    have: dict[str, int] = {}
    out = []
    for j in range(n):
        inc = []
        for _ in range(rng.randint(20, 50)):
            u = f"http://s{rng.randint(0, 4)}.example/p{rng.randint(0, 15)}"
            d = rng.choice([1, 1, 2])
            inc.append({"url": u, "_diff": d} if d != 1 else {"url": u})
            have[u] = have.get(u, 0) + d
        for u in rng.sample(sorted(have), min(len(have), 8)):  # retract some, down to 0 at times
            if have[u] > 0:
                d = rng.randint(1, have[u])
                inc.append({"url": u, "_diff": -d})
                have[u] -= d
        inc += [{"url": f"http://gone/{j}"}, {"url": f"http://gone/{j}", "_diff": -1}]
        rng.shuffle(inc)
        out.append(inc)
    return out


def check_signed_counts(result, increments):
    seen = pd.DataFrame({"url": pd.Series([], dtype=str), "d": pd.Series([], dtype="int64")})
    for step, inc in zip(result.steps, increments):
        df = pd.DataFrame([{"url": r["url"], "d": r.get("_diff", 1)} for r in inc])
        seen = pd.concat([seen, df], ignore_index=True)
        counts = seen.groupby("url")["d"].sum()
        want = sorted(({"url": u, "count": int(c)} for u, c in counts.items() if c != 0), key=lambda r: r["url"])
        assert sorted(step.state["url_count"], key=lambda r: r["url"]) == want
        net = df.groupby("url")["d"].sum()
        called = sorted(u for u, c in net.items() if c != 0)  # a URL whose feed nets to 0 is not called
        assert sorted(step.outputs.get("counts", []), key=lambda r: r["url"]) == [
            {"url": u, "count": int(counts[u])} for u in called
        ]
        assert not any(r["url"].startswith("http://gone/") for r in step.outputs.get("counts", []))


@pytest.mark.parametrize(
    "yaml,mode,path",
    [
        ("url_count.yaml", "direct", "small"),
        ("url_count.yaml", "direct", "shuffle"),
        ("url_count.yaml", "blackbox", "shuffle"),
        ("url_count_vec.yaml", "direct", "small"),
        ("url_count_vec.yaml", "direct", "shuffle"),
        ("url_count_vec.yaml", "blackbox", "shuffle"),
        ("url_count_vec.yaml", "direct", "keygroups"),
    ],
)
def test_url_count_with_retractions_matches_pandas(spark, tmp_path, monkeypatch, yaml, mode, path):
    if path == "keygroups":  # the vectorised translator through key groups, not the columnar path
        monkeypatch.setenv("CBP_COLUMNAR", "0")
    if path != "small":
        monkeypatch.setenv("CBP_SMALL_EPOCH_RECORDS", "0")
    increments = signed_increments(seed=7)
    result = replay(
        FLOWS / yaml,
        [Increment("urls", inc) for inc in increments],
        home=str(tmp_path / "home"),
        mode=mode,
        spark=spark,
    )
    check_signed_counts(result, increments)
    shuffled = [e.report.shuffle_records for s in result.steps for e in s.epochs]
    assert all(n == 0 for n in shuffled) == (path == "small")


def test_url_count_refuses_more_retractions_than_sightings(spark, tmp_path):
    p = cbp.Pipeline(FLOWS / "url_count.yaml", str(tmp_path / "home"), spark=spark)
    p.feed("urls", [{"url": "a"}])
    p.run()
    p.feed("urls", [{"url": "a", "_diff": -2}])
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert e.value.code == "user-code" and "'a'" in str(e.value)
    assert p.state("url_count") == [{"url": "a", "count": 1}]


# ------------------------------------------------------------------ translators, broadcast and multicast
YAML = """
pipeline: signed
flows:
  ins: {external: true, schema: {k: string, op: string, tag: string, addr: "string?"}}
  msgs: {schema: {addr: string, tag: string}}
  seen: {schema: {k: string, tag: string, epoch: int, n: int}}
stages:
  node:
    translator: MOD:node
    signed: true
    partitions: 3
    runnable: any
    inputs:
      - {flow: ins, route_by: "MOD:route"}
      - {flow: msgs, route_by: "MOD:route_msg"}
    state: {schema: {k: string}}
    outputs: [msgs, seen]
"""
MODULE = """
import cbp
import pyarrow as pa

def route(r):
    return cbp.ALL if r["op"] == "all" else cbp.multicast(r["addr"]) if r["op"] == "mc" else r["k"]

def route_msg(m):
    return cbp.multicast(m["addr"])

def node(key, state, ins, msgs, out):
    for r in ins:
        assert type(r["_diff"]) is int
        out.seen.write({"k": key, "tag": r["tag"], "epoch": out.epoch, "n": r["_diff"]})
        if r["op"] == "bind":
            out.associate(key, r["addr"])
        elif r["op"] == "send":
            out.msgs.write({"addr": r["addr"], "tag": r["tag"], "_diff": -2})
        elif r["op"] == "retract":
            out.seen.retract({"k": key, "tag": "R", "epoch": out.epoch, "n": 0})
        elif r["op"] == "bad":
            out.seen.write({"k": key, "tag": "B", "epoch": out.epoch, "n": 0, "_diff": 0})
        elif r["op"] == "badstate":
            out.state.write({"k": key, "_diff": 1})
            return
    for m in msgs:
        out.seen.write({"k": key, "tag": m["tag"], "epoch": out.epoch, "n": m["_diff"]})
    out.state.write({"k": key})

SEEN = pa.schema([("k", pa.string()), ("tag", pa.string()), ("epoch", pa.int64()), ("n", pa.int64()),
                  ("_diff", pa.int64())])

def node_batch(keys, state, ins, msgs, out):
    assert ins.schema.field("_diff").type == pa.int64() and msgs.schema.field("_diff").type == pa.int64()
    seen, sent = [], []
    for r in ins.to_pylist():
        seen.append({"k": r["_key"], "tag": r["tag"], "epoch": out.epoch, "n": r["_diff"], "_diff": 1})
        if r["op"] == "bind":
            out.associate(r["_key"], r["addr"])
        elif r["op"] == "send":
            sent.append({"addr": r["addr"], "tag": r["tag"], "_diff": -2})
        elif r["op"] == "retract":
            seen.append({"k": r["_key"], "tag": "R", "epoch": out.epoch, "n": 0, "_diff": -1})
        elif r["op"] == "bad":
            seen.append({"k": r["_key"], "tag": "B", "epoch": out.epoch, "n": 0, "_diff": 0})
        elif r["op"] == "badstate":
            return {"state": pa.table({"_key": keys, "k": keys, "_diff": pa.array([1] * len(keys))})}
    seen += [{"k": m["_key"], "tag": m["tag"], "epoch": out.epoch, "n": m["_diff"], "_diff": 1}
             for m in msgs.to_pylist()]
    return {"state": pa.table({"_key": keys, "k": keys}), "seen": pa.Table.from_pylist(seen, SEEN),
            "msgs": pa.Table.from_pylist(
                sent, pa.schema([("addr", pa.string()), ("tag", pa.string()), ("_diff", pa.int64())]))}
"""


def _r(k, op, tag, diff=1, addr=None):
    rec = {"k": k, "op": op, "tag": tag, "addr": addr}
    return rec if diff == 1 else {**rec, "_diff": diff}


FEEDS = [
    # a, b, c called; X (to ALL) is a retraction: every called key gets it, -1; Y is added and taken
    # back in the feed (an ALL record too): nobody gets it; d added and taken back: d is not called
    [
        _r("a", "key", "a1"),
        _r("b", "key", "b1", 3),
        _r("c", "key", "c1"),
        _r("", "all", "X", -1),
        _r("", "all", "Y"),
        _r("", "all", "Y", -1),
        _r("d", "key", "d1"),
        _r("d", "key", "d1", -1),
    ],
    # a and b bind to g; c sends M to g (written with _diff -2): the next epoch a and b get M, -2;
    # a multicast from the input to g added and taken back reaches nobody; c retracts a record it writes
    [
        _r("a", "bind", "a2", addr="g"),
        _r("b", "bind", "b2", addr="g"),
        _r("c", "send", "M", addr="g"),
        _r("c", "retract", "c2"),
    ],
]


def expected() -> list[tuple]:
    return sorted(
        [("a", "a1", 1, 1, 1), ("b", "b1", 1, 3, 1), ("c", "c1", 1, 1, 1)]
        + [(k, "X", 1, -1, 1) for k in "abc"]
        + [("a", "a2", 2, 1, 1), ("b", "b2", 2, 1, 1), ("c", "M", 2, 1, 1), ("c", "c2", 2, 1, 1), ("c", "R", 2, 0, -1)]
        + [("a", "M", 3, -2, 1), ("b", "M", 3, -2, 1)]
    )


def _seen(p) -> list[tuple]:
    return sorted((r["k"], r["tag"], r["epoch"], r["n"], r.get("_diff", 1)) for r in p.output("seen"))


@pytest.mark.parametrize(
    "mode,batch,path",
    [
        ("direct", False, "small"),
        ("direct", False, "shuffle"),
        ("blackbox", False, "shuffle"),
        ("direct", True, "small"),
        ("blackbox", True, "shuffle"),
    ],
)
def test_retractions_through_all_and_multicast(spark, tmp_path, make_pipeline, mode, batch, path):
    text = YAML.replace("translator: MOD:node", "translator: MOD:node_batch\n    batch: true") if batch else YAML
    p = cbp.Pipeline(
        make_pipeline(text, MODULE),
        str(tmp_path / "home"),
        mode=mode,
        spark=spark,
        **({"small_epoch_records": 0} if path == "shuffle" else {}),
    )
    for feed in FEEDS:
        p.feed("ins", feed)
        p.run()
    assert _seen(p) == expected()
    assert p.output("msgs") == [{"addr": "g", "tag": "M", "_diff": -2}]


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("op,code", [("bad", "bad-diff"), ("badstate", "bad-diff")])
def test_a_translator_writing_a_bad_diff_fails_the_epoch(spark, tmp_path, make_pipeline, batch, op, code):
    text = YAML.replace("translator: MOD:node", "translator: MOD:node_batch\n    batch: true") if batch else YAML
    p = cbp.Pipeline(make_pipeline(text, MODULE), str(tmp_path / "home"), spark=spark)
    p.feed("ins", [_r("a", op, "t")])
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert e.value.code == code and e.value.stage == "node"
    assert p.output("seen") == [] and p.epochs("node") == 0


RECORDWISE = """
pipeline: rw
flows:
  ins: {external: true, schema: {k: string}}
  outs: {schema: {k: string, n: int}}
stages:
  copy:
    translator: MOD:copy
    signed: true
    inputs: [{flow: ins}]
    outputs: [outs]
"""


def test_a_record_wise_stage_gets_consolidated_records(spark, tmp_path, make_pipeline):
    mod = (
        "def copy(key, state, ins, out):\n    for r in ins:\n"
        "        out.outs.write({'k': r['k'], 'n': r['_diff'], '_diff': r['_diff']})\n"
    )
    p = cbp.Pipeline(make_pipeline(RECORDWISE, mod), str(tmp_path / "home"), spark=spark)
    p.feed("ins", [{"k": "a"}, {"k": "a", "_diff": -1}, {"k": "b", "_diff": -1}, {"k": "c"}, {"k": "c", "_diff": 2}])
    p.run()
    got = p.output("outs")
    assert [r for r in got if r["k"] != "c"] == [
        {"k": "b", "n": -1, "_diff": -1}
    ]  # a: +1 and -1 cancel, never translated
    assert sum(r["n"] for r in got if r["k"] == "c") == 3  # positive records may come consolidated or not
