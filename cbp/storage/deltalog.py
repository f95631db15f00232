"""A Delta table's log as cbp's own commits write it: what a table's only writer knows of it
(:class:`TableHead`: version, live files, application transactions, loaded once from delta-rs), the
JSON actions of its next commit (:func:`commit_actions`: ``commitInfo``, ``txn``, ``metaData``,
``add``, ``remove``), the same as delta-rs actions for the tables cbp's commits do not speak
(:func:`delta_rs_actions`), when a checkpoint is due (:func:`checkpoint_due`), and a checkpoint
rid of the tombstones of files no longer there (:func:`drop_spent_tombstones`).
:class:`cbp.storage.tables.DeltaTables` writes and reads them."""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema
from deltalake.transaction import AddAction, RemoveAction

from .. import __version__
from .localfiles import replace_file

__all__ = [
    "TABLE_CONFIG",
    "TIDY_EVERY",
    "TableHead",
    "checkpoint_due",
    "commit_actions",
    "delta_rs_actions",
    "drop_spent_tombstones",
    "live_file",
    "partition_columns",
]

TABLE_CONFIG = {"delta.checkpointInterval": "100"}
_DEFAULT_INTERVAL = 100  # Delta's default for a table that does not say
_MIN_INTERVAL = 10  # versions between checkpoints at least (when the table's interval is not smaller)
_LOG_SHARE = 10  # a checkpoint is due once the log after the last one holds a 1/_LOG_SHARE of its actions
TIDY_EVERY = 100  # versions between clean-ups of expired log files
#: The newest Delta writer protocol cbp's own commits speak (the one cbp's tables are made with: no
#: table features). A table a user upgraded (deletion vectors, row tracking, ...) or made
#: append-only is committed to by delta-rs instead, which knows what those need.
_PLAIN_WRITER = 2


def live_file(a: dict[str, Any], partition_by: str) -> dict[str, Any]:
    """A live data file as cbp keeps it: path (relative, as in the log), size, mtime, rows, partition."""
    return {
        "path": a["path"],
        "size": int(a["size"]),
        "mtime": int(a.get("mtime") or 0),
        "rows": a.get("rows"),
        "partition": a.get("partition"),
    }


@dataclass
class TableHead:
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
    def load(cls, dt: DeltaTable) -> TableHead:
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
        self.__dict__.update(TableHead.load(self.dt).__dict__)

    def transaction_version(self, app_id: str) -> int:
        """The newest version of application transaction ``app_id`` (0 if none). delta-rs is asked
        once per id (its answer costs a pass over the log since the checkpoint); cbp's own commits
        keep the answer current after that."""
        if app_id not in self.txns:
            self.txns[app_id] = int(self.dt.transaction_version(app_id) or 0)
        return self.txns[app_id]


def checkpoint_due(h: TableHead) -> bool:
    """Whether to write a checkpoint now: at least every ``delta.checkpointInterval`` versions,
    and sooner (every 10 versions or more) once the commits since the last one hold a tenth as
    many actions as the last checkpoint (live files and tombstones). A checkpoint costs a pass
    over all of those, so it is written once per a tenth of that many actions: per commit its
    cost stays flat however large the table grows (a fixed interval's cost grows with the
    table), and a reader's log after the checkpoint stays a small share of what it reads anyway."""
    if h.since >= h.interval:
        return True
    return h.since >= min(_MIN_INTERVAL, h.interval) and _LOG_SHARE * h.actions >= max(h.checkpoint_size, len(h.files))


def drop_spent_tombstones(table_dir: str) -> int | None:
    """Rewrite the newest checkpoint of the local Delta table at ``table_dir`` without the tombstones
    (``remove`` actions) of data files that no longer exist; return how many it dropped (None: no
    single-file checkpoint to rewrite).

    Delta keeps a removed file's tombstone for ``delta.deletedFileRetentionDuration`` (a week) so
    that ``VACUUM`` knows what it may delete, and delta-rs copies every unexpired one into each
    checkpoint: in a table whose files are replaced every epoch, a checkpoint grows with the epochs
    of the last week. cbp's own retention deletes a removed file once no kept version holds it
    (:func:`cbp.storage.logretention.trim_log`); from then on its tombstone tells nobody anything
    (a ``VACUUM`` has nothing left to delete, and no reader of the checkpoint's version or a later
    one needs it for the table's live files). A tombstone whose file is still there is kept, so no
    one's ``VACUUM`` may delete a file earlier than before. The checkpoint is replaced whole
    (written aside, then renamed); ``_last_checkpoint``'s counts follow. A kill between the two
    leaves a checkpoint readers read as before, with counts off by the tombstones dropped (a hint;
    the next checkpoint writes them again)."""
    log = os.path.join(table_dir, "_delta_log")
    try:
        with open(os.path.join(log, "_last_checkpoint"), "rb") as f:
            last = json.loads(f.read())
        version = int(last["version"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    path = os.path.join(log, f"{version:020d}.checkpoint.parquet")
    if last.get("parts") or not os.path.exists(path):
        return None
    actions = pq.read_table(path)
    removes = actions.column("remove")
    paths = pc.struct_field(removes, "path").to_pylist()
    gone = [
        bool(valid) and p is not None and not os.path.exists(os.path.join(table_dir, unquote(p)))
        for valid, p in zip(pc.is_valid(removes).to_pylist(), paths, strict=True)
    ]
    dropped = sum(gone)
    if not dropped:
        return 0
    kept = actions.filter(pa.array([not g for g in gone]))
    buf = io.BytesIO()
    pq.write_table(kept, buf, compression="snappy")
    replace_file(path, buf.getvalue())
    last.update(size=kept.num_rows, sizeInBytes=buf.tell())
    replace_file(os.path.join(log, "_last_checkpoint"), json.dumps(last, separators=(",", ":")).encode())
    return dropped


def commit_actions(
    h: TableHead,
    partition_by: str,
    added: list[dict[str, Any]],
    dropped: list[dict[str, Any]],
    overwrite: bool,
    app_id: str | None,
    app_version: int | None,
    schema: pa.Schema | None,
    now: int,
) -> list[dict[str, Any]]:
    """The actions of the commit after ``h`` that adds ``added`` and removes ``dropped`` (live files),
    made at ``now`` (ms); with ``app_id``, an application transaction; with ``schema``, a ``metaData``
    action giving the table that schema."""
    op = "WRITE" if added or overwrite else "DELETE" if dropped or schema is None else "ADD COLUMNS"
    params = (
        {"mode": "Overwrite" if overwrite else "Append", "partitionBy": json.dumps(partition_columns(partition_by))}
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
                "partitionValues": _values(partition_by, f["partition"]),
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
                "partitionValues": _values(partition_by, f["partition"]),
                "size": f["size"],
            }
        }
        for f in dropped
    ]
    return lines


def delta_rs_actions(
    adds: Iterable[dict[str, Any]], removes: Iterable[dict[str, Any]], partition_by: str
) -> list[AddAction | RemoveAction]:
    """The same files as delta-rs's add and remove actions (for a commit through delta-rs)."""
    actions: list[AddAction | RemoveAction] = [
        AddAction(
            f["path"],
            f["size"],
            _values(partition_by, f["partition"]),
            f["mtime"],
            True,
            json.dumps({"numRecords": int(f["rows"] or 0)}),
        )
        for f in map(lambda a: live_file(a, partition_by), adds)
    ]
    actions += [
        RemoveAction(f["path"], True, f["mtime"], f["size"], _values(partition_by, f["partition"]))
        for f in map(lambda r: live_file(r, partition_by), removes)
    ]
    return actions


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


def partition_columns(partition_by: str) -> list[str]:
    """The partition columns of a table cbp writes: one, or none (``""``: a view's table, cbp.storage.viewtable)."""
    return [partition_by] if partition_by else []


def _values(partition_by: str, v: Any) -> dict[str, str | None]:
    """A file's partition values as Delta writes them in the log (a string, or null; none unpartitioned)."""
    return {partition_by: None if v is None else str(v)} if partition_by else {}
