"""``state: {schema, row_key}``: the fields that name a row of a key's state (keyed rows, issue 38).

A stage with a row key keeps each key's state as a map from row key to row
(:mod:`cbp.engine.task.keyedstate`). The row key is one field or a list of fields of the state schema,
each a non-null ``string``, ``int`` or ``bool`` (values that JSON writes one way only). Outer
grouping and broadcasts work as for whole-key state: the keys a task visits without input are found
by a scan of the partition's key columns, and each key's rows are read as its translator asks.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .schema import RecordSchema

if TYPE_CHECKING:
    from .context import Context

ROW_KEY_TYPES = ("string", "int", "bool")
BATCH_REMOVED = "removed"  # what a batch translator's result calls the keys it removes (cbp.engine.task.batch)


def row_key_fields(
    c: Context, s: Any, inputs: list[Any], schema: RecordSchema | None, where: tuple[str, ...]
) -> tuple[str, ...]:
    """The row key fields (``()``: none) of a stage with state, checked: a ``bad-row-key`` spec error
    otherwise (and ``reserved-name`` for an output a batch translator's result would shadow)."""
    if s.batch and BATCH_REMOVED in s.outputs:
        raise c.fail(
            where + ("outputs",),
            f"stage '{where[-1]}': a batch translator returns the keys it removes under "
            f"'{BATCH_REMOVED}', so an output flow cannot have that name; rename the flow",
            "reserved-name",
        )
    rk = s.state.row_key
    if rk is None:
        return ()
    fields = [rk] if isinstance(rk, str) else list(rk)
    at = where + ("state", "row_key")
    name = where[-1]
    if not fields:
        raise c.fail(
            at,
            f"stage '{name}': row_key lists no field; give a field of the state schema or a list of them",
            "bad-row-key",
        )
    if len(set(fields)) != len(fields):
        raise c.fail(at, f"stage '{name}': row_key names a field twice: {fields}", "bad-row-key")
    assert schema is not None
    for f in fields:
        t = schema.fields.get(f)
        if t is None:
            raise c.fail(
                at,
                f"stage '{name}': row_key field '{f}' is not in the state schema (it has: {', '.join(schema.fields)})",
                "bad-row-key",
            )
        if t.is_list or t.nullable or t.scalar not in ROW_KEY_TYPES:
            raise c.fail(
                at,
                f"stage '{name}': row_key field '{f}' is {t}; a row key field must be a non-null "
                f"{', '.join(ROW_KEY_TYPES[:-1])} or {ROW_KEY_TYPES[-1]}",
                "bad-row-key",
            )
    if s.batch and "deleted" in s.outputs:
        raise c.fail(
            where + ("outputs",),
            f"stage '{name}': a batch translator of keyed rows returns the rows it deletes under 'deleted', "
            "so an output flow cannot have that name; rename the flow",
            "reserved-name",
        )
    return tuple(fields)
