"""SQL views (``views:``, cbp/views/): after every epoch each view's consolidated contents equal
Spark SQL's result of the same SELECT over its inputs' consolidated contents (multiset equality,
floats to 1e-9 relative), through inserts, deletes, rows moved between groups and join keys, groups
emptied and a join key with many matches; a view mixed with a Python stage; each refusal's code."""

from __future__ import annotations

import datetime
import decimal
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
    "id % 7 IN (1, 2, 3) AS small, amount BETWEEN 1 AND 3 AS mid, if(qty > 1, 'y', 'n') AS yn, -qty - 1 AS neg, "
    "cust LIKE 'c_' AND cust NOT LIKE '%2' AS lk "
    "FROM orders WHERE amount >= 1.0 AND NOT (cust = 'c3')",
    "by_cust": "SELECT cust, count(*) AS n, count(qty) AS nq, sum(qty) AS sq, sum(amount) AS sa, "
    "avg(amount) AS aa FROM orders GROUP BY cust HAVING count(*) >= 2",
    "by_len": "SELECT length(cust) AS len, qty % 2 AS odd, count(*) AS n, sum(qty) * 2 AS s2 FROM orders "
    "WHERE amount > 0.5 GROUP BY length(cust), qty % 2",
    "joined": "SELECT o.id, o.amount, c.region FROM orders o JOIN custs c ON o.cust = c.cust AND o.amount > 0.5",
    "per_region": "SELECT c.region, count(*) AS n, sum(o.qty) AS q, avg(o.amount) AS avg_amount "
    "FROM orders o JOIN custs c ON o.cust = c.cust GROUP BY c.region HAVING count(*) > 1",
    "extremes": "SELECT cust, min(amount) AS lo, max(amount) AS hi, min(qty) AS q0, max(id) AS last, "
    "count(DISTINCT qty) AS nq FROM orders GROUP BY cust HAVING max(amount) > 1",
    "distinct_q": "SELECT DISTINCT cust, qty % 2 AS odd FROM orders WHERE amount > 1",
    "total": "SELECT count(*) AS n, count(qty) AS nq, sum(qty) AS sq, avg(amount) AS aa, min(amount) AS lo, "
    "max(id) AS hi FROM orders WHERE amount > 5.5",
    "total_r1": "SELECT count(*) AS n, sum(o.qty) AS q FROM orders o JOIN custs c ON o.cust = c.cust "
    "WHERE c.region = 'r1' HAVING count(*) > 3",
    "unioned": "SELECT id AS x, cust AS s FROM orders WHERE qty IS NULL UNION ALL "
    "SELECT n, region FROM per_region UNION ALL SELECT id, cust FROM orders WHERE amount > 3",
}
SPARK_TYPES = {"int": "BIGINT", "float": "DOUBLE", "string": "STRING", "bool": "BOOLEAN"}
SPARK_TYPES |= {"date": "DATE", "timestamp": "TIMESTAMP", "binary": "BINARY"}


def _spark_type(t: str) -> str:
    t = t.rstrip("?")
    return t.upper() if t.startswith("decimal(") else SPARK_TYPES[t]


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
    if isinstance(v, datetime.datetime):
        return f"TIMESTAMP '{v.astimezone(datetime.timezone.utc).replace(tzinfo=None).isoformat(sep=' ')}'"
    if isinstance(v, datetime.date):
        return f"DATE '{v.isoformat()}'"
    if isinstance(v, bytes):
        return f"X'{v.hex()}'"
    if isinstance(v, decimal.Decimal):
        return f"'{v}'"  # cast to the column's decimal type
    return str(v)


def _table(spark, name: str, schema: dict[str, str], rows: list[dict]) -> None:
    """A temp view of ``rows`` as inline VALUES (a local relation: no Python worker reads it)."""
    cols = ", ".join(f"CAST(c{i} AS {_spark_type(t)}) AS {k}" for i, (k, t) in enumerate(schema.items()))
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


def run_and_check(spark, p, steps, views: dict[str, str], inputs: dict[str, dict[str, str]]) -> None:
    """For each step (flow -> records, empty lists skipped): feed, run, and :func:`check_views`."""
    for step in steps:
        for flow, recs in step.items():
            if recs:
                p.feed(flow, recs)
        p.run()
        check_views(spark, p, views, inputs)


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


def test_an_aggregate_without_group_by_has_its_row_over_no_input(spark, tmp_path, few_partitions):
    """One row always: at the first epoch even when WHERE keeps no record, through inserts and
    deletes, and after every record is deleted (count 0, sum and min NULL), as Spark SQL's."""
    views = {
        "g": "SELECT count(*) AS n, sum(qty) AS sq, min(cust) AS lo FROM orders WHERE amount > 2",
        "h": "SELECT count(*) AS n FROM orders HAVING count(*) > 1",
        "j": "SELECT count(*) AS n, sum(o.qty) AS sq FROM orders o JOIN custs c ON o.cust = c.cust",  # no match
    }
    path = tmp_path / "g.yaml"
    path.write_text(_yaml(views))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    rows = [{"id": i, "cust": f"c{i}", "amount": float(i), "qty": i} for i in range(4)]
    try:
        for feed in ([rows[0]], rows[1:], [{**r, "_diff": -1} for r in rows]):
            p.feed("orders", feed)
            p.run()
            check_views(spark, p, views, {"orders": ORDERS, "custs": CUSTS})
            assert len(_expand(p.output("g", consolidated=True))) == len(_expand(p.output("j", consolidated=True))) == 1
    finally:
        for name in [*views, "orders", "custs"]:
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
    ("SELECT o.id FROM orders o JOIN custs c ON o.cust < c.cust", "view-unsupported", "non-equi join"),
    ("SELECT o.id FROM orders o, custs c", "view-unsupported", "column 28: a join without an equality"),
    ("SELECT CASE WHEN id IN (SELECT id FROM orders) THEN 1 END AS x FROM orders", "view-unsupported", "subquery"),
    ("SELECT id, row_number() OVER (ORDER BY id) AS r FROM orders", "view-unsupported", "without PARTITION BY"),
    ("SELECT id FROM orders ORDER BY id OFFSET 1", "view-unsupported", "OFFSET without LIMIT"),
    ("SELECT id FROM orders LIMIT 3", "view-unsupported", "LIMIT without ORDER BY"),
    ("SELECT id,\n  rand() AS r FROM orders", "view-unsupported", "SQL line 2, column 3: rand()"),
    ("SELECT id, current_date() AS d FROM orders", "view-unsupported", "current_date()"),
    ("SELECT id FROM orders UNION SELECT cust FROM orders", "view-unsupported", "column 23: a set operation"),
    ("SELECT id FROM orders WHERE id = TRUE", "view-unsupported", "comparing bool with int"),
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
    assert set(views) == {*VIEWS, "per_region__join", "total_r1__join"}
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
    "s LIKE '%b'",
    "s NOT LIKE '_b%'",
    "s ILIKE '%L%'",
    "s NOT ILIKE 'H%'",
    "s LIKE 'h!_%' ESCAPE '!'",
    r"s LIKE '%\\%%'",
    r"s LIKE 'h\\_l%'",
    "s LIKE s",
    "NOT s LIKE '%'",
]


def test_expressions_evaluate_as_spark_does(few_partitions):
    """Each scalar expression a view evaluates in Python, on rows with NULLs and negative numbers,
    against Spark SQL's value of it over the same rows."""
    from cbp.views.exprs import ev, parse_expr

    spark = few_partitions
    schema = {"x": "int?", "s": "string?", "b": "bool?"}
    rows = [{"x": 1, "s": " ab ", "b": True}, {"x": -3, "s": "hello", "b": False}, {"x": None, "s": None, "b": None}]
    rows += [{"x": 7, "s": "ab", "b": None}, {"x": 0, "s": "", "b": True}, {"x": 2, "s": "h_l%o\nb", "b": False}]
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


TYPED_ROWS = [
    {"p": decimal.Decimal("2.50"), "q": 3, "d": datetime.date(2024, 1, 3), "s": "x"},
    {"p": decimal.Decimal("-1.25"), "q": -7, "d": datetime.date(2024, 1, 1), "s": "y"},
    {"p": decimal.Decimal("99999999.99"), "q": 1, "d": datetime.date(2024, 2, 29), "s": None},
    {"p": None, "q": 2, "d": None, "s": "z"},
]
TYPED_EXPRESSIONS = [
    "p * q",
    "p / 3",
    "p + 1.5",
    "p - q",
    "p * 1.5",
    "p % 2",
    "-p",
    "abs(p)",
    "p / q",
    "q / p",
    "p * 2.0E0",
    "p * p * p * p",
    "p > 1.5",
    "p = 2.5",
    "p IN (1.25, 2.5)",
    "p BETWEEN -2 AND 2.5",
    "coalesce(p, 0.125)",
    "CASE WHEN q > 1 THEN p ELSE q END",
    "d > '2024-01-02'",
    "d = DATE '2024-01-03'",
    "t >= TIMESTAMP '2024-01-03 00:00:00'",
    "t > d",
    "coalesce(d, DATE '2000-01-01')",
]


def _view_type(spark_type) -> str:
    name = spark_type.simpleString()
    return {"bigint": "int", "double": "float", "boolean": "bool"}.get(name, name)


def test_decimal_and_time_expressions_type_and_evaluate_as_spark_does(few_partitions):
    """Decimal arithmetic (Spark's result precision and scale, HALF_UP), decimal literals, and
    comparisons of dates and timestamps with strings and typed literals: each expression's type and
    value against Spark SQL's."""
    from cbp.views.exprs import ev, infer, parse_expr, with_decimal_types
    from cbp.views.vtypes import conform

    spark = few_partitions
    schema = {"p": "decimal(10,2)?", "q": "int", "d": "date?", "s": "string?"}
    types = {"p": "decimal(10,2)", "q": "int", "d": "date", "s": "string", "t": "timestamp"}
    _table(spark, "typed_t", schema, TYPED_ROWS)
    try:
        cols = ", ".join(f"{e} AS e{i}" for i, e in enumerate(TYPED_EXPRESSIONS))
        df = spark.sql(f"SELECT p, q, d, s, CAST(d AS TIMESTAMP) + INTERVAL 1 HOUR AS t, {cols} FROM typed_t")
        want_types = [_view_type(f.dataType) for f in df.schema.fields[5:]]
        got_types = [infer(parse_expr(e), types) for e in TYPED_EXPRESSIONS]
        assert got_types == want_types
        exprs = [parse_expr(with_decimal_types(parse_expr(e), types, "v").sql("spark")) for e in TYPED_EXPRESSIONS]
        for row in df.collect():
            ts = row["t"].astimezone(datetime.timezone.utc) if row["t"] is not None else None
            env = {"p": row["p"], "q": row["q"], "d": row["d"], "s": row["s"], "t": ts}
            for text, e, t, want in zip(TYPED_EXPRESSIONS, exprs, got_types, list(row)[5:], strict=True):
                got = conform(ev(e, env), t, "v")  # a view's column is conformed to its type
                if isinstance(want, float):
                    assert math.isclose(float(got), want, rel_tol=1e-12), (text, env, got, want)
                else:
                    assert got == want and type(got) is type(want), (text, env, got, want)
    finally:
        spark.catalog.dropTempView("typed_t")


SALES = {"id": "int", "day": "date", "ts": "timestamp", "price": "decimal(10,2)", "qty": "int", "shop": "string"}
SALES |= {"tag": "binary?", "w": "float?"}
SHOPS = {"shop": "string", "opened": "date"}
BIGS = {"k": "string", "b": "decimal(38,0)"}
TYPED_VIEWS = {
    "t_proj": "SELECT id, day, ts, tag, price * qty AS total, price / 3 AS third, price + 1.5 AS p2, "
    "CASE WHEN qty > 2 THEN price ELSE 0.5 END AS c FROM sales "
    "WHERE day > '2024-01-01' AND ts < TIMESTAMP '2024-01-05 12:00:00'",
    "t_group": "SELECT day, count(*) AS n, sum(price) AS s, avg(price) AS a, sum(qty) AS q, min(price) AS lo, "
    "max(ts) AS last, min(shop) AS first_shop, count(DISTINCT shop) AS shops, max(price * qty) AS top "
    "FROM sales GROUP BY day",
    "t_by_shop": "SELECT shop, min(id) AS lo, max(qty) AS hi, min(day) AS d0, max(qty * 1.5) AS m, min(w) AS w0, "
    "max(w) AS w1, avg(qty) AS aq FROM sales GROUP BY shop HAVING max(price) > 1.00",
    "t_join": "SELECT s.id, s.price, h.opened FROM sales s JOIN shops h ON s.shop = h.shop WHERE s.day >= h.opened",
    "t_distinct": "SELECT DISTINCT shop, day, price FROM sales",
    "t_opened": "SELECT DISTINCT h.opened, s.day FROM sales s JOIN shops h ON s.shop = h.shop",
    "t_by_tag": "SELECT tag, count(*) AS n, count(DISTINCT day) AS days FROM sales WHERE tag IS NOT NULL GROUP BY tag",
    "t_flags": "SELECT shop, min(tag) AS tg0, max(tag) AS tg1, min(qty > 2) AS b0, max(w > 0) AS b1 FROM sales "
    "GROUP BY shop",  # MIN/MAX of binary (unsigned bytes: x'00ff' < 'x') and bool (false < true)
}


def _sale(i: int, day: int, hour: int, price: str, qty: int, shop: str, tag=None, w=None) -> dict:
    ts = datetime.datetime(2024, 1, day, hour, tzinfo=datetime.timezone.utc)
    row = {"id": i, "day": datetime.date(2024, 1, day), "ts": ts, "price": decimal.Decimal(price), "qty": qty}
    return row | {"shop": shop, "tag": tag, "w": w}


def _gone(r: dict) -> dict:
    return {**r, "_diff": -1}


S = {1: _sale(1, 1, 10, "2.50", 1, "a", b"x", 1.5), 2: _sale(2, 2, 11, "1.25", 3, "b")}
S |= {3: _sale(3, 2, 12, "9.99", 2, "a", b"y", -2.0), 4: _sale(4, 3, 13, "0.10", 5, "c", b"x", 0.0)}
S |= {5: _sale(5, 3, 14, "3.00", 1, "b", None, 7.25), 6: _sale(6, 4, 9, "4.40", 2, "a", b"\x00\xff", 3.5)}
TYPED_STEPS = [  # (sales, shops) fed per step
    (
        list(S.values()),
        [{"shop": s, "opened": datetime.date(2024, 1, d)} for s, d in (("a", 2), ("b", 1), ("c", 3))],
    ),
    # the MAX holder of day 2 and shop a deleted; row 5 moved from day 3 to day 2; a second 1.25 on day 2
    ([_gone(S[3]), _gone(S[5]), {**S[5], "day": datetime.date(2024, 1, 2)}, _sale(7, 2, 15, "1.25", 4, "c")], []),
    # one 1.25 (the MIN) deleted: the other holds it; day 3 emptied; shop b's row deleted; the largest price
    (
        [_gone(S[2]), _gone(S[4]), _sale(8, 5, 1, "99999999.99", 3, "c", b"y", None)],
        [{"shop": "b", "opened": datetime.date(2024, 1, 1), "_diff": -1}],
    ),
]


def _plain(v):
    """A value as both sides compare it: a timestamp as naive local time (as PySpark collects it)."""
    if isinstance(v, datetime.datetime) and v.tzinfo is not None:
        return v.astimezone().replace(tzinfo=None)
    return v


def check_typed_views(spark, p, views: dict[str, str], inputs: dict[str, dict[str, str]]) -> None:
    """Each view's consolidated contents against Spark SQL's, exactly (decimals with their value,
    dates, timestamps, bytes), and each column's type against Spark's."""
    for name, schema in inputs.items():
        _table(spark, name, schema, _expand(p.output(name, consolidated=True)))
    for view, sql in views.items():
        df = spark.sql(sql)
        fields = p.spec.flows[view].schema.fields
        assert [f.scalar for f in fields.values()] == [_view_type(f.dataType) for f in df.schema.fields], view
        got = [tuple(_plain(r.get(c)) for c in fields) for r in _expand(p.output(view, consolidated=True))]
        assert _same(got, [tuple(row) for row in df.collect()]), f"view {view}:\n cbp   {got}\n spark {df.collect()}"


def check_views_after_each_feed(spark, path, home, flow: str, steps, views: dict[str, str], schema) -> None:
    """Feed ``flow`` each step of ``steps`` and run the pipeline at ``path``; after every epoch, each
    view equals Spark SQL over the flow's current contents (:func:`check_typed_views`)."""
    p = cbp.Pipeline(str(path), str(home), spark=spark)
    try:
        for step in steps:
            p.feed(flow, step)
            p.run()
            check_typed_views(spark, p, views, {flow: schema})
    finally:
        for name in [*views, flow]:
            spark.catalog.dropTempView(name)


def test_typed_views_with_min_max_and_distinct_equal_spark_sql(spark, tmp_path, few_partitions):
    """Views over date, timestamp, decimal and binary columns, MIN/MAX, count(DISTINCT) and SELECT
    DISTINCT through inserts, deletes of the MIN/MAX holder, a row moved between groups, a group
    emptied."""
    path = tmp_path / "typed.yaml"
    flows = "\n".join(
        f"  {n}: {{external: true, schema: {{{', '.join(f'{k}: {t!r}' for k, t in s.items())}}}}}"
        for n, s in (("sales", SALES), ("shops", SHOPS))
    )
    body = "\n".join(f"  {n}: |\n    {sql}" for n, sql in TYPED_VIEWS.items())
    path.write_text(f"pipeline: typed\nflows:\n{flows}\nviews:\n{body}\n")
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    inputs = {"sales": SALES, "shops": SHOPS}
    try:
        for sales, shops in TYPED_STEPS:
            for flow, recs in (("sales", sales), ("shops", shops)):
                if recs:
                    p.feed(flow, recs)
            p.run()
            check_typed_views(spark, p, TYPED_VIEWS, inputs)
    finally:
        for name in [*TYPED_VIEWS, *inputs]:
            spark.catalog.dropTempView(name)


def test_a_decimal_overflow_fails_the_epoch_naming_the_view(spark, tmp_path, few_partitions):
    """A decimal(38,0) sum past 38 digits: ``view-overflow`` naming the view, nothing committed; Spark's
    ANSI mode fails the same query. (Shuffled epochs: ``small_epoch_records=0``.)"""
    path = tmp_path / "big.yaml"
    path.write_text(
        "pipeline: big\nflows:\n  bigs: {external: true, schema: {k: string, b: 'decimal(38,0)'}}\n"
        "views:\n  t_big: SELECT k, sum(b) AS s FROM bigs GROUP BY k\n"
    )
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark, small_epoch_records=0)
    try:
        p.feed("bigs", [{"k": "x", "b": decimal.Decimal(10) ** 37}])
        p.run()
        before = p.output("t_big", consolidated=True)
        assert before == [{"k": "x", "s": decimal.Decimal(10) ** 37}]
        p.feed("bigs", [{"k": "x", "b": decimal.Decimal("9" * 38)}])
        with pytest.raises(cbp.CbpError) as e:
            p.run()
        assert e.value.code == "view-overflow" and "t_big" in str(e.value), str(e.value)[:3000]
        assert p.output("t_big", consolidated=True) == before  # nothing committed
        _table(spark, "bigs", BIGS, _expand(p.output("bigs", consolidated=True)))
        with pytest.raises(Exception, match="(?i)overflow"):  # Spark's ANSI mode fails the query too
            spark.sql("SELECT k, sum(b) AS s FROM bigs GROUP BY k").collect()
    finally:
        spark.catalog.dropTempView("bigs")
