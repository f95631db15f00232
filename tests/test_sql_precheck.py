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
        ("EXECUTE IMMEDIATE 'DROP VIEW urls'", [], "sql-not-query"),
        ("ADD JAR /tmp/x.jar", [], "sql-not-query"),
        ("EXPLAIN WITH x AS (SELECT 1) INSERT INTO urls SELECT * FROM x", [], "sql-not-query"),
        ("SELECT * FROM read_files('/etc/passwd')", [], "sql-not-allowed"),
        ("SELECT TRANSFORM(url) USING 'cat /etc/passwd' FROM urls", [], "sql-not-allowed"),
        ("SHOW TBLPROPERTIES delta.`/tmp`", [], "sql-not-allowed"),
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


# Hostile statements: the only check before Spark (on Spark Connect ``spark.sql`` runs a command at
# once, and there is no JVM parser to ask), so each form is refused by sqlglot alone.
@pytest.mark.parametrize(
    "query,code",
    [
        # commands, at the top or behind WITH / FROM / EXPLAIN
        ("INSERT INTO urls SELECT * FROM urls", "sql-not-query"),
        ("FROM urls INSERT INTO x SELECT *", "sql-not-query"),
        ("EXPLAIN INSERT INTO urls VALUES ('x')", "sql-not-query"),
        ("CREATE TEMPORARY VIEW v AS SELECT 1", "sql-not-query"),
        ("CREATE TEMPORARY FUNCTION f AS 'x.Y' USING JAR '/tmp/x.jar'", "sql-not-query"),
        ("DROP TABLE IF EXISTS urls", "sql-not-query"),
        ("ALTER VIEW urls AS SELECT 1", "sql-not-query"),
        ("MERGE INTO urls t USING urls s ON false WHEN NOT MATCHED THEN INSERT *", "sql-not-query"),
        (
            "WITH x AS (SELECT 1) MERGE INTO delta.`/s` t USING x ON false WHEN NOT MATCHED THEN INSERT *",
            "sql-not-query",
        ),
        ("UPDATE urls SET url = 'x'", "sql-not-query"),
        ("WITH x AS (SELECT 1) DELETE FROM delta.`/s`", "sql-not-query"),
        ("TRUNCATE TABLE urls", "sql-not-query"),
        ("SET spark.sql.runSQLOnFiles=true", "sql-not-query"),
        ("SET VARIABLE v = 1", "sql-not-query"),
        ("DECLARE VARIABLE v INT", "sql-not-query"),
        ("RESET", "sql-not-query"),
        ("USE other_db", "sql-not-query"),
        ("CACHE LAZY TABLE x AS SELECT 1", "sql-not-query"),
        ("UNCACHE TABLE urls", "sql-not-query"),
        ("CLEAR CACHE", "sql-not-query"),
        ("ADD JAR /tmp/x.jar", "sql-not-query"),
        ("ADD FILE /tmp/x.py", "sql-not-query"),
        ("LIST FILE", "sql-not-query"),
        ("REFRESH TABLE urls", "sql-not-query"),
        ("CALL sys.rollback_to_snapshot('t', 1)", "sql-not-query"),
        ("MSCK REPAIR TABLE t", "sql-not-query"),
        ("EXECUTE IMMEDIATE 'DROP VIEW urls'", "sql-not-query"),
        ("LOAD DATA INPATH '/x' INTO TABLE urls", "sql-not-query"),
        ("ANALYZE TABLE urls COMPUTE STATISTICS", "sql-not-query"),
        ("COMMENT ON TABLE urls IS 'x'", "sql-not-query"),
        ("BEGIN DROP VIEW urls; END", "sql-not-query"),
        ("EXPLAIN", "sql-not-query"),
        # several statements, however they are hidden
        ("SELECT 1 -- a comment\n; DROP VIEW urls", "bad-sql"),
        ("EXPLAIN SELECT 1; DROP VIEW urls", "bad-sql"),
        # reading anything but the views
        ("SELECT * FROM read_files('/etc/passwd')", "sql-not-allowed"),
        ("SELECT * FROM urls, LATERAL read_files('/x')", "sql-not-allowed"),
        ("SELECT * FROM parquet.`/x`", "sql-not-allowed"),
        ("SELECT * FROM `csv`.`/etc/passwd`", "sql-not-allowed"),
        ("WITH u AS (SELECT * FROM text.`/etc/passwd`) SELECT * FROM u", "sql-not-allowed"),
        ("SELECT (SELECT count(*) FROM json.`/etc/passwd`) AS n", "sql-not-allowed"),
        ("SELECT r'\\', x FROM delta.`/p` --'", "sql-not-allowed"),  # a raw string: what Spark sees too
        ("SELECT * FROM global_temp.v", "sql-not-allowed"),
        ("SELECT * FROM spark_catalog.default.t", "sql-not-allowed"),
        ("DESCRIBE delta.`/x`", "sql-not-allowed"),
        ("DESCRIBE FUNCTION reflect", "sql-not-allowed"),
        ("SHOW TABLES IN other_db", "sql-not-allowed"),
        ("SHOW COLUMNS IN delta.`/x`", "sql-not-allowed"),
        ("SHOW PARTITIONS delta.`/x`", "sql-not-allowed"),
        ("SHOW TBLPROPERTIES delta.`/x`", "sql-not-allowed"),
        ("SELECT java_method('java.lang.System', 'exit', 3)", "sql-not-allowed"),
        ("SELECT upper(reflect('java.util.UUID', 'randomUUID')) FROM urls", "sql-not-allowed"),
        ("SELECT try_reflect('java.util.UUID', 'randomUUID')", "sql-not-allowed"),
        ("SELECT from_protobuf(url, 'M', '/etc/passwd') FROM urls", "sql-not-allowed"),
        ("SELECT TRANSFORM(url) USING 'cat /etc/passwd' FROM urls", "sql-not-allowed"),
        ("SELECT * FROM IDENTIFIER('delta.`/x`')", "sql-not-allowed"),
        ("SELECT IDENTIFIER('url') FROM urls", "sql-not-allowed"),
        ("SELECT db.f(url) FROM urls", "sql-not-allowed"),
        # names
        ("DESCRIBE nope", "sql-unknown-view"),
        ("SHOW COLUMNS IN nope", "sql-unknown-view"),
        ("EXPLAIN SELECT * FROM nope", "sql-unknown-view"),
    ],
)
def test_hostile_statements_are_refused_by_sqlglot_alone(query, code):
    with pytest.raises(UsageError) as e:
        check(VIEWS, query)
    assert e.value.code == code


def test_read_only_statements_pass_and_explain_travels():
    for q in (
        "SELECT * FROM urls, LATERAL explode(array(1, 2)) t(x)",
        "SELECT * FROM urls LATERAL VIEW OUTER posexplode(array(1)) t AS p, x",
        "SELECT * FROM stack(2, 1, 2)",
        "SELECT /*+ REPARTITION(2) */ url FROM urls",
        "VALUES (1), (2)",
        "(SELECT url FROM urls) UNION ALL (SELECT url FROM url_count)",
        "EXPLAIN FORMATTED SELECT * FROM urls",
        "DESC TABLE EXTENDED url_count",
        "SHOW TABLES",
        "SHOW VIEWS LIKE 'url*'",
        "SHOW COLUMNS IN urls",
    ):
        got = check(VIEWS, q)
        assert (got.query, got.travel) == (q, {})
    got = check(VIEWS, "EXPLAIN EXTENDED SELECT * FROM url_count VERSION AS OF 2")
    assert got.travel == {("url_count", 2): "url_count@2"}
    assert got.query.startswith("EXPLAIN EXTENDED ") and "`url_count@2`" in got.query


def test_no_spark_context_on_connect():
    """On Spark Connect ``spark.sparkContext`` raises: ``cbp sql`` sets Spark's log level only on a classic session."""
    from cbp.sql import classic_context

    class Connect:
        @property
        def sparkContext(self):
            raise NotImplementedError("JVM_ATTRIBUTE_NOT_SUPPORTED")

    assert classic_context(Connect()) is None
