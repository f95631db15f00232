"""The tables of a batch translate: typed keys for a call (:func:`_typed_keys`), records with their
keys (:func:`_with_key`), and the new state rows of changed keys written to a direct partition
(:func:`write_changed`); used by :mod:`.batch`, :mod:`.keyedbatch` and :mod:`.columnar`."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from .routing import encode_key, has_byte
from .signed import fill_diff

if TYPE_CHECKING:
    from .partition import ArrowRows

__all__ = ["write_changed"]


def write_changed(
    direct: ArrowRows,
    schema: pa.Schema,
    table: pa.Table | None,
    changed: np.ndarray,
    removed: np.ndarray,
    keys: pa.Array,
    hashes: pa.Array,
) -> None:
    """Write the new rows of the changed keys of a batch call to ``direct`` (their old rows already
    dropped): ``table``'s rows (state schema plus ``_pos``, the key's position) of keys with
    ``changed[pos]``, and a tombstone for each removed position that changed; in key order, a key's
    rows in the order returned. ``keys`` (texts) and ``hashes`` are by position."""
    parts = []
    if table is not None and table.num_rows:
        keep = changed[table.column("_pos").to_numpy()]
        rows = table if keep.all() else table.filter(pa.array(keep))
        parts.append(rows.append_column("_alive", pa.array(np.ones(rows.num_rows, bool))))
    gone = removed[changed[removed]] if removed.size else removed
    if gone.size:
        dead = pa.table({f.name: pa.nulls(gone.size, f.type) for f in schema})
        parts.append(
            dead.append_column("_pos", pa.array(gone.astype(np.int64))).append_column(
                "_alive", pa.array(np.zeros(gone.size, bool))
            )
        )
    rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
    pos = rows.column("_pos").to_numpy()
    if np.any(pos[1:] < pos[:-1]):  # not yet in key order (a translator may return keys in any order)
        order = np.argsort(pos, kind="stable")  # stable: a key's rows keep their order
        rows, pos = rows.take(pa.array(order)), pos[order]
    if pos.size == len(keys) and np.array_equal(pos, np.arange(pos.size)):  # every key of the call, once: no take
        direct.write_rows(keys, hashes, rows.drop_columns(["_pos"]))
        return
    at = pa.array(pos)
    direct.write_rows(keys.take(at), hashes.take(at), rows.drop_columns(["_pos"]))


def _records_table(parts: list[pa.Array], schema: pa.Schema) -> pa.Table:
    """Slices of envelopes' record columns (struct arrays) as one table of ``schema``, in order."""
    if not parts:
        return schema.empty_table()
    arr = pa.concat_arrays(parts) if len(parts) > 1 else parts[0]
    return fill_diff(pa.Table.from_struct_array(arr).select(schema.names).cast(schema))


def _typed_keys(texts: Any) -> tuple[pa.Array, bool]:
    """The keys as an Arrow array of their values, or of their JSON text if Arrow cannot type them
    alike (then the flag is True: ``out.key_texts``).

    Strings without escapes (the usual case) are unquoted by Arrow; other keys are decoded one by one.
    """
    arr = texts if isinstance(texts, pa.Array) else pa.array(texts, pa.string())
    if len(arr) and pc.all(pc.starts_with(arr, '"')).as_py() and not has_byte(arr, ord("\\")):
        return pc.utf8_slice_codeunits(arr, 1, -1), False
    if (
        len(arr) and pc.all(pc.match_substring_regex(arr, r"^-?(0|[1-9][0-9]{0,17})$")).as_py()
    ):  # integers, inside int64
        return arr.cast(pa.int64()), False
    values = [json.loads(t) for t in arr.to_pylist()]
    try:
        typed = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
        return arr, True
    if pa.types.is_null(typed.type):  # every key null (a route_by field's nulls): values all the same
        return typed, False
    if pa.types.is_struct(typed.type):
        return arr, True
    if any(
        _key_text(v) != t for v, t in zip(typed.to_pylist(), arr.to_pylist())
    ):  # e.g. 1 and 1.0 (also in lists): one type, other keys
        return arr, True
    return typed, False


def _with_key(table: pa.Table, keys: pa.Array, at: Any) -> pa.Table:
    """``table`` (rows of the keys at positions ``at`` of ``keys``) as a batch translator gets it:
    ``_key`` first, the fields, then ``_pos``, the position of the row's key in ``keys``."""
    pos = pa.array(np.asarray(at, np.int64), pa.int64())
    return table.add_column(0, "_key", keys.take(pos)).append_column("_pos", pos)


def _kind(t: pa.DataType) -> str:
    """What a key type is, for a returned key to match a call's key: text, integer, or the type itself."""
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "text"
    return "integer" if pa.types.is_integer(t) else str(t)


def _key_text(key: Any) -> str | None:
    """``encode_key(key)``, or None for a value that is no key (NaN: no key of a call is)."""
    try:
        return encode_key(key)
    except (TypeError, ValueError, RecursionError):
        return None
