"""Signed records in the engine: what a translator writes (:func:`signed_record`, :func:`state_record`),
and consolidation. Consolidation of signed records: before a translator sees them, the records one key receives
on one input flow in one stage epoch that are equal but for ``_diff`` become one record whose
``_diff`` is the sum of theirs; a record whose sum is 0 is dropped (``+r`` and ``-r`` cancel).

It is done where a retraction (a negative ``_diff``) is among the records; records that are all
positive reach the translator as they came (a record with ``_diff: n`` stands for n copies, as
n records with ``_diff: 1`` would). Records compare as stored (``json`` fields as their sorted-key
text, so ``{"a": 1}`` written twice is one record), in the order each first came.

    >>> consolidate_records([{"u": "a", "_diff": 1}, {"u": "b", "_diff": 1}, {"u": "a", "_diff": -1}])
    [{'u': 'b', '_diff': 1}]
    >>> import pyarrow as pa
    >>> t = pa.table({"u": ["a", "b", "a"], "_diff": [2, 1, -1], "_pos": [0, 0, 0]})
    >>> consolidate_table(t).to_pylist()
    [{'u': 'a', '_diff': 1, '_pos': 0}, {'u': 'b', '_diff': 1, '_pos': 0}]
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...spec.diff import DIFF, DiffError, validate_signed
from ...spec.schema import RecordSchema

__all__ = [
    "consolidate_records",
    "consolidate_table",
    "consolidated_by",
    "consolidate_group",
    "delivered_consolidated",
    "fill_diff",
    "has_negative",
    "consolidated_batches",
    "signed_record",
    "state_record",
    "has_retraction",
    "text_has_retraction",
    "INT64",
]

INT64 = (-(2**63), 2**63 - 1)
_SIGN = '"' + DIFF + '":-'  # a copy's JSON text (separators without spaces) with a negative _diff


def _diff_of(rec: dict[str, Any]) -> int:
    d = rec.get(DIFF)
    return 1 if d is None else d


def has_retraction(items: list[Any]) -> bool:
    """Whether stored records (dicts) or copies' JSON texts hold a negative ``_diff``."""
    for r in items:
        if type(r) is str:
            if _SIGN in r:
                return True
        elif _diff_of(r) < 0:
            return True
    return False


def text_has_retraction(text: str) -> bool:
    """Whether a copy's JSON text (``json.dumps(..., separators=(",", ":"))``) has a negative ``_diff``."""
    return _SIGN in text


def _identity(rec: dict[str, Any]) -> str:
    return json.dumps(
        [[k, v] for k, v in sorted(rec.items()) if k != DIFF], separators=(",", ":"), ensure_ascii=False, default=repr
    )


def consolidate_records(items: list[Any], extra: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Records (dicts in stored form, or copies' JSON texts) consolidated: new dicts, in the order
    each record first came, with their summed ``_diff``; zeros dropped."""
    out: dict[str, dict[str, Any]] = {}
    for r in items:
        rec = json.loads(r) if type(r) is str else r
        k = _identity(rec)
        have = out.get(k)
        if have is None:
            c = dict(rec)
            c[DIFF] = _diff_of(rec)
            out[k] = c
        else:
            have[DIFF] += _diff_of(rec)
    return [r for r in out.values() if r[DIFF] != 0]


def consolidate_table(t: pa.Table) -> pa.Table:
    """An Arrow table of records with a ``_diff`` column (and perhaps ``_key``/``_pos`` columns,
    which are part of what must be equal) consolidated, if it holds a retraction; rows in the
    order each first came (stable by ``_pos`` when there is one)."""
    if t.num_rows == 0 or DIFF not in t.column_names:
        return t
    diff = pc.fill_null(t.column(DIFF), 1)
    if pc.min(diff).as_py() > 0:
        return t
    names = t.column_names
    keys = [n for n in names if n != DIFF]
    t = t.set_column(names.index(DIFF), DIFF, diff)
    if keys and all(not (pa.types.is_nested(t.schema.field(n).type)) for n in keys):
        first = pa.array(np.arange(t.num_rows, dtype=np.int64))
        g = (
            t.append_column("_first", first)
            .group_by(keys, use_threads=False)
            .aggregate([(DIFF, "sum"), ("_first", "min")])
        )
        g = g.sort_by([("_first_min", "ascending")])
        g = g.filter(pc.not_equal(g.column(f"{DIFF}_sum"), 0))
        cols = {n: g.column(n) for n in keys}
        cols[DIFF] = g.column(f"{DIFF}_sum")
        out = pa.table([cols[n] for n in names], schema=t.schema)
    else:  # list columns cannot be grouped by: the records' Python form
        out = pa.Table.from_pylist(consolidate_records(t.to_pylist()), schema=t.schema)
    return out


def consolidated_by(t: pa.Table, reads: list[str]) -> pa.Table:
    """Records ``t`` consolidated by the fields a stage reads (``reads``; it never looks at the
    others), if they hold a retraction: records equal in those fields become the first of them with
    the sum of their ``_diff``; a sum of 0 is dropped. An update of a field the stage does not read
    (``-old``, ``+new``) cancels here, before routing. A stage that reads no field (``reads`` empty: the
    inputs that only make an aggregate without GROUP BY run, :mod:`cbp.views.plan`) gets at most one
    record, the first with the sum of every ``_diff``, retractions or not.

        >>> t = pa.table({"k": [1, 1, 2], "price": [5, 6, 7], "_diff": [-1, 1, 1]})
        >>> consolidated_by(t, ["k"]).to_pylist()
        [{'k': 2, 'price': 7, '_diff': 1}]
        >>> consolidated_by(t, []).to_pylist(), consolidated_by(t.slice(0, 2), []).num_rows
        ([{'k': 1, 'price': 5, '_diff': 1}], 0)
    """
    if t.num_rows == 0 or (reads and not has_negative(t)):
        return t
    diff = pc.fill_null(t.column(DIFF), 1)
    cols = {f"c{j}": t.column(n) for j, n in enumerate(reads)}
    keyed = pa.table({**cols, "_d": diff, "_i": pa.array(np.arange(t.num_rows, dtype=np.int64))})
    g = keyed.group_by(list(cols), use_threads=False).aggregate([("_d", "sum"), ("_i", "min")])
    g = g.filter(pc.not_equal(g.column("_d_sum"), 0)).sort_by([("_i_min", "ascending")])
    out = t.take(g.column("_i_min"))
    return out.set_column(t.column_names.index(DIFF), t.schema.field(DIFF), g.column("_d_sum").cast(diff.type))


def consolidate_group(g: Any, arrow: bool) -> bool:
    """Consolidate each input flow's records of key group ``g`` (:class:`cbp.engine.task.groups.Group`)
    that holds a retraction, in place, and recount ``g.records``; whether anything changed. Its
    items are stored records (dicts) or copies' JSON texts, or (``arrow``) struct-array slices."""
    changed = False
    for idx, items in enumerate(g.flows):
        if not items:
            continue
        if arrow:
            if not any(_slice_has_retraction(a) for a in items):
                continue
            arr = pa.concat_arrays(items) if len(items) > 1 else items[0]
            t = consolidate_table(pa.Table.from_struct_array(arr))
            g.flows[idx] = (
                [pa.StructArray.from_arrays([c.combine_chunks() for c in t.columns], fields=list(arr.type))]
                if t.num_rows
                else []
            )
        else:
            if not has_retraction(items):
                continue
            g.flows[idx] = consolidate_records(items)
        changed = True
    if changed:
        g.records = sum(len(a) for items in g.flows for a in items) if arrow else sum(len(items) for items in g.flows)
    return changed


def _slice_has_retraction(a: pa.StructArray) -> bool:
    i = a.type.get_field_index(DIFF)
    if i < 0 or len(a) == 0:
        return False
    m = pc.min(a.field(i)).as_py()
    return m is not None and m < 0


def signed_record(schema: RecordSchema, record: Any) -> dict[str, Any]:
    """A record a translator writes to an output flow, validated, with its ``_diff`` (+1 when absent)."""
    rec, diff = validate_signed(schema, record)
    rec[DIFF] = diff
    return rec


def state_record(schema: RecordSchema, record: Any) -> dict[str, Any]:
    """A state record a translator writes, validated: state records are not signed."""
    if isinstance(record, dict) and DIFF in record:
        raise DiffError(
            "a state record carries no multiplicity (state is what a key holds now); write it without '_diff'"
        )
    return schema.validate(record)


def consolidated_batches(batches: Iterable[pa.RecordBatch]) -> Iterable[pa.RecordBatch]:
    """A record-wise task's input, consolidated within what the task reads when it holds a
    retraction (:mod:`cbp.engine.consolidate`), else as it comes (held as Arrow: a task reads a split of files)."""
    held = [b for b in batches if b.num_rows]
    if not held or not any(
        (m := pc.min(b.column(DIFF)).as_py()) is not None and m < 0 for b in held if DIFF in b.schema.names
    ):
        return held
    out: list[pa.RecordBatch] = consolidate_table(pa.Table.from_batches(held)).to_batches()
    return out


def delivered_consolidated(g: Any, copies: Any, has_state: bool, outer: bool, arrow: bool) -> None:
    """Key group ``g`` consolidated, then given the broadcast records it gets
    (:meth:`cbp.engine.task.routing.Copies.deliver_broadcast`, which looks at what input is left), and
    consolidated again with them: +r and -r of a key cancel before anything is decided on its input."""
    consolidate_group(g, arrow)
    if copies.broadcast:
        copies.deliver_broadcast(g, has_state, outer)
        consolidate_group(g, arrow)


def fill_diff(t: pa.Table) -> pa.Table:
    """``t`` with the nulls of its ``_diff`` column (records of a file an older cbp wrote) as +1."""
    if DIFF not in t.column_names:
        return t
    col = t.column(DIFF)
    return t if not col.null_count else t.set_column(t.column_names.index(DIFF), DIFF, pc.fill_null(col, 1))


def has_negative(t: pa.Table) -> bool:
    """Whether a table of records holds a retraction (a negative ``_diff``)."""
    if t.num_rows == 0 or DIFF not in t.column_names:
        return False
    m = pc.min(t.column(DIFF)).as_py()
    return m is not None and m < 0
