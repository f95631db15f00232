"""Reading what the controller committed: state and output records, epochs, status.

Every read is pinned to the versions the snapshot names, so a stage epoch's state, outputs and
connector changes are seen together or not at all.

Reads: ``live.spec`` and ``live.st`` (refreshed from the home first), state and flow tables at the
versions it names, epoch, feed and collected-increment history entries, the pending record,
intentions and runner lease (for ``status``). Writes: nothing (a refresh may load a newer
snapshot into ``live``, through the journal).
"""

from __future__ import annotations

import json
from typing import Any

from ..engine.task.bipindex import latest_rows
from ..engine.task.routing import decode_key
from ..errors import InputError, RuntimeStateError, UsageError, UserCodeError
from ..spec.schema import DIFF
from ..storage import INC, LAYOUT, SRC, Home
from .backfill import is_synthetic
from .feeds import Feeds
from .history import EpochEntry, History
from .intentions import Intentions
from .journal import Journal
from .live import Live
from .migrate import conform, stored_rows
from .records import EpochRecord
from .runs import Runs
from .scheduler import Scheduler
from .viewtables import view_flows

__all__ = ["Reads"]


class Reads:
    """Read-only accessors: state and output records, epochs, feeds, status."""

    def __init__(
        self,
        home: Home,
        live: Live,
        journal: Journal,
        history: History,
        intentions: Intentions,
        scheduler: Scheduler,
        runs: Runs,
        feeds: Feeds,
        mode: str,
    ) -> None:
        self.home, self.live, self.journal, self.history, self.intentions = home, live, journal, history, intentions
        self.scheduler, self.runs, self.duplicates, self.mode = (
            scheduler,
            runs,
            feeds,
            mode,
        )  # feeds: pending duplicates

    def epochs(self, stage: str) -> int:
        """How many epochs ``stage`` has committed."""
        self.journal.refresh()
        return self.live.st.stages[self.live.spec.stage(stage).name].epoch

    def feeds(self, flow: str) -> int:
        """How many feeds external flow ``flow`` has had (the N of its newest ``output --epoch N``)."""
        self.journal.refresh()
        return self.live.st.flows[self.live.spec.flow(flow).name].feeds

    def _epoch_entry(self, stage: str, epoch: int) -> EpochEntry:
        e = self.history.epoch_entry(self.live.st, stage, epoch)
        if e is None:
            raise UsageError(
                f"stage '{stage}' has not run epoch {epoch} (epochs run: {self.live.st.stages[stage].epoch})",
                code="unknown-epoch",
            )
        return e

    def epoch_record(self, stage: str, epoch: int) -> EpochRecord:
        """What stage epoch ``epoch`` read (increment ids per input flow) and wrote (ids and records
        per output flow)."""
        self.journal.refresh()
        e = self._epoch_entry(self.live.spec.stage(stage).name, epoch)
        return EpochRecord(stage, epoch, dict(e.inputs), dict(e.outputs), dict(e.records))

    def is_new(self) -> bool:
        """True while nothing has been fed or run in the home."""
        return self.home.read_controller() is None

    def state_version(self, stage: str, epoch: int | None = None) -> int | None:
        """The Delta version of the stage's state table after ``epoch`` (default: the latest); None if empty."""
        self.journal.refresh()
        stage = self.live.spec.stage(stage).name
        return (
            self.live.st.stages[stage].state_version if epoch is None else self._epoch_entry(stage, epoch).state_version
        )

    def state(self, stage: str, epoch: int | None = None) -> list[dict[str, Any]]:
        """The stage's state records after ``epoch`` (default: the latest), sorted by key. A keyed-row
        stage's (``state: {row_key: ...}``) carry ``_key``, the grouping key the row belongs to."""
        self.journal.refresh()
        spec = self.live.spec.stage(stage)
        if spec.state_schema is None:
            raise UsageError(f"stage '{stage}' has no state (no 'state:' in the YAML)", code="no-state")
        version = self.state_version(stage, epoch)
        if version is None:
            return []
        rows = latest_rows(self.home.read_table(LAYOUT.state(stage), version))
        rows = rows.sort_by([("_key", "ascending")] + ([("_rk", "ascending")] if spec.row_key else []))
        # as stored, or upgraded since; a keyed-row stage's rows with the key each belongs to
        records = [spec.state_schema.from_storage(r) for r in conform(rows, spec.state_schema).to_pylist()]
        if not spec.row_key:
            return records
        return [{**r, "_key": decode_key(k)} for r, k in zip(records, rows.column("_key").to_pylist())]

    def output_versions(self, flow: str, epoch: int | None = None, upto: bool = False) -> dict[Any, list[int]]:
        """Which increments of the flow :meth:`output_records` reads at which Delta version of its
        table (``upto``: those of every epoch up to ``epoch``, or feed for an external flow)."""
        self.journal.refresh()
        self.live.spec.flow(flow)  # an unknown flow is refused
        fs = self.live.st.flows[flow]
        collected: dict[int, int | None] = {}
        if epoch is None:
            collected = self.history.collected(self.live.st, flow)
            live = {i for i, m in fs.incs.items() if not is_synthetic(m.producer)}  # a backfill's: not the flow's
            ids = sorted(live | set(collected))
        else:
            ids = sorted(
                {i for e in (range(1, epoch + 1) if upto and epoch > 0 else [epoch]) for i in self._epoch_incs(flow, e)}
            )
        by_version: dict[Any, list[int]] = {}  # live increments at the current version, collected ones by time travel
        for inc in ids:
            v = (
                fs.version
                if inc in fs.incs
                else collected[inc]
                if inc in collected
                else self.history.collected_version(self.live.st, flow, inc)
            )
            if v is None:
                raise RuntimeStateError(
                    f"flow '{flow}': increment {inc} is neither live nor in the history of {self.home.location}",
                    code="home-corrupt",
                )
            by_version.setdefault(v, []).append(inc)
        return by_version

    def _epoch_incs(self, flow: str, epoch: int) -> list[int]:
        """The increments of ``flow`` its producer's ``epoch`` wrote, or (external) its feed ``epoch`` landed."""
        fl, fs = self.live.spec.flow(flow), self.live.st.flows[flow]
        if fl.producer is None:
            e = self.history.feed(self.live.st, flow, epoch)
            if e is None:
                raise UsageError(
                    f"external flow '{flow}' has had {fs.feeds} feed(s); --epoch N picks the Nth (1..{fs.feeds})",
                    code="unknown-epoch",
                )
            return list(e.incs)
        return list(self._epoch_entry(fl.producer, epoch).outputs.get(flow, []))

    def _rows(self, flow: str, by_version: dict[Any, list[int]]) -> list[tuple[dict[str, Any], int, Any, int]]:
        """(record, increment, ``_src`` or None, ``_diff``) of the increments ``by_version`` names, in
        increment order: in today's schema, or as recorded where an increment predates a flow
        migration (:func:`~.migrate.stored_rows`)."""
        fl = self.live.spec.flow(flow)
        out = []
        for v, incs in by_version.items():
            t = self.home.read_table(LAYOUT.flow(flow), v, partitions=[(INC, "in", [str(i) for i in incs])])
            for rec, meta in stored_rows(t, fl.schema, (INC, SRC, DIFF)) if t is not None else []:
                d = meta.get(DIFF)
                out.append((rec, int(meta[INC]), meta.get(SRC), 1 if d is None else int(d)))  # null or absent _diff: +1
        out.sort(key=lambda r: r[1])  # stable: a version's order within an increment
        return out

    def output_records(self, flow: str, epoch: int | None = None) -> list[dict[str, Any]]:
        """Records of the flow's increments (only those produced by its stage's ``epoch`` when given)."""
        fl = self.live.spec.flow(flow)
        recs = []
        for rec, _, src, d in self._rows(flow, self.output_versions(flow, epoch)):
            if (
                epoch is not None and fl.frame_by is not None and src != epoch
            ):  # a framed increment may hold records of several feeds/epochs
                continue
            recs.append({**rec, DIFF: d} if d != 1 else rec)  # shown where it is not +1
        return recs

    def consolidated_records(self, flow: str, epoch: int | None = None) -> list[dict[str, Any]]:
        """The flow's contents as of ``epoch`` (its producer's epoch, or the feed of an external flow;
        default: all it holds): every record once, with the sum of its multiplicities as ``_diff``
        where that is not 1, zeros dropped, in the order each record first came. A record whose
        sum is negative (more retracted than there was) is :class:`InputError` code
        ``negative-multiplicity`` naming the flow, the record and the feed or epoch where its sum
        first went below zero."""
        fl = self.live.spec.flow(flow)
        rows = self._rows(flow, self.output_versions(flow, epoch, upto=True))
        if epoch is not None and fl.frame_by is not None:  # a framed increment may hold records of later feeds/epochs
            rows = [r for r in rows if r[2] is not None and r[2] <= epoch]
        rows.sort(key=lambda r: (r[1], -1 if r[2] is None else r[2]))
        totals: dict[str, list[Any]] = {}  # record identity -> [record, running sum, where it first went negative]
        for rec, inc, src, d in rows:
            k = json.dumps(rec, separators=(",", ":"), ensure_ascii=False, sort_keys=True, default=repr)
            have = totals.setdefault(k, [rec, 0, None])
            have[1] += d
            if have[1] < 0 and have[2] is None:
                have[2] = src if src is not None else self._increment_source(flow, inc)
        out = []
        for rec, total, where in totals.values():
            if total < 0:
                what = f"feed {where}" if fl.producer is None else f"stage '{fl.producer}' epoch {where}"
                raise InputError(
                    f"flow '{flow}': record {json.dumps(rec, ensure_ascii=False, default=repr)[:200]} is retracted "
                    f"more often than it was added (its multiplicity sums to {total}; it first went below zero in "
                    f"{what})",
                    code="negative-multiplicity",
                )
            if total:
                out.append({**rec, DIFF: total} if total != 1 else rec)
        return out

    def _increment_source(self, flow: str, inc: int) -> Any:
        """The feed (external flow) or producing epoch of increment ``inc`` of an unframed flow."""
        m = self.live.st.flows[flow].incs.get(inc)
        return m.producer.split(":")[-1] if m is not None and m.producer else f"increment {inc}"

    def status(self) -> dict[str, Any]:
        """Stages, epochs run, pending increments per connector, and which stages are runnable now."""
        self.journal.refresh()
        stages = {}
        for s, spec in self.live.spec.stages.items():
            conns = {}
            for inp in spec.inputs:
                q = self.live.st.connector(s, inp.flow)
                incs = self.live.st.flows[inp.flow].incs
                conns[inp.flow] = {
                    "pending": len(q),
                    "complete": sum(1 for i in q if incs[i].complete),
                    "records": sum(incs[i].records for i in q),
                }
            try:
                runnable: Any = self.scheduler.decide(s) is not None
            except UserCodeError as e:
                runnable = f"error: {e}"
            stages[s] = {
                "epochs": self.live.st.stages[s].epoch,
                "connectors": conns,
                "runnable": runnable,
                "last_epoch": self._last_placement(s),
            }
        runner = self.home.runner_info() if self.home.runner_active() else None
        interrupted = self.interrupted()
        if runner is not None:  # what a live runner has under way is not interrupted
            for it in interrupted:
                it["recovery"] = "under way in the running cbp run"
        return {
            "pipeline": self.live.spec.name,
            "home": self.home.location,
            "mode": self.mode,
            "stages": stages,
            "runner": runner,
            "interrupted": interrupted,
            "last_run": self.runs.last_run(),
            "duplicate_feeds": self.duplicates.pending_duplicates(),
            "view_tables": {  # each SQL view's Delta table of current rows (cbp.storage.viewtable)
                f: self.home.uri(LAYOUT.view_table(f))
                for f in view_flows(self.live.spec)
                if self.home.exists(LAYOUT.delta_commit(LAYOUT.view_table(f), 0))
            },
        }

    def _last_placement(self, stage: str) -> dict[str, Any] | None:
        """Where the stage's last epoch ran: partition -> executor, and its state-cache hits (``None`` before one)."""
        entry = self.history.epoch(self.live.st, stage, self.live.st.stages[stage].epoch)
        if not entry:
            return None
        return {"epoch": self.live.st.stages[stage].epoch, **(entry.get("placement") or {})}

    def interrupted(self) -> list[dict[str, Any]]:
        """What a killed or failed writer left for recovery: a pending commit, epochs under way."""
        out = []
        rec = self.home.pending()
        if rec is not None:
            done = []
            for c in rec["commits"]:
                dt = self.home.table(c["table"])
                done.append(dt is not None and (dt.transaction_version(c["app"]) or 0) >= c["version"])
            out.append(
                {
                    "kind": "commit",
                    "what": rec["what"],
                    "commits": len(done),
                    "commits_done": sum(done),
                    "recovery": "the next 'cbp run' or 'cbp feed' finishes committing it "
                    f"({sum(done)} of {len(done)} Delta commits made)",
                }
            )
        for stage, it in self.intentions.read().items():
            if rec is not None and rec.get("stage") == stage:
                continue
            fits = stage in self.live.spec.stages and self.intentions.fits(it)
            reads = ", ".join(f"{f} {ids}" for f, ids in it.inputs.items()) or "no input"
            out.append(
                {
                    "kind": "epoch",
                    "stage": stage,
                    "epoch": it.epoch,
                    "reads": dict(it.inputs),
                    "recovery": (
                        f"the next 'cbp run' re-runs stage '{stage}' epoch {it.epoch} with the same inputs ({reads})"
                        if fits
                        else "the next 'cbp run' drops it (its inputs changed) and asks the stage's runnable again"
                    ),
                }
            )
        return out
