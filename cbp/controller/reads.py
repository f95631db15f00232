"""Reading what the controller committed: state and output records, epochs, status.

Every read is pinned to the versions the snapshot names, so a stage epoch's state, outputs and
connector changes are seen together or not at all.
"""

from __future__ import annotations

from typing import Any, Optional

import pyarrow as pa
import pyarrow.compute as pc

from ..engine.bipindex import latest_rows
from ..errors import UsageError, UserCodeError
from ..spec.schema import DIFF
from ..storage import INC, LAYOUT, SRC
from .records import EpochRecord

__all__ = ["Reads"]


class Reads:
    """Read-only accessors of :class:`~cbp.controller.Controller` (a mixin)."""

    def epochs(self, stage: str) -> int:
        """How many epochs ``stage`` has committed."""
        self.refresh()
        return self.st.stages[self.spec.stage(stage).name].epoch

    def feeds(self, flow: str) -> int:
        """How many feeds external flow ``flow`` has had (the N of its newest ``output --epoch N``)."""
        self.refresh()
        return self.st.flows[self.spec.flow(flow).name].feeds

    def _epoch_entry(self, stage: str, epoch: int) -> dict[str, Any]:
        e = self.history.epoch(self.st, stage, epoch)
        if e is None:
            raise UsageError(f"stage '{stage}' has not run epoch {epoch} (epochs run: {self.st.stages[stage].epoch})", code="unknown-epoch")
        return e

    def epoch_record(self, stage: str, epoch: int) -> EpochRecord:
        """What stage epoch ``epoch`` read (increment ids per input flow) and wrote (ids and records per output flow)."""
        self.refresh()
        e = self._epoch_entry(self.spec.stage(stage).name, epoch)
        outputs = {f: [int(i) for i in ids] for f, ids in e["outputs"].items()}
        return EpochRecord(stage, epoch, {f: [int(i) for i in ids] for f, ids in e["inputs"].items()}, outputs,
                           {f: int(n) for f, n in e.get("records", {}).items()})

    def is_new(self) -> bool:
        """True while nothing has been fed or run in the home."""
        return self.home.read_controller() is None

    def state_version(self, stage: str, epoch: Optional[int] = None) -> Optional[int]:
        """The Delta version of the stage's state table after ``epoch`` (default: the latest); None if empty."""
        self.refresh()
        stage = self.spec.stage(stage).name
        return self.st.stages[stage].state_version if epoch is None else self._epoch_entry(stage, epoch)["state_version"]

    def state_records(self, stage: str, epoch: Optional[int] = None) -> list[dict[str, Any]]:
        """The stage's state records after ``epoch`` (default: the latest), sorted by key."""
        self.refresh()
        spec = self.spec.stage(stage)
        if spec.state_schema is None:
            raise UsageError(f"stage '{stage}' has no state (no 'state:' in the YAML)", code="no-state")
        version = self.state_version(stage, epoch)
        if version is None:
            return []
        rows = latest_rows(self.home.read_table(LAYOUT.state(stage), version))  # type: ignore[arg-type]
        rows = rows.sort_by([("_key", "ascending")])
        return [spec.state_schema.from_storage(r) for r in rows.select(list(spec.state_schema.fields)).to_pylist()]

    def output_versions(self, flow: str, epoch: Optional[int] = None) -> dict[Any, list[int]]:
        """Which increments of the flow :meth:`output_records` reads at which Delta version of its table."""
        self.refresh()
        fl = self.spec.flow(flow)
        fs = self.st.flows[flow]
        collected: dict[int, int] = {}
        if epoch is None:
            collected = self.history.collected(self.st, flow)
            ids = sorted(set(fs.incs) | set(collected))
        elif fl.producer is None:
            e = self.history.feed(self.st, flow, epoch)
            if e is None:
                raise UsageError(f"external flow '{flow}' has had {fs.feeds} feed(s); --epoch N picks the Nth (1..{fs.feeds})", code="unknown-epoch")
            ids = [int(i) for i in e["incs"]]
        else:
            ids = [int(i) for i in self._epoch_entry(fl.producer, epoch)["outputs"].get(flow, [])]
        by_version: dict[Any, list[int]] = {}  # live increments at the current version, collected ones by time travel
        for inc in ids:
            v = fs.version if inc in fs.incs else collected[inc] if inc in collected else self.history.collected_version(self.st, flow, inc)
            if v is None:
                raise UsageError(f"flow '{flow}': increment {inc} is neither live nor in the history of {self.home.location}", code="home-corrupt")
            by_version.setdefault(v, []).append(inc)
        return by_version

    def output_records(self, flow: str, epoch: Optional[int] = None) -> list[dict[str, Any]]:
        """Records of the flow's increments (only those produced by its stage's ``epoch`` when given)."""
        by_version = self.output_versions(flow, epoch)
        fl = self.spec.flow(flow)
        parts = []
        for v, incs in by_version.items():
            parts.append(self.home.read_table(LAYOUT.flow(flow), v, partitions=[(INC, "in", [str(i) for i in incs])]))
        if not parts:
            return []
        t = pa.concat_tables(parts)
        if epoch is not None and fl.frame_by is not None:  # a framed increment may hold records of several feeds/epochs
            t = t.filter(pc.equal(t[SRC], epoch))
        t = t.sort_by([(INC, "ascending")])
        recs = [fl.schema.from_storage(r) for r in t.select(list(fl.schema.fields)).to_pylist()]
        if DIFF in t.schema.names:  # shown where it is not +1 (null: +1, a file written before signed records)
            for r, d in zip(recs, t[DIFF].to_pylist()):
                if d is not None and d != 1:
                    r[DIFF] = d
        return recs

    def status(self) -> dict[str, Any]:
        """Stages, epochs run, pending increments per connector, and which stages are runnable now."""
        self.refresh()
        stages = {}
        for s, spec in self.spec.stages.items():
            conns = {}
            for inp in spec.inputs:
                q = self.st.connector(s, inp.flow)
                incs = self.st.flows[inp.flow].incs
                conns[inp.flow] = {"pending": len(q), "complete": sum(1 for i in q if incs[i].complete),
                                   "records": sum(incs[i].records for i in q)}
            try:
                runnable: Any = self.decide(s) is not None
            except UserCodeError as e:
                runnable = f"error: {e}"
            stages[s] = {"epochs": self.st.stages[s].epoch, "connectors": conns, "runnable": runnable,
                         "last_epoch": self._last_placement(s)}
        runner = self.home.runner_info() if self.home.runner_active() else None
        interrupted = self.interrupted()
        if runner is not None:  # what a live runner has under way is not interrupted
            for it in interrupted:
                it["recovery"] = "under way in the running cbp run"
        return {"pipeline": self.spec.name, "home": self.home.location, "mode": self.mode, "stages": stages,
                "runner": runner, "interrupted": interrupted}

    def _last_placement(self, stage: str) -> Optional[dict[str, Any]]:
        """Where the stage's last epoch ran: partition -> executor, and its state-cache hits (``None`` before one)."""
        entry = self.history.epoch(self.st, stage, self.st.stages[stage].epoch)
        if not entry:
            return None
        return {"epoch": self.st.stages[stage].epoch, **(entry.get("placement") or {})}

    def interrupted(self) -> list[dict[str, Any]]:
        """What a killed or failed writer left for recovery: a pending commit, epochs under way."""
        out = []
        rec = self.home.pending()
        if rec is not None:
            done = []
            for c in rec["commits"]:
                dt = self.home.table(c["table"])
                done.append(dt is not None and (dt.transaction_version(c["app"]) or 0) >= c["version"])
            out.append({"kind": "commit", "what": rec["what"], "commits": len(done), "commits_done": sum(done),
                        "recovery": f"the next 'cbp run' or 'cbp feed' finishes committing it ({sum(done)} of {len(done)} Delta commits made)"})
        for stage, it in self.home.intentions().items():
            if rec is not None and rec.get("stage") == stage:
                continue
            fits = stage in self.spec.stages and self._intention_fits(it)
            reads = ", ".join(f"{f} {ids}" for f, ids in it["inputs"].items()) or "no input"
            out.append({"kind": "epoch", "stage": stage, "epoch": it["epoch"], "reads": it["inputs"],
                        "recovery": (f"the next 'cbp run' re-runs stage '{stage}' epoch {it['epoch']} with the same inputs ({reads})" if fits
                                     else "the next 'cbp run' drops it (its inputs changed) and asks the stage's runnable again")})
        return out
