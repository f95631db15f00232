"""``RecordSchema.validate`` checks plain scalar records itself: it must accept exactly what
pydantic's validation accepts, give the same record, and leave every other record to pydantic."""

from __future__ import annotations

import types

from hypothesis import given, settings
from hypothesis import strategies as st

from cbp.spec.schema import RecordError, RecordSchema

SCHEMA = RecordSchema.parse({"s": "string", "n": "int", "x": "float?", "b": "bool?", "t": "string?"})
VALUES = st.one_of(st.none(), st.text(max_size=5), st.sampled_from(["\ud800", "ok\udfff"]), st.integers(min_value=-(2**64), max_value=2**64),
                   st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.lists(st.integers(), max_size=2))
RECORDS = st.dictionaries(st.sampled_from(["s", "n", "x", "b", "t", "extra"]), VALUES, max_size=6)


def _slow(record):
    return SCHEMA.validate(types.MappingProxyType(record))  # not a dict: pydantic's path


def _outcome(fn, record):
    try:
        out = fn(record)
        return ("ok", {k: (type(v).__name__, v) for k, v in out.items()})
    except RecordError as e:
        return ("error", e.field)


@settings(max_examples=800, deadline=None)
@given(RECORDS)
def test_the_fast_path_agrees_with_pydantic(record):
    assert _outcome(SCHEMA.validate, record) == _outcome(_slow, record)


def test_the_fast_path_is_taken_for_plain_records():
    assert SCHEMA._flat is not None and RecordSchema.parse({"xs": "list<int>"})._flat is None
    assert SCHEMA.validate({"s": "a", "n": 1, "x": 2}) == {"s": "a", "n": 1, "x": 2.0, "b": None, "t": None}
