"""Narrow ints and floats in views, in Spark's widths (issue 48, item 2; cbp/views/intwidth.py): a Delta
source's ``int``/``smallint``/``tinyint``/``float`` column is the flow's ``int32``/``int16``/``int8``/
``float32`` (read from the table, no ``schema:``), a view's narrow column (``CAST(x AS INT)``, ``year(d)``)
is one for the views that read it, and arithmetic on them is computed as Spark computes it: wrapped in
non-ANSI mode, ``view-overflow`` in ANSI mode (naming the view and the row, nothing of the epoch
committed), 32-bit floats rounded after each operation. Each view against Spark SQL over the table's
current rows after inserts, updates and deletes (delta-rs writes the table); a home whose flow was
recorded as a 64-bit ``int`` upgrades to the width."""

from __future__ import annotations

import datetime
import math

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from test_sql_ansi import non_ansi
from test_sql_views import _expand, few_partitions  # noqa: F401 (few_partitions: a fixture)

import cbp
from cbp.errors import UsageError, UserCodeError
from cbp.spec.schema import RecordSchema, misfit, narrows, parse_type

CDF = {"delta.enableChangeDataFeed": "true"}
SPARK_SCHEMA = "k INT, x BIGINT, a INT, b SMALLINT, c TINYINT, f FLOAT, d DATE, g STRING"
ARROW = pa.schema(
    [
        ("k", pa.int32()),
        ("x", pa.int64()),
        ("a", pa.int32()),
        ("b", pa.int16()),
        ("c", pa.int8()),
        ("f", pa.float32()),
        ("d", pa.date32()),
        ("g", pa.string()),
    ]
)
#: Spark's column types as a view's flow declares them.
WIDTH_OF = {"int": "int32", "smallint": "int16", "tinyint": "int8", "bigint": "int", "float": "float32"}
WIDTH_OF |= {"double": "float", "date": "date", "string": "string"}
VIEWS = {  # in dependency order: n is read by r
    "w": "SELECT k, a + a AS aa, a * 3 + 1 AS a3, b * b AS bb, c + c AS cc, -c AS nc, abs(a) AS ab, a % 7 AS am, "
    "a + x AS ax, f * f AS ff, f + a AS fa, f - 0.1D AS fd, f / 3 AS fq, c * f AS cf FROM t",
    "agg": "SELECT g, sum(a) AS sa, sum(b) AS sb, avg(c) AS ac, min(c) AS mc, max(a) AS ma, count(*) AS n, "
    "sum(f) AS sf, max(f) AS mf, max(b) * 2 AS mb FROM t GROUP BY g",
    "n": "SELECT k, CAST(x AS INT) AS ci, year(d) AS y, length(g) AS len, CAST(x AS FLOAT) AS xf, b FROM t",
    "r": "SELECT k, ci + ci AS c2, y * 1000000 AS y6, len * 1000000000 AS l9, xf * xf AS x2, b * b AS b2 FROM n",
}
ANSI_VIEWS = {v: sql for v, sql in VIEWS.items() if v != "agg"}
DAY = datetime.date(2024, 5, 1)


def _rows(*rows: tuple) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(ARROW.names, r, strict=True)) for r in rows], schema=ARROW)


def _yaml(tmp_path, src: str, views: dict[str, str], schema: str = "") -> str:
    path = tmp_path / "narrow.yaml"
    body = "\n".join(f"  {n}: {sql}" for n, sql in views.items())
    path.write_text(
        f'pipeline: narrow\nflows:\n  t: {{external: true, source: {{delta: "{src}"}}{schema}}}\nviews:\n{body}\n'
    )
    return str(path)


def _spark_views(spark, src: str, views: dict[str, str]) -> None:
    """Temp views ``t`` (the table's current rows, in Spark's types) and ``views`` over it."""
    rows = [tuple(r.values()) for r in DeltaTable(src).to_pyarrow_table().to_pylist()]
    spark.createDataFrame(rows, SPARK_SCHEMA).createOrReplaceTempView("t")
    for name, sql in views.items():
        spark.sql(sql).createOrReplaceTempView(name)


def _same(got, want, ftype: str) -> bool:
    if got is None or want is None:
        return got is want
    if ftype == "float":  # a double: Spark sums in its own order
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    return got == want and type(got) is type(want)  # a float32 exactly (its 32-bit rounding), ints exactly


def _check(spark, p, src: str, views: dict[str, str]) -> None:
    """Each view's consolidated rows and column types equal Spark SQL's over the table's current rows."""
    _spark_views(spark, src, views)
    for view in views:
        df = spark.sql(f"SELECT * FROM {view}")
        fields = p.spec.flows[view].schema.fields
        assert {n: str(ft).rstrip("?") for n, ft in fields.items()} == {
            f.name: WIDTH_OF[f.dataType.simpleString()] for f in df.schema.fields
        }, view
        kinds = [str(ft).rstrip("?") for ft in fields.values()]
        want = sorted((tuple(r) for r in df.collect()), key=repr)
        got = sorted((tuple(r[c] for c in fields) for r in _expand(p.output(view, consolidated=True))), key=repr)
        ok = len(got) == len(want) and all(
            _same(a, b, k) for g, w in zip(got, want) for a, b, k in zip(g, w, kinds, strict=True)
        )
        assert ok, f"view {view}:\n cbp   {got}\n spark {want}"


def _drop(spark, views: dict[str, str]) -> None:
    for name in [*views, "t"]:
        spark.catalog.dropTempView(name)


def test_narrow_types_parse_widen_narrow_and_bound_their_values():
    """The types' names, their stored form (that of ``int``/``float``), what widens and narrows, and the
    values a narrow field takes (a float32 rounded to 32 bits)."""
    assert [str(parse_type(t)) for t in ("int32", "int16?", "list<int8?>", "float32")] == [
        "int32",
        "int16?",
        "list<int8?>",
        "float32",
    ]
    assert parse_type("int32").arrow == pa.int64() and parse_type("float32").spark == "DOUBLE"
    assert parse_type("int").accepts(parse_type("int16")) and not parse_type("int16").accepts(parse_type("int32"))
    assert parse_type("float").accepts(parse_type("float32")) and not parse_type("float32").accepts(parse_type("int"))
    assert narrows(parse_type("int?"), parse_type("int32?")) and not narrows(parse_type("int?"), parse_type("int32"))
    s = RecordSchema.parse({"a": "int8", "f": "float32?"})
    assert s.validate({"a": -128, "f": 0.1}) == {"a": -128, "f": 0.10000000149011612}
    with pytest.raises(Exception, match="less than or equal to 127"):
        s.validate({"a": 128})
    assert (
        misfit(s, pa.table({"a": [1, 300], "f": [0.5, None]}))
        == "field 'a' holds 300, which does not fit its type int8"
    )
    assert misfit(s, pa.table({"a": [1], "f": [0.1]})) is not None  # 0.1 is not a float32
    assert misfit(s, pa.table({"a": [1], "f": [0.10000000149011612]})) is None
    from cbp.spec.arrowrecords import ArrowRecordError, conform

    stored = conform(s, pa.table({"a": pa.array([1, -2], pa.int64()), "f": pa.array([0.1, None], pa.float64())}))
    assert stored.to_pylist() == [{"a": 1, "f": 0.10000000149011612}, {"a": -2, "f": None}]  # an Arrow feed
    for bad in ({"a": [1, 300]}, {"a": [1, 2], "f": [0.5, 1e39]}):
        with pytest.raises(ArrowRecordError) as e:
            conform(s, pa.table(bad))
        assert e.value.row == 1, e.value


@pytest.mark.usefixtures("few_partitions")
def test_narrow_columns_wrap_as_spark_without_ansi(spark, tmp_path):
    """ANSI off: a Delta table's narrow columns, and a view's narrow columns read by another view, wrap
    in their width (``a + a`` past 32 bits, ``c + c`` past 8, ``b * b`` past 16) and 32-bit floats round as
    Spark's; equal to Spark SQL before and after an insert, an update and a delete."""
    src = str(tmp_path / "src")
    write_deltalake(
        src,
        _rows(
            (1, 5, 7, 3, 4, 0.1, DAY, "p"),
            (2, 2**31 - 1, 2**31 - 1, 32767, 127, 3.1e18, DAY, "q"),
            (3, -(2**31), -(2**31), -32768, -128, -1.5, None, None),
        ),
        configuration=CDF,
    )
    try:
        with non_ansi(spark):
            p = cbp.Pipeline(_yaml(tmp_path, src, VIEWS), str(tmp_path / "home"), spark=spark)
            assert str(p.spec.flows["t"].schema.fields["b"]) == "int16?"
            p.run()
            _check(spark, p, src, VIEWS)
            write_deltalake(src, _rows((4, 70000, 1 << 30, 200, 100, 1.0e-3, DAY, "pqr")), mode="append")
            DeltaTable(src).update(updates={"a": "a - 8", "c": "c - 1", "f": "f * 3"}, predicate="k = 1")
            DeltaTable(src).delete("k = 2")  # three versions, one epoch (each epoch costs a Spark job per view)
            p.run()
            _check(spark, p, src, VIEWS)
    finally:
        _drop(spark, VIEWS)


#: Arithmetic of a Delta table's narrow columns, each past its width on the row of OVERFLOWS.
OVERFLOWING = ["a + a", "a * 3 + 1", "b * b", "c + c", "-c", "a * 2", "c * c - b"]
OVERFLOWS = (5, 1, 2**30, 200, -128, 0.5, DAY, "p")


def _evaluated(text: str, row: dict) -> list:
    """``text`` over the narrow columns of ``t`` as a view evaluates it (by ``ev`` and compiled), ANSI:
    its value, or the code of its error."""
    from cbp.views.compiled import node_fn
    from cbp.views.exprs import ev, parse_expr, with_decimal_types
    from cbp.views.mode import semantics

    types = {"a": "int32", "b": "int16", "c": "int8", "k": "int32"}
    out = []
    with semantics(True):
        node = parse_expr(with_decimal_types(parse_expr(text), types, "w").sql("spark"))
        for f in (lambda: ev(node, row), lambda: node_fn(node)(row)):
            try:
                out.append(f())
            except UserCodeError as e:
                out.append(e.code)
    return out


@pytest.mark.usefixtures("few_partitions")
def test_narrow_overflow_fails_the_epoch_naming_the_view_and_row(spark, tmp_path):
    """ANSI: the views equal Spark SQL (in ANSI mode an int and a float make a double) after an insert,
    an update and a delete; a row whose ``CAST(x AS INT)`` column, doubled in the view ``r`` that reads
    view ``n``, passes 32 bits fails the epoch with ``view-overflow`` naming ``r`` and the row (Spark's
    query fails too), and nothing of ``r``'s epoch is committed; arithmetic of the table's narrow
    columns past their widths is ``view-overflow`` where Spark's query fails. (The GROUP BY of the non-ANSI
    test is left out: its types are the same in both modes.)"""
    src = str(tmp_path / "src")
    write_deltalake(src, _rows((1, 5, 7, 3, 4, 0.1, DAY, "p"), (2, 9, -7, 100, -5, 2.5, DAY, "q")), configuration=CDF)
    try:
        p = cbp.Pipeline(_yaml(tmp_path, src, ANSI_VIEWS), str(tmp_path / "home"), spark=spark)
        p.run()
        _check(spark, p, src, ANSI_VIEWS)
        write_deltalake(src, _rows((3, -70000, 2**29, -2, 60, 1.0e-3, DAY, "pq")), mode="append")
        DeltaTable(src).update(updates={"a": "a - 8", "f": "f * 3"}, predicate="k = 1")
        DeltaTable(src).delete("k = 2")
        p.run()
        _check(spark, p, src, ANSI_VIEWS)
        before = p.output("r", consolidated=True)
        write_deltalake(src, _rows((4, 2**30, 1, 1, 1, 1.0, DAY, "p")), mode="append")
        with pytest.raises(UserCodeError) as e:
            p.run()
        assert e.value.code == "view-overflow" and "view 'r'" in str(e.value) and "'k': 4" in str(e.value)
        assert p.output("r", consolidated=True) == before
        _spark_views(spark, src, ANSI_VIEWS)
        with pytest.raises(Exception, match="OVERFLOW"):
            spark.sql("SELECT * FROM r").collect()
        row = dict(zip(ARROW.names, OVERFLOWS, strict=True))
        spark.createDataFrame([OVERFLOWS], SPARK_SCHEMA).createOrReplaceTempView("t")
        for text in OVERFLOWING:
            assert _evaluated(text, row) == ["view-overflow", "view-overflow"], text
            with pytest.raises(Exception, match="OVERFLOW"):
                spark.sql(f"SELECT {text} FROM t").collect()
    finally:
        _drop(spark, ANSI_VIEWS)


@pytest.mark.usefixtures("few_partitions")
def test_a_home_that_recorded_64_bit_ints_upgrades_to_the_widths(spark, tmp_path):
    """A home whose flow ``t`` was recorded with 64-bit ``int`` columns (what cbp before the widths read
    from the table; here its YAML's ``schema:``): once the table's widths are read, ``cbp run`` refuses
    (``pipeline-changed``), ``cbp plan`` lists the fields narrowed and the views rebuilt, ``cbp upgrade``
    applies them; the views then compute in 32 bits, as Spark."""
    src = str(tmp_path / "src")
    write_deltalake(
        src, _rows((1, 5, 7, 3, 4, 0.5, DAY, "p"), (2, 9, 2**31 - 1, 300, -5, 2.5, DAY, "q")), configuration=CDF
    )
    views = {"w": VIEWS["w"]}
    old = ", schema: {k: 'int?', x: 'int?', a: 'int?', b: 'int?', c: 'int?', f: 'float?', d: 'date?', g: 'string?'}"
    home = str(tmp_path / "home")
    try:
        with non_ansi(spark):
            p = cbp.Pipeline(_yaml(tmp_path, src, views, old), home, spark=spark)
            p.run()
            assert {r["k"]: r["aa"] for r in p.output("w", consolidated=True)} == {1: 14, 2: 2**32 - 2}  # 64 bits
            p = cbp.Pipeline(_yaml(tmp_path, src, views), home, spark=spark)
            with pytest.raises(UsageError) as e:
                p.run()
            assert e.value.code == "pipeline-changed"
            lines = "\n".join(p.plan().lines())
            assert "field 'a' int? -> int32?" in lines and "field 'f' float? -> float32?" in lines, lines
            assert {c.name: c.kind for c in p.plan().changes if c.name == "w"} == {"w": "rebuild-view"}, lines
            p.upgrade()
            p.run()
            _check(spark, p, src, views)
            write_deltalake(src, _rows((3, 1, 2**31 - 2, 1, 1, 1.0, DAY, "p")), mode="append")
            p.run()
            _check(spark, p, src, views)
    finally:
        _drop(spark, views)
