"""Trimming a Delta table's log to a version every reader still needs, and the data files only older versions held.

Delta keeps a table's past as its log (``_delta_log/<version>.json`` commits and the checkpoints
that sum them up); ``delta.logRetentionDuration`` says how long, and ``VACUUM`` deletes the data
files no version within reach holds. cbp's retention (:mod:`cbp.controller.retention`) decides the
oldest version of each table anything still reads (``keep``: the version the oldest snapshot
within reach names); :func:`trim_log` then does both, for that table:

1. ``cp``: the newest checkpoint at or before ``keep`` (none: nothing is done; cbp's writer makes
   one at least every 100 versions, :meth:`cbp.storage.tables.DeltaTables._checkpoint_due`). A
   reader of version ``keep`` or later starts from ``cp`` or a later checkpoint, never from the
   log before it;
2. the data files that commits before ``cp`` removed and that are live neither at ``keep`` nor
   at ``head`` (the table's current version): no version from ``keep`` on holds them (cbp names
   every file it writes once; a rewind that puts old files back is what the caller excludes) are
   deleted, *before* the log entries that name them, so a kill in between leaves the log to read
   them from again;
3. then the commits, checksums and checkpoints of versions before ``cp``.

Every step is idempotent (a file already gone is no error): a kill anywhere leaves a table that
opens at every version from ``cp`` on, and the next call finishes the work. A log another writer
tidied (``cleanup_metadata``) or data files someone else's ``VACUUM`` deleted are simply not
found. Entries of the log this module does not know (v2 checkpoints' sidecars, ``_commits``) are
left alone.

    >>> parse_log_name("00000000000000000010.checkpoint.parquet"), parse_log_name("_last_checkpoint")
    ((10, 'checkpoint'), None)
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from .home import Home

__all__ = ["LogTrim", "parse_log_name", "trim_log"]


@dataclass
class LogTrim:
    """What :func:`trim_log` did to one table."""

    table: str
    checkpoint: int | None = None  # the version the log now starts at (None: nothing trimmed)
    log_files: int = 0  # log entries deleted (commits, checkpoints, checksums)
    data_files: int = 0  # data files deleted (removed before the checkpoint, live at no kept version)


def parse_log_name(name: str) -> tuple[int, str] | None:
    """``(version, kind)`` of a Delta log entry cbp may delete (kind ``commit``, ``checkpoint`` or
    ``crc``), or None for anything else."""
    head, _, rest = name.partition(".")
    if len(head) != 20 or not head.isdigit():
        return None
    if rest == "json":
        return int(head), "commit"
    if rest == "crc":
        return int(head), "crc"
    if rest.startswith("checkpoint") and rest.endswith(".parquet"):
        return int(head), "checkpoint"
    return None


def _removed_files(home: Home, log: str, versions: list[int]) -> set[str]:
    """Paths (relative to the table) whose last action in the commits ``versions`` is a remove."""
    last: dict[str, bool] = {}  # path -> removed
    for v in sorted(versions):
        try:
            text = home.read_bytes(f"{log}/{v:020d}.json").decode()
        except OSError:  # deleted by a kill in the middle of an earlier trim, or by another writer's clean-up
            continue
        for line in text.splitlines():
            if not line.strip():
                continue
            action: dict[str, Any] = json.loads(line)
            for kind, removed in (("add", False), ("remove", True)):
                if kind in action:
                    last[unquote(action[kind]["path"])] = removed
    return {p for p, removed in last.items() if removed and "://" not in p and not p.startswith("/")}


def _drop_empty_dirs(home: Home, table: str, dirs: set[str]) -> None:
    """Partition directories of a local home left empty (an object store has no directories)."""
    local = home.local_dir()
    if local is None:
        return
    for d in sorted(dirs):
        if "=" in d.rsplit("/", 1)[-1] and not home.list_dir(f"{table}/{d}"):
            try:
                os.rmdir(os.path.join(local, table, d))
            except OSError:  # not empty after all, or gone: left as it is
                pass


def trim_log(home: Home, table: str, keep: int, head: int) -> LogTrim:
    """Trim the log of the Delta table at ``table`` (relative to the home) to what versions ``keep``
    to ``head`` need, and delete the data files only older versions held; see the module docstring."""
    out = LogTrim(table)
    log = f"{table}/_delta_log"
    entries: dict[int, list[str]] = {}
    checkpoints: list[int] = []
    for name in home.list_dir(log):
        parsed = parse_log_name(name)
        if parsed is None:
            continue
        entries.setdefault(parsed[0], []).append(name)
        if parsed[1] == "checkpoint":
            checkpoints.append(parsed[0])
    usable = [v for v in checkpoints if v <= keep]
    if not usable or not any(v < max(usable) for v in entries):
        return out
    cp = max(usable)
    older = sorted(v for v in entries if v < cp)
    removed = _removed_files(home, log, older)
    if removed:
        live = {f["path"] for v in {keep, head} for f in home.table_files(table, v)}
        for path in sorted(removed - live):
            home.delete_file(f"{table}/{path}")
            out.data_files += 1
        _drop_empty_dirs(home, table, {p.rsplit("/", 1)[0] for p in removed - live if "/" in p})
    home.forget_head(table)  # its delta-rs view may still read the log about to go
    for v in older:  # commits last among a version's entries: a crc or checkpoint alone is never read
        for name in sorted(entries[v], key=lambda n: n.endswith(".json")):
            home.delete_file(f"{log}/{name}")
            out.log_files += 1
    out.checkpoint = cp
    return out
