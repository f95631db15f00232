"""SQL that sqlglot reads past and Spark refuses (cbp/views/query.py): a stray comma (doubled, leading,
trailing in a SELECT list, a GROUP BY, a FROM, a function's arguments), an empty SELECT list, ``IN ()``:
each is ``view-syntax`` at its line and column, and Spark's parser or analyzer refuses the same SQL.
An expression nested past :data:`cbp.views.query.MAX_DEPTH` (a chain of ORs, nested parentheses) is
``view-unsupported`` with its place, never a ``RecursionError``; a chain just under the limit compiles
and its view equals Spark SQL."""

from __future__ import annotations

import textwrap

import pytest
from test_sql_views import _table

import cbp
from cbp.errors import SpecError
from cbp.spec import load_spec
from cbp.views.query import MAX_DEPTH

ORDERS = {"id": "int", "cust": "string"}

LENIENT = [
    ("SELECT id,, cust FROM orders", (1, 11)),
    ("SELECT , id FROM orders", (1, 8)),
    ("SELECT id,\n  cust, FROM orders", (2, 7)),
    ("SELECT cust, count(*) AS n FROM orders GROUP BY cust,", (1, 53)),
    ("SELECT id FROM orders,", (1, 22)),
    ("SELECT sum(id,) AS s FROM orders", (1, 14)),
    ("SELECT FROM orders", (1, 1)),
    ("SELECT id FROM orders WHERE id IN ()", (1, 35)),
]


def _yaml(sql: str) -> str:
    return (
        "pipeline: lenient\nflows:\n  orders: {external: true, schema: {id: int, cust: string}}\n"
        f"views:\n  v: |\n{textwrap.indent(sql, '    ')}\n"
    )


def _refused(tmp_path, sql: str) -> SpecError:
    path = tmp_path / "v.yaml"
    path.write_text(_yaml(sql))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    return e.value


def test_what_sqlglot_reads_past_is_refused_as_spark_refuses_it(spark, tmp_path):
    _table(spark, "orders", ORDERS, [{"id": 1, "cust": "a"}])
    try:
        for sql, (line, col) in LENIENT:
            e = _refused(tmp_path, sql)
            assert e.code == "view-syntax", (sql, str(e))
            assert f"SQL line {line}, column {col}:" in str(e), (sql, str(e))
            with pytest.raises(Exception, match="(?i)(PARSE_SYNTAX_ERROR|TRAILING_COMMA|UNRESOLVED_COLUMN|syntax)"):
                spark.sql(sql).collect()
        for sql in [
            "SELECT id, cust FROM orders WHERE id IN (1, 2)",
            "SELECT `from` FROM (SELECT id AS `from` FROM orders)",
        ]:
            load_spec(_write(tmp_path, sql))  # the same tokens in their right places pass
            spark.sql(sql).collect()
    finally:
        spark.catalog.dropTempView("orders")


def _write(tmp_path, sql: str):
    path = tmp_path / "ok.yaml"
    path.write_text(_yaml(sql))
    return path


def _ors(n: int) -> str:
    return "SELECT id FROM orders WHERE " + " OR ".join(f"id = {i}" for i in range(n))


@pytest.mark.parametrize(
    "sql",
    [
        _ors(MAX_DEPTH + 5),
        "SELECT " + "(" * 3000 + "id" + ")" * 3000 + " AS s FROM orders",
        "SELECT " + " + ".join(["id"] * 5000) + " AS s FROM orders",
    ],
    ids=["ors", "parentheses", "sum"],
)
def test_an_expression_nested_too_deep_is_refused_not_a_recursion_error(tmp_path, sql):
    e = _refused(tmp_path, sql)
    assert e.code == "view-unsupported", str(e)[:300]
    assert "SQL line 1, column" in str(e)


def test_a_chain_under_the_limit_compiles_and_equals_spark_sql(spark, tmp_path):
    sql = _ors(MAX_DEPTH - 100)
    rows = [{"id": i, "cust": "c"} for i in range(0, 2 * MAX_DEPTH, 3)]
    p = cbp.Pipeline(str(_write(tmp_path, sql)), str(tmp_path / "home"), spark=spark)
    p.feed("orders", rows)
    p.run()
    p.feed("orders", [{**rows[1], "_diff": -1}])
    p.run()
    _table(spark, "orders", ORDERS, rows[:1] + rows[2:])
    try:
        want = sorted(r.id for r in spark.sql(sql).collect())
    finally:
        spark.catalog.dropTempView("orders")
    assert sorted(r["id"] for r in p.output("v", consolidated=True)) == want and len(want) > 50
