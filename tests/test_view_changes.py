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
