"""Durable changes of a home (paper 001 §4.3): the pending record, Delta commits, the snapshot.

Every change (a feed, a stage epoch, a garbage collection) is committed the same way: the new
data files are written first (invisible), then a *pending* record holding the Delta commits to
make (each with an application transaction id, so a commit already made is recognised), the
snapshot change (a :func:`~.snapshot.diff` from the committed snapshot) and the history entries;
then the Delta commits, the history entries, and the new snapshot, which is the commit point. A
writer that dies anywhere leaves a pending record that the next writer finishes
(:meth:`Journal.recover`), idempotently.

What a change writes follows the change: the diff and the entries are small, and the snapshot
holds only what is live (:mod:`.snapshot`), so neither grows with the epochs already run.

Reads: the home's controller snapshot (``_cbp/controller``), its pending record and lock; the
history's legacy entries. Writes: ``live.st`` and ``live.committed`` (:class:`~.live.Live`: it
loads, commits and rolls back the snapshot), the pending record, the Delta commits a change
names, history entries, per-epoch snapshot copies, and the controller snapshot; it clears the
intention of a committed stage epoch. A feed's Delta commit leaves a checkpoint that falls due to
the next stage epoch's commit (:meth:`cbp.storage.tables.DeltaTables.write_due_checkpoints`), so a
feed's cost does not follow the size of its table's log.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from .. import faults
from ..errors import RuntimeStateError
from ..storage import LAYOUT, Home
from ..storage.tables import RemovedElsewhere
from .change import Change, Commit, EntryVersion, SnapshotUpdate, set_version
from .entries import entry_json
from .history import History, legacy_entries
from .live import Live
from .snapshot import FORMAT, Snapshot, diff, patch

__all__ = ["Journal"]


class Journal:
    """The commit protocol: loads the live snapshot, makes each change of it durable, recovers.

    ``reconcile`` is called after every snapshot loaded (it compares it with the YAML,
    :meth:`.evolution.Evolution.reconcile`, and returns the updates that adopt what the YAML adds,
    applied here); ``check`` under the lock before every change (it
    raises while the YAML waits for ``cbp upgrade``, :meth:`.evolution.Evolution.check`).
    """

    def __init__(
        self,
        home: Home,
        history: History,
        live: Live,
        notify: Callable[[str], None],
        reconcile: Callable[[], Sequence[SnapshotUpdate]],
        check: Callable[[], None],
    ) -> None:
        self.home, self.history, self.live, self.notify = home, history, live, notify
        self.reconcile, self.check = reconcile, check
        self.entries: dict[str, Any] = {}  # history entries of the change being made
        self.after_epoch: Callable[[], None] | None = None  # called once a stage epoch committed (retention)
        #: a view table's commit planned again on the table as it is (its files to remove were removed
        #: by another writer): (record, commit, the snapshot the record makes) -> the commit
        self.replan: Callable[[dict[str, Any], Commit, dict[str, Any]], Commit] | None = None

    # ------------------------------------------------------------------ loading
    def load(self, doc: dict[str, Any] | None) -> None:
        """Adopt a committed snapshot (JSON), of this format or of format 1; None: a new home."""
        self.live.committed = doc
        if doc is None:
            self.live.st = Snapshot(self.live.spec.name)
        else:
            self.live.st = Snapshot.from_json(doc)
            if int(doc.get("format", 1)) < FORMAT:  # its history is written with the next change
                self.history.legacy = legacy_entries(doc, LAYOUT)
        for update in self.reconcile():  # what the YAML adds, recorded with the next change
            update.apply(self.live.st)

    def refresh(self) -> None:
        """Re-read the newest snapshot (another process or Pipeline object may have moved on); not when
        the newest is the one held (its name says so: a TPC-H epoch of 53 stage epochs parsed its
        snapshot three times a stage epoch for nothing else)."""
        if self.home.controller_seq() == self.live.st.seq:
            return
        doc = self.home.read_controller()
        if doc is not None and int(doc["seq"]) != self.live.st.seq:
            self.load(doc)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the home's lock and work on the newest snapshot (see :meth:`Home.lock`); a change
        waits for ``cbp upgrade`` while the YAML changes stored data (``check``)."""

        def waiting() -> None:
            print(
                f"cbp: waiting for another process to finish its change to {self.home.location} ...",
                file=sys.stderr,
                flush=True,
            )

        with self.home.lock(waiting):
            self.refresh()
            self.recover()
            self.check()
            yield

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """Changes to the snapshot in the block are dropped if it raises (nothing half-applied)."""
        before = self.live.st.copy()
        self.entries = {}
        try:
            yield
        except BaseException:
            self.live.st = before
            self.entries = {}
            raise

    def save(self, *updates: SnapshotUpdate) -> None:
        """Apply ``updates`` and write the snapshot, outside a change: no Delta commit, history
        entry or pending record (a Runnable's new state while it is not runnable). All or nothing:
        ``live.st`` is changed only once the snapshot is written."""
        self.home.fence("saving the controller snapshot")
        st = self.live.st.copy()
        for update in updates:
            update.apply(st)
        st.seq += 1
        doc = st.to_json()
        self.home.write_controller(doc)
        self.live.st, self.live.committed = st, doc

    # ------------------------------------------------------------------ committing
    def commit(self, change: Change) -> None:
        """Make ``change`` durable, all or nothing: its snapshot updates are applied to ``live.st``
        (with what the part changed there in place), then its Delta commits, history entries and
        the snapshot are committed through a pending record. Its ``cleanup`` files are deleted
        afterwards; its ``written`` files are deleted if it is abandoned before the pending record exists.
        """
        st = self.live.st
        for update in change.updates:
            update.apply(st)
        for rel, value in change.entries:
            self.entries[rel] = entry_json(value)
        st.seq += 1
        new = st.to_json()
        record: dict[str, Any] = {
            "format": FORMAT,
            "kind": change.kind,
            "what": change.what,
            "stage": change.stage,
            "seq": st.seq,
            "commits": [c.to_json() for c in change.commits],
            "cleanup": list(change.cleanup),
            "entries": {**self.history.legacy, **self.entries},
            "written_at": time.time(),
        }
        committed = self.live.committed
        if committed is None:
            record["snapshot"] = new  # the first change of a home carries the whole (small) snapshot
        else:
            record["base"] = int(committed["seq"])
            record["diff"] = diff(committed, new)
        try:
            self.home.fence(change.what)  # a lock that may have passed to another process commits nothing
        except BaseException:
            self.delete_quietly(change.written)
            raise
        try:
            self.home.write_pending(record)
        except OSError as e:
            self.delete_quietly(change.written)
            raise RuntimeStateError(
                f"{change.what}: cannot write {self.home.uri(LAYOUT.PENDING)}: {e}; nothing was committed", code="io"
            ) from e
        faults.point(f"{change.kind}:pending")
        self._finish(record, change.kind)

    def _finish(self, record: dict[str, Any], kind: str) -> None:
        """Apply a pending record: the Delta commits not made yet, the entries, the snapshot, the
        cleanup. Idempotent."""
        snap, done = self._next_snapshot(record)
        entries = dict(record.get("entries", {}))  # an entry a commit's version goes into is copied first
        for n, c in enumerate(Commit.from_json(c) for c in record["commits"]):
            version = self._make_commit(record, kind, n, c, snap)
            for target in c.targets:
                if isinstance(target, EntryVersion):
                    entries[target.entry] = {**entries[target.entry], target.key: version}
                elif not done:
                    set_version(snap, target, version)
        if not done:
            for rel, value in entries.items():
                self._write_record(record["what"], rel, value)
            try:
                self.home.write_controller(snap)
            except OSError as e:
                raise RuntimeStateError(
                    f"{record['what']}: cannot write the controller snapshot in "
                    f"{self.home.uri(LAYOUT.CONTROLLER)}: {e}. Once the cause is fixed, the next 'cbp run' or 'cbp "
                    "feed' finishes the commit",
                    code="io",
                ) from e
        if record.get("kind") == "epoch":  # the snapshot after each stage epoch: what 'cbp rewind' goes back to
            self._copy_snapshot(record["what"], snap)
        faults.point(f"{kind}:snapshot")
        self.delete_quietly(record["cleanup"])
        if record.get("stage"):
            self.home.clear_intention(record["stage"])
        self.home.clear_pending()
        if set(self.history.legacy) <= set(entries):
            self.history.legacy = {}
        self.load(snap)
        if record.get("kind") == "epoch":
            if self.after_epoch is not None:
                self.after_epoch()
            self.home.write_due_checkpoints()  # those the feeds since the last epoch left due

    def _next_snapshot(self, record: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """The snapshot a pending record makes, and whether the home holds it already."""
        current = self.home.read_controller()
        if current is not None and int(current["seq"]) >= int(record["seq"]):
            return current, True
        if "snapshot" in record:  # the first change of a home, or a record of format 1
            return copy.deepcopy(record["snapshot"]), False
        if current is None or int(current["seq"]) != int(record["base"]):
            raise RuntimeStateError(
                f"{record['what']}: the pending change in {self.home.uri(LAYOUT.PENDING)} was made on snapshot "
                f"{record['base']}, but the home holds {current and current['seq']}; the home was changed "
                "by hand or by two writers at once",
                code="home-corrupt",
            )
        return patch(current, record["diff"]), False  # read afresh: patched in place

    def _make_commit(self, record: dict[str, Any], kind: str, n: int, c: Commit, snap: dict[str, Any]) -> int:
        """Make one Delta commit of a pending record unless its transaction id says it is made; its
        version. A view table's commit whose files to remove another writer removed first (an
        ``OPTIMIZE``) is planned again on the table as it is (:attr:`replan`), with the same id."""
        what, view = record["what"], c.table.startswith("views/")
        try:
            try:
                version, made = self._commit_once(c, view, kind)
            except RemovedElsewhere:
                if self.replan is None:
                    raise
                planned, c = c, self.replan(record, c, snap)
                version, made = self._commit_once(c, view, kind)
                kept = {a["path"] for a in c.adds}
                self.delete_quietly([f"{c.table}/{a['path']}" for a in planned.adds if a["path"] not in kept])
        except Exception as e:
            raise RuntimeStateError(
                f"{what}: the commit to {self.home.uri(c.table)} failed: {e}. Nothing of it is visible "
                "through cbp; once the cause is fixed, the next 'cbp run' or 'cbp feed' on this home finishes it",
                code="io",
            ) from e
        if made:
            faults.point(f"{kind}:committed:{n}")
        return version

    def _commit_once(self, c: Commit, view: bool, kind: str) -> tuple[int, bool]:
        """One Delta commit; a feed's leaves a checkpoint that falls due to the next epoch's commit."""
        return self.home.commit_once(
            c.table,
            c.partition_by,
            c.adds,
            c.removes,
            overwrite=c.overwrite,
            app_id=c.app,
            app_version=c.version,
            schema=_schema(c.schema),
            removes_live=view,
            checkpoint=kind != "feed",
        )

    def _write_record(self, what: str, rel: str, value: dict[str, Any]) -> None:
        try:
            self.home.write_json(rel, value)
        except OSError as e:
            raise RuntimeStateError(
                f"{what}: cannot write {self.home.uri(rel)}: {e}. Once the cause is fixed, the next "
                "'cbp run' or 'cbp feed' finishes the commit",
                code="io",
            ) from e

    def _copy_snapshot(self, what: str, snap: dict[str, Any]) -> None:
        seq = int(snap["seq"])
        try:
            self.home.copy_controller(seq, LAYOUT.snapshot_copy(seq), snap)
        except OSError as e:
            raise RuntimeStateError(
                f"{what}: cannot write {self.home.uri(LAYOUT.snapshot_copy(seq))}: {e}. Once the cause is fixed, "
                "the next 'cbp run' or 'cbp feed' finishes the commit",
                code="io",
            ) from e

    def recover(self) -> str | None:
        """Finish a change that a killed or failed writer left pending; return what it was.

        Called under the home's lock before every change, so the pending record (if any) belongs
        to a writer that is gone.
        """
        record = self.home.pending()
        if record is None:
            return None
        t0 = time.perf_counter()
        if "format" not in record:  # format 1: the whole next snapshot, history included
            record = {**record, "entries": {}, "seq": int(record["snapshot"]["seq"])}
        self._finish(record, "recover")
        what = str(record["what"])
        self.notify(f"recovered: finished committing {what}, which was interrupted ({time.perf_counter() - t0:.2f}s)")
        return what

    def delete_quietly(self, rels: Any) -> None:
        for rel in rels:
            try:
                self.home.delete_file(rel)
            except OSError:
                pass  # an orphan file is invisible; it only takes space


def _schema(text: str | None) -> Any:
    """A commit's new table schema (Arrow IPC, hex), if it changes one (cbp upgrade)."""
    if not text:
        return None
    import pyarrow as pa

    return pa.ipc.read_schema(pa.py_buffer(bytes.fromhex(text)))
