"""``cbp sql`` refuses what it can before Spark starts (cbp.sqlcheck): syntax errors with line and
column, statements that write, names that are no view (listing the views), time travel other than
``VERSION AS OF`` an epoch, and epochs not run. Counted: no SparkSession is asked for."""

from __future__ import annotations

import pytest
from conftest import FLOWS

import cbp.engine.driver.session as session
from cbp.cli import main
from cbp.errors import UsageError
from cbp.sqlcheck import check

YAML = FLOWS / "url_count.yaml"
VIEWS = ["url_count", "urls", "counts"]


@pytest.fixture
def no_spark(monkeypatch):
    """Counts every request for a SparkSession (and refuses it)."""
    asked: list[object] = []

    def refuse(*args: object, **kwargs: object) -> None:
        asked.append(args)
        raise AssertionError("a SparkSession was asked for")

    monkeypatch.setattr(session, "get_spark", refuse)
    return asked


@pytest.mark.parametrize(
    "query,args,code",
    [
        ("SELEC * FROM url_count", [], "bad-sql"),
        ("SELECT * FROM url_count\nWHERE (", [], "bad-sql"),
        ("SELECT 1; SELECT 2", [], "bad-sql"),
        ("SELECT * FROM no_such_view", [], "sql-unknown-view"),
        ("WITH c AS (SELECT 1 AS n) SELECT * FROM c JOIN nope", [], "sql-unknown-view"),
        ("INSERT INTO urls VALUES ('x')", [], "sql-not-query"),
        ("DROP VIEW urls", [], "sql-not-query"),
        ("CREATE TABLE t AS SELECT * FROM urls", [], "sql-not-query"),
        ("SET spark.sql.ansi.enabled=false", [], "sql-not-query"),
        ("CACHE TABLE urls", [], "sql-not-query"),
        (
            "WITH x AS (SELECT 1) INSERT OVERWRITE DIRECTORY '/tmp/out' USING parquet SELECT * FROM x",
            [],
            "sql-not-query",
        ),
        ("SELECT * FROM urls WHERE url IN (SELECT value FROM text.`/etc/passwd`)", [], "sql-not-allowed"),
        ("SELECT IDENTIFIER('ref' || 'lect')('java.util.UUID', 'randomUUID')", [], "sql-not-allowed"),
        ("SELECT * FROM url_count TIMESTAMP AS OF '2026-01-01'", [], "sql-time-travel"),
        ("SELECT * FROM url_count VERSION AS OF 'x'", [], "sql-time-travel"),
        ("SELECT * FROM url_count VERSION AS OF 1", [], "unknown-epoch"),  # a new home: no epoch has run
        ("SELECT * FROM urls VERSION AS OF 1", [], "unknown-epoch"),  # nor any feed landed
        ("SELECT * FROM url_count", ["--epoch", "1"], "unknown-epoch"),
    ],
)
def test_refused_before_spark_starts(tmp_path, capsys, no_spark, query, args, code):
    assert main(["sql", str(YAML), query, "--home", str(tmp_path / "home"), *args]) == 2
    err = capsys.readouterr().err
    assert f"[{code}]" in err and "Traceback" not in err
    assert no_spark == []


def test_unknown_view_lists_the_views():
    with pytest.raises(UsageError) as e:
        check(VIEWS, "SELECT * FROM url_count u JOIN Nope n ON u.url = n.url")
    assert e.value.code == "sql-unknown-view"
    assert all(v in str(e.value) for v in VIEWS) and "Nope" in str(e.value)


def test_syntax_error_names_line_and_column():
    with pytest.raises(UsageError) as e:
        check(VIEWS, "SELECT url\nFROM urls\nWHERE (")
    assert e.value.code == "bad-sql" and "line 3" in str(e.value) and "column" in str(e.value)


def test_queries_pass_unchanged_and_time_travel_is_rewritten():
    for q in (
        "SELECT * FROM `url_count`",
        "WITH urls2 AS (SELECT * FROM urls) SELECT * FROM urls2",
        "SELECT * FROM range(3)",
        "SELECT explode(array(1, 2))",
        "EXPLAIN SELECT * FROM urls",
        "DESCRIBE urls",
    ):
        got = check(VIEWS, q)
        assert (got.query, got.travel) == (q, {})
    got = check(VIEWS, "SELECT a.url FROM url_count VERSION AS OF 2 a JOIN URL_COUNT FOR VERSION AS OF 1 b USING (url)")
    assert got.travel == {("url_count", 2): "url_count@2", ("url_count", 1): "url_count@1"}
    assert "VERSION" not in got.query.upper()
    assert "`url_count@2` AS a" in got.query and "`url_count@1` AS b" in got.query
