"""Which translator code each stage epoch ran, and what ``cbp status`` says about evolution.

Each stage epoch records a hash of its translator's module file (:func:`code_hash`) in its history
entry; the snapshot keeps, per stage, the hash of its last epoch and the epoch since which that
code has run (``shapes["code:<stage>"]``), so ``cbp status`` shows when the code changed and
whether today's file differs from what the last epoch ran.

:func:`unfed_waits` names the stages that wait for an external flow nobody has fed (a warning of
``cbp run`` and ``cbp status``).

Reads: a snapshot's ``shapes`` and connectors, and the translators' module files. Writes: nothing (:func:`note_code`
gives the update of ``shapes["code:<stage>"]`` that each stage epoch's change makes).

    >>> code_hash(None)
    ''
"""

from __future__ import annotations

import hashlib
import sys
import time
from typing import Any

from ..spec import PipelineSpec, StageSpec
from .change import ShapeSet
from .plan import ARCHIVE, Plan
from .snapshot import Snapshot, conn

__all__ = ["code_hash", "note_code", "evolution_status", "unfed_waits"]


def code_hash(spec: StageSpec | None) -> str:
    """The first 16 hex digits of the SHA-256 of the stage's translator module file ('' if unknown)."""
    fn = getattr(spec, "translator", None)
    mod = sys.modules.get(getattr(fn, "__module__", "") or "")
    path = getattr(mod, "__file__", None)
    if not path:
        return ""
    try:
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).hexdigest()[:16]
    except OSError:
        return ""


def note_code(snap: Snapshot, spec: StageSpec, epoch: int) -> tuple[str, ShapeSet | None]:
    """The hash of the code epoch ``epoch`` of the stage runs, for the epoch's entry, and the update
    that remembers it in the snapshot (None: the snapshot already says so)."""
    h = code_hash(spec)
    key = f"code:{spec.name}"
    was = snap.shapes.get(key)
    if was is None or was.get("hash") != h:
        return h, ShapeSet(key, {"hash": h, "since": epoch, "before": was.get("hash") if was else None})
    return h, None


def evolution_status(spec: PipelineSpec, st: Snapshot, plan: Plan) -> dict[str, Any]:
    """``archived`` stages, per-stage ``code`` (hash, since which epoch, whether today's file
    differs), ``warnings``, ``plan``."""
    shapes = st.shapes
    archived = {
        k[len(ARCHIVE) :]: {
            "epoch": v["epoch"],
            "removed": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(v.get("at", 0))),
            "pending": sum(len(c) for c in v["connectors"].values()),
        }
        for k, v in shapes.items()
        if k.startswith(ARCHIVE)
    }
    code = {}
    for s, stage in spec.stages.items():
        rec = shapes.get(f"code:{s}")
        if rec is not None:
            now = code_hash(stage)
            code[s] = {
                "hash": rec["hash"],
                "since_epoch": rec["since"],
                "changed_at_epoch": rec["since"] if rec.get("before") else None,
                "file_differs": bool(now) and now != rec["hash"],
            }
    return {
        "archived": archived,
        "code": code,
        "warnings": unfed_waits(spec, st),
        "plan": plan.lines() if plan.changes else [],
        "needs_upgrade": plan.needs_upgrade,
    }


def status_lines(st: dict[str, Any]) -> list[str]:
    """The text ``cbp status`` prints for :func:`evolution_status`."""
    out = [
        f"  archived stage {s}: epoch {a['epoch']}, {a['pending']} pending increment(s) (removed {a['removed']})"
        for s, a in st.get("archived", {}).items()
    ]
    for s, c in st.get("code", {}).items():
        if c["changed_at_epoch"]:
            out.append(f"  stage {s}: translator code changed at epoch {c['changed_at_epoch']}")
        if c["file_differs"]:
            out.append(f"  stage {s}: the translator file differs from the code its last epoch ran")
    out += [f"  warning: {w}" for w in st.get("warnings", [])]
    if st.get("needs_upgrade"):
        out += ["  the YAML differs from the recorded pipeline; 'cbp upgrade' would:"] + [
            f"    {line}" for line in st["plan"]
        ]
    return out


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
                out.append(
                    f"stage '{s}' waits for flow '{i.flow}', which nobody has fed (runnable 'all' reads an increment "
                    "of every input); "
                    f"feed it, or give the stage 'runnable: any'"
                )
    return out
