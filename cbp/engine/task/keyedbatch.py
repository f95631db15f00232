"""Batch translators of keyed stages (``batch: true`` with ``state: {row_key: ...}``, issue 38).

A batch translator of a keyed stage is called as any batch translator (:mod:`cbp.engine.task.batch`),
but its ``state`` argument is a :class:`KeyedBatchState`: it holds no rows until asked.
``state.get(requests)`` takes a table with a ``_pos`` column (the key's position in ``keys``) and
the row key fields, and returns the stored rows found (``_key``, the state fields, ``_pos``);
``state.all(positions)`` returns every row of those keys (all of them when ``None``: it reads
every row the keys hold). The translator returns::

    {"state": upserts (_key + state fields), "deleted": row keys to delete (_key + row key fields), "<flow>": ...}

Rows of the called keys neither upserted nor deleted stay as they are. A row both upserted and
deleted (or given twice) in one call is a ``batch-duplicate-key`` failure; ``removed`` (whole
keys) is not taken from a keyed stage (``batch-output``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pyarrow as pa

from ...spec.resolve import safe_str
from ...spec.schema import RecordSchema
from ..common.protocol import USER_FAILURES
from .batch import BatchTranslate
from .batchtables import _typed_keys, _with_key
from .keyedstate import KeyedRows, rk_text

__all__ = ["KeyedBatch", "KeyedBatchState", "DELETED"]

DELETED = "deleted"  #: what a keyed batch translator's result calls the rows it deletes


class KeyedBatchState:
    """The ``state`` argument of a keyed batch translator (see the module)."""

    def __init__(self, rows: list[KeyedRows], keys: pa.Array, schema: RecordSchema, fields: tuple[str, ...]) -> None:
        self._rows, self._keys, self._schema, self._fields = rows, keys, schema, fields
        self.num_rows = None  # not known without reading every row: use all()

    def get(self, requests: Any) -> pa.Table:
        """The stored rows named by ``requests`` (a table: ``_pos`` and the row key fields) that exist."""
        if isinstance(requests, pa.RecordBatch):
            requests = pa.Table.from_batches([requests])
        missing = [c for c in ("_pos", *self._fields) if c not in requests.column_names]
        if missing:
            raise ValueError(
                f"state.get: the requests table lacks column(s) {', '.join(missing)} (give _pos and the row key fields)"
            )
        by_pos: dict[int, list[str]] = {}
        for pos, rec in zip(requests.column("_pos").to_pylist(), requests.select(list(self._fields)).to_pylist()):
            if pos is None or not 0 <= pos < len(self._rows):
                raise ValueError(
                    f"state.get: _pos {pos!r} is not the position of a key of this call (0..{len(self._rows) - 1})"
                )
            by_pos.setdefault(pos, []).append(rk_text(self._fields, rec))
        out, at = [], []
        for pos in sorted(by_pos):
            kr = self._rows[pos]
            found = kr._source.fetch(kr._key, kr._kh, list(dict.fromkeys(by_pos[pos])))
            out += found.values()
            at += [pos] * len(found)
        return _with_key(pa.Table.from_pylist(out, schema=self._schema.arrow), self._keys, at)

    def all(self, positions: Any | None = None) -> pa.Table:
        """Every stored row of the keys at ``positions`` (default: every key of the call)."""
        pick = range(len(self._rows)) if positions is None else sorted(set(int(p) for p in positions))
        out, at = [], []
        for pos in pick:
            kr = self._rows[pos]
            rows = [self._schema.to_storage(r) for r in kr._source.iterate(kr._key, kr._kh)]
            out += rows
            at += [pos] * len(rows)
        return _with_key(pa.Table.from_pylist(out, schema=self._schema.arrow), self._keys, at)


class KeyedBatch(BatchTranslate):
    """:class:`cbp.engine.task.batch.BatchTranslate` for a keyed stage: the call's upserts and deletes
    become each key's row writes, handed to the partition key by key in order."""

    def flush(self) -> None:
        if not self._order:
            return
        pending, kept, order = self.pending, self.kept, self._order
        self.pending, self.kept, self._order = [], [], []
        ops: dict[int, dict[str, dict[str, Any] | None]] = {}
        if pending:
            st = self.plan.stage
            texts = [g.key for g, _, _ in pending]
            keys, key_texts = _typed_keys(texts)
            assert st.state_schema is not None
            rows = cast("list[KeyedRows]", [r for _, _, r in pending])  # keyed rows (state_partition)
            state = KeyedBatchState(rows, keys, st.state_schema, st.row_key)
            inputs = [self._input_table(keys, idx, pending) for idx in range(len(st.inputs))]
            result = self.call(keys, state, inputs, len(pending), key_texts)
            ops, outputs = self._keyed_check(result, keys, texts)
            for flow, table in outputs.items():
                self.calls.outputs[flow].add_table(table)
        part_out = None
        called, unchanged, i = iter(pending), iter(kept), 0
        for is_called in order:
            if not is_called:
                g, old, records = next(unchanged)
                self.update(g, old, records)
                continue
            g, old, records = next(called)
            part_out = part_out or _out_of(cast(KeyedRows, records))
            part_out.ops = ops.get(i, {})
            self.update(g, old, [])
            i += 1

    def _keyed_check(
        self, result: Any, keys: pa.Array, texts: list[str]
    ) -> tuple[dict[int, dict[str, dict[str, Any] | None]], dict[str, pa.Table]]:
        st = self.plan.stage
        where = f"{self.plan.where()}: batch translator '{st.translator_path}'"
        deleted = None
        if isinstance(result, Mapping):
            try:
                result = {k: result[k] for k in list(result.keys())}
            except USER_FAILURES as e:
                raise self._fail(
                    self.plan,
                    "batch-output",
                    f"{where} returned a {type(result).__name__} that could not be read as a mapping: "
                    f"{type(e).__name__}: {safe_str(e)}",
                ) from None
            if result.get("removed") is not None:
                raise self._fail(
                    self.plan,
                    "batch-output",
                    f"{where} returned 'removed'; a stage with keyed rows (row_key) deletes rows, "
                    f"returned under '{DELETED}' (the key and the row key fields)",
                )
            result.pop("removed", None)
            deleted = result.pop(DELETED, None)
        table, _, outputs = self.check(result, keys, texts.__getitem__)
        ops: dict[int, dict[str, dict[str, Any] | None]] = {}
        fields = st.row_key
        if table is not None:
            for pos, rec in zip(table.column("_pos").to_pylist(), table.drop_columns(["_pos"]).to_pylist()):
                self._op(ops, pos, rk_text(fields, rec), rec, texts, where)
        if deleted is not None:
            rk_schema = RecordSchema({f: st.state_schema.fields[f] for f in fields})  # type: ignore[union-attr]
            dt = self._conform(deleted, rk_schema, DELETED, where, with_key=True)
            pos = self._positions(dt.column("_key"), keys, where)
            for p, rec in zip(pos.tolist(), dt.drop_columns(["_key"]).to_pylist()):
                self._op(ops, p, rk_text(fields, rec), None, texts, where)
        return ops, outputs

    def _op(
        self,
        ops: dict[int, dict[str, Any]],
        pos: int,
        text: str,
        rec: dict[str, Any] | None,
        texts: list[str],
        where: str,
    ) -> None:
        mine = ops.setdefault(pos, {})
        if text in mine:
            raise self._fail(
                self.plan,
                "batch-duplicate-key",
                f"{where}: key {texts[pos]} row {text} is given twice (upserted twice, "
                "or upserted and deleted) in one call",
            )
        mine[text] = rec


def _out_of(rows: KeyedRows) -> Any:
    """The partition's ``out.state`` (:class:`cbp.engine.task.keyedstate.KeyedOut`) behind a key's rows."""
    src = rows._source
    return src.owner.out if hasattr(src, "owner") else src.out
