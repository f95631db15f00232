"""A view's first build computed by Spark SQL (cbp/views/bulk.py, cbp/engine/driver/bulkjob.py): the
same state rows per key and the same output as the per-key path (``CBP_BULK_BUILD=0``), and Spark
SQL's result; both maintained alike through inserts, deletes, updates that delete the MIN/MAX holder
and empty a group; a row that fails Spark's ANSI mode fails the epoch with the per-key path's code."""

from __future__ import annotations

import decimal
import random
import textwrap

import pytest
from test_sql_views import _expand, check_views

import cbp
from cbp.errors import CbpError
from cbp.views.bulk import GroupBuild

LI = {"id": "int", "g": "string", "d": "date", "q": "decimal(15,2)", "p": "decimal(15,2)", "n": "int?", "f": "float"}
VIEWS = {
    "agg": "SELECT g, d, count(*) AS c, sum(q) AS sq, sum(q * (1 - p)) AS sdp, avg(q) AS aq, min(q) AS lo, "
    "max(d) AS hi, count(DISTINCT n) AS dn, sum(n) AS sn, avg(n) AS an, count(n) AS cn, max(g) AS mg, "
    "sum(DISTINCT n) AS sdn, avg(DISTINCT q) AS adq "
    "FROM li WHERE id % 7 <> 0 GROUP BY g, d HAVING count(*) > 0",
    "total": "SELECT sum(q * p) AS rev, count(*) AS c, min(g) AS mg, count(DISTINCT d) AS nd, sum(DISTINCT p) AS sdp "
    "FROM li WHERE q < 24",
    "by_n": "SELECT n % 3 AS m, sum(f) AS sf, count(*) AS c FROM li GROUP BY n % 3",
}


def _yaml(views: dict[str, str]) -> str:
    schema = ", ".join(f"{k}: {t!r}" for k, t in LI.items())
    body = "\n".join(f"  {n}: |\n{textwrap.indent(sql, '    ')}" for n, sql in views.items())
    return f"pipeline: bulk\nflows:\n  li: {{external: true, schema: {{{schema}}}}}\nviews:\n{body}\n"


def _rows(rng: random.Random, ids: range) -> list[dict]:
    import datetime

    return [
        {
            "id": i,
            "g": rng.choice(["a", "b", 'é"x', "c\\n"]),
            "d": datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randint(0, 3)),
            "q": decimal.Decimal(rng.randint(1, 5000)) / 100,
            "p": decimal.Decimal(rng.randint(0, 10)) / 100,
            "n": rng.choice([None, 0, 1, 2, 5]),
            "f": rng.randint(-8, 8) / 4,
        }
        for i in ids
    ]


@pytest.fixture
def seeds(monkeypatch):
    """The bulk path's builds, counted (the build runs in the driver): the stages of the seed path's
    builds, then (after ``"|"``) those whose rows Spark wrote (cbp/views/groupbulk.py) with no failure."""
    from cbp.engine.driver import bulkjob

    calls: list[str] = []
    real, real_written = GroupBuild.seed, bulkjob.written

    def seed(self, spark, stage, frames):
        calls.append(stage.name)
        return real(self, spark, stage, frames)

    def written(spark, plan, *args):
        done = real_written(spark, plan, *args)
        calls.append("|" + plan.stage.name)  # a failure falls back to the seed path, uncounted here
        return done

    monkeypatch.setattr(GroupBuild, "seed", seed)
    monkeypatch.setattr(bulkjob, "written", written)
    monkeypatch.setenv("CBP_SMALL_EPOCH_RECORDS", "0")  # first builds through the shuffle (the bulk path's)
    return calls


def _built(calls: list[str]) -> list[str]:
    """The stages a bulk path built (the seed path's or Spark's rows), sorted."""
    return sorted(c.lstrip("|") for c in calls)


def _small_epochs(monkeypatch) -> None:
    """Epochs after the first builds as a small change takes them by default (the driver routes them and runs
    the same grouped task over the same state files, no Spark job): the state the bulk path wrote is maintained
    by the per-key translators either way, and a shuffle job per view stage and epoch was most of these tests'
    CPU."""
    monkeypatch.delenv("CBP_SMALL_EPOCH_RECORDS")


def _pipelines(spark, tmp_path, views):
    path = tmp_path / "v.yaml"
    path.write_text(_yaml(views))
    return [cbp.Pipeline(str(path), str(tmp_path / h), spark=spark) for h in ("bulk", "perkey")]


def _run(p, bulk: bool, monkeypatch) -> dict[str, int]:
    """Run with the bulk path allowed or not; the records each view stage's epochs read."""
    monkeypatch.setenv("CBP_BULK_BUILD", "1" if bulk else "0")
    read: dict[str, int] = {}
    for r in p.run():
        read[r.stage] = read.get(r.stage, 0) + r.records_in
    return read


def _same_state_and_output(bulk, perkey, views) -> None:
    for v in views:
        a = sorted(bulk.state(v), key=lambda r: r["k"])
        b = sorted(perkey.state(v), key=lambda r: r["k"])
        assert a == b, v
        rows = [sorted(map(str, _expand(p.output(v, consolidated=True)))) for p in (bulk, perkey)]
        assert rows[0] == rows[1], v


def test_bulk_first_build_equals_per_key_and_spark_then_both_maintained(spark, tmp_path, seeds, monkeypatch):
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    rng = random.Random(48)
    bulk, perkey = _pipelines(spark, tmp_path, VIEWS)
    live = _rows(rng, range(300))
    for p in (bulk, perkey):
        p.feed("li", live + [{**live[0], "_diff": -1}, {**live[1], "_diff": 1}])
    read = _run(bulk, True, monkeypatch)
    # every view's first build by Spark SQL: agg's key strings need escaping in JSON ('é"x'), so its rows
    # job failed and its seeds were written by Python; total has no GROUP BY (its row is written for no input)
    assert sorted(seeds) == ["agg", "total", "|by_n"]
    assert all(read[v] < 50 for v in VIEWS), read  # its tasks read a seed row per group, not 302 records
    # the per-key path reads the records (consolidated by the columns each view reads: fewer than 302)
    assert all(50 < n <= 302 for n in _run(perkey, False, monkeypatch).values())
    assert len(seeds) == len(VIEWS)  # the per-key path: no seed
    live = live[1:] + [live[1]]
    _same_state_and_output(bulk, perkey, VIEWS)
    _small_epochs(monkeypatch)
    try:
        check_views(spark, bulk, VIEWS, {"li": LI})
        by_g = {}
        for r in live:
            by_g.setdefault((r["g"], r["d"]), []).append(r)
        (g, d), group = next((k, rs) for k, rs in by_g.items() if rs)
        lo = min(group, key=lambda r: r["q"])  # the MIN holder deleted, another row updated
        moved = {**group[-1], "q": decimal.Decimal("0.01"), "d": group[-1]["d"].replace(day=9)}
        change = [{**lo, "_diff": -1}, {**group[-1], "_diff": -1}, moved, *_rows(rng, range(300, 320))]
        for r in change:
            if r.get("_diff") == -1:
                live.remove({k: v for k, v in r.items() if k != "_diff"})
            else:
                live.append(r)
        emptied = [{**r, "_diff": -1} for r in live if r["g"] == "a"]  # every group of 'a' emptied
        for step in (change, emptied):
            for p, b in ((bulk, True), (perkey, False)):
                p.feed("li", step)
                _run(p, b, monkeypatch)
            _same_state_and_output(bulk, perkey, VIEWS)
            check_views(spark, bulk, VIEWS, {"li": LI})
        assert len(seeds) == len(VIEWS)  # state not empty: the per-key path maintains
        assert not [r for r in bulk.output("agg", consolidated=True) if r["g"] == "a"]
    finally:
        for name in [*VIEWS, "li"]:
            spark.catalog.dropTempView(name)


def test_group_rows_written_by_spark_are_the_per_key_state_byte_for_byte(spark, tmp_path, seeds, monkeypatch):
    """cbp/views/groupbulk.py: with key strings JSON escapes alike in Python and Spark (a quote, a
    backslash), the GROUP BY views' state rows and view rows are Spark's, not Python's per group: the
    state files' rows (key text, hash, counts, sums, multisets' JSON) equal the per-key path's, and the
    per-key path maintains them through deletes of MIN/MAX holders and a group emptied."""
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    views = {v: VIEWS[v] for v in ("agg", "by_n")}
    bulk, perkey = _pipelines(spark, tmp_path, views)
    live = [{**r, "g": r["g"].replace("é", "q")} for r in _rows(random.Random(7), range(200))]
    for p in (bulk, perkey):
        p.feed("li", live + [{**live[0], "_diff": -1}])
    _run(bulk, True, monkeypatch)
    _run(perkey, False, monkeypatch)
    assert seeds == ["|agg", "|by_n"]  # no seed through Python
    for v in views:
        assert _raw_state(bulk, v) == _raw_state(perkey, v), v
    _same_state_and_output(bulk, perkey, views)
    _small_epochs(monkeypatch)
    try:
        check_views(spark, bulk, views, {"li": LI})
        lows = {}
        for r in live[1:]:
            if (r["g"], r["d"]) not in lows or r["q"] < lows[(r["g"], r["d"])]["q"]:
                lows[(r["g"], r["d"])] = r
        gone = [{**r, "_diff": -1} for r in [*lows.values(), *(r for r in live[1:] if r["g"] == "b")]]
        bulk.feed("li", list({tuple(sorted(r.items())): r for r in gone}.values()))
        _run(bulk, True, monkeypatch)  # the MIN holders deleted, every group of 'b' emptied
        check_views(spark, bulk, views, {"li": LI})
    finally:
        for name in [*views, "li"]:
            spark.catalog.dropTempView(name)


def test_a_row_failing_ansi_fails_the_bulk_epoch_with_the_per_key_code(spark, tmp_path, seeds, monkeypatch):
    views = {"bad": "SELECT g, sum(CAST(g AS INT)) AS s FROM li GROUP BY g"}
    codes = []
    for p, bulk in zip(_pipelines(spark, tmp_path, views), (True, False), strict=True):
        p.feed("li", _rows(random.Random(1), range(20)))
        with pytest.raises(CbpError) as e:
            _run(p, bulk, monkeypatch)
        codes.append(e.value.code)
        assert p.state("bad") == [] and p.output("bad") == []  # nothing of the epoch committed
    assert codes == ["view-cast", "view-cast"]
    assert seeds == ["bad"]  # Spark failed the rows job, then the seeds' job; the per-key path named the row


def test_views_added_and_rebuilt_by_upgrade_take_the_bulk_path(spark, tmp_path, seeds, monkeypatch):
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    before = {"total": VIEWS["total"]}
    after = {"total": VIEWS["total"].replace("q < 24", "q < 30"), "by_n": VIEWS["by_n"]}  # rebuilt, added
    path = tmp_path / "v.yaml"
    path.write_text(_yaml(before))
    home = str(tmp_path / "home")
    rng = random.Random(5)
    p = cbp.Pipeline(str(path), home, spark=spark)
    p.feed("li", _rows(rng, range(100)))
    _run(p, True, monkeypatch)
    p.feed("li", _rows(rng, range(100, 140)))  # pending when the YAML changes
    path.write_text(_yaml(after))
    p = cbp.Pipeline(str(path), home, spark=spark)
    p.upgrade()
    seeds.clear()
    _run(p, True, monkeypatch)
    assert _built(seeds) == ["by_n", "total"]  # both from their inputs' whole contents, by Spark SQL
    _small_epochs(monkeypatch)
    try:
        check_views(spark, p, after, {"li": LI})
        p.feed("li", [{**r, "_diff": -1} for r in _rows(random.Random(5), range(10))])
        _run(p, True, monkeypatch)
        check_views(spark, p, after, {"li": LI})
    finally:
        for name in [*after, "li"]:
            spark.catalog.dropTempView(name)


def test_a_view_compiled_in_non_ansi_mode_is_not_built_by_spark(tmp_path):
    """A view compiled with ``spark.sql.ansi.enabled=false`` (cbp.views.mode) keeps its first build on
    the per-key path: Spark's bulk SQL runs in the session's ANSI mode."""
    from cbp.spec import load_spec

    path = tmp_path / "v.yaml"
    path.write_text(_yaml({"total": VIEWS["total"]}))
    fits = {}
    for ansi in (True, False):
        spec = load_spec(path, ansi=ansi)
        fits[ansi] = [GroupBuild().fits(s) for s in spec.stages.values() if s.name == "total"]
    assert fits == {True: [True], False: [False]}


# ------------------------------------------------------------------ inner joins (cbp/views/joinbulk.py)
JOINS = {
    "o": {"o_id": "int", "c": "string?", "d": "date", "amt": "decimal(12,2)"},
    "i": {"o_id": "int?", "q": "decimal(15,2)", "p": "decimal(15,2)", "s": "string", "n": "int?"},
    "k": {"c": "string", "name": "string", "b": "bool"},
}
JOIN_VIEWS = {
    "jv": "SELECT o.c, o.d, i.q * (1 - i.p) AS rev, i.s, i.n FROM o JOIN i ON o.o_id = i.o_id WHERE i.q > 1",
    "j3": "SELECT k.name, k.b, o.d, i.s FROM o, i, k WHERE o.o_id = i.o_id AND o.c = k.c AND o.amt > i.q",
    "lj": "SELECT o.o_id, k.name, o.d FROM o LEFT JOIN k ON o.c = k.c",
    "ex": "SELECT o.o_id, o.c FROM o WHERE EXISTS (SELECT * FROM i WHERE i.o_id = o.o_id AND i.q > 10)",
    "nx": "SELECT o.c, o.amt FROM o WHERE NOT EXISTS (SELECT * FROM i WHERE i.o_id = o.o_id)",
    # match conditions (a kept row's state counts the rows it matches): TPC-H Q13's LEFT JOIN, Q21's EXISTS
    "lm": "SELECT o.o_id, k.name FROM o LEFT JOIN k ON o.c = k.c AND NOT k.name LIKE '%1%'",
    "em": "SELECT o.o_id, o.d FROM o WHERE EXISTS (SELECT * FROM i WHERE i.o_id = o.o_id AND i.q > o.amt)",
    "nm": "SELECT o.o_id FROM o WHERE NOT EXISTS (SELECT * FROM i WHERE i.o_id = o.o_id AND i.s <> 'x')",
}


def _join_yaml() -> str:
    flows = "\n".join(
        f"  {f}: {{external: true, schema: {{{', '.join(f'{k}: {t!r}' for k, t in s.items())}}}}}"
        for f, s in JOINS.items()
    )
    body = "\n".join(f"  {n}: |\n{textwrap.indent(sql, '    ')}" for n, sql in JOIN_VIEWS.items())
    return f"pipeline: joins\nflows:\n{flows}\nviews:\n{body}\n"


def _join_rows(rng: random.Random, ids: range) -> dict[str, list[dict]]:
    import datetime

    orders = [
        {
            "o_id": i,
            "c": rng.choice(["a", "b", 'q"x', "c\\n", None]),
            "d": datetime.date(2024, 1, 1) + datetime.timedelta(days=rng.randint(0, 3)),
            "amt": decimal.Decimal(rng.randint(1, 9000)) / 100,
        }
        for i in ids
    ]
    items = [
        {
            "o_id": rng.choice([*ids, None]),
            "q": decimal.Decimal(rng.randint(1, 5000)) / 100,
            "p": decimal.Decimal(rng.choice([0, 10, 50, 100])) / 100,
            "s": rng.choice(["x", "y"]),
            "n": rng.choice([None, 0, 7]),
        }
        for _ in range(3 * len(ids))
    ]
    return {"o": orders, "i": items + items[:5]}  # rows twice: a row's count of 2


def _raw_state(p, stage: str) -> list[tuple]:
    """Every stored state row of ``stage`` as written (key text, hashes, row key, fields)."""
    import glob

    import pyarrow.parquet as pq

    files = glob.glob(f"{p.home}/stages/{stage}/state/**/*.parquet", recursive=True)
    return sorted(tuple(r.values()) for f in files for r in pq.read_table(f).drop_columns(["_epoch"]).to_pylist())


def test_a_join_built_by_spark_is_the_per_key_state_then_maintained(spark, tmp_path, monkeypatch):
    from cbp.engine.driver import bulkjob

    spark.conf.set("spark.sql.shuffle.partitions", "2")
    monkeypatch.setenv("CBP_SMALL_EPOCH_RECORDS", "0")
    writes: list[str] = []
    real = bulkjob.written

    def written(spark, plan, *args):
        done = real(spark, plan, *args)
        writes.append(plan.stage.name)  # built by Spark (a failure falls back to the per-key path, uncounted)
        return done

    monkeypatch.setattr(bulkjob, "written", written)
    path = tmp_path / "j.yaml"
    path.write_text(_join_yaml())
    bulk, perkey = (cbp.Pipeline(str(path), str(tmp_path / h), spark=spark) for h in ("bulk", "perkey"))
    rng = random.Random(48)
    rows = _join_rows(rng, range(60))
    names = {"o": [r["c"] for r in rows["o"]]}
    keys = [{"c": c, "name": f"n{j}", "b": j % 2 == 0} for j, c in enumerate(dict.fromkeys(names["o"])) if c]
    for p in (bulk, perkey):
        for f, rs in (*rows.items(), ("k", keys)):
            p.feed(f, rs)
    read = {b: _run(p, b, monkeypatch) for p, b in ((bulk, True), (perkey, False))}
    stages = [s for s in bulk.spec.stages if bulk.spec.stages[s].params.get("cbp_view", {}).get("kind") == "join"]
    assert sorted(writes) == sorted(stages) and len(stages) == 9  # jv, j3__j1, j3, lj, ex, nx, lm, em, nm: all by Spark
    assert all(0 < read[True][s] <= read[False][s] for s in stages), read  # bulk: each side's distinct rows
    for s in stages:
        assert _raw_state(bulk, s) == _raw_state(perkey, s), s  # the rows the per-key path writes, byte for byte
    _small_epochs(monkeypatch)
    try:
        check_views(spark, bulk, JOIN_VIEWS, JOINS)
        more = _join_rows(rng, range(60, 70))
        gone = [{**r, "_diff": -1} for r in rows["o"][:6] + rows["i"][:9]]  # deletes; item 0 of a count of 2
        moved = [{**r, "_diff": -1} for r in rows["o"][10:14]] + [{**r, "c": "b"} for r in rows["o"][10:14]]
        for step in ({"o": more["o"] + gone[:6], "i": more["i"] + gone[6:]}, {"o": moved, "k": keys[:1]}):
            for f, rs in step.items():
                bulk.feed(f, rs)
            _run(bulk, True, monkeypatch)  # the per-key path on the state the bulk path wrote
            check_views(spark, bulk, JOIN_VIEWS, JOINS)
        assert len(writes) == 9  # state not empty: the per-key path maintains
    finally:
        for name in [*JOIN_VIEWS, *JOINS]:
            spark.catalog.dropTempView(name)
