"""SQL views' query shapes (cbp/views/ctes.py, setops.py, scalar.py): ``WITH`` (chained, read twice, a
column list, a CTE shadowing a flow, a CTE in a subquery), ``UNION``/``INTERSECT``/``EXCEPT`` with
distinct results (NULLs equal, numeric widths widened, mixed with ``UNION ALL``) and ``INTERSECT
ALL``/``EXCEPT ALL`` (multiplicities), scalar subqueries in ``SELECT`` (uncorrelated, correlated with
the count bug, beside a GROUP BY) and in an inner join's ``ON``. After every epoch each view equals
Spark SQL over the inputs' consolidated contents, through inserts, deletes, rows moved, duplicates,
NULLs, a row arriving on and leaving EXCEPT's right side, and a side emptied; ``cbp explain`` shows
the internal views; a view changed from ``UNION ALL`` to ``UNION`` is rebuilt by ``cbp upgrade``;
refusals by code, line and column."""

from __future__ import annotations

import pytest
from test_sql_subqueries import INPUTS, _steps, _yaml
from test_sql_views import check_views, few_partitions, run_and_check  # noqa: F401 (few_partitions: a fixture)

import cbp
from cbp.commands.explain import _views as explain_views
from cbp.commands.explain import explain
from cbp.errors import SpecError
from cbp.spec import load_spec

VIEWS = {  # few views (an epoch's cost grows with their stages), each holding several shapes
    "cte_chain": "WITH big AS (SELECT id, cust, amount FROM orders WHERE amount > 1),\n"
    "per AS (SELECT cust, count(*) AS n FROM big GROUP BY cust)\n"
    "SELECT b.id, p.n FROM big b JOIN per p ON b.cust = p.cust",
    "cte_shadow": "WITH orders AS (SELECT cust, amount FROM orders WHERE qty IS NOT NULL),\n"
    "t (c, total) AS (SELECT cust, sum(amount) FROM orders GROUP BY cust) SELECT c, total FROM t WHERE total > 2",
    "cte_inner": "SELECT id FROM orders WHERE cust IN "
    "(WITH r1 AS (SELECT cust FROM custs WHERE region = 'r1') SELECT cust FROM r1)",
    "uni_mixed": "SELECT cust, qty FROM orders WHERE amount > 2 UNION SELECT cust, amount FROM orders WHERE qty = 1 "
    "UNION ALL SELECT cust, 7 AS qty FROM custs",  # qty (int) widened to amount's double
    "branches": "(SELECT id, amount FROM orders ORDER BY amount DESC, id LIMIT 3) UNION "
    "SELECT id, row_number() OVER (PARTITION BY cust ORDER BY id) FROM orders WHERE qty = 1",  # each: v__from<i>
    "exc": "SELECT cust, region FROM custs EXCEPT DISTINCT SELECT cust, 'r1' AS region FROM orders WHERE qty = 2",
    "inter_all": "SELECT cust FROM orders INTERSECT ALL SELECT cust FROM custs",  # min of the two counts
    "exc_all": "SELECT cust, qty FROM orders EXCEPT ALL SELECT cust, NULL FROM custs",  # max(0, a - b); NULL = NULL
    "cte_set": "WITH a AS (SELECT cust FROM orders WHERE qty IS NULL) SELECT cust FROM a INTERSECT "
    "SELECT cust FROM custs WHERE region IS NOT NULL EXCEPT SELECT cust FROM a WHERE cust = 'c3'",
    "sel_count": "SELECT c.cust, (SELECT count(*) FROM orders o WHERE o.cust = c.cust) AS n FROM custs c",
    "sel_grouped": "SELECT cust, count(*) AS n, (SELECT max(amount) FROM orders WHERE qty > 1) AS top "
    "FROM orders GROUP BY cust",
    "agg_scalar": "SELECT count(*) AS n, sum(amount) - (SELECT max(amount) FROM orders WHERE qty = 3) AS d "
    "FROM orders WHERE qty IS NOT NULL",  # the aggregate's one row a derived table, then LEFT-joined
    "on_scalar": "SELECT o.id, c.region FROM orders o JOIN custs c ON o.cust = c.cust "
    "AND o.amount > (SELECT avg(amount) FROM orders)",
}


def _more_steps() -> list[dict[str, list[dict]]]:
    """test_sql_subqueries' epochs, with a duplicate customer row, and in the last every customer
    deleted (a side emptied)."""
    steps = _steps()
    steps[1]["custs"] = steps[1]["custs"] + [{"cust": "c3", "region": "r2"}]  # c3 twice
    held: dict[tuple, int] = {}
    for step in steps[:-1]:
        for r in step["custs"]:
            key = (r["cust"], r["region"])
            held[key] = held.get(key, 0) + r.get("_diff", 1)
    steps[-1]["custs"] = [{"cust": c, "region": r, "_diff": -n} for (c, r), n in held.items() if n]
    return steps


@pytest.mark.usefixtures("few_partitions")
def test_ctes_set_operations_and_scalar_subqueries_equal_spark_sql_after_every_epoch(spark, tmp_path):
    path = tmp_path / "shapes.yaml"
    path.write_text(_yaml(VIEWS))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    try:
        run_and_check(spark, p, _more_steps(), VIEWS, INPUTS)
        stages = [s["stage"] for s in explain(str(path), "cte_chain")["stages"]]
        assert stages == ["cte_chain__cte1", "cte_chain__cte2", "cte_chain"], stages  # big compiled once
        assert [s["stage"] for s in explain(str(path), "exc")["stages"]] == ["exc__set1", "exc"]
        assert [s["stage"] for s in explain(str(path), "sel_count")["stages"]] == ["sel_count__sq1", "sel_count"]
    finally:
        for name in [*VIEWS, *INPUTS]:
            spark.catalog.dropTempView(name)


def test_a_view_changed_from_union_all_to_union_is_rebuilt_by_upgrade(spark, tmp_path, few_partitions):  # noqa: F811
    before = {"u": "SELECT cust FROM orders UNION ALL SELECT cust FROM custs"}
    after = {"u": "SELECT cust FROM orders UNION SELECT cust FROM custs"}
    path = tmp_path / "u.yaml"
    path.write_text(_yaml(before))
    home = str(tmp_path / "home")
    steps = _steps()
    p = cbp.Pipeline(str(path), home, spark=spark)
    try:
        for step in steps[:2]:
            for flow, recs in step.items():
                if recs:
                    p.feed(flow, recs)
            p.run()
        check_views(spark, p, before, INPUTS)
        path.write_text(_yaml(after))
        p = cbp.Pipeline(str(path), home, spark=spark)
        plan = {c.name: c for c in p.plan().changes if c.name}
        assert plan["u"].kind == "rebuild-view", plan
        p.upgrade()
        p.run()
        check_views(spark, p, after, INPUTS)
        for flow, recs in steps[2].items():
            if recs:
                p.feed(flow, recs)
        p.run()
        check_views(spark, p, after, INPUTS)
    finally:
        for name in ["u", *INPUTS]:
            spark.catalog.dropTempView(name)


REFUSED = [
    ("WITH RECURSIVE r AS (SELECT id FROM orders) SELECT id FROM r", "view-unsupported", "line 1, column 6: WITH R"),
    ("WITH t (a) AS (SELECT id, cust FROM orders)\nSELECT a FROM t", "view-unsupported", "line 1, column 9: a CTE's"),
    ("SELECT id FROM orders\nUNION SELECT cust FROM custs", "view-unsupported", "line 2, column 1: a set operation"),
    ("WITH t AS (SELECT id FROM orders) SELECT nope FROM t", "view-unknown", "column 42: unknown column 'nope'"),
    ("SELECT id, (SELECT max(amount) FROM orders) FROM orders", "view-unsupported", "name it with AS"),
    (
        "SELECT count(*) AS n, (SELECT max(p.amount) FROM orders p WHERE p.cust = o.cust) AS m FROM orders o",
        "view-unsupported",
        "in the SELECT of an aggregate (Spark refuses it too)",
    ),
    (
        "SELECT cust, count(*) AS n, (SELECT max(p.amount) FROM orders p WHERE p.cust = o.cust) AS top "
        "FROM orders o GROUP BY cust",
        "view-unsupported",
        "Spark refuses it too",
    ),
    (
        "SELECT o.id FROM orders o LEFT JOIN custs c\n"
        "ON o.cust = c.cust AND o.amount > (SELECT avg(amount) FROM orders)",
        "view-unsupported",
        "line 2, column 43: a scalar subquery in the ON of an outer",
    ),
]


@pytest.mark.parametrize("sql,code,says", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_a_shape_cbp_cannot_maintain_is_refused_at_load(tmp_path, sql, code, says):
    path = tmp_path / "v.yaml"
    path.write_text(_yaml({"v": sql}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == code, str(e.value)
    assert says in str(e.value) and "view 'v', SQL line" in str(e.value), str(e.value)


SHAPES_SQL = """\
CREATE MATERIALIZED VIEW custs_seen AS
WITH big AS (SELECT id, cust FROM orders WHERE amount > 1)
SELECT cust FROM big UNION SELECT cust FROM orders WHERE id > 10;

CREATE MATERIALIZED VIEW bad AS
  WITH RECURSIVE r AS (SELECT id FROM orders) SELECT id FROM r;
"""


def test_a_sql_file_view_with_ctes_and_set_operations(tmp_path):
    from test_sql_files import _project

    ok = _project(tmp_path / "ok", {"v.sql": SHAPES_SQL.split("\n\n")[0]}, ["v.sql"])
    spec = load_spec(ok)
    assert {"custs_seen__cte1", "custs_seen__set1", "custs_seen"} <= set(spec.flows)
    assert list(spec.flows["custs_seen"].schema.fields) == ["cust"]
    assert set(explain_views(spec)) == {"custs_seen"}  # its internal views are listed with it, not as views
    bad = _project(tmp_path / "bad", {"v.sql": SHAPES_SQL}, ["v.sql"])
    with pytest.raises(SpecError) as e:
        load_spec(bad)
    assert e.value.code == "view-unsupported" and "v.sql: line 6, column 8" in str(e.value), str(e.value)
