"""Column types beyond JSON's (issue 48): ``date``, ``timestamp`` (UTC, microseconds),
``decimal(P,S)``, ``binary``, and 8/16/32-bit ints read as ``int`` — in schemas, JSON lines,
Arrow/Parquet/pandas feeds, state, outputs, ``cbp sql`` and Delta sources without ``schema:``."""

from __future__ import annotations

import datetime
import decimal
import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import cbp
from cbp.commands._terminal import json_line
from cbp.errors import InputError, SpecError, UsageError
from cbp.spec.arrowrecords import ArrowRecordError, conform
from cbp.spec.schema import RecordError, RecordSchema, parse_type

D = decimal.Decimal
UTC = datetime.timezone.utc

YAML = """
pipeline: typed
flows:
  sales:
    external: true
    schema: {shop: string, day: date, at: timestamp, price: "decimal(12,2)", tag: "binary?"}
  priced: {schema: {shop: string, day: date, price: "decimal(12,2)", tag: "binary?"}}
  rates: {external: true, schema: {since: date, rate: "decimal(6,4)"}}
stages:
  agg:
    translator: MOD:agg
    signed: true
    inputs: [{flow: sales, route_by: shop}]
    outputs: [priced]
    state:
      schema: {shop: string, total: "decimal(20,2)", n: int, latest: "timestamp?", ats: "list<timestamp>"}
  perday:
    translator: MOD:perday
    signed: true
    runnable: any
    inputs: [{flow: priced, route_by: day}, {flow: rates, route_by: ALL}]
    state: {schema: {day: date, n: int, rate: "decimal(6,4)?"}}
"""
_PERDAY = """
import datetime
import decimal

def perday(key, state, priced, rates, out):  # routed by a date: the key is its JSON form, 'YYYY-MM-DD'
    prev = next(state, None)
    n = (prev["n"] if prev else 0) + sum(r["_diff"] for r in priced)
    rate = max((r["rate"] for r in rates if r["since"] <= datetime.date.fromisoformat(key)), default=None)
    if n:
        out.state.write({"day": datetime.date.fromisoformat(key), "n": n, "rate": rate or (prev or {}).get("rate")})
"""
MODULE = (
    _PERDAY
    + """
def agg(key, state, sales, out):
    prev = next(state, None)
    total = prev["total"] if prev else decimal.Decimal(0)
    n = prev["n"] if prev else 0
    ats = list(prev["ats"]) if prev else []
    for r in sales:
        d = r["_diff"]
        total += r["price"] * d
        n += d
        for _ in range(abs(d)):
            ats.append(r["at"]) if d > 0 else ats.remove(r["at"])
        out.priced.write({"shop": key, "day": r["day"], "price": r["price"], "tag": r["tag"], "_diff": d})
    if n:
        out.state.write({"shop": key, "total": total, "n": n, "latest": max(ats), "ats": sorted(ats)})
"""
)

SALES = [
    '{"shop": "a", "day": "2024-05-01", "at": "2024-05-01T10:00:00.000001Z", "price": 19.99, "tag": "aGk="}',
    '{"shop": "a", "day": "2024-05-02", "at": "2024-05-02T09:30:00+02:00", "price": "0.01"}',
    '{"shop": "b", "day": "2024-05-01", "at": "2024-05-01T23:59:59.999999-05:00", "price": 1234567890.5}',
    '{"shop": "b", "day": "2024-05-03", "at": "2024-05-03T00:00:00Z", "price": 3}',
]
RETRACT = '{"shop": "a", "day": "2024-05-02", "at": "2024-05-02T07:30:00Z", "price": "0.01", "_diff": -1}'


@pytest.mark.parametrize(
    "text, scalar",
    [
        ("date", "date"),
        ("timestamp?", "timestamp"),
        ("decimal( 12 , 2 )", "decimal(12,2)"),
        ("list<binary?>", "binary"),
    ],
)
def test_types_parse(text, scalar):
    assert parse_type(text).scalar == scalar


@pytest.mark.parametrize("text", ["decimal(0,0)", "decimal(39,2)", "decimal(5,6)", "decimal", "decimal(5)", "datetime"])
def test_bad_types_are_refused(text, make_pipeline):
    with pytest.raises(ValueError):
        parse_type(text)
    path = make_pipeline(YAML.replace('"binary?"', f'"{text}"', 1), MODULE)
    with pytest.raises(SpecError) as e:
        cbp.load(path)
    assert e.value.code == "bad-type"


GOOD = {
    "date": [datetime.date(2024, 2, 29)],
    "timestamp": [datetime.datetime(2024, 1, 1, 12, tzinfo=datetime.timezone(datetime.timedelta(hours=2)))],
    "decimal(5,2)": [D("123.45"), D("-0.5"), 7, D("1.500")],
    "binary": [b"\x00\xff", bytearray(b"x")],
}
BAD = {
    "date": [datetime.datetime(2024, 1, 1, tzinfo=UTC), "2024-01-01", 1],
    "timestamp": [datetime.datetime(2024, 1, 1), datetime.date(2024, 1, 1), "2024-01-01T00:00:00Z", 0],
    "decimal(5,2)": [D("1234.5"), D("0.001"), D("NaN"), D("Infinity"), 1.5, "1.5", True],
    "binary": ["aGk=", 1, [1]],
}


@pytest.mark.parametrize("scalar", list(GOOD))
def test_python_values(scalar):
    s = RecordSchema.parse({"v": scalar})
    for v in GOOD[scalar]:
        out = s.validate({"v": v})["v"]
        assert out == v
    ts = s.validate({"v": GOOD["timestamp"][0]})["v"] if scalar == "timestamp" else None
    assert ts is None or (ts.tzinfo == UTC and ts.hour == 10)
    for v in BAD[scalar]:
        with pytest.raises(RecordError) as e:
            s.validate({"v": v})
        assert e.value.code == "bad-record" and e.value.field == "v"


@pytest.mark.parametrize(
    "scalar, text",
    [
        ("date", '"2024-1-1"'),
        ("date", '"2024-02-30"'),
        ("timestamp", '"2024-01-01T00:00:00"'),  # no zone: refused, not guessed
        ("timestamp", '"2024-01-01T00:00:00.1234567Z"'),  # finer than microseconds
        ("decimal(5,2)", "1.234"),
        ("decimal(5,2)", "1e10"),
        ("decimal(5,2)", '"abc"'),
        ("binary", '"not base64!"'),
    ],
)
def test_bad_json_forms(scalar, text):
    s = RecordSchema.parse({"v": scalar})
    with pytest.raises(RecordError) as e:
        s.validate_json_line('{"v": ' + text + "}")
    assert e.value.code == "bad-record" and e.value.field == "v"


def test_decimal_numbers_are_read_exactly():
    s = RecordSchema.parse({"v": "decimal(38,20)", "f": "float", "xs": "list<decimal(30,20)>"})
    rec = s.validate_json_line('{"v": 0.10000000000000000555, "f": 0.1, "xs": [1.00000000000000000001]}')
    assert rec == {"v": D("0.10000000000000000555"), "f": 0.1, "xs": [D("1.00000000000000000001")]}
    assert type(rec["f"]) is float


def _expected(lines):
    """The consolidated sales and each shop's total, count and latest timestamp, from scratch (pandas)."""
    recs = [json.loads(x, parse_float=D) for x in lines]
    df = pd.DataFrame(recs)
    df["_diff"] = df.get("_diff", pd.Series(dtype=object)).fillna(1).astype(int)
    df["price"] = df["price"].map(D)
    df["at"] = pd.to_datetime(df["at"], utc=True, format="ISO8601")
    df["signed"] = df["price"] * df["_diff"]
    keep = df.groupby(["shop", "day", "at", "price"], as_index=False)["_diff"].sum()
    keep = keep[keep["_diff"] != 0]
    g = df.groupby("shop").agg(total=("signed", "sum"), n=("_diff", "sum")).reset_index()
    g["latest"] = g["shop"].map(keep.groupby("shop")["at"].max())
    return {
        r.shop: {"total": D(r.total).quantize(D("0.01")), "n": r.n, "latest": r.latest.to_pydatetime()}
        for r in g.itertuples()
        if r.n
    }


def test_json_lines_through_a_signed_translator(spark, make_pipeline, tmp_path):
    path = make_pipeline(YAML, MODULE)
    p = cbp.load(path, home=str(tmp_path / "home"))
    (tmp_path / "a.jsonl").write_text("\n".join(SALES) + "\n")
    p.feed("sales", str(tmp_path / "a.jsonl"))
    p.feed("rates", [{"since": datetime.date(2024, 5, 2), "rate": D("1.2345")}])  # broadcast: crosses as JSON
    p.run()
    (tmp_path / "b.jsonl").write_text(RETRACT + "\n")
    p.feed("sales", str(tmp_path / "b.jsonl"))
    p.run()
    state = {r["shop"]: r for r in p.state("agg")}
    want = _expected([*SALES, RETRACT])
    assert {k: {f: state[k][f] for f in ("total", "n", "latest")} for k in state} == want
    assert type(state["a"]["total"]) is D and state["a"]["latest"].utcoffset() == datetime.timedelta(0)
    priced = p.output("priced", consolidated=True)
    assert sorted((r["shop"], r["day"], r["price"], r["tag"]) for r in priced) == [
        ("a", datetime.date(2024, 5, 1), D("19.99"), b"hi"),
        ("b", datetime.date(2024, 5, 1), D("1234567890.50"), None),
        ("b", datetime.date(2024, 5, 3), D("3.00"), None),
    ]
    # printed as cbp output / cbp state print them, read back by a feed: the same records
    for flow, recs in (("priced", priced), ("state", list(p.state("agg")))):
        schema = p.spec.flows["priced"].schema if flow == "priced" else p.spec.stages["agg"].state_schema
        assert [schema.validate_json_line(json_line(r)) for r in recs] == recs
    assert '"tag": "aGk="' in "".join(map(json_line, priced))
    per_day = pd.DataFrame(priced).groupby("day").size()
    assert sorted((r["day"], r["n"]) for r in p.state("perday")) == sorted(per_day.items())
    assert {r["day"].day: r["rate"] for r in p.state("perday")} == {1: None, 3: D("1.2345")}
    # cbp sql: the types as Spark's (decimal(20,2) stays DECIMAL(20,2); sum widens its precision by 10)
    df = p.sql(
        "SELECT sum(total) AS s, avg(total) AS a, date_format(max(latest), 'yyyy-MM-dd HH:mm:ss.SSSSSS') AS m FROM agg"
    )  # the session's zone: UTC
    assert [df.schema[c].dataType.simpleString() for c in "sa"] == ["decimal(30,2)", "decimal(24,6)"]
    assert dict(p.sql("SELECT * FROM agg").dtypes)["total"] == "decimal(20,2)"
    assert dict(p.sql("SELECT * FROM priced").dtypes) == {
        "shop": "string",
        "day": "date",
        "price": "decimal(12,2)",
        "tag": "binary",
        "_diff": "bigint",
    }
    (row,) = df.collect()
    assert row.s == sum(w["total"] for w in want.values()) and type(row.s) is D
    assert row.m == max(w["latest"] for w in want.values()).strftime("%Y-%m-%d %H:%M:%S.%f")


def test_parquet_feed_with_small_ints_dates_and_decimals(tmp_path):
    s = RecordSchema.parse({"n": "int", "u": "int", "d": "date?", "p": "decimal(6,2)", "t": "timestamp?"})
    table = pa.table(
        {
            "n": pa.array([1, -2], pa.int16()),
            "u": pa.array([3, 4], pa.uint32()),
            "d": pa.array([datetime.date(2024, 1, 1), None], pa.date32()),
            "p": pa.array([D("1.5"), D("-2")], pa.decimal128(4, 1)),
            "t": pa.array([1_000, 2_500], pa.timestamp("ms", tz="America/New_York")),
        }
    )
    pq.write_table(table, tmp_path / "f.parquet")
    out = conform(s, pq.read_table(tmp_path / "f.parquet"))
    assert out.schema == s.arrow
    assert out.column("p").to_pylist() == [D("1.50"), D("-2.00")]
    assert out.column("t").to_pylist()[1] == datetime.datetime(1970, 1, 1, 0, 0, 2, 500000, tzinfo=UTC)
    with pytest.raises(ArrowRecordError) as e:
        conform(s, table.set_column(4, "t", pa.array([0, 1], pa.timestamp("us"))))
    assert e.value.code == "bad-record" and e.value.field == "t"
    with pytest.raises(ArrowRecordError) as e:
        conform(s, table.set_column(3, "p", pa.array([D("1.5"), D("0.125")], pa.decimal128(4, 3))))
    assert (e.value.field, e.value.row) == ("p", 1)


def test_pandas_feed(make_pipeline, tmp_path):
    p = cbp.load(make_pipeline(YAML, MODULE), home=str(tmp_path / "home"))
    df = pd.DataFrame(
        {
            "shop": ["a"],
            "day": [datetime.date(2024, 5, 1)],
            "at": pd.to_datetime(["2024-05-01T10:00:00.000001"]).tz_localize("Europe/Paris"),
            "price": [D("2.5")],
        }
    )
    p.feed("sales", df)
    (rec,) = p.output("sales")
    assert rec["at"] == datetime.datetime(2024, 5, 1, 8, 0, 0, 1, tzinfo=UTC) and rec["price"] == D("2.50")
    with pytest.raises(InputError) as e:
        p.feed("sales", df.assign(at=pd.to_datetime(["2024-05-01T10:00:00"])))
    assert e.value.code == "bad-record" and "'at'" in str(e.value)


SOURCE_YAML = """
pipeline: typedsrc
flows:
  orders: {external: true, source: {delta: "SRC"}}
stages:
  totals:
    translator: MOD:totals
    signed: true
    inputs: [{flow: orders, route_by: shop}]
    state: {schema: {shop: string, total: "decimal(20,2)"}}
"""
SOURCE_MODULE = (
    _PERDAY
    + """
def totals(shop, state, orders, out):
    prev = next(state, None)
    total = (prev["total"] if prev else decimal.Decimal(0)) + sum(o["price"] * o["_diff"] for o in orders)
    out.state.write({"shop": shop, "total": total})
"""
)
CDF = {"delta.enableChangeDataFeed": "true"}


def _orders(prices):
    return pa.table(
        {
            "id": pa.array(range(len(prices)), pa.int32()),
            "shop": pa.array(["a", "b"] * (len(prices) // 2) + ["a"] * (len(prices) % 2)),
            "day": pa.array([datetime.date(2024, 5, 1)] * len(prices), pa.date32()),
            "at": pa.array([1_000_000 * i for i in range(len(prices))], pa.timestamp("us", tz="UTC")),
            "price": pa.array([D(x) for x in prices], pa.decimal128(9, 2)),
            "blob": pa.array([b"x"] * len(prices), pa.binary()),
        }
    )


def test_delta_source_without_schema(spark, make_pipeline, tmp_path):
    from deltalake import write_deltalake

    src = str(tmp_path / "src")
    write_deltalake(src, _orders(["1.10", "2.25", "3.05"]), configuration=CDF)
    p = cbp.load(make_pipeline(SOURCE_YAML.replace("SRC", src), SOURCE_MODULE), home=str(tmp_path / "home"))
    assert {n: str(t) for n, t in p.spec.flows["orders"].schema.fields.items()} == {
        "id": "int32?",  # a Delta int (tests/test_sql_intwidth.py)
        "shop": "string?",
        "day": "date?",
        "at": "timestamp?",
        "price": "decimal(9,2)?",
        "blob": "binary?",
    }
    p.sync()
    p.run()
    write_deltalake(src, _orders(["10.01"]), mode="append")
    p.sync()
    p.run()
    want = {"a": D("14.16"), "b": D("2.25")}
    assert {r["shop"]: r["total"] for r in p.state("totals")} == want
    # the table's schema changes: the flow's (read at load) changes with it, a pipeline change that
    # 'cbp upgrade' applies; until then a sync is refused and lands nothing
    write_deltalake(src, _orders(["5"]).append_column("note", pa.array(["n"])), mode="append", schema_mode="merge")
    p = cbp.load(p.spec.path, home=str(tmp_path / "home"))
    with pytest.raises(UsageError) as e:
        p.sync()
    assert e.value.code == "pipeline-changed" and "'note'" in str(e.value)
    assert len(p.output("orders")) == 4 and {r["shop"]: r["total"] for r in p.state("totals")} == want


def test_unsupported_source_column_is_source_schema(make_pipeline, tmp_path):
    from deltalake import write_deltalake

    src = str(tmp_path / "src")
    write_deltalake(src, _orders(["1"]).append_column("st", pa.array([{"x": 1}])), configuration=CDF)
    with pytest.raises(SpecError) as e:
        cbp.load(make_pipeline(SOURCE_YAML.replace("SRC", src), SOURCE_MODULE), home=str(tmp_path / "home"))
    assert e.value.code == "source-schema" and "'st'" in str(e.value)


def test_a_flow_without_schema_or_source_is_refused(make_pipeline, tmp_path):
    yaml = SOURCE_YAML.replace('source: {delta: "SRC"}', "schema: null")
    with pytest.raises(SpecError) as e:
        cbp.load(make_pipeline(yaml.replace("schema: null", "description: x"), SOURCE_MODULE))
    assert e.value.code == "invalid-spec"


KEYED_YAML = """
pipeline: typedkeyed
flows:
  prices: {external: true, key: [id], sequence_by: at, schema: {id: int, at: timestamp, price: "decimal(6,2)"}}
stages:
  s:
    translator: MOD:f
    signed: true
    inputs: [{flow: prices, route_by: id}]
"""


def test_keyed_flow_sequenced_by_a_timestamp(make_pipeline, tmp_path):
    p = cbp.load(make_pipeline(KEYED_YAML, "def f(key, state, prices, out):\n    pass\n"), home=str(tmp_path / "h"))
    (tmp_path / "a.jsonl").write_text(
        '{"id": 1, "at": "2024-05-01T10:00:00Z", "price": "2.00"}\n'
        '{"id": 1, "at": "2024-05-01T12:00:00+02:00", "price": "1.00"}\n'  # 10:00Z too: a tie, fed later wins
        '{"id": 2, "at": "2024-05-01T09:00:00Z", "price": "5.50"}\n'
    )
    p.feed("prices", str(tmp_path / "a.jsonl"))
    p.feed("prices", [{"id": 2, "at": datetime.datetime(2024, 5, 1, 8, tzinfo=UTC), "price": D("9")}])  # older
    got = sorted((r["id"], r["price"]) for r in p.output("prices", consolidated=True))
    assert got == [(1, D("1.00")), (2, D("5.50"))]
    with pytest.raises(SpecError) as e:
        cbp.load(make_pipeline(KEYED_YAML.replace("key: [id]", "key: [at]"), "def f(key, state, prices, out): pass"))
    assert e.value.code == "bad-key"


def test_frame_by_a_typed_field_is_refused(make_pipeline):
    yaml = YAML.replace("{flow: sales, route_by: shop}", "{flow: sales, route_by: shop, frame_by: at}")
    with pytest.raises(SpecError) as e:
        cbp.load(make_pipeline(yaml, MODULE))
    assert e.value.code == "bad-frame-by"


def test_upgrade_adds_typed_fields_with_defaults(make_pipeline, tmp_path):
    """An older home (no typed field) gains a date and a decimal field with defaults: the plan
    records them as JSON, the stored records get them; a decimal widened (more digits) is cast."""
    yaml = KEYED_YAML.replace("key: [id], sequence_by: at, ", "")
    module = "def f(key, state, prices, out):\n    pass\n"
    home = str(tmp_path / "h")
    p = cbp.load(make_pipeline(yaml, module), home=home)
    p.feed("prices", [{"id": 1, "at": datetime.datetime(2024, 5, 1, tzinfo=UTC), "price": D("1")}])
    grown = yaml.replace(
        'price: "decimal(6,2)"}',
        'price: "decimal(8,3)", since: {type: date, default: "2024-01-01"}, '
        'fee: {type: "decimal(4,2)", default: "0.5"}}',
    )
    p = cbp.load(make_pipeline(grown, module), home=home)
    assert any("since" in line for line in p.plan().lines())
    p.upgrade()
    (rec,) = p.output("prices")
    assert (rec["since"], rec["fee"], str(rec["price"])) == (datetime.date(2024, 1, 1), D("0.50"), "1.000")


BATCH_YAML = """
pipeline: typedbatch
flows:
  sales: {external: true, schema: {shop: string, n: int, day: date, price: "decimal(12,2)"}}
stages:
  totals:
    translator: MOD:totals
    batch: true
    signed: true
    inputs: [{flow: sales, route_by: shop}]
    state: {schema: {shop: string, total: "decimal(20,2)", last: "date?"}}
"""
BATCH_MODULE = """
import decimal
import pyarrow as pa

def totals(keys, state, sales, out):  # Arrow tables in, Arrow tables out: the types as they are stored
    assert sales.schema.field("price").type == pa.decimal128(12, 2) and sales.schema.field("day").type == pa.date32()
    total = [decimal.Decimal(0)] * len(keys)
    last = [None] * len(keys)
    if state is not None:
        for pos, t, d in zip(state["_pos"].to_pylist(), state["total"].to_pylist(), state["last"].to_pylist()):
            total[pos], last[pos] = t, d
    for pos, p, n, d, day in zip(*(sales[c].to_pylist() for c in ("_pos", "price", "n", "_diff", "day"))):
        total[pos] += p * n * d
        last[pos] = max(x for x in (last[pos], day) if x is not None)
    return {"state": pa.table({"_key": keys, "shop": keys, "total": total, "last": last})}
"""


def test_parquet_feed_through_a_batch_translator(spark, make_pipeline, tmp_path):
    p = cbp.load(make_pipeline(BATCH_YAML, BATCH_MODULE), home=str(tmp_path / "home"))
    table = pa.table(
        {
            "shop": ["a", "b", "a"],
            "n": pa.array([2, 1, 3], pa.int16()),
            "day": pa.array([datetime.date(2024, 5, d) for d in (1, 2, 3)], pa.date32()),
            "price": pa.array([D("1.25"), D("10"), D("0.5")], pa.decimal128(5, 2)),
        }
    )
    pq.write_table(table, tmp_path / "s.parquet")
    p.feed("sales", str(tmp_path / "s.parquet"))
    p.run()
    df = table.to_pandas()
    df["amount"] = df["price"] * df["n"]
    want = {shop: (D(g["amount"].sum()).quantize(D("0.01")), g["day"].max()) for shop, g in df.groupby("shop")}
    assert {r["shop"]: (r["total"], r["last"]) for r in p.state("totals")} == want


def test_conform_of_a_chunked_table_names_the_row_as_one_array_does():
    """A table read from Parquet comes in chunks, which conform checks one by one without copying them
    into one array: the first bad value is still named by its row in the table, with the same message."""
    s = RecordSchema.parse({"url": "string", "n": "int32", "f": "float"})
    bad = pa.array([b"ok", b"\xff\xfe"], pa.binary()).view(pa.string())
    cases = [
        ({"url": bad, "n": [3, 4], "f": [1.0, 2.0]}, "url"),
        ({"url": ["c", "d"], "n": [3, 2**40], "f": [1.0, 2.0]}, "n"),
        ({"url": ["c", "d"], "n": [3, 4], "f": [1.0, float("nan")]}, "f"),
        ({"url": ["c", None], "n": [3, 4], "f": [1.0, 2.0]}, "url"),
    ]
    first = pa.record_batch({"url": ["a", "b"], "n": [1, 2], "f": [0.5, 1.5]})
    for second, field in cases:
        chunked = pa.Table.from_batches([first, pa.record_batch(second, schema=first.schema)])
        assert chunked.column(field).num_chunks == 2
        errors = []
        for t in (chunked, chunked.combine_chunks()):
            with pytest.raises(ArrowRecordError) as e:
                conform(s, t)
            errors.append((e.value.row, e.value.field, str(e.value)))
        assert errors[0] == errors[1] and errors[0][:2] == (3, field)
    good = pa.Table.from_batches([first, first])
    assert conform(s, good).to_pylist() == conform(s, good.combine_chunks()).to_pylist()
