"""Vectorised translate: one call per batch of keys, with Arrow tables (a stage with ``batch: true``).

A grouped task visits its keys in hash order exactly as for per-key translate (the same input
groups, state lookups, broadcast and multicast deliveries, and the same rule for which keys are
called). Instead of one Python call per key, :class:`BatchTranslate` collects up to
:data:`BATCH_KEYS` called keys and calls the translator once::

    translate(keys, state, *inputs, out) -> {"state": Table, "removed": keys, "<flow>": Table, ...}

``keys`` is an Arrow array of the called keys (their values when Arrow can type them all alike, else
their JSON text, and then ``out.key_texts`` is True); ``state`` holds the stored rows of those keys
and each of ``inputs`` the records of one input flow, each table with a ``_key`` column first and a
``_pos`` column last (the position of the row's key in ``keys``), rows grouped by key in the order
of ``keys`` and, within a key, in the flow's OrderBy order. Tables are in stored form
(``json`` fields as JSON text). ``out`` carries ``stage``, ``epoch``, ``params``, ``has_state``,
and ``associate(key, address)`` / ``associate_all(keys, addresses)`` for multicast bindings.

The result: ``state`` rows (with ``_key``) *replace* the state of the keys they name; keys in
``removed`` lose their state; the state of the other keys stays as it was. Each output flow's
table must have the flow's fields, typed as fed Arrow records must be
(:mod:`cbp.spec.arrowrecords`: no silent conversion of an int to a string, a string or a float to
an int; ``json`` fields as JSON text, parsed and checked). A key that is not in ``keys``, a key
both in ``state`` and in ``removed``, a missing or mistyped column, a null in a non-nullable
field, a non-finite float or bad JSON fails the epoch naming the stage and epoch; nothing of it
is committed.

    >>> import pyarrow as pa
    >>> [(a.to_pylist(), text) for a, text in (_typed_keys(['"a"', '"b"']), _typed_keys(['"a"', '1']))]
    [(['a', 'b'], False), (['"a"', '1'], True)]
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...spec.arrowrecords import ArrowRecordError, conform, with_diff
from ...spec.diff import DIFF
from ...spec.resolve import safe_str
from ...spec.schema import RecordSchema
from ..common.protocol import USER_FAILURES, TaskFailed
from .batchtables import _key_text, _kind, _records_table, _typed_keys, _with_key, write_changed
from .routing import encode_key

if TYPE_CHECKING:
    from .calls import _Calls
    from .groups import Group
    from .partition import ArrowRows, OldState, StateRecords
    from .plan import TaskPlan

    #: ``update(g, old, new)``: a key's new state to the task's partition
    Update = Callable[[Group, OldState | None, StateRecords], None]

__all__ = ["BATCH_KEYS", "BatchOut", "BatchTranslate", "write_changed"]  # write_changed: of .batchtables

BATCH_KEYS = 8192  # keys per call of a batch translator


class BatchOut:
    """The ``out`` argument of a batch translator: what the stage and epoch are, and the stage's
    multicast bindings (a batch translator returns its tables; it writes nothing else)."""

    def __init__(self, stage: str, epoch: int, params: Mapping[str, Any], has_state: bool, bind: Any = None) -> None:
        self.stage, self.epoch, self.params, self.has_state = stage, epoch, dict(params), has_state
        self.key_texts = False  # this call's keys are their JSON texts (Arrow could not type them alike)
        self._bind = bind

    def associate(self, key: Any, address: Any) -> None:
        """Bind ``key`` to the multicast ``address`` for the next epoch, as ``out.associate`` of a
        per-key translator does (paper 001 §4.5.3)."""
        if self._bind is None:
            raise TypeError(
                f"stage '{self.stage}' has no grouping keys (a record-wise stage): it cannot associate keys "
                "with multicast addresses"
            )
        self._bind(key, address)

    def associate_all(self, keys: Any, addresses: Any) -> None:
        """Bind each of ``keys`` to the address at the same position of ``addresses`` (Arrow arrays
        or sequences of equal length).

            >>> seen = []
            >>> BatchOut("s", 1, {}, False, lambda k, a: seen.append((k, a))).associate_all(["a", "b"], ["g", "g"])
            >>> seen
            [('a', 'g'), ('b', 'g')]
        """
        ks = keys.to_pylist() if isinstance(keys, (pa.Array, pa.ChunkedArray)) else list(keys)
        addrs = addresses.to_pylist() if isinstance(addresses, (pa.Array, pa.ChunkedArray)) else list(addresses)
        if len(ks) != len(addrs):
            raise ValueError(f"associate_all: {len(ks)} keys but {len(addrs)} addresses")
        for k, a in zip(ks, addrs):
            self.associate(k, a)


class BatchTranslate:
    """Collects the called keys of a task and calls the stage's batch translator per :data:`BATCH_KEYS`."""

    def __init__(
        self,
        plan: TaskPlan,
        calls: _Calls,
        update: Update,
        fail: Callable[..., TaskFailed],
        user_failure: Callable[..., TaskFailed],
        flow_iter: Callable[..., Iterator[dict[str, Any]]],
        direct: ArrowRows | None = None,
    ) -> None:
        """``update(g, old, new)`` hands a key's new state to the task's partition; ``fail`` and
        ``user_failure`` make the task's typed failures (:mod:`cbp.engine.task.translate`),
        ``flow_iter`` decodes a key's records of one flow in OrderBy order
        (:func:`cbp.engine.task.translators.flow_iter`). With ``direct`` (a direct-mode partition),
        the new state rows go to it as one Arrow table per call."""
        self.plan, self.calls, self.update, self.direct = plan, calls, update, direct
        self._fail, self._user_failure, self._flow_iter = fail, user_failure, flow_iter
        st = plan.stage
        self.out = BatchOut(
            st.name, plan.epoch, st.params, st.state_schema is not None, None if st.record_wise else calls.bind
        )
        self.pending: list[tuple[Group, OldState | None, StateRecords]] = []
        self.kept: list[tuple[Group, OldState | None, StateRecords]] = []  # not called, in key order with pending
        self._order: list[bool] = []  # for each key queued: called (True) or kept as it is (False)

    def add(self, g: Group, old: OldState | None, records: StateRecords, called: bool = True) -> None:
        """A key with its stored state records (decoded): called, or (black-box mode) only kept,
        which must still reach the partition in key order."""
        (self.pending if called else self.kept).append((g, old, records))
        self._order.append(called)
        if len(self.pending) >= BATCH_KEYS or len(self._order) >= 4 * BATCH_KEYS:  # kept keys are held too: bound them
            self.flush()

    def flush(self) -> None:
        if not self._order:
            return
        pending, kept, order = self.pending, self.kept, self._order
        self.pending, self.kept, self._order = [], [], []
        if not pending:
            for g, old, records in kept:
                self.update(g, old, records)
            return
        st = self.plan.stage
        texts = [g.key for g, _, _ in pending]
        keys, key_texts = _typed_keys(texts)
        state = self._state_table(keys, pending)
        inputs = [self._input_table(keys, idx, pending) for idx in range(len(st.inputs))]
        result = self.call(keys, state, inputs, len(pending), key_texts)
        new, removed, outputs = self._check(result, keys, texts)
        if self.direct is not None and not kept:
            self._write_direct(pending, new, removed)
        else:
            called, unchanged, i = iter(pending), iter(kept), 0
            for is_called in order:
                if not is_called:
                    g, old, records = next(unchanged)
                    self.update(g, old, records)
                    continue
                g, old, records = next(called)
                recs = new[0].get(i)
                self.update(g, old, recs if recs is not None else [] if i in removed else records)
                i += 1
        for flow, table in outputs.items():
            self.calls.outputs[flow].add_table(table)

    # ------------------------------------------------------------------ tables in
    def _state_table(self, keys: pa.Array, pending: list[Any]) -> pa.Table | None:
        schema = self.plan.stage.state_schema
        if schema is None:
            return None
        rows, at = [], []
        for i, (_, _, records) in enumerate(pending):
            rows += records
            at += [i] * len(records)
        return _with_key(schema.to_arrow(rows), keys, at)

    def _input_table(self, keys: pa.Array, idx: int, pending: list[Any]) -> pa.Table:
        """One input flow's records of the batch's keys: the groups' Arrow slices (:mod:`cbp.engine.task.groups`)
        put together, never decoded to Python; sorted by key position and, within a key, by the
        flow's OrderBy (a field: by Arrow; a function: per key in Python)."""
        schema = self.plan.input_schemas[idx]
        order = self.plan.stage.inputs[idx].order_by
        if order is not None and order.field is None:  # an OrderBy function: decode per key, as per-key translate does
            rows: list[Mapping[str, Any]] = []
            at: list[int] = []
            for i, (g, _, _) in enumerate(pending):
                if g.flows[idx]:
                    recs = list(
                        self._flow_iter(
                            self.plan, idx, [r for part in g.flows[idx] for r in part.to_pylist()], None, g.key
                        )
                    )
                    rows += recs
                    at += [i] * len(recs)
            return _with_key(schema.to_arrow(rows), keys, at)
        parts: list[pa.Array] = []
        sizes: list[int] = []
        for g, _, _ in pending:
            parts += g.flows[idx]
            sizes.append(sum(len(part) for part in g.flows[idx]))
        rep = np.repeat(np.arange(len(pending), dtype=np.int64), sizes)
        table = _with_key(_records_table(parts, schema.arrow), keys, rep)
        if order is not None and table.num_rows:
            table = table.sort_by([("_pos", "ascending"), (order.field, "ascending")])
        return table

    # ------------------------------------------------------------------ tables out
    def call(
        self, keys: pa.Array, state: pa.Table | None, inputs: list[pa.Table], n: int, key_texts: bool = False
    ) -> Any:
        """Call the batch translator for ``n`` keys (``key_texts``: given as their JSON texts); a user
        failure names the stage and epoch."""
        st = self.plan.stage
        self.calls.calls += n
        self.out.key_texts = key_texts
        from .calls import ExitGuard, WorkerExit, worker_exit_failure

        try:
            with ExitGuard():
                return st.translator(keys, state, *inputs, out=self.out)
        except WorkerExit as e:
            where = f"{self.plan.where()} (a batch of {n} keys, task partition {self.calls.part})"
            raise worker_exit_failure(self.plan, where, f"batch translator '{st.translator_path}'", e) from None
        except USER_FAILURES as e:
            raise self._user_failure(
                self.plan, self.plan.where(), f"batch translator '{st.translator_path}'", e
            ) from None

    def _check(
        self, result: Any, keys: pa.Array, texts: list[str]
    ) -> tuple[tuple[dict[int, list[dict[str, Any]]], pa.Table | None], set[int], dict[str, pa.Table]]:
        """:meth:`check`, with the new state records decoded by position of their key in ``keys``."""
        table, removed, outputs = self.check(result, keys, texts.__getitem__)
        new: dict[int, list[dict[str, Any]]] = {}
        if table is not None:
            schema = self.plan.stage.state_schema
            recs = table.drop_columns(["_pos"]).to_pylist()
            for i, rec in zip(table.column("_pos").to_pylist(), recs):
                new.setdefault(i, []).append(schema.from_storage(rec))  # type: ignore[union-attr]
        return (new, table), set(removed.tolist()), outputs

    def check(self, result: Any, keys: pa.Array, name: Any) -> tuple[pa.Table | None, np.ndarray, dict[str, pa.Table]]:
        """The result checked: the new state rows conformed to the state schema with a ``_pos`` column
        (their key's position in ``keys``), the positions of removed keys, and the output tables.
        ``name(i)`` is the text of key ``i`` (for messages)."""
        st = self.plan.stage
        where = f"{self.plan.where()}: batch translator '{st.translator_path}'"
        if result is None:
            result = {}
        if not isinstance(result, Mapping):
            raise self._fail(
                self.plan,
                "batch-output",
                f"{where} returned {type(result).__name__}; it must return a mapping of "
                "'state', 'removed' and output flow names to Arrow tables",
            )
        try:  # a plain dict from here on: a user's mapping whose methods fail fails here, named
            result = {k: result[k] for k in list(result.keys())}
        except USER_FAILURES as e:
            raise self._fail(
                self.plan,
                "batch-output",
                f"{where} returned a {type(result).__name__} that could not be read as a mapping: "
                f"{type(e).__name__}: {safe_str(e)}",
            ) from None
        allowed = set(st.outputs) | ({"state", "removed"} if st.state_schema is not None else set())
        extra = sorted((k for k in result if k not in allowed), key=repr)
        if extra:
            raise self._fail(
                self.plan,
                "batch-output",
                f"{where} returned {', '.join(map(repr, extra))}, which the stage does not have "
                f"(it may return: {', '.join(sorted(allowed)) or 'nothing'})",
            )
        table: pa.Table | None = None
        new_pos = np.empty(0, np.int64)
        if result.get("state") is not None:
            assert st.state_schema is not None  # a result's "state" is refused above for a stateless stage
            table = self._conform(result["state"], st.state_schema, "state", where, with_key=True)
            new_pos = self._positions(table.column("_key"), keys, where)
            table = table.drop_columns(["_key"]).append_column("_pos", pa.array(new_pos, pa.int64()))
        removed = (
            np.empty(0, np.int64) if result.get("removed") is None else self._positions(result["removed"], keys, where)
        )
        both: list[int] = []
        if removed.size:  # (np.unique of a call's new keys alone costs ~0.3 us a key)
            u, counts = np.unique(removed, return_counts=True)
            both = np.intersect1d(u, new_pos).tolist() or u[counts > 1].tolist()
        if both:
            raise self._fail(
                self.plan,
                "batch-duplicate-key",
                f"{where}: key(s) {', '.join(name(i) for i in both[:5])} are both "
                "given new state and removed, or removed twice",
            )
        outputs = {
            f: self._conform(result[f], self.plan.out_schemas[f], f, where)
            for f in st.outputs
            if result.get(f) is not None
        }
        return table, removed, outputs

    def _positions(self, returned: Any, keys: pa.Array, where: str) -> np.ndarray:
        """Where each returned key is in ``keys`` (the keys of the call), or a ``batch-key`` failure."""
        if isinstance(returned, pa.ChunkedArray):
            returned = returned.combine_chunks()
        if not isinstance(returned, pa.Array):
            if isinstance(returned, (str, bytes, Mapping, pa.Table, pa.RecordBatch)) or not hasattr(
                returned, "__iter__"
            ):
                raise self._fail(
                    self.plan,
                    "batch-key",
                    f"{where} returned {type(returned).__name__} for 'removed'; "
                    "give the keys as an Arrow array or a list",
                )
            try:
                returned = list(returned)
            except USER_FAILURES as e:
                raise self._fail(
                    self.plan,
                    "batch-key",
                    f"{where} returned a 'removed' that could not be read: {type(e).__name__}: {safe_str(e)}",
                ) from None
            try:
                returned = pa.array(returned)
            except (TypeError, ValueError, pa.ArrowInvalid, pa.ArrowTypeError):
                try:
                    returned = pa.array([encode_key(k) for k in returned], pa.string())
                except (TypeError, ValueError) as e:
                    raise self._fail(
                        self.plan, "batch-key", f"{where} returned a key that is not a JSON value: {e}"
                    ) from None
        if not len(returned):  # none (an empty list comes typed null)
            return np.empty(0, np.int64)
        if returned.type != keys.type:
            try:
                if not (
                    _kind(returned.type) == _kind(keys.type) or pa.types.is_null(returned.type)
                ):  # "1", 1, 1.0 and true are four keys
                    raise pa.ArrowTypeError("another kind of key")
                returned = returned.cast(keys.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
                raise self._fail(
                    self.plan,
                    "batch-key",
                    f"{where} returned keys of type {returned.type}; it was called with keys of type {keys.type}",
                ) from None
        if len(returned) == len(keys) and returned.equals(
            keys
        ):  # the keys of the call, in its order (a column's compare)
            return np.arange(len(keys), dtype=np.int64)
        try:
            pos = pc.index_in(returned, value_set=keys)
        except pa.ArrowNotImplementedError:  # e.g. list keys: match their canonical texts
            at: dict[str | None, int] = {encode_key(k): i for i, k in enumerate(keys.to_pylist())}
            pos = pa.array([at.get(_key_text(k)) for k in returned.to_pylist()], pa.int64())
        if pos.null_count:
            bad = returned.filter(pc.is_null(pos)).to_pylist()
            raise self._fail(
                self.plan,
                "batch-key",
                f"{where} returned state for key(s) it was not called for: {', '.join(map(str, bad[:5]))}",
            )
        out: np.ndarray = pos.to_numpy(zero_copy_only=False).astype(np.int64)
        return out

    # ------------------------------------------------------------------ state out (direct mode)
    def _write_direct(
        self, pending: list[Any], new: tuple[dict[int, list[dict[str, Any]]], pa.Table | None], removed: set[int]
    ) -> None:
        """Hand the changed keys' new rows to the direct partition as one Arrow table, in key order.

        A key's state changes when the call gave it new records different from the stored ones,
        or removed a key that had state; the others are not rewritten (as per-key translate)."""
        by_pos, table = new
        changed = np.zeros(len(pending), bool)
        direct, schema = self.direct, self.plan.stage.state_schema
        assert direct is not None and schema is not None
        to_storage = schema.to_storage
        for i, (g, old, _) in enumerate(pending):
            recs = by_pos.get(i)
            if recs is None and i not in removed:
                continue
            if [to_storage(r) for r in recs or ()] == (
                old.stored if old else []
            ):  # as stored: 1, true and 1.0 differ in a json field
                continue
            changed[i] = True
            direct.drop(g.h, old)
        if not changed.any():
            return
        keys = pa.array([g.key for g, _, _ in pending], pa.string())
        hashes = pa.array(np.fromiter((g.h for g, _, _ in pending), np.int64, len(pending)))
        write_changed(
            direct,
            schema.arrow,
            table,
            changed,
            np.fromiter(sorted(removed), np.int64, len(removed)),
            keys,
            hashes,
        )

    def _conform(self, table: Any, schema: RecordSchema, name: str, where: str, with_key: bool = False) -> pa.Table:
        """``table``'s schema fields in their stored form (plus ``_key``), by the rules of fed Arrow
        records (:func:`cbp.spec.arrowrecords.conform`, ``json`` fields as JSON text); other
        columns are ignored. A table that does not fit is a ``batch-schema`` failure."""
        if isinstance(table, pa.RecordBatch):
            table = pa.Table.from_batches([table])
        if not isinstance(table, pa.Table):
            raise self._fail(
                self.plan, "batch-schema", f"{where} returned {type(table).__name__} for '{name}'; give a pyarrow Table"
            )
        want = list(schema.fields) + (["_key"] if with_key else [])
        names = table.column_names
        twice = sorted({c for c in names if c in want and names.count(c) > 1})
        missing = [c for c in want if c not in names and (c == "_key" or not schema.fields[c].nullable)]
        if twice or missing:
            what = f"has column(s) {', '.join(twice)} twice" if twice else f"lacks column(s) {', '.join(missing)}"
            raise self._fail(
                self.plan, "batch-schema", f"{where}: the '{name}' table {what} (it has {', '.join(names)})"
            )
        if with_key and DIFF in names:
            raise self._fail(
                self.plan,
                "bad-diff",
                f"{where}: the 'state' table has a '{DIFF}' column; state rows are not signed "
                "(a key's state is what it holds now)",
            )
        signed = not with_key and DIFF in names
        try:
            out = conform(
                schema,
                table.select([c for c in schema.fields if c in names] + [DIFF] * signed),
                json_text=True,
                signed=signed,
            )
        except ArrowRecordError as e:
            raise self._fail(
                self.plan,
                e.code if e.code == "bad-diff" else "batch-schema",
                f"{where}: the '{name}' table does not fit the schema {schema}: row {e.row}: {e}",
            ) from None
        if not with_key:
            return with_diff(out)
        if with_key:
            out = out.append_column("_key", table.column("_key"))
        return out
