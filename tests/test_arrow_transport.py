"""Records cross the shuffle as Arrow structs of their schema (no JSON text): whatever they hold,
a translator gets them exactly as they were fed, through Spark's shuffle and through the small-
epoch path, per key and in a batch, with several input flows, copies (ALL) and OrderBy."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from cbp.engine.task.groups import group_chunks
from cbp.testing import Increment, replay

YAML = """
pipeline: echo
flows:
  a: {external: true, schema: {k: string, s: "string?", f: "float?", b: "bool?", j: "json?", xs: "list<float?>?",
      n: int}}
  c: {external: true, schema: {k: string, n: int, tag: string}}
  got: {schema: {k: string, flow: string, rec: string}}
stages:
  echo:
    translator: MOD:TRANSLATOR
    BATCH
    partitions: 3
    runnable: any
    inputs:
      - {flow: a, route_by: k, order_by: n}
      - {flow: c, route_by: ROUTE}
    state: {schema: {k: string, seen: int}}
    outputs: [got]
"""
MODULE = """
import json
import pyarrow as pa
import pyarrow.compute as pc


def _text(rec):
    return json.dumps(rec, sort_keys=True)


def per_key(key, state, a, c, out):
    n = sum(r["seen"] for r in state)
    for flow, recs in (("a", a), ("c", c)):
        for r in recs:
            out.write("got", {"k": key, "flow": flow, "rec": _text(r)})
            n += 1
    out.write("state", {"k": key, "seen": n})


def route(rec):
    import cbp
    return cbp.ALL if rec["k"] == "*" else rec["k"]


def batch(keys, state, a, c, out):
    rows = []
    for flow, t in (("a", a), ("c", c)):
        for r in t.to_pylist():
            k = r.pop("_key")
            r.pop("_pos")
            if flow == "a" and r["j"] is not None:
                r["j"] = json.loads(r["j"])
            rows.append({"k": k, "flow": flow, "rec": _text(r)})
    got = pa.Table.from_pylist(rows, pa.schema([("k", pa.string()), ("flow", pa.string()), ("rec", pa.string())]))
    seen = {k: 0 for k in keys.to_pylist()}
    for r in state.to_pylist():
        seen[r["_key"]] += r["seen"]
    for r in rows:
        seen[r["k"]] += 1
    st = pa.table({"_key": list(seen), "k": list(seen), "seen": list(seen.values())})
    return {"state": st, "got": got}
"""
ODD = ['q"1', "b\\2", "t\t3", "é", "\u2028", "", "nul\x00", "😀"]


def _rec(rng: random.Random, i: int, keys: list[str]) -> dict:
    return {
        "k": rng.choice(keys),
        "s": rng.choice([None, *ODD]),
        "f": rng.choice([None, 0.1, -2.5e300, 1e-310, 3.0]),
        "b": rng.choice([None, True, False]),
        "j": rng.choice([None, {"x": [1, "é", None]}, [1.5, {"q": '"'}], "text", 7]),
        "xs": rng.choice([None, [], [1.0, None, -0.0]]),
        "n": i,
    }


def _incs(seed: int, copies: bool) -> list[Increment]:
    rng = random.Random(seed)
    keys = ["k1", "k2", "k3"] + ([] if not copies else ['key"4', "k\\5"])  # keys JSON must escape take the shuffle
    incs = []
    for step in range(3):
        incs.append(Increment("a", [_rec(rng, step * 100 + i, keys) for i in range(rng.randint(5, 25))]))
        cs = [{"k": rng.choice(["k1", "k2", "zz"]), "n": i, "tag": rng.choice(ODD)} for i in range(rng.randint(1, 6))]
        if copies:
            cs.append({"k": "*", "n": 99, "tag": "to all"})
        incs.append(Increment("c", cs))
    return incs


def _canon(recs):
    return sorted(json.dumps(r, sort_keys=True) for r in recs)


@pytest.mark.parametrize("batch", [False, True])
@pytest.mark.parametrize("small", [True, False])
def test_records_reach_the_translator_as_fed(spark, tmp_path, make_pipeline, monkeypatch, batch, small):
    if not small:
        monkeypatch.setenv("CBP_SMALL_EPOCH_RECORDS", "0")
    copies = (
        batch or not small
    )  # a RouteBy function with ALL (and keys JSON escapes): routed by a Spark job in a small epoch
    text = YAML.replace("TRANSLATOR", "batch" if batch else "per_key").replace("BATCH", "batch: true" if batch else "")
    text = text.replace("ROUTE", "MOD:route" if copies else "k")
    path = make_pipeline(text, MODULE)
    incs = _incs(3, copies)
    run = replay(path, incs, home=str(tmp_path / "h"), mode="direct", spark=spark)
    got = run.outputs("got")
    want = []
    step_keys: list[set[str]] = []
    for inc in incs:  # one step per increment: the keys called in it
        step_keys.append({r["k"] for r in inc.records if r["k"] != "*"})
    for inc, keys in zip(incs, step_keys):
        for r in inc.records:
            targets = sorted(keys) if r["k"] == "*" else [r["k"]]
            for k in targets:
                want.append(
                    {"k": k, "flow": inc.flow, "rec": json.dumps({**r, "_diff": 1}, sort_keys=True)}
                )  # every record has its multiplicity
    assert _canon(got) == _canon(want)
    shuffled = [e.report.shuffle_records for s in run.steps for e in s.epochs]
    assert (max(shuffled) == 0) == small
    # OrderBy n: within a key and an epoch, flow a's records come in n order
    for s in run.steps:
        seq: dict[str, list[int]] = {}
        for g in s.outputs.get("got", []):
            if g["flow"] == "a":
                seq.setdefault(g["k"], []).append(json.loads(g["rec"])["n"])
        assert all(v == sorted(v) for v in seq.values())
    state = {r["k"]: r["seen"] for r in run.final_state("echo")}
    assert sum(state.values()) == len(want)


def _envelopes(rng: random.Random, n: int) -> pa.Table:
    rec = pa.struct([("v", pa.int64()), ("s", pa.string())])
    keys = [f'"{rng.choice("abc")}{rng.randint(0, 3)}"' for _ in range(n)]
    rows = sorted(((sum(map(ord, k)) % 5, k, rng.randint(0, 1), i) for i, k in enumerate(keys)))
    keys = [r[1] for r in rows]
    flows = [r[2] for r in rows]
    vals = [{"v": r[3], "s": rng.choice(ODD)} for r in rows]
    return pa.table(
        {
            "_key": keys,
            "_flow": pa.array(flows, pa.int32()),
            "_rec": pa.nulls(n, pa.string()),
            "_h": [r[0] for r in rows],
            "_i0": pa.array([v if f == 0 else None for v, f in zip(vals, flows)], rec),
            "_i1": pa.array([v if f == 1 else None for v, f in zip(vals, flows)], rec),
        }
    )


@pytest.mark.parametrize("seed", range(6))
def test_groups_hold_the_same_records_decoded_or_as_arrow_slices(seed):
    """Per-key groups (dicts) and batch groups (Arrow slices) hold the same records, whatever the
    batch boundaries, and each key's records in order."""
    rng = random.Random(seed)
    t = _envelopes(rng, rng.randint(1, 200))
    batches = t.to_batches(max_chunksize=rng.randint(1, 40))
    dicts = [(g.key, g.records, g.flows) for c in group_chunks(batches, 2) for g in c]
    slices = [
        (g.key, g.records, [[r for s in f for r in s.to_pylist()] for f in g.flows])
        for c in group_chunks(batches, 2, arrow=True)
        for g in c
    ]
    assert dicts == slices
    want: dict[str, list[list[dict]]] = {}
    for r in t.to_pylist():
        want.setdefault(r["_key"], [[], []])[r["_flow"]].append(r[f"_i{r['_flow']}"])
    assert {k: f for k, _, f in dicts} == want
    assert len(dicts) == len(want)  # one group per key, however the batches cut them
