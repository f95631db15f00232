"""``cbp upgrade``: apply a plan (:mod:`.plan`) to a home as one durable change.

Every change of the plan is prepared first (new state and increment files written, invisible),
then committed through the journal (:mod:`.journal`) as one pending record: the Delta commits
(with the new table schemas), the snapshot change (stages archived, restored or added, their
connectors, the recorded pipeline) and the history entry holding the YAML the upgrade came
from. A kill before the pending record leaves the old pipeline (the files written are orphans,
invisible); a kill after it leaves a record the next writer finishes: the new pipeline. Never a mix.

The recorded YAML lives in the history (see :mod:`.evolution`, which also gates every change
while the YAML waits for an upgrade).

The snapshot changes are typed updates (:mod:`.change`): each is applied at once to a working
copy of the snapshot (:class:`_Work`), which the later steps of the same upgrade read, and the
journal applies them all to ``live.st`` when it commits the change.

Reads: ``live.spec`` and ``live.st``, the recorded pipeline (:class:`~.evolution.Evolution`), the
flow and state tables' files, archived stages' shapes. Writes: through the journal, one change:
the rewritten state and flow tables' commits (files from :class:`~.migrate.Migration`), the
snapshot updates (stages archived, restored, added or dropped, their connectors, revived
increments, the recorded pipeline's shapes) and the recorded YAML's history entry; drops every
intention first (:class:`~.intentions.Intentions`).
"""

from __future__ import annotations

import copy
import time
from dataclasses import replace
from typing import Any

import pyarrow as pa

from .. import faults
from ..errors import UsageError
from ..spec.schema import RecordSchema
from ..storage import INC, LAYOUT, PART, Home
from .backfill import BACKFILL, Contents, Survey, consolidate, is_synthetic, survey, synthetic_rows
from .change import Change as HomeChange
from .change import (
    Commit,
    ConnectorDropped,
    ConnectorSet,
    FlowCounters,
    FlowVersion,
    IncrementAdded,
    IncrementSet,
    IncrementVersion,
    PipelineAdopted,
    ShapeDropped,
    ShapeSet,
    SnapshotUpdate,
    StageDropped,
    StageSet,
    StateVersion,
    Target,
)
from .evolution import Evolution, recording
from .history import History
from .intentions import Intentions
from .journal import Journal
from .live import Live
from .migrate import Migration, upgrade_app
from .plan import ARCHIVE, PIPELINE, Change, Plan
from .snapshot import Increment, Snapshot, StageState, conn
from .stageplan import make_plan
from .viewtables import ViewTables

__all__ = ["Upgrade"]

REBUILD = "rebuild:"  # the producer prefix of the increment retracting a rebuilt view's old rows
BACKFILL_APP = "cbp-backfill"  # the application transaction of an upgrade's synthetic increments (upgrade n: version n)


class _Work:
    """An upgrade's snapshot updates, each applied at once to a working copy (``snap``) that the
    upgrade's later steps read; the live snapshot is left alone until the journal commits them."""

    def __init__(self, st: Snapshot) -> None:
        self.snap = st.copy()
        self.updates: list[SnapshotUpdate] = []

    def __call__(self, *updates: SnapshotUpdate) -> None:
        for u in updates:
            u.apply(self.snap)
            self.updates.append(u)

    def drop_connectors(self, stage: str) -> None:
        """Every connector of ``stage`` goes."""
        self(*(ConnectorDropped(k) for k in list(self.snap.connectors) if k.split(".", 1)[0] == stage))


class Upgrade:
    """Plans and applies an upgrade of the home to today's YAML."""

    def __init__(
        self,
        home: Home,
        live: Live,
        journal: Journal,
        history: History,
        evolution: Evolution,
        intentions: Intentions,
        migration: Migration,
    ) -> None:
        self.home, self.live, self.journal, self.history = home, live, journal, history
        self.evolution, self.intentions, self.migration = evolution, intentions, migration
        self._contents: dict[str, Contents] = {}  # flow -> its consolidated contents, as the last plan read them
        self._synthetic: dict[str, list[dict[str, Any]]] = {}  # flow -> the adds of its synthetic increments
        self._retracted: set[str] = set()  # flows whose whole contents this upgrade retracts (rebuilt views)
        self._w = _Work(Snapshot(live.spec.name))  # the upgrade being applied (see apply_plan)

    def plan(self, restore: tuple[str, ...] = (), discard: tuple[str, ...] = ()) -> Plan:
        """What :meth:`upgrade` would do (nothing is changed)."""
        self.journal.refresh()
        snap = self.evolution.committed_snapshot()
        plan = make_plan(self.evolution.recorded_definition(), self.live.spec, snap, restore=restore, discard=discard)
        self._contents = {}
        plan.changes = [
            self._backfill_plan(c, snap) if c.kind == "add-stage" and c.args.get("backfill") else c
            for c in plan.changes
        ]
        return plan

    def _backfill_plan(self, c: Change, snap: Snapshot) -> Change:
        """An added stage's backfill as the plan shows it: what it reads per input, or a refusal naming what is gone."""
        parts = []
        for i in self.live.spec.stages[c.name].inputs:
            sv = survey(self.home, self.history, snap, i.flow)
            if sv.missing:
                gone = "; ".join(sv.missing[:3]) + (" and more" if len(sv.missing) > 3 else "")
                why = (
                    f"added with 'backfill: true', but the home no longer holds all of flow '{i.flow}': {gone}. "
                    "Add the stage without 'backfill: true' (it starts empty), or restore the files from a backup"
                )
                return Change("refused", c.what, why, code="backfill-unavailable", name=c.name)
            try:
                contents = self._contents_of(i.flow, snap, sv)
            except ValueError as e:
                code = "negative-multiplicity" if e.args[0] == "negative" else "backfill-unavailable"
                return Change("refused", c.what, _unreadable(i.flow, e), name=c.name, code=code)
            copies = sum(contents.diffs)
            expanded = not i.signed and copies != contents.records
            read = f" (read as {copies} records of +1: the input is not signed)" if expanded else ""
            parts.append(
                f"flow '{i.flow}': {sv.increments} increment(s), {sv.stored} records stored, "
                f"{contents.records} records consolidated{read}"
            )
        detail = f"{c.detail}; backfill reads " + ("; ".join(parts) or "nothing (no input)")
        return Change(c.verdict, c.what, detail, kind=c.kind, name=c.name, data=c.data, args=c.args)

    def _contents_of(self, flow: str, snap: Snapshot, sv: Survey | None = None) -> Contents:
        """The flow's consolidated contents (read once per plan)."""
        if flow not in self._contents:
            sv = sv or survey(self.home, self.history, snap, flow)
            self._contents[flow] = consolidate(self.home, self.live.spec, sv)
        return self._contents[flow]

    def upgrade(
        self, restore: tuple[str, ...] = (), discard: tuple[str, ...] = (), command: str = "cbp upgrade"
    ) -> Plan:
        """Apply the plan as one durable change; refused plans raise ``plan-refused``."""
        with self.home.runner_lock(command):
            self.evolution.upgrading = True
            try:
                with self.journal.locked():
                    plan = self.plan(restore, discard)
                    if plan.refused:
                        raise UsageError(
                            "the plan has changes cbp cannot make: " + "; ".join(c.line() for c in plan.refused),
                            code="plan-refused",
                        )
                    unknown = [r for r in (*restore, *discard) if r not in {c.name for c in plan.changes}]
                    if unknown:
                        raise UsageError(
                            f"no archived stage '{unknown[0]}' is added back by this YAML", code="not-archived"
                        )
                    if plan.needs_upgrade:
                        self.apply_plan(plan, restore)
                    return plan
            finally:
                self.evolution.upgrading = False

    def apply_plan(self, plan: Plan, restore: tuple[str, ...]) -> int:
        """Prepare and commit every change of ``plan`` (under the home's lock); the upgrade's number."""
        old = self.evolution.recorded_definition()
        n = int((self.live.st.shapes.get(PIPELINE) or {}).get("n", 0)) + 1
        self.intentions.abandon_all()  # epochs a killed run left: decided again under the new pipeline
        with self.journal.transaction():
            commits: list[Commit] = []
            cleanup: list[str] = []
            written: list[str] = []
            self._synthetic, self._retracted, self._w = {}, set(), _Work(self.live.st)
            try:
                for c in plan.changes:
                    self._apply(c, old, n, commits, cleanup, written)
                commits += self._synthetic_commits(n)
            except BaseException:
                self.journal.delete_quietly(written)
                raise
            rel, entry, shapes = recording(self._w.snap, self.live.spec, "upgrade", plan.lines())
            spec = self.live.spec
            self._w(
                *shapes,
                PipelineAdopted(tuple(spec.flows), tuple((s, tuple(st.input_flows)) for s, st in spec.stages.items())),
            )
            faults.point("upgrade:written")
            change = HomeChange(
                "upgrade",
                f"upgrade {n} of pipeline '{spec.name}'",
                tuple(commits),
                tuple(self._w.updates),
                entries=((rel, entry),),
                cleanup=tuple(cleanup),
                written=tuple(written),
            )
            self.journal.commit(change)
        return n

    def _apply(
        self,
        c: Change,
        old: dict[str, Any] | None,
        n: int,
        commits: list[Commit],
        cleanup: list[str],
        written: list[str],
    ) -> None:
        s = c.name
        if c.kind == "flow-schema":
            migrating = c.args.get("migrate") and old is not None
            old_schema = RecordSchema.parse(old["flows"][s]["schema"]) if migrating and old is not None else None
            commit, w = self.migration.flow_commit(self._w.snap, s, n, old_schema)
            written += w
            commits.append(commit)
            if old_schema is not None:  # records a migrate dropped leave their increments' counts
                rows = dict[int, int]()
                for a in commit.adds:
                    rows[int(a["partition"])] = rows.get(int(a["partition"]), 0) + int(a["rows"])
                for i, m in list(self._w.snap.flows[s].incs.items()):
                    self._w(IncrementSet(s, i, replace(m, records=rows.get(i, 0))))
        elif c.kind == "state-rewrite":
            assert old is not None
            base = LAYOUT.index(s)
            before = [
                f"{base}/{d}/{f}"
                for d in self.home.list_dir(base)
                if d.startswith(f"{PART}=")
                for f in self.home.list_dir(f"{base}/{d}")
            ]
            old_state = RecordSchema.parse(old["stages"][s]["state"])
            commit, index, w = self.migration.state_commit(self._w.snap, s, old_state, n)
            written += w
            commits.append(commit)
            cleanup += before
            self._w(StageSet(s, replace(self._w.snap.stages[s], index=index, layout="direct")))
        elif c.kind == "archive":
            self._archive(s, n)
        elif c.kind in ("drop-stage",):
            self._w(StageDropped(s))
            self._w.drop_connectors(s)
        elif c.kind == "drop-input":
            self._w(ConnectorDropped(conn(s, c.args["flow"])))
        elif c.kind == "drop-state":
            self._w(StageSet(s, replace(self._w.snap.stages[s], state_version=None, index={})))
        elif c.kind == "add-stage":
            self._add(s, n, commits, written, backfill=c.args["backfill"])
        elif c.kind == "rebuild-view":
            for f in self.live.spec.stages[s].outputs:
                self._retract(s, f, n, written)
                commits += ViewTables(self.home, self.live, self.history).cleared(f, upgrade_app(n))
            self._add(s, n, commits, written, backfill=True)
        elif c.kind == "restore":
            self._restore(s, n, commits)

    def _archive(self, s: str, n: int) -> None:
        """Move a removed stage's state and position out of the live snapshot, into its archive."""
        w = self._w.snap
        st = w.stages[s]
        conns = {k.split(".", 1)[1]: list(q) for k, q in w.connectors.items() if k.split(".", 1)[0] == s}
        archived = {
            "upgrade": n,
            "epoch": st.epoch,
            "state_version": st.state_version,
            "index": st.index,
            "layout": st.layout,
            "bindings": st.bindings,
            "runnable_state": st.runnable_state,
            "connectors": conns,
            "next_inc": {f: w.flows[f].next_inc for f in conns if f in w.flows},
            "at": time.time(),
        }
        self._w(StageDropped(s))
        self._w.drop_connectors(s)
        self._w(ShapeSet(ARCHIVE + s, copy.deepcopy(archived)))

    def _clear_state(self, s: str, n: int, commits: list[Commit]) -> None:
        """A commit that leaves the stage's state table (if any) without live files (old versions stay readable)."""
        rel = LAYOUT.state(s)
        if self.home.table(rel) is None:
            return
        app, version = upgrade_app(n)
        commits.append(Commit(rel, PART, (), (), app, version, (StateVersion(s),), overwrite=True))

    def _add(self, s: str, n: int, commits: list[Commit], written: list[str], *, backfill: bool) -> None:
        """A stage added: empty (or backfilled: its inputs' whole contents first), its epochs numbered on from any
        earlier life (Delta transaction ids stay increasing)."""
        arch = self._w.snap.shapes.get(ARCHIVE + s)
        prev = self._w.snap.stages.get(s)
        epoch = max(int(arch["epoch"]) if arch else 0, prev.epoch if prev else 0)
        self._w(ShapeDropped(ARCHIVE + s), StageSet(s, StageState(epoch=epoch)))
        self._w.drop_connectors(s)
        self._clear_state(s, n, commits)
        for i in self.live.spec.stages[s].inputs:
            ids = self._backfill(s, i.flow, i.signed, n, written) if backfill else []
            self._w(ConnectorSet(conn(s, i.flow), tuple(ids)))

    def _backfill(self, s: str, flow: str, signed: bool, n: int, written: list[str]) -> list[int]:
        """Write ``flow``'s consolidated contents as one synthetic increment for stage ``s``; its connector."""
        if flow in self._retracted:  # a rebuilt view's output: empty until its stage writes the new rows
            return []
        sv = survey(self.home, self.history, self._w.snap, flow)
        if sv.missing:  # the plan said otherwise a moment ago: the home changed under it
            raise UsageError(
                f"cannot backfill stage '{s}': the home no longer holds all of flow '{flow}': {sv.missing[0]}",
                code="backfill-unavailable",
            )
        try:
            contents = self._contents_of(flow, self._w.snap, sv)
        except ValueError as e:
            why = _unreadable(flow, e)
            raise UsageError(f"cannot backfill stage '{s}': {why}", code="backfill-unavailable") from None
        after = [sv.open] if sv.open is not None else []
        if not contents.records:
            return after
        t = synthetic_rows(self.live.spec, flow, contents, signed)
        return [self._write_increment(flow, t, n, BACKFILL + s, (), written)] + after

    def _retract(self, s: str, flow: str, n: int, written: list[str]) -> None:
        """A rebuilt view's output ``flow``: one increment retracting its whole consolidated contents,
        enqueued for the readers it has (a real increment of the flow, not a synthetic one: the flow's
        contents are empty after it until the rebuilt stage writes its new rows)."""
        sv = survey(self.home, self.history, self._w.snap, flow)
        try:
            if sv.missing:
                raise ValueError("missing", sv.missing[0])
            contents = self._contents_of(flow, self._w.snap, sv)
        except ValueError as e:
            why = f"the home no longer holds all of it: {e.args[1]}" if e.args[0] == "missing" else _unreadable(flow, e)
            raise UsageError(
                f"cannot rebuild view stage '{s}': flow '{flow}': {why}", code="backfill-unavailable"
            ) from None
        self._retracted.add(flow)
        if not contents.records:
            return
        negated = Contents(contents.rows, [-d for d in contents.diffs])
        t = synthetic_rows(self.live.spec, flow, negated, True)
        readers = tuple(c for c in self.live.spec.flows[flow].consumers if conn(c, flow) in self._w.snap.connectors)
        self._write_increment(flow, t, n, f"{REBUILD}{s}:{n}", readers, written)

    def _write_increment(
        self, flow: str, t: pa.Table, n: int, producer: str, readers: tuple[str, ...], written: list[str]
    ) -> int:
        """Write ``t`` as a new increment of ``flow`` (committed with the upgrade), enqueued for ``readers``."""
        fs = self._w.snap.flows[flow]
        dt = self.home.table(LAYOUT.flow(flow))
        used = [int(p[INC]) for p in dt.partitions()] if dt is not None else []
        inc = max([fs.next_inc] + [u + 1 for u in used])
        add = self.home.write_parquet(LAYOUT.increment_dir(flow, inc), t, f"b{n}", inc)
        written.append(add["rel"])
        add["path"] = add.pop("rel")[len(LAYOUT.flow(flow)) + 1 :]
        self._synthetic.setdefault(flow, []).append(add)
        increment = Increment(None, t.num_rows, fs.version, producer, True)
        self._w(FlowCounters(flow, next_inc=inc + 1), IncrementAdded(flow, inc, increment, readers))
        return inc

    def _synthetic_commits(self, n: int) -> list[Commit]:
        """One Delta commit per flow adding the synthetic increments this upgrade wrote."""
        out = []
        for flow, adds in self._synthetic.items():
            targets: list[Target] = [FlowVersion(flow), *(IncrementVersion(flow, int(a["partition"])) for a in adds)]
            out.append(Commit(LAYOUT.flow(flow), INC, tuple(adds), (), BACKFILL_APP, n, tuple(targets)))
        return out

    def _in_table(self, flow: str) -> dict[int, int]:
        """Increments in the flow table's current version: id -> records."""
        fs = self._w.snap.flows.get(flow)
        if fs is None or fs.version is None:
            return {}
        out: dict[int, int] = {}
        for f in self.home.table_files(LAYOUT.flow(flow), fs.version):
            out[int(f["partition"])] = out.get(int(f["partition"]), 0) + int(f["rows"] or 0)
        return out

    def _revive(self, flow: str, inc: int, records: int) -> None:
        """Make an increment still in the flow's table live again (it left the snapshot when nobody read it)."""
        fs = self._w.snap.flows[flow]
        if inc not in fs.incs:
            self._w(IncrementSet(flow, inc, Increment(inc, records, fs.version, "retained", True)))

    def _is_synthetic(self, flow: str, inc: int) -> bool:
        """Whether increment ``inc`` of ``flow`` is a backfill's synthetic increment (live, or as its entry says)."""
        m = self._w.snap.flows[flow].incs.get(inc)
        if m is not None:
            return is_synthetic(m.producer)
        e = self.history.collected_entry(flow, inc)
        return is_synthetic(e.producer if e is not None else None)

    def _restore(self, s: str, n: int, commits: list[Commit]) -> None:
        """A stage added back as it was archived, with every increment of its inputs it missed."""
        arch = self._w.snap.shapes[ARCHIVE + s]
        conns: dict[str, list[int]] = {}
        missing: list[str] = []
        for f in self.live.spec.stages[s].input_flows:
            fs = self._w.snap.flows.get(f)
            if fs is None or f not in arch["next_inc"]:
                conns[f] = []  # an input it did not have: read from now on
                continue
            table = self._in_table(f)
            ids = [int(i) for i in arch["connectors"].get(f, [])] + list(range(int(arch["next_inc"][f]), fs.next_inc))
            kept = []
            for i in ids:
                if self._is_synthetic(f, i):  # another stage's backfill: not records the stage missed
                    continue
                if i in fs.incs or i in table:
                    self._revive(f, i, table.get(i, 0))
                    kept.append(i)
                elif self.history.collected_version(self._w.snap, f, i) is not None:
                    missing.append(f"'{f}' increment {i}")
            conns[f] = kept
        if missing:
            raise UsageError(
                f"cannot restore stage '{s}' from its archive: it missed {', '.join(missing[:5])}"
                f"{' and more' if len(missing) > 5 else ''}, which were garbage-collected after the "
                "stages reading them had read them. Add it back with 'backfill: true' on the stage "
                "(rebuilt from its inputs' whole contents, which the home keeps until the flow tables "
                f"are vacuumed: 'cbp plan' shows what it reads) or with --discard-archived {s} (empty) "
                "instead",
                code="archive-increments-collected",
            )
        restored = StageState(
            arch["epoch"],
            arch["runnable_state"],
            arch["state_version"],
            arch["layout"],
            dict(arch["index"]),
            list(arch["bindings"]),
        )
        self._w(ShapeDropped(ARCHIVE + s), StageSet(s, restored))
        self._w(*(ConnectorSet(conn(s, f), tuple(ids)) for f, ids in conns.items()))
        if arch["state_version"] is not None:
            self._restore_table(s, int(arch["state_version"]), n, commits)

    def _restore_table(self, s: str, version: int, n: int, commits: list[Commit]) -> None:
        """Make the archived version's files the state table's live files again (unless they still are)."""
        rel = LAYOUT.state(s)
        files = self.home.table_files(rel, version)
        head = self.home.table(rel)
        if head is not None and head.version() == version:
            return
        gone = [f["path"] for f in files if not self.home.exists(f"{rel}/{f['path']}")]
        if gone:
            raise UsageError(
                f"cannot restore stage '{s}': {len(gone)} file(s) of its archived state are gone from "
                f"{self.home.uri(rel)} "
                f"(vacuumed?), e.g. {gone[0]}",
                code="archive-gone",
            )
        app, v = upgrade_app(n)
        commits.append(Commit(rel, PART, tuple(files), (), app, v, (StateVersion(s),), overwrite=True))


def _unreadable(flow: str, e: ValueError) -> str:
    """Why :func:`~.backfill.consolidate` could not read ``flow``."""
    if e.args[0] == "negative":
        return (
            f"flow '{flow}': record {str(e.args[1])[:200]} is retracted more often than it was added (its "
            f"multiplicity sums to {e.args[2]}); fix the feeds ('cbp output {flow} --consolidated' shows where), "
            "or add the stage empty"
        )
    return (
        f"flow '{flow}': increment {e.args[1]} was stored before a 'migrate:' of the flow's schema and is "
        "read only as recorded; add the stage without 'backfill: true'"
    )
