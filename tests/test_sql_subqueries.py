"""SQL views' subqueries (cbp/views/hoist.py, cbp/views/scalar.py): derived tables (``FROM (SELECT
...) AS t (a, b)``), ``IN``/``EXISTS`` subqueries that join, group or read the outer flow, each
hoisted into an internal view; self-joins; ``JOIN ... USING``; ``EXTRACT``/``year()``; scalar
subqueries, uncorrelated (one row LEFT-joined on a constant key) and correlated on equality
(decorrelated into a GROUP BY of the correlation, the count bug minded), in WHERE and in HAVING;
``NOT IN (SELECT ...)`` over values that may be NULL. After every epoch each view equals Spark SQL
over the inputs' consolidated contents, through inserts, deletes, rows moved between groups, a
subquery's group emptied, a HAVING crossed both ways, the scalar changing so that outer rows come
and go, the correlated extreme deleted, a NULL in a NOT IN subquery and its subquery emptied;
refusals by code."""

from __future__ import annotations

import datetime
import random
import textwrap

import pytest
from test_sql_views import _net, check_views, few_partitions, run_and_check  # noqa: F401 (few_partitions: a fixture)

import cbp
from cbp.commands.explain import _views as explain_views
from cbp.commands.explain import explain
from cbp.errors import SpecError
from cbp.spec import load_spec

ORDERS = {"id": "int", "cust": "string?", "amount": "float", "qty": "int?", "day": "date"}
CUSTS = {"cust": "string?", "region": "string?"}
INPUTS = {"orders": ORDERS, "custs": CUSTS}
VIEWS = {
    "q13": "SELECT c_count, count(*) AS custdist FROM (SELECT c.cust, count(o.id) FROM custs c LEFT JOIN orders o "
    "ON c.cust = o.cust AND o.qty IS NOT NULL GROUP BY c.cust) AS co (cust, c_count) GROUP BY c_count",
    "big_custs": "SELECT id, cust FROM orders WHERE cust IN "
    "(SELECT cust FROM orders GROUP BY cust HAVING sum(amount) > 12)",
    "sibling": "SELECT o.id FROM orders o WHERE EXISTS (SELECT * FROM orders p WHERE p.cust = o.cust AND p.id <> o.id)",
    "lonely": "SELECT o.id FROM orders o WHERE NOT EXISTS (SELECT * FROM custs c JOIN orders p ON c.cust = p.cust "
    "WHERE c.region = 'r1' AND c.cust = o.cust AND p.id <> o.id)",
    "pairs": "SELECT a.id, b.id AS other FROM orders a JOIN orders b ON a.cust = b.cust AND a.id < b.id "
    "WHERE a.qty = 1",
    "using_star": "SELECT * FROM orders JOIN custs USING (cust)",
    "using_full": "SELECT cust, id, region FROM orders FULL JOIN custs USING (cust)",
    "days": "SELECT year(day) AS y, month(day) AS m, extract(DAY FROM day) AS d, count(*) AS n FROM orders "
    "GROUP BY year(day), month(day), extract(DAY FROM day)",
    "above_avg": "SELECT id, amount FROM orders WHERE amount > (SELECT avg(amount) FROM orders WHERE qty IS NOT NULL)",
    "no_match": "SELECT id FROM orders WHERE coalesce((SELECT max(amount) FROM orders WHERE qty = 7), -1.0) < amount",
    "cheapest": "SELECT o.id, c.region FROM orders o JOIN custs c ON o.cust = c.cust "
    "WHERE o.amount = (SELECT min(p.amount) FROM orders p WHERE p.cust = c.cust AND p.qty IS NOT NULL)",
    "few": "SELECT c.cust FROM custs c WHERE (SELECT count(*) FROM orders o WHERE o.cust = c.cust) < 3",
    "share": "SELECT cust, sum(amount) AS total FROM orders GROUP BY cust "
    "HAVING sum(amount) > (SELECT sum(amount) * 0.2 FROM orders) AND count(*) > 1",
    "not_in_nulls": "SELECT id, cust FROM orders WHERE cust NOT IN (SELECT cust FROM custs WHERE region = 'r1')",
}


def _yaml(views: dict[str, str]) -> str:
    flows = "\n".join(
        f"  {n}: {{external: true, schema: {{{', '.join(f'{k}: {t!r}' for k, t in s.items())}}}}}"
        for n, s in INPUTS.items()
    )
    body = "\n".join(f"  {n}: |\n{textwrap.indent(sql, '    ')}" for n, sql in views.items())
    return f"pipeline: subq\nflows:\n{flows}\nviews:\n{body}\n"


def _steps() -> list[dict[str, list[dict]]]:
    """Per epoch: orders inserted, deleted and moved between customers; in epoch 2 every order of c2
    goes (its group emptied) and c0 loses enough to cross HAVING; customers come and go."""
    rng = random.Random(11)
    orders: dict[int, dict] = {}

    def order(i: int, cust: str | None) -> dict:
        day = datetime.date(1994 + rng.randint(0, 1), rng.randint(1, 3), rng.choice([1, 31 % 28 + 1, 15]))
        orders[i] = {"id": i, "cust": cust, "amount": rng.randint(0, 16) / 4, "qty": rng.choice([None, 1, 2, 3])}
        orders[i]["day"] = day
        return orders[i]

    custs = [("c0", "r0"), ("c1", "r1"), ("c2", "r1"), ("c3", "r2"), (None, "r1"), ("c5", None)]
    first = [order(i, rng.choice(["c0", "c0", "c1", "c2", "c3", "c4", None])) for i in range(40)]
    steps = [{"orders": first, "custs": [{"cust": c, "region": r} for c, r in custs]}]
    for epoch in (1, 2, 3):
        inc = [order(i, rng.choice(["c0", "c1", "c3", "c5"])) for i in range(100 * epoch, 100 * epoch + 8)]
        for i in rng.sample(sorted(orders), 5):
            old = orders.pop(i)
            inc.append({**old, "_diff": -1})
            if rng.random() < 0.5:
                inc.append(order(i, rng.choice(["c0", "c1", "c3"])))
        if epoch == 2:
            inc += [{**orders.pop(i), "_diff": -1} for i in [i for i, r in orders.items() if r["cust"] in ("c2", "c0")]]
        c_inc = {  # c1 goes and comes back; the NULL customer goes; then r1's others (NOT IN's subquery emptied)
            1: [{"cust": "c1", "region": "r1", "_diff": -1}],
            2: [{"cust": "c1", "region": "r1"}, {"cust": None, "region": "r1", "_diff": -1}],
            3: [{"cust": "c1", "region": "r1", "_diff": -1}, {"cust": "c2", "region": "r1", "_diff": -1}],
        }[epoch]
        steps.append({"orders": _net(inc), "custs": c_inc})
    return steps


@pytest.mark.usefixtures("few_partitions")
def test_subquery_views_equal_spark_sql_after_every_epoch(spark, tmp_path):
    path = tmp_path / "subq.yaml"
    path.write_text(_yaml(VIEWS))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    try:
        run_and_check(spark, p, _steps(), VIEWS, INPUTS)
        stages = [s["stage"] for s in explain(str(path), "q13")["stages"]]
        assert stages == ["q13__from1__join", "q13__from1", "q13"], stages
        pairs = explain(str(path), "pairs")["stages"]  # sibling's copy of orders is pairs' too (cbp.views.sharing)
        assert [(s["stage"], s["shared_with"]) for s in pairs] == [("sibling__self1", ["sibling"]), ("pairs", [])]
    finally:
        for name in [*VIEWS, *INPUTS]:
            spark.catalog.dropTempView(name)


def test_internal_views_are_flows_not_views(tmp_path):
    path = tmp_path / "v.yaml"
    dist = "SELECT n, count(*) AS custs FROM (SELECT cust, count(*) AS n FROM orders GROUP BY cust) AS t GROUP BY n"
    path.write_text(_yaml({"dist": dist, "big_custs": VIEWS["big_custs"]}))
    spec = load_spec(path)
    assert {"dist__from1", "big_custs__in1"} <= set(spec.flows)
    assert set(explain_views(spec)) == {"dist", "big_custs"}  # listed with their view, not as views


REFUSED = [
    (
        "SELECT id FROM orders o WHERE cust IN (SELECT c.cust FROM custs c GROUP BY c.cust HAVING count(*) > o.qty)",
        "correlated IN",
    ),
    ("SELECT a FROM (SELECT id, cust FROM orders) AS t (a)", "a column list of 1 names for 2 columns"),
    ("SELECT extract(EPOCH FROM day) AS h FROM orders", "EXTRACT(EPOCH FROM ...)"),
    ("SELECT year(cust) AS y FROM orders", "year() of a string"),
    ("SELECT id FROM orders WHERE amount > (SELECT amount FROM orders WHERE id = 1)", "more than one row"),
    ("SELECT id FROM orders WHERE amount > (SELECT max(amount) FROM orders GROUP BY cust)", "more than one row"),
    (
        "SELECT id FROM orders o WHERE amount > (SELECT avg(p.amount) FROM orders p WHERE p.id < o.id)",
        "correlated on other than an equality",
    ),
    ("SELECT id FROM orders JOIN custs USING (region)", "USING column 'region'"),
]


@pytest.mark.parametrize("sql,says", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_a_subquery_cbp_cannot_maintain_is_refused_at_load(tmp_path, sql, says):
    path = tmp_path / "v.yaml"
    path.write_text(_yaml({"v": sql}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code in ("view-unsupported", "view-unknown"), str(e.value)
    assert says in str(e.value) and "view 'v', SQL line 1" in str(e.value), str(e.value)
