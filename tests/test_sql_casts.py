"""CAST, TRY_CAST and ``::``, date arithmetic and date functions, scalar functions (round, floor, greatest,
nullif, concat_ws, lpad, ...) and the implicit casts of a comparison in a view's expressions
(cbp/views/casts.py, datefns.py, functions.py), with Spark 4's ANSI semantics: each expression's
type and value against Spark SQL's over the same rows; a value ANSI cannot convert fails Spark's
query and cbp's epoch (``view-cast``, naming the view and the row, nothing committed); views using
them equal Spark SQL after every epoch of inserts, deletes and updates; each refusal's code."""

from __future__ import annotations

import datetime
import decimal
import math

import pytest
from test_sql_views import _expand, _same, _table, few_partitions  # noqa: F401 (few_partitions: a fixture)

import cbp
from cbp.errors import SpecError  # noqa: F401
from cbp.spec import load_spec  # noqa: F401

D, UTC = decimal.Decimal, datetime.timezone.utc
SCHEMA = {"i": "int?", "x": "float?", "p": "decimal(10,2)?", "s": "string?", "b": "bool?", "d": "date?"}
SCHEMA |= {"t": "timestamp?", "n": "string?", "ds": "string?"}
TYPES = {k: v.rstrip("?") for k, v in SCHEMA.items()}


def _row(i, x, p, s, b, d, t, n, ds) -> dict:
    return dict(zip(TYPES, (i, x, None if p is None else D(p), s, b, d, t, n, ds), strict=True))


def _ts(*parts: int) -> datetime.datetime:
    return datetime.datetime(*parts, tzinfo=UTC)  # type: ignore[misc]


ROWS = [
    _row(
        1,
        2.675,
        "2.50",
        "banana",
        True,
        datetime.date(2024, 1, 31),
        _ts(2024, 1, 31, 10, 11, 12, 500000),
        " 12 ",
        "2024-1-5",
    ),
    _row(
        -3, -2.5, "-1.25", "a b", False, datetime.date(2024, 2, 29), _ts(2024, 2, 29, 23, 59, 59), "-7", " 2024-01-05 "
    ),
    _row(7, 1e-5, "999.99", "", None, datetime.date(1998, 12, 1), _ts(1998, 12, 1), "+3", "2024-02"),
    _row(
        300,
        12345.678,
        "0.05",
        "  pad ",
        True,
        datetime.date(2023, 12, 31),
        _ts(2023, 12, 31, 1, 2, 3),
        "1.5",
        "2024-01-05 10:11:12",
    ),
    _row(0, 0.0, None, "x,y", False, datetime.date(2024, 5, 19), None, "abc", "2024/01/05"),
    _row(None, None, "1.54", None, None, None, _ts(2024, 5, 17), None, None),
]
EXPRESSIONS = [  # none of these fails on ROWS (the ones that do: FAILING)
    # casts: strings trimmed and parsed, ints range-checked, decimals HALF_UP, floats truncated
    "TRY_CAST(n AS INT)",
    "TRY_CAST(n AS BIGINT)",
    "TRY_CAST(n AS SMALLINT)",
    "TRY_CAST(n AS DECIMAL(5,2))",
    "TRY_CAST(n AS DOUBLE)",
    "TRY_CAST(n AS BOOLEAN)",
    "TRY_CAST(ds AS DATE)",
    "TRY_CAST(ds AS TIMESTAMP)",
    "CAST(i AS DOUBLE)",
    "CAST(i AS DECIMAL(12,2))",
    "CAST(i AS STRING)",
    "CAST(i AS BOOLEAN)",
    "TRY_CAST(i AS TINYINT)",
    "i::smallint * 2",
    "CAST(x AS INT)",
    "CAST(x AS DECIMAL(10,2))",
    "TRY_CAST(x AS DECIMAL(6,2))",
    "CAST(x AS STRING)",
    "CAST(x AS FLOAT)",
    "x::int + 1",
    "CAST(p AS INT)",
    "CAST(p AS DOUBLE)",
    "CAST(p AS STRING)",
    "CAST(p AS DECIMAL(5,1))",
    "TRY_CAST(p AS DECIMAL(3,1))",
    "CAST(p AS DECIMAL(4,0)) + 1",
    "CAST(b AS INT)",
    "CAST(b AS STRING)",
    "CAST(d AS TIMESTAMP)",
    "CAST(d AS STRING)",
    "CAST(t AS DATE)",
    "CAST(t AS STRING)",
    "CAST(t AS BIGINT)",
    "CAST(NULL AS INT)",
    "int(x)",
    "date(t)",
    # date arithmetic and functions
    "d + INTERVAL '90' DAY",
    "d - INTERVAL '3' MONTH",
    "d + INTERVAL 1 YEAR",
    "d + 5",
    "d - 1",
    "t + INTERVAL '2' HOUR",
    "t - INTERVAL '1' MONTH",
    "d + INTERVAL '30' MINUTE",
    "DATE '1998-12-01' - INTERVAL '90' DAY",
    "date_add(d, 40)",
    "date_sub(d, 2)",
    "date_add(t, 1)",
    "datediff(d, DATE '2024-01-01')",
    "datediff(t, d)",
    "add_months(d, 1)",
    "add_months(d, -12)",
    "to_date(t)",
    "to_date('05.01.2024', 'dd.MM.yyyy')",
    "to_date('2024/1/5', 'yyyy/M/d')",
    "to_date('20240105', 'yyyyMMdd')",
    "date_trunc('MONTH', t)",
    "date_trunc('week', d)",
    "date_trunc('QUARTER', t)",
    "date_trunc('HOUR', t)",
    "trunc(d, 'MM')",
    "trunc(t, 'YEAR')",
    "trunc(d, 'week')",
    "dayofweek(d)",
    "quarter(d)",
    "last_day(d)",
    "dayofyear(d)",
    "weekofyear(d)",
    "hour(t)",
    "minute(t)",
    "second(t)",
    # functions
    "round(x, 2)",
    "round(x)",
    "round(p, 1)",
    "round(p, -1)",
    "round(i, -1)",
    "floor(x)",
    "ceil(x)",
    "floor(p)",
    "ceil(p)",
    "abs(p)",
    "greatest(i, p)",
    "least(x, i)",
    "greatest(s, 'm')",
    "least(d, DATE '2024-01-01')",
    "nullif(i, 1)",
    "nullif(s, 'banana')",
    "coalesce(i, p)",
    "coalesce(p, x)",
    "nvl(i, 0)",
    "ifnull(s, 'none')",
    "concat_ws('-', s, i, NULL, p)",
    "concat_ws('/', s, d, x)",
    "lpad(s, 5, 'xy')",
    "rpad(s, 3)",
    "lpad(s, 0, 'x')",
    "replace(s, 'a', 'AA')",
    "replace(s, 'a')",
    "split_part(s, 'a', 1)",
    "split_part(s, 'a', -1)",
    "split_part(s, ',', 3)",
    "left(s, 2)",
    "right(s, 2)",
    "ltrim(s)",
    "rtrim(s)",
    "concat(s, x)",
    "s || t",
    # implicit casts in comparisons
    "i = '1'",
    "'10' > i",
    "x >= '1.5'",
    "p = '2.50'",
    "p > '1.54'",
    "d >= '2024-1-31'",
    "d = '2024-02-29'",
    "t > '2024-01-01 00:00:00'",
    "b = 'true'",
    "i IN ('1', 7)",
    "i = p",
    "i < x",
    "p = x",
    "d BETWEEN '2024-01-01' AND '2024-12-31'",
    "TRY_CAST(n AS INT) > i",
]
FAILING = [  # (expression, the row's column values): Spark's ANSI mode fails, and so does the view
    ("CAST(n AS INT)", {"n": "abc"}),
    ("CAST(n AS INT)", {"n": "1.5"}),
    ("CAST(n AS BIGINT)", {"n": "99999999999999999999"}),
    ("CAST(i AS TINYINT)", {"i": 300}),
    ("CAST(x AS INT)", {"x": 1e20}),
    ("CAST(p AS DECIMAL(3,1))", {"p": D("999.99")}),
    ("CAST(x AS DECIMAL(6,2))", {"x": 12345.678}),
    ("CAST(ds AS DATE)", {"ds": "2024/01/05"}),
    ("CAST(ds AS DATE)", {"ds": "2024-02-30"}),
    ("to_date(ds)", {"ds": "x"}),
    ("to_date(ds, 'yyyy-MM-dd')", {"ds": "2024-1-5"}),
    ("CAST(n AS BOOLEAN)", {"n": "maybe"}),
    ("d > ds", {"d": datetime.date(2024, 1, 1), "ds": "soon"}),
    ("i = n", {"i": 1, "n": "one"}),
]


def _view_type(spark_type) -> str:
    name = spark_type.simpleString()
    ints = ("bigint", "int", "smallint", "tinyint")
    return "int" if name in ints else "float" if name in ("double", "float") else "bool" if name == "boolean" else name


def _plain(v):
    """A value as PySpark collects it: a timestamp as naive local time."""
    if isinstance(v, datetime.datetime) and v.tzinfo is not None:
        return v.astimezone().replace(tzinfo=None)
    return v


def _equal(got, want) -> bool:
    if isinstance(want, float) or isinstance(got, float):
        if got is None or want is None:
            return got is want
        return math.isclose(float(got), want, rel_tol=1e-9, abs_tol=1e-12) or (math.isnan(got) and math.isnan(want))
    return got == want and (got is None or type(got) is type(want) or {type(got), type(want)} <= {int, bool})


def _compiled(text: str, types: dict[str, str]):
    """What a view's stage evaluates: the expression with decimal results rounded and casts named."""
    from cbp.views.exprs import infer, parse_expr, with_decimal_types

    node = parse_expr(text)
    return infer(node, types), parse_expr(with_decimal_types(node, types, "v").sql("spark"))


@pytest.mark.usefixtures("few_partitions")
def test_casts_dates_and_functions_type_and_evaluate_as_spark_does(spark):
    """Each expression's type (as cbp types a view's column) and its value on each row, against Spark
    SQL's over the same rows."""
    from cbp.views.exprs import ev
    from cbp.views.vtypes import conform

    _table(spark, "casts_t", SCHEMA, ROWS)
    try:
        cols = ", ".join(f"{e} AS e{i}" for i, e in enumerate(EXPRESSIONS))
        df = spark.sql(f"SELECT {', '.join(TYPES)}, {cols} FROM casts_t")
        want_types = [_view_type(f.dataType) for f in df.schema.fields[len(TYPES) :]]
        compiled = [_compiled(e, TYPES) for e in EXPRESSIONS]
        assert [t for t, _ in compiled] == want_types
        by_i = {r["i"]: r for r in ROWS}
        for row in df.collect():
            env = by_i[row["i"]]
            for text, (t, node), want in zip(EXPRESSIONS, compiled, list(row)[len(TYPES) :], strict=True):
                got = _plain(conform(ev(node, env), t, "v"))  # a view's column is conformed to its type
                assert _equal(got, want), (text, env, got, want)
    finally:
        spark.catalog.dropTempView("casts_t")


@pytest.mark.parametrize("text,values", FAILING, ids=[f"{i}-{e}" for i, (e, _) in enumerate(FAILING)])
@pytest.mark.usefixtures("few_partitions")
def test_a_value_ansi_cannot_convert_fails_spark_and_the_view(spark, text, values):
    """Spark's ANSI mode fails the query; the view's evaluation raises ``view-cast`` naming the view and
    the row; TRY_CAST (where it applies) gives NULL in both."""
    from cbp.views.exprs import ev

    row = {k: None for k in TYPES} | values
    _table(spark, "bad_t", SCHEMA, [row])
    try:
        with pytest.raises(Exception, match="CAST_INVALID_INPUT|CAST_OVERFLOW|OUT_OF_RANGE|CANNOT_PARSE"):
            spark.sql(f"SELECT {text} AS v FROM bad_t").collect()
        _, node = _compiled(text, TYPES)
        with pytest.raises(cbp.CbpError) as e:
            ev(node, row)
        assert e.value.code == "view-cast" and "view 'v'" in str(e.value) and "the row: " in str(e.value)
        if text.startswith("CAST("):
            safe = "TRY_" + text
            assert spark.sql(f"SELECT {safe} AS v FROM bad_t").collect()[0][0] is None
            assert ev(_compiled(safe, TYPES)[1], row) is None
    finally:
        spark.catalog.dropTempView("bad_t")
