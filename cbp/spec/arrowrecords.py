"""Records that arrive as Arrow columns (a pyarrow Table, a Parquet file, a pandas DataFrame):
checked against a flow's schema column by column and converted to its stored form.

The rules are those of :meth:`cbp.spec.schema.RecordSchema.validate` for the same records as
Python dicts (``table.to_pylist()``), so feeding a table lands what feeding its rows would, and
a table the dict path refuses is refused too, naming the same record (the first bad one) and a
field at fault:

- every column is a field of the schema (``unknown field``); a field without ``?`` has a
  column (``missing``) and no nulls;
- ``string``: Arrow strings (``string``, ``large_string``, ``string_view``, dictionary-encoded),
  valid UTF-8 (which also rules out lone surrogates); ``int``: Arrow integers that fit int64;
  ``float``: Arrow floats, finite, or integers (stored as the float they stand for); ``bool``:
  Arrow booleans; ``date``: Arrow dates; ``timestamp``: Arrow timestamps with a time zone (any
  unit and zone, as UTC microseconds; a naive column, or a value finer than microseconds, is
  refused); ``decimal(P,S)``: Arrow decimals or integers whose values fit (never floats);
  ``binary``: Arrow binaries (:mod:`.typedvalues`); ``list<T>``: Arrow lists (``list``,
  ``large_list``, ``fixed_size_list``) of such
  items, nulls among them only for ``list<T?>``; ``json``: any Arrow type whose Python values are
  JSON (checked per value, as the dict path does, and stored as sorted-key JSON text); with
  ``json_text=True`` (tables already in stored form, as a batch translator returns them) a string
  column of JSON text, each value parsed and checked;
- a column whose values are all null (Arrow's ``null`` type, or any other), and list items that
  are all null or absent, fit whatever the field's type, as ``None`` and ``[]`` do in a dict.

    >>> import pyarrow as pa
    >>> from cbp.spec.schema import RecordSchema
    >>> s = RecordSchema.parse({"url": "string", "n": "float"})
    >>> conform(s, pa.table({"url": ["a"], "n": pa.array([2], pa.int32())})).to_pylist()
    [{'url': 'a', 'n': 2.0}]
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from . import typedvalues
from .diff import DiffError
from .schema import DIFF, FieldType, RecordError, RecordSchema, check_json

__all__ = ["conform", "ArrowRecordError", "ArrowDiffError", "split_diff", "with_diff", "DIFF_FIELD"]

#: The ``_diff`` column of stored records (increments of flows)
DIFF_FIELD = pa.field(DIFF, pa.int64())

_INT64_MAX = 2**63 - 1


class ArrowRecordError(RecordError):
    """A :class:`RecordError` of one row of an Arrow batch: ``row`` is its index (0-based)."""

    def __init__(self, field: str | None, message: str, row: int) -> None:
        super().__init__(field, message)
        self.row = row


class ArrowDiffError(DiffError, ArrowRecordError):
    """A bad ``_diff`` in row ``row`` of an Arrow batch (code ``bad-diff``)."""

    def __init__(self, message: str, row: int) -> None:
        RecordError.__init__(self, DIFF, message)
        self.row = row


def split_diff(data: pa.Table | pa.RecordBatch) -> tuple[pa.Table | pa.RecordBatch, pa.Array | None]:
    """``data`` without its ``_diff`` column, and that column checked and as int64 (None if there
    is none): every value an integer, not null, nonzero, within int64, else :class:`ArrowDiffError`
    for the first bad row (as :func:`cbp.spec.schema.check_diff` on each row's value).

        >>> split_diff(pa.table({"url": ["a"], "_diff": [-1]}))[1].to_pylist()
        [-1]
    """
    names = data.schema.names
    if DIFF not in names:
        return data, None
    if names.count(DIFF) > 1:
        raise ArrowRecordError(DIFF, "appears twice among the columns", 0)
    i = names.index(DIFF)
    col = data.column(i)
    arr = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    rest = (
        data.remove_column(i)
        if isinstance(data, pa.Table)
        else pa.RecordBatch.from_arrays(
            [data.column(j) for j in range(len(names)) if j != i], names=[n for n in names if n != DIFF]
        )
    )
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    t = arr.type
    if not pa.types.is_integer(t):
        bad = 0 if not arr.null_count else _first(arr.is_null())
        raise ArrowDiffError(
            f"must be a nonzero int (a multiplicity: +1 a record, -1 a retraction), got an Arrow column of type {t}",
            bad,
        )
    if arr.null_count:
        raise ArrowDiffError(
            "is null; a record's multiplicity is a nonzero int (leave the column out for +1)", _first(arr.is_null())
        )
    if pa.types.is_uint64(t) and len(arr) and pc.max(arr).as_py() > _INT64_MAX:
        raise ArrowDiffError(
            "must fit in 64 bits (-2**63 .. 2**63 - 1)", _first(pc.greater(arr, pa.scalar(_INT64_MAX, pa.uint64())))
        )
    zero = pc.equal(arr, 0)
    if len(arr) and pc.any(zero).as_py():
        raise ArrowDiffError(
            "must be a nonzero int (a multiplicity: +1 a record, -1 a retraction), got 0", _first(zero)
        )
    return rest, arr.cast(pa.int64())


def with_diff(table: pa.Table) -> pa.Table:
    """``table`` with a last column ``_diff``: its own (moved last), or +1 for every row (a table
    written by a cbp before signed records, or records given without one).

        >>> with_diff(pa.table({"url": ["a"]})).to_pylist()
        [{'url': 'a', '_diff': 1}]
    """
    names = table.schema.names
    if DIFF in names:
        if names[-1] == DIFF:
            return table
        col = table.column(DIFF)
        return table.drop_columns([DIFF]).append_column(DIFF_FIELD, col.cast(pa.int64()))
    return table.append_column(DIFF_FIELD, pa.array(np.ones(table.num_rows, dtype=np.int64)))


_Bad = tuple[int, str] | None  # (row, message) of a column's first bad value


def conform(
    schema: RecordSchema, data: pa.Table | pa.RecordBatch, json_text: bool = False, signed: bool = False
) -> pa.Table:
    """``data``'s rows in the stored form of ``schema`` (:attr:`RecordSchema.arrow`), or raise
    :class:`ArrowRecordError` for its first bad row (the first field at fault in schema order).
    ``json_text``: ``json`` fields hold JSON text (the stored form), not values. ``signed``: a
    ``_diff`` column is allowed, checked (:func:`split_diff`) and kept as the last column."""
    if signed:
        rest, diff = split_diff(data)
        out = conform(schema, rest, json_text)
        return out if diff is None else out.append_column(pa.field(DIFF, pa.int64()), diff)
    n = data.num_rows
    if n == 0:
        return schema.arrow.empty_table()
    names = data.schema.names
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ArrowRecordError(name, "appears twice among the columns", 0)
        seen.add(name)
        if name not in schema.fields:
            raise ArrowRecordError(name, "unknown field (not in the flow's schema)", 0)
    cols: list[pa.Array] = []
    first: tuple[int, str, str] | None = None  # (row, field, message): on a tie, the field first in the schema
    for name, ft in schema.fields.items():
        if name not in seen:
            if not ft.nullable:
                raise ArrowRecordError(name, "missing (every field without '?' is required)", 0)
            cols.append(pa.nulls(n, ft.arrow))
            continue
        out, bad = _column(ft, data.column(name), json_text)
        if bad is not None and (first is None or bad[0] < first[0]):
            first = (bad[0], name, bad[1])
        cols.append(out)
    if first is not None:
        raise ArrowRecordError(first[1], first[2], first[0])
    return pa.Table.from_arrays(cols, schema=schema.arrow)


def _column(ft: FieldType, col: pa.Array | pa.ChunkedArray, json_text: bool) -> tuple[pa.Array, _Bad]:
    """A table's column in its stored type, and its first bad value. A column of scalars (not a list,
    not ``json``, not dictionary-encoded) is checked and cast chunk by chunk, as it came: not copied
    into one array first (a table read from Parquet comes in chunks; TPC-H SF 0.1's lineitem
    conformed in 0.032 CPU s this way, 0.057 with the copy). A bad value is looked for again in the
    column made one array, so that the message and row are the same either way."""
    if not isinstance(col, pa.ChunkedArray):
        return _field(ft, col, json_text)
    if ft.is_list or ft.scalar == "json" or pa.types.is_dictionary(col.type):
        return _field(ft, col.combine_chunks(), json_text)
    out, bad = _field(ft, col, json_text)
    return (out, bad) if bad is None else _field(ft, col.combine_chunks(), json_text)


def _field(ft: FieldType, arr: pa.Array, json_text: bool = False) -> tuple[pa.Array, _Bad]:
    """One column in its stored type, and its first bad value (``None``: all good)."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.dictionary_decode()
    if ft.scalar == "json":  # null is a JSON value: a json field without '?' must only be present
        if arr.null_count == len(arr):
            return pa.nulls(len(arr), ft.arrow), None
        return _json_text(arr) if json_text else _json(ft, arr)
    nulls = (
        None
        if ft.nullable or not arr.null_count
        else (_first(arr.is_null()), f"is null, but its type '{ft}' has no '?'")
    )
    if arr.null_count == len(arr):  # no values: nothing to check but the nulls, whatever the type
        return pa.nulls(len(arr), ft.arrow), nulls
    out, bad = _list(ft, arr) if ft.is_list else _scalar(ft.scalar, arr)
    if ft.bits < 64 and bad is None and not ft.is_list:
        out, bad = _narrow(ft, out)
    return out, min((b for b in (bad, nulls) if b is not None), key=lambda b: b[0], default=None)


def _scalar(scalar: str, arr: pa.Array) -> tuple[pa.Array, _Bad]:
    t = arr.type
    if arr.null_count == len(arr):  # list items that are all null (or none at all): any type will do
        return pa.nulls(len(arr), FieldType(scalar).arrow), None
    if typedvalues.is_typed(scalar):  # date, timestamp, decimal(P,S), binary
        return typedvalues.typed_column(scalar, arr)
    if scalar == "string" and (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)):
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid:
            return arr, _bad_utf8(arr)
        return arr.cast(pa.string()), None
    if scalar == "int" and pa.types.is_integer(t):
        if pa.types.is_uint64(t) and arr.null_count < len(arr) and pc.max(arr).as_py() > _INT64_MAX:
            return arr, (
                _first(pc.greater(arr, pa.scalar(_INT64_MAX, pa.uint64()))),
                "is larger than 2**63 - 1, the largest int cbp stores",
            )
        return arr.cast(pa.int64()), None
    if scalar == "float" and (pa.types.is_floating(t) or pa.types.is_integer(t)):
        out = arr.cast(pa.float64(), safe=False)  # an int stands for the nearest float, as float(v) in the dict path
        bad = pc.invert(pc.is_finite(out))
        if arr.null_count < len(arr) and pc.any(bad).as_py():
            return out, (_first(bad), "NaN and infinities are not JSON numbers; cbp stores finite floats only")
        return out, None
    if scalar == "bool" and pa.types.is_boolean(t):
        return arr, None
    return arr, (_first(arr.is_valid()), f"expected {scalar} values, got an Arrow column of type {t}")


def _narrow(ft: FieldType, arr: pa.Array) -> tuple[pa.Array, _Bad]:
    """An int64 or float64 column of a narrow type (``int32``, ``float32``, ...): its ints within the width,
    its floats rounded to 32 bits (as stored: int64, float64)."""
    if ft.scalar == "float":
        out = arr.cast(pa.float32(), safe=False).cast(pa.float64())
        bad = pc.invert(pc.is_finite(out))
        if pc.any(bad).as_py():
            return out, (_first(bad), f"is past the range of a {ft.name}")
        return out, None
    lo, hi = -(2 ** (ft.bits - 1)), 2 ** (ft.bits - 1) - 1
    bad = pc.or_(pc.less(arr, lo), pc.greater(arr, hi))
    if pc.any(bad).as_py():
        return arr, (_first(bad), f"does not fit a {ft.name} ({lo} to {hi})")
    return arr, None


def _list(ft: FieldType, arr: pa.Array) -> tuple[pa.Array, _Bad]:
    t = arr.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        return arr, (_first(arr.is_valid()), f"expected a list<{ft.scalar}> column, got an Arrow column of type {t}")
    try:
        lists = arr.cast(pa.list_(t.value_type))  # one layout (32-bit offsets) whatever list type came
    except (pa.ArrowException, ValueError) as e:  # more than 2**31 items in the batch
        return arr, (_first(arr.is_valid()), f"the Arrow column of type {t} cannot be read as list<{ft.scalar}> ({e})")
    items, bad = _scalar(ft.scalar, lists.flatten())
    if bad is None and not ft.items_nullable and items.null_count:
        bad = (_first(items.is_null()), f"a list item is null, but the type '{ft}' has no '?' inside the list")
    if bad is not None:  # the row of the list that holds the bad item
        return arr, (int(pc.list_parent_indices(lists)[bad[0]].as_py()), bad[1])
    lengths = pc.fill_null(pc.list_value_length(lists), 0).cast(pa.int32())
    offsets = (
        pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(lengths)])
        if len(lists)
        else pa.array([0], pa.int32())
    )
    return pa.ListArray.from_arrays(offsets, items, mask=lists.is_null()), None


def _json(ft: FieldType, arr: pa.Array) -> tuple[pa.Array, _Bad]:
    """A ``json`` field: each value checked and stored as JSON text, as the dict path does."""
    try:
        values = arr.to_pylist()
    except (pa.ArrowException, ValueError, OverflowError) as e:  # e.g. a date outside Python's range
        return arr, (_first(arr.is_valid()), f"the Arrow column of type {arr.type} cannot be read as JSON values ({e})")
    out: list[str | None] = []
    for i, v in enumerate(values):
        if v is None:
            out.append(None)
            continue
        try:
            check_json("", v)
        except RecordError as e:
            return arr, (i, str(e).split(": ", 1)[-1])
        out.append(json.dumps(v, sort_keys=True))
    return pa.array(out, pa.string()), None


def _json_text(arr: pa.Array) -> tuple[pa.Array, _Bad]:
    """A ``json`` field given as JSON text: each value parsed (no NaN or Infinity, which JSON does
    not have), checked as :func:`_json` checks values, and stored as sorted-key JSON text."""
    t = arr.type
    if not (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)):
        return arr, (
            _first(arr.is_valid()),
            f"expected JSON text (a json field's stored form) in a string column, got an Arrow column of type {t}",
        )
    out: list[str | None] = []
    for i, text in enumerate(arr.to_pylist()):
        if text is None:
            out.append(None)
            continue
        try:
            v = json.loads(text, parse_constant=_no_constant)
            check_json("", v)
        except RecordError as e:
            return arr, (i, str(e).split(": ", 1)[-1])
        except (ValueError, RecursionError) as e:  # not JSON, or nested beyond the parser
            return arr, (i, f"not JSON text ({str(e)[:120]})")
        out.append(None if v is None else json.dumps(v, sort_keys=True))
    return pa.array(out, pa.string()), None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number; cbp stores finite floats only")


def _bad_utf8(arr: pa.Array) -> tuple[int, str]:
    """The first value of a string column that is not UTF-8 (the column failed Arrow's check)."""
    if isinstance(arr, pa.ChunkedArray):  # checked chunk by chunk (_column): one array to view as bytes
        arr = arr.combine_chunks()
    as_bytes = (
        pa.large_binary()
        if pa.types.is_large_string(arr.type)
        else pa.binary_view()
        if pa.types.is_string_view(arr.type)
        else pa.binary()
    )
    for i, b in enumerate(arr.view(as_bytes).to_pylist()):
        if b is not None:
            try:
                b.decode("utf-8")
            except UnicodeDecodeError as e:
                return i, f"not UTF-8 text ({e.reason} at byte {e.start + 1}); a lone surrogate is not Unicode either"
    return 0, "not valid UTF-8 text"


def _first(mask: Any) -> int:
    """The index of the first true value of a boolean array."""
    return int(pc.index(mask, True).as_py())
