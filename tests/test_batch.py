"""Vectorised translate (``batch: true``): the same state and outputs as per-key translate, and bad
batch output refused naming the stage and epoch with nothing committed."""

from __future__ import annotations

import json
import random

import pytest
from conftest import FLOWS

import cbp
from cbp.engine.task.batch import _typed_keys
from cbp.errors import SpecError, UserCodeError
from cbp.testing import Increment, replay


def _canon(recs):
    return sorted(json.dumps(r, sort_keys=True) for r in recs)


def _url_increments(seed: int, n: int = 5) -> list[Increment]:
    rng = random.Random(seed)
    return [
        Increment(
            "urls", [{"url": f"http://h{rng.randint(0, 9)}/p{rng.randint(0, 30)}"} for _ in range(rng.randint(1, 80))]
        )
        for _ in range(n)
    ]


@pytest.mark.parametrize("mode,seed", [("direct", 1), ("blackbox", 2)])
def test_url_count_vec_equals_url_count(spark, tmp_path, mode, seed):
    incs = _url_increments(seed, 3)  # the first three of the five this took: 47 and 87 urls, a state to update twice
    per_key = replay(FLOWS / "url_count.yaml", incs, home=str(tmp_path / "k"), mode=mode, spark=spark)
    vec = replay(FLOWS / "url_count_vec.yaml", incs, home=str(tmp_path / "v"), mode=mode, spark=spark)
    for a, b in zip(per_key.steps, vec.steps):
        assert _canon(a.outputs["counts"]) == _canon(b.outputs["counts"])
        assert _canon(a.state["url_count"]) == _canon(b.state["url_count"])
    assert len(vec.final_state("url_count")) > 20
    columnar = [e.report.columnar_tasks > 0 for s in vec.steps for e in s.epochs]
    assert all(columnar) if mode == "direct" else not any(columnar)  # black-box: the state comes with the input


# framing by hour, a loopback flow (halves travel back until they are 0), removed keys
YAML = """
pipeline: halves
flows:
  nums: {external: true, schema: {k: string, v: int, hour: int}}
  carry: {schema: {k: string, v: int}}
  totals: {schema: {k: string, total: int}}
stages:
  sum:
    translator: MOD:TRANSLATOR
    BATCH
    partitions: 3
    runnable: any
    inputs:
      - {flow: nums, route_by: k, frame_by: hour, order_by: v}
      - {flow: carry, route_by: k}
    state: {schema: {k: string, total: int, last: "int?"}}
    outputs: [carry, totals]
"""
MODULE = """
import pyarrow as pa
import pyarrow.compute as pc

def per_key(key, state, nums, carry, out):
    prev = next(state, None)
    total = prev["total"] if prev else 0
    last = prev["last"] if prev else None
    for r in nums:
        total += r["v"]
        last = r["v"]  # nums come ordered by v: the largest
        if r["v"] > 1:
            out.carry.write({"k": key, "v": r["v"] // 2})
    for c in carry:
        total += c["v"]
        if c["v"] > 1:
            out.carry.write({"k": key, "v": c["v"] // 2})
    if total > 100:  # a key whose total passes 100 is dropped
        return
    out.state.write({"k": key, "total": total, "last": last})
    out.totals.write({"k": key, "total": total})

def batch(keys, state, nums, carry, out):
    for t in (state, nums, carry):  # _pos: each row's key's position in keys
        assert t["_key"].to_pylist() == keys.take(pa.array(t["_pos"].to_numpy(), pa.int64())).to_pylist()
    both = pa.concat_tables([nums.select(["_key", "v"]), carry.select(["_key", "v"])])
    add = both.group_by("_key").aggregate([("v", "sum")])
    t = pa.table({"_key": keys})
    t = t.join(add, "_key", join_type="left outer")
    t = t.join(state.select(["_key", "total", "last"]), "_key", join_type="left outer")
    t = t.join(nums.group_by("_key").aggregate([("v", "max")]), "_key", join_type="left outer")
    total = pc.add(pc.fill_null(t["v_sum"], 0), pc.fill_null(t["total"], 0))
    last = pc.if_else(pc.is_null(t["v_max"]), t["last"], t["v_max"])
    new = pa.table({"_key": t["_key"], "k": t["_key"], "total": total, "last": last})
    keep = pc.less_equal(new["total"], 100)
    msgs = both.filter(pc.greater(both["v"], 1))
    carry_out = pa.table({"k": msgs["_key"], "v": pc.divide(msgs["v"], 2)})
    return {"state": new.filter(keep), "removed": new.filter(pc.invert(keep))["_key"],
            "carry": carry_out, "totals": new.filter(keep).drop_columns(["_key", "last"])}
"""


def _halves(seed: int, hours: int = 3) -> list[Increment]:
    """Three hours of 8-25 records: each hour's frame takes about six epochs (its records, then the
    halves of 40 travelling back), whatever its size, so fewer, larger frames cost less (five hours
    of 1-15 records: 27 epochs a pipeline; these: 18, more keys passing 100 and removed). ``hours``:
    the first of them (the same records), the last one closed."""
    rng = random.Random(seed)
    incs = []
    for hour in range(1, hours + 1):
        incs.append(
            Increment(
                "nums",
                [
                    {"k": f"k{rng.randint(0, 12)}", "v": rng.randint(0, 40), "hour": hour}
                    for _ in range(rng.randint(8, 25))
                ],
                close=hour == hours,
            )
        )
    return incs


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
def test_batch_equals_per_key_with_framing_and_a_loopback_flow(spark, tmp_path, make_pipeline, mode):
    """Black-box mode (a whole-state job an epoch: ~3 times a direct epoch's cost) on the first two hours: two
    frames, the second finding the first's state and halves still travelling back, as in direct mode."""
    incs = _halves(7, hours=3 if mode == "direct" else 2)
    runs = {}
    for name, translator, batch in (("k", "per_key", ""), ("v", "batch", "batch: true")):
        path = make_pipeline(YAML.replace("TRANSLATOR", translator).replace("BATCH", batch), MODULE)
        runs[name] = replay(path, incs, home=str(tmp_path / name), mode=mode, spark=spark)
    for a, b in zip(runs["k"].steps, runs["v"].steps):
        assert [e.report.epoch for e in a.epochs] == [e.report.epoch for e in b.epochs]
        for flow in ("carry", "totals"):
            assert _canon(a.outputs.get(flow, [])) == _canon(b.outputs.get(flow, [])), flow
        assert _canon(a.state["sum"]) == _canon(b.state["sum"])
    assert any(r["total"] > 40 for r in runs["v"].outputs("totals"))


@pytest.mark.parametrize("keys", ["escapes", "ints"])
def test_batch_equals_per_key_whatever_the_keys_look_like(spark, tmp_path, make_pipeline, keys):
    """Keys that are not plain strings (quotes, backslashes, control characters, non-ASCII; or
    integers, negative and beyond 32 bits) reach the batch translator typed and its state finds
    them again."""
    rng = random.Random(11)
    if keys == "ints":
        pool = [-3, 0, 7, 2**40, -(2**35), 12, 99]
        text = YAML.replace("k: string", "k: int")
    else:
        pool = ['q"1', "b\\2", "t\t3", "é4", "\u2028 5", "plain", "", "new\nline"]
        text = YAML
    incs = [
        Increment(
            "nums",
            [{"k": rng.choice(pool), "v": rng.randint(0, 30), "hour": hour} for _ in range(rng.randint(3, 12))],
            close=hour == 2,
        )
        for hour in range(1, 3)  # two frames (the second finds the first's state): ~5 epochs each, as many keys
    ]
    runs = {}
    for name, translator, batch in (("k", "per_key", ""), ("v", "batch", "batch: true")):
        path = make_pipeline(text.replace("TRANSLATOR", translator).replace("BATCH", batch), MODULE)
        runs[name] = replay(path, incs, home=str(tmp_path / name), mode="direct", spark=spark)
    for a, b in zip(runs["k"].steps, runs["v"].steps):
        assert _canon(a.outputs.get("totals", [])) == _canon(b.outputs.get("totals", []))
        assert _canon(a.state["sum"]) == _canon(b.state["sum"])
    assert (
        len({r["k"] for r in runs["v"].final_state("sum")} - {"plain", 0, 7, 12, 99}) >= 3
    )  # the unusual keys have state


BAD = """
import pyarrow as pa

def bad(keys, state, nums, carry, out):
    kind = out.params["kind"]
    if kind == "schema":
        return {"state": pa.table({"_key": keys, "k": keys})}  # no 'total'
    if kind == "type":
        return {"totals": pa.table({"k": keys, "total": pa.array(["x"] * len(keys))})}
    if kind == "both":
        state = pa.table({"_key": keys, "k": keys, "total": [1] * len(keys), "last": [None] * len(keys)})
        return {"state": state, "removed": keys}
    if kind == "stranger":
        return {"removed": ["nobody"]}
    if kind == "nulls":
        return {"totals": pa.table({"k": keys, "total": pa.array([None] * len(keys), pa.int64())})}
    if kind == "exit":
        import os
        os._exit(5)  # EXIT
    n = len(keys)
    if kind == "intkey":  # an int column for a string field: not turned into text
        return {"totals": pa.table({"k": pa.array(range(n)), "total": [1] * n})}
    if kind == "strtotal":  # digits for an int field: not parsed
        return {"state": pa.table({"_key": keys, "k": keys, "total": ["5"] * n})}
    if kind == "floattotal":
        return {"totals": pa.table({"k": keys, "total": [5.0] * n})}
    if kind == "dupcol":
        columns = [keys, keys, pa.array([1] * n), pa.array([2] * n)]
        return {"state": pa.Table.from_arrays(columns, names=["_key", "k", "total", "total"])}
    if kind in ("rmtable", "rmstr", "rmobj"):
        return {"removed": {"rmtable": pa.table({"_key": keys}), "rmstr": "ab", "rmobj": [object()]}[kind]}
    if kind == "brokenmap":  # a mapping whose methods fail
        class Broken(dict):
            def keys(self):
                raise RuntimeError("no keys")
            items = __iter__ = get = __getitem__ = keys
        return Broken(state=None)
    if kind == "brokenremoved":
        class Gone:
            def __iter__(self):
                raise RuntimeError("cannot iterate")
        return {"removed": Gone()}
    if kind == "oddkeys":  # names of mixed types: listed, not sorted
        return {1: None, "x": None}
    if kind == "empty":  # nothing new, nothing removed: valid
        return {"state": pa.table({"_key": [], "k": [], "total": []}), "removed": [],
                "totals": pa.table({"k": [], "total": []})}
    return 42
"""


@pytest.mark.parametrize(
    "kind,code",
    [
        ("schema", "batch-schema"),
        ("type", "batch-schema"),
        ("nulls", "batch-schema"),
        ("intkey", "batch-schema"),
        ("strtotal", "batch-schema"),
        ("floattotal", "batch-schema"),
        ("dupcol", "batch-schema"),
        ("rmtable", "batch-key"),
        ("rmstr", "batch-key"),
        ("rmobj", "batch-key"),
        ("both", "batch-duplicate-key"),
        ("stranger", "batch-key"),
        ("int", "batch-output"),
        ("brokenmap", "batch-output"),
        ("brokenremoved", "batch-key"),
        ("oddkeys", "batch-output"),
    ],
)
@pytest.mark.parametrize("columnar", ["1", "0"])
def test_bad_batch_output_is_refused_and_nothing_is_committed(
    spark, tmp_path, make_pipeline, monkeypatch, kind, code, columnar
):
    monkeypatch.setenv("CBP_COLUMNAR", columnar)
    text = (
        YAML.replace("TRANSLATOR", "bad")
        .replace("BATCH", "batch: true")
        .replace("outputs: [carry, totals]", f"outputs: [carry, totals]\n    params: {{kind: {kind}}}")
    )
    p = cbp.load(make_pipeline(text, BAD), home=str(tmp_path / "h"), spark=spark)
    p.feed("nums", [{"k": "a", "v": 3, "hour": 1}], close=True)  # one key: one failing task (two with its retry)
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert e.value.code == code and e.value.stage == "sum" and e.value.epoch == 1
    assert p.epochs("sum") == 0 and p.output("totals") == [] and p.state("sum") == []


def test_os_exit_in_a_batch_translator_is_worker_died_naming_the_batch(spark, tmp_path, make_pipeline):
    """os._exit in a batch translator: worker-died naming stage, epoch, the batch's size and the line."""
    params = "outputs: [carry, totals]\n    params: {kind: exit}"
    text = YAML.replace("TRANSLATOR", "bad").replace("BATCH", "batch: true").replace("outputs: [carry, totals]", params)
    path = make_pipeline(text, BAD)
    p = cbp.load(path, home=str(tmp_path / "h"), spark=spark)
    p.feed("nums", [{"k": "a", "v": 3, "hour": 1}], close=True)  # one key: one task's worker dies (twice, retried)
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert (e.value.code, e.value.stage, e.value.epoch) == ("worker-died", "sum", 1)
    assert "os._exit(5)" in str(e.value) and "batch of" in str(e.value) and "partition" in str(e.value)
    line = BAD.splitlines().index("        os._exit(5)  # EXIT") + 1
    assert e.value.location is not None and e.value.location.endswith(f":{line}")
    assert p.epochs("sum") == 0 and p.state("sum") == []


@pytest.mark.parametrize("columnar", ["1", "0"])
def test_empty_batch_results_commit(spark, tmp_path, make_pipeline, monkeypatch, columnar):
    """Empty tables and an empty list of removed keys (typed null by Arrow) are a valid result."""
    monkeypatch.setenv("CBP_COLUMNAR", columnar)
    text = (
        YAML.replace("TRANSLATOR", "bad")
        .replace("BATCH", "batch: true")
        .replace("outputs: [carry, totals]", "outputs: [carry, totals]\n    params: {kind: empty}")
    )
    p = cbp.load(make_pipeline(text, BAD), home=str(tmp_path / "h"), spark=spark)
    p.feed("nums", [{"k": "a", "v": 3, "hour": 1}], close=True)
    assert [r.epoch for r in p.run()] == [1]
    assert p.state("sum") == [] and p.output("totals") == []


JSON_YAML = """
pipeline: js
flows:
  ev: {external: true, schema: {k: string, v: string}}
  res: {schema: {k: string, j: "json"}}
stages:
  s:
    translator: MOD:t
    batch: true
    partitions: 2
    inputs: [{flow: ev, route_by: k}]
    state: {schema: {k: string, j: json}}
    outputs: [res]
"""
JSON_MOD = """
import pyarrow as pa

def t(keys, state, ev, out):
    j = pa.array([v for v in ev["v"].to_pylist()], pa.string())  # one record per key: its text as the json field
    return {"state": pa.table({"_key": ev["_key"], "k": ev["_key"], "j": j}),
            "res": pa.table({"k": ev["_key"], "j": j})}
"""


@pytest.mark.parametrize(
    "text,ok",
    [
        ('{"b": [1, 2.5], "a": null}', True),
        ("null", True),
        ("not json {", False),
        ("NaN", False),
        ('"\\ud800"', False),
        ("[" * 200 + "]" * 200, False),
    ],
)
@pytest.mark.parametrize("columnar", ["1", "0"])
def test_json_fields_of_a_batch_result_are_parsed_and_checked(
    spark, tmp_path, make_pipeline, monkeypatch, text, ok, columnar
):
    """A json field comes back as JSON text: valid text is stored as the value it stands for;
    anything else (not JSON, NaN, a lone surrogate, too deep) is a batch-schema error, nothing committed."""
    monkeypatch.setenv("CBP_COLUMNAR", columnar)
    p = cbp.load(make_pipeline(JSON_YAML, JSON_MOD), home=str(tmp_path / "h"), spark=spark)
    p.feed("ev", [{"k": "a", "v": "1"}, {"k": "b", "v": text}])
    if not ok:
        with pytest.raises(UserCodeError) as e:
            p.run()
        assert e.value.code == "batch-schema" and e.value.stage == "s" and e.value.epoch == 1
        assert p.epochs("s") == 0 and p.state("s") == [] and p.output("res") == []
        return
    p.run()
    want = {"a": 1, "b": json.loads(text)}
    assert {r["k"]: r["j"] for r in p.state("s")} == want
    assert {r["k"]: r["j"] for r in p.output("res")} == want


def test_order_by_and_output_names_a_batch_stage_cannot_use(make_pipeline):
    """An order_by field must order by its value (no json or list field); a stateful batch stage
    cannot have an output flow named 'removed' (its result's removed keys)."""
    base = YAML.replace("TRANSLATOR", "batch").replace("BATCH", "batch: true")
    for field, typ in (("v", "json"), ("v", "list<int>")):
        with pytest.raises(SpecError) as e:
            cbp.load_spec(make_pipeline(base.replace("v: int, hour: int", f"v: '{typ}', hour: int"), MODULE))
        assert e.value.code == "bad-order-by", field
    renamed = base.replace("carry", "removed")
    with pytest.raises(SpecError) as e:
        cbp.load_spec(make_pipeline(renamed, MODULE))
    assert e.value.code == "reserved-name"
    cbp.load_spec(make_pipeline(renamed.replace("batch: true", ""), MODULE))  # per key, 'removed' is a name like any


def test_keys_that_json_tells_apart_stay_apart():
    """1 and 1.0 (also inside lists) are two keys: a batch translator gets their JSON texts, not one value for both."""

    def typed(texts):
        keys, key_texts = _typed_keys(texts)
        return keys.to_pylist(), key_texts

    assert typed(["[1]", "[1.0]"]) == (["[1]", "[1.0]"], True)
    assert typed(["1", "2.5"]) == (["1", "2.5"], True)
    assert typed(["1.5", "2.5"]) == ([1.5, 2.5], False)
    assert typed(["[1,2]", "[3]"]) == ([[1, 2], [3]], False)
    assert typed(['"a"', '"b\\u0000"']) == (["a", "b\x00"], False)


NULLS_YAML = """
pipeline: nulls
flows:
  ev: {external: true, schema: {k: string, v: "int?", n: int}}
  seq: {schema: {k: string, order: "list<int>"}}
stages:
  s:
    translator: MOD:TRANSLATOR
    BATCH
    partitions: 2
    inputs: [{flow: ev, route_by: k, order_by: v}]
    outputs: [seq]
"""
NULLS_MOD = """
import pyarrow as pa

def per_key(key, state, ev, out):
    out.seq.write({"k": key, "order": [r["n"] for r in ev]})

def batch(keys, state, ev, out):
    order = {}
    for k, n in zip(ev["_key"].to_pylist(), ev["n"].to_pylist()):
        order.setdefault(k, []).append(n)
    return {"seq": pa.table({"k": list(order), "order": list(order.values())})}
"""


def test_order_by_a_nullable_field_puts_nulls_last_in_both_forms(spark, tmp_path, make_pipeline):
    rng = random.Random(5)
    recs = [{"k": f"k{rng.randint(0, 3)}", "v": rng.choice([None, rng.randint(0, 5)]), "n": i} for i in range(40)]
    got = {}
    for name, translator, batch in (("k", "per_key", ""), ("v", "batch", "batch: true")):
        p = cbp.load(
            make_pipeline(NULLS_YAML.replace("TRANSLATOR", translator).replace("BATCH", batch), NULLS_MOD),
            home=str(tmp_path / name),
            spark=spark,
        )
        p.feed("ev", recs)
        p.run()
        got[name] = {r["k"]: r["order"] for r in p.output("seq")}
    want = {}
    for r in sorted(
        recs, key=lambda r: (r["v"] is None, r["v"] if r["v"] is not None else 0)
    ):  # stable: arrival order among equals
        want.setdefault(r["k"], []).append(r["n"])
    assert got["k"] == got["v"] == want


# sets of items per key: several state rows per key, a list field, unchanged keys, removals and re-adds
SETS_YAML = """
pipeline: sets
flows:
  ops: {external: true, schema: {k: KEYTYPE, item: int, op: string, seq: int}}
  changes: {schema: {k: KEYTYPE, n: int}}
stages:
  sets:
    translator: MOD:TRANSLATOR
    BATCH
    partitions: 3
    inputs:
      - {flow: ops, route_by: k, order_by: seq}
    state: {schema: {k: KEYTYPE, item: int, tags: "list<string>?"}}
    outputs: [changes]
"""
SETS = """
import pyarrow as pa


def _apply(items, ops):
    items = set(items)
    for r in ops:
        if r["op"] == "add":
            items.add(r["item"])
        elif r["op"] == "del":
            items.discard(r["item"])
        elif r["op"] == "clear":
            items = set()
    return sorted(items)


def _row(k, i):
    return {"k": k, "item": i, "tags": None if i % 3 == 0 else [str(i), "x" * (i % 2)]}


def per_key(key, state, ops, out):
    old = [r["item"] for r in state]
    new = _apply(old, ops)
    for i in new:
        out.state.write(_row(key, i))
    if new != old:
        out.changes.write({"k": key, "n": len(new)})


def _check_pos(keys, *tables):
    # _pos: each row's key's position in keys; rows grouped in the order of keys
    for t in tables:
        pos = t["_pos"].to_numpy()
        assert t.column_names[0] == "_key" and t.column_names[-1] == "_pos", t.column_names
        assert t["_key"].to_pylist() == keys.take(pa.array(pos, pa.int64())).to_pylist()
        assert (pos[1:] >= pos[:-1]).all()


def batch(keys, state, ops, out):
    _check_pos(keys, state, ops)
    old, got = {}, {}
    for r in state.to_pylist():
        old.setdefault(r["_key"], []).append(r["item"])
    for r in ops.to_pylist():
        got.setdefault(r["_key"], []).append(r)
    rows, removed, changes = [], [], []
    for k in keys.to_pylist():
        new = _apply(old.get(k, []), got.get(k, []))
        if not new:
            removed.append(k)
        rows += [dict(_row(k, i), _key=k) for i in new]
        if new != old.get(k, []):
            changes.append({"k": k, "n": len(new)})
    kt = keys.type
    schema = pa.schema([("_key", kt), ("k", kt), ("item", pa.int64()), ("tags", pa.list_(pa.string()))])
    return {"state": pa.Table.from_pylist(rows, schema), "removed": pa.array(removed, kt),
            "changes": pa.Table.from_pylist(changes, pa.schema([("k", kt), ("n", pa.int64())]))}
"""


@pytest.mark.parametrize("keytype", ["string", "int"])
def test_columnar_path_equals_key_groups_and_per_key(spark, tmp_path, make_pipeline, monkeypatch, keytype):
    """The batch translator on Arrow chunks (no key groups) writes the same state, outputs and
    number of changed keys as on key groups and as per-key translate."""
    rng = random.Random(21)
    pool = [f"k{i}" for i in range(15)] + ['q"x', "é"] if keytype == "string" else [-5, 0, 3, 2**40, 17, 99, 1000]
    incs = []
    seq = 0
    for _ in range(6):
        recs = []
        for _ in range(rng.randint(5, 40)):
            seq += 1
            recs.append(
                {
                    "k": rng.choice(pool),
                    "item": rng.randint(0, 6),
                    "op": rng.choice(["add", "add", "add", "del", "noop", "clear"]),
                    "seq": seq,
                }
            )
        incs.append(Increment("ops", recs))
    runs = {}
    for name, translator, batch, columnar in (
        ("k", "per_key", "", "1"),
        ("g", "batch", "batch: true", "0"),
        ("c", "batch", "batch: true", "1"),
    ):
        monkeypatch.setenv("CBP_COLUMNAR", columnar)
        text = SETS_YAML.replace("KEYTYPE", keytype).replace("TRANSLATOR", translator).replace("BATCH", batch)
        runs[name] = replay(make_pipeline(text, SETS), incs, home=str(tmp_path / name), mode="direct", spark=spark)
    for a, b, c in zip(runs["k"].steps, runs["g"].steps, runs["c"].steps):
        assert (
            _canon(a.outputs.get("changes", []))
            == _canon(b.outputs.get("changes", []))
            == _canon(c.outputs.get("changes", []))
        )
        assert _canon(a.state["sets"]) == _canon(b.state["sets"]) == _canon(c.state["sets"])
        assert (
            [e.report.keys_written for e in a.epochs]
            == [e.report.keys_written for e in b.epochs]
            == [e.report.keys_written for e in c.epochs]
        )
        assert [e.report.keys_read for e in a.epochs] == [e.report.keys_read for e in c.epochs]
    assert all(e.report.columnar_tasks > 0 for s in runs["c"].steps for e in s.epochs)
    assert not any(e.report.columnar_tasks for name in "kg" for s in runs[name].steps for e in s.epochs)
    final = runs["c"].final_state("sets")
    assert len(final) > 10 and any(r["tags"] is None for r in final) and any(r["tags"] for r in final)
    # from scratch: replay the ops in order per key
    want: dict = {}
    for inc in incs:
        for r in sorted(inc.records, key=lambda r: r["seq"]):
            items = want.setdefault(r["k"], set())
            if r["op"] == "add":
                items.add(r["item"])
            elif r["op"] == "del":
                items.discard(r["item"])
            elif r["op"] == "clear":
                items.clear()
    assert sorted((r["k"], r["item"]) for r in final) == sorted((k, i) for k, s in want.items() for i in s)


@pytest.mark.parametrize("small", ["0", "1000000"])
def test_columnar_path_with_a_key_of_more_records_than_a_chunk(spark, tmp_path, monkeypatch, small):
    """A key whose records span several of the columnar path's chunks (64k envelopes) is still
    one key, called once, with all its records (through the shuffle, and routed by the driver)."""
    monkeypatch.setenv("CBP_SMALL_EPOCH_RECORDS", small)
    rng = random.Random(4)
    recs = [
        {"url": "http://hot/"} if rng.random() < 0.9 else {"url": f"http://c/{rng.randint(0, 500)}"}
        for _ in range(150_000)
    ]
    run = replay(
        FLOWS / "url_count_vec.yaml",
        [Increment("urls", recs[:20]), Increment("urls", recs[20:])],
        home=str(tmp_path / "h"),
        spark=spark,
    )
    want: dict[str, int] = {}
    for r in recs:
        want[r["url"]] = want.get(r["url"], 0) + 1
    assert {r["url"]: r["count"] for r in run.final_state("url_count")} == want
    last = run.steps[-1].epochs[0].report
    assert (last.shuffle_records > 0) == (small == "0")
    assert last.columnar_tasks > 0 and last.keys_written == len({r["url"] for r in recs[20:]})
    assert sum(1 for r in run.steps[-1].outputs["counts"] if r["url"] == "http://hot/") == 1


MIXED_YAML = """
pipeline: mixed
flows:
  ev: {external: true, schema: {j: json, w: int}}
  res: {schema: {key: string, n: int, ws: "list<int>"}}
stages:
  s:
    translator: MOD:TRANSLATOR
    BATCH
    partitions: 2
    inputs: [{flow: ev, route_by: j, order_by: w}]
    state: {schema: {key: string, n: int}}
    outputs: [res]
"""
MIXED_MOD = """
import json
import pyarrow as pa

def per_key(key, state, ev, out):
    prev = next(state, None)
    ws = [r["w"] for r in ev]
    n = (prev["n"] if prev else 0) + len(ws)
    out.state.write({"key": json.dumps(key), "n": n})
    out.res.write({"key": json.dumps(key), "n": n, "ws": ws})

def batch(keys, state, ev, out):
    texts = keys.to_pylist() if out.key_texts else [json.dumps(k) for k in keys.to_pylist()]
    n = [0] * len(keys)
    ws = [[] for _ in keys]
    for p, c in zip(state["_pos"].to_pylist(), state["n"].to_pylist()):
        n[p] += c
    for p, w in zip(ev["_pos"].to_pylist(), ev["w"].to_pylist()):
        n[p] += 1
        ws[p].append(w)
    return {"state": pa.table({"_key": keys, "key": texts, "n": n}), "res": pa.table({"key": texts, "n": n, "ws": ws})}
"""


def test_keys_of_mixed_json_types_reach_a_batch_translator_as_texts(spark, tmp_path, make_pipeline):
    """1, 3.0, 1.5 and "1.5" are four keys: a call that holds keys Arrow cannot type alike gets
    their JSON texts (out.key_texts) and finds each key's state; the same as per key."""
    rng = random.Random(3)
    incs = [
        Increment(
            "ev",
            [
                {"j": rng.choice([1, 2, 3.0, 1.5, "1.5", "x", 2**40]), "w": rng.randint(0, 50)}
                for _ in range(rng.randint(3, 9))
            ],
        )
        for _ in range(4)
    ]
    runs = {}
    for name, translator, batch in (("k", "per_key", ""), ("v", "batch", "batch: true")):
        path = make_pipeline(MIXED_YAML.replace("TRANSLATOR", translator).replace("BATCH", batch), MIXED_MOD)
        runs[name] = replay(path, incs, home=str(tmp_path / name), spark=spark)
    for a, b in zip(runs["k"].steps, runs["v"].steps):
        assert _canon(a.outputs.get("res", [])) == _canon(b.outputs.get("res", []))
        assert _canon(a.state["s"]) == _canon(b.state["s"])
    assert {"1", "3.0", "1.5", '"1.5"'} <= {r["key"] for r in runs["v"].final_state("s")}


KEYTYPE_YAML = """
pipeline: kt
flows:
  ev: {external: true, schema: {k: string, v: string}}
stages:
  s:
    translator: MOD:t
    batch: true
    partitions: 1
    inputs: [{flow: ev, route_by: k}]
    state: {schema: {k: string, v: int}}
    params: {kind: KIND}
"""
KEYTYPE_MOD = """
import pyarrow as pa

def t(keys, state, ev, out):
    kind = out.params["kind"]
    wrong = {"int": pa.array([int(k) for k in keys.to_pylist()]),
             "float": pa.array([float(k) for k in keys.to_pylist()]),
             "large": keys.cast(pa.large_string())}[kind]
    return {"state": pa.table({"_key": wrong, "k": keys, "v": [7] * len(keys)}), "removed": wrong[:0]}
"""


@pytest.mark.parametrize("kind, code", [("int", "batch-key"), ("float", "batch-key"), ("large", None)])
@pytest.mark.parametrize("columnar", ["1", "0"])
def test_returned_keys_of_another_kind_are_not_cast_into_the_calls_keys(
    spark, tmp_path, make_pipeline, monkeypatch, kind, code, columnar
):
    """Keys "1" and "2" answered with 1 and 2 (or 1.0, 2.0): other keys, not these (a text of
    another Arrow width is the same key)."""
    monkeypatch.setenv("CBP_COLUMNAR", columnar)
    text = KEYTYPE_YAML.replace("KIND", kind)
    p = cbp.load(make_pipeline(text, KEYTYPE_MOD), home=str(tmp_path / "h"), spark=spark)
    p.feed("ev", [{"k": "1", "v": "x"}, {"k": "2", "v": "y"}])
    if code is None:
        p.run()
        assert sorted(r["k"] for r in p.state("s")) == ["1", "2"]
        return
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert e.value.code == code and e.value.stage == "s" and e.value.epoch == 1
    assert p.epochs("s") == 0 and p.state("s") == []


@pytest.mark.parametrize("columnar", ["1", "0"])
def test_a_json_state_that_python_finds_equal_but_json_does_not_is_written(
    spark, tmp_path, make_pipeline, monkeypatch, columnar
):
    """1, true and 1.0 are equal in Python and three values in JSON: a batch result changing one
    into another is a change (as in per-key translate), in the columnar and the key-group paths."""
    monkeypatch.setenv("CBP_COLUMNAR", columnar)
    p = cbp.load(make_pipeline(JSON_YAML, JSON_MOD), home=str(tmp_path / "h"), spark=spark)
    p.feed("ev", [{"k": "a", "v": "1"}, {"k": "b", "v": "[1, 2]"}, {"k": "c", "v": '{"x": 1}'}])
    p.run()
    p.feed("ev", [{"k": "a", "v": "true"}, {"k": "b", "v": "[1.0, true]"}, {"k": "c", "v": '{"x": 1.0}'}])
    [rep] = p.run()
    assert rep.keys_written == 3
    got = {r["k"]: r["j"] for r in p.state("s")}
    assert json.dumps(got, sort_keys=True) == json.dumps({"a": True, "b": [1.0, True], "c": {"x": 1.0}}, sort_keys=True)
