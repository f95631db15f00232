"""What a changed YAML would do to a home: the recorded pipeline, and the plan of changes.

A home records the pipeline it was built with (:func:`definition`: per flow its schema, framing
and defaults; per stage its inputs, outputs, state schema, partitions, translator, runnable,
route_by, params, ...), in the controller snapshot's ``shapes`` under ``"pipeline"``, beside the
YAML text in the history (see :mod:`.upgrade`). Homes written by an older cbp recorded only the
schemas and partition counts (``shapes["flow:F"]`` and ``shapes["state:S"]``): :func:`recorded`
reads those as the recorded pipeline.

:func:`cbp.controller.stageplan.make_plan` compares a YAML with what is recorded: one :class:`Change` per difference,
each ``applies`` (nothing stored changes), ``migrates`` (stored data is rewritten or archived:
needs ``cbp upgrade``) or ``refused`` (why, and what to do).

Reads: a spec and a snapshot it is given. Writes: nothing (pure functions; :mod:`.evolution`
keeps the plan, :mod:`.upgrade` applies it).

    >>> old = {"flows": {"f": {"schema": {"n": "int"}, "defaults": {}, "framed": False}}, "stages": {}}
    >>> new = {"flows": {"f": {"schema": {"n": "float", "m": "int?"}, "defaults": {}, "framed": False}}, "stages": {}}
    >>> [c.line() for c in flow_changes(old, new, stored={"f"})]
    ["migrates  flow 'f': field 'n' int -> float; field 'm' added (null in stored records)"]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..spec import PipelineSpec
from ..spec.schema import FieldType, narrows, parse_type
from .snapshot import Snapshot

__all__ = ["Change", "Plan", "definition", "recorded", "schema_steps", "flow_changes", "ARCHIVE", "PIPELINE"]

PIPELINE = "pipeline"  # shapes key of the recorded pipeline
ARCHIVE = "archived:"  # shapes key prefix of an archived stage


@dataclass
class Change:
    """One difference between the YAML and the recorded pipeline."""

    verdict: str  # "applies" | "migrates" | "refused"
    what: str  # "flow 'f'", "stage 's'", ...
    detail: str
    kind: str = (
        ""  # what an upgrade does: flow-schema, state-rewrite, archive, add-stage, restore, ... ("" for nothing)
    )
    name: str = ""  # the flow or stage
    data: bool = False  # whether it changes stored data (then only 'cbp upgrade' applies it)
    code: str = ""  # for a refusal: the error code
    args: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.verdict:<9} {self.what}: {self.detail}"


@dataclass
class Plan:
    """The changes from the recorded pipeline to a YAML (empty: nothing changed)."""

    changes: list[Change]
    yaml_changed: bool = False  # the YAML text differs from the one recorded (or none is recorded yet)

    @property
    def refused(self) -> list[Change]:
        return [c for c in self.changes if c.verdict == "refused"]

    @property
    def needs_upgrade(self) -> bool:
        """Whether a change touches stored data (or is refused): writes wait for ``cbp upgrade``."""
        return any(c.data or c.verdict == "refused" for c in self.changes)

    def lines(self) -> list[str]:
        return [c.line() for c in self.changes] or ["no changes: the YAML is the pipeline the home recorded"]


# ---------------------------------------------------------------- the recorded form
def definition(spec: PipelineSpec) -> dict[str, Any]:
    """What a home records of a pipeline (JSON)."""
    flows = {
        n: {
            "schema": {k: str(t) for k, t in f.schema.fields.items()},
            "defaults": f.schema.json_defaults(),
            "framed": f.frame_by is not None,
            "external": f.external,
            **({"key": list(f.key)} if f.key else {}),  # keyed flows (cbp.controller.keyed)
            **({"migrate": f.migrate_path} if f.migrate_path else {}),
        }
        for n, f in spec.flows.items()
    }
    stages = {}
    for n, s in spec.stages.items():
        stages[n] = {
            "inputs": [i.flow for i in s.inputs],
            "outputs": list(s.outputs),
            "state": None if s.state_schema is None else {k: str(t) for k, t in s.state_schema.fields.items()},
            "defaults": {} if s.state_schema is None else s.state_schema.json_defaults(),
            "partitions": s.partitions,
            "translator": s.translator_path,
            "runnable": s.runnable_name,
            "route_by": {i.flow: i.route_by.text if i.route_by else None for i in s.inputs},
            "signed": {i.flow: i.signed for i in s.inputs},  # which inputs take retractions (cbp.spec.signing)
            "params": s.params,
            "grouping": s.grouping,
            "migrate": s.migrate_path,
            "batch": s.batch,
            "backfill": s.backfill,
            **({"row_key": list(s.row_key)} if s.row_key else {}),  # keyed rows (cbp.engine.task.keyedstate)
        }
    return {"mode": spec.mode, "flows": flows, "stages": stages}


def recorded(snap: Snapshot) -> dict[str, Any] | None:
    """The pipeline the home recorded, or (a home of an older cbp) what its shapes say; None for a new home."""
    rec = snap.shapes.get(PIPELINE)
    if rec is not None:
        return rec["definition"]  # type: ignore[no-any-return]
    if not snap.shapes and not snap.stages:
        return None
    flows = {
        k[5:]: {"schema": v["schema"], "defaults": {}, "framed": v.get("framed", False)}
        for k, v in snap.shapes.items()
        if k.startswith("flow:")
    }
    for f in snap.flows:
        flows.setdefault(f, {})
    stages: dict[str, Any] = {}
    for s in snap.stages:
        inputs = [c.split(".", 1)[1] for c in snap.connectors if c.split(".", 1)[0] == s]
        shape = snap.shapes.get(f"state:{s}")
        stages[s] = {
            "inputs": inputs,
            **({"state": shape["schema"], "defaults": {}, "partitions": shape["partitions"]} if shape else {}),
        }
    return {"flows": flows, "stages": stages, "legacy": True}


# ---------------------------------------------------------------- schema steps
def schema_steps(old: dict[str, str], new: dict[str, str], defaults: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What turns records of schema ``old`` into ``new`` (field -> type strings): the steps cbp
    does itself, and the changes it cannot make (which need a ``migrate:`` function).

        >>> schema_steps({"a": "int", "b": "string"}, {"a": "int?", "c": "int"}, {"c": 0})
        (["field 'a' int -> int?", "field 'c' added (0 in stored records)", "field 'b' dropped"], [])
        >>> schema_steps({"a": "string"}, {"a": "int"}, {})[1]
        ["field 'a' string -> int: not a widening (int -> float, T -> T?)"]
    """
    steps, refused = [], []
    for f, t in new.items():
        if f not in old:
            if f in defaults:
                steps.append(f"field '{f}' added ({defaults[f]!r} in stored records)")
            elif parse_type(t).nullable:
                steps.append(f"field '{f}' added (null in stored records)")
            else:
                refused.append(
                    f"field '{f}' added, not nullable and without a default: stored records have no value for it"
                )
        elif old[f] != t:
            if widens(parse_type(old[f]), parse_type(t)):
                steps.append(f"field '{f}' {old[f]} -> {t}")
            elif narrows(parse_type(old[f]), parse_type(t)):  # a Delta source's int column read as int32
                steps.append(f"field '{f}' {old[f]} -> {t} (stored as before; the upgrade checks its values fit)")
            else:
                refused.append(f"field '{f}' {old[f]} -> {t}: not a widening (int -> float, T -> T?)")
    steps += [f"field '{f}' dropped" for f in old if f not in new]
    return steps, refused


def widens(old: FieldType, new: FieldType) -> bool:
    """Whether every value of ``old`` is a value of ``new`` as it is (``int`` -> ``float``, ``T`` -> ``T?``)."""
    return new.accepts(old)


# ---------------------------------------------------------------- the plan
def flow_changes(old: dict[str, Any], new: dict[str, Any], stored: set[str]) -> list[Change]:
    """Flows added, removed, re-schemed or re-framed (``stored``: flows whose table exists)."""
    out = []
    for f, d in new["flows"].items():
        was = old["flows"].get(f)
        what = f"flow '{f}'"
        if was is None:
            out.append(Change("applies", what, "added (starts empty)"))
            continue
        if "schema" not in was:  # an older home that did not record it
            continue
        if was.get("framed", False) != d["framed"] and f in stored:
            out.append(
                Change(
                    "refused",
                    what,
                    f"frame_by {'added' if d['framed'] else 'removed'}: its stored increments were framed "
                    "otherwise; restore the previous frame_by, or give the flow a new name",
                    code="reframed",
                    name=f,
                )
            )
        migrate_new = d.get("migrate") and d.get("migrate") != was.get("migrate")
        if (
            (was.get("key") or d.get("key"))
            and f in stored
            and (was["schema"] != d["schema"] or was.get("key") != d.get("key") or migrate_new)
        ):
            out.append(
                Change(
                    "refused",
                    what,
                    "a keyed flow's key or schema changed: its table of current rows per key is not "
                    "migrated by an upgrade; restore the previous definition, or land the data under a new flow",
                    code="keyed-refused",
                    name=f,
                )
            )
            continue
        if was["schema"] == d["schema"] and not (migrate_new and f in stored):
            continue
        steps, refused = schema_steps(was["schema"], d["schema"], d.get("defaults", {}))
        if f not in stored:
            out.append(Change("applies", what, "schema changed (nothing stored yet)"))
        elif migrate_new:
            out.append(
                Change(
                    "migrates",
                    what,
                    f"every stored record of its live increments through migrate '{d['migrate']}' (with a migration)",
                    kind="flow-schema",
                    name=f,
                    data=True,
                    args={"migrate": d["migrate"]},
                )
            )
        elif refused:
            out.append(
                Change(
                    "refused",
                    what,
                    "; ".join(refused) + ". Give the flow 'migrate: module:function' (an old record in, a new "
                    "record or None out; a new or changed one: a function already recorded ran at an earlier upgrade), "
                    "restore the previous type, or add a new field (nullable or with a default) instead",
                    code="schema-refused",
                    name=f,
                )
            )
        else:
            out.append(Change("migrates", what, "; ".join(steps), kind="flow-schema", name=f, data=True))
    for f in old["flows"]:
        if f not in new["flows"]:
            out.append(
                Change("applies", f"flow '{f}'", "removed from the YAML (its increments stay readable in the home)")
            )
    return out
