"""Routing by a field with Arrow (``plain_envelopes``) gives the envelopes of the per-record path,
or declines a batch the per-record path must take; records cross as Arrow structs, unchanged."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from cbp.engine.task.routing import encode_key, envelope_schema, plain_envelopes
from cbp.spec.schema import RecordSchema

ALPHABET = ["a", "Z", "0", " ", "é", "字", "😀", "/", "?", "=", "&", "'", "\u2028", "\x7f", "<", "%"]
NEEDS_PYTHON = ['"', "\\", "\n", "\t", "\x00", "\x1f"]


SCHEMA = RecordSchema.parse({"url": "string", "n": "int", "ok": "bool", "note": "string?"})
ENV = envelope_schema(
    [RecordSchema.parse({"x": "int"}), RecordSchema.parse({"a": "float"}), RecordSchema.parse({"b": "string"}), SCHEMA]
)


def _env(fields: dict) -> pa.Schema:
    return envelope_schema([RecordSchema.parse(fields)])


def _slow(batch: pa.RecordBatch, field: str) -> tuple[list[str], list[dict]]:
    keys, recs = [], []
    for rec in batch.to_pylist():
        recs.append(json.loads(json.dumps(rec, ensure_ascii=False)))
        keys.append(encode_key(rec[field]))
    return keys, recs


@pytest.mark.parametrize("seed", range(5))
def test_arrow_routing_equals_the_per_record_path(seed):
    rng = random.Random(seed)
    n = 300
    word = lambda: "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))  # noqa: E731
    batch = pa.RecordBatch.from_pydict(
        {
            "url": [word() for _ in range(n)],
            "n": pa.array([rng.choice([None, 0, -1, 2**62, rng.randint(-999, 999)]) for _ in range(n)], pa.int64()),
            "ok": pa.array([rng.choice([None, True, False]) for _ in range(n)], pa.bool_()),
            "note": pa.array([rng.choice([None, word()]) for _ in range(n)], pa.string()),
        }
    )
    for field in ("url", "n"):
        env = plain_envelopes(
            3, field, batch.filter(pa.array([v is not None for v in batch.column(field).to_pylist()])), ENV
        )
        want = _slow(batch.filter(pa.array([v is not None for v in batch.column(field).to_pylist()])), field)
        assert env is not None and env.schema == ENV
        assert env.column("_key").to_pylist() == want[0]
        assert env.column("_i3").to_pylist() == want[1]
        assert [env.column(c).null_count for c in ("_i0", "_i1", "_i2", "_rec", "_r")] == [
            env.num_rows
        ] * 5  # _r: the key is hashed
        assert set(env.column("_flow").to_pylist()) == {3}


@pytest.mark.parametrize("bad", NEEDS_PYTHON)
def test_a_key_json_must_escape_sends_the_batch_down_the_per_record_path(bad):
    batch = pa.RecordBatch.from_pydict({"url": ["plain", f"x{bad}y"], "n": [1, 2]})
    assert plain_envelopes(0, "url", batch, _env({"url": "string", "n": "int"})) is None
    # other fields are not text any more: they cross as they are
    other = pa.RecordBatch.from_pydict(
        {"url": ["plain", "fine"], "note": [None, f"x{bad}y"], "x": [1.5, float("nan")], "xs": [[1], None]}
    )
    env = plain_envelopes(
        0, "url", other, _env({"url": "string", "note": "string?", "x": "float?", "xs": "list<int>?"})
    )
    assert env.column("_key").to_pylist() == ['"plain"', '"fine"']
    assert env.column("_i0").to_pylist()[1]["note"] == f"x{bad}y" and env.column("_i0").to_pylist()[0]["xs"] == [1]


def test_missing_keys_and_other_types_are_left_to_the_per_record_path():
    env = _env({"url": "string"})
    assert (
        plain_envelopes(0, "url", pa.RecordBatch.from_pydict({"url": ["a", None]}), env) is None
    )  # an error there, named
    assert (
        plain_envelopes(0, "x", pa.RecordBatch.from_pydict({"x": [1.5]}), _env({"x": "float"})) is None
    )  # float text: Python's repr
    assert plain_envelopes(0, "xs", pa.RecordBatch.from_pydict({"xs": [[1]]}), _env({"xs": "list<int>"})) is None
    assert plain_envelopes(0, "nope", pa.RecordBatch.from_pydict({"url": ["a"]}), env) is None


def test_spark_sql_key_texts_equal_encode_key(spark):
    """Keys built by Spark SQL on the map side (job.json_key_sql) are encode_key's texts, byte for
    byte: every control character, quotes, backslashes, U+2028, non-BMP text; int64 and bool."""
    from pyspark.sql import functions as F

    from cbp.engine.driver.job import json_key_sql

    rng = random.Random(9)
    alphabet = [chr(c) for c in range(0, 40)] + ['"', "\\", "/", "é", "\u2028", "\u2029", "\x7f", "😀", "字", "a"]
    texts = ["", '"', "\\", '\\\\"', "\x00", "a\u0001b"] + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(2000)
    ]
    rows = (
        spark.createDataFrame([(t,) for t in texts], "s string")
        .select("s", json_key_sql(F.col("s"), "string").alias("k"))
        .collect()
    )
    assert [r["k"] for r in rows] == [encode_key(r["s"]) for r in rows]
    ints = [0, -1, 2**63 - 1, -(2**63)] + [rng.randint(-(2**63), 2**63 - 1) for _ in range(200)]
    rows = (
        spark.createDataFrame([(i, i % 2 == 0) for i in ints], "n bigint, b boolean")
        .select("n", "b", json_key_sql(F.col("n"), "int").alias("kn"), json_key_sql(F.col("b"), "bool").alias("kb"))
        .collect()
    )
    assert all(r["kn"] == encode_key(r["n"]) and r["kb"] == encode_key(r["b"]) for r in rows)


def test_decode_key_is_json_loads_of_every_key_text():
    """The translator gets decode_key(text): the JSON value itself, also for the texts the fast
    path (a string without escapes) does not take: escapes, numbers, lists, objects, null."""
    from cbp.engine.task.routing import decode_key

    rng = random.Random(11)
    alphabet = [chr(c) for c in range(0, 40)] + ['"', "\\", "/", "é", "\u2028", "\x7f", "😀", "字", "a", "u"]
    keys: list = ["", '"', "\\", "a\\u0041", "\x00"] + [
        "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12))) for _ in range(3000)
    ]
    keys += [0, -7, 2**63 - 1, 1.5, True, None, ["a", 1], {"b": ["\\", '"']}]
    for k in keys:
        text = encode_key(k)
        assert decode_key(text) == json.loads(text) == k
        assert type(decode_key(text)) is type(k)


def test_a_key_field_crosses_once_and_comes_back_as_fed():
    """An input routed by a non-null string, int or bool field leaves that field out of its
    envelopes (the key text carries it); ``restore_fields`` puts back the records as fed: escapes,
    int64 limits, bools, other flows' rows (null) and the only field of a record alike."""
    from cbp.engine.task.routing import Routes, elided_fields, restore_fields

    rng = random.Random(5)
    alphabet = ALPHABET + NEEDS_PYTHON
    inputs = [
        RecordSchema.parse({"n": "int", "x": "float?"}),
        RecordSchema.parse({"url": "string"}),
        RecordSchema.parse({"note": "string?", "ok": "bool"}),
        RecordSchema.parse({"s": "string?"}),
    ]
    elided = elided_fields(["n", "url", "ok", "s"], inputs)
    assert elided == {0: "n", 1: "url", 2: "ok"}  # a nullable field is not: null has no key
    env = envelope_schema(inputs, elided=elided)
    assert env.field("_i1").type == pa.struct([]) and env.field("_i0").type.names == ["x"]
    batches = {
        0: pa.RecordBatch.from_pydict({"n": [0, -1, 2**63 - 1, -(2**63), 42], "x": [1.5, None, -0.0, 2.0, 3.0]}),
        1: pa.RecordBatch.from_pydict(
            {"url": ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 9))) for _ in range(300)]}
        ),
        2: pa.RecordBatch.from_pydict({"note": [None, 'x"y'], "ok": [True, False]}),
    }
    parts, want = [], []
    for i, b in batches.items():
        plain = plain_envelopes(i, elided[i], b, env)
        if plain is None:  # keys JSON must escape: the per-record path
            routes = Routes(i, [], env)
            routes.start(b)
            for row, rec in enumerate(b.to_pylist()):
                routes.add(encode_key(rec[elided[i]]), row)
            plain = routes.flush()
        assert plain.column(f"_i{i}").type == env.field(f"_i{i}").type
        parts.append(plain)
        want += [(i, rec) for rec in b.to_pylist()]
    mixed = pa.Table.from_batches(parts).combine_chunks().to_batches()[0]
    order = list(range(mixed.num_rows))
    rng.shuffle(order)  # flows interleaved, as after the shuffle's sort
    mixed = mixed.take(pa.array(order))
    back = restore_fields(mixed, inputs, elided)
    got = [(f, back.column(f"_i{f}")[j].as_py()) for j, f in enumerate(back.column("_flow").to_pylist())]
    assert got == [want[j] for j in order]
    for i in range(4):  # rows of other flows stay null
        assert back.column(f"_i{i}").null_count == sum(1 for f, _ in got if f != i)
    assert restore_fields(back, inputs, elided) is back  # a batch that carries the fields is left alone


NULL_KEYS = """
pipeline: nkeys
flows:
  ev:  {external: true, schema: {k: "string?", v: int}}
  res: {schema: {k: "string?", n: int}}
stages:
  s:
    translator: MOD:count
    partitions: 3
    inputs: [{flow: ev, route_by: k}]
    state: {schema: {k: "string?", n: int}}
    outputs: [res]
"""
NULL_KEYS_MODULE = """
def count(key, state, ev, out):
    prev = next(state, None)
    n = sum(1 for _ in ev) + (prev["n"] if prev else 0)
    out.state.write({"k": key, "n": n})
    out.res.write({"k": key, "n": n})
"""


NULL_KEYS_BATCH = """
import pyarrow as pa

def count(keys, state, ev, out):
    assert not out.key_texts, keys  # a call with the null key alone gets it as a null, not as the text 'null'
    n = [0] * len(keys)
    for p in ev.column("_pos").to_pylist():
        n[p] += 1
    if state is not None:
        for p, c in zip(state.column("_pos").to_pylist(), state.column("n").to_pylist()):
            n[p] += c
    return {"state": pa.table({"_key": keys, "k": keys, "n": pa.array(n, pa.int64())}),
            "res": pa.table({"k": keys, "n": pa.array(n, pa.int64())})}
"""


@pytest.mark.parametrize(
    "mode,small,batch",
    [
        ("direct", None, False),
        ("direct", 0, False),
        ("blackbox", None, False),
        ("direct", None, True),
        ("blackbox", 0, True),
    ],
)
def test_a_null_route_field_is_a_key_of_its_own(spark, tmp_path, make_pipeline, mode, small, batch):
    """As in a Spark groupBy: the records whose route_by field is null are one group (not the string
    "null"), in every routing path, and a null does not stop the stage."""
    from collections import Counter

    from cbp.pipeline import Pipeline

    tuning = {} if small is None else {"small_epoch_records": small}
    yaml = NULL_KEYS.replace("translator: MOD:count", "translator: MOD:count\n    batch: true") if batch else NULL_KEYS
    p = Pipeline(
        make_pipeline(yaml, NULL_KEYS_BATCH if batch else NULL_KEYS_MODULE),
        home=str(tmp_path / "home"),
        mode=mode,
        spark=spark,
        **tuning,
    )
    feeds = [
        [{"k": "a", "v": 1}, {"k": None, "v": 2}, {"k": "null", "v": 3}, {"k": None, "v": 4}],
        [{"k": None, "v": 5}, {"k": "b", "v": 6}],
        [{"k": None, "v": 7}],
    ]  # a call (a task) with the null key alone
    for recs in feeds:
        p.feed("ev", recs)
        p.run()
    want = Counter(r["k"] for recs in feeds for r in recs)
    assert sorted(((r["k"] is None, r["k"] or ""), r["n"]) for r in p.state("s")) == sorted(
        ((k is None, k or ""), n) for k, n in want.items()
    )
