"""``cbp upgrade``: apply a plan (:mod:`.plan`) to a home as one durable change.

Every change of the plan is prepared first (new state and increment files written, invisible),
then committed through the journal (:mod:`.journal`) as one pending record: the Delta commits
(with the new table schemas), the snapshot change (stages archived, restored or added, their
connectors, the recorded pipeline) and the history entry holding the YAML the upgrade came
from. A kill before the pending record leaves the old pipeline (the files written are orphans,
invisible); a kill after it leaves a record the next writer finishes: the new pipeline. Never a mix.

The recorded YAML lives in the history (see :mod:`.evolution`, which also gates every change
while the YAML waits for an upgrade).

Reads: ``live.spec`` and ``live.st``, the recorded pipeline (:class:`~.evolution.Evolution`), the
flow and state tables' files, archived stages' shapes. Writes: through the journal, one change:
the rewritten state and flow tables' commits (files from :class:`~.migrate.Migration`),
``live.st`` (stages archived, restored, added or dropped, their connectors, revived increments,
the recorded pipeline's shapes) and the recorded YAML's history entry; drops every intention
first (:class:`~.intentions.Intentions`).
"""

from __future__ import annotations

import time
from typing import Any, Optional

from .. import faults
from ..errors import UsageError
from ..spec import PipelineSpec
from ..spec.schema import RecordSchema
from ..storage import LAYOUT, PART, Home
from .evolution import Evolution, record
from .history import History
from .intentions import Intentions
from .journal import Journal
from .live import Live
from .migrate import Migration, upgrade_app
from .plan import ARCHIVE, PIPELINE, Change, Plan
from .snapshot import Increment, Snapshot, StageState, conn
from .stageplan import make_plan

__all__ = ["Upgrade", "unfed_waits"]


class Upgrade:
    """Plans and applies an upgrade of the home to today's YAML."""

    def __init__(self, home: Home, live: Live, journal: Journal, history: History, evolution: Evolution,
                 intentions: Intentions, migration: Migration) -> None:
        self.home, self.live, self.journal, self.history = home, live, journal, history
        self.evolution, self.intentions, self.migration = evolution, intentions, migration

    def plan(self, restore: tuple[str, ...] = (), discard: tuple[str, ...] = ()) -> Plan:
        """What :meth:`upgrade` would do (nothing is changed)."""
        self.journal.refresh()
        return make_plan(self.evolution.recorded_definition(), self.live.spec, self.evolution.committed_snapshot(),
                         restore=restore, discard=discard)

    def upgrade(self, restore: tuple[str, ...] = (), discard: tuple[str, ...] = (), command: str = "cbp upgrade") -> Plan:
        """Apply the plan as one durable change; refused plans raise ``plan-refused``."""
        with self.home.runner_lock(command):
            self.evolution.upgrading = True
            try:
                with self.journal.locked():
                    plan = self.plan(restore, discard)
                    if plan.refused:
                        raise UsageError("the plan has changes cbp cannot make: " + "; ".join(c.line() for c in plan.refused), code="plan-refused")
                    unknown = [r for r in (*restore, *discard) if r not in {c.name for c in plan.changes}]
                    if unknown:
                        raise UsageError(f"no archived stage '{unknown[0]}' is added back by this YAML", code="not-archived")
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
            commits: list[dict[str, Any]] = []
            cleanup: list[str] = []
            written: list[str] = []
            try:
                for c in plan.changes:
                    self._apply(c, old, n, commits, cleanup, written)
            except BaseException:
                self.journal.delete_quietly(written)
                raise
            rel, entry = record(self.live.st, self.live.spec, "upgrade", plan.lines())
            self.journal.entry(rel, entry)
            self.live.st.adopt(self.live.spec.flows, {s: st.input_flows for s, st in self.live.spec.stages.items()})
            faults.point("upgrade:written")
            self.journal.commit("upgrade", f"upgrade {n} of pipeline '{self.live.spec.name}'", commits, cleanup=cleanup, written=written)
        return n

    def _apply(self, c: Change, old: Optional[dict[str, Any]], n: int, commits: list[dict[str, Any]],
               cleanup: list[str], written: list[str]) -> None:
        s = c.name
        if c.kind == "flow-schema":
            commit, w = self.migration.flow_commit(s, n)
            written += w
            commits.append(commit)
        elif c.kind == "state-rewrite":
            assert old is not None
            base = LAYOUT.index(s)
            before = [f"{base}/{d}/{f}" for d in self.home.list_dir(base) if d.startswith(f"{PART}=") for f in self.home.list_dir(f"{base}/{d}")]
            commit, index, w = self.migration.state_commit(s, RecordSchema.parse(old["stages"][s]["state"]), n)
            written += w
            commits.append(commit)
            cleanup += before
            sst = self.live.st.stages[s]
            sst.index, sst.layout = index, "direct"
        elif c.kind == "archive":
            self._archive(s, n)
        elif c.kind in ("drop-stage",):
            self.live.st.stages.pop(s, None)
            for k in [k for k in self.live.st.connectors if k.split(".", 1)[0] == s]:
                del self.live.st.connectors[k]
        elif c.kind == "drop-input":
            self.live.st.connectors.pop(conn(s, c.args["flow"]), None)
        elif c.kind == "drop-state":
            sst = self.live.st.stages[s]
            sst.state_version, sst.index = None, {}
        elif c.kind == "add-stage":
            self._add(s, n, commits, backfill=c.args["backfill"])
        elif c.kind == "restore":
            self._restore(s, n, commits)

    def _archive(self, s: str, n: int) -> None:
        """Move a removed stage's state and position out of the live snapshot, into its archive."""
        st = self.live.st.stages.pop(s)
        conns = {k.split(".", 1)[1]: self.live.st.connectors.pop(k) for k in [k for k in self.live.st.connectors if k.split(".", 1)[0] == s]}
        self.live.st.shapes[ARCHIVE + s] = {
            "upgrade": n, "epoch": st.epoch, "state_version": st.state_version, "index": st.index, "layout": st.layout,
            "bindings": st.bindings, "runnable_state": st.runnable_state, "connectors": conns,
            "next_inc": {f: self.live.st.flows[f].next_inc for f in conns if f in self.live.st.flows}, "at": time.time(),
        }

    def _clear_state(self, s: str, n: int, commits: list[dict[str, Any]]) -> None:
        """A commit that leaves the stage's state table (if any) without live files (old versions stay readable)."""
        rel = LAYOUT.state(s)
        if self.home.table(rel) is None:
            return
        app, version = upgrade_app(n)
        commits.append({"table": rel, "partition_by": PART, "adds": [], "removes": [], "overwrite": True, "app": app, "version": version,
                        "targets": [["stages", s, "state_version"]]})

    def _add(self, s: str, n: int, commits: list[dict[str, Any]], *, backfill: bool) -> None:
        """A stage added: empty, its epochs numbered on from any earlier life (Delta transaction ids stay increasing)."""
        arch = self.live.st.shapes.pop(ARCHIVE + s, None)
        prev = self.live.st.stages.get(s)
        epoch = max(int(arch["epoch"]) if arch else 0, prev.epoch if prev else 0)
        self.live.st.stages[s] = StageState(epoch=epoch)
        for k in [k for k in self.live.st.connectors if k.split(".", 1)[0] == s]:
            del self.live.st.connectors[k]
        self._clear_state(s, n, commits)
        for f in self.live.spec.stages[s].input_flows:
            self.live.st.connectors[conn(s, f)] = self._retained(f) if backfill else []

    def _in_table(self, flow: str) -> dict[int, int]:
        """Increments in the flow table's current version: id -> records."""
        fs = self.live.st.flows.get(flow)
        if fs is None or fs.version is None:
            return {}
        out: dict[int, int] = {}
        for f in self.home.table_files(LAYOUT.flow(flow), fs.version):
            out[int(f["partition"])] = out.get(int(f["partition"]), 0) + int(f["rows"] or 0)
        return out

    def _revive(self, flow: str, inc: int, records: int) -> None:
        """Make an increment still in the flow's table live again (it left the snapshot when nobody read it)."""
        fs = self.live.st.flows[flow]
        if inc not in fs.incs:
            fs.incs[inc] = Increment(inc, records, fs.version, "retained", True)

    def _retained(self, flow: str) -> list[int]:
        """Every increment of ``flow`` still stored, oldest first (live, or in its table), made live."""
        table = self._in_table(flow)
        for inc, rows in table.items():
            self._revive(flow, inc, rows)
        return sorted(set(self.live.st.flows[flow].incs) if flow in self.live.st.flows else set())

    def _restore(self, s: str, n: int, commits: list[dict[str, Any]]) -> None:
        """A stage added back as it was archived, with every increment of its inputs it missed."""
        arch = self.live.st.shapes.pop(ARCHIVE + s)
        conns: dict[str, list[int]] = {}
        missing: list[str] = []
        for f in self.live.spec.stages[s].input_flows:
            fs = self.live.st.flows.get(f)
            if fs is None or f not in arch["next_inc"]:
                conns[f] = []  # an input it did not have: read from now on
                continue
            table = self._in_table(f)
            ids = [int(i) for i in arch["connectors"].get(f, [])] + list(range(int(arch["next_inc"][f]), fs.next_inc))
            kept = []
            for i in ids:
                if i in fs.incs or i in table:
                    self._revive(f, i, table.get(i, 0))
                    kept.append(i)
                elif self.history.collected_version(self.live.st, f, i) is not None:
                    missing.append(f"'{f}' increment {i}")
            conns[f] = kept
        if missing:
            raise UsageError(f"cannot restore stage '{s}' from its archive: it missed {', '.join(missing[:5])}"
                             f"{' and more' if len(missing) > 5 else ''}, which were garbage-collected once no stage read them. "
                             f"Add it back with 'backfill: true' or --discard-archived {s} instead", code="archive-increments-collected")
        self.live.st.stages[s] = StageState(arch["epoch"], arch["runnable_state"], arch["state_version"], arch["layout"], dict(arch["index"]),
                                      list(arch["bindings"]))
        for f, ids in conns.items():
            self.live.st.connectors[conn(s, f)] = ids
        if arch["state_version"] is not None:
            self._restore_table(s, int(arch["state_version"]), n, commits)

    def _restore_table(self, s: str, version: int, n: int, commits: list[dict[str, Any]]) -> None:
        """Make the archived version's files the state table's live files again (unless they still are)."""
        rel = LAYOUT.state(s)
        files = self.home.table_files(rel, version)
        head = self.home.table(rel)
        if head is not None and head.version() == version:
            return
        gone = [f["path"] for f in files if not self.home.exists(f"{rel}/{f['path']}")]
        if gone:
            raise UsageError(f"cannot restore stage '{s}': {len(gone)} file(s) of its archived state are gone from {self.home.uri(rel)} "
                             f"(vacuumed?), e.g. {gone[0]}", code="archive-gone")
        app, v = upgrade_app(n)
        commits.append({"table": rel, "partition_by": PART, "adds": files, "removes": [], "overwrite": True, "app": app, "version": v,
                        "targets": [["stages", s, "state_version"]]})


def unfed_waits(spec: PipelineSpec, st: Snapshot) -> list[str]:
    """Stages that wait (runnable 'all') for an external flow nobody has fed yet, while other input is pending."""
    out = []
    for s, stage in spec.stages.items():
        if stage.runnable_name != "all" or len(stage.inputs) < 2:
            continue
        pending = any(st.connectors.get(conn(s, i.flow)) for i in stage.inputs)
        for i in stage.inputs:
            fl, fs = spec.flows[i.flow], st.flows.get(i.flow)
            if pending and fl.external and (fs is None or fs.feeds == 0):
                out.append(f"stage '{s}' waits for flow '{i.flow}', which nobody has fed (runnable 'all' reads an increment of every input); "
                           f"feed it, or give the stage 'runnable: any'")
    return out
