"""Rewind: put a pipeline back as it was after a committed stage epoch, keeping every feed since.

Every stage epoch keeps the controller snapshot it committed (:meth:`Layout.snapshot_copy`), and
every table of a home is a Delta table, so the pipeline as it was after stage ``S``'s epoch ``N``
is that snapshot plus the table versions it names. A rewind goes back to that moment for the
*whole* pipeline (every stage to the epoch it had reached then, so no stage keeps anything an
undone epoch wrote), and keeps what happened outside the stages since: feeds stay landed and
become pending again, feed numbers, increment ids and garbage-collection runs go on counting.

It is one durable change (:mod:`.journal`): a new Delta commit per table that puts back the files
the target moment had live (Delta's ``RESTORE`` done as plain adds and removes; increments that
were garbage-collected since come back the same way, out of the table's history) and removes
what the undone epochs wrote, the new snapshot, and a history entry (:meth:`Layout.rewind_entry`)
that keeps the undone epochs' records. Nothing is deleted: the undone epochs stay readable by
Delta time travel (:meth:`Rewind.undone_output`). A data file that VACUUM removed since cannot come
back: then the rewind is refused (code ``rewind-vacuumed``) before anything changes.

Reads: ``live.spec`` and ``live.st``, the snapshot copy of the target moment, epoch, feed and
collected-increment history entries, the state and flow tables' logs (their files at old
versions), the rewinds' records. Writes: through the journal, one change: a Delta commit per
table whose live files change, the snapshot updates that make ``live.st`` the merged snapshot
(:func:`updates_to`: stages, flows, connectors, the scheduler, code shapes), the rewind's history
entry and collected-increment entries marked undone; drops every intention first
(:class:`~.intentions.Intentions`).

Example::

    p.rewind(2, stage="count")
    # RewindReport(stage='count', epoch=2, undone={'count': [3, 4]}, ...)
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from .. import faults
from ..errors import RuntimeStateError, UsageError
from ..spec.schema import DIFF
from ..storage import INC, LAYOUT, PART, SRC, Home
from .change import (
    Change,
    Commit,
    ConnectorSet,
    FlowSet,
    FlowVersion,
    IncrementVersion,
    SchedSet,
    ShapeDropped,
    ShapeSet,
    SnapshotUpdate,
    StageSet,
    StateVersion,
    Target,
)
from .entries import CollectedEntry, EpochEntry, HistoryEntry, RewindEntry, UndoneEpoch, parse
from .history import History
from .intentions import Intentions
from .journal import Journal
from .live import Live
from .migrate import stored_rows
from .retention import refuse_rewind
from .snapshot import FlowState, Increment, Sched, Snapshot, StageState
from .viewtables import ViewTables

__all__ = ["RewindReport", "Rewind", "updates_to"]

APP = "cbp:rewind"  # the Delta application transaction id of a rewind's commits (version: the change's seq)


@dataclass
class RewindReport:
    """What a rewind did: the moment it went back to, the stage epochs it undid, what is pending now."""

    stage: str | None
    epoch: int
    seq: int  # the sequence number of the rewind's change (its record: rewinds())
    undone: dict[str, list[int]] = field(default_factory=dict)  # stage -> epochs undone
    pending: dict[str, int] = field(default_factory=dict)  # external flow -> increments pending for some stage
    restored: dict[str, list[int]] = field(default_factory=dict)  # flow -> increments brought back from its history

    def where(self) -> str:
        """The moment gone back to, in words."""
        return f"stage '{self.stage}' epoch {self.epoch}" if self.epoch else "the beginning (before any stage epoch)"

    def line(self) -> str:
        undone = (
            "; ".join(f"{s} epoch{'s' if len(e) > 1 else ''} {_span(e)}" for s, e in self.undone.items() if e)
            or "nothing"
        )
        pending = ", ".join(f"'{f}' {n} increment(s)" for f, n in self.pending.items()) or "none"
        return f"rewound to after {self.where()}: undone {undone}; pending now: {pending}"


def _span(epochs: list[int]) -> str:
    return f"{epochs[0]}-{epochs[-1]}" if len(epochs) > 1 else str(epochs[0])


def _same_storage(cur: Snapshot, target: Snapshot, where: str) -> None:
    """Refuse a rewind across an upgrade that changed how a flow or a stage's state is stored (schema,
    partitions, framing) or removed a stage: the tables' older versions no longer fit the YAML."""
    changed = sorted(
        k
        for k in target.shapes
        if k.startswith(("state:", "flow:")) and k in cur.shapes and cur.shapes[k] != target.shapes[k]
    )
    gone = sorted(set(target.stages) - set(cur.stages))
    if changed or gone:
        what = [k.replace(":", " ", 1) for k in changed] + [f"stage {s} (removed)" for s in gone]
        raise UsageError(
            f"cannot rewind {where} to before an upgrade that changed {', '.join(what)}: the tables' older "
            "versions no longer fit the pipeline. Rewind to an epoch after the upgrade, or to 0 (everything "
            "recomputed from the retained increments)",
            code="rewind-across-upgrade",
        )


def updates_to(cur: Snapshot, new: Snapshot) -> tuple[SnapshotUpdate, ...]:
    """The snapshot updates that make ``cur`` (the live snapshot) the rewound ``new``."""
    out: list[SnapshotUpdate] = [StageSet(s, st) for s, st in new.stages.items() if cur.stages.get(s) != st]
    out += [FlowSet(f, fs) for f, fs in new.flows.items() if cur.flows.get(f) != fs]
    out += [ConnectorSet(k, tuple(q)) for k, q in new.connectors.items() if cur.connectors.get(k) != q]
    out += [SchedSet(new.sched)] if new.sched != cur.sched else []
    for k in sorted(cur.shapes.keys() | new.shapes.keys()):
        if k not in new.shapes:
            out.append(ShapeDropped(k))
        elif cur.shapes.get(k) != new.shapes[k]:
            out.append(ShapeSet(k, new.shapes[k]))
    return tuple(out)


class Rewind:
    """Rewinds a home (one durable change), and reads what rewinds undid."""

    def __init__(
        self,
        home: Home,
        live: Live,
        journal: Journal,
        history: History,
        intentions: Intentions,
        notify: Callable[[str], None],
    ) -> None:
        self.home, self.live, self.journal, self.history = home, live, journal, history
        self.intentions, self.notify = intentions, notify
        self.views = ViewTables(home, live, history)  # the SQL views' tables follow their flows

    def rewind(
        self, to_epoch: int, stage: str | None = None, *, command: str = "cbp.Pipeline.rewind()"
    ) -> RewindReport:
        """Put the pipeline back as it was right after ``stage``'s epoch ``to_epoch`` (0: before any stage
        epoch ran), as one durable change; see the module docstring. Refuses while a ``cbp run`` works."""
        if isinstance(to_epoch, bool) or not isinstance(to_epoch, int) or to_epoch < 0:
            raise UsageError(f"--to-epoch must be an epoch number, 0 or more; got {to_epoch!r}", code="bad-option")
        spec = self.live.spec
        if stage is not None:
            stage = spec.stage(stage).name
        elif to_epoch and len(spec.stages) == 1:
            stage = next(iter(spec.stages))
        elif to_epoch:
            raise UsageError(
                f"pipeline '{spec.name}' has {len(spec.stages)} stages: say whose epoch {to_epoch} with --stage "
                f"(one of {', '.join(spec.order)}; 'cbp history' lists them), or --to-epoch 0 for the beginning",
                code="rewind-needs-stage",
            )
        with self.home.runner_lock(command), self.journal.locked():
            self.intentions.abandon_all()  # epochs under way when a runner died: the next run decides again
            with self.journal.transaction():
                return self._rewind(to_epoch, stage)

    def _rewind(self, to_epoch: int, stage: str | None) -> RewindReport:
        cur = self.live.st
        seq = cur.seq + 1
        target = self._target(to_epoch, stage)
        if to_epoch:
            _same_storage(cur, target, self.home.location)
        undone = {
            s: list(range(target.stages[s].epoch + 1 if s in target.stages else 1, st.epoch + 1))
            for s, st in cur.stages.items()
        }
        undone = {s: e for s, e in undone.items() if e}
        report = RewindReport(stage, to_epoch, seq, undone)
        if not undone:
            self.notify(f"nothing to rewind: no stage epoch was committed after {report.where()}")
            return report
        new = self._merge(cur, target, undone, report)
        commits: list[Commit] = []
        for s in undone:
            if s in self.live.spec.stages and self.live.spec.stages[s].state_schema is not None:
                commits += self._restore_state(
                    new, s, target.stages[s].state_version if s in target.stages else None, seq
                )
        for f in new.flows:
            commits += self._restore_flow(cur, target, new, f, seq)
        record = self._record(cur, target, undone, report)
        commits += self.views.rewind_commits(new, target, undone, record.collected_undone, seq)
        entries: list[tuple[str, HistoryEntry]] = [(LAYOUT.rewind_entry(seq), record)]
        for flow, incs in record.collected_undone.items():
            entries += [(LAYOUT.collected_entry(flow, i), replace(e, undone=seq)) for i, e in incs.items()]
        faults.point("rewind:planned")
        what = f"rewind to after {report.where()}"
        self.journal.commit(Change("rewind", what, tuple(commits), updates_to(cur, new), tuple(entries)))
        report.pending = {
            f: len({i for c in self.live.spec.flows[f].consumers for i in self.live.st.connector(c, f)})
            for f in self.live.spec.external_flows
            if f in self.live.st.flows
        }
        return report

    def _target(self, to_epoch: int, stage: str | None) -> Snapshot:
        """The snapshot of the moment to go back to (within the home's retention: :mod:`.retention`)."""
        refuse_rewind(self.home, stage, to_epoch, self.live.st.stages[stage].epoch if stage else 0)
        if to_epoch == 0:
            return Snapshot.new(
                self.live.st.pipeline,
                {f: fl.external for f, fl in self.live.spec.flows.items()},
                {s: st.input_flows for s, st in self.live.spec.stages.items()},
            )
        assert stage is not None
        have = self.live.st.stages[stage].epoch
        if to_epoch > have:
            raise UsageError(
                f"stage '{stage}' has run {have} epoch(s); cannot rewind to epoch {to_epoch} ('cbp history' lists "
                "them)",
                code="unknown-epoch",
            )
        entry = self.history.epoch_entry(self.live.st, stage, to_epoch)
        seq = entry.seq if entry else None
        doc = None
        if seq is not None:
            doc = self.home.read_json(LAYOUT.snapshot_copy(int(seq))) or self.home.read_json(LAYOUT.snapshot(int(seq)))
        if doc is None:
            raise RuntimeStateError(
                f"stage '{stage}' epoch {to_epoch} was committed by a cbp that kept no snapshot to rewind to "
                f"({self.home.uri(LAYOUT.HISTORY)} has none for it); rewind to a later epoch, or to 0",
                code="rewind-unavailable",
            )
        return Snapshot.from_json(doc)

    def _merge(self, cur: Snapshot, target: Snapshot, undone: dict[str, list[int]], report: RewindReport) -> Snapshot:
        """The snapshot after the rewind: the target's stages, connectors and stage outputs; the
        current feeds (every increment fed since the target, pending again) and counters."""
        new = cur.copy()
        new.sched = Sched()
        for s in cur.stages:
            st = copy.deepcopy(target.stages.get(s, StageState()))
            if s in undone:
                st.index = {}  # the target's index files may be gone: the next epoch rebuilds each partition's index
                gone = [rel for rel in st.bindings if not self.home.exists(rel)]
                if gone:  # multicast bindings are deleted once read (cbp.controller.epoch): an undone epoch read these
                    raise RuntimeStateError(
                        f"cannot rewind stage '{s}': the multicast bindings its next epoch would read were deleted "
                        f"after an undone epoch read them (e.g. {gone[0]}); rewind to its last epoch or later, "
                        "or to 0. Nothing was changed",
                        code="rewind-unavailable",
                    )
            new.stages[s] = st
            code = target.shapes.get(f"code:{s}")  # the code its last kept epoch ran (cbp.controller.codehash)
            if code is None:
                new.shapes.pop(f"code:{s}", None)
            else:
                new.shapes[f"code:{s}"] = copy.deepcopy(code)
        new.connectors = {k: list(target.connectors.get(k, [])) for k in cur.connectors}
        for f, fs in cur.flows.items():
            fl = self.live.spec.flows.get(f)
            if fl is None or not fl.external:
                t = copy.deepcopy(target.flows.get(f, FlowState()))
                t.next_inc = max(t.next_inc, fs.next_inc)
                new.flows[f] = t
                continue
            if not fl.consumers:  # nobody reads it: a rewind has nothing to give back
                continue
            new.flows[f] = self._external(cur, target, f, report)
            kept = set(new.flows[f].incs)
            since = sorted(i for i in kept if i not in target.flows.get(f, FlowState()).incs)
            for c in fl.consumers:
                q = [i for i in new.connector(c, f) if i in kept]  # a feed withdrawn since (cbp unfeed) is gone
                new.connectors[f"{c}.{f}"] = q + [i for i in since if i not in q]
        return new

    def _external(self, cur: Snapshot, target: Snapshot, flow: str, report: RewindReport) -> FlowState:
        """An external flow after the rewind: the increments live at the target and those fed since,
        each as it is now (a framed one may have grown), those collected since back from the history."""
        fs = copy.deepcopy(cur.flows[flow])
        tf = target.flows.get(flow, FlowState())
        read = {i for c in self.live.spec.flows[flow].consumers for i in target.connectors.get(f"{c}.{flow}", [])}
        wanted = {
            i for i in tf.incs if i in fs.incs or i in read or not self.live.spec.flows[flow].consumers
        }  # not garbage at the target
        fed: dict[
            int, tuple[int, int]
        ] = {}  # increment -> its feed and the feed's records (an unframed feed is one increment)
        for n in range(tf.feeds + 1, fs.feeds + 1):
            e = self.history.feed(cur, flow, n)
            if e is not None:
                fed.update((i, (n, e.records or 0)) for i in e.incs)
        wanted.update(fed)
        incs: dict[int, Increment] = {}
        for i in sorted(wanted):
            if i in fs.incs:
                incs[i] = fs.incs[i]
                continue
            ce = self.history.collected_entry(flow, i)
            if ce is None or ce.undone:
                continue  # withdrawn (cbp unfeed): not landed any more
            if ce.meta is not None:
                incs[i] = copy.deepcopy(ce.meta)
            elif i in tf.incs and tf.incs[i].complete:
                incs[i] = copy.deepcopy(tf.incs[i])
            elif (
                i in fed and self.live.spec.flows[flow].frame_by is None
            ):  # collected by an older cbp: what feed() made of it
                incs[i] = Increment(fed[i][0], fed[i][1], None, f"feed:{fed[i][0]}", True, [fed[i][0]])
            else:
                raise RuntimeStateError(
                    f"flow '{flow}': increment {i} was collected by a cbp that did not keep what a rewind needs "
                    "to bring it back; rewind to a later epoch",
                    code="rewind-unavailable",
                )
            incs[i].version = ce.version if ce.version is not None else fs.version
            report.restored.setdefault(flow, []).append(i)
        fs.incs = incs
        return fs

    def _head(self, rel: str) -> int | None:
        dt = self.home.table(rel)
        return None if dt is None else dt.version()

    def _files(self, rel: str, version: int | None) -> list[dict[str, Any]]:
        """The live files of a table version; an old version whose log is gone is ``rewind-vacuumed``."""
        if version is None:
            return []
        try:
            return self.home.table_files(rel, version)
        except Exception as e:  # delta-rs raises several types for a version it cannot load
            raise RuntimeStateError(
                f"cannot rewind: version {version} of Delta table {self.home.uri(rel)} cannot be read any more "
                f"({str(e)[:200]}); its log was cleaned up. Nothing was changed",
                code="rewind-vacuumed",
            ) from e

    def _diff(
        self, rel: str, partition_by: str, want: list[dict[str, Any]], seq: int, targets: list[Target]
    ) -> tuple[list[Commit], int | None]:
        """The commit that makes ``want`` the table's live files (none if they are), and its head version."""
        head = self._head(rel)
        have = self._files(rel, head)
        have_paths, want_paths = {f["path"] for f in have}, {f["path"] for f in want}
        adds = [f for f in want if f["path"] not in have_paths]
        removes = [f for f in have if f["path"] not in want_paths]
        gone = [f["path"] for f in adds if not self.home.exists(f"{rel}/{f['path']}")]
        if gone:
            raise RuntimeStateError(
                f"cannot rewind: {len(gone)} data file(s) of Delta table {self.home.uri(rel)} that the target moment "
                f"needs were deleted (VACUUM?), e.g. {gone[0]}. Nothing was changed; rewind to a later epoch",
                code="rewind-vacuumed",
            )
        if not adds and not removes:
            return [], head
        return [Commit(rel, partition_by, tuple(adds), tuple(removes), APP, seq, tuple(targets))], head

    def _restore_state(self, new: Snapshot, stage: str, version: int | None, seq: int) -> list[Commit]:
        """Put the stage's state table back to the files of ``version`` (no state: no files)."""
        rel = LAYOUT.state(stage)
        if self._head(rel) is None:
            new.stages[stage].state_version = None
            return []
        commits, head = self._diff(rel, PART, self._files(rel, version), seq, [StateVersion(stage)])
        new.stages[stage].state_version = head if commits or version is not None else None
        return commits

    def _restore_flow(self, cur: Snapshot, target: Snapshot, new: Snapshot, flow: str, seq: int) -> list[Commit]:
        """Make the flow's table hold exactly the increments live after the rewind."""
        rel = LAYOUT.flow(flow)
        fs = new.flows[flow]
        if self._head(rel) is None:
            fs.version = None
            return []
        fl = self.live.spec.flows.get(flow)
        if fl is not None and fl.external and not fl.consumers:
            return []
        if (
            fl is None or not fl.external
        ):  # a stage's output: as at the target (a flow nobody reads keeps collected increments there too)
            want = self._files(rel, target.flows.get(flow, FlowState()).version)
        else:
            # the increments of an external flow as they are now, those collected since out of the
            # version that held them
            by_version: dict[int | None, set[int]] = {}
            for i, m in fs.incs.items():
                by_version.setdefault(cur.flows[flow].version if i in cur.flows[flow].incs else m.version, set()).add(i)
            want = [f for v, ids in by_version.items() for f in self._files(rel, v) if int(f["partition"]) in ids]
        targets: list[Target] = [FlowVersion(flow), *(IncrementVersion(flow, i) for i in fs.incs)]
        commits, head = self._diff(rel, INC, want, seq, targets)
        fs.version = head
        for m in fs.incs.values():
            m.version = head
        return commits

    def _record(
        self, cur: Snapshot, target: Snapshot, undone: dict[str, list[int]], report: RewindReport
    ) -> RewindEntry:
        """The rewind's history entry: where it went, and each undone epoch's entry with the table
        versions that still hold what it wrote (read by :meth:`undone_output`)."""
        epochs: dict[str, tuple[UndoneEpoch, ...]] = {}
        collected: dict[str, dict[int, CollectedEntry]] = {}
        for s, es in undone.items():
            for e in es:
                entry = self.history.epoch_entry(cur, s, e) or EpochEntry(None, {}, {})
                versions: dict[str, dict[int, int | None]] = {}
                for f, ids in entry.outputs.items():
                    for i in ids:
                        if i in cur.flows[f].incs:
                            v = cur.flows[f].version
                        else:
                            c = self.history.collected_entry(f, i)
                            if c is None or c.undone:
                                continue
                            if i not in target.flows.get(f, FlowState()).incs:
                                collected.setdefault(f, {})[i] = c
                            v = cur.flows[f].version if c.version is None else c.version
                        versions.setdefault(f, {})[i] = v
                epochs[s] = (*epochs.get(s, ()), UndoneEpoch(e, entry, versions))
        to = {"stage": report.stage, "epoch": report.epoch, "seq": target.seq}
        restored = {f: tuple(sorted(ids)) for f, ids in report.restored.items()}
        return RewindEntry(report.seq, to, round(time.time(), 3), epochs, collected, restored)

    def rewind_entries(self) -> list[RewindEntry]:
        """The rewinds committed in the home, oldest first, typed."""
        self.journal.refresh()
        base = f"{LAYOUT.HISTORY}/rewinds"
        out = []
        for name in self.home.list_dir(base):
            if (
                name.endswith(".json") and name[:-5].isdigit() and int(name[:-5]) <= self.live.st.seq
            ):  # a later one did not commit
                rec = self.home.read_json(f"{base}/{name}")
                if rec is not None:
                    out.append(parse(RewindEntry.from_json, rec, f"{base}/{name}"))
        return sorted(out, key=lambda r: r.seq)

    def rewinds(self) -> list[dict[str, Any]]:
        """The rewinds committed in the home, oldest first, as JSON (their history entries)."""
        return [r.to_json() for r in self.rewind_entries()]

    def undone_output(self, flow: str, epoch: int, rewind_seq: int | None = None) -> list[dict[str, Any]]:
        """The records that epoch ``epoch`` of ``flow``'s producer wrote before a rewind undid it (the
        latest rewind that undid that epoch, or the one committed as change ``rewind_seq``)."""
        fl = self.live.spec.flow(flow)
        if fl.producer is None:
            raise UsageError(f"flow '{flow}' is external: a rewind undoes no feed", code="not-produced")
        for rec in reversed(self.rewind_entries()):
            if rewind_seq is not None and rec.seq != rewind_seq:
                continue
            for e in rec.undone.get(fl.producer, ()):
                if e.epoch == epoch:
                    by_version: dict[int, list[str]] = {}
                    for i, v in e.versions.get(flow, {}).items():
                        if v is not None:  # None: the version was never recorded
                            by_version.setdefault(v, []).append(str(i))
                    rows = [
                        r
                        for v, ids in by_version.items()
                        for r in stored_rows(
                            self.home.read_table(LAYOUT.flow(flow), v, partitions=[(INC, "in", ids)]),
                            fl.schema,
                            (INC, SRC, DIFF),
                        )
                    ]
                    return [
                        rec for rec, meta in sorted(rows, key=lambda r: int(r[1][INC]))
                    ]  # as recorded if before a flow migration
        raise UsageError(
            f"no rewind undid epoch {epoch} of stage '{fl.producer}'"
            + (f" as change {rewind_seq}" if rewind_seq else ""),
            code="unknown-epoch",
        )
