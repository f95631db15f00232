"""Source and keyed flows without Spark: YAML declarations, reading a Delta table's versions and
change data feed, keyed changes against a from-scratch "latest row per key" (pandas), feed ids."""

from __future__ import annotations

import os
import random

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from cbp.controller.keyed import bucket_of, keyed_changes
from cbp.controller.sources import feed_id_of, parse_feed_id
from cbp.errors import InputError, SpecError
from cbp.spec import load_spec
from cbp.spec.schema import RecordSchema
from cbp.storage.deltasource import SourceTable

YAML = """
pipeline: p
flows:
  orders:
    external: true
    {extra}
    schema: {{order_id: int, customer: string, amount: int, ts: int, gone: bool, tags: "list<string>"}}
  out: {{schema: {{customer: string}}}}
stages:
  s:
    translator: MOD:f
    signed: true
    inputs: [{{flow: orders, route_by: customer}}]
    outputs: [out]
"""
MOD = "def f(key, state, orders, out):\n    pass\n"


def _spec(make_pipeline, extra: str):
    return load_spec(make_pipeline(YAML.format(extra=extra), MOD))


def test_source_and_key_declared(make_pipeline, tmp_path):
    s = _spec(
        make_pipeline, "source: {delta: rel/orders}\n    key: [order_id]\n    sequence_by: ts\n    delete_when: gone"
    )
    fl = s.flows["orders"]
    assert fl.source == os.path.join(os.path.dirname(s.path), "rel", "orders")  # relative to the YAML's directory
    assert (fl.key, fl.sequence_by, fl.delete_when) == (("order_id",), "ts", "gone")
    assert _spec(make_pipeline, "source: {delta: s3://bucket/t}").flows["orders"].source == "s3://bucket/t"
    assert s.flows["out"].source is None and s.flows["out"].key == ()


@pytest.mark.parametrize(
    "extra, code",
    [
        ("key: [nope]", "unknown-field"),
        ("key: []", "bad-key"),
        ("key: [order_id, order_id]", "bad-key"),
        ("key: [tags]", "bad-key"),
        ("sequence_by: ts", "no-key"),
        ("delete_when: gone", "no-key"),
        ("key: [order_id]\n    sequence_by: tags", "bad-sequence"),
        ("key: [order_id]\n    sequence_by: order_id", "bad-sequence"),
        ("key: [order_id]\n    delete_when: ts", "bad-delete-when"),
        ("source: {delta: 'gs://b/t'}", "bad-source"),
        ("source: {delta: ''}", "bad-source"),
        ("source: {parquet: x}", "invalid-spec"),
    ],
)
def test_bad_declarations(make_pipeline, extra, code):
    with pytest.raises(SpecError) as e:
        _spec(make_pipeline, extra)
    assert e.value.code == code


def test_source_only_on_external_flows(make_pipeline):
    text = YAML.format(extra="").replace(
        "out: {schema: {customer: string}}", "out: {schema: {customer: string}, key: [customer]}"
    )
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline(text, MOD))
    assert e.value.code == "not-external"


def test_feed_ids():
    assert parse_feed_id(feed_id_of("s3://b/x@y", 12)) == ("s3://b/x@y", 12)
    assert parse_feed_id("delta:/t@x") is None and parse_feed_id(None) is None


# ------------------------------------------------------------------ reading a source table
def _table(path, cdf=True):
    write_deltalake(
        str(path),
        pa.table({"id": [1, 2, 3], "g": ["a", "b", "a"], "v": [10, 20, 30]}),
        configuration={"delta.enableChangeDataFeed": "true"} if cdf else None,
    )
    return DeltaTable(str(path))


def test_versions_rows_and_signed_changes(tmp_path):
    dt = _table(tmp_path / "t")
    dt.update(predicate="id = 1", updates={"g": "'b'"})
    DeltaTable(str(tmp_path / "t")).delete("id = 2")
    src = SourceTable(str(tmp_path / "t"))
    assert src.version() == 2
    assert sorted(src.rows(0, ["id", "g", "v"]).to_pylist(), key=lambda r: r["id"])[0] == {"id": 1, "g": "a", "v": 10}
    ch = src.changes(1, ["id", "g", "v"])
    assert sorted(ch.to_pylist(), key=lambda r: r["_diff"]) == [
        {"id": 1, "g": "a", "v": 10, "_diff": -1},
        {"id": 1, "g": "b", "v": 10, "_diff": 1},
    ]
    assert src.changes(2, ["id", "g"]).to_pylist() == [{"id": 2, "g": "b", "_diff": -1}]
    src.check_cdf(2)


def test_source_errors(tmp_path):
    with pytest.raises(InputError) as e:
        SourceTable(str(tmp_path / "none")).version()
    assert e.value.code == "source-missing" and "none" in str(e.value)
    _table(tmp_path / "plain", cdf=False)
    with pytest.raises(InputError) as e:
        SourceTable(str(tmp_path / "plain")).check_cdf(0)
    assert e.value.code == "source-no-cdf" and "enableChangeDataFeed" in str(e.value) and "version 0" in str(e.value)
    _table(tmp_path / "t").delete("id = 2")
    for f in (tmp_path / "t" / "_change_data").iterdir():
        f.unlink()  # as VACUUM would
    with pytest.raises(InputError) as e:
        SourceTable(str(tmp_path / "t")).changes(1, ["id"])
    assert e.value.code == "source-cdf-missing" and "version 1" in str(e.value)


# ------------------------------------------------------------------ keyed changes
SCHEMA = RecordSchema.parse({"k": "int", "v": "int", "ts": "int", "gone": "bool"})


def _apply(current, rows, diffs, seq, delete_when=None):
    minus, plus, new = keyed_changes(SCHEMA, ("k",), seq, delete_when, current, rows, diffs, "flow 'x' feed 1")
    for k, v in new.items():
        if v is None:
            current.pop(k, None)
        else:
            current[k] = v
    return minus, plus


def _contents(current):
    return sorted((r["k"], r["v"], r["ts"]) for r, gone in current.values() if not gone)


def test_keyed_latest_row_per_key_out_of_order():
    """Random feeds of upserts and deletes, delivered out of order: the live rows equal a pandas
    "latest event per key" over every event, and the signed changes sum to the live rows."""
    rnd = random.Random(3)
    events = []
    for ts in range(400):
        k = rnd.randrange(30)
        events.append({"k": k, "v": rnd.randrange(5), "ts": ts, "gone": rnd.random() < 0.25})
    shuffled = events[:]
    rnd.shuffle(shuffled)
    current: dict = {}
    signed: dict = {}
    for start in range(0, len(shuffled), 37):
        feed = shuffled[start : start + 37]
        minus, plus = _apply(current, feed, [1] * len(feed), "ts", "gone")
        for r, d in [(r, -1) for r in minus] + [(r, 1) for r in plus]:
            t = (r["k"], r["v"], r["ts"])
            signed[t] = signed.get(t, 0) + d
        df = pd.DataFrame(events[:0] + [e for e in shuffled[: start + len(feed)]])
        latest = df.sort_values("ts").groupby("k").tail(1)
        want = sorted((int(r.k), int(r.v), int(r.ts)) for r in latest.itertuples() if not r.gone)
        assert _contents(current) == want
        assert sorted(t for t, n in signed.items() if n) == want and all(n in (0, 1) for n in signed.values())


def test_keyed_in_feed_order_and_unchanged_rows():
    current: dict = {}
    minus, plus = _apply(
        current, [{"k": 1, "v": 1, "ts": 0, "gone": False}, {"k": 1, "v": 2, "ts": 0, "gone": False}], [1, 1], None
    )
    assert (minus, [r["v"] for r in plus]) == ([], [2])
    assert _apply(current, [{"k": 1, "v": 2, "ts": 0, "gone": False}], [1], None) == ([], [])  # identical: no change
    minus, plus = _apply(current, [{"k": 1, "v": 0, "ts": 0, "gone": False}], [-1], None)  # a delete by key
    assert ([r["v"] for r in minus], plus, current) == ([2], [], {})


def test_keyed_delete_of_missing_row_fails():
    current: dict = {(1,): ({"k": 1, "v": 1, "ts": 0, "gone": False}, False)}
    with pytest.raises(InputError) as e:
        _apply(
            current,
            [
                {"k": 1, "v": 1, "ts": 0, "gone": False},
                {"k": 1, "v": 1, "ts": 0, "gone": False},
                {"k": 7, "v": 1, "ts": 0, "gone": False},
            ],
            [1, -1, -1],
            None,
        )
    assert e.value.code == "retract-missing" and "flow 'x' feed 1" in str(e.value) and "record 3" in str(e.value)
    with pytest.raises(InputError) as e:
        _apply(current, [{"k": 1, "v": 1, "ts": 0, "gone": False}], [2], None)
    assert e.value.code == "keyed-diff"


def test_tombstone_keeps_late_events_out():
    current: dict = {}
    _apply(current, [{"k": 1, "v": 1, "ts": 5, "gone": True}], [1], "ts", "gone")  # a delete before its insert
    assert _apply(current, [{"k": 1, "v": 9, "ts": 3, "gone": False}], [1], "ts", "gone") == ([], [])
    assert _contents(current) == []
    _, plus = _apply(current, [{"k": 1, "v": 9, "ts": 6, "gone": False}], [1], "ts", "gone")
    assert [r["v"] for r in plus] == [9]


def test_buckets_are_stable():
    assert bucket_of((1,)) == bucket_of((1,)) and {bucket_of((i,)) for i in range(200)} == set(range(16))


def test_a_source_flows_feeds_land_unhashed(make_pipeline, tmp_path):
    """A source flow's feeds (its table's versions) get no content hash and no hash entry (their ids,
    ``delta:<URI>@<version>``, say what they hold); what they land is the table's rows and changes, as
    pandas computes them from the table's versions."""
    import json

    import cbp
    from cbp.storage import LAYOUT

    uri = str(tmp_path / "t")
    dt = _table(uri)
    yaml = (
        f"pipeline: p\nflows:\n  t: {{external: true, source: {{delta: {json.dumps(uri)}}}}}\n"
        "  out: {schema: {g: string}}\n"
        "stages:\n  s: {translator: MOD:f, signed: true, inputs: [{flow: t, route_by: g}], outputs: [out]}\n"
    )
    p = cbp.Pipeline(str(make_pipeline(yaml, MOD.replace("orders", "t"))), str(tmp_path / "home"))
    p.sync()
    dt.update(predicate="id = 1", updates={"g": "'b'"})
    p.sync()
    assert not list((tmp_path / "home").rglob("hashes/*.json"))
    for n in (1, 2):
        entry = p.home.read_json(LAYOUT.feed_entry("t", n))
        assert entry is not None and "hash" not in entry and entry["id"] == f"delta:{uri}@{n - 1}"
    want = DeltaTable(uri).to_pandas().sort_values("id").reset_index(drop=True)
    got = pd.DataFrame(p.output("t", consolidated=True)).sort_values("id").reset_index(drop=True)
    pd.testing.assert_frame_equal(got[list(want.columns)], want, check_dtype=False)
