"""A home's Delta tables: opening, creating and committing them, and writing their data files.

:class:`DeltaTables` is a part of :class:`cbp.storage.home.Home`. Tasks write the data files
(:meth:`DeltaTables.write_parquet`); the driver commits them. The controller is the only writer of
a home's tables (under the home's lock or lease), so a commit needs nothing of the table's past:
:class:`_Head` keeps, per table, its version, live files and application transactions, loaded
once per process by delta-rs and then kept up to date by the commits themselves. A commit writes
the next ``_delta_log/<version>.json`` (Delta's commit format: ``commitInfo``, ``txn``, ``add``,
``remove``) only if it does not exist yet (a hard link on a local disk, ``If-None-Match`` on S3),
so its cost follows the files it adds and removes, not the table's age or size. delta-rs's own
commit rebuilds its view of the table's live files and tombstones at every commit, a cost that
grows with every epoch run (measured in ``bench/RESULTS.md``). Checkpoints, which readers load
from, are still delta-rs's (:meth:`DeltaTables._checkpoint_due` says when).

    >>> import tempfile, pyarrow as pa
    >>> from cbp.storage import Home
    >>> h = Home(tempfile.mkdtemp())
    >>> _ = h.ensure_table("t", pa.schema([("_inc", pa.int64()), ("v", pa.string())]), "_inc")
    >>> add = h.write_parquet("t/_inc=1", pa.table({"v": ["x"]}), "in", 1)
    >>> h.commit_once("t", "_inc", [{**add, "path": add["rel"][2:]}], [], overwrite=False, app_id="demo", app_version=1)
    (1, True)
    >>> h.table("t").to_pyarrow_table().to_pylist()
    [{'_inc': 1, 'v': 'x'}]
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake import Schema as DeltaSchema
from deltalake.transaction import AddAction, RemoveAction

from .. import __version__
from ..errors import RuntimeStateError
from .layout import LAYOUT

_DIFF = "_diff"  # a signed record's multiplicity column (cbp.spec.schema.DIFF)

__all__ = ["DeltaTables"]

#: Tables cbp creates ask for a checkpoint at least every 100 versions (Delta's default; tables
#: made by earlier releases say 10 and keep it). See :meth:`DeltaTables._checkpoint_due`.
TABLE_CONFIG = {"delta.checkpointInterval": "100"}
_DEFAULT_INTERVAL = 100  # Delta's default for a table that does not say
_MIN_INTERVAL = 10  # versions between checkpoints at least (when the table's interval is not smaller)
_LOG_SHARE = 10  # a checkpoint is due once the log after the last one holds a 1/_LOG_SHARE of its actions
_TIDY_EVERY = 100  # versions between clean-ups of expired log files
#: The newest Delta writer protocol cbp's own commits speak (the one cbp's tables are made with: no
#: table features). A table a user upgraded (deletion vectors, row tracking, ...) or made
#: append-only is committed to by delta-rs instead, which knows what those need.
_PLAIN_WRITER = 2


def _file(a: dict[str, Any], partition_by: str) -> dict[str, Any]:
    """A live data file as cbp keeps it: path (relative, as in the log), size, mtime, rows, partition."""
    return {
        "path": a["path"],
        "size": int(a["size"]),
        "mtime": int(a.get("mtime") or 0),
        "rows": a.get("rows"),
        "partition": a.get("partition"),
    }


@dataclass
class _Head:
    """A table as its only writer knows it: the newest version, its live files and its application
    transactions. Loaded once from delta-rs (:meth:`load`); each commit then updates it."""

    dt: DeltaTable  # delta-rs's view, brought up to date only to write a checkpoint
    version: int
    files: dict[str, dict[str, Any]]  # live data files by path
    interval: int  # a checkpoint at least every ``interval`` versions (the table's delta.checkpointInterval)
    plain: bool  # whether cbp's own commits may write it (else delta-rs commits, see _PLAIN_WRITER)
    txns: dict[str, int] = field(default_factory=dict)  # application transaction versions, by id
    since: int = 0  # commits since the last checkpoint (or the load)
    actions: int = 0  # add and remove actions in them
    checkpoint_size: int = 0  # actions in the last checkpoint (live files, tombstones, ...), 0 if unknown
    tidied: int = 0  # the version at which this process last deleted expired log files

    @classmethod
    def load(cls, dt: DeltaTable) -> _Head:
        acts = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
        pcol = next((k for k in (acts[0] if acts else {}) if k.startswith("partition.")), None)
        files = {
            a["path"]: {
                "path": a["path"],
                "size": a["size_bytes"],
                "mtime": a["modification_time"],
                "rows": a.get("num_records"),
                "partition": a[pcol] if pcol else None,
            }
            for a in acts
        }
        try:
            interval = int(dt.metadata().configuration.get("delta.checkpointInterval") or _DEFAULT_INTERVAL)
        except ValueError:
            interval = _DEFAULT_INTERVAL
        protocol = dt.protocol()
        plain = (
            protocol.min_writer_version <= _PLAIN_WRITER
            and dt.metadata().configuration.get("delta.appendOnly", "false") != "true"
        )
        return cls(dt, dt.version(), files, max(1, interval), plain)

    def reload(self) -> None:
        """Take what ``dt`` holds now (after delta-rs read or made commits)."""
        self.__dict__.update(_Head.load(self.dt).__dict__)

    def transaction_version(self, app_id: str) -> int:
        """The newest version of application transaction ``app_id`` (0 if none). delta-rs is asked
        once per id (its answer costs a pass over the log since the checkpoint); cbp's own commits
        keep the answer current after that."""
        if app_id not in self.txns:
            self.txns[app_id] = int(self.dt.transaction_version(app_id) or 0)
        return self.txns[app_id]


class DeltaTables:
    """The Delta-table part of a home (mixed into :class:`cbp.storage.home.Home`)."""

    # Home provides: location, fs, storage_options, uri(), path(), exists(), read_bytes(), create_file(), make_parent().
    _heads: dict[str, _Head]
    _signed_tables: set[str]  # flow tables known to have the ``_diff`` column
    _tables_lock: threading.Lock

    def table(self, rel: str, version: int | None = None) -> DeltaTable | None:
        """The Delta table at ``rel`` (its newest version, or ``version``), or None if there is none.

        A table of its own for the caller to read; the controller's commits use :meth:`_head`.
        """
        uri, so = self.uri(rel), self.storage_options  # type: ignore[attr-defined]
        if not DeltaTable.is_deltatable(uri, storage_options=so):
            return None
        try:
            return DeltaTable(uri, version=version, storage_options=so)
        except Exception as e:  # delta-rs raises several types for a missing version
            raise RuntimeStateError(f"cannot open Delta table {uri} at version {version}: {e}") from e

    def read_table(self, rel: str, version: int | None = None, partitions: Any = None) -> pa.Table | None:
        """The rows of the Delta table at ``rel`` (``partitions``: delta-rs's tuple filters on partition
        columns, pruning whole files as delta-rs's deprecated ``partitions=`` did),
        or None if there is no table. The files are read through the home's own pyarrow filesystem:
        delta-rs's default one (a Python filesystem over its Rust object store) makes the process
        abort at exit now and then ("terminate called without an active exception": 18 runs in 100
        of a one-line read on a loaded machine; none through pyarrow's filesystem).

            >>> import tempfile
            >>> from cbp.storage import Home
            >>> Home(tempfile.mkdtemp()).read_table("none") is None
            True
        """
        dt = self.table(rel, version)
        if dt is None:
            return None
        from pyarrow.fs import SubTreeFileSystem

        fs = SubTreeFileSystem(self.path(rel), self.fs)  # type: ignore[attr-defined]
        return pa.table(dt.to_pyarrow_dataset(file_pruning_predicate=partitions, filesystem=fs).to_table())

    def _head(self, rel: str, wanted: int | None = None) -> _Head | None:
        """The newest version of the table at ``rel`` as this Home knows it, or None if there is no
        table. Loaded on first use; after that one look for the commit after the version held tells
        whether another process committed since (then delta-rs reads those commits and the head is
        loaded again). No look when the caller wants the version held (``wanted``). Used under the
        home's lock."""
        with self._tables_lock:
            h = self._heads.get(rel)
            if h is not None and wanted is not None and h.version == wanted:
                return h
            uri = self.uri(rel)  # type: ignore[attr-defined]
            try:
                if h is None:
                    so = self.storage_options  # type: ignore[attr-defined]
                    if not DeltaTable.is_deltatable(uri, storage_options=so):
                        return None
                    h = self._heads[rel] = _Head.load(DeltaTable(uri, storage_options=so))
                    h.checkpoint_size = self._checkpoint_size(rel)
                elif self.exists(LAYOUT.delta_commit(rel, h.version + 1)):  # type: ignore[attr-defined]
                    h.dt.update_incremental()
                    h.reload()
                    h.checkpoint_size = self._checkpoint_size(rel)
            except Exception as e:
                raise RuntimeStateError(f"cannot open Delta table {uri}: {e}") from e
            return h

    def forget_head(self, rel: str) -> None:
        """Load the table at ``rel`` afresh at its next use (its log was trimmed: cbp.storage.logretention)."""
        with self._tables_lock:
            self._heads.pop(rel, None)

    def ensure_table(self, rel: str, schema: pa.Schema, partition_by: str) -> DeltaTable | None:
        """Create the table empty (version 0) on first use; None if it existed (not loaded: a load costs)."""
        so = self.storage_options  # type: ignore[attr-defined]
        if rel in self._heads or DeltaTable.is_deltatable(self.uri(rel), storage_options=so):  # type: ignore[attr-defined]
            if _DIFF in schema.names:
                self._add_diff_column(rel, schema.field(_DIFF), partition_by)
            return None
        try:
            dt = DeltaTable.create(
                self.uri(rel),
                schema=schema,
                partition_by=[partition_by],
                storage_options=so,  # type: ignore[attr-defined]
                configuration=TABLE_CONFIG,
            )
        except Exception as e:
            raise RuntimeStateError(f"cannot create Delta table {self.uri(rel)}: {e}") from e  # type: ignore[attr-defined]
        with self._tables_lock:
            self._heads[rel] = _Head.load(dt)
        return dt

    def _add_diff_column(self, rel: str, diff: pa.Field, partition_by: str) -> None:
        """Give a flow table written by a cbp before signed records its ``_diff`` column (a
        ``metaData`` commit adding a nullable column, once), so that every reader (cbp, Spark's
        Delta connector, delta-rs) sees the retractions written into it from now on. Files
        without the column read it as null, which is +1. Idempotent: a kill after it is harmless."""
        if rel in self._signed_tables:
            return
        h = self._head(rel)
        if h is not None:
            h.dt.update_incremental()
            current = pa.schema(h.dt.schema().to_arrow())
            if _DIFF not in current.names:
                self._commit(rel, h, partition_by, [], [], False, None, None, current.append(diff))
        self._signed_tables.add(rel)

    def commit_files(
        self,
        rel: str,
        schema: pa.Schema | None,
        partition_by: str,
        adds: Iterable[dict[str, Any]],
        removes: Iterable[dict[str, Any]] = (),
        *,
        overwrite: bool = False,
        app_id: str | None = None,
        app_version: int | None = None,
    ) -> int:
        """Commit files written by tasks (and files to drop) in one Delta transaction; return the version.

        With ``app_id``/``app_version`` the commit carries Delta's application transaction id, so a
        re-run can tell that this epoch was already committed (:meth:`commit_once`). Without
        ``schema`` the table must exist.
        """
        if schema is not None:
            self.ensure_table(rel, schema, partition_by)
        h = self._head(rel)
        if h is None:
            raise RuntimeStateError(
                f"Delta table {self.uri(rel)} is missing; it was created before this commit was planned"
            )  # type: ignore[attr-defined]
        self._commit(rel, h, partition_by, adds, removes, overwrite, app_id, app_version)
        return h.version

    def commit_once(
        self,
        rel: str,
        partition_by: str,
        adds: Iterable[dict[str, Any]],
        removes: Iterable[dict[str, Any]],
        *,
        overwrite: bool,
        app_id: str,
        app_version: int,
        schema: pa.Schema | None = None,
    ) -> tuple[int, bool]:
        """Commit as :meth:`commit_files` unless the table already holds transaction ``app_id`` at
        ``app_version`` or later; return the table's version and whether this call committed.
        ``schema``: the table's new schema from this version on (a ``metaData`` action; cbp upgrade)."""
        h = self._head(rel)
        if h is None:
            raise RuntimeStateError(
                f"Delta table {self.uri(rel)} is missing; it was created before this commit was planned"
            )  # type: ignore[attr-defined]
        if h.transaction_version(app_id) >= app_version:
            return h.version, False
        self._commit(rel, h, partition_by, adds, removes, overwrite, app_id, app_version, schema)
        return h.version, True

    def _commit(
        self,
        rel: str,
        h: _Head,
        partition_by: str,
        adds: Iterable[dict[str, Any]],
        removes: Iterable[dict[str, Any]],
        overwrite: bool,
        app_id: str | None,
        app_version: int | None,
        schema: pa.Schema | None = None,
    ) -> None:
        """Write the table's next commit (Delta's JSON actions) unless another writer made it first,
        then bring ``h`` up to it and write a checkpoint when one is due."""
        if not h.plain:
            self._commit_by_delta_rs(rel, h, partition_by, adds, removes, overwrite, app_id, app_version, schema)
            return
        now = int(time.time() * 1000)
        added = [_file(a, partition_by) for a in adds]
        dropped = list(h.files.values()) if overwrite else [_file(r, partition_by) for r in removes]
        op = "WRITE" if added or overwrite else "DELETE" if dropped or schema is None else "ADD COLUMNS"
        params = (
            {"mode": "Overwrite" if overwrite else "Append", "partitionBy": json.dumps([partition_by])}
            if op == "WRITE"
            else {}
        )
        lines: list[dict[str, Any]] = [
            {
                "commitInfo": {
                    "timestamp": now,
                    "operation": op,
                    "operationParameters": params,
                    "engineInfo": f"cbp/{__version__}",
                    "clientVersion": f"cbp-{__version__}",
                }
            }
        ]
        if app_id is not None:
            lines.append({"txn": {"appId": app_id, "version": int(app_version or 0), "lastUpdated": now}})
        if schema is not None:
            lines.append({"metaData": _metadata(h.dt, schema)})
        lines += [
            {
                "add": {
                    "path": quote(f["path"], safe="/=-_.~"),
                    "partitionValues": {partition_by: _value(f["partition"])},
                    "size": f["size"],
                    "modificationTime": f["mtime"],
                    "dataChange": True,
                    **({"stats": json.dumps({"numRecords": int(f["rows"])})} if f["rows"] is not None else {}),
                }
            }
            for f in added
        ]
        lines += [
            {
                "remove": {
                    "path": quote(f["path"], safe="/=-_.~"),
                    "deletionTimestamp": now,
                    "dataChange": True,
                    "extendedFileMetadata": True,
                    "partitionValues": {partition_by: _value(f["partition"])},
                    "size": f["size"],
                }
            }
            for f in dropped
        ]
        version = h.version + 1
        data = "\n".join(json.dumps(line, separators=(",", ":")) for line in lines).encode() + b"\n"
        if not self.create_file(LAYOUT.delta_commit(rel, version), data):  # type: ignore[attr-defined]
            with self._tables_lock:
                self._heads.pop(rel, None)  # loaded again, with the other writer's commit, next time
            raise RuntimeStateError(
                f"another writer made version {version} of Delta table {self.uri(rel)} while cbp was committing "  # type: ignore[attr-defined]
                "to it; cbp's tables are written by cbp alone. Nothing of this commit was made; the next "
                "'cbp run' or 'cbp feed' tries again",
                code="io",
            )
        with self._tables_lock:
            h.version = version
            h.since += 1
            h.actions += len(added) + len(dropped)
            for f in dropped:
                h.files.pop(f["path"], None)
            h.files.update((f["path"], f) for f in added)
            if app_id is not None:
                h.txns[app_id] = int(app_version or 0)
        if self._checkpoint_due(h):
            self._checkpoint(rel, h)

    @staticmethod
    def _checkpoint_due(h: _Head) -> bool:
        """Whether to write a checkpoint now: at least every ``delta.checkpointInterval`` versions,
        and sooner (every 10 versions or more) once the commits since the last one hold a tenth as
        many actions as the last checkpoint (live files and tombstones). A checkpoint costs a pass
        over all of those, so it is written once per a tenth of that many actions: per commit its
        cost stays flat however large the table grows (a fixed interval's cost grows with the
        table), and a reader's log after the checkpoint stays a small share of what it reads anyway."""
        if h.since >= h.interval:
            return True
        return h.since >= min(_MIN_INTERVAL, h.interval) and _LOG_SHARE * h.actions >= max(
            h.checkpoint_size, len(h.files)
        )

    def _commit_by_delta_rs(
        self,
        rel: str,
        h: _Head,
        partition_by: str,
        adds: Iterable[dict[str, Any]],
        removes: Iterable[dict[str, Any]],
        overwrite: bool,
        app_id: str | None,
        app_version: int | None,
        schema: pa.Schema | None = None,
    ) -> None:
        """Commit through delta-rs (tables whose protocol cbp's own commits do not speak)."""
        actions: list[Any] = [
            AddAction(
                f["path"],
                f["size"],
                {partition_by: _value(f["partition"])},
                f["mtime"],
                True,
                json.dumps({"numRecords": int(f["rows"] or 0)}),
            )
            for f in map(lambda a: _file(a, partition_by), adds)
        ]
        actions += [
            RemoveAction(f["path"], True, f["mtime"], f["size"], {partition_by: _value(f["partition"])})
            for f in map(lambda r: _file(r, partition_by), removes)
        ]
        props = (
            CommitProperties(app_transactions=[Transaction(app_id, int(app_version or 0))])
            if app_id is not None
            else None
        )
        dt = h.dt
        dt.update_incremental()
        new_schema = dt.schema() if schema is None else DeltaSchema.from_arrow(schema)
        dt.create_write_transaction(
            actions,
            mode="overwrite" if overwrite else "append",
            schema=new_schema,
            partition_by=[partition_by],
            commit_properties=props,
        )
        dt.update_incremental()
        h.reload()

    def _checkpoint(self, rel: str, h: _Head) -> None:
        """Write delta-rs's checkpoint of version ``h.version`` (and, at the first one 100 versions or
        more after the last clean-up, delete log files older than the table's log retention). Never
        fatal: without it readers read more log; a failed one is tried again when the next is due."""
        h.since = h.actions = 0
        try:
            h.dt.update_incremental()
            if h.dt.version() != h.version:
                return
            h.dt.create_checkpoint()
            h.checkpoint_size = self._checkpoint_size(rel)
            if h.version - h.tidied >= _TIDY_EVERY:
                h.tidied = h.version
                h.dt.cleanup_metadata()
        except Exception:  # a missing checkpoint or clean-up is harmless: readers read more log
            pass

    def _checkpoint_size(self, rel: str) -> int:
        """The number of actions in the table's last checkpoint (Delta's ``_last_checkpoint``), 0 if unknown."""
        try:
            return int(json.loads(self.read_bytes(LAYOUT.delta_last_checkpoint(rel)))["size"])  # type: ignore[attr-defined]
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def table_files(self, rel: str, version: int) -> list[dict[str, Any]]:
        """The live data files of a table version: path (relative), size, mtime, rows, partition value."""
        h = self._head(rel, wanted=version)
        with self._tables_lock:
            if h is not None and h.version == version:
                return [dict(f) for f in h.files.values()]
        dt = self.table(rel, version)
        return [] if dt is None else list(_Head.load(dt).files.values())

    def write_parquet(
        self, rel_dir: str, table: pa.Table, prefix: str, partition: Any, row_group_size: int = 65536
    ) -> dict[str, Any]:
        """Write a data file into a table's partition directory; return its future add action."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}.parquet"
        rel = f"{rel_dir}/{name}"
        path = self.path(rel)  # type: ignore[attr-defined]
        self.make_parent(path)  # type: ignore[attr-defined]
        with self.fs.open_output_stream(path) as out:  # type: ignore[attr-defined]  # its size counted as written: no look at the file after
            pq.write_table(table, out, row_group_size=row_group_size, compression="zstd")
            size = out.tell()
        return {
            "rel": rel,
            "size": size,
            "mtime": int(time.time() * 1000),
            "rows": table.num_rows,
            "partition": partition,
        }


def _metadata(dt: DeltaTable, schema: pa.Schema) -> dict[str, Any]:
    """The ``metaData`` action that gives table ``dt`` a new schema, all else as it was."""
    dt.update_incremental()
    m = dt.metadata()
    return {
        "id": m.id,
        "name": m.name,
        "description": m.description,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": DeltaSchema.from_arrow(schema).to_json(),
        "partitionColumns": list(m.partition_columns),
        "createdTime": m.created_time,
        "configuration": dict(m.configuration),
    }


def _value(v: Any) -> str | None:
    """A partition value as Delta writes it in the log (a string, or null)."""
    return None if v is None else str(v)
