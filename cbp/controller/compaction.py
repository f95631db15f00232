"""Compaction of a flow's increments that fell out of the retention (as Delta's ``OPTIMIZE``).

The increments of a flow no stage reads (an output such as URLCount's ``counts``) stay in its
table: garbage collection leaves them there (:mod:`.collect`), and each epoch adds a file or more
per increment. Once the retention (:mod:`.retention`) has trimmed the epochs that wrote them,
nothing in cbp reads them one by one any more (``cbp output`` of the flow, ``--epoch N`` and
``cbp rewind`` reach back to the horizon only), but a Delta reader of the table still sees them.
:class:`Compaction` rewrites those files, when there are at least ``compact_files`` of them
(:class:`~.retention.RetentionSetting`, default :data:`~.retention.COMPACT_FILES`), into one file
holding their records consolidated: ``_diff`` summed per record (a null ``_diff`` is +1), records
whose sum is 0 dropped. So the table's contents at its current version stay the same, and its
file count stays bounded (the files it replaced are deleted by the retention once no kept version
holds them). A compacted file of :data:`TARGET_BYTES` or more is full: later compactions leave it
as it is, so none rewrites more than that of what was compacted before (:func:`candidates`).

Which increments: those of a flow nobody reads whose ids are below every increment still in
reach (live in the snapshot, or with a collected-increment entry: :mod:`.history`); the new file
goes into the partition of the newest of them, which nothing reads by id either. A flow a stage
reads is never compacted (its readers' cursors name increments), nor a flow whose files do not
share one schema.

Crash safety: one durable change through the journal (kind ``compact``): the file is written
first (kill point ``compact:written``: a file no Delta version names, invisible), then the pending
record (``compact:pending``), the Delta commit (removes and the add, one transaction, with an
application transaction id: made once) and the snapshot naming the new version
(``compact:snapshot``). A kill anywhere loses and duplicates nothing: the next writer finishes
the pending change or the table is as before.

Reads: ``live.spec`` and ``live.st`` (flows, their consumers, increments), the collected-increment
directory of each flow nobody reads, the files of its table. Writes: a data file per compacted
flow and, through the journal, one change: the flow table's commit and its version.

    >>> import pyarrow as pa
    >>> t = pa.table({"url": ["a", "b", "a", "c"], "_diff": [1, 1, -1, None]})
    >>> consolidate(t).sort_by("url").to_pylist()
    [{'url': 'b', '_diff': 1}, {'url': 'c', '_diff': 1}]
"""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from .. import faults
from ..spec.schema import DIFF
from ..storage import INC, LAYOUT, Home
from .change import Change, Commit, FlowVersion, IncrementVersion, Target
from .journal import Journal
from .live import Live
from .retention import Retention, RetentionSetting, read_record

__all__ = ["Compaction", "consolidate"]

#: A compacted file this large is full (as ``OPTIMIZE``'s target file size): later compactions leave it as it is,
#: so a compaction rewrites at most this much of what it compacted before, however long the flow has grown.
TARGET_BYTES = 64 << 20
_COMPACTED = re.compile(r"c\d{12}-")  # the name of a file a compaction wrote: c<seq>-<uuid>.parquet
APP = "cbp:compact"  # the Delta application transaction id of a compaction commit (its version: the change's seq)


def consolidate(t: pa.Table) -> pa.Table:
    """``t``'s records once each with their ``_diff`` summed (null: +1), zero sums dropped, in
    ``t``'s columns; ``t`` as it is if it has no ``_diff`` or a column Arrow cannot group by.

        >>> consolidate(pa.table({"k": [1, 1], "_diff": [2, 3]})).to_pylist()
        [{'k': 1, '_diff': 5}]
    """
    if DIFF not in t.column_names:
        return t
    keys = [c for c in t.column_names if c != DIFF]
    diff_type = t.schema.field(DIFF).type
    ones = t.set_column(t.column_names.index(DIFF), DIFF, pc.fill_null(t[DIFF], pa.scalar(1, diff_type)))
    try:
        g = ones.group_by(keys, use_threads=False).aggregate([(DIFF, "sum")])
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):  # e.g. a list column
        return t
    g = g.rename_columns([DIFF if c == f"{DIFF}_sum" else c for c in g.column_names])
    g = g.filter(pc.not_equal(g[DIFF], 0))
    return g.select(t.column_names).cast(t.schema)


def candidates(files: list[dict[str, Any]], target: int = TARGET_BYTES) -> list[dict[str, Any]]:
    """The files a compaction rewrites: all but those an earlier one wrote that are ``target`` bytes or more.

    >>> fs = [{"path": "_inc=3/c000000000007-ab.parquet", "size": 90}, {"path": "_inc=4/sc-e1-x.parquet", "size": 99}]
    >>> [f["path"] for f in candidates(fs, target=64)]
    ['_inc=4/sc-e1-x.parquet']
    """
    return [
        f for f in files if not (_COMPACTED.match(f["path"].rsplit("/", 1)[-1]) and int(f.get("size") or 0) >= target)
    ]


class Compaction:
    """Compacts the out-of-reach increments of the flows nobody reads (see the module docstring)."""

    def __init__(self, home: Home, live: Live, journal: Journal, retention: Retention) -> None:
        self.home, self.live, self.journal, self.retention = home, live, journal, retention

    def out_of_reach(self, flow: str) -> list[dict[str, Any]]:
        """The files of ``flow``'s table (at the snapshot's version) holding increments below every one
        still in reach; none for a flow a stage reads."""
        fs = self.live.st.flows.get(flow)
        fl = self.live.spec.flows.get(flow)
        if fs is None or fl is None or fl.consumers or fs.version is None:
            return []
        names = self.home.list_dir(LAYOUT.collected_dir(flow))
        reach = {int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()} | set(fs.incs)
        bound = min(reach | {fs.next_inc})
        return [f for f in self.home.table_files(LAYOUT.flow(flow), fs.version) if int(f["partition"]) < bound]

    def compact(self, min_files: int) -> dict[str, int]:
        """Compact each flow with at least ``min_files`` files out of reach (one change each); the
        number of files each compacted flow had replaced. Call under the home's lock."""
        done: dict[str, int] = {}
        for flow in list(self.live.st.flows):
            files = candidates(self.out_of_reach(flow))
            if len(files) >= max(2, min_files) and self._compact(flow, files):
                done[flow] = len(files)
        return done

    def _read(self, flow: str, files: list[dict[str, Any]]) -> pa.Table | None:
        rel = LAYOUT.flow(flow)
        files = sorted(files, key=lambda f: (int(f["partition"]), f["path"]))  # increment order
        tables = [pq.read_table(self.home.path(f"{rel}/{f['path']}"), filesystem=self.home.fs) for f in files]
        tables = [t.drop_columns([INC]) if INC in t.column_names else t for t in tables]
        try:
            return pa.concat_tables(tables, promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError):  # files of several schemas: left as they are
            return None

    def _compact(self, flow: str, files: list[dict[str, Any]]) -> bool:
        t = self._read(flow, files)
        if t is None:
            return False
        t = consolidate(t)
        fs = self.live.st.flows[flow]
        rel = LAYOUT.flow(flow)
        base = max(int(f["partition"]) for f in files)
        seq = self.live.st.seq + 1  # the change's: names the file and marks the commit made
        adds: tuple[dict[str, Any], ...] = ()
        written: tuple[str, ...] = ()
        if t.num_rows:  # every record summed to 0: the files go, nothing replaces them
            add = self.home.write_parquet(LAYOUT.increment_dir(flow, base), t, f"c{seq:012d}", base)
            written = (add.pop("rel"),)
            adds = ({**add, "path": written[0][len(rel) + 1 :]},)
        faults.point("compact:written")
        targets: list[Target] = [FlowVersion(flow), *(IncrementVersion(flow, i) for i in fs.incs)]
        commit = Commit(rel, INC, adds, tuple(files), APP, seq, tuple(targets))
        what = f"compaction of {len(files)} file(s) of flow '{flow}'"
        with self.journal.transaction():
            self.journal.commit(Change("compact", what, (commit,), written=written))
        return True

    def after_gc(self) -> None:
        """Called at the end of a run, under the lock, after garbage collection: compact once after each
        retention pass that trimmed something. Never fails the run: a failure is reported."""
        if not self.retention.compact_due:
            return
        self.retention.compact_due = False
        setting = RetentionSetting.from_record(read_record(self.home) or None)
        if setting.compact_files <= 0:
            return
        try:
            self.compact(setting.compact_files)
        except Exception as e:  # the epochs are committed: a failed compaction must not look like a failed run
            self.retention.notify(
                f"warning: compacting the flows of {self.home.location} failed ({e}); tried again later"
            )
