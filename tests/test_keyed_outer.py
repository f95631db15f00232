"""Keyed rows visited without input (issue 38): outer grouping, ``route_by: ALL`` and a broadcast to
the stored keys (``broadcast("state")``) call every key that has rows, each reading its rows as it
asks. Checked epoch by epoch against a Python dict model, with keys whose hashes share their top
32 bits (so the partition scan meets keys of one row-hash range)."""

from __future__ import annotations

from pathlib import Path

import pytest

import cbp

MODULE = '''
from cbp import broadcast


def to_state(rec):
    return broadcast("state")


def tick(key, state, ops, bump, out):
    before = {r["rk"]: r["v"] for r in state}
    rows = dict(before)
    ops = list(ops)
    for op in ops:
        if op["op"] == "w":
            rows[op["rk"]] = op["v"]
        elif op["op"] == "d":
            rows.pop(op["rk"], None)
        else:  # "x": every row of the key goes
            rows = {}
    by = sum(b["by"] for b in bump)
    if rows or not any(op["op"] == "x" for op in ops):
        rows["#calls"] = rows.get("#calls", 0) + 1 + by
    for rk in before.keys() - rows.keys():
        out.state.delete(rk)
    for rk, v in rows.items():
        if before.get(rk) != v:
            out.state.write({"k": key, "rk": rk, "v": v})
    out.seen.write({"key": key, "n": len(before), "got": state.get("#calls", {}).get("v", -1)})


def tick_batch(keys, state, ops, bump, out):
    """tick as a batch translator: every key of the call, called by input or not, in one call."""
    import pyarrow as pa
    every = state.all()
    befores = [{} for _ in range(len(keys))]
    for p, r in zip(every["_pos"].to_pylist(), every.select(["rk", "v"]).to_pylist()):
        befores[p][r["rk"]] = r["v"]
    mine = {}
    for r in ops.sort_by("seq").to_pylist():
        mine.setdefault(r["_pos"], []).append(r)
    by = {}
    for r in bump.to_pylist():
        by[r["_pos"]] = by.get(r["_pos"], 0) + r["by"]
    ups, dels, seen = [], [], []
    for p, key in enumerate(keys.to_pylist()):
        before = befores[p]
        rows = dict(before)
        for op in mine.get(p, []):
            if op["op"] == "w":
                rows[op["rk"]] = op["v"]
            elif op["op"] == "d":
                rows.pop(op["rk"], None)
            else:
                rows = {}
        if rows or not any(op["op"] == "x" for op in mine.get(p, [])):
            rows["#calls"] = rows.get("#calls", 0) + 1 + by.get(p, 0)
        dels += [{"_key": key, "rk": rk} for rk in before.keys() - rows.keys()]
        ups += [{"_key": key, "k": key, "rk": rk, "v": v} for rk, v in rows.items() if before.get(rk) != v]
        seen.append({"key": key, "n": len(before), "got": before.get("#calls", -1)})
    ups_schema = pa.schema([("_key", pa.string()), ("k", pa.string()), ("rk", pa.string()), ("v", pa.int64())])
    return {"state": pa.Table.from_pylist(ups, schema=ups_schema),
            "deleted": pa.Table.from_pylist(dels, schema=pa.schema([("_key", pa.string()), ("rk", pa.string())])),
            "seen": pa.Table.from_pylist(
                seen, schema=pa.schema([("key", pa.string()), ("n", pa.int64()), ("got", pa.int64())]))}
'''

YAML = """
pipeline: keyed_outer
flows:
  ops: {schema: {key: string, seq: int, op: string, rk: string, v: int}, external: true}
  bump: {schema: {by: int}, external: true}
  seen: {schema: {key: string, n: int, got: int}}
stages:
  site:
    translator: MOD:FN
    inputs: [{flow: ops, route_by: key, order_by: seq}, {flow: bump, route_by: ROUTE}]
    state: {schema: {k: string, rk: string, v: int}, row_key: rk, grouping: GROUPING}
    outputs: [seen]
    partitions: 2
    runnable: any
    batch: BATCH
"""

KEYS = [
    "k49569",
    "k74517",
    "z",
    "y",
]  # k49569 and k74517: equal top 32 bits of their key hash (tests/test_keyed_rows.py)
EPOCHS = [  # (ops as (kind, key, row key, value), bumps)
    ([("w", "k49569", "a", 1), ("w", "k74517", "a", 2), ("w", "z", "a", 3)], []),
    ([], [5]),
    ([("w", "y", "b", 4), ("d", "z", "a", 0)], [1, 2]),
    ([("x", "k74517", "", 0)], []),
    ([], [7]),
    ([("w", "k74517", "c", 6)], []),
]


def _model(route: str, outer: bool = True) -> tuple[list[list[dict]], list[list[dict]]]:
    """Per epoch: the state rows after it, and the seen records of its calls."""
    rows: dict[str, dict[str, int]] = {}
    states, seens = [], []
    for ops, bumps in EPOCHS:
        stored = {k for k, r in rows.items() if r}
        called = {o[1] for o in ops} | (
            stored if outer or bumps else set()
        )  # outer grouping, or a broadcast to the stored keys, calls every stored key
        seen = []
        for key in sorted(called):
            before = dict(rows.get(key, {}))
            now = dict(before)
            mine = [o for o in ops if o[1] == key]
            for kind, _, rk, v in mine:
                if kind == "w":
                    now[rk] = v
                elif kind == "d":
                    now.pop(rk, None)
                else:
                    now = {}
            reached = (
                route == "ALL" or key in stored
            )  # ALL reaches every called key; broadcast("state") the stored ones
            if now or not any(o[0] == "x" for o in mine):
                now["#calls"] = now.get("#calls", 0) + 1 + (sum(bumps) if reached else 0)
            rows[key] = now
            seen.append({"key": key, "n": len(before), "got": before.get("#calls", -1)})
        states.append(
            sorted(
                ({"k": k, "rk": rk, "v": v} for k, r in rows.items() for rk, v in r.items()),
                key=lambda r: (r["k"], r["rk"]),
            )
        )
        seens.append(seen)
    return states, seens


@pytest.mark.parametrize(
    "grouping, route, mode, batch",
    [
        ("outer", "ALL", "direct", False),
        ("outer", "ALL", "blackbox", False),
        ("inner", "MOD:to_state", "direct", False),
        ("outer", "MOD:to_state", "direct", False),
        ("outer", "ALL", "direct", True),
        ("inner", "MOD:to_state", "direct", True),
    ],
)
def test_keys_visited_without_input_read_their_rows_as_asked(make_pipeline, spark, grouping, route, mode, batch):
    yaml = YAML.replace("GROUPING", grouping).replace("ROUTE", route).replace("FN", "tick_batch" if batch else "tick")
    path = make_pipeline(yaml.replace("BATCH", "true" if batch else "false"), MODULE)
    p = cbp.load(path, home=str(Path(path).parent / "home"), mode=mode, spark=spark)
    states, seens = _model("ALL" if route == "ALL" else "state", grouping == "outer")
    for i, (ops, bumps) in enumerate(EPOCHS):
        if ops:
            p.feed("ops", [{"key": k, "seq": n, "op": o, "rk": rk, "v": v} for n, (o, k, rk, v) in enumerate(ops)])
        if bumps:
            p.feed("bump", [{"by": b} for b in bumps])
        rep = p.run()
        assert len(rep) == 1, f"epoch {i + 1}"
        got = sorted(
            ({"k": r["k"], "rk": r["rk"], "v": r["v"]} for r in p.state("site")), key=lambda r: (r["k"], r["rk"])
        )
        assert got == states[i], f"epoch {i + 1}"
        seen = sorted(p.output("seen", epoch=rep[0].epoch), key=lambda r: r["key"])
        assert [{k: r[k] for k in ("key", "n", "got")} for r in seen] == seens[i], f"epoch {i + 1}"


def test_the_model_calls_keys_without_input():
    """The cases above mean something: epochs with no ops call stored keys, and a cleared key is not called again."""
    _, seens = _model("ALL")
    assert [r["key"] for r in seens[1]] == ["k49569", "k74517", "z"]
    assert [r["key"] for r in seens[4]] == ["k49569", "y", "z"]
    _, seens = _model("state", outer=False)
    assert [r["key"] for r in seens[1]] == ["k49569", "k74517", "z"] and [r["key"] for r in seens[3]] == ["k74517"]
