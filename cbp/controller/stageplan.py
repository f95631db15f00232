"""The stage part of a plan (:mod:`.plan`): stages added, removed and changed.

Each change says what an upgrade does to the stage's stored data (its state table, its
position: epoch and connectors), or that nothing stored changes. A stage removed from the YAML
is archived (state and position kept in the home); a stage added back is refused until the
user says how it starts: from the archive (``--restore-archived``), rebuilt from its inputs'
whole contents (``backfill: true``) or empty (``--discard-archived``).

Reads: a spec and a snapshot it is given. Writes: nothing (pure functions).
"""

from __future__ import annotations

import time
from typing import Any

from ..spec import PipelineSpec
from .plan import ARCHIVE, Change, Plan, definition, flow_changes, schema_steps
from .snapshot import Snapshot, conn

__all__ = ["make_plan", "stage_changes", "has_data"]

VIEW_TRANSLATORS = "cbp.views.run:"  # the translators of the stages SQL views compile to


def make_plan(
    old: dict[str, Any] | None,
    spec: PipelineSpec,
    snap: Snapshot,
    *,
    restore: tuple[str, ...] = (),
    discard: tuple[str, ...] = (),
) -> Plan:
    """The changes from the recorded pipeline ``old`` to ``spec``, judged against what ``snap`` holds."""
    new = definition(spec)
    if old is None:
        return Plan([])
    stored = {f for f, fs in snap.flows.items() if fs.version is not None}
    changes = flow_changes(old, new, stored) + stage_changes(old, new, spec, snap, restore, discard)
    return Plan(changes)


def has_data(snap: Snapshot, stage: str) -> bool:
    """Whether the home holds anything of ``stage``: epochs, state, or pending increments."""
    st = snap.stages.get(stage)
    if st is None:
        return False
    pending = any(v for k, v in snap.connectors.items() if k.split(".", 1)[0] == stage)
    return st.epoch > 0 or st.state_version is not None or pending


def stage_changes(
    old: dict[str, Any],
    new: dict[str, Any],
    spec: PipelineSpec,
    snap: Snapshot,
    restore: tuple[str, ...],
    discard: tuple[str, ...],
) -> list[Change]:
    out: list[Change] = []
    for s, d in new["stages"].items():
        was = old["stages"].get(s)
        if was is None:
            out.append(_added(s, d, snap, restore, discard))
        else:
            out += _changed(s, was, d, snap)
    for s in old["stages"]:
        if s not in new["stages"]:
            out.append(_removed(s, snap))
    return out


def _added(s: str, d: dict[str, Any], snap: Snapshot, restore: tuple[str, ...], discard: tuple[str, ...]) -> Change:
    what = f"stage '{s}'"
    arch = snap.shapes.get(ARCHIVE + s)
    if arch is not None:
        when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(arch.get("at", 0)))
        where = f"it was removed on {when} and its state and position (epoch {arch['epoch']}) are archived in the home"
        if s in restore:
            return Change(
                "migrates",
                what,
                f"added back, restored from its archive (epoch {arch['epoch']}) with every increment "
                "of its inputs it missed",
                kind="restore",
                name=s,
                data=True,
            )
        if d.get("backfill") or s in discard:
            rebuilt = s not in discard or d.get("backfill")
            how = "rebuilt from its inputs' whole contents (backfill)" if rebuilt else "empty"
            return Change(
                "migrates",
                what,
                f"added back, starts {how}; its archive is dropped",
                kind="add-stage",
                name=s,
                data=True,
                args={"backfill": bool(d.get("backfill")) and s not in discard, "clear": True},
            )
        return Change(
            "refused",
            what,
            f"added back, but {where}. Say how it starts: --restore-archived {s} (the archive plus "
            "every increment it missed), 'backfill: true' on the stage (rebuilt from its inputs' whole "
            "contents), "
            f"or --discard-archived {s} (empty)",
            code="archived-stage",
            name=s,
        )
    leftover = snap.stages.get(s)
    if d.get("backfill") and leftover is None and not any(_stored(snap, f) for f in d["inputs"]):
        return Change("applies", what, "added; its inputs hold nothing yet: starts empty" + _waits(d))
    if d.get("backfill"):
        return Change(
            "migrates",
            what,
            "added; first reads its inputs' whole consolidated contents (backfill)",
            kind="add-stage",
            name=s,
            data=True,
            args={"backfill": True, "clear": leftover is not None},
        )
    if leftover is not None and has_data(snap, s):  # state an older cbp left behind: never resumed silently
        return Change(
            "migrates",
            what,
            "added; the state and position an earlier pipeline left in the home are set aside: starts empty",
            kind="add-stage",
            name=s,
            data=True,
            args={"backfill": False, "clear": True},
        )
    return Change("applies", what, "added; starts empty" + _waits(d))


def _removed(s: str, snap: Snapshot) -> Change:
    what = f"stage '{s}'"
    if not has_data(snap, s):
        return Change("applies", what, "removed (it had run nothing: nothing to archive)", kind="drop-stage", name=s)
    st = snap.stages[s]
    pending = sum(len(v) for k, v in snap.connectors.items() if k.split(".", 1)[0] == s)
    return Change(
        "migrates",
        what,
        f"removed: its state and position (epoch {st.epoch}, {pending} pending increment(s)) are archived "
        "in the home; adding it back later asks whether to restore them",
        kind="archive",
        name=s,
        data=True,
    )


def _stored(snap: Snapshot, flow: str) -> bool:
    """Whether the home holds any increment of ``flow``."""
    fs = snap.flows.get(flow)
    return fs is not None and fs.version is not None


def _is_view(d: dict[str, Any]) -> bool:
    """Whether a recorded stage is one a SQL view compiled to (:mod:`cbp.views`)."""
    return str(d.get("translator") or "").startswith(VIEW_TRANSLATORS)


def _gains_directories(was: dict[str, Any], d: dict[str, Any]) -> bool:
    """An inner join a SQL view compiled to, recorded by a cbp before the join's directories
    (:mod:`cbp.views.joinrun`: state field ``d``, plan ``dirs``), and otherwise the same stage: its
    state gains the field (NULL: no directories yet, as after a bulk build), nothing is rebuilt."""
    plan = (d.get("params") or {}).get("cbp_view") or {}
    if plan.get("kind") != "join" or plan.get("dirs") is not True or "d" in (was.get("state") or {}):
        return False
    before = (was.get("params") or {}).get("cbp_view") or {}
    same = {k: v for k, v in before.items() if k != "id"} == {k: v for k, v in plan.items() if k not in ("id", "dirs")}
    others = {k: v for k, v in d["params"].items() if k != "cbp_view"}
    if not same or others != {k: v for k, v in was["params"].items() if k != "cbp_view"}:
        return False
    return was.get("state") == {k: t for k, t in d["state"].items() if k != "d"}


def _view_rebuilt(s: str, was: dict[str, Any], d: dict[str, Any], snap: Snapshot) -> Change | None:
    """A SQL view's stage whose query changed: rebuilt from its inputs' whole contents, its output's
    old rows retracted (None: the view did not change, or nothing is stored)."""
    keys: tuple[str, ...] = ("inputs", "outputs", "state", "translator", "params", "route_by", "signed", "row_key")
    if not (_is_view(was) and _is_view(d)):
        return None
    if _gains_directories(was, d):  # the same join, its state gaining a field: a state rewrite (_changed)
        keys = tuple(k for k in keys if k not in ("state", "params"))
    if all(was.get(k) == d.get(k) for k in keys):
        return None
    if not has_data(snap, s) and not any(_stored(snap, f) for f in d["outputs"]):
        return Change("applies", f"stage '{s}'", "its view's query changed (nothing stored yet)")
    return Change(
        "migrates",
        f"stage '{s}'",
        "its view's query changed: its state is rebuilt from its inputs' whole contents, and its output's "
        f"rows so far ({', '.join(repr(f) for f in d['outputs'])}) are retracted for its readers",
        kind="rebuild-view",
        name=s,
        data=True,
    )


def _changed(s: str, was: dict[str, Any], d: dict[str, Any], snap: Snapshot) -> list[Change]:
    what = f"stage '{s}'"
    rebuilt = _view_rebuilt(s, was, d, snap)
    if rebuilt is not None:
        return [rebuilt]
    out: list[Change] = []
    st = snap.stages.get(s)
    stored = st is not None and st.state_version is not None
    for f in d["inputs"]:
        if f not in was.get("inputs", d["inputs"]):
            out.append(Change("applies", what, f"input '{f}' added (read from its next increment on){_waits(d)}"))
    for f in was.get("inputs", []):
        if f not in d["inputs"]:
            n = len(snap.connectors.get(conn(s, f), []))
            out.append(
                Change(
                    "migrates" if n else "applies",
                    what,
                    f"input '{f}' removed" + (f": its {n} pending increment(s) are dropped" if n else ""),
                    kind="drop-input",
                    name=s,
                    data=bool(n),
                    args={"flow": f},
                )
            )
    changes = _state_changes(s, was, d, stored)
    if (
        "state" in was
        and was.get("row_key") != d.get("row_key")
        and was["state"] is not None
        and d["state"] is not None
    ):
        # keyed rows are stored with their row key and row hash (cbp.engine.task.keyedstate):
        # a new row_key rewrites them
        step = f"row_key {was.get('row_key') or 'none'} -> {d.get('row_key') or 'none'}"
        rewrite = next((c for c in changes if c.kind == "state-rewrite"), None)
        if not stored:
            changes.append(Change("applies", what, step + " (nothing stored yet)"))
        elif rewrite is not None:
            rewrite.detail += f"; {step}"
        elif not any(c.verdict == "refused" for c in changes):
            changes.append(
                Change(
                    "migrates",
                    what,
                    f"state rewritten (one pass): {step}",
                    kind="state-rewrite",
                    name=s,
                    data=True,
                    args={"partitions": d["partitions"]},
                )
            )
    out += changes
    out += _signed_changes(s, was, d)
    for key, label in (
        ("translator", "translator"),
        ("runnable", "runnable"),
        ("params", "params"),
        ("route_by", "route_by"),
        ("grouping", "state grouping"),
        ("outputs", "outputs"),
        ("batch", "batch"),
    ):
        if key in was and _differs(key, was[key], d[key]):
            out.append(
                Change(
                    "applies",
                    what,
                    f"{label} changed"
                    + (" (keys already in the state stay where they are)" if key == "route_by" and stored else ""),
                )
            )
    return out


def _differs(key: str, old: Any, new: Any) -> bool:
    """Whether a stage's ``key`` changed; ``route_by`` compares the inputs both have (an input added or
    removed is a change of its own, not of the others' routing)."""
    if key == "route_by" and isinstance(old, dict) and isinstance(new, dict):
        return any(old[f] != new[f] for f in old if f in new)
    return bool(old != new)


def _signed_changes(s: str, was: dict[str, Any], d: dict[str, Any]) -> list[Change]:
    """Inputs that now take retractions (``signed: true``) or no longer do: nothing stored changes
    (a pipeline recorded before 'signed' existed had every input unsigned; a home of a cbp that
    recorded only shapes is not compared, as for the translator)."""
    if "translator" not in was:
        return []
    old = was.get("signed") or {}
    out = []
    for f, now in d.get("signed", {}).items():
        if f in was.get("inputs", []) and bool(old.get(f, False)) != now:
            how = (
                "now takes retractions (signed: true)"
                if now
                else "no longer takes retractions (signed: false): they are refused"
            )
            out.append(Change("applies", f"stage '{s}'", f"input '{f}' {how}"))
    return out


def _state_changes(s: str, was: dict[str, Any], d: dict[str, Any], stored: bool) -> list[Change]:
    what = f"stage '{s}'"
    old, new = was.get("state", d["state"]), d["state"]
    if "state" not in was and "partitions" not in was:
        return []
    if old is None and new is not None:
        return [Change("applies", what, "state added (starts empty)")]
    if old is not None and new is None:
        return [
            Change(
                "migrates" if stored else "applies",
                what,
                "state removed: the state table is archived in the home",
                kind="drop-state",
                name=s,
                data=stored,
            )
        ]
    if new is None:
        return []
    parts_old, parts_new = was.get("partitions", d["partitions"]), d["partitions"]
    migrate_new = d.get("migrate") and d.get("migrate") != was.get("migrate")
    if old == new and parts_old == parts_new and not migrate_new:
        return []
    if not stored:
        return [Change("applies", what, "state schema or partitions changed (nothing stored yet)")]
    steps, refused = schema_steps(old, new, d.get("defaults", {}))
    if d.get("migrate"):
        steps, refused = (
            [f"every stored row through migrate '{d['migrate']}'"] if (old != new or migrate_new) else [],
            [],
        )
    if refused:
        return [
            Change(
                "refused",
                what,
                "; ".join(refused) + ". Give the stage 'migrate: module:function' (an old row in, a new "
                "row or None out) to migrate its state, or restore the previous type",
                code="schema-refused",
                name=s,
            )
        ]
    if parts_old != parts_new:
        steps.append(f"partitions {parts_old} -> {parts_new}")
    return [
        Change(
            "migrates",
            what,
            "state rewritten (one pass): " + "; ".join(steps),
            kind="state-rewrite",
            name=s,
            data=True,
            args={"partitions": parts_new},
        )
    ]


def _waits(d: dict[str, Any]) -> str:
    """What a stage with runnable 'all' waits for."""
    if d.get("runnable") == "all" and len(d["inputs"]) > 1:
        return f"; runnable 'all': each epoch waits for an increment on every input ({', '.join(d['inputs'])})"
    return ""
