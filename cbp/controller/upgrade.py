"""``cbp upgrade``: apply a plan (:mod:`.plan`) to a home as one durable change.

Every change of the plan is prepared first (new state and increment files written, invisible),
then committed through the journal (:mod:`.journal`) as one pending record: the Delta commits
(with the new table schemas), the snapshot change (stages archived, restored or added, their
connectors, the recorded pipeline) and the history entry holding the YAML the upgrade came
from. A kill before the pending record leaves the old pipeline (the files written are orphans,
invisible); a kill after it leaves a record the next writer finishes: the new pipeline. Never a mix.

The recorded YAML lives in the history (``_cbp/history/pipeline/<n>.json``, one per recorded
pipeline: the first write of a home, each upgrade, and writes that took a change touching no
stored data); the snapshot's ``shapes["pipeline"]`` says which one is current.
"""

from __future__ import annotations

import hashlib
import time
from typing import TYPE_CHECKING, Any, Optional

from .. import faults
from ..errors import UsageError
from ..spec.schema import RecordSchema
from ..storage import LAYOUT, PART
from .migrate import flow_commit, state_commit, upgrade_app
from .plan import ARCHIVE, PIPELINE, Change, Plan, definition
from .snapshot import Increment, StageState, conn

if TYPE_CHECKING:
    from . import Controller

__all__ = ["apply_plan", "record", "yaml_text", "pipeline_entry", "unfed_waits"]


def pipeline_entry(n: int) -> str:
    """The history entry of the home's ``n``-th recorded pipeline."""
    return f"{LAYOUT.HISTORY}/pipeline/{n:012d}.json"


def yaml_text(path: str) -> str:
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def record(ctl: "Controller", kind: str, lines: list[str]) -> tuple[str, dict[str, Any]]:
    """Make the YAML the home's recorded pipeline (in ``ctl.st.shapes``); its history entry."""
    n = int((ctl.st.shapes.get(PIPELINE) or {}).get("n", 0)) + 1
    text = yaml_text(ctl.spec.path)
    d = definition(ctl.spec)
    rel = pipeline_entry(n)
    ctl.st.shapes[PIPELINE] = {"n": n, "entry": rel, "sha256": sha(text), "definition": d}
    for f, fd in d["flows"].items():  # what an older cbp reads
        ctl.st.shapes[f"flow:{f}"] = {"schema": fd["schema"], "framed": fd["framed"]}
    for s, sd in d["stages"].items():
        if sd["state"] is not None:
            ctl.st.shapes[f"state:{s}"] = {"schema": sd["state"], "partitions": sd["partitions"]}
    return rel, {"n": n, "kind": kind, "yaml": text, "path": ctl.spec.path, "plan": lines, "at": time.time(), "definition": d}


def apply_plan(ctl: "Controller", plan: Plan, restore: tuple[str, ...]) -> int:
    """Prepare and commit every change of ``plan`` (under the home's lock); the upgrade's number."""
    old = ctl.recorded_definition()
    n = int((ctl.st.shapes.get(PIPELINE) or {}).get("n", 0)) + 1
    for stage, it in ctl.home.intentions().items():  # epochs a killed run left: decided again under the new pipeline
        ctl._abandon(stage, it)
    with ctl._transaction():
        commits: list[dict[str, Any]] = []
        cleanup: list[str] = []
        written: list[str] = []
        try:
            for c in plan.changes:
                _apply(ctl, c, old, n, commits, cleanup, written)
        except BaseException:
            ctl._delete_quietly(written)
            raise
        rel, entry = record(ctl, "upgrade", plan.lines())
        ctl._entry(rel, entry)
        ctl.st.adopt(ctl.spec.flows, {s: st.input_flows for s, st in ctl.spec.stages.items()})
        faults.point("upgrade:written")
        ctl._commit("upgrade", f"upgrade {n} of pipeline '{ctl.spec.name}'", commits, cleanup=cleanup, written=written)
    return n


def _apply(ctl: "Controller", c: Change, old: Optional[dict[str, Any]], n: int, commits: list[dict[str, Any]],
           cleanup: list[str], written: list[str]) -> None:
    s = c.name
    if c.kind == "flow-schema":
        commit, w = flow_commit(ctl, s, n)
        written += w
        commits.append(commit)
    elif c.kind == "state-rewrite":
        assert old is not None
        base = LAYOUT.index(s)
        before = [f"{base}/{d}/{f}" for d in ctl.home.list_dir(base) if d.startswith(f"{PART}=") for f in ctl.home.list_dir(f"{base}/{d}")]
        commit, index, w = state_commit(ctl, s, RecordSchema.parse(old["stages"][s]["state"]), n)
        written += w
        commits.append(commit)
        cleanup += before
        sst = ctl.st.stages[s]
        sst.index, sst.layout = index, "direct"
    elif c.kind == "archive":
        _archive(ctl, s, n)
    elif c.kind in ("drop-stage",):
        ctl.st.stages.pop(s, None)
        for k in [k for k in ctl.st.connectors if k.split(".", 1)[0] == s]:
            del ctl.st.connectors[k]
    elif c.kind == "drop-input":
        ctl.st.connectors.pop(conn(s, c.args["flow"]), None)
    elif c.kind == "drop-state":
        sst = ctl.st.stages[s]
        sst.state_version, sst.index = None, {}
    elif c.kind == "add-stage":
        _add(ctl, s, n, commits, backfill=c.args["backfill"])
    elif c.kind == "restore":
        _restore(ctl, s, n, commits)


def _archive(ctl: "Controller", s: str, n: int) -> None:
    """Move a removed stage's state and position out of the live snapshot, into its archive."""
    st = ctl.st.stages.pop(s)
    conns = {k.split(".", 1)[1]: ctl.st.connectors.pop(k) for k in [k for k in ctl.st.connectors if k.split(".", 1)[0] == s]}
    ctl.st.shapes[ARCHIVE + s] = {
        "upgrade": n, "epoch": st.epoch, "state_version": st.state_version, "index": st.index, "layout": st.layout,
        "bindings": st.bindings, "runnable_state": st.runnable_state, "connectors": conns,
        "next_inc": {f: ctl.st.flows[f].next_inc for f in conns if f in ctl.st.flows}, "at": time.time(),
    }


def _clear_state(ctl: "Controller", s: str, n: int, commits: list[dict[str, Any]]) -> None:
    """A commit that leaves the stage's state table (if any) without live files (old versions stay readable)."""
    rel = LAYOUT.state(s)
    if ctl.home.table(rel) is None:
        return
    app, version = upgrade_app(n)
    commits.append({"table": rel, "partition_by": PART, "adds": [], "removes": [], "overwrite": True, "app": app, "version": version,
                    "targets": [["stages", s, "state_version"]]})


def _add(ctl: "Controller", s: str, n: int, commits: list[dict[str, Any]], *, backfill: bool) -> None:
    """A stage added: empty, its epochs numbered on from any earlier life (Delta transaction ids stay increasing)."""
    arch = ctl.st.shapes.pop(ARCHIVE + s, None)
    prev = ctl.st.stages.get(s)
    epoch = max(int(arch["epoch"]) if arch else 0, prev.epoch if prev else 0)
    ctl.st.stages[s] = StageState(epoch=epoch)
    for k in [k for k in ctl.st.connectors if k.split(".", 1)[0] == s]:
        del ctl.st.connectors[k]
    _clear_state(ctl, s, n, commits)
    for f in ctl.spec.stages[s].input_flows:
        ctl.st.connectors[conn(s, f)] = _retained(ctl, f) if backfill else []


def _in_table(ctl: "Controller", flow: str) -> dict[int, int]:
    """Increments in the flow table's current version: id -> records."""
    fs = ctl.st.flows.get(flow)
    if fs is None or fs.version is None:
        return {}
    out: dict[int, int] = {}
    for f in ctl.home.table_files(LAYOUT.flow(flow), fs.version):
        out[int(f["partition"])] = out.get(int(f["partition"]), 0) + int(f["rows"] or 0)
    return out


def _revive(ctl: "Controller", flow: str, inc: int, records: int) -> None:
    """Make an increment still in the flow's table live again (it left the snapshot when nobody read it)."""
    fs = ctl.st.flows[flow]
    if inc not in fs.incs:
        fs.incs[inc] = Increment(inc, records, fs.version, "retained", True)


def _retained(ctl: "Controller", flow: str) -> list[int]:
    """Every increment of ``flow`` still stored, oldest first (live, or in its table), made live."""
    table = _in_table(ctl, flow)
    for inc, rows in table.items():
        _revive(ctl, flow, inc, rows)
    return sorted(set(ctl.st.flows[flow].incs) if flow in ctl.st.flows else set())


def _restore(ctl: "Controller", s: str, n: int, commits: list[dict[str, Any]]) -> None:
    """A stage added back as it was archived, with every increment of its inputs it missed."""
    arch = ctl.st.shapes.pop(ARCHIVE + s)
    conns: dict[str, list[int]] = {}
    missing: list[str] = []
    for f in ctl.spec.stages[s].input_flows:
        fs = ctl.st.flows.get(f)
        if fs is None or f not in arch["next_inc"]:
            conns[f] = []  # an input it did not have: read from now on
            continue
        table = _in_table(ctl, f)
        ids = [int(i) for i in arch["connectors"].get(f, [])] + list(range(int(arch["next_inc"][f]), fs.next_inc))
        kept = []
        for i in ids:
            if i in fs.incs or i in table:
                _revive(ctl, f, i, table.get(i, 0))
                kept.append(i)
            elif ctl.history.collected_version(ctl.st, f, i) is not None:
                missing.append(f"'{f}' increment {i}")
        conns[f] = kept
    if missing:
        raise UsageError(f"cannot restore stage '{s}' from its archive: it missed {', '.join(missing[:5])}"
                         f"{' and more' if len(missing) > 5 else ''}, which were garbage-collected once no stage read them. "
                         f"Add it back with 'backfill: true' or --discard-archived {s} instead", code="archive-increments-collected")
    ctl.st.stages[s] = StageState(arch["epoch"], arch["runnable_state"], arch["state_version"], arch["layout"], dict(arch["index"]),
                                  list(arch["bindings"]))
    for f, ids in conns.items():
        ctl.st.connectors[conn(s, f)] = ids
    if arch["state_version"] is not None:
        _restore_table(ctl, s, int(arch["state_version"]), n, commits)


def _restore_table(ctl: "Controller", s: str, version: int, n: int, commits: list[dict[str, Any]]) -> None:
    """Make the archived version's files the state table's live files again (unless they still are)."""
    rel = LAYOUT.state(s)
    files = ctl.home.table_files(rel, version)
    head = ctl.home.table(rel)
    if head is not None and head.version() == version:
        return
    gone = [f["path"] for f in files if not ctl.home.exists(f"{rel}/{f['path']}")]
    if gone:
        raise UsageError(f"cannot restore stage '{s}': {len(gone)} file(s) of its archived state are gone from {ctl.home.uri(rel)} "
                         f"(vacuumed?), e.g. {gone[0]}", code="archive-gone")
    app, v = upgrade_app(n)
    commits.append({"table": rel, "partition_by": PART, "adds": files, "removes": [], "overwrite": True, "app": app, "version": v,
                    "targets": [["stages", s, "state_version"]]})


def unfed_waits(ctl: "Controller") -> list[str]:
    """Stages that wait (runnable 'all') for an external flow nobody has fed yet, while other input is pending."""
    out = []
    for s, spec in ctl.spec.stages.items():
        if spec.runnable_name != "all" or len(spec.inputs) < 2:
            continue
        pending = any(ctl.st.connectors.get(conn(s, i.flow)) for i in spec.inputs)
        for i in spec.inputs:
            fl, fs = ctl.spec.flows[i.flow], ctl.st.flows.get(i.flow)
            if pending and fl.external and (fs is None or fs.feeds == 0):
                out.append(f"stage '{s}' waits for flow '{i.flow}', which nobody has fed (runnable 'all' reads an increment of every input); "
                           f"feed it, or give the stage 'runnable: any'")
    return out
