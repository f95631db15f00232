"""Overflow as Spark has it (issue 48): int arithmetic in Spark's 8/16/32 bits on values cast to
``int``/``smallint``/``tinyint``, int literals and 32-bit functions (cbp/views/intwidth.py), in ANSI
mode (``view-overflow`` where Spark fails with ARITHMETIC_OVERFLOW) and without (wrapping); each
expression against Spark SQL on the same rows, in both modes."""

from __future__ import annotations

import pytest
from test_sql_ansi import non_ansi
from test_sql_casts import _equal, _view_type
from test_sql_views import _table, few_partitions  # noqa: F401 (few_partitions: a fixture)

import cbp
from cbp.errors import UserCodeError

SCHEMA = {"k": "int", "i": "int?", "j": "int?", "s": "string?"}
TYPES = {k: v.rstrip("?") for k, v in SCHEMA.items()}
ROWS = [
    {"k": 0, "i": 2147483647, "j": 2, "s": "abcd"},
    {"k": 1, "i": -2147483648, "j": -1, "s": "a"},
    {"k": 2, "i": 46341, "j": 46341, "s": ""},
    {"k": 3, "i": 100, "j": 27, "s": None},
    {"k": 4, "i": None, "j": 300, "s": "xyz"},
    {"k": 5, "i": -32768, "j": 127, "s": "b"},
]
EXPRESSIONS = [
    "CAST(i AS INT) + 1",
    "CAST(i AS INT) - j",
    "CAST(i AS INT) * CAST(j AS INT)",
    "CAST(i AS INT) - 1 + i",
    "-CAST(i AS INT)",
    "abs(CAST(i AS INT))",
    "coalesce(CAST(i AS INT), 0) + 2147483647",
    "CAST(i AS INT) % 7",
    "CASE WHEN j > 0 THEN CAST(j AS INT) ELSE 1 END * 100000000",
    "length(s) * 1000000000",
    "CAST(i AS BIGINT) * 2",
    "CAST(j AS SMALLINT) * CAST(j AS SMALLINT)",
    "CAST(j AS SMALLINT) * 1000",
    "try_cast(j AS TINYINT) + try_cast(j AS TINYINT)",
    "2147483647 + j",
]


def _compiled(text: str, ansi: bool):
    from cbp.views.exprs import infer, parse_expr, with_decimal_types
    from cbp.views.mode import semantics

    with semantics(ansi):
        node = parse_expr(text)
        return infer(node, TYPES), parse_expr(with_decimal_types(node, TYPES, "v").sql("spark"))


def _values(node, env: dict, ansi: bool) -> list:
    """The value by ``ev`` and by the compiled closure; an exception's code instead of a value."""
    from cbp.views.compiled import node_fn
    from cbp.views.exprs import ev
    from cbp.views.mode import semantics

    out = []
    for f in (lambda: ev(node, env), lambda: node_fn(node)(env)):
        with semantics(ansi):
            try:
                out.append(f())
            except UserCodeError as e:
                out.append(e.code)
    return out


def _spark_values(spark, text: str, keys: list[int]) -> dict[int, object]:
    where = ", ".join(map(str, keys))
    return {r["k"]: r["e"] for r in spark.sql(f"SELECT k, {text} AS e FROM ovf_t WHERE k IN ({where})").collect()}


@pytest.mark.usefixtures("few_partitions")
def test_narrow_int_arithmetic_wraps_as_spark_without_ansi(spark):
    """ANSI off: each expression's type and value (by ``ev`` and compiled) equal Spark's, 32-bit (16,
    8) results wrapped as Java's ``int`` arithmetic wraps."""
    _table(spark, "ovf_t", SCHEMA, ROWS)
    try:
        with non_ansi(spark):
            df = spark.sql(f"SELECT k, {', '.join(f'{e} AS e{i}' for i, e in enumerate(EXPRESSIONS))} FROM ovf_t")
            want_types = [_view_type(f.dataType) for f in df.schema.fields[1:]]
            got = df.collect()
        compiled = [_compiled(e, False) for e in EXPRESSIONS]
        assert [t for t, _ in compiled] == want_types
        bad = [
            (text, row["k"], v, want)
            for row in got
            for text, (_, node), want in zip(EXPRESSIONS, compiled, list(row)[1:], strict=True)
            for v in _values(node, ROWS[row["k"]], False)
            if not _equal(v, want)
        ]
        assert not bad, "\n".join(map(str, bad))
    finally:
        spark.catalog.dropTempView("ovf_t")


@pytest.mark.usefixtures("few_partitions")
def test_narrow_int_overflow_fails_as_spark_in_ansi_mode(spark):
    """ANSI: on the rows where the view's value is ``view-overflow`` (or ``view-cast``: a value the
    cast does not fit) Spark's query fails too (ARITHMETIC_OVERFLOW, CAST_OVERFLOW); on the others the
    values are Spark's. Each expression overflows on some row."""
    _table(spark, "ovf_t", SCHEMA, ROWS)
    try:
        overflowed = 0
        for text in EXPRESSIONS:
            _, node = _compiled(text, True)
            mine = {r["k"]: _values(node, r, True) for r in ROWS}
            ok = [k for k, vs in mine.items() if vs[0] not in ("view-overflow", "view-cast")]
            for k, want in _spark_values(spark, text, ok).items():
                assert all(_equal(v, want) for v in mine[k]), (text, k, mine[k], want)
            for k in sorted(set(mine) - set(ok)):
                assert mine[k][0] == mine[k][1], (text, k, mine[k])
                overflowed += mine[k][0] == "view-overflow"
                with pytest.raises(Exception, match="OVERFLOW"):
                    _spark_values(spark, text, [k])
        assert overflowed >= len(EXPRESSIONS) - 3
    finally:
        spark.catalog.dropTempView("ovf_t")


def test_a_view_overflowing_32_bits_fails_the_epoch_naming_the_view_and_row(spark, tmp_path):
    """ANSI: ``CAST(i AS INT) + 1`` of 2147483647 fails the epoch with ``view-overflow`` naming the view
    and the row; nothing of it is committed."""
    path = tmp_path / "v.yaml"
    path.write_text(
        "pipeline: v\nflows:\n  t: {external: true, schema: {k: int, i: 'int?'}}\n"
        "views:\n  v32: SELECT k, CAST(i AS INT) + 1 AS n FROM t\n"
    )
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    p.feed("t", [{"k": 1, "i": 5}])
    p.run()
    assert p.output("v32", consolidated=True) == [{"k": 1, "n": 6}]
    p.feed("t", [{"k": 2, "i": 2147483647}])
    with pytest.raises(cbp.CbpError) as e:
        p.run()
    assert e.value.code == "view-overflow" and "v32" in str(e.value) and "2147483647" in str(e.value)
    assert p.output("v32", consolidated=True) == [{"k": 1, "n": 6}]


BIGS = {"k": "string", "b": "decimal(38,0)?", "p": "decimal(10,2)?"}
BIG_VIEWS = {
    "big_sum": "SELECT k, count(*) AS n, sum(b) AS s, avg(b) AS a, sum(p) AS sp FROM bigs GROUP BY k",
    "big_all": "SELECT sum(b) AS s, count(b) AS n FROM bigs",
}


def _big(k: str, b: str | None, p: str | None = "1.50") -> dict:
    import decimal

    return {"k": k, "b": None if b is None else decimal.Decimal(b), "p": None if p is None else decimal.Decimal(p)}


E37, N38 = "1" + "0" * 37, "9" * 38
BIG_STEPS = [  # x's running total passes 38 digits, then a retraction brings it back under
    [_big("x", E37), _big("x", N38), _big("y", "5"), _big("y", None)],
    [_big("x", "-1"), _big("z", N38, None)],
    [{**_big("x", N38), "_diff": -1}],
    [_big("x", N38), _big("x", N38), {**_big("z", N38, None), "_diff": -1}],
    [{**_big("x", N38), "_diff": -1}, {**_big("x", N38), "_diff": -1}, {**_big("x", E37), "_diff": -1}],
]


@pytest.mark.usefixtures("few_partitions")
def test_a_non_ansi_decimal_sum_past_38_digits_is_null_and_comes_back(spark, tmp_path):
    """ANSI off: a group's decimal(38,0) ``sum`` (and ``avg``) whose total passes 38 digits is NULL, as
    Spark's, and its value again when a retraction brings the total back under: the state keeps the
    exact total (as text), only the row shows NULL; against Spark SQL without ANSI after every epoch."""
    from test_sql_views import check_typed_views

    body = "\n".join(f"  {n}: {sql}" for n, sql in BIG_VIEWS.items())
    schema = ", ".join(f"{k}: {t!r}" for k, t in BIGS.items())
    path = tmp_path / "big.yaml"
    path.write_text(f"pipeline: big\nflows:\n  bigs: {{external: true, schema: {{{schema}}}}}\nviews:\n{body}\n")
    try:
        with non_ansi(spark):
            p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
            assert p.spec.stages["big_sum"].state_schema.fields["s1"].scalar == "string"
            nulls = []
            for step in BIG_STEPS:
                p.feed("bigs", step)
                p.run()
                check_typed_views(spark, p, BIG_VIEWS, {"bigs": BIGS})
                rows = {r["k"]: r for r in p.output("big_sum", consolidated=True)}
                nulls.append(rows["x"]["s"] is None if "x" in rows else None)
            assert nulls == [True, True, False, True, False]
    finally:
        for name in [*BIG_VIEWS, "bigs"]:
            spark.catalog.dropTempView(name)
