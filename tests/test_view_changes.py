"""SQL views that change under a home that ran (issue 48, "views that change"): a view added
starts from its inputs' whole contents, a view whose query changed is rebuilt (its state from
its inputs' whole contents, its old rows retracted for the views and stages that read it); both
through ``cbp upgrade``, and every view equals Spark SQL over its inputs afterwards and after
later changes (deletions included)."""

from __future__ import annotations

import pytest
from test_sql_views import CUSTS, ORDERS, _changes, _net, _yaml, check_views, few_partitions  # noqa: F401

import cbp
from cbp.errors import UsageError

BEFORE = {
    "joined": "SELECT o.id, o.amount, c.region FROM orders o JOIN custs c ON o.cust = c.cust AND o.amount > 0.5",
    "by_region": "SELECT region, count(*) AS n, sum(amount) AS total FROM joined GROUP BY region",
    "by_cust": "SELECT cust, count(*) AS n, sum(qty) AS sq FROM orders GROUP BY cust",
}
AFTER = {
    # changed: another join filter (its reader by_region is unchanged and must follow)
    "joined": "SELECT o.id, o.amount, c.region FROM orders o JOIN custs c ON o.cust = c.cust AND o.amount > 2",
    "by_region": BEFORE["by_region"],
    # changed: other aggregates (another state schema) and a HAVING
    "by_cust": "SELECT cust, count(*) AS n, sum(qty) AS sq, max(amount) AS hi FROM orders GROUP BY cust "
    "HAVING count(*) >= 2",
    # added: over an input and over a view that ran
    "odd": "SELECT id, cust FROM orders WHERE id % 2 = 1",
    "regions": "SELECT DISTINCT region FROM joined",
}
INPUTS = {"orders": ORDERS, "custs": CUSTS}


def _feed(p, o_inc, c_inc) -> None:
    p.feed("orders", o_inc)
    if c_inc:
        p.feed("custs", _net(c_inc))


def test_views_added_and_changed_under_a_home_that_ran(spark, tmp_path, few_partitions):  # noqa: F811
    path = tmp_path / "views.yaml"
    path.write_text(_yaml(BEFORE))
    home = str(tmp_path / "home")
    steps = _changes(seed=5, steps=4)
    p = cbp.Pipeline(str(path), home, spark=spark)
    for o_inc, c_inc in steps[:2]:
        _feed(p, o_inc, c_inc)
        p.run()
    check_views(spark, p, BEFORE, INPUTS)
    _feed(p, *steps[2])  # pending when the YAML changes: the rebuilt views read it in their inputs' contents

    path.write_text(_yaml(AFTER))
    p = cbp.Pipeline(str(path), home, spark=spark)
    plan = {c.name: c for c in p.plan().changes if c.name}
    assert plan["joined"].kind == "rebuild-view" and plan["by_cust"].kind == "rebuild-view"
    assert plan["odd"].kind == "add-stage" and plan["odd"].args["backfill"]
    assert plan["regions"].kind == "add-stage" and plan["regions"].args["backfill"]
    assert "by_region" not in plan  # unchanged: it reads the retraction of joined's old rows
    with pytest.raises(UsageError) as e:
        p.run()
    assert e.value.code == "pipeline-changed"
    p.upgrade()
    p.run()
    check_views(spark, p, AFTER, INPUTS)
    _feed(p, *steps[3])  # and it stays right as the inputs change
    p.run()
    check_views(spark, p, AFTER, INPUTS)


def test_a_view_added_to_a_home_whose_inputs_are_empty_needs_no_upgrade(spark, tmp_path):
    path = tmp_path / "views.yaml"
    path.write_text(_yaml({"by_cust": BEFORE["by_cust"]}))
    home = str(tmp_path / "home")
    p = cbp.Pipeline(str(path), home, spark=spark)
    p.feed("orders", [{"id": 1, "cust": "a", "amount": 1.0, "qty": 2}])
    p.run()
    path.write_text(_yaml({"by_cust": BEFORE["by_cust"], "regions": "SELECT DISTINCT region FROM custs"}))
    p = cbp.Pipeline(str(path), home, spark=spark)
    assert not p.plan().needs_upgrade  # custs holds nothing: the new view starts empty, as a backfill would
    p.feed("custs", [{"cust": "a", "region": "eu"}])
    p.run()
    assert p.output("regions", consolidated=True) == [{"region": "eu"}]


def test_cbp_sql_reads_a_view_by_name_as_its_contents(spark, tmp_path, few_partitions):  # noqa: F811
    """``cbp sql`` (Pipeline.sql): a view's name is its contents (what its query returns), its
    records with ``_diff`` are ``<view>__changes``, its stage's state ``<view>__state``; with an
    epoch, the contents after that epoch of its stage."""
    views = {"by_cust": BEFORE["by_cust"], "big": "SELECT id, cust FROM orders WHERE amount > 2"}
    path = tmp_path / "views.yaml"
    path.write_text(_yaml(views))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    first = [{"id": i, "cust": f"c{i % 2}", "amount": float(i), "qty": i} for i in range(6)]
    p.feed("orders", first)
    p.run()
    after_first = sorted(map(tuple, p.sql("SELECT cust, n, sq FROM by_cust").collect()))
    p.feed("orders", [{**first[3], "_diff": -1}, {**first[4], "_diff": -1}, {**first[4], "cust": "c9"}])
    p.run()
    check_views(spark, p, views, {"orders": ORDERS})
    for view, cols in (("by_cust", "cust, n, sq"), ("big", "id, cust")):
        got = sorted(map(tuple, p.sql(f"SELECT {cols} FROM {view}").collect()))
        want = sorted(tuple(r[c.strip()] for c in cols.split(",")) for r in p.output(view, consolidated=True))
        assert got == want, view
    changes = p.sql("SELECT sum(_diff) AS net, count(*) AS n FROM by_cust__changes").collect()[0]
    assert changes.n > changes.net  # the retractions of the groups' old rows are there
    assert p.sql("SELECT count(*) AS n FROM by_cust__state").collect()[0].n >= 2
    assert sorted(map(tuple, p.sql("SELECT cust, n, sq FROM by_cust", epoch=1).collect())) == after_first


# ---------------------------------------------------------------- updates of columns a view does not read
WIDE_ORDERS = {"id": "int", "cust": "string", "amount": "float", "note": "string?"}
WIDE_CUSTS = {"cust": "string", "region": "string", "phone": "string?"}
NARROW = {  # none reads orders.note or custs.phone
    "joined": "SELECT o.id, o.amount, c.region FROM orders o JOIN custs c ON o.cust = c.cust",
    "by_region": "SELECT c.region, count(*) AS n, sum(o.amount) AS total FROM orders o "
    "JOIN custs c ON o.cust = c.cust GROUP BY c.region",
    "by_cust": "SELECT cust, count(*) AS n, max(amount) AS hi FROM orders WHERE amount > 1 GROUP BY cust",
    "ranked": "SELECT cust, id, row_number() OVER (PARTITION BY cust ORDER BY amount DESC, id) AS rk FROM orders",
    "in_r1": "SELECT o.id FROM orders o WHERE EXISTS (SELECT * FROM custs c WHERE c.cust = o.cust AND c.region = 'r1')",
}


def _wide_yaml(views: dict[str, str]) -> str:
    flows = "\n".join(
        f"  {n}: {{external: true, schema: {{{', '.join(f'{k}: {t!r}' for k, t in s.items())}}}}}"
        for n, s in (("orders", WIDE_ORDERS), ("custs", WIDE_CUSTS))
    )
    body = "\n".join(f"  {n}: {sql}" for n, sql in views.items())
    return f"pipeline: narrow\nflows:\n{flows}\nviews:\n{body}\n"


def _updated(rows: dict, ids: list, **new) -> list[dict]:
    """The change records of an update of ``rows[i]`` for each ``i`` of ``ids``: the old row retracted,
    the new one added (as a Delta source's change data feed has them); ``rows`` updated."""
    out = []
    for i in ids:
        old = rows[i]
        rows[i] = {**old, **{k: (v(old) if callable(v) else v) for k, v in new.items()}}
        out += [{**old, "_diff": -1}, rows[i]]
    return out


def _wide_start(tmp_path, spark):
    path = tmp_path / "narrow.yaml"
    path.write_text(_wide_yaml(NARROW))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    orders = {i: {"id": i, "cust": f"c{i % 4}", "amount": i / 4, "note": None} for i in range(40)}
    custs = {c: {"cust": c, "region": f"r{j % 2}", "phone": f"p{j}"} for j, c in enumerate(["c0", "c1", "c2", "c3"])}
    p.feed("orders", list(orders.values()))
    p.feed("custs", list(custs.values()))
    p.run()
    return p, orders, custs


def test_an_update_of_columns_no_view_reads_reads_no_state_and_writes_nothing(
    spark,
    tmp_path,
    few_partitions,  # noqa: F811
):
    """An update of ``orders.note`` and ``custs.phone`` (read by no view) cancels where the views'
    inputs are routed: no state key read, no record written, by any of the views' stages."""
    p, orders, custs = _wide_start(tmp_path, spark)
    p.feed("orders", _updated(orders, list(range(0, 40, 3)), note=lambda r: f"n{r['id']}"))
    p.feed("custs", _updated(custs, ["c0", "c1", "c3"], phone="new"))
    reports = p.run()
    assert reports and {r.stage for r in reports} >= {"joined", "by_cust", "ranked"}
    for r in reports:
        assert (r.stage, r.keys_read, r.records_out) == (r.stage, 0, 0)
    check_views(spark, p, NARROW, {"orders": WIDE_ORDERS, "custs": WIDE_CUSTS})


def test_views_follow_mixed_updates_of_read_and_unread_columns(spark, tmp_path, few_partitions):  # noqa: F811
    """Updates that change a read column (amount, cust, region), an unread one (note, phone), or
    both, with inserts and deletes: every view equals Spark SQL after every run, and a run of
    only unread changes reads no state."""
    p, orders, custs = _wide_start(tmp_path, spark)
    inputs = {"orders": WIDE_ORDERS, "custs": WIDE_CUSTS}
    steps = [
        (_updated(orders, [1, 2, 5], amount=lambda r: r["amount"] + 2) + _updated(orders, [3, 4], note="x"), []),
        (_updated(orders, [6, 7], cust="c2", note="moved"), _updated(custs, ["c2"], region="r1", phone="q")),
        (
            _updated(orders, [8, 9, 10], note="y") + [{**orders.pop(11), "_diff": -1}],
            _updated(custs, ["c0"], phone="z"),
        ),
        ([{"id": 50, "cust": "c1", "amount": 9.0, "note": "new"}], _updated(custs, ["c1"], region="r0")),
    ]
    for o_inc, c_inc in steps:
        p.feed("orders", o_inc)
        if c_inc:
            p.feed("custs", c_inc)
        p.run()
        check_views(spark, p, NARROW, inputs)
    p.feed("orders", _updated(orders, [12, 13], note="again"))
    assert all(r.keys_read == 0 and r.records_out == 0 for r in p.run())
