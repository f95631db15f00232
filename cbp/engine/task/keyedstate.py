"""Keyed rows (issue 38): a key's state as a map from row key to row, read and written row by row.

A stage that declares ``state: {schema: ..., row_key: FIELD or [FIELDS]}`` keeps every row of a
key as its own entry of the partition's index. A row is stored with

- ``_key``: the grouping key's text, as for every state row;
- ``_rk``: its row key's canonical JSON text (one field: its value; several: a list);
- ``_h``: the *row hash*, the top 32 bits of the key's hash (xxhash64 of ``_key``) over the low
  32 bits of xxhash64 of ``_rk``.

State files are sorted by ``_h`` (then ``_key`` and ``_rk``), so the rows of one key lie together,
sorted by their row key's hash, and the index (:class:`cbp.engine.task.partindex.PartitionIndex`, a
hash -> file and row group map) finds one row, a few rows, or the range of all the rows of a key
without reading the others. Everything the index, the state reader, compaction and the worker's
cache do per hash they do per row here. A row rewritten or deleted leaves the index (its old entry
is dropped, the new row or tombstone is appended to the epoch's file); the rows a translator did
not touch stay where they are. Two rows whose hashes are equal (the low 32 bits of two row keys of
a key, or two keys of the same top 32 bits) share index entries: rewriting one rewrites the other
as it was, so neither is lost.

Any Delta reader gets a keyed stage's state as the newest ``_epoch`` per ``(_key, _rk)`` where
``_alive`` (:func:`cbp.engine.task.bipindex.latest_rows`).

    >>> rk_text(("url",), {"url": "a", "n": 1}), rk_text(("site", "n"), {"site": "a", "n": 1})
    ('"a"', '["a",1]')
    >>> lo, hi = key_range(-5)
    >>> bool(lo <= row_hashes(-5, ['"a"'])[0] <= hi)
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import xxhash

from ..common.sparkhash import spark_xxhash64
from .bipindex import ChunkRows
from .partindex import sorted_unique
from .partition import NoState, StatePartition, StateRecords
from .routing import encode_key
from .statepart import BlackboxPartition, DirectPartition, OldState, StateWriter

if TYPE_CHECKING:
    from .groups import Group
    from .plan import TaskPlan

__all__ = [
    "RK",
    "KeyedRows",
    "KeyedOut",
    "KeyedPartition",
    "KeyedBlackbox",
    "state_partition",
    "rk_text",
    "row_hashes",
    "key_range",
]

RK = "_rk"  #: the state column holding a row's row key (canonical JSON text)
STORED = ()  #: what :meth:`KeyedPartition.scan` gives as a stored key's state (its rows are read as asked)
_LOW = 0xFFFFFFFF
_SEED = 42
READ_CHUNK = 8192  #: row hashes a key's iteration reads at a time
#: Row hashes the keys of one chunk of a task's input may have in the index for their rows to be
#: read together, before the chunk's calls (:meth:`KeyedPartition.lookup`); above it each key's
#: rows are read as its translator asks for them.
PREFETCH_ROWS = 65536


def rk_text(fields: tuple[str, ...], rec: dict[str, Any]) -> str:
    """The row key text of a record (its row key fields' values)."""
    return encode_key(rec[fields[0]]) if len(fields) == 1 else encode_key([rec[f] for f in fields])


def _given_text(fields: tuple[str, ...], kinds: tuple[str, ...], row_key: Any) -> str:
    """The row key text of a row key given to ``get``/``delete``: a value, or a tuple/list of values
    for several fields, each of its field's type (``kinds``: ``string``, ``int`` or ``bool``), else ``TypeError``."""
    values = [row_key] if len(fields) == 1 else row_key
    if len(fields) > 1 and (not isinstance(row_key, (tuple, list)) or len(row_key) != len(fields)):
        raise TypeError(
            f"the row key is {len(fields)} fields ({', '.join(fields)}): "
            f"give a tuple of {len(fields)} values, not {row_key!r:.80}"
        )
    for f, kind, v in zip(fields, kinds, values):
        if not (
            isinstance(v, bool)
            if kind == "bool"
            else isinstance(v, int) and not isinstance(v, bool)
            if kind == "int"
            else isinstance(v, str)
        ):
            raise TypeError(f"row key field '{f}' is a {kind}; {v!r:.80} is not")
    return encode_key(row_key) if len(fields) == 1 else encode_key(list(row_key))


def _kinds(schema: Any, fields: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(schema.fields[f].scalar for f in fields)


def key_range(kh: int) -> tuple[int, int]:
    """The row hashes the rows of a key with hash ``kh`` may have: ``lo <= h <= hi``."""
    lo = (int(kh) >> 32) << 32
    return lo, lo + _LOW


def row_hashes(kh: int, texts: list[str]) -> np.ndarray:
    """The row hash of each row key text of a key with hash ``kh`` (int64, see the module)."""
    rh = np.array([xxhash.xxh64_intdigest(t.encode("utf-8"), _SEED) & _LOW for t in texts], dtype=np.int64)
    out: np.ndarray = rh + np.int64(key_range(kh)[0])
    return out


def _newest(rows: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """The newest row (tombstones included) per (key, row key)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in rows:
        k = (r["_key"], r[RK])
        if k not in out or r["_epoch"] > out[k]["_epoch"]:
            out[k] = r
    return out


class KeyedRows:
    """The ``state`` argument of a per-key translator of a keyed stage: the key's rows as stored
    before this call. Iterating yields every row (read lazily, chunk by chunk); :meth:`get` and
    :meth:`get_many` read only the rows asked for. Writes of the call (``out.state``) are not seen here.

        >>> class Mem:
        ...     def fetch(self, key, kh, texts): return {t: {"url": t.strip('"'), "n": 1} for t in texts if t == '"a"'}
        ...     def iterate(self, key, kh): yield from ({"url": "a", "n": 1},)
        >>> s = KeyedRows(Mem(), '"k"', 0, ("url",), lambda r: dict(r))
        >>> s.get("a"), s.get("b"), s.get_many(["a", "b"]), list(s)
        ({'url': 'a', 'n': 1}, None, {'a': {'url': 'a', 'n': 1}}, [{'url': 'a', 'n': 1}])
    """

    def __init__(
        self,
        source: Any,
        key_text: str,
        kh: int,
        fields: tuple[str, ...],
        decode: Callable[[dict[str, Any]], dict[str, Any]],
        kinds: tuple[str, ...] = (),
    ) -> None:
        self._source, self._key, self._kh, self._fields, self._decode = source, key_text, kh, fields, decode
        self._kinds = kinds or ("string",) * len(fields)
        self._it: Iterator[dict[str, Any]] | None = None

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every row of the key, read afresh each time (``next(state)`` goes on with one shared pass)."""
        return self._source.iterate(self._key, self._kh)  # type: ignore[no-any-return]

    def __next__(self) -> dict[str, Any]:
        if self._it is None:
            self._it = self._source.iterate(self._key, self._kh)
        return next(self._it)

    def stored(self) -> int | None:
        """How many row versions the key has stored (tombstones and superseded rows included: at least
        its rows), when known without reading them, else None."""
        count = getattr(self._source, "key_versions", None)
        return None if count is None else count(self._kh)

    def get(self, row_key: Any, default: Any = None) -> Any:
        """The row with this row key (a value; a tuple for a row key of several fields), or ``default``."""
        text = _given_text(self._fields, self._kinds, row_key)
        row = self._source.fetch(self._key, self._kh, [text]).get(text)
        return default if row is None else self._decode(row)

    def get_many(self, row_keys: Any) -> dict[Any, dict[str, Any]]:
        """The rows with these row keys that exist, as ``{row_key: row}`` (one read for all)."""
        given: dict[str, Any] = {}
        for rk in row_keys:
            given.setdefault(_given_text(self._fields, self._kinds, rk), tuple(rk) if isinstance(rk, list) else rk)
        found = self._source.fetch(self._key, self._kh, list(given)) if given else {}
        return {given[t]: self._decode(row) for t, row in found.items()}


class KeyedOut:
    """``out.state`` of a keyed stage: :meth:`write` upserts a row (by its row key), :meth:`delete`
    removes one; the last word on a row key in a call wins. Rows neither written nor deleted stay."""

    def __init__(self, stage: str, schema: Any, fields: tuple[str, ...]) -> None:
        self.flow, self._stage, self._schema, self._fields = "state", stage, schema, fields
        self.ops: dict[str, dict[str, Any] | None] = {}
        self.check: Callable[[Any], dict[str, Any]] = schema.validate  # the task's state record check (state_partition)

    def write(self, record: Any) -> None:
        """Upsert ``record`` (checked against the state schema) under its row key."""
        rec = self.check(record)
        self.ops[rk_text(self._fields, rec)] = self._schema.to_storage(rec)

    def delete(self, row_key: Any) -> None:
        """Remove the row with this row key (nothing if there is none)."""
        self.ops[_given_text(self._fields, _kinds(self._schema, self._fields), row_key)] = None

    def take(self) -> dict[str, dict[str, Any] | None]:
        ops, self.ops = self.ops, {}
        return ops


#: Rows a :class:`KeyedWriter` holds before it sorts and writes them (keys of several top hashes
#: together: one Arrow conversion and sort per batch, not per key).
HOLD_ROWS = 4096


class KeyedWriter(StateWriter):
    """A :class:`StateWriter` taking keyed rows key by key: rows of keys with the same top 32 hash
    bits are held and sorted by row hash together (their row hash ranges are one), with those of
    the next keys until :data:`HOLD_ROWS` are held."""

    def __init__(self, plan: TaskPlan, p: int, prefix: str, keep: bool = True) -> None:
        super().__init__(plan, p, prefix, keep)
        self._held: list[dict[str, Any]] = []
        self._copies: list[dict[str, Any]] = []
        self._top: int | None = None

    def put(self, kh: int, rows: list[dict[str, Any]], copies: Sequence[dict[str, Any]] = ()) -> None:
        """A key's new rows, and ``copies``: rows of the same hashes rewritten as they were (a
        row's own new version, written by its key's call in this task, wins over a copy)."""
        top = int(kh) >> 32
        if self._top is not None and top != self._top and len(self._held) >= HOLD_ROWS:
            self._release()  # keys come in hash order: several tops' rows sorted together keep it
        self._top = top
        self._held += rows
        self._copies += copies

    def _release(self) -> None:
        if self._copies:
            mine = {(r["_key"], r[RK]) for r in self._held}
            seen: set[tuple[str, str]] = set()
            for r in self._copies:
                ident = (r["_key"], r[RK])
                if ident not in mine and ident not in seen:
                    seen.add(ident)
                    self._held.append(r)
            self._copies = []
        if self._held:
            t = pa.Table.from_pylist(self._held, schema=self.schema)
            self._held = []
            self.write_table(t.sort_by([("_h", "ascending"), ("_key", "ascending"), (RK, "ascending")]))

    def close(self) -> tuple[dict[str, Any] | None, np.ndarray, np.ndarray]:
        self._release()
        return super().close()


def _row(key_text: str, h: int, epoch: int, rk: str, rec: dict[str, Any] | None) -> dict[str, Any]:
    row = {"_key": key_text, "_h": h, "_epoch": epoch, "_alive": rec is not None, RK: rk}
    if rec is not None:
        row.update(rec)
    return row


class KeyedPartition(DirectPartition):
    """A direct-mode state partition of keyed rows: rows read through the index by row hash, the
    changed rows (and tombstones of deleted ones) appended, their old entries dropped."""

    kind = "keyed-direct"

    def __init__(self, plan: TaskPlan, p: int) -> None:
        super().__init__(plan, p)
        st = plan.stage
        assert st.state_schema is not None
        self.fields, self.schema = st.row_key, st.state_schema
        self.keyed_writer = KeyedWriter(plan, p, prefix=f"e{plan.epoch:08d}")
        self.writer = self.keyed_writer
        self.out = KeyedOut(st.name, st.state_schema, st.row_key)
        self.rows_read = 0
        self.rows_written = 0
        self._chunk: ChunkRows | None = None  # the rows of the current input chunk's keys

    def lookup(self, hashes: np.ndarray) -> dict[str, Any]:
        """Read the stored rows of the keys with these hashes (a chunk of the input) together: one
        index lookup and one pass over the row groups for the chunk, not one per key and call.
        The rows are held, in Arrow, until the next chunk, and a key's become dicts as its translator
        asks; a chunk whose keys have more than :data:`PREFETCH_ROWS` rows is read key by key
        (``{}``: keyed rows are given by :meth:`records`, not here)."""
        self._chunk = None
        if not self.index.live_keys or not hashes.size:
            return {}
        tops = np.unique(hashes.astype(np.int64) >> 32)
        lo = tops << 32
        row_h = self.index.hashes_between(lo, lo + _LOW)
        if row_h.size <= PREFETCH_ROWS:
            self._chunk = ChunkRows(tops, *self.reader.rows_of(row_h) if row_h.size else (None, None, None))
        return {}

    def scan(self) -> Iterator[tuple[int, str, Any]]:
        """Every key with a live row, as ``(key hash, key text, STORED)`` in (hash, key) order: the
        keys an outer grouping or a broadcast to the stored keys visits. It reads the key columns of
        every stored row (what visiting every key costs); a key's rows are read again through the
        index only as its translator asks for them."""
        held: dict[int, set[str]] = {}  # the keys of each top-32-bit value not yet complete
        for rows, _, _ in self.reader.scan():
            if rows.num_rows == 0:
                continue
            slim = rows.select(["_key", "_h", RK, "_epoch", "_alive"]).to_pylist()
            for (k, _), r in _newest(slim).items():  # a row's versions share its hash, so one chunk
                if r["_alive"]:
                    held.setdefault(int(r["_h"]) >> 32, set()).add(k)
            last = max(int(h) for h in rows["_h"].to_pylist()) >> 32
            for top in sorted(t for t in held if t < last):  # later chunks hold only hashes above this one's
                yield from self._keys(held.pop(top))
        for top in sorted(held):
            yield from self._keys(held.pop(top))

    def _keys(self, keys: set[str]) -> Iterator[tuple[int, str, Any]]:
        texts = sorted(keys)
        self.keys_read += len(texts)
        for kh, k in sorted(zip(spark_xxhash64(texts).tolist(), texts)):
            yield kh, k, STORED

    def rows_for(self, g: Group) -> KeyedRows:
        return KeyedRows(self, g.key, g.h, self.fields, self.schema.decoded_copy, _kinds(self.schema, self.fields))

    def records(self, g: Group, old: OldState | None) -> KeyedRows:
        return self.rows_for(g)

    def _rows(self, hashes: np.ndarray) -> tuple[list[dict[str, Any]], np.ndarray, np.ndarray]:
        """The stored rows at these row hashes (every version the index's row groups hold), with
        their file ids and row groups: from the chunk's rows read by :meth:`lookup` when they
        hold the hashes' key, else read now."""
        if not self.index.live_keys or not hashes.size:
            return [], np.empty(0, np.int32), np.empty(0, np.int32)
        if self._chunk is not None and self._chunk.holds(int(hashes[0])):  # a key's row hashes share their top bits
            return self._chunk.at(hashes)
        rows, fids, rgs = self.reader.rows_of(sorted_unique(np.sort(hashes)))
        return rows.to_pylist(), fids, rgs

    def key_versions(self, kh: int) -> int | None:
        """The row versions of the key with hash ``kh`` in the rows :meth:`lookup` read for the chunk
        (None: not read with it)."""
        if not self.index.live_keys:
            return 0
        return self._chunk.of_key(kh).num_rows if self._chunk is not None and self._chunk.holds(kh) else None

    def fetch(self, key_text: str, kh: int, texts: list[str]) -> dict[str, dict[str, Any]]:
        """The live stored rows of ``key_text`` with these row key texts, in storage form (user fields)."""
        rows, _, _ = self._rows(row_hashes(kh, texts))
        want = set(texts)
        found = {rk: r for (k, rk), r in _newest(rows).items() if k == key_text and rk in want and r["_alive"]}
        self.rows_read += len(found)
        return {rk: {f: r[f] for f in self.schema.fields} for rk, r in found.items()}

    def iterate(self, key_text: str, kh: int) -> Iterator[dict[str, Any]]:
        """Every live row of ``key_text``, decoded, READ_CHUNK row hashes at a time."""
        held = self._chunk.of_key(kh) if self._chunk is not None and self._chunk.holds(kh) else None
        one = held is not None and held.num_rows <= READ_CHUNK  # (else in READ_CHUNK row hashes, as read)
        for rows in [held.to_pylist()] if one else self._read_range(kh):  # type: ignore[union-attr]
            for (k, _), r in sorted(_newest(rows).items()):
                if k == key_text and r["_alive"]:
                    self.rows_read += 1
                    yield self.schema.decoded_copy({f: r[f] for f in self.schema.fields})

    def _read_range(self, kh: int) -> Iterator[list[dict[str, Any]]]:
        """The stored rows of the key hashes' range (:func:`key_range`), READ_CHUNK row hashes at a time."""
        lo, hi = key_range(kh)
        hashes = self.index.hashes_between(lo, hi)
        for a in range(0, hashes.size, READ_CHUNK):
            yield self._rows(hashes[a : a + READ_CHUNK])[0]

    def update(self, key_text: str, h: int, old: OldState | None, new: StateRecords) -> None:
        """Apply the call's writes and deletes (:class:`KeyedOut`); ``new`` is unused (keyed rows go
        through ``out.state``)."""
        ops = self.out.take()
        if not ops:
            return
        texts = list(ops)
        hs = row_hashes(h, texts)
        rows, fids, rgs = self._rows(hs)
        newest = _newest(rows)
        names = list(self.schema.fields)
        stored = {rk: {f: r[f] for f in names} for (k, rk), r in newest.items() if k == key_text and r["_alive"]}
        changed = {
            t: rec
            for t, rec in ops.items()
            if (rec is None and t in stored) or (rec is not None and stored.get(t) != rec)
        }
        if not changed:
            return
        at = dict(zip(texts, hs.tolist()))
        touched = {at[t] for t in changed}
        epoch = self.plan.epoch
        out = [_row(key_text, at[t], epoch, t, rec) for t, rec in changed.items()]
        # rows sharing a changed row's hash lose their index entries with it: rewrite them as they are
        copies = [
            {**r, "_epoch": epoch}
            for (k, rk), r in newest.items()
            if r["_alive"] and r["_h"] in touched and not (k == key_text and rk in changed)
        ]
        if rows:
            hh = np.array([r["_h"] for r in rows], np.int64)
            sel = np.isin(hh, np.fromiter(touched, np.int64, len(touched)))
            self.drop_rows(hh[sel], fids[sel].astype(np.int32), rgs[sel].astype(np.int32))
        self.keys_written += 1
        self.rows_written += len(changed)
        self.keyed_writer.put(h, out, copies)

    def finish(self, stats: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]], list[dict[str, Any]]]:
        res = super().finish(stats)
        stats.update(state_read=self.rows_read, rows_read=self.rows_read, rows_written=self.rows_written)
        return res


class _Stored:
    """A key's rows in memory (black-box mode: they came with the input), for :class:`KeyedRows`."""

    def __init__(
        self, rows: dict[str, dict[str, Any]], decode: Callable[[dict[str, Any]], dict[str, Any]], owner: Any
    ) -> None:
        self.rows, self.decode, self.owner = rows, decode, owner

    def fetch(self, key_text: str, kh: int, texts: list[str]) -> dict[str, dict[str, Any]]:
        return {t: self.rows[t] for t in texts if t in self.rows}

    def iterate(self, key_text: str, kh: int) -> Iterator[dict[str, Any]]:
        for rk in sorted(self.rows):
            yield self.decode(self.rows[rk])


class KeyedBlackbox(BlackboxPartition):
    """A black-box state partition of keyed rows: a key's rows came with its input (all of them);
    the call's writes and deletes are applied to them and every row is written again."""

    kind = "keyed-blackbox"

    def __init__(self, plan: TaskPlan, p: int) -> None:
        super().__init__(plan, p)
        st = plan.stage
        assert st.state_schema is not None
        self.fields, self.schema = st.row_key, st.state_schema
        self.keyed_writer = KeyedWriter(plan, p, prefix=f"e{plan.epoch:08d}-full")
        self.writer = self.keyed_writer
        self.out = KeyedOut(st.name, st.state_schema, st.row_key)

    def records(self, g: Group, old: OldState | None) -> KeyedRows:
        return self.rows_for(g)

    def rows_for(self, g: Group) -> KeyedRows:
        rows = {rk_text(self.fields, r): r for r in g.state}
        return KeyedRows(
            _Stored(rows, self.schema.decoded_copy, self),
            g.key,
            g.h,
            self.fields,
            self.schema.decoded_copy,
            _kinds(self.schema, self.fields),
        )

    def update(self, key_text: str, h: int, old: OldState | None, new: StateRecords) -> None:
        """Write the key's rows (``old``, as stored) with the call's writes and deletes applied."""
        ops = self.out.take()
        stored = old.stored if old is not None else []
        rows = {rk_text(self.fields, r): r for r in stored}
        before = dict(rows)
        for t, rec in ops.items():
            if rec is None:
                rows.pop(t, None)
            else:
                rows[t] = rec
        self.keys_read += 1 if old else 0
        self.keys_written += 1 if rows != before else 0
        texts = sorted(rows)
        hs = row_hashes(h, texts).tolist() if texts else []
        epoch = self.plan.epoch
        self.keyed_writer.put(h, [_row(key_text, hh, epoch, t, rows[t]) for t, hh in zip(texts, hs)])


def state_partition(plan: TaskPlan, p: int, calls: Any) -> StatePartition:
    """The state partition of a task, of the plan's kind (:attr:`cbp.engine.task.plan.EnginePath.partition`);
    for keyed rows, its :class:`KeyedOut` becomes ``out.state`` of the task's translator calls (``calls``:
    :class:`cbp.engine.task.calls._Calls`), its rows checked as other state records are (the same
    failures and codes)."""
    kind = plan.path.partition
    if kind == "none":
        return NoState(plan, p)
    if kind in ("direct", "blackbox"):
        return DirectPartition(plan, p) if kind == "direct" else BlackboxPartition(plan, p)
    part: KeyedPartition | KeyedBlackbox = KeyedPartition(plan, p) if kind == "keyed-direct" else KeyedBlackbox(plan, p)

    def check(record: Any) -> dict[str, Any]:
        calls._sink("state", record)
        return calls.state_out.pop()  # type: ignore[no-any-return]

    part.out.check = check
    emitter = calls.emitter
    emitter._writers["state"] = part.out
    emitter.__dict__["state"] = part.out
    return part
