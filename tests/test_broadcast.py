"""Broadcast (ALL) and multicast routing (paper 001 §2.3, §4.5.3): who gets what, one copy per partition.

A stage keyed by ``k`` logs every record it is given (``seen``); the expected delivery sets are
written out by hand from the semantics, and direct mode must equal black-box mode.
"""

from __future__ import annotations

import pytest

import cbp
from cbp.errors import SpecError, UserCodeError

YAML = """
pipeline: bcast
flows:
  ins: {external: true, schema: {k: string, op: string, tag: string, addr: "string?"}}
  msgs: {schema: {addr: string, tag: string}}
  seen: {schema: {k: string, flow: string, tag: string, epoch: int}}
stages:
  node:
    translator: MOD:node
    partitions: 3
    runnable: any
    inputs:
      - {flow: ins, route_by: "MOD:route"}
      - {flow: msgs, route_by: "MOD:route_msg"}
    state: {schema: {k: string}, grouping: GROUPING}
    outputs: [msgs, seen]
"""
MODULE = """
import cbp

def route(r):
    op = r["op"]
    if op == "all":
        return cbp.ALL
    if op == "state":
        return cbp.broadcast("state")
    if op == "ins":
        return cbp.broadcast("ins")
    if op == "mc":
        return cbp.multicast(r["addr"])
    if op == "bad":
        return cbp.broadcast("nope")
    if op == "all2":  # the same broadcast twice: one copy
        return [cbp.ALL, cbp.ALL]
    if op == "mc2":
        return [cbp.multicast(r["addr"]), cbp.multicast(r["addr"])]
    if op in ("deep", "deepmc"):  # nested deeper than JSON text can be written
        v = []
        for _ in range(5000):
            v = [v]
        return [v] if op == "deep" else cbp.multicast(v)
    if op in ("surrogate", "surrogatemc"):  # text that cannot be UTF-8
        return ["ok", "\\ud800" + r["k"]] if op == "surrogate" else cbp.multicast(["\\udfff"])
    return r["k"]

def route_msg(m):
    return cbp.multicast(m["addr"])

def ins_first(frames, state):  # a Runnable: one increment at a time, the external flow first
    for flow in ("ins", "msgs"):
        if frames[flow]:
            return {flow: 1}, {flow: 1}, state
    return {}, {}, state

def node(key, state, ins, msgs, out):
    prev = next(state, None)
    for r in ins:
        out.seen.write({"k": key, "flow": "ins", "tag": r["tag"], "epoch": out.epoch})
        if r["op"] == "bind":
            out.associate(key, r["addr"])
        elif r["op"] == "send":
            out.msgs.write({"addr": r["addr"], "tag": r["tag"]})
    for m in msgs:
        out.seen.write({"k": key, "flow": "msgs", "tag": m["tag"], "epoch": out.epoch})
    out.state.write({"k": key})

def node_batch(keys, state, ins, msgs, out):
    # node, vectorised: the same deliveries, bindings, messages and state
    import pyarrow as pa
    seen, sent = [], []
    for r in ins.to_pylist():
        seen.append({"k": r["_key"], "flow": "ins", "tag": r["tag"], "epoch": out.epoch})
        if r["op"] == "bind":
            out.associate(r["_key"], r["addr"])
        elif r["op"] == "send":
            sent.append({"addr": r["addr"], "tag": r["tag"]})
    seen += [{"k": m["_key"], "flow": "msgs", "tag": m["tag"], "epoch": out.epoch} for m in msgs.to_pylist()]
    return {"state": pa.table({"_key": keys, "k": keys}),
            "seen": pa.Table.from_pylist(seen, pa.schema([("k", pa.string()), ("flow", pa.string()),
                                                          ("tag", pa.string()), ("epoch", pa.int64())])),
            "msgs": pa.Table.from_pylist(sent, pa.schema([("addr", pa.string()), ("tag", pa.string())]))}
"""


def _rec(k, op, tag, addr=None):
    return {"k": k, "op": op, "tag": tag, "addr": addr}


FEEDS = [
    # epoch 1: three keys, and an ALL record: it reaches the keys called in the epoch
    [_rec("a", "key", "a1"), _rec("b", "key", "b1"), _rec("c", "key", "c1"), _rec("", "all", "X1")],
    # epoch 2: a and a new key e have input; S2 goes to every stored key (a, b, c: e has no state yet),
    # which makes b and c called, so ALL (X2) reaches them too; I2 only keys with input on 'ins'
    [
        _rec("a", "key", "a2"),
        _rec("e", "key", "e2"),
        _rec("", "all", "X2"),
        _rec("", "state", "S2"),
        _rec("", "ins", "I2"),
    ],
    # epoch 3: a and b bind themselves to g1, c sends M3 to g1 and binds itself to g2 (nothing is sent to g2);
    # epoch 4 (the loopback flow msgs): a and b get M3, c is not called
    [
        _rec("a", "bind", "a3", "g1"),
        _rec("b", "bind", "b3", "g1"),
        _rec("c", "send", "M3", "g1"),
        _rec("c", "bind", "c3", "g2"),
    ],
    # epoch 5: a multicast straight from the input to g1; the bindings of epoch 3 were for epoch 4 only: nobody
    [_rec("", "mc", "M5", "g1"), _rec("e", "key", "e5")],
    # epoch 6: a binds to g3; epoch 7: M7 to g3 reaches a, which has no other input
    [_rec("a", "bind", "a6", "g3")],
    [_rec("", "mc", "M7", "g3"), _rec("b", "key", "b7")],
]


def expected(grouping: str) -> set[tuple]:
    plain = {
        (1, "a", "ins", "a1"),
        (1, "b", "ins", "b1"),
        (1, "c", "ins", "c1"),
        (2, "a", "ins", "a2"),
        (2, "e", "ins", "e2"),
        (3, "a", "ins", "a3"),
        (3, "b", "ins", "b3"),
        (3, "c", "ins", "M3"),
        (3, "c", "ins", "c3"),
        (5, "e", "ins", "e5"),
        (6, "a", "ins", "a6"),
        (7, "b", "ins", "b7"),
    }
    delivered = (
        {(1, k, "ins", "X1") for k in "abc"}
        | {(2, k, "ins", "X2") for k in "abce"}
        | {(2, k, "ins", "S2") for k in "abc"}
        | {(2, k, "ins", "I2") for k in "ae"}
        | {(4, "a", "msgs", "M3"), (4, "b", "msgs", "M3"), (7, "a", "ins", "M7")}
    )
    if grouping == "outer":  # every stored key is called every epoch, so ALL reaches them all
        delivered |= set()  # X1: nothing stored before epoch 1; X2: a, b, c, e already
    return plain | delivered


def _seen(p) -> set[tuple]:
    return {(r["epoch"], r["k"], r["flow"], r["tag"]) for r in p.output("seen")}


@pytest.mark.parametrize(
    "mode,grouping,batch",
    [
        ("direct", "inner", False),
        ("blackbox", "inner", False),
        ("direct", "outer", False),
        ("blackbox", "outer", False),
        ("direct", "inner", True),
        ("blackbox", "outer", True),
        ("direct/shuffle", "inner", False),
        ("direct/shuffle", "outer", True),
    ],
)
def test_broadcast_and_multicast_delivery(spark, tmp_path, make_pipeline, mode, grouping, batch):
    """Per-key and batch translators (which bind with out.associate too) get the same deliveries;
    direct mode's small epochs (routed by the driver) and its shuffle path ("direct/shuffle") too."""
    mode, _, path_ = mode.partition("/")
    text = YAML.replace("GROUPING", grouping)
    if batch:
        text = text.replace("translator: MOD:node", "translator: MOD:node_batch\n    batch: true")
    path = make_pipeline(text, MODULE)
    p = cbp.Pipeline(
        path,
        str(tmp_path / "home"),
        mode=mode,
        spark=spark,
        **({"small_epoch_records": 0} if path_ == "shuffle" else {}),
    )
    for feed in FEEDS:
        p.feed("ins", feed)
        reports = p.run()
        assert all(r.shuffle_records == 0 for r in reports) == (mode == "direct" and path_ != "shuffle")
    assert _seen(p) == expected(grouping)


@pytest.mark.parametrize("small", [False, True])
def test_one_copy_per_partition(spark, tmp_path, make_pipeline, small):
    """A broadcast record reaches each of the 3 tasks once, however many keys it is delivered to:
    through Spark's shuffle (whose own record counts show it), and routed by the driver in a small
    epoch (cbp.engine.driver.smallepoch: nothing shuffled, the tasks' copies counted)."""
    path = make_pipeline(YAML.replace("GROUPING", "inner"), MODULE)
    p = cbp.Pipeline(path, str(tmp_path / "home"), spark=spark, **({} if small else {"small_epoch_records": 0}))
    p.feed("ins", [_rec(f"k{i}", "key", "t") for i in range(60)] + [_rec("", "all", "X")])
    (rep,) = p.run()
    assert rep.records_in == 60 and rep.copies_in == 3 and rep.delivered == 60
    assert rep.shuffle_records == (
        0 if small else 60 + 3
    )  # Spark's own count: 60 keyed records, one copy of X per partition
    assert sum(1 for r in p.output("seen") if r["tag"] == "X") == 60
    # multicast: 30 keys bind to g, one key sends M to g; the next epoch shuffles the 30 bindings
    # and one copy of M per partition, not one M per bound key
    p.feed("ins", [_rec(f"k{i}", "bind", "b", "g") for i in range(30)] + [_rec("k59", "send", "M", "g")])
    bind, deliver = p.run()
    assert bind.shuffle_records == (0 if small else 31) and deliver.epoch == 3
    assert deliver.shuffle_records == (0 if small else 30 + 3)
    assert deliver.bindings_in == 30 and deliver.copies_in == 3 and deliver.delivered == 30
    assert sorted(r["k"] for r in p.output("seen") if r["tag"] == "M" and r["flow"] == "msgs") == sorted(
        f"k{i}" for i in range(30)
    )


def test_the_same_broadcast_or_multicast_twice_is_delivered_once(spark, tmp_path, make_pipeline):
    path = make_pipeline(YAML.replace("GROUPING", "inner"), MODULE)
    p = cbp.load(path, home=str(tmp_path / "home"), spark=spark)
    p.feed("ins", [_rec("a", "key", "a1"), _rec("b", "key", "b1"), _rec("", "all2", "X")])
    (rep,) = p.run()
    assert rep.copies_in == 3 and rep.delivered == 2
    p.feed("ins", [_rec("a", "bind", "a2", "g")])
    p.run()
    p.feed("ins", [_rec("", "mc2", "M", "g"), _rec("b", "key", "b3")])
    p.run()
    tags = sorted((r["k"], r["tag"]) for r in p.output("seen") if r["tag"] in ("X", "M"))
    assert tags == [("a", "M"), ("a", "X"), ("b", "X")]


@pytest.mark.parametrize(
    "op,code",
    [("deep", "user-code"), ("deepmc", "route-target"), ("surrogate", "user-code"), ("surrogatemc", "route-target")],
)
def test_a_key_too_deep_for_json_or_not_unicode_is_an_error_naming_the_route(spark, tmp_path, make_pipeline, op, code):
    path = make_pipeline(YAML.replace("GROUPING", "inner"), MODULE)
    p = cbp.load(path, home=str(tmp_path / "home"), spark=spark)
    p.feed("ins", [_rec("a", "key", "a1"), _rec("", op, "D")])
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert e.value.code == code and e.value.stage == "node" and "route_by" in str(e.value)
    assert p.epochs("node") == 0 and p.output("seen") == []


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
def test_multicast_records_read_late_go_by_the_bindings_of_the_epoch_that_wrote_them(
    spark, tmp_path, make_pipeline, mode
):
    """The Runnable reads the second increment (c binds to g, X is multicast to g from the input)
    before M, which epoch 1 wrote to its loopback flow when a was bound to g: X reaches the keys
    bound in epoch 1 (the previous epoch), and so does M, in epoch 3, not c; then no bindings file is left."""
    path = make_pipeline(YAML.replace("GROUPING", "inner").replace("runnable: any", "runnable: MOD:ins_first"), MODULE)
    home = tmp_path / "home"
    p = cbp.load(path, home=str(home), mode=mode, spark=spark)
    p.feed("ins", [_rec("a", "bind", "a1", "g"), _rec("s", "send", "M", "g")])
    p.feed("ins", [_rec("c", "bind", "c2", "g"), _rec("", "mc", "X", "g")])
    assert [r.epoch for r in p.run()] == [1, 2, 3]
    assert _seen(p) == {
        (1, "a", "ins", "a1"),
        (1, "s", "ins", "M"),
        (2, "c", "ins", "c2"),
        (2, "a", "ins", "X"),
        (3, "a", "msgs", "M"),
    }
    bindings = home / "stages" / "node" / "bindings"
    assert bindings.is_dir() and [f for f in bindings.glob("*") if f.is_file()] == []


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
def test_a_framed_loopback_increment_goes_by_the_bindings_of_each_epoch_that_wrote_to_it(
    spark, tmp_path, make_pipeline, mode
):
    """msgs is framed by its address: M1 (epoch 1, a bound to g) and M2 (epoch 2, c bound to g)
    land in one increment, closed by M3 in epoch 3 and read in epoch 4: M1 reaches a, M2 reaches c."""
    yaml = (
        YAML.replace("GROUPING", "inner")
        .replace("runnable: any", "runnable: MOD:ins_first")
        .replace('{flow: msgs, route_by: "MOD:route_msg"}', '{flow: msgs, route_by: "MOD:route_msg", frame_by: addr}')
    )
    home = tmp_path / "home"
    p = cbp.load(make_pipeline(yaml, MODULE), home=str(home), mode=mode, spark=spark)
    p.feed("ins", [_rec("a", "bind", "a1", "g"), _rec("s", "send", "M1", "g")])
    p.feed("ins", [_rec("c", "bind", "c2", "g"), _rec("s", "send", "M2", "g")])
    p.feed("ins", [_rec("s", "send", "M3", "h")])
    assert [r.epoch for r in p.run()] == [1, 2, 3, 4]
    assert {s for s in _seen(p) if s[2] == "msgs"} == {(4, "a", "msgs", "M1"), (4, "c", "msgs", "M2")}
    assert [f for f in (home / "stages" / "node" / "bindings").glob("*") if f.is_file()] == []


def test_a_stage_named_feed_multicasts_its_input_by_its_previous_epoch(spark, tmp_path, make_pipeline):
    """Feeds are recorded as made by "feed:<n>": a stage of that name must not take them for its own loopback output."""
    path = make_pipeline(YAML.replace("GROUPING", "inner").replace("  node:\n", "  feed:\n"), MODULE)
    p = cbp.load(path, home=str(tmp_path / "home"), spark=spark)
    p.feed("ins", [_rec("a", "bind", "a1", "g")])
    p.run()
    p.feed("ins", [_rec("", "mc", "X", "g"), _rec("b", "key", "b2")])
    p.run()
    assert {s for s in _seen(p) if s[3] == "X"} == {(2, "a", "ins", "X")}


def test_bindings_of_a_retried_task_are_deleted_with_their_epoch(spark, tmp_path, make_pipeline, monkeypatch):
    """A task dies after writing its bindings file and Spark runs it again: the first attempt's
    file is in no result, and goes when the epoch's bindings do."""
    marker = tmp_path / "marker"
    monkeypatch.setenv("CBP_FAULT", f"task-exit:task:outputs-written:{marker}")
    home = tmp_path / "home"
    yaml = YAML.replace("GROUPING", "inner").replace(
        "partitions: 3", "partitions: 1"
    )  # the task that dies has bindings
    p = cbp.load(make_pipeline(yaml, MODULE), home=str(home), spark=spark)
    p.feed("ins", [_rec(k, "bind", f"{k}1", "g") for k in "abcdefgh"] + [_rec("s", "send", "M", "g")])
    assert [r.epoch for r in p.run()] == [1, 2]
    assert marker.exists()  # a task did die once
    monkeypatch.delenv("CBP_FAULT")
    p.feed("ins", [_rec("z", "key", "z1")])
    p.run()
    assert sorted(s[1] for s in _seen(p) if s[3] == "M" and s[2] == "msgs") == list("abcdefgh")
    assert [f.name for f in (home / "stages" / "node" / "bindings").glob("*") if f.is_file()] == []


def test_broadcast_to_an_unknown_flow_is_an_error_naming_the_stage(spark, tmp_path, make_pipeline):
    path = make_pipeline(YAML.replace("GROUPING", "inner"), MODULE)
    p = cbp.load(path, home=str(tmp_path / "home"), spark=spark)
    p.feed("ins", [_rec("a", "key", "a1"), _rec("", "bad", "B")])
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert e.value.code == "route-target" and e.value.stage == "node"
    assert p.output("seen") == []


def test_route_by_all_everywhere_is_refused(make_pipeline):
    path = make_pipeline(
        """
    pipeline: x
    flows:
      a: {external: true, schema: {v: string}}
    stages:
      s:
        translator: MOD:t
        inputs: [{flow: a, route_by: ALL}]
        state: {schema: {v: string}}
    """,
        "def t(key, state, a, out):\n    pass\n",
    )
    with pytest.raises(SpecError) as e:
        cbp.load_spec(path)
    assert e.value.code == "broadcast-nowhere"


def test_broadcast_and_multicast_epochs_survive_crashes(spark, tmp_path, make_pipeline):
    """SIGKILLs in the epoch that broadcasts (2) and in those that make and use bindings (3, 4): the
    restarted runs deliver exactly what an uninterrupted run does, and no bindings file is left over."""
    import crash_harness as ch

    path = make_pipeline(YAML.replace("GROUPING", "inner"), MODULE)
    home = str(tmp_path / "home")
    kills = {2: ["kill-driver:task:outputs-written:1"], 3: ["kill:epoch:ran:1", "kill:epoch:committed:0:2"]}
    for i, feed in enumerate(FEEDS[:4], 1):
        p = cbp.load(path, home=home, spark=spark)
        p.feed("ins", feed)
        if i not in kills:
            p.run()
            continue
        for fault in kills[i] + [None]:  # the runs that are killed go through the command line, the recovery here
            if fault:  # a kill at a driver's point: on this process's JVM (crash_harness.run_victim)
                r = ch.cli(["run"], home, fault, yaml=path, on_test_jvm=True)
            else:
                r = ch.cli_here(["run"], home, yaml=path)
            assert r.returncode == (-9 if fault else 0), (fault, r.stderr[-2000:])
    p = cbp.load(path, home=home, spark=spark)
    assert _seen(p) == {e for e in expected("inner") if e[0] <= 5}
    assert p.epochs("node") == 5
    left = sorted((tmp_path / "home" / "stages" / "node" / "bindings").glob("*.parquet"))
    assert left == []  # epoch 5 bound nothing; the bindings of epoch 3 were dropped after epoch 4
