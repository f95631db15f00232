"""The history log: what happened, one small JSON file per fact, read only on demand.

Each stage epoch, feed, feed id and garbage-collected increment gets a file of its own, named
after what it records, under ``<home>/_cbp/history/`` (paths owned by :class:`cbp.storage.Layout`).
They are written while a change is committed, before the controller snapshot that makes the
change visible (:mod:`cbp.controller.journal`), so a file whose change did not commit may exist
for a moment: every lookup checks the entry against the snapshot it is read with.

A lookup costs one file read however long the pipeline has run; listing (every collected
increment of a flow) happens only for ``output`` of a whole flow.

A home of format 1 kept these facts in its snapshot; :func:`legacy_entries` turns them into
entries, which are written with the next change and read from memory until then.

A stage epoch's entry is a frozen :class:`EpochEntry` (:meth:`History.epoch_entry`); its JSON is
what every cbp wrote, and an older entry (no ``seq``, ``run``, ``placement``, ``code``) loads.

    >>> e = EpochEntry(4, {"w": [1]}, {"c": [2]}, {"c": 3}, seq=9)
    >>> EpochEntry.from_json(e.to_json()) == e, EpochEntry.from_json({"inputs": {}, "outputs": {}}).seq
    (True, None)

Reads: history entries under ``_cbp/history`` (and the legacy entries in memory). Writes: only
``legacy`` in memory (the journal writes the entries, with each change).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..storage import Home, Layout
from .snapshot import Snapshot

__all__ = ["EpochEntry", "History", "legacy_entries"]


@dataclass(frozen=True)
class EpochEntry:
    """What a committed stage epoch did: the state table version after it, the increment ids it
    read per input flow and wrote per output flow, the records per output flow, where its tasks
    ran (``placement``), its translator's code hash, its change's number (``seq``), the run it was
    part of and when it committed (``at``)."""

    state_version: int | None
    inputs: Mapping[str, list[int]]
    outputs: Mapping[str, list[int]]
    records: Mapping[str, int] = field(default_factory=dict)
    placement: Mapping[str, Any] | None = None
    code: str | None = None
    seq: int | None = None
    run: Mapping[str, Any] | None = None
    at: float | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "state_version": self.state_version,
            "inputs": {f: list(ids) for f, ids in self.inputs.items()},
            "outputs": {f: list(ids) for f, ids in self.outputs.items()},
            "records": dict(self.records),
            "placement": dict(self.placement) if self.placement is not None else None,
            "code": self.code,
            "seq": self.seq,
            "run": dict(self.run) if self.run is not None else None,
            "at": self.at,
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> EpochEntry:
        def ids(m: Mapping[str, Any] | None) -> dict[str, list[int]]:
            return {str(f): [int(i) for i in v] for f, v in (m or {}).items()}

        sv, seq, at = doc.get("state_version"), doc.get("seq"), doc.get("at")
        return cls(
            state_version=int(sv) if sv is not None else None,
            inputs=ids(doc.get("inputs")),
            outputs=ids(doc.get("outputs")),
            records={str(f): int(n) for f, n in (doc.get("records") or {}).items()},
            placement=doc.get("placement"),
            code=doc.get("code"),
            seq=int(seq) if seq is not None else None,
            run=doc.get("run"),
            at=float(at) if at is not None else None,
        )


class History:
    """Reads history entries of one home, checked against a snapshot."""

    def __init__(self, home: Home, layout: Layout) -> None:
        self.home, self.layout = home, layout
        self.legacy: dict[str, Any] = {}  # entries of a format-1 snapshot not written yet

    def read(self, rel: str) -> dict[str, Any] | None:
        """The entry at ``rel`` (a legacy one not written yet, or the file), unchecked; None if there is none."""
        if rel in self.legacy:
            entry: dict[str, Any] = self.legacy[rel]
            return entry
        return self.home.read_json(rel)

    def epoch(self, snap: Snapshot, stage: str, epoch: int) -> dict[str, Any] | None:
        """``{"state_version", "inputs", "outputs", "records"}`` of a committed stage epoch, or None."""
        if not 1 <= epoch <= snap.stages[stage].epoch:
            return None
        return self.read(self.layout.epoch_entry(stage, epoch))

    def epoch_entry(self, snap: Snapshot, stage: str, epoch: int) -> EpochEntry | None:
        """The typed entry of a committed stage epoch, or None."""
        e = self.epoch(snap, stage, epoch)
        return EpochEntry.from_json(e) if e is not None else None

    def feed(self, snap: Snapshot, flow: str, n: int) -> dict[str, Any] | None:
        """``{"incs", "records"}`` of the nth feed of an external flow, or None."""
        if not 1 <= n <= snap.flows[flow].feeds:
            return None
        return self.read(self.layout.feed_entry(flow, n))

    def feed_id(self, snap: Snapshot, flow: str, feed_id: str) -> dict[str, Any] | None:
        """``{"feed", "incs", "id"}`` of the feed that landed with ``feed_id``, or None."""
        e = self.read(self.layout.feed_id_entry(flow, feed_id))
        if e is None or e.get("id") != feed_id or e["feed"] > snap.flows[flow].feeds:
            return None
        return e

    def collected_version(self, snap: Snapshot, flow: str, inc: int) -> int | None:
        """A table version that still holds increment ``inc``, which left the snapshot; None if unknown.

        An increment of a flow nobody reads leaves the snapshot without leaving the table: its
        entry has no version, and the flow's current version holds it."""
        e = self.read(self.layout.collected_entry(flow, inc))
        if e is None or inc in snap.flows[flow].incs or e.get("undone"):
            return None
        return snap.flows[flow].version if e["version"] is None else int(e["version"])

    def collected(self, snap: Snapshot, flow: str) -> dict[int, int | None]:
        """Increments of ``flow`` that left the snapshot: id -> a table version that still holds it
        (a backfill's synthetic increments are not the flow's records: left out)."""
        out: dict[int, int | None] = {}
        for inc, e in self.collected_entries(snap, flow).items():
            producer = str((e.get("meta") or {}).get("producer", ""))
            if not producer.startswith("backfill:"):  # cbp.controller.backfill.BACKFILL
                out[inc] = snap.flows[flow].version if e["version"] is None else int(e["version"])
        return out

    def collected_entries(self, snap: Snapshot, flow: str) -> dict[int, dict[str, Any]]:
        """The entries of the increments of ``flow`` that left the snapshot (not undone by a rewind), by id."""
        out: dict[int, dict[str, Any]] = {}
        prefix = self.layout.collected_dir(flow)
        names = set(self.home.list_dir(prefix)) | {
            r.rsplit("/", 1)[1] for r in self.legacy if r.startswith(prefix + "/")
        }
        for name in names:
            if not name.endswith(".json"):
                continue
            e = self.read(f"{prefix}/{name}")
            if (
                e is not None and e["inc"] not in snap.flows[flow].incs and not e.get("undone")
            ):  # undone: written by an epoch a rewind undid
                out[int(e["inc"])] = e
        return out


def legacy_entries(doc: dict[str, Any], layout: Layout) -> dict[str, Any]:
    """History entries of a format-1 snapshot (per-epoch history, feed ids, collected increments)."""
    out: dict[str, Any] = {}
    for stage, s in doc["stages"].items():
        for e, h in s.get("history", {}).items():
            records = {
                f: sum(doc["flows"][f]["incs"][str(i)]["records"] for i in ids if str(i) in doc["flows"][f]["incs"])
                for f, ids in h.get("outputs", {}).items()
            }
            out[layout.epoch_entry(stage, int(e))] = {
                "state_version": h.get("state_version"),
                "inputs": h.get("inputs", {}),
                "outputs": h.get("outputs", {}),
                "records": records,
            }
    for flow, f in doc["flows"].items():
        feeds: dict[int, list[int]] = {}
        for i, m in f["incs"].items():
            if m["producer"].startswith("feed:"):
                for src in m.get("srcs") or [int(m["producer"][5:])]:
                    feeds.setdefault(int(src), []).append(int(i))
            if m.get("gc"):
                out[layout.collected_entry(flow, int(i))] = {"inc": int(i), "version": m["version"]}
        for n, ids in feeds.items():
            out[layout.feed_entry(flow, n)] = {"incs": sorted(set(ids))}
        for fid, v in f.get("feed_ids", {}).items():
            out[layout.feed_id_entry(flow, fid)] = {"id": fid, "feed": v["feed"], "incs": list(v["incs"])}
    return out
