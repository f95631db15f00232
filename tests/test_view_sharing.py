"""Views that share generated stages (issue 48, item 4; :mod:`cbp.views.sharing`): one stage and its
state for a join or a GROUP BY that two views compile to, every view equal to Spark SQL over its
inputs after every epoch (inserts, deletes, a MIN holder deleted, a group emptied, rows moved between
groups); ``cbp explain`` names the sharing; a sharer added to a home with data, the first sharer
removed, and a home compiled without sharing turned to sharing, each through ``cbp upgrade``."""

from __future__ import annotations

import pytest
from test_sql_views import CUSTS, ORDERS, _changes, _net, _yaml, check_views, few_partitions  # noqa: F401

import cbp
from cbp.commands.explain import explain
from cbp.spec import load_spec

JOIN = "FROM orders o JOIN custs c ON o.cust = c.cust AND o.amount > 0.5"
PER_CUST = "SELECT cust, min(amount) AS lo, count(*) AS n FROM orders GROUP BY cust"
VIEWS = {
    # lo_region and hi_region: one join stage (lo_region__join), two GROUP BYs over it
    "lo_region": f"SELECT c.region, min(o.amount) AS lo, count(*) AS n {JOIN} GROUP BY c.region",
    "hi_region": f"SELECT c.region, max(o.amount) AS hi, sum(o.amount) AS s {JOIN} GROUP BY c.region",
    # per_cust's GROUP BY is also the CTE of busy and spread: one stage, per_cust
    "per_cust": PER_CUST,
    "busy": f"WITH t AS ({PER_CUST}) SELECT cust, lo FROM t WHERE n >= 3",
    "spread": f"WITH t AS ({PER_CUST}) SELECT count(*) AS custs, sum(n) AS orders, max(lo) AS top FROM t",
    # two UNION ALL branches with the same join: one stage (twice__u0), read by both branches
    "twice": f"SELECT o.id, c.region {JOIN} UNION ALL SELECT o.id, c.region {JOIN}",
}
INPUTS = {"orders": ORDERS, "custs": CUSTS}


def _generated(spec) -> list[str]:
    return [s for s in spec.stages if spec.stages[s].translator_path.startswith("cbp.views.run:")]


def _feed(p, o_inc, c_inc) -> None:
    p.feed("orders", o_inc)
    if c_inc:
        p.feed("custs", _net(c_inc))


def _drop_min_holders(p) -> list[dict]:
    """Retractions of the order with the smallest amount of each customer (a MIN holder deleted)."""
    held: dict[str, dict] = {}
    for r in p.output("orders", consolidated=True):
        if r.get("_diff", 1) > 0 and (r["cust"] not in held or r["amount"] < held[r["cust"]]["amount"]):
            held[r["cust"]] = r
    return [{**r, "_diff": -1} for r in held.values()]


def test_sharing_compiles_one_stage_where_two_were(tmp_path, monkeypatch):
    path = tmp_path / "views.yaml"
    path.write_text(_yaml(VIEWS))
    monkeypatch.setenv("CBP_SHARE_STATE", "0")
    apart = _generated(load_spec(path))
    monkeypatch.delenv("CBP_SHARE_STATE")
    spec = load_spec(path)
    shared = _generated(spec)
    # each of hi_region__join, busy__cte1, spread__cte1 and twice__u1 is a stage already there
    assert sorted(set(apart) - set(shared)) == ["busy__cte1", "hi_region__join", "spread__cte1", "twice__u1"]
    assert set(shared) < set(apart)
    assert [i.flow for i in spec.stages["hi_region"].inputs] == ["lo_region__join"]
    assert [i.flow for i in spec.stages["busy"].inputs] == ["per_cust"]
    assert [i.flow for i in spec.stages["spread"].inputs] == ["per_cust"]
    assert [i.flow for i in spec.stages["twice"].inputs] == ["twice__u0"]
    assert [b["input"] for b in spec.stages["twice"].params["cbp_view"]["branches"]] == [0, 0]


def test_shared_stages_stay_equal_to_spark_sql(spark, tmp_path, few_partitions):  # noqa: F811
    path = tmp_path / "views.yaml"
    path.write_text(_yaml(VIEWS))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    for o_inc, c_inc in _changes(seed=11, steps=3):
        _feed(p, o_inc, c_inc)  # step 2 empties customer c4's group
        p.run()
        check_views(spark, p, VIEWS, INPUTS)
    p.feed("orders", _drop_min_holders(p))  # after the last step: _changes knows nothing of these deletes
    p.run()
    check_views(spark, p, VIEWS, INPUTS)
    ex = explain(str(path), "hi_region", str(tmp_path / "home"))
    stages = {s["stage"]: s for s in ex["stages"]}
    assert list(stages) == ["lo_region__join", "hi_region"]
    assert stages["lo_region__join"]["shared_with"] == ["lo_region"] and stages["hi_region"]["shared_with"] == []
    assert stages["lo_region__join"]["state"]["rows"] > 0
    busy = {s["stage"]: s["shared_with"] for s in explain(str(path), "busy")["stages"]}
    assert busy == {"per_cust": ["per_cust", "spread"], "busy": []}
    assert {s["stage"] for s in explain(str(path), "per_cust")["stages"]} == {"per_cust"}
    assert explain(str(path), "per_cust")["stages"][0]["shared_with"] == ["busy", "spread"]


def _upgrade(spark, p, expect: dict[str | None, str | None], views: dict[str, str], step: tuple) -> None:
    """``cbp upgrade`` with the plan's kinds ``expect`` (stage -> kind), then a run and one more epoch of
    ``step``, each view equal to Spark SQL after both."""
    plan = {c.name: c.kind for c in p.plan().changes if c.name}
    assert {n: plan.get(n) for n in expect} == expect, plan
    p.upgrade()
    p.run()
    check_views(spark, p, views, INPUTS)
    _feed(p, *step)
    p.run()
    check_views(spark, p, views, INPUTS)


def test_a_sharer_added_then_the_first_removed_under_a_home_with_data(spark, tmp_path, few_partitions):  # noqa: F811
    path = tmp_path / "views.yaml"
    home = str(tmp_path / "home")
    steps = _changes(seed=3, steps=5)
    lo = {"lo_region": VIEWS["lo_region"]}
    both = lo | {"hi_region": VIEWS["hi_region"]}
    path.write_text(_yaml(lo))
    p = cbp.Pipeline(str(path), home, spark=spark)
    for o_inc, c_inc in steps[:2]:
        _feed(p, o_inc, c_inc)
        p.run()

    path.write_text(_yaml(both))  # hi_region reads lo_region__join, from its whole contents
    p = cbp.Pipeline(str(path), home, spark=spark)
    assert "hi_region__join" not in p.spec.stages
    _upgrade(spark, p, {"hi_region": "add-stage"}, both, steps[2])

    hi = {"hi_region": VIEWS["hi_region"]}  # the first sharer removed: hi_region gets its own join
    path.write_text(_yaml(hi))
    p = cbp.Pipeline(str(path), home, spark=spark)
    _upgrade(
        spark,
        p,
        {"lo_region__join": "archive", "hi_region__join": "add-stage", "hi_region": "rebuild-view"},
        hi,
        steps[3],
    )


def test_a_home_compiled_without_sharing_upgrades_to_it(spark, tmp_path, few_partitions, monkeypatch):  # noqa: F811
    """A home of a cbp before sharing (as CBP_SHARE_STATE=0 compiles): each view its own join."""
    path = tmp_path / "views.yaml"
    home = str(tmp_path / "home")
    both = {"lo_region": VIEWS["lo_region"], "hi_region": VIEWS["hi_region"]}
    path.write_text(_yaml(both))
    steps = _changes(seed=7, steps=4)
    monkeypatch.setenv("CBP_SHARE_STATE", "0")
    p = cbp.Pipeline(str(path), home, spark=spark)
    assert "hi_region__join" in p.spec.stages
    for o_inc, c_inc in steps[:2]:
        _feed(p, o_inc, c_inc)
        p.run()
    monkeypatch.delenv("CBP_SHARE_STATE")
    p = cbp.Pipeline(str(path), home, spark=spark)
    _upgrade(spark, p, {"hi_region__join": "archive", "hi_region": "rebuild-view", "lo_region": None}, both, steps[2])


def test_the_first_sharer_changed_leaves_the_other_its_own_stage(spark, tmp_path, few_partitions):  # noqa: F811
    path = tmp_path / "views.yaml"
    home = str(tmp_path / "home")
    both = {"lo_region": VIEWS["lo_region"], "hi_region": VIEWS["hi_region"]}
    path.write_text(_yaml(both))
    steps = _changes(seed=9, steps=4)
    p = cbp.Pipeline(str(path), home, spark=spark)
    for o_inc, c_inc in steps[:2]:
        _feed(p, o_inc, c_inc)
        p.run()
    changed = both | {"lo_region": VIEWS["lo_region"].replace("o.amount > 0.5", "o.amount > 2")}
    path.write_text(_yaml(changed))
    p = cbp.Pipeline(str(path), home, spark=spark)
    _upgrade(
        spark,
        p,
        {"lo_region__join": "rebuild-view", "hi_region__join": "add-stage", "hi_region": "rebuild-view"},
        changed,
        steps[2],
    )


@pytest.mark.parametrize("share", ["0", "1"])
def test_explain_of_a_view_that_shares_nothing_is_unchanged(tmp_path, monkeypatch, share):
    monkeypatch.setenv("CBP_SHARE_STATE", share)
    path = tmp_path / "views.yaml"
    path.write_text(_yaml({"lo_region": VIEWS["lo_region"], "per_cust": PER_CUST}))
    stages = explain(str(path), "lo_region")["stages"]
    assert [s["stage"] for s in stages] == ["lo_region__join", "lo_region"]
    assert all(s["shared_with"] == [] for s in stages)


def test_the_view_name_in_runtime_errors_does_not_keep_stages_apart_but_a_literal_does():
    """A cast that may fail names its view (``cbp_view(e, 'v')``): two views' equal CTEs with such a cast
    share; a string literal equal to the view's name is the view's data, so ``'a'`` and ``'b'`` do not."""
    from cbp.views.plan import Generated

    flows = {"src": {"k": "int", "s": "string"}}
    cte = "WITH t AS (SELECT k, CAST(s AS INT) AS i, {lit} AS c FROM src WHERE k > 0) SELECT * FROM t"
    g = Generated(share=True)
    for v in ("a", "b"):
        g.add_view(v, cte.format(lit="'x'"), flows)
    assert "CBP_VIEW(CAST(`s` AS INT), 'a')" in str(g.stages["a__cte1"]["params"]) and "b__cte1" not in g.stages
    g = Generated(share=True)
    for v in ("a", "b"):
        g.add_view(v, cte.format(lit=f"'{v}'"), flows)
    assert {"a__cte1", "b__cte1"} <= set(g.stages)
