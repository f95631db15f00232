"""Views under the session's ``spark.sql.ansi.enabled=false`` (issue 48, item 2; cbp/views/mode.py):
each expression of tests/test_sql_casts.py, those that fail in ANSI mode, and more (division by zero,
int and decimal overflow, string comparisons) typed and evaluated as Spark's non-ANSI mode does on the
same rows; a view maintained through changes equals Spark SQL's in that mode; the setting changed
under a home is a change of every view (``cbp plan`` shows it rebuilt, ``cbp upgrade`` rebuilds it)."""

from __future__ import annotations

import contextlib
import datetime

import pytest
from test_sql_casts import EXPRESSIONS, FAILING, ROWS, SCHEMA, _equal, _plain, _view_type
from test_sql_views import _table, check_typed_views, few_partitions  # noqa: F401 (few_partitions: a fixture)

import cbp
from cbp.errors import UsageError

LAX = [  # what ANSI fails (or refuses when loaded) and non-ANSI Spark gives a value or NULL for
    "i / 0",
    "pmod(i, 0)",
    "x / 0",
    "p / 0",
    "i % 0",
    "p % 0",
    "CAST(n AS INT)",
    "CAST(n AS TINYINT)",
    "CAST(n AS DECIMAL(3,1))",
    "CAST(n AS DOUBLE)",
    "CAST(n AS BOOLEAN)",
    "CAST(ds AS DATE)",
    "CAST(ds AS TIMESTAMP)",
    "CAST(i AS TINYINT)",
    "CAST(i * 1000000000 AS INT)",
    "CAST(x AS TINYINT)",
    "CAST(x * 1e15 AS SMALLINT)",
    "CAST(x * 1e300 AS BIGINT)",
    "CAST(p AS DECIMAL(3,1))",
    "CAST(p * 1000 AS TINYINT)",
    "CAST(t AS INT)",
    "i * 9223372036854775807",
    "-(i * 4611686018427387904) * 2",
    "abs(i * 4611686018427387904 * 2)",
    "CAST(p AS DECIMAL(38,0)) * 10000000000000000000000000000000000000",
    "i = n",
    "i > n",
    "x < n",
    "p = n",
    "b = n",
    "d > ds",
    "t < ds",
    "i IN (n, 7)",
    "i = 'abc'",
    "i = '1.5'",
    "d > '2024/01/05'",
    "to_date(ds, 'yyyy-MM-dd')",
    "to_date(ds)",
    "to_timestamp(ds, 'yyyy-M-d')",
    "date_format(ds, 'yyyy/MM')",
    "months_between(ds, d)",
    "datediff(ds, d)",
    "date_add(ds, 1)",
    "coalesce(CAST(n AS INT), -1)",
    "CASE WHEN i / 0 IS NULL THEN 'null' ELSE 'value' END",
    "make_date(2023, 2, 29)",
    "next_day(d, 'xx')",
    "unix_timestamp(ds, 'yyyy-MM-dd')",
    "to_unix_timestamp(n)",
    "extract(WEEK FROM ds)",
    "date_part('SECOND', ds)",
    "timestampdiff(DAY, ds, t)",
]


@contextlib.contextmanager
def non_ansi(spark):
    """The session's ``spark.sql.ansi.enabled`` false in the block (restored after)."""
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "false")
    try:
        yield
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)


def _lax_compiled(text: str, types: dict[str, str]):
    """What a non-ANSI view's stage evaluates: its type, and the tree of its compiled text."""
    from cbp.views.exprs import infer, parse_expr, with_decimal_types
    from cbp.views.mode import semantics

    with semantics(False):
        node = parse_expr(text)
        return infer(node, types), parse_expr(with_decimal_types(node, types, "v").sql("spark"))


@pytest.mark.usefixtures("few_partitions")
def test_expressions_type_and_evaluate_as_spark_without_ansi(spark):
    """Every expression (tests/test_sql_casts.py's, the ones ANSI fails, :data:`LAX`) on the same rows:
    its type and its value by ``ev`` and by the compiled closure against Spark SQL's, ANSI off."""
    from cbp.views.compiled import node_fn
    from cbp.views.exprs import ev
    from cbp.views.mode import semantics
    from cbp.views.vtypes import conform

    texts = [*EXPRESSIONS, *dict.fromkeys(e for e, _ in FAILING), *LAX]
    types = {k: v.rstrip("?") for k, v in SCHEMA.items()}
    rows = [*ROWS, *({k: None for k in types} | values for _, values in FAILING)]
    rows = [r | {"k": i} for i, r in enumerate(rows)]
    _table(spark, "lax_t", SCHEMA | {"k": "int"}, rows)
    try:
        with non_ansi(spark):
            cols = ", ".join(f"{e} AS e{i}" for i, e in enumerate(texts))
            df = spark.sql(f"SELECT k, {cols} FROM lax_t")
            want_types = [_view_type(f.dataType) for f in df.schema.fields[1:]]
            got = df.collect()
        compiled = [_lax_compiled(e, types) for e in texts]
        assert [t for t, _ in compiled] == want_types
        bad = []
        for row in got:
            env = rows[row["k"]]
            for text, (t, node), want in zip(texts, compiled, list(row)[1:], strict=True):
                for how, value in (("ev", ev(node, env)), ("compiled", node_fn(node)(env))):
                    with semantics(False):  # (a stage conforms its columns in its plan's mode)
                        out = _plain(conform(value, t, "v"))
                    if not _equal(out, want):
                        bad.append((how, text, env, out, want))
        assert not bad, "\n".join(map(str, bad))
    finally:
        spark.catalog.dropTempView("lax_t")


ITEMS = {"id": "int", "a": "int?", "b": "int?", "p": "decimal(10,2)?", "s": "string?", "day": "date?"}
VIEWS = {
    "lax_proj": "SELECT id, a / b AS q, a % b AS r, CAST(s AS INT) AS si, CAST(s AS DATE) AS sd, "
    "CAST(p AS DECIMAL(4,1)) AS p1, a * 4611686018427387904 AS big, p * p AS pp, pmod(a, b) AS pm, "
    "CAST(a * 1000000000 AS INT) * 3 AS n32, "
    "regexp_replace(s, '(\\\\d)', '<$1>') AS re FROM items WHERE s > 0 OR s IS NULL",
    "lax_group": "SELECT CAST(s AS INT) AS g, count(*) AS n, sum(a * 4611686018427387904) AS w, sum(a / b) AS f, "
    "sum(CAST(p AS DECIMAL(32,2)) * 1000000) AS dp FROM items GROUP BY CAST(s AS INT)",
    "lax_join": "SELECT i.id, j.id AS jd FROM items i JOIN items j ON CAST(i.s AS INT) = j.a WHERE i.day < j.s",
}


def _item(i: int, a, b, p: str | None, s: str | None, day: tuple[int, int, int] | None) -> dict:
    import decimal

    return {
        "id": i,
        "a": a,
        "b": b,
        "p": None if p is None else decimal.Decimal(p),
        "s": s,
        "day": None if day is None else datetime.date(*day),
    }


IT = [
    _item(1, 7, 2, "12.50", " 3 ", (2024, 1, 1)),
    _item(2, 5, 0, "99999999.99", "1.7", (2024, 2, 1)),
    _item(3, 3, None, "-0.05", "abc", None),
    _item(4, 2, 3, None, "2024-01-05", (2023, 1, 1)),
    _item(5, None, 0, "1.00", None, (2024, 3, 1)),
    _item(6, 3, -2, "2.50", "3", (2025, 1, 1)),
]
STEPS = [
    IT[:4],
    [{**IT[1], "_diff": -1}, IT[4], IT[5], {**IT[0], "_diff": -1}, {**IT[0], "s": "2"}],
    [{**IT[3], "_diff": -1}, _item(7, 4611686018427387904, 1, "0.01", "7", (2024, 1, 2))],
]


def _yaml(views: dict[str, str]) -> str:
    schema = ", ".join(f"{k}: {t!r}" for k, t in ITEMS.items())
    body = "\n".join(f"  {n}: |\n    {sql}" for n, sql in views.items())
    return f"pipeline: lax\nflows:\n  items: {{external: true, schema: {{{schema}}}}}\nviews:\n{body}\n"


@pytest.mark.usefixtures("few_partitions")
def test_a_view_without_ansi_equals_spark_sql_through_changes(spark, tmp_path):
    """Views whose rows divide by zero, cast what does not convert, overflow ints and decimals (ANSI:
    the epoch fails) through inserts, deletes and updates, against Spark SQL in non-ANSI mode after
    every epoch; each stage's plan records the mode."""
    path = tmp_path / "lax.yaml"
    path.write_text(_yaml(VIEWS))
    try:
        with non_ansi(spark):
            p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
            assert all(p.spec.stages[s].params["cbp_view"]["ansi"] is False for s in VIEWS)
            for step in STEPS:
                p.feed("items", step)
                p.run()
                check_typed_views(spark, p, VIEWS, {"items": ITEMS})
    finally:
        for name in [*VIEWS, "items"]:
            spark.catalog.dropTempView(name)


def test_the_setting_changed_under_a_home_rebuilds_every_view(spark, tmp_path):
    """A home that ran with ANSI: the pipeline loaded with ANSI off plans ``rebuild-view`` for each
    view stage and refuses to run until upgraded; after ``upgrade`` a division by zero is NULL where it
    failed the epoch before; back to ANSI is a change again."""
    views = {"q": "SELECT id, a / b AS q FROM items", "n": "SELECT count(*) AS n FROM q WHERE q IS NULL"}
    path = tmp_path / "lax.yaml"
    path.write_text(_yaml(views))
    home = str(tmp_path / "home")
    p = cbp.Pipeline(str(path), home, spark=spark)
    p.feed("items", [_item(1, 1, 2, None, None, None)])
    p.run()
    p.feed("items", [_item(2, 1, 0, None, None, None)])
    with pytest.raises(cbp.CbpError):  # ANSI: division by zero fails the epoch
        p.run()
    with non_ansi(spark):
        lax = cbp.Pipeline(str(path), home, spark=spark)
        plan = {c.name: c.kind for c in lax.plan().changes if c.name}
        assert plan == {"q": "rebuild-view", "n": "rebuild-view"}, plan
        with pytest.raises(UsageError) as e:
            lax.run()
        assert e.value.code == "pipeline-changed"
        lax.upgrade()
        lax.run()
        assert sorted(r["q"] is None for r in lax.output("q", consolidated=True)) == [False, True]
        assert lax.output("n", consolidated=True) == [{"n": 1}]
    again = cbp.Pipeline(str(path), home, spark=spark)
    assert {c.kind for c in again.plan().changes if c.name} == {"rebuild-view"}


def test_cbp_spark_conf_sets_the_mode_a_pipeline_is_loaded_with(tmp_path, monkeypatch):
    """No session given: ``CBP_SPARK_CONF``'s ``spark.sql.ansi.enabled`` (the session cbp starts gets it);
    non-ANSI, a string literal that is not a number compares as NULL instead of being refused."""
    from cbp.errors import SpecError
    from cbp.spec import load_spec

    path = tmp_path / "v.yaml"
    path.write_text(_yaml({"v": "SELECT id, a / b AS q FROM items WHERE a = 'x'"}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "view-unsupported"
    monkeypatch.setenv("CBP_SPARK_CONF", "spark.sql.shuffle.partitions=2; spark.sql.ansi.enabled = false")
    plan = load_spec(path).stages["v"].params["cbp_view"]
    assert plan["ansi"] is False and plan["branches"][0]["cols"] == [["id", "`id`"], ["q", "CBP_LAX(`a` / `b`)"]]
    with pytest.raises(SpecError):
        load_spec(path, ansi=True)  # the mode given (a session's) wins
