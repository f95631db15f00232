"""``RecordSchema.validate`` checks plain scalar records itself: it must accept exactly what
pydantic's validation accepts, give the same record, and leave every other record to pydantic."""

from __future__ import annotations

import types
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cbp.spec.schema import RecordError, RecordSchema, check_json

SCHEMA = RecordSchema.parse({"s": "string", "n": "int", "x": "float?", "b": "bool?", "t": "string?"})
VALUES = st.one_of(
    st.none(),
    st.text(max_size=5),
    st.sampled_from(["\ud800", "ok\udfff"]),
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.lists(st.integers(), max_size=2),
)
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


# ``check_json`` first asks ``_plainly_json`` (C-speed checks for common shapes); only a value it
# is unsure of is walked. It may be unsure of good values, never sure of a bad one.
class _Str(str):
    pass


_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.sampled_from([2**14_001, -(2**14_000), float("nan"), float("-inf"), 1e308]),
    st.floats(),
    st.text(max_size=4),
    st.sampled_from(["\ud800", "a\udfff", "é", "\x00", _Str("s")]),
    st.sampled_from([b"x", {1, 2}, object()]),
)
_JSONISH = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(
            st.one_of(st.text(max_size=3), st.sampled_from(["\udc80", 1, None, True, 2.5, _Str("k")])),
            inner,
            max_size=4,
        ),
    ),
    max_leaves=20,
)


def _deep(n: int, leaf: Any) -> Any:
    for i in range(n):
        leaf = [leaf] if i % 2 else {"k": leaf}
    return leaf


@settings(max_examples=1500, deadline=None)
@given(_JSONISH)
def test_check_json_fast_path_never_accepts_what_the_walk_refuses(value):
    from cbp.spec.jsonvalues import _plainly_json, _walk_json

    try:
        _walk_json("f", value)
        walked = None
    except RecordError as e:
        walked = str(e)
    if _plainly_json(value, 2):
        assert walked is None, walked
    try:
        check_json("f", value)
        checked = None
    except RecordError as e:
        checked = str(e)
    assert checked == walked


def test_check_json_depth_and_self_reference():
    from cbp.spec.schema import MAX_DEPTH

    check_json("f", _deep(MAX_DEPTH - 1, "x"))
    for bad in (_deep(MAX_DEPTH, "x"), _deep(MAX_DEPTH - 1, ["\ud800"])):
        with pytest.raises(RecordError):
            check_json("f", bad)
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(RecordError):
        check_json("f", loop)
