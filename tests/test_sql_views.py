"""SQL views (``views:``, cbp/views/): after every epoch each view's consolidated contents equal
Spark SQL's result of the same SELECT over its inputs' consolidated contents (multiset equality,
floats to 1e-9 relative), through inserts, deletes, rows moved between groups and join keys, groups
emptied and a join key with many matches; a view mixed with a Python stage; each refusal's code."""

from __future__ import annotations

import math
import random
import textwrap

import pytest
from conftest import FLOWS

import cbp
from cbp.errors import SpecError
from cbp.spec import load_spec

ORDERS = {"id": "int", "cust": "string", "amount": "float", "qty": "int?"}
CUSTS = {"cust": "string", "region": "string"}
VIEWS = {
    "proj": "SELECT id, upper(cust) AS c, amount * 2 + 1 AS a2, CASE WHEN qty IS NULL THEN 'none' "
    "WHEN qty > 2 THEN 'many' ELSE 'few' END AS k, coalesce(qty, -1) AS q, substring(cust, 1, 2) || '!' AS p, "
    "length(cust) % 3 AS l, amount / 2 AS half, lower(trim(concat(' ', cust, ' '))) AS t, abs(-id) AS ab, "
    "id % 7 IN (1, 2, 3) AS small, amount BETWEEN 1 AND 3 AS mid, if(qty > 1, 'y', 'n') AS yn, -qty - 1 AS neg "
    "FROM orders WHERE amount >= 1.0 AND NOT (cust = 'c3')",
    "by_cust": "SELECT cust, count(*) AS n, count(qty) AS nq, sum(qty) AS sq, sum(amount) AS sa, "
    "avg(amount) AS aa FROM orders GROUP BY cust HAVING count(*) >= 2",
    "by_len": "SELECT length(cust) AS len, qty % 2 AS odd, count(*) AS n, sum(qty) * 2 AS s2 FROM orders "
    "WHERE amount > 0.5 GROUP BY length(cust), qty % 2",
    "joined": "SELECT o.id, o.amount, c.region FROM orders o JOIN custs c ON o.cust = c.cust AND o.amount > 0.5",
    "per_region": "SELECT c.region, count(*) AS n, sum(o.qty) AS q, avg(o.amount) AS avg_amount "
    "FROM orders o JOIN custs c ON o.cust = c.cust GROUP BY c.region HAVING count(*) > 1",
    "unioned": "SELECT id AS x, cust AS s FROM orders WHERE qty IS NULL UNION ALL "
    "SELECT n, region FROM per_region UNION ALL SELECT id, cust FROM orders WHERE amount > 3",
}
SPARK_TYPES = {"int": "BIGINT", "float": "DOUBLE", "string": "STRING", "bool": "BOOLEAN"}


def _yaml(views: dict[str, str], extra: str = "") -> str:
    flows = "\n".join(
        f"  {n}: {{external: true, schema: {{{', '.join(f'{k}: {t!r}' for k, t in s.items())}}}}}"
        for n, s in (("orders", ORDERS), ("custs", CUSTS))
    )
    body = "\n".join(f"  {n}: |\n{textwrap.indent(sql, '    ')}" for n, sql in views.items())
    return f"pipeline: views\nflows:\n{flows}\n{extra}views:\n{body}\n"


def _expand(records: list[dict]) -> list[dict]:
    out = []
    for r in records:
        d = r.get("_diff", 1)
        assert d > 0, r
        out += [{k: v for k, v in r.items() if k != "_diff"}] * d
    return out


def _literal(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "TRUE" if v else "FALSE"
    if isinstance(v, float):
        return f"{v!r}D"
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(v)


def _table(spark, name: str, schema: dict[str, str], rows: list[dict]) -> None:
    """A temp view of ``rows`` as inline VALUES (a local relation: no Python worker reads it)."""
    cols = ", ".join(f"CAST(c{i} AS {SPARK_TYPES[t.rstrip('?')]}) AS {k}" for i, (k, t) in enumerate(schema.items()))
    names = ", ".join(f"c{i}" for i in range(len(schema)))
    values = ", ".join("(" + ", ".join(_literal(r.get(k)) for k in schema) + ")" for r in rows)
    empty = not values
    if empty:  # one row of NULLs, filtered out
        values = "(" + ", ".join(["NULL"] * len(schema)) + ")"
    where = " WHERE FALSE" if empty else ""
    spark.sql(f"SELECT {cols} FROM VALUES {values} AS t({names}){where}").createOrReplaceTempView(name)


@pytest.fixture
def few_partitions(spark):
    """Spark SQL's oracle queries on tiny tables: 2 shuffle partitions, not 200."""
    before = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    yield spark
    spark.conf.set("spark.sql.shuffle.partitions", before)


def _same(got: list[tuple], want: list[tuple]) -> bool:
    def key(row: tuple) -> tuple:
        return tuple((v is None, round(v, 6) if isinstance(v, float) else v) for v in row)

    got, want = sorted(got, key=key), sorted(want, key=key)
    if len(got) != len(want):
        return False
    for a, b in zip(got, want):
        for x, y in zip(a, b):
            if isinstance(x, float) or isinstance(y, float):
                if x is None or y is None or not math.isclose(x, float(y), rel_tol=1e-9, abs_tol=1e-12):
                    return False
            elif x != y:
                return False
    return True


def check_views(spark, p, views: dict[str, str], inputs: dict[str, dict[str, str]]) -> None:
    """Each view's consolidated contents against Spark SQL over the inputs' consolidated contents."""
    for name, schema in inputs.items():
        _table(spark, name, schema, _expand(p.output(name, consolidated=True)))
    for view, sql in views.items():
        df = spark.sql(sql)
        df.createOrReplaceTempView(view)  # a view over this view reads Spark's own result
        cols = [f for f in p.spec.flows[view].schema.fields]
        want = [tuple(float(v) if hasattr(v, "as_tuple") else v for v in row) for row in df.collect()]
        got = [tuple(r.get(c) for c in cols) for r in _expand(p.output(view, consolidated=True))]
        assert _same(got, want), f"view {view}:\n cbp   {sorted(map(str, got))}\n spark {sorted(map(str, want))}"


def _net(records: list[dict]) -> list[dict]:
    """Records with their ``_diff`` summed per distinct row, zeros dropped (one feed may not hold +r and -r)."""
    net: dict[tuple, int] = {}
    for r in records:
        row = tuple(sorted((k, v) for k, v in r.items() if k != "_diff"))
        net[row] = net.get(row, 0) + r.get("_diff", 1)
    return [dict(row) | ({"_diff": d} if d != 1 else {}) for row, d in net.items() if d]


def _changes(seed: int, steps: int) -> list[tuple[list[dict], list[dict]]]:
    """Per step, the orders and customer rows fed: inserts, deletes (``_diff: -1``), orders moved to
    another customer (a row moved between groups and join keys); customer c0 has most of the orders
    (a join key with many matches) and every order of c4 is deleted in step 2 (a group emptied)."""
    rng = random.Random(seed)
    orders: dict[int, dict] = {}
    custs: set[tuple[str, str]] = set()
    out = []
    next_id = 0
    for step in range(steps):
        o_inc, c_inc = [], []
        for _ in range(rng.randint(15, 30)):
            cust = "c0" if rng.random() < 0.4 else f"c{rng.randint(1, 5)}"
            qty = rng.choice([None, 0, 1, 2, 3, 5])
            r = {"id": next_id, "cust": cust, "amount": rng.randint(0, 24) / 4, "qty": qty}
            orders[next_id], next_id = r, next_id + 1
            o_inc.append(r)
        for oid in rng.sample(sorted(orders), min(len(orders), 6)):
            old = orders.pop(oid)
            o_inc.append({**old, "_diff": -1})
            if rng.random() < 0.5:  # moved to another customer
                orders[oid] = {**old, "cust": f"c{rng.randint(0, 5)}"}
                o_inc.append(orders[oid])
        if step == 2:
            for oid in [i for i, r in orders.items() if r["cust"] == "c4"]:
                o_inc.append({**orders.pop(oid), "_diff": -1})
        for _ in range(3):
            row = (f"c{rng.randint(0, 6)}", f"r{rng.randint(0, 2)}")
            if row in custs and rng.random() < 0.5:
                custs.discard(row)
                c_inc.append({"cust": row[0], "region": row[1], "_diff": -1})
            elif row not in custs:
                custs.add(row)
                c_inc.append({"cust": row[0], "region": row[1]})
        out.append((o_inc, c_inc))
    return out


def test_views_equal_spark_sql_after_every_epoch(spark, tmp_path, few_partitions):
    path = tmp_path / "views.yaml"
    path.write_text(_yaml(VIEWS))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    try:
        pending: list[dict] = []
        for step, (o_inc, c_inc) in enumerate(_changes(seed=11, steps=3)):
            p.feed("orders", o_inc)
            pending += c_inc
            if step % 2 == 0 and pending:  # odd steps change one side of the joins only
                p.feed("custs", _net(pending))
                pending = []
            p.run()
            check_views(spark, p, VIEWS, {"orders": ORDERS, "custs": CUSTS})
            if step == 2:  # every order of c4 deleted: its group is gone, from the view and the state
                assert not [r for r in p.output("by_cust", consolidated=True) if r["cust"] == "c4"]
                assert not [r for r in p.state("by_cust") if r["k"] == '["c4"]']
    finally:
        for name in [*VIEWS, "orders", "custs"]:
            spark.catalog.dropTempView(name)


SHOP = {"orders": {"id": "int", "cust": "string", "amount": "float"}, "customers": CUSTS}
SHOP_VIEWS = {  # flows/sql_views.yaml's views, and vip as the SQL the Python stage and the view amount to
    "big_orders": "SELECT o.id, o.cust, c.region, o.amount * 2 AS gross FROM orders o JOIN customers c "
    "ON o.cust = c.cust WHERE o.amount >= 10",
    "by_region": "SELECT region, count(*) AS n, sum(gross) AS total, avg(gross) AS mean FROM big_orders "
    "GROUP BY region HAVING count(*) >= 2",
    "vip": "SELECT cust, sum(gross) AS total FROM big_orders GROUP BY cust HAVING sum(gross) >= 100",
}


def test_the_example_mixing_views_and_a_python_stage(spark, tmp_path, few_partitions):
    """flows/sql_views.yaml: a view read by a Python stage whose output a view reads."""
    p = cbp.Pipeline(str(FLOWS / "sql_views.yaml"), str(tmp_path / "home"), spark=spark)
    try:
        for o_inc, c_inc in _changes(seed=5, steps=3):
            p.feed("orders", [{k: v * 4 if k == "amount" else v for k, v in r.items() if k != "qty"} for r in o_inc])
            if c_inc:
                p.feed("customers", c_inc)
            p.run()
            check_views(spark, p, SHOP_VIEWS, SHOP)
    finally:
        for name in [*SHOP_VIEWS, *SHOP]:
            spark.catalog.dropTempView(name)


REFUSED = [
    (
        "SELECT id FROM WHERE",
        "view-syntax",
        "SQL line 1, column 20: not valid SQL: Expected table name but got 'WHERE'",
    ),
    ("SELECT id FROM orders; SELECT id FROM custs", "view-syntax", "2 statements"),
    ("SELECT 'x FROM orders", "view-syntax", "not valid SQL"),
    ("SELECT id FROM nope", "view-unknown", "there are: orders, custs"),
    ("SELECT id FROM orders WHERE\n   idd > 1", "view-unknown", "SQL line 2, column 4: unknown column 'idd'"),
    ("SELECT cust FROM orders o JOIN custs c ON o.cust = c.cust", "view-unknown", "ambiguous column 'cust'"),
    ("SELECT cust, id, count(*) AS n FROM orders GROUP BY cust", "view-unknown", "'id' is neither grouped"),
    ("SELECT cust, min(amount) AS m FROM orders GROUP BY cust", "view-unsupported", "column 14: MIN"),
    ("SELECT cust, max(amount) AS m FROM orders GROUP BY cust", "view-unsupported", "MAX"),
    ("SELECT DISTINCT cust FROM orders", "view-unsupported", "DISTINCT"),
    ("SELECT cust, count(DISTINCT id) AS n FROM orders GROUP BY cust", "view-unsupported", "DISTINCT"),
    ("SELECT o.id FROM orders o LEFT JOIN custs c ON o.cust = c.cust", "view-unsupported", "LEFT JOIN"),
    ("SELECT o.id FROM orders o JOIN custs c ON o.cust < c.cust", "view-unsupported", "non-equi join"),
    ("SELECT o.id FROM orders o, custs c", "view-unsupported", "CROSS JOIN"),
    ("SELECT id FROM orders WHERE cust IN (SELECT cust FROM custs)", "view-unsupported", "subquery"),
    ("SELECT id, row_number() OVER (PARTITION BY cust ORDER BY id) AS r FROM orders", "view-unsupported", "window"),
    ("SELECT id FROM orders ORDER BY id", "view-unsupported", "ORDER BY"),
    ("SELECT id FROM orders LIMIT 3", "view-unsupported", "LIMIT"),
    ("SELECT id,\n  rand() AS r FROM orders", "view-unsupported", "SQL line 2, column 3: rand()"),
    ("SELECT id, current_date() AS d FROM orders", "view-unsupported", "current_date()"),
    ("SELECT id FROM orders UNION SELECT id FROM orders", "view-unsupported", "UNION (distinct)"),
    ("SELECT count(*) AS n FROM orders", "view-unsupported", "without GROUP BY"),
    ("SELECT id FROM orders WHERE cust = 1", "view-unsupported", "comparing int with string"),
    ("SELECT id + 1 FROM orders", "view-unsupported", "name it with AS"),
]


@pytest.mark.parametrize("sql,code,says", REFUSED, ids=[f"{c}-{i}" for i, (_, c, _) in enumerate(REFUSED)])
def test_a_view_the_slice_cannot_compile_is_refused_at_load(tmp_path, sql, code, says):
    path = tmp_path / "v.yaml"
    path.write_text(_yaml({"v": sql}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == code
    assert says in str(e.value)
    assert "line 6: view 'v'" in str(e.value)  # the view's line in the YAML


def test_views_that_read_each_other_and_names_taken(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text(_yaml({"a": "SELECT id FROM b", "b": "SELECT id FROM a"}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "view-unsupported" and "recursion" in str(e.value)
    path.write_text(_yaml({"orders": "SELECT id FROM custs"}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "bad-name"


def test_a_view_compiles_to_signed_stages_routed_by_its_keys(tmp_path):
    path = tmp_path / "v.yaml"
    path.write_text(_yaml(VIEWS))
    spec = load_spec(path)
    views = {s.name: s for s in spec.stages.values() if s.translator_path.startswith("cbp.views.run:")}
    assert set(views) == {*VIEWS, "per_region__join"}
    assert all(s.signed and all(i.signed for i in s.inputs) for s in views.values())
    assert all(s.runnable_name == "any" for s in views.values())  # a join runs on one side's increment
    assert views["proj"].record_wise and views["unioned"].input_flows == ["orders", "per_region"]
    assert views["by_cust"].inputs[0].route_by({"cust": "c1", "qty": None, "id": 1, "amount": 1.0}) == '["c1"]'
    assert views["per_region"].input_flows == ["per_region__join"]
    assert spec.order.index("per_region") < spec.order.index("unioned")
    assert spec.flows["by_cust"].schema.fields["aa"].scalar == "float"
    assert spec.flows["by_cust"].schema.fields["sq"].scalar == "int"


EXPRESSIONS = [
    "x % 3",
    "x / 4",
    "-x * 2 + 1",
    "substring(s, -2, 5)",
    "substring(s, 0, 2)",
    "substring(s, 2)",
    "x > 0 AND b",
    "x > 0 OR b",
    "NOT b",
    "x IN (1, -3, NULL)",
    "x BETWEEN -1 AND 2",
    "CASE x WHEN 1 THEN 'one' WHEN -3 THEN 'minus three' END",
    "coalesce(s, 'none') || '!'",
    "concat(s, '-', s)",
    "length(trim(s))",
    "upper(s) = 'AB'",
    "if(b, x, 0.5)",
    "abs(x) <= 2",
]


def test_expressions_evaluate_as_spark_does(few_partitions):
    """Each scalar expression a view evaluates in Python, on rows with NULLs and negative numbers,
    against Spark SQL's value of it over the same rows."""
    from cbp.views.exprs import ev, parse_expr

    spark = few_partitions
    schema = {"x": "int?", "s": "string?", "b": "bool?"}
    rows = [{"x": 1, "s": " ab ", "b": True}, {"x": -3, "s": "hello", "b": False}, {"x": None, "s": None, "b": None}]
    rows += [{"x": 7, "s": "ab", "b": None}, {"x": 0, "s": "", "b": True}]
    _table(spark, "exprs_t", schema, rows)
    try:
        cols = ", ".join(f"{e} AS e{i}" for i, e in enumerate(EXPRESSIONS))
        want = spark.sql(f"SELECT x, s, b, {cols} FROM exprs_t").collect()
        for row in want:
            env = {"x": row["x"], "s": row["s"], "b": row["b"]}
            got = tuple(ev(parse_expr(e), env) for e in EXPRESSIONS)
            spark_values = tuple(float(v) if hasattr(v, "as_tuple") else v for v in list(row)[3:])
            assert _same([got], [spark_values]), (env, got, spark_values)
    finally:
        spark.catalog.dropTempView("exprs_t")
