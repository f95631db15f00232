"""A SQL view's current rows as a Delta table (``views/<view>``, cbp/storage/viewtable.py): after every
epoch that inserts, deletes and updates rows (duplicates included), Spark's Delta reader and delta-rs
read exactly the view's consolidated contents and Spark SQL's result over the inputs (multisets); an
epoch touching one row rewrites one file; OPTIMIZE and VACUUM by someone else (between runs, between an
epoch's planning and its view-table commit, between a kill and the recovery), a kill around the view
table's commit, a rewind and an upgrade changing the view's SQL leave it right."""

from __future__ import annotations

import json
import shutil
from collections import Counter

import pandas as pd
import pytest
from deltalake import DeltaTable

import cbp
from cbp import faults
from cbp.commands.explain import explain

SCHEMA = {"id": "int", "cust": "string", "amount": "float"}
VIEWS = {
    "big": "SELECT cust, amount FROM orders WHERE amount > 1",
    "by_cust": "SELECT cust, count(*) AS n, sum(amount) AS s FROM orders GROUP BY cust",
}


def _yaml(views: dict[str, str]) -> str:
    body = "\n".join(f"  {n}: {sql}" for n, sql in views.items())
    return f"pipeline: vt\nflows:\n  orders: {{external: true, schema: {json.dumps(SCHEMA)}}}\nviews:\n{body}\n"


def _pipeline(tmp_path, spark, views=VIEWS):
    path = tmp_path / "vt.yaml"
    path.write_text(_yaml(views))
    return cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)


def _bag(rows) -> Counter:
    return Counter(tuple(sorted((k, round(v, 9) if isinstance(v, float) else v) for k, v in r.items())) for r in rows)


def _expanded(records) -> Counter:
    out: Counter = Counter()
    for r in records:
        d = r.pop("_diff", 1)
        assert d > 0
        out.update({next(iter(_bag([r]))): d})
    return out


def _delta_rs(p, view: str) -> Counter:
    return _bag(DeltaTable(p.home.uri("views", view)).to_pyarrow_table().to_pylist())


def _spark_delta(spark, p, view: str) -> Counter:
    return _bag(r.asDict() for r in spark.read.format("delta").load(p.home.uri("views", view)).collect())


def _spark_sql(spark, orders: Counter, sql: str) -> Counter:
    rows = [dict(k) for k, n in orders.items() for _ in range(n)]
    df = spark.createDataFrame(rows, "id bigint, cust string, amount double")
    df.createOrReplaceTempView("orders")
    return _bag(r.asDict() for r in spark.sql(sql).collect())


def _pandas(orders: Counter, view: str) -> Counter:
    """The from-scratch result of VIEWS[view] over the orders' current rows (pandas)."""
    df = pd.DataFrame([dict(k) for k, n in orders.items() for _ in range(n)], columns=list(SCHEMA))
    if view == "big":
        return _bag(df[df.amount > 1][["cust", "amount"]].to_dict("records"))
    g = df.groupby("cust").agg(n=("id", "size"), s=("amount", "sum")).reset_index()
    return _bag(g.to_dict("records"))


def _check(spark, p, orders: Counter, views=VIEWS, with_spark=False) -> None:
    for view, sql in views.items():
        want = _expanded(p.output(view, consolidated=True))
        assert _delta_rs(p, view) == want, view
        if views[view] == VIEWS.get(view):
            assert _pandas(orders, view) == want, view
        if with_spark:
            assert _spark_delta(spark, p, view) == want, view
            assert _spark_sql(spark, orders, sql) == want, view


def _last_commit(p, view: str) -> tuple[int, int]:
    """Files added and removed by the view table's newest commit."""
    dt = DeltaTable(p.home.uri("views", view))
    log = p.home.read_bytes(f"views/{view}/_delta_log/{dt.version():020d}.json").decode()
    acts = [json.loads(line) for line in log.splitlines() if line]
    return sum("add" in a for a in acts), sum("remove" in a for a in acts)


def _feed(p, orders: Counter, rows: list[dict]) -> None:
    p.feed("orders", rows)
    for r in rows:
        d = r.get("_diff", 1)
        orders.update({next(iter(_bag([{k: v for k, v in r.items() if k != "_diff"}]))): d})
    p.run()


def _order(i: int, cust: str, amount: float, diff: int = 1) -> dict:
    return {"id": i, "cust": cust, "amount": amount, **({"_diff": diff} if diff != 1 else {})}


def test_table_follows_every_epoch_optimize_and_vacuum(spark, tmp_path):
    p = _pipeline(tmp_path, spark)
    orders: Counter = Counter()
    _feed(p, orders, [_order(i, f"c{i % 7}", float(i % 5)) for i in range(60)] + [_order(1, "c1", 1.5)] * 2)
    _check(spark, p, orders)
    # deletes, an update (delete + insert), a duplicate and its retraction
    rows = [_order(3, "c3", 3.0, -1), _order(4, "c4", 4.0, -1), _order(4, "c4", 9.0), _order(1, "c1", 1.5, -1)]
    _feed(p, orders, rows + [_order(70, "c9", 2.0)] * 3)
    _check(spark, p, orders)
    # one row changes in 'big' (one bucket): one file added, at most one removed
    _feed(p, orders, [_order(71, "c9", 2.5)])
    assert _last_commit(p, "big") in ((1, 0), (1, 1))
    # someone else compacts and vacuums the tables
    for view in VIEWS:
        dt = DeltaTable(p.home.uri("views", view))
        dt.optimize.compact()
        dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    _check(spark, p, orders)
    _feed(p, orders, [_order(72, "c1", 7.0), _order(5, "c5", 0.0, -1), _order(8, "c1", 3.0, -1)])
    _check(spark, p, orders, with_spark=True)  # Spark's Delta reader and Spark SQL too
    _feed(p, orders, [_order(73, "c2", 6.0)])  # back to one bucket's file after the compacted ones are split
    assert _last_commit(p, "big") in ((1, 0), (1, 1))
    _check(spark, p, orders)


class _Killed(BaseException):
    """A simulated kill -9 at a fault point (in-process: the journal's pending record stays)."""


@pytest.mark.parametrize("made", [0, 1], ids=["before-view-commit", "after-view-commit"])
def test_kill_around_the_view_commit_recovers(spark, tmp_path, monkeypatch, made):
    views = {"big": VIEWS["big"]}
    p = _pipeline(tmp_path, spark, views)
    orders: Counter = Counter()
    _feed(p, orders, [_order(i, "a", 2.0 + i) for i in range(5)])
    # the epoch's commits: the flow's (0), then the view table's (1); killed after commit ``made``
    real = faults.point

    def point(name: str) -> None:
        if name == f"epoch:committed:{made}":
            raise _Killed(name)
        real(name)

    monkeypatch.setattr(faults, "point", point)
    with pytest.raises(_Killed):
        _feed(p, orders, [_order(1, "a", 3.0, -1), _order(9, "a", 5.0)])
    monkeypatch.setattr(faults, "point", real)
    assert p.home.pending() is not None
    p = _pipeline(tmp_path, spark, views)  # the next process
    p.run()  # finishes the pending epoch first
    assert p.home.pending() is None
    _check(spark, p, orders, views)
    _feed(p, orders, [_order(2, "a", 4.0, -1)])
    _check(spark, p, orders, views)
    # someone deletes a row from the table; the epoch retracting it finds it missing: the table is rebuilt
    DeltaTable(p.home.uri("views", "big")).delete("amount = 6.0")
    _feed(p, orders, [_order(4, "a", 6.0, -1)])
    _check(spark, p, orders, views)


@pytest.mark.parametrize("case", ["optimize", "delete-optimize", "killed-optimize"])
def test_optimize_between_planning_and_the_view_commit(spark, tmp_path, monkeypatch, case):
    """Someone's OPTIMIZE removes the files the planned view-table commit removes, after the epoch's
    planning (or after a kill, before the recovery): the commit is planned again on the compacted
    table (with a DELETE too: rebuilt from the view), made once, and the table equals the view."""
    views = {"big": VIEWS["big"]}
    p = _pipeline(tmp_path, spark, views)
    orders: Counter = Counter()
    _feed(p, orders, [_order(i, "a", 2.0 + i) for i in range(8)])
    table = p.home.uri("views", "big")
    real = faults.point

    def someone_else() -> None:
        if case == "delete-optimize":
            DeltaTable(table).delete("amount = 3.0")  # a row the epoch retracts
        assert DeltaTable(table).optimize.compact()["numFilesRemoved"] > 1

    def point(name: str) -> None:  # after the flow's commit (0), before the view table's (1)
        if name == "epoch:committed:0":
            if case == "killed-optimize":
                raise _Killed(name)
            someone_else()
        real(name)

    monkeypatch.setattr(faults, "point", point)
    if case == "killed-optimize":
        with pytest.raises(_Killed):
            _feed(p, orders, [_order(1, "a", 3.0, -1), _order(3, "a", 5.0, -1), _order(9, "a", 5.0)])
        monkeypatch.setattr(faults, "point", real)
        someone_else()
        p = _pipeline(tmp_path, spark, views)  # the next process finishes the pending epoch
        p.run()
    else:
        _feed(p, orders, [_order(1, "a", 3.0, -1), _order(3, "a", 5.0, -1), _order(9, "a", 5.0)])
        monkeypatch.setattr(faults, "point", real)
    assert p.home.pending() is None
    _check(spark, p, orders, views)
    txns = [
        json.loads(line)
        for f in sorted((tmp_path / "home/views/big/_delta_log").glob("*.json"))
        for line in f.read_text().splitlines()
        if '"txn"' in line
    ]
    assert len({(t["txn"]["appId"], t["txn"]["version"]) for t in txns}) == len(txns) == p.epochs("big")
    _feed(p, orders, [_order(4, "a", 6.0, -1), _order(10, "a", 7.0)])  # and it goes on from there
    _check(spark, p, orders, views)


def test_rewind_and_an_upgrade_changing_the_sql(spark, tmp_path):
    p = _pipeline(tmp_path, spark)
    orders: Counter = Counter()
    _feed(p, orders, [_order(i, f"c{i % 3}", float(i)) for i in range(10)])
    at_one = Counter(orders)
    _feed(p, orders, [_order(2, "c2", 2.0, -1), _order(11, "c0", 8.0)])
    _feed(p, orders, [_order(12, "c1", 1.0)])
    p.rewind(1, "by_cust")  # views run in order: 'big' is at its epoch 1 too
    assert (p.epochs("big"), p.epochs("by_cust")) == (1, 1)
    _check(spark, p, at_one)
    changed = {**VIEWS, "big": "SELECT cust, amount * 2 AS amount FROM orders WHERE amount > 4"}
    shutil.rmtree(tmp_path / "home" / "views" / "by_cust")  # as a home an older cbp wrote: made at the next epoch
    p = _pipeline(tmp_path, spark, changed)
    p.upgrade()
    p.run()
    _check(spark, p, orders, changed)
    assert p.status()["view_tables"] == {v: p.home.uri("views", v) for v in VIEWS}
    assert explain(str(tmp_path / "vt.yaml"), "big", str(tmp_path / "home"))["table"].endswith("/views/big")
    # a view removed leaves its flow and table as they were; added back, both go on from there
    p = _pipeline(tmp_path, spark, {"by_cust": VIEWS["by_cust"]})
    p.upgrade()
    _feed(p, orders, [_order(30, "c1", 9.0), _order(0, "c0", 0.0, -1)])
    p = _pipeline(tmp_path, spark, changed)
    p.upgrade(discard_archived=["big"])
    p.run()
    _check(spark, p, orders, changed)


def test_buckets_follow_random_signed_changes(tmp_path, monkeypatch):
    """cbp.storage.viewtable alone (no Spark): random inserts, deletes and duplicates, a table that
    grows past its buckets (split again), and a foreign file; the rows always equal the multiset."""
    import random

    import pyarrow as pa

    from cbp.storage import Home
    from cbp.storage import viewtable as vt

    monkeypatch.setattr(vt, "ROWS_PER_BUCKET", 1)  # past 64 rows: 128 buckets, every file split again
    home, rel = Home(str(tmp_path)), "views/v"
    schema = pa.schema([("k", pa.int64()), ("s", pa.string())])
    home.ensure_table(rel, schema, "")
    rng, want, files = random.Random(7), Counter(), []
    grown = False
    for step in range(14):
        if step == 6:  # someone compacts the table
            DeltaTable(home.uri(rel)).optimize.compact()
            files = home.head_files(rel)[1]
        rows = [{"k": rng.randint(0, 40), "s": rng.choice(["a", "b", None])} for _ in range(rng.randint(1, 30))]
        delta = [{**r, "_diff": 1} for r in rows]
        for r in rng.sample(sorted(want.elements(), key=repr), min(len(want), rng.randint(0, 8))):
            delta.append({"k": r[0][1], "s": r[1][1], "_diff": -1})
        t = pa.Table.from_pylist(delta, schema=schema.append(pa.field("_diff", pa.int64())))
        vc = vt.apply_delta(home, rel, schema, files, t, f"c{step}")
        home.commit_files(rel, None, "", vc.adds, vc.removes)
        files = home.head_files(rel)[1]
        for d in delta:
            want.update({(("k", d["k"]), ("s", d["s"])): d["_diff"]})
        want = +want
        assert _bag(home.read_table(rel).to_pylist()) == want, step
        ns = {int(f["path"].split("-")[0].split("n")[1]) for f in files}  # b<bucket>n<buckets>-...
        assert len(ns) == 1 and all(vt.bucket_of_name(f["path"], min(ns)) is not None for f in files)
        grown = grown or min(ns) > vt.BUCKETS
    assert grown
    n = min(ns)
    assert max(Counter(vt.bucket_of_name(f["path"], n) for f in files).values()) <= vt.MAX_FILES
    gone = pa.Table.from_pylist(
        [{"k": 999, "s": "x", "_diff": -1}], schema=schema.append(pa.field("_diff", pa.int64()))
    )
    before = sorted((tmp_path / "views" / "v").iterdir())
    with pytest.raises(vt.Diverged):  # a retracted row the table does not hold: nothing is written
        vt.apply_delta(home, rel, schema, files, pa.concat_tables([t, gone]), "x")
    assert sorted((tmp_path / "views" / "v").iterdir()) == before
