"""Backfill: a stage added with ``backfill: true`` first reads its inputs' whole contents.

What a flow holds is its consolidated contents (as ``cbp output FLOW --consolidated`` shows them):
every increment it ever had, the live ones at the flow table's current version and those
garbage-collected after every reader consumed them by Delta time travel, at the version the
history says still holds them (:meth:`~.history.History.collected_entries`). For a Delta source
flow these are the source's snapshot as landed.

:func:`survey` finds those increments and what the home no longer holds of them (a table version
whose log is gone, files vacuumed); :func:`consolidate` reads them and sums each record's ``_diff``
(zero sums dropped). :func:`synthetic_rows` turns the result into the one increment an added
stage reads first: a signed input gets each record once with its summed ``_diff``; an unsigned
one gets a record of multiplicity ``n`` as ``n`` copies of +1 (an unsigned stage only ever sees
+1 records). The increment is written by :class:`~.upgrade.Upgrade`, with the producer
``backfill:<stage>``: it belongs to no feed or epoch, so ``output`` and restores skip it
(:func:`is_synthetic`), and increments landed later follow it in the stage's connector.

Reads: a snapshot it is given, the flow's table (its versions' files and rows) and the history's
collected-increment entries. Writes: nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from ..errors import CbpError
from ..spec import PipelineSpec
from ..spec.schema import DIFF
from ..storage import INC, LAYOUT, SRC, Home
from .history import History
from .landing import flow_schema
from .migrate import conform, conforms
from .snapshot import Snapshot

__all__ = ["BACKFILL", "Survey", "Contents", "is_synthetic", "survey", "consolidate", "synthetic_rows"]

BACKFILL = "backfill:"  # the producer prefix of a synthetic increment


def is_synthetic(producer: Any) -> bool:
    """Whether an increment's producer says it is a backfill's synthetic increment (not the flow's own records)."""
    return str(producer or "").startswith(BACKFILL)


@dataclass
class Survey:
    """The increments a backfill of ``flow`` reads (table version -> ids), and what of them is gone."""

    flow: str
    by_version: dict[int, list[int]] = field(default_factory=dict)
    stored: int = 0  # records stored in those increments
    missing: list[str] = field(default_factory=list)
    open: int | None = None  # an increment still being framed: read after the backfill, as it completes

    @property
    def increments(self) -> int:
        return sum(len(ids) for ids in self.by_version.values())


@dataclass
class Contents:
    """A flow's consolidated contents: each record once (stored form), with its summed multiplicity."""

    rows: list[dict[str, Any]]
    diffs: list[int]

    @property
    def records(self) -> int:
        return len(self.rows)


def survey(home: Home, history: History, snap: Snapshot, flow: str) -> Survey:
    """Every increment ``flow`` held (live or collected, not a synthetic one, not an open one), and what is gone."""
    fs = snap.flows.get(flow)
    out = Survey(flow)
    if fs is None or fs.version is None:
        return out
    out.open = fs.open_increment()
    expected: dict[int, int] = {}  # increment -> records it held
    for i, m in fs.incs.items():
        if i != out.open and not is_synthetic(m.producer):
            out.by_version.setdefault(fs.version, []).append(i)
            expected[i] = m.records
    for i, e in history.collected_entries(snap, flow).items():
        if is_synthetic(e.producer):
            continue
        out.by_version.setdefault(fs.version if e.version is None else e.version, []).append(i)
        expected[i] = e.meta.records if e.meta is not None else 0
    for v, ids in sorted(out.by_version.items()):
        _check_version(home, flow, v, ids, expected, out)
    return out


def _check_version(home: Home, flow: str, version: int, ids: list[int], expected: dict[int, int], out: Survey) -> None:
    """Count the records of ``ids`` at ``version``; note in ``out.missing`` what the home no longer holds."""
    rel = LAYOUT.flow(flow)
    try:
        files = home.table_files(rel, version)
    except CbpError as e:
        out.missing.append(f"version {version} of {home.uri(rel)} (increments {_ids(ids)}): {str(e)[:160]}")
        return
    wanted, found = set(ids), set()
    for f in files:
        inc = int(f["partition"])
        if inc not in wanted:
            continue
        if not home.exists(f"{rel}/{f['path']}"):
            out.missing.append(f"increment {inc}: its file {f['path']} is gone from {home.uri(rel)} (vacuumed?)")
            continue
        found.add(inc)
        out.stored += int(f["rows"] or 0)
    noted = {m.split(":", 1)[0] for m in out.missing}
    lost = sorted(i for i in wanted - found if expected.get(i, 0) > 0 and f"increment {i}" not in noted)
    if lost:
        out.missing.append(f"increments {_ids(lost)}: no longer in version {version} of {home.uri(rel)}")


def _ids(ids: list[int]) -> str:
    s = sorted(ids)
    return ", ".join(map(str, s[:5])) + (f" and {len(s) - 5} more" if len(s) > 5 else "")


def consolidate(home: Home, spec: PipelineSpec, sv: Survey) -> Contents:
    """Read the increments of a :func:`survey` and sum each record's ``_diff`` (stored form; zero sums dropped).

    A record retracted more often than it was added is :class:`ValueError` ``("negative", record, sum)``;
    increments stored before a ``migrate:`` of the flow's schema are ``("migrated", increment)``."""
    fl = spec.flows[sv.flow]
    totals: dict[str, list[Any]] = {}  # record identity -> [record, running sum]
    for v, ids in sorted(sv.by_version.items()):
        t = home.read_table(LAYOUT.flow(sv.flow), v, partitions=[(INC, "in", [str(i) for i in ids])])
        if t is None or t.num_rows == 0:
            continue
        if not conforms(t, fl.schema):
            raise ValueError("migrated", int(t[INC][0].as_py()))
        t = t.sort_by([(INC, "ascending")] + ([(SRC, "ascending")] if SRC in t.column_names else []))
        diffs = t[DIFF].to_pylist() if DIFF in t.column_names else [None] * t.num_rows
        for row, d in zip(conform(t, fl.schema).to_pylist(), diffs):
            k = json.dumps(row, separators=(",", ":"), ensure_ascii=False, sort_keys=True, default=repr)
            have = totals.setdefault(k, [row, 0])
            have[1] += 1 if d is None else int(d)
    rows, sums = [], []
    for row, total in totals.values():
        if total < 0:
            raise ValueError("negative", row, total)
        if total:
            rows.append(row)
            sums.append(total)
    return Contents(rows, sums)


def synthetic_rows(spec: PipelineSpec, flow: str, contents: Contents, signed: bool) -> pa.Table:
    """The synthetic increment's file (without the increment column): each record once with its
    summed ``_diff`` (``signed``), or ``n`` copies of +1 of a record whose sum is ``n``."""
    rows: list[dict[str, Any]] = []
    for row, n in zip(contents.rows, contents.diffs):
        rows += [{**row, DIFF: n}] if signed else [{**row, DIFF: 1}] * n
    schema = flow_schema(spec, flow)
    schema = schema.remove(schema.get_field_index(INC))
    if SRC in schema.names:  # a framed flow's feed or producing epoch: none for a synthetic increment
        rows = [{SRC: 0, **r} for r in rows]
    return pa.Table.from_pylist(rows, schema=schema)
