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

Entries are read typed (:mod:`.entries`): a stage epoch's is a frozen :class:`EpochEntry`
(:meth:`History.epoch_entry`), a feed's a :class:`~.entries.FeedEntry`, a feed id's a
:class:`~.entries.FeedIdEntry`, a collected increment's a :class:`~.entries.CollectedEntry`; their
JSON is what every cbp wrote, and every older form loads (an epoch entry without ``seq``, ``run``,
``placement``, ``code``).

    >>> e = EpochEntry(4, {"w": [1]}, {"c": [2]}, {"c": 3}, seq=9)
    >>> EpochEntry.from_json(e.to_json()) == e, EpochEntry.from_json({"inputs": {}, "outputs": {}}).seq
    (True, None)

Reads: history entries under ``_cbp/history`` (and the legacy entries in memory). Writes: only
``legacy`` in memory (the journal writes the entries, with each change).
"""

from __future__ import annotations

from typing import Any

from ..storage import Home, Layout
from .entries import CollectedEntry, EpochEntry, FeedEntry, FeedIdEntry, parse
from .snapshot import Snapshot

__all__ = ["EpochEntry", "History", "legacy_entries"]  # EpochEntry: from .entries


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

    def feed(self, snap: Snapshot, flow: str, n: int) -> FeedEntry | None:
        """The nth feed of an external flow (what it landed), or None."""
        if not 1 <= n <= snap.flows[flow].feeds:
            return None
        rel = self.layout.feed_entry(flow, n)
        e = self.read(rel)
        return None if e is None else parse(FeedEntry.from_json, e, rel)

    def feed_id(self, snap: Snapshot, flow: str, feed_id: str) -> FeedIdEntry | None:
        """The feed that landed with ``feed_id`` (its number and increments), or None."""
        rel = self.layout.feed_id_entry(flow, feed_id)
        doc = self.read(rel)
        e = None if doc is None else parse(FeedIdEntry.from_json, doc, rel)
        if e is None or e.id != feed_id or e.feed is None or e.feed > snap.flows[flow].feeds:
            return None
        return e

    def collected_entry(self, flow: str, inc: int) -> CollectedEntry | None:
        """The entry of increment ``inc`` of ``flow`` that left a snapshot, unchecked; None if there is none."""
        rel = self.layout.collected_entry(flow, inc)
        e = self.read(rel)
        return None if e is None else parse(CollectedEntry.from_json, e, rel)

    def collected_version(self, snap: Snapshot, flow: str, inc: int) -> int | None:
        """A table version that still holds increment ``inc``, which left the snapshot; None if unknown.

        An increment of a flow nobody reads leaves the snapshot without leaving the table: its
        entry has no version, and the flow's current version holds it."""
        e = self.collected_entry(flow, inc)
        if e is None or inc in snap.flows[flow].incs or e.undone:
            return None
        return snap.flows[flow].version if e.version is None else e.version

    def collected(self, snap: Snapshot, flow: str) -> dict[int, int | None]:
        """Increments of ``flow`` that left the snapshot: id -> a table version that still holds it
        (a backfill's synthetic increments are not the flow's records: left out)."""
        out: dict[int, int | None] = {}
        for inc, e in self.collected_entries(snap, flow).items():
            if not e.producer.startswith("backfill:"):  # cbp.controller.backfill.BACKFILL
                out[inc] = snap.flows[flow].version if e.version is None else e.version
        return out

    def collected_entries(self, snap: Snapshot, flow: str) -> dict[int, CollectedEntry]:
        """The entries of the increments of ``flow`` that left the snapshot (not undone by a rewind), by id."""
        out: dict[int, CollectedEntry] = {}
        prefix = self.layout.collected_dir(flow)
        names = set(self.home.list_dir(prefix)) | {
            r.rsplit("/", 1)[1] for r in self.legacy if r.startswith(prefix + "/")
        }
        for name in names:
            if not name.endswith(".json"):
                continue
            doc = self.read(f"{prefix}/{name}")
            e = None if doc is None else parse(CollectedEntry.from_json, doc, f"{prefix}/{name}")
            if e is not None and e.inc not in snap.flows[flow].incs and not e.undone:
                out[e.inc] = e  # undone: written by an epoch a rewind undid
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
