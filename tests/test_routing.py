"""Routing by a field with Arrow (``plain_envelopes``) gives the envelopes of the per-record path,
or declines a batch the per-record path must take."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pytest

from cbp.engine.routing import encode_key, plain_envelopes

ALPHABET = ["a", "Z", "0", " ", "é", "字", "😀", "/", "?", "=", "&", "'", "\u2028", "\x7f", "<", "%"]
NEEDS_PYTHON = ['"', "\\", "\n", "\t", "\x00", "\x1f"]


def _slow(batch: pa.RecordBatch, field: str) -> tuple[list[str], list[str]]:
    keys, recs = [], []
    for rec in batch.to_pylist():
        recs.append(json.dumps(rec, separators=(",", ":"), ensure_ascii=False))
        keys.append(encode_key(rec[field]))
    return keys, recs


@pytest.mark.parametrize("seed", range(5))
def test_arrow_routing_equals_the_per_record_path(seed):
    rng = random.Random(seed)
    n = 300
    word = lambda: "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 12)))  # noqa: E731
    batch = pa.RecordBatch.from_pydict({
        "url": [word() for _ in range(n)],
        "n": pa.array([rng.choice([None, 0, -1, 2**62, rng.randint(-999, 999)]) for _ in range(n)], pa.int64()),
        "ok": pa.array([rng.choice([None, True, False]) for _ in range(n)], pa.bool_()),
        "note": pa.array([rng.choice([None, word()]) for _ in range(n)], pa.string()),
    })
    for field in ("url", "n"):
        env = plain_envelopes(3, field, batch.filter(pa.array([v is not None for v in batch.column(field).to_pylist()])))
        want = _slow(batch.filter(pa.array([v is not None for v in batch.column(field).to_pylist()])), field)
        assert env is not None
        assert env.column("_key").to_pylist() == want[0] and env.column("_r").to_pylist() == want[0]
        assert env.column("_rec").to_pylist() == want[1]
        assert set(env.column("_flow").to_pylist()) == {3}


@pytest.mark.parametrize("bad", NEEDS_PYTHON)
def test_a_string_json_must_escape_sends_the_batch_down_the_per_record_path(bad):
    batch = pa.RecordBatch.from_pydict({"url": ["plain", f"x{bad}y"], "n": [1, 2]})
    assert plain_envelopes(0, "url", batch) is None
    other = pa.RecordBatch.from_pydict({"url": ["plain", "fine"], "note": [None, f"x{bad}y"]})
    assert plain_envelopes(0, "url", other) is None


def test_missing_keys_and_other_types_are_left_to_the_per_record_path():
    assert plain_envelopes(0, "url", pa.RecordBatch.from_pydict({"url": ["a", None]})) is None  # an error there, named
    assert plain_envelopes(0, "url", pa.RecordBatch.from_pydict({"url": ["a"], "x": [1.5]})) is None  # float text: Python's repr
    assert plain_envelopes(0, "url", pa.RecordBatch.from_pydict({"url": ["a"], "xs": [[1]]})) is None
    assert plain_envelopes(0, "nope", pa.RecordBatch.from_pydict({"url": ["a"]})) is None
