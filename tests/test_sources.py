"""Delta tables as sources and keyed flows, end to end: after every run the totals a translator
keeps equal a pandas groupby of the source table's current rows (local and s3:// sources); keyed
flows equal a from-scratch "latest row per key"; errors land nothing; a sync killed anywhere lands
every version exactly once."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pandas as pd
import pyarrow as pa
import pytest
from conftest import ROOT
from crash_harness import cli_here
from deltalake import DeltaTable, write_deltalake

import cbp
from cbp.errors import InputError

CDF = {"delta.enableChangeDataFeed": "true"}
YAML = """
pipeline: orders_t
flows:
  orders:
    external: true
    source: {delta: "SRC"}
    schema: {order_id: int, customer: string, amount: int}
  totals: {schema: {customer: string, orders: int, total: int}}
stages:
  totals:
    translator: MOD:totals
    signed: true
    partitions: 2
    inputs: [{flow: orders, route_by: customer}]
    state: {schema: {customer: string, orders: int, total: int}, grouping: inner}
    outputs: [totals]
"""
MOD = """
def totals(customer, state, orders, out):
    prev = next(state, None)
    n, t = (prev["orders"], prev["total"]) if prev else (0, 0)
    for o in orders:
        n += o["_diff"]
        t += o["_diff"] * o["amount"]
    if n:
        out.state.write({"customer": customer, "orders": n, "total": t})
    out.totals.write({"customer": customer, "orders": n, "total": t})
"""


def _opts(uri: str):
    from cbp.storage import objectstore

    return objectstore.storage_options(uri)


def _orders(ids, rnd):
    return pa.table(
        {
            "order_id": pa.array(ids, pa.int64()),
            "customer": [f"c{rnd.randrange(6)}" for _ in ids],
            "amount": pa.array([rnd.randrange(1, 100) for _ in ids], pa.int64()),
        }
    )


def _expected(uri: str) -> dict:
    df = DeltaTable(uri, storage_options=_opts(uri)).to_pandas()
    g = df.groupby("customer")["amount"].agg(["count", "sum"])
    return {c: (int(r["count"]), int(r["sum"])) for c, r in g.iterrows()}


def _totals(p) -> dict:
    return {r["customer"]: (r["orders"], r["total"]) for r in p.state("totals")}


def _change(uri: str, v: int, rnd: random.Random, next_id: list) -> None:
    """Version ``v`` of the table: appends, MERGE updates that move rows between customers, deletes, mixed MERGEs."""
    dt = DeltaTable(uri, storage_options=_opts(uri))
    kind = v % 4
    if kind == 0:
        ids = list(range(next_id[0], next_id[0] + 5))
        next_id[0] += 5
        write_deltalake(uri, _orders(ids, rnd), mode="append", storage_options=_opts(uri))
    elif kind == 1:
        live = sorted(dt.to_pandas()["order_id"])
        src = _orders(rnd.sample(live, min(4, len(live))), rnd)
        dt.merge(src, "t.order_id = s.order_id", source_alias="s", target_alias="t").when_matched_update_all().execute()
    elif kind == 2:
        dt.delete(f"order_id % 7 = {v % 7}")
    else:
        live = sorted(dt.to_pandas()["order_id"])
        ids = rnd.sample(live, min(3, len(live))) + [next_id[0], next_id[0] + 1]
        next_id[0] += 2
        (
            dt.merge(_orders(ids, rnd), "t.order_id = s.order_id", source_alias="s", target_alias="t")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )


def _follow(make_pipeline, tmp_path, uri: str, versions: int) -> None:
    rnd = random.Random(5)
    write_deltalake(uri, _orders(list(range(20)), rnd), configuration=CDF, storage_options=_opts(uri))
    _change(uri, 1, rnd, [20])  # the first sync lands the table as of its newest version, not version 0
    p = cbp.load(make_pipeline(YAML.replace("SRC", uri), MOD), home=str(tmp_path / "home"))
    next_id = [100]
    for v in range(versions + 1):
        if v:
            _change(uri, v, rnd, next_id)
        p.run()
        assert _totals(p) == _expected(uri), f"after version {v}"
    feeds = p.feeds("orders")
    assert (
        feeds == DeltaTable(uri, storage_options=_opts(uri)).version() and p.run() == [] and p.feeds("orders") == feeds
    )  # nothing new: nothing changes
    assert [r.line() for r in p.sync()] == [f"orders: {uri} has no new version"]


def test_delta_source_follows_appends_updates_and_deletes(spark, make_pipeline, tmp_path):
    _follow(make_pipeline, tmp_path, str(tmp_path / "src"), versions=10)


# ------------------------------------------------------------------ errors: nothing lands
def _pipe(make_pipeline, tmp_path, uri):
    return cbp.load(make_pipeline(YAML.replace("SRC", uri), MOD), home=str(tmp_path / "home"))


def test_source_errors_land_nothing(make_pipeline, tmp_path):
    uri = str(tmp_path / "src")
    p = _pipe(make_pipeline, tmp_path, uri)
    with pytest.raises(InputError) as e:
        p.sync()
    assert e.value.code == "source-missing" and uri in str(e.value)
    cli = [sys.executable, "-m", "cbp.cli", "sync", p.spec.path, "--home", str(tmp_path / "home")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run(cli, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 3 and "[source-missing]" in r.stderr
    write_deltalake(uri, _orders([1, 2, 3], random.Random(1)))  # no change data feed
    r = subprocess.run(
        cli, env=env, capture_output=True, text=True, timeout=300
    )  # the first sync needs none: the table as it is
    assert (
        r.returncode == 0
        and r.stdout.startswith("orders: landed version 0 of ")
        and "(3 changed records, feeds 1..1)" in r.stdout
    )
    DeltaTable(uri).delete("order_id = 2")
    with pytest.raises(InputError) as e:
        p.sync()
    assert e.value.code == "source-no-cdf" and "version 1" in str(e.value) and "enableChangeDataFeed" in str(e.value)
    assert p.feeds("orders") == 1
    with pytest.raises(InputError) as e:
        p.feed("orders", [{"order_id": 9, "customer": "x", "amount": 1}])
    assert e.value.code == "source-flow" and p.feeds("orders") == 1


def test_vacuumed_change_data_and_schema_drift(make_pipeline, tmp_path):
    uri = str(tmp_path / "src")
    write_deltalake(uri, _orders([1, 2, 3], random.Random(1)), configuration=CDF)
    p = _pipe(make_pipeline, tmp_path, uri)
    p.sync()
    DeltaTable(uri).delete("order_id = 2")
    for f in (tmp_path / "src" / "_change_data").iterdir():
        f.unlink()  # as VACUUM would
    with pytest.raises(InputError) as e:
        p.sync()
    assert e.value.code == "source-cdf-missing" and "version 1" in str(e.value) and p.feeds("orders") == 1
    uri2 = str(tmp_path / "src2")
    write_deltalake(uri2, _orders([1, 2], random.Random(1)), configuration=CDF)
    p2 = cbp.load(make_pipeline(YAML.replace("SRC", uri2), MOD), home=str(tmp_path / "home2"))
    p2.sync()
    bad = pa.table({"order_id": pa.array([5], pa.int64()), "customer": ["c"], "amount": ["a lot"]})
    write_deltalake(uri2, bad, mode="overwrite", schema_mode="overwrite")
    with pytest.raises(InputError) as e:
        p2.sync()
    assert e.value.code == "source-schema" and "version 1" in str(e.value) and p2.feeds("orders") == 1


# ------------------------------------------------------------------ a sync killed anywhere
KILLS = [
    ["kill:sync:read:2"],
    ["kill:feed:written:2"],
    ["kill:feed:pending:3"],
    ["kill:feed:committed:0:2", "kill:recover:snapshot:1"],  # killed again while the next sync recovers
    ["kill:feed:snapshot:3"],
    ["kill:sync:landed:1"],
    ["kill:sync:landed:3"],
]


@pytest.mark.parametrize("keyed", [False, True])
def test_sync_killed_anywhere_lands_each_version_once(make_pipeline, tmp_path, keyed):
    """``cbp sync`` killed (SIGKILL) at each moment of landing a version, then synced again: every
    version landed exactly once, and the flow's signed records add up to the table's rows (for a
    keyed flow too, whose keyed table commits second: ``feed:committed:1``)."""
    uri = str(tmp_path / "src")
    rnd = random.Random(2)
    write_deltalake(uri, _orders(list(range(10)), rnd), configuration=CDF)
    text = YAML.replace("SRC", uri)
    yaml = make_pipeline(text.replace("    source:", "    key: [order_id]\n    source:") if keyed else text, MOD)
    home = str(tmp_path / "home")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "cbp.cli", "sync", str(yaml), "--home", home]
    assert cli_here(["sync"], home, yaml=yaml).returncode == 0  # the syncs not killed: in this process
    next_id = [50]
    # a keyed flow's feeds make two commits (the flow's, then its keyed table's): every point; a plain one, a few (the
    # same code)
    kills = (
        KILLS + [["kill:feed:committed:1:2"], ["kill:feed:committed:0:1", "kill:recover:committed:1:1"]]
        if keyed
        else KILLS[2:5]
    )
    for n, faults in enumerate(kills):
        for v in range(3):
            _change(uri, 4 * n + v, rnd, next_id)
        for fault in faults:
            r = subprocess.run(cmd, env={**env, "CBP_FAULT": fault}, capture_output=True, text=True, timeout=300)
            assert r.returncode == -9, (fault, r.stderr)  # the fault point was reached
        r = cli_here(["sync"], home, yaml=yaml)  # the recovery
        assert r.returncode == 0, r.stderr
    p = cbp.load(yaml, home=home)
    ids = [p.parts.history.feed(p.parts.live.st, "orders", i).id for i in range(1, p.feeds("orders") + 1)]
    versions = [int(i.rpartition("@")[2]) for i in ids]
    assert versions == list(range(versions[0], DeltaTable(uri).version() + 1))  # each once, in order
    rows: dict = {}
    for r in p.output("orders"):
        d = r.pop("_diff", 1)
        key = tuple(sorted(r.items()))
        rows[key] = rows.get(key, 0) + d
    want = DeltaTable(uri).to_pandas()
    assert sorted(k for k, c in rows.items() for _ in range(c)) == sorted(
        tuple(sorted(r.items())) for r in want.to_dict("records")
    )
    assert all(c >= 0 for c in rows.values())


# ------------------------------------------------------------------ keyed flows
KEYED = """
pipeline: keyed_t
flows:
  events:
    external: true
    key: [id]
    sequence_by: ts
    delete_when: gone
    schema: {id: int, grp: string, v: int, ts: int, gone: bool}
  sums: {schema: {grp: string, n: int, total: int}}
stages:
  sums:
    translator: MOD:sums
    signed: true
    partitions: 2
    inputs: [{flow: events, route_by: grp}]
    state: {schema: {grp: string, n: int, total: int}, grouping: inner}
    outputs: [sums]
"""
KEYED_MOD = """
def sums(grp, state, events, out):
    prev = next(state, None)
    n, t = (prev["n"], prev["total"]) if prev else (0, 0)
    for e in events:
        n += e["_diff"]
        t += e["_diff"] * e["v"]
    if n:
        out.state.write({"grp": grp, "n": n, "total": t})
"""


def test_keyed_flow_equals_latest_row_per_key(spark, make_pipeline, tmp_path):
    rnd = random.Random(11)
    events = [
        {
            "id": rnd.randrange(25),
            "grp": f"g{rnd.randrange(4)}",
            "v": rnd.randrange(50),
            "ts": ts,
            "gone": rnd.random() < 0.2,
        }
        for ts in range(240)
    ]
    shuffled = events[:]
    rnd.shuffle(shuffled)
    p = cbp.load(make_pipeline(KEYED, KEYED_MOD), home=str(tmp_path / "home"))
    for start in range(0, len(shuffled), 60):
        p.feed("events", shuffled[start : start + 60])
        p.run()
        df = pd.DataFrame(shuffled[: start + 60]).sort_values("ts").groupby("id").tail(1)
        df = df[~df["gone"]]
        g = df.groupby("grp")["v"].agg(["count", "sum"])
        assert {r["grp"]: (r["n"], r["total"]) for r in p.state("sums")} == {
            k: (int(r["count"]), int(r["sum"])) for k, r in g.iterrows()
        }
    before = p.feeds("events")
    with pytest.raises(InputError) as e:
        p.feed("events", [{"id": 1, "grp": "g0", "v": 1, "ts": 1000, "gone": False, "_diff": 2}])
    assert e.value.code == "keyed-diff" and p.feeds("events") == before


def test_keyed_delete_of_missing_row_lands_nothing(make_pipeline, tmp_path):
    text = KEYED.replace("    sequence_by: ts\n", "")
    p = cbp.load(make_pipeline(text, KEYED_MOD), home=str(tmp_path / "home"))
    p.feed("events", [{"id": 1, "grp": "a", "v": 1, "ts": 0, "gone": False}])
    with pytest.raises(InputError) as e:
        p.feed(
            "events",
            [
                {"id": 1, "grp": "a", "v": 5, "ts": 1, "gone": False},
                {"id": 2, "grp": "a", "v": 1, "ts": 0, "gone": True},
            ],
            feed_id="batch-2",
        )
    assert (
        e.value.code == "retract-missing"
        and "'events'" in str(e.value)
        and "batch-2" in str(e.value)
        and '"id": 2' in str(e.value)
    )
    assert p.feeds("events") == 1 and p.output("events") == [{"id": 1, "grp": "a", "v": 1, "ts": 0, "gone": False}]
    p.feed("events", [{"id": 1, "grp": "a", "v": 5, "ts": 1, "gone": False}])
    assert p.output("events", epoch=2) == [
        {"id": 1, "grp": "a", "v": 1, "ts": 0, "gone": False, "_diff": -1},
        {"id": 1, "grp": "a", "v": 5, "ts": 1, "gone": False},
    ]


def test_keyed_delta_source(make_pipeline, tmp_path):
    """A keyed flow fed from a Delta table: updates (pre- and post-images) and deletes become
    upserts and deletes by key; the flow's signed records add up to the table's rows."""
    uri = str(tmp_path / "src")
    rnd = random.Random(4)
    write_deltalake(uri, _orders(list(range(12)), rnd), configuration=CDF)
    text = YAML.replace("SRC", uri).replace("    source:", "    key: [order_id]\n    source:")
    p = cbp.load(make_pipeline(text, MOD), home=str(tmp_path / "home"))
    next_id = [40]
    for v in range(1, 9):
        _change(uri, v, rnd, next_id)
        p.sync()
    rows: dict = {}
    for r in p.output("orders"):
        d = r.pop("_diff", 1)
        key = tuple(sorted(r.items()))
        rows[key] = rows.get(key, 0) + d
    want = DeltaTable(uri).to_pandas().to_dict("records")
    assert {k: c for k, c in rows.items() if c} == {tuple(sorted(r.items())): 1 for r in want}
