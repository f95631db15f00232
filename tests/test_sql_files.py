"""SQL files (``sql:``, cbp/views/sqlfiles.py) and ``cbp explain``: the views of a .sql file of
``CREATE [OR REFRESH] MATERIALIZED VIEW`` statements equal Spark SQL after epochs with deletions;
every refused file or statement asserts its code and the file's line and column; ``cbp explain``
names the generated stages and, after a run, their state's rows."""

from __future__ import annotations

import json
import os

import pytest
from test_sql_views import check_views

import cbp
from cbp.cli import main
from cbp.commands.explain import explain
from cbp.errors import SpecError, UsageError
from cbp.spec import load_spec

ORDERS = {"id": "int", "cust": "string", "amount": "float"}
SHOP_SQL = """\
-- the shop's views, as a Spark Declarative Pipelines user writes them
CREATE MATERIALIZED VIEW big AS
  SELECT id, cust, amount * 2 AS gross  -- doubled
  FROM orders
  WHERE amount > 1.0;

/* per customer: a GROUP BY
   over the view above */
CREATE OR REFRESH MATERIALIZED VIEW per_cust AS
SELECT cust, count(*) AS n, sum(gross) AS total, max(id) AS last
FROM big GROUP BY cust;
"""
SQL = {
    "big": "SELECT id, cust, amount * 2 AS gross FROM orders WHERE amount > 1.0",
    "per_cust": "SELECT cust, count(*) AS n, sum(gross) AS total, max(id) AS last FROM big GROUP BY cust",
    "top": "SELECT cust, total FROM per_cust WHERE total > 10",
}


def _project(tmp_path, sql: dict[str, str], files: list[str], views: str = "") -> str:
    """A pipeline YAML over flow ``orders`` with ``sql: files`` (``sql`` maps each file to its text)."""
    for name, text in sql.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    tmp_path.mkdir(parents=True, exist_ok=True)
    yaml = tmp_path / "p.yaml"
    flows = "flows:\n  orders: {external: true, schema: {id: int, cust: string, amount: float}}\n"
    yaml.write_text(f"pipeline: shop\n{flows}sql: {json.dumps(files)}\n{views}")
    return str(yaml)


def test_views_of_a_sql_file_equal_spark_sql_and_explain_shows_their_state(spark, tmp_path, capsys):
    path = _project(tmp_path, {"sql/shop.sql": SHOP_SQL}, ["sql/shop.sql"], "views:\n  top: " + SQL["top"] + "\n")
    home = str(tmp_path / "home")
    p = cbp.Pipeline(path, home, spark=spark)
    rows = [{"id": i, "cust": f"c{i % 3}", "amount": i / 2} for i in range(12)]
    try:
        p.feed("orders", rows)
        p.run()
        check_views(spark, p, SQL, {"orders": ORDERS})
        # a deletion (the MAX holder of c2, id 11), a row moved to another customer, an insertion
        p.feed("orders", [{**rows[11], "_diff": -1}, {**rows[4], "_diff": -1}, {**rows[4], "cust": "c0"}])
        p.feed("orders", [{"id": 20, "cust": "c3", "amount": 9.0}])
        p.run()
        check_views(spark, p, SQL, {"orders": ORDERS})
    finally:
        for name in [*SQL, "orders"]:
            spark.catalog.dropTempView(name)
    ex = explain(path, "per_cust", home)
    (stage,) = ex["stages"]
    assert stage["stage"] == "per_cust" and stage["operator"].startswith("GROUP BY (`cust`)")
    # the current files' rows: a row per group c0..c3, and a group's superseded rows until they are rewritten
    assert stage["state"]["rows"] >= 4 and stage["state"]["bytes"] > 0 and stage["state"]["files"] >= 1
    assert ex["reads"] == ["big"]
    assert main(["explain", path, "big", "--home", home]) == 0
    out = capsys.readouterr().out
    assert "stage big" in out and "state: none (stateless)" in out


def test_explain_names_the_stages_of_a_join_and_group_without_a_home(tmp_path, capsys):
    path = _project(
        tmp_path,
        {
            "v.sql": "CREATE MATERIALIZED VIEW j AS SELECT o.cust, count(*) AS n FROM orders o "
            "JOIN orders2 p ON o.id = p.id GROUP BY o.cust;"
        },
        ["v.sql"],
    )
    text = open(path).read().replace("flows:\n", "flows:\n  orders2: {external: true, schema: {id: int}}\n")
    open(path, "w").write(text)
    ex = explain(path, "j")
    assert [s["stage"] for s in ex["stages"]] == ["j__join", "j"]
    assert ex["stages"][0]["operator"].startswith("inner equi-join ON (`id`) = (`id`)")
    assert [i["flow"] for i in ex["stages"][0]["inputs"]] == ["orders", "orders2"]
    assert "rows" not in ex["stages"][0]["state"] and "side (s)" in ex["stages"][0]["state"]["holds"]
    with pytest.raises(UsageError) as e:
        explain(path, "nope")
    assert e.value.code == "unknown-view" and "the views are: j" in str(e.value)
    assert main(["explain", path, "nope"]) == 2
    assert "[unknown-view]" in capsys.readouterr().err


GOOD = "CREATE MATERIALIZED VIEW v AS SELECT id FROM orders;\n"
BAD = [
    # (files, the sql: list, YAML views:, code, what the message says)
    ({}, ["../outside.sql"], "", "sql-file-outside", "'../outside.sql' is outside"),
    ({}, ["/etc/hosts"], "", "sql-file-outside", "outside"),
    ({}, ["none.sql"], "", "sql-file-missing", "'none.sql'"),
    ({"a.sql": GOOD + "\n  INSERT INTO orders VALUES (1);"}, ["a.sql"], "", "sql-file-statement", "line 3, column 3"),
    ({"a.sql": "CREATE TABLE t AS SELECT id FROM orders;"}, ["a.sql"], "", "sql-file-statement", "line 1, column 1"),
    ({"a.sql": "CREATE MATERIALIZED VIEW v SELECT 1;"}, ["a.sql"], "", "sql-file-statement", "a.sql: line 1"),
    ({"a.sql": GOOD, "b.sql": GOOD}, ["a.sql", "b.sql"], "", "duplicate-view", "also in"),
    ({"a.sql": GOOD + GOOD}, ["a.sql"], "", "duplicate-view", "created twice"),
    ({"a.sql": GOOD}, ["a.sql"], "views:\n  v: SELECT id FROM orders\n", "duplicate-view", "the YAML's views:"),
    (
        {"a.sql": GOOD + "CREATE MATERIALIZED VIEW w AS\n  SELECT id FROM WHERE;"},
        ["a.sql"],
        "",
        "view-syntax",
        "a.sql:",
    ),
    (
        {"a.sql": "-- c\nCREATE MATERIALIZED VIEW w AS SELECT id,\n  idd FROM orders;"},
        ["a.sql"],
        "",
        "view-unknown",
        "",
    ),
    ({"a.sql": "CREATE MATERIALIZED VIEW w AS SELECT 'x FROM orders;"}, ["a.sql"], "", "view-syntax", "not valid SQL"),
    (
        {"a.sql": "CREATE MATERIALIZED VIEW orders AS SELECT id FROM orders;"},
        ["a.sql"],
        "",
        "bad-name",
        "a.sql: line 1",
    ),
]


@pytest.mark.parametrize("files,entries,views,code,says", BAD, ids=[f"{b[3]}-{i}" for i, b in enumerate(BAD)])
def test_a_bad_sql_file_is_refused_with_its_code(tmp_path, files, entries, views, code, says):
    path = _project(tmp_path / "p", files, entries, views)
    (tmp_path / "outside.sql").write_text(GOOD)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == code
    assert says in str(e.value)


def test_errors_inside_a_select_name_the_file_line_and_column(tmp_path):
    text = "-- c\nCREATE MATERIALIZED VIEW w AS SELECT id,\n  idd FROM orders;"
    path = _project(tmp_path, {"q/a.sql": text}, ["q/a.sql"])
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "view-unknown" and f"{os.sep}q{os.sep}a.sql: line 3, column 3: view 'w'" in str(e.value)
    (tmp_path / "q/a.sql").write_text("CREATE MATERIALIZED VIEW w AS SELECT id FROM orders WHERE cust = 1 +;")
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "view-syntax" and "a.sql: line 1, column" in str(e.value)


def test_a_symlink_out_of_the_yaml_directory_is_refused(tmp_path):
    (tmp_path / "secret.sql").write_text(GOOD)
    path = _project(tmp_path / "p", {}, ["link.sql"])
    os.symlink(tmp_path / "secret.sql", tmp_path / "p" / "link.sql")
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "sql-file-outside"
    os.symlink(tmp_path / "p" / "in.sql", tmp_path / "p" / "inlink.sql")  # a symlink inside the tree is read
    (tmp_path / "p" / "in.sql").write_text(GOOD)
    path = _project(tmp_path / "p", {}, ["inlink.sql"])
    assert "v" in load_spec(path).stages
