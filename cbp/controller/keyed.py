"""Keyed external flows (AUTO CDC): each feed is a set of upserts and deletes by key.

A flow declared with ``key: [fields]`` keeps its current row per key in a Delta table of its own
in the home (``keyed/<flow>``, partitioned in :data:`BUCKETS` buckets by a hash of the key, so a
feed rewrites only the buckets its keys fall in). A feed's records are events: an upsert (``_diff``
+1) or a delete (``_diff`` -1, or the ``delete_when`` field true). cbp turns them into the signed
changes they make to the flow's contents, ``-old`` and ``+new`` per key (nothing for a row that
does not change), and lands those, together with the keyed table's new version, as one durable
change (:meth:`~.journal.Journal.commit`): a feed lands whole or not at all.

Order: without ``sequence_by`` the events apply in feed order, feed after feed, and a delete of a
key that has no row is an error (``retract-missing``, naming the flow, the row and the feed;
nothing of the feed lands). With ``sequence_by`` the event with the greatest sequence wins (on a
tie, the later one); an event older than the key's row is dropped, and a deleted key keeps a
*tombstone* with its sequence, so a late event never brings it back. A delete of a key with no
row then only leaves a tombstone (the insert it deletes may still be on its way).

Reads: ``live.spec`` (the flow's key, schema, ``sequence_by``, ``delete_when``), the keyed table's
files in the buckets a feed touches. Writes: new files of those buckets (returned as the commit
for :class:`~.landing.Landing` to make with the feed); nothing in the snapshot.

    >>> from cbp.spec.schema import RecordSchema
    >>> s = RecordSchema.parse({"id": "int", "v": "int"})
    >>> minus, plus, new = keyed_changes(s, ("id",), None, None, {(1,): ({"id": 1, "v": 5}, False)},
    ...                                  [{"id": 1, "v": 6}, {"id": 2, "v": 1}], [1, 1], "flow 'x' feed 3")
    >>> minus, plus
    ([{'id': 1, 'v': 5}], [{'id': 1, 'v': 6}, {'id': 2, 'v': 1}])
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..errors import InputError, RuntimeStateError
from ..spec.schema import RecordSchema
from ..storage import LAYOUT, Home
from .change import Commit, EntryVersion
from .live import Live

__all__ = ["Keyed", "keyed_changes", "bucket_of", "BUCKETS", "DELETED", "BUCKET", "keyed_rel"]

BUCKETS = 16
DELETED = "_deleted"  # a tombstone: the key was deleted (kept with its sequence)
BUCKET = "_bucket"  # partition column of a keyed table
DIFF = "_diff"
Current = dict[tuple[Any, ...], tuple[dict[str, Any], bool]]  # key -> (row as stored, is a tombstone)


def keyed_rel(flow: str) -> str:
    """The keyed table of ``flow``, relative to the home."""
    return f"keyed/{flow}"


def bucket_of(key: tuple[Any, ...]) -> int:
    """The bucket of a key (stable across processes and Python versions).

    >>> bucket_of((1,)) == bucket_of((1,)), 0 <= bucket_of(("a", 2)) < BUCKETS
    (True, True)
    """
    return zlib.crc32(json.dumps(list(key), separators=(",", ":")).encode()) % BUCKETS


def _short(row: dict[str, Any]) -> str:
    text = json.dumps(row, default=str)
    return text if len(text) <= 200 else text[:200] + "..."


def keyed_changes(
    schema: RecordSchema,
    key: tuple[str, ...],
    sequence_by: str | None,
    delete_when: str | None,
    current: Current,
    rows: list[dict[str, Any]],
    diffs: list[int],
    what: str,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[tuple[Any, ...], tuple[dict[str, Any], bool] | None]]:
    """Apply events ``rows`` (with ``diffs``, +1 upsert / -1 delete) to the ``current`` rows of
    their keys; return the rows retracted, the rows added, and the keys' new entries (None: the
    key has no row and no tombstone). ``what`` names the feed in errors."""
    events: dict[tuple[Any, ...], list[tuple[int, bool, dict[str, Any]]]] = {}
    for i, (row, d) in enumerate(zip(rows, diffs)):
        if d not in (1, -1):
            raise InputError(
                f"{what}: record {i + 1} {_short(row)} has _diff {d}; a keyed flow takes upserts (+1) and deletes "
                "(-1) only; "
                "nothing was landed",
                code="keyed-diff",
            )
        k = tuple(row[f] for f in key)
        deleting = d == -1 or (delete_when is not None and row.get(delete_when) is True)
        events.setdefault(k, []).append((i, deleting, row))
    minus: list[dict[str, Any]] = []
    plus: list[dict[str, Any]] = []
    new: dict[tuple[Any, ...], tuple[dict[str, Any], bool] | None] = {}
    for k, evs in events.items():
        cur = current.get(k)
        old = cur[0] if cur is not None and not cur[1] else None
        state = cur
        if sequence_by is None:
            live = old is not None
            for i, deleting, row in evs:
                if deleting and not live:
                    raise InputError(
                        f"{what}: record {i + 1} deletes key {_short(dict(zip(key, k)))}, which has no row "
                        f"(row {_short(row)}); nothing was landed",
                        code="retract-missing",
                    )
                live = not deleting
                state = (row, False) if not deleting else None
        else:
            for _i, deleting, row in sorted(evs, key=lambda e: (e[2][sequence_by], e[0])):
                if state is not None and row[sequence_by] < state[0][sequence_by]:
                    continue  # late: an older event than the key's row (or tombstone)
                state = (row, deleting)
        if state is cur:
            continue
        now = state[0] if state is not None and not state[1] else None
        if now != old:
            if old is not None:
                minus.append(old)
            if now is not None:
                plus.append(now)
        new[k] = state
    return minus, plus, new


class Keyed:
    """Turns a keyed flow's feed into the signed changes it makes, and the keyed table's new files."""

    def __init__(self, home: Home, live: Live) -> None:
        self.home, self.live = home, live

    def _keyed_schema(self, flow: str) -> pa.Schema:
        return pa.schema(
            [pa.field(BUCKET, pa.int64()), *self.live.spec.flows[flow].schema.arrow, pa.field(DELETED, pa.bool_())]
        )

    def _keyed_current(self, flow: str, buckets: set[int]) -> tuple[Current, dict[int, list[dict[str, Any]]]]:
        """The keyed table's rows in ``buckets`` (key -> (row, tombstone)), and its files per bucket."""
        fl = self.live.spec.flows[flow]
        rel = keyed_rel(flow)
        dt = self.home.table(rel)
        current: Current = {}
        files: dict[int, list[dict[str, Any]]] = {}
        if dt is None:
            return current, files
        for f in self.home.table_files(rel, dt.version()):
            b = int(f["partition"])
            if b not in buckets:
                continue
            files.setdefault(b, []).append(f)
            t = pq.read_table(self.home.path(rel, f["path"]), filesystem=self.home.fs)
            for r in t.select([*fl.schema.fields, DELETED]).to_pylist():
                gone = bool(r.pop(DELETED))
                current[tuple(r[x] for x in fl.key)] = (r, gone)
        return current, files

    def feed(
        self,
        flow: str,
        data: pa.Table,
        number: int,
        feed_id: str | None,
        check: Callable[[pa.Table], None] | None = None,
    ) -> tuple[pa.Table, Commit | None, list[str]]:
        """A feed of keyed flow ``flow`` as the signed changes to land (the flow's fields and ``_diff``),
        the keyed table's commit, and the files written. ``check`` sees the changes before anything
        is written, and may refuse them by raising."""
        fl = self.live.spec.flows[flow]
        fields = list(fl.schema.fields)
        rows = data.select(fields).to_pylist()
        diffs = (
            [1 if d is None else int(d) for d in data.column(DIFF).to_pylist()]
            if DIFF in data.schema.names
            else [1] * len(rows)
        )
        what = f"flow '{flow}' feed {number}" + (f" (id {feed_id!r})" if feed_id is not None else "")
        buckets = {bucket_of(tuple(r[x] for x in fl.key)) for r in rows}
        current, files = self._keyed_current(flow, buckets)
        minus, plus, new = keyed_changes(fl.schema, fl.key, fl.sequence_by, fl.delete_when, current, rows, diffs, what)
        changes = pa.Table.from_pylist(minus + plus, schema=fl.schema.arrow)
        changes = changes.append_column(DIFF, pa.array([-1] * len(minus) + [1] * len(plus), pa.int64()))
        if check is not None:
            check(changes)
        rel = keyed_rel(flow)
        touched = {bucket_of(k) for k in new}
        merged = {k: v for k, v in current.items() if bucket_of(k) in touched}
        for k, v in new.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        self.home.ensure_table(rel, self._keyed_schema(flow), BUCKET)
        adds, written = [], []
        for b in sorted(touched):
            part = [{BUCKET: b, **row, DELETED: gone} for k, (row, gone) in merged.items() if bucket_of(k) == b]
            if not part:
                continue
            try:
                add = self.home.write_parquet(
                    f"{rel}/{BUCKET}={b}",
                    pa.Table.from_pylist(part, schema=self._keyed_schema(flow)).drop_columns([BUCKET]),
                    "k",
                    b,
                )
            except OSError as e:
                raise RuntimeStateError(
                    f"{what}: cannot write to {self.home.uri(rel)}: {e}; nothing was landed", code="io"
                ) from e
            written.append(add["rel"])
            add["path"] = add.pop("rel")[len(rel) + 1 :]
            adds.append(add)
        removes = [f for b in touched for f in files.get(b, [])]
        commit = (
            Commit(
                rel,
                BUCKET,
                tuple(adds),
                tuple(removes),
                "cbp:keyed",
                number,
                (EntryVersion(LAYOUT.feed_entry(flow, number), "keyed_version"),),
            )
            if adds or removes
            else None
        )
        return changes, commit, written
