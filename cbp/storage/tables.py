"""A home's Delta tables: opening, creating and committing them, and writing their data files.

:class:`DeltaTables` is a part of :class:`cbp.storage.home.Home`. Tasks write the data files
(:meth:`DeltaTables.write_parquet`); the driver commits them. The controller is the only writer of
a home's tables (under the home's lock or lease), so a commit needs nothing of the table's past:
:class:`TableHead` keeps, per table, its version, live files and application transactions, loaded
once per process by delta-rs and then kept up to date by the commits themselves. A commit writes
the next ``_delta_log/<version>.json`` (Delta's commit format: ``commitInfo``, ``txn``, ``add``,
``remove``) only if it does not exist yet (a hard link on a local disk, ``If-None-Match`` on S3),
so its cost follows the files it adds and removes, not the table's age or size. delta-rs's own
commit rebuilds its view of the table's live files and tombstones at every commit, a cost that
grows with every epoch run (measured in ``bench/RESULTS.md``). Checkpoints, which readers load
from, are still delta-rs's (:func:`cbp.storage.deltalog.checkpoint_due` says when).

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
import os
import threading
import time
import uuid
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake import Schema as DeltaSchema

from ..errors import RuntimeStateError
from .deltalog import (
    TABLE_CONFIG,
    TIDY_EVERY,
    TableHead,
    checkpoint_due,
    commit_actions,
    delta_rs_actions,
    drop_spent_tombstones,
    live_file,
    partition_columns,
)
from .layout import LAYOUT

if TYPE_CHECKING:
    import pyarrow.fs as pafs

_DIFF = "_diff"  # a signed record's multiplicity column (cbp.spec.schema.DIFF)

__all__ = ["DeltaTables", "RemovedElsewhere", "TABLE_CONFIG", "LANDED_CODEC"]

#: The codec of the increments the controller lands (feeds, a source table's versions, outputs framed
#: in the driver): zstd, not LZ4. pyarrow's LZ4 (Parquet's LZ4_RAW) writes pages that Spark's reader
#: (aircompressor's LZ4 decompressor) refuses: TPC-H SF 0.1's lineitem landed in LZ4 failed Spark's
#: read of ``l_shipdate`` with "MalformedInputException: attempt to write last literal outside of
#: destination buffer", so the bulk build fell back to the per-key path (``docs/benchmarks/tpch.md``,
#: eighth round). LZ4 would have written it in 0.35 CPU s against 0.46.
LANDED_CODEC = "zstd"


class RemovedElsewhere(Exception):
    """A commit removes files the table no longer holds (another writer's ``OPTIMIZE`` removed them
    first): Delta's conflict rule for a remove of a removed file. ``args[0]``: the paths."""


class DeltaTables:
    """The Delta-table part of a home (mixed into :class:`cbp.storage.home.Home`)."""

    _heads: dict[str, TableHead]
    _signed_tables: set[str]  # flow tables known to have the ``_diff`` column
    _tables_lock: threading.Lock

    if TYPE_CHECKING:  # what Home provides

        @property
        def fs(self) -> pafs.FileSystem: ...
        @property
        def storage_options(self) -> dict[str, str] | None: ...
        def uri(self, *parts: str) -> str: ...
        def path(self, *parts: str) -> str: ...
        def exists(self, rel: str) -> bool: ...
        def read_bytes(self, rel: str) -> bytes: ...
        def create_file(self, rel: str, data: bytes) -> bool: ...
        def make_parent(self, path: str) -> None: ...
        def local_dir(self) -> str | None: ...

    def table(self, rel: str, version: int | None = None) -> DeltaTable | None:
        """The Delta table at ``rel`` (its newest version, or ``version``), or None if there is none.

        A table of its own for the caller to read; the controller's commits use :meth:`_head`.
        """
        uri, so = self.uri(rel), self.storage_options
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

        fs = SubTreeFileSystem(self.path(rel), self.fs)
        return pa.table(dt.to_pyarrow_dataset(file_pruning_predicate=partitions, filesystem=fs).to_table())

    def _head(self, rel: str, wanted: int | None = None) -> TableHead | None:
        """The newest version of the table at ``rel`` as this Home knows it, or None if there is no
        table. Loaded on first use; after that one look for the commit after the version held tells
        whether another process committed since (then delta-rs reads those commits and the head is
        loaded again). No look when the caller wants the version held (``wanted``). Used under the
        home's lock."""
        with self._tables_lock:
            h = self._heads.get(rel)
            if h is not None and wanted is not None and h.version == wanted:
                return h
            uri = self.uri(rel)
            try:
                if h is None:
                    so = self.storage_options
                    if not DeltaTable.is_deltatable(uri, storage_options=so):
                        return None
                    h = self._heads[rel] = TableHead.load(DeltaTable(uri, storage_options=so))
                    h.checkpoint_size = self._checkpoint_size(rel)
                elif self.exists(LAYOUT.delta_commit(rel, h.version + 1)):
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

    def ensure_table(
        self, rel: str, schema: pa.Schema, partition_by: str, config: dict[str, str] | None = None
    ) -> DeltaTable | None:
        """Create the table empty (version 0) on first use; None if it existed (not loaded: a load costs).
        ``partition_by`` ``""``: unpartitioned; ``config``: more of the table's configuration."""
        so = self.storage_options
        if rel in self._heads or DeltaTable.is_deltatable(self.uri(rel), storage_options=so):
            if _DIFF in schema.names:
                self._add_diff_column(rel, schema.field(_DIFF), partition_by)
            return None
        try:
            dt = DeltaTable.create(
                self.uri(rel),
                schema=schema,
                partition_by=partition_columns(partition_by) or None,
                storage_options=so,
                configuration={**TABLE_CONFIG, **(config or {})},
            )
        except Exception as e:
            raise RuntimeStateError(f"cannot create Delta table {self.uri(rel)}: {e}") from e
        with self._tables_lock:
            self._heads[rel] = TableHead.load(dt)
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
            )
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
        removes_live: bool = False,
        checkpoint: bool = True,
    ) -> tuple[int, bool]:
        """Commit as :meth:`commit_files` unless the table already holds transaction ``app_id`` at
        ``app_version`` or later; return the table's version and whether this call committed.
        ``schema``: the table's new schema from this version on (a ``metaData`` action; cbp upgrade).
        ``removes_live``: :class:`RemovedElsewhere` (nothing committed) if a file it removes is no
        longer in the table (a table other writers also write). ``checkpoint=False`` (a feed's
        commit): a checkpoint that falls due is left to :meth:`write_due_checkpoints` (after the
        next epoch), unless the table went its whole ``delta.checkpointInterval`` without one."""
        h = self._head(rel)
        if h is None:
            raise RuntimeStateError(
                f"Delta table {self.uri(rel)} is missing; it was created before this commit was planned"
            )
        if h.transaction_version(app_id) >= app_version:
            return h.version, False
        if removes_live and not overwrite:
            removes = list(removes)
            gone = [r["path"] for r in removes if r["path"] not in h.files]
            if gone:
                raise RemovedElsewhere(gone)
        self._commit(rel, h, partition_by, adds, removes, overwrite, app_id, app_version, schema, checkpoint)
        return h.version, True

    def _commit(
        self,
        rel: str,
        h: TableHead,
        partition_by: str,
        adds: Iterable[dict[str, Any]],
        removes: Iterable[dict[str, Any]],
        overwrite: bool,
        app_id: str | None,
        app_version: int | None,
        schema: pa.Schema | None = None,
        checkpoint: bool = True,
    ) -> None:
        """Write the table's next commit (Delta's JSON actions) unless another writer made it first,
        then bring ``h`` up to it and write a checkpoint when one is due (``checkpoint=False``: only
        when the table's interval is reached, see :meth:`commit_once`)."""
        if not h.plain:
            self._commit_by_delta_rs(rel, h, partition_by, adds, removes, overwrite, app_id, app_version, schema)
            return
        now = int(time.time() * 1000)
        added = [live_file(a, partition_by) for a in adds]
        dropped = list(h.files.values()) if overwrite else [live_file(r, partition_by) for r in removes]
        lines = commit_actions(h, partition_by, added, dropped, overwrite, app_id, app_version, schema, now)
        version = h.version + 1
        data = "\n".join(json.dumps(line, separators=(",", ":")) for line in lines).encode() + b"\n"
        if not self.create_file(LAYOUT.delta_commit(rel, version), data):
            with self._tables_lock:
                self._heads.pop(rel, None)  # loaded again, with the other writer's commit, next time
            raise RuntimeStateError(
                f"another writer made version {version} of Delta table {self.uri(rel)} while cbp was committing "
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
        if checkpoint_due(h) and (checkpoint or h.since >= h.interval):
            self._checkpoint(rel, h)

    def write_due_checkpoints(self) -> list[str]:
        """Write the checkpoints that commits left due (a feed's: :meth:`commit_once` with
        ``checkpoint=False``), for the tables this Home has open; the tables checkpointed. Called
        under the home's lock once a stage epoch committed (:mod:`cbp.controller.journal`), so that
        a feed never waits for a checkpoint whose cost grows with the table's live files and
        tombstones (what an old home holds more of than a young one)."""
        with self._tables_lock:
            due = [(rel, h) for rel, h in self._heads.items() if h.plain and checkpoint_due(h)]
        for rel, h in due:
            self._checkpoint(rel, h)
        return [rel for rel, _h in due]

    def _commit_by_delta_rs(
        self,
        rel: str,
        h: TableHead,
        partition_by: str,
        adds: Iterable[dict[str, Any]],
        removes: Iterable[dict[str, Any]],
        overwrite: bool,
        app_id: str | None,
        app_version: int | None,
        schema: pa.Schema | None = None,
    ) -> None:
        """Commit through delta-rs (tables whose protocol cbp's own commits do not speak)."""
        actions = delta_rs_actions(adds, removes, partition_by)
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
            partition_by=partition_columns(partition_by) or None,
            commit_properties=props,
        )
        dt.update_incremental()
        h.reload()

    def _checkpoint(self, rel: str, h: TableHead) -> None:
        """Write delta-rs's checkpoint of version ``h.version`` without the tombstones of files cbp's
        retention deleted (on a local home: :func:`cbp.storage.deltalog.drop_spent_tombstones`), and
        at the first one 100 versions or more after the last clean-up, delete log files older than
        the table's log retention. Never fatal: without it readers read more log; a failed one is
        tried again when the next is due."""
        h.since = h.actions = 0
        try:
            h.dt.update_incremental()
            if h.dt.version() != h.version:
                return
            h.dt.create_checkpoint()
            local = self.local_dir()
            if local is not None:
                drop_spent_tombstones(os.path.join(local, rel))
            h.checkpoint_size = self._checkpoint_size(rel)
            if h.version - h.tidied >= TIDY_EVERY:
                h.tidied = h.version
                h.dt.cleanup_metadata()
        except Exception:  # a missing checkpoint or clean-up is harmless: readers read more log
            pass

    def _checkpoint_size(self, rel: str) -> int:
        """The number of actions in the table's last checkpoint (Delta's ``_last_checkpoint``), 0 if unknown."""
        try:
            return int(json.loads(self.read_bytes(LAYOUT.delta_last_checkpoint(rel)))["size"])
        except (OSError, ValueError, KeyError, TypeError):
            return 0

    def head_files(self, rel: str) -> tuple[int, list[dict[str, Any]], dict[str, str]] | None:
        """The newest version of the table at ``rel`` (another writer's commits included), its live files
        (as :meth:`table_files`) and its configuration; None if there is no table."""
        h = self._head(rel)
        if h is None:
            return None
        with self._tables_lock:
            return h.version, [dict(f) for f in h.files.values()], dict(h.dt.metadata().configuration)

    def table_files(self, rel: str, version: int) -> list[dict[str, Any]]:
        """The live data files of a table version: path (relative), size, mtime, rows, partition value."""
        h = self._head(rel, wanted=version)
        with self._tables_lock:
            if h is not None and h.version == version:
                return [dict(f) for f in h.files.values()]
        dt = self.table(rel, version)
        return [] if dt is None else list(TableHead.load(dt).files.values())

    def write_parquet(
        self,
        rel_dir: str,
        table: pa.Table,
        prefix: str,
        partition: Any,
        row_group_size: int = 65536,
        compression: str = "zstd",
        text_statistics: bool = True,
        sampled_dictionary: bool = False,
    ) -> dict[str, Any]:
        """Write a data file into a table's partition directory; return its future add action.
        ``text_statistics=False``: no min/max statistics of string and binary columns (13% of LZ4's
        writing time for TPC-H's lineitem; readers prune row groups by them only on ranges of
        text, and read the rows alike without them). ``sampled_dictionary``: dictionary encoding only
        for the columns that a sample says repeat their values (:func:`_repeating`), not tried and
        given up on for every row group of a column of distinct values (an order key, a comment)."""
        name = f"{prefix}-{uuid.uuid4().hex[:12]}.parquet"
        rel = f"{rel_dir}/{name}"
        path = self.path(rel)
        self.make_parent(path)
        stats: bool | list[str] = text_statistics or [f.name for f in table.schema if not _is_text(f.type)]
        with self.fs.open_output_stream(path) as out:  # its size counted as written: no look at the file after
            pq.write_table(
                table,
                out,
                row_group_size=row_group_size,
                compression=compression,
                write_statistics=stats,
                use_dictionary=_repeating(table) if sampled_dictionary else True,
            )
            size = out.tell()
        return {
            "rel": rel,
            "size": size,
            "mtime": int(time.time() * 1000),
            "rows": table.num_rows,
            "partition": partition,
        }


def _is_text(t: pa.DataType) -> bool:
    """Whether a column holds strings or bytes (its statistics cost the most to write)."""
    return bool(
        pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)
    )


#: :func:`_repeating`'s sample: the first rows of a table, and the distinct values in it below which
#: a column is dictionary-encoded.
_SAMPLE_ROWS, _SAMPLE_DISTINCT = 8192, 4096


def _repeating(table: pa.Table) -> list[str]:
    """The columns worth a dictionary: those with fewer than half as many distinct values as rows
    among the first :data:`_SAMPLE_ROWS` (and every nested column, left to the writer). For TPC-H's
    lineitem: every column but the part key, the price and the comment (8 ms for SF 0.1's table)."""
    sample = table.slice(0, _SAMPLE_ROWS)
    limit = min(_SAMPLE_DISTINCT, max(sample.num_rows // 2, 1))
    return [f.name for f in table.schema if _distinct(sample.column(f.name)) < limit]


def _distinct(col: pa.ChunkedArray) -> int:
    """The distinct values of a column, 0 for one Arrow does not count (nested, all-null: the writer's choice)."""
    if pa.types.is_nested(col.type) or pa.types.is_null(col.type):
        return 0
    try:
        return int(pc.count_distinct(col).as_py())
    except pa.ArrowNotImplementedError:
        return 0
