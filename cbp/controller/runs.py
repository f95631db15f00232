"""Epochs users can follow: per ``cbp run``, which feeds each stage epoch read and what it wrote.

Built from the history log (:mod:`.history`): each stage epoch's entry says what it read and
wrote, the change it committed as (``seq``) and the run it belonged to; rewinds have entries of
their own (:mod:`.rewind`). :meth:`Runs.history` reads every epoch's entry (``cbp history``, on
demand); :meth:`Runs.last_run` only those of the newest run (``cbp status``).

Reads: ``live.spec`` and ``live.st`` (refreshed first: stage epochs, increments), epoch, feed and
collected-increment history entries, the rewinds' records (``rewinds``, from
:class:`~.rewind.Rewind`). Writes: nothing.

Example::

    [e["kind"] for e in parts.runs.history()]
    # ['run', 'run', 'rewind', 'run']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..spec import PipelineSpec
from .entries import RewindEntry
from .history import History
from .journal import Journal
from .live import Live
from .retention import horizon
from .snapshot import Increment, Snapshot

__all__ = ["Runs", "describe_epoch"]


class _Sources:
    """Where an increment came from: the feeds (external flows) or the stage epoch (stage outputs)
    whose records it holds; from the snapshot, the history of collected increments, or the feeds'."""

    def __init__(self, live: Live, history: History) -> None:
        self.live, self.history = live, history
        self._feeds: dict[str, dict[int, list[int]]] = {}

    @property
    def snap(self) -> Snapshot:
        return self.live.st

    def _meta(self, flow: str, inc: int) -> Increment | None:
        m = self.snap.flows[flow].incs.get(inc)
        if m is not None:
            return m
        e = self.history.collected_entry(flow, inc)
        return None if e is None else e.meta

    def feeds(self, flow: str, inc: int) -> list[int]:
        m = self._meta(flow, inc)
        if m is not None and m.producer.startswith("feed:"):
            return sorted({int(s) for s in m.srcs or [int(m.producer[5:])]})
        if flow not in self._feeds:  # collected by an older cbp: the feeds' own entries say
            by_inc: dict[int, list[int]] = {}
            for n in range(1, self.snap.flows[flow].feeds + 1):
                e = self.history.feed(self.snap, flow, n)
                for i in e.incs if e is not None else ():
                    by_inc.setdefault(i, []).append(n)
            self._feeds[flow] = by_inc
        return self._feeds[flow].get(inc, [])

    def producer(self, flow: str, inc: int) -> str | None:
        m = self._meta(flow, inc)
        return None if m is None else m.producer


def describe_epoch(spec: PipelineSpec, src: _Sources, stage: str, epoch: int, entry: dict[str, Any]) -> dict[str, Any]:
    """One stage epoch as ``cbp history`` shows it: what it read (increments, and the feeds or
    producing epochs they hold) and wrote (increments and records per output flow)."""
    read: dict[str, Any] = {}
    for flow, ids in entry.get("inputs", {}).items():
        fl = spec.flows.get(flow)
        r: dict[str, Any] = {"increments": [int(i) for i in ids]}
        if fl is not None and fl.external:
            r["feeds"] = sorted({n for i in ids for n in src.feeds(flow, int(i))})
        elif flow in src.snap.flows:
            r["from"] = sorted({p for i in ids if (p := src.producer(flow, int(i))) is not None})
        read[flow] = r
    wrote = {
        f: {"increments": [int(i) for i in ids], "records": int(entry.get("records", {}).get(f, 0))}
        for f, ids in entry.get("outputs", {}).items()
    }
    return {
        "stage": stage,
        "epoch": epoch,
        "seq": entry.get("seq"),
        "at": entry.get("at"),
        "read": read,
        "wrote": wrote,
        "state_version": entry.get("state_version"),
    }


def _run_key(run: dict[str, Any] | None) -> Any:
    return None if not run else (run.get("host"), run.get("pid"), run.get("started"))


def _group(epochs: list[tuple[dict[str, Any] | None, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Consecutive epochs of one run as one event."""
    out: list[dict[str, Any]] = []
    for run, ep in epochs:
        if out and out[-1]["kind"] == "run" and _run_key(out[-1]["run"]) == _run_key(run) and run is not None:
            out[-1]["epochs"].append(ep)
        else:
            out.append({"kind": "run", "run": run, "epochs": [ep]})
    return out


class Runs:
    """The runs and rewinds of a home, as ``cbp history`` and ``cbp status`` show them."""

    def __init__(
        self, live: Live, journal: Journal, history: History, rewinds: Callable[[], list[RewindEntry]]
    ) -> None:
        self.live, self.journal, self.log, self.rewinds = live, journal, history, rewinds

    def history(self) -> list[dict[str, Any]]:
        """Every run (its stage epochs in commit order) and every rewind of the home, oldest first."""
        self.journal.refresh()
        src = _Sources(self.live, self.log)
        rows: list[tuple[float, dict[str, Any] | None, dict[str, Any]]] = []
        first = (horizon(self.log.home) or {}).get("stages", {})  # older epochs were trimmed (retention)
        for n, (stage, st) in enumerate(self.live.st.stages.items()):
            for e in range(first.get(stage, 1), st.epoch + 1):
                entry = self.log.epoch(self.live.st, stage, e) or {}
                order = (
                    float(entry["seq"]) if entry.get("seq") is not None else -1e9 + e + n / 100
                )  # older entries: no seq
                rows.append((order, entry.get("run"), describe_epoch(self.live.spec, src, stage, e, entry)))
        rows.sort(key=lambda r: r[0])
        events: list[tuple[float, list[dict[str, Any]]]] = []
        recs = {float(r.seq): r for r in self.rewinds()}
        bounds = sorted(recs)
        start = 0
        for b in bounds + [float("inf")]:
            chunk = [(run, ep) for order, run, ep in rows[start:] if order < b]
            start += len(chunk)
            events += [(0.0, [g]) for g in _group(chunk)]
            if b != float("inf"):
                r = recs[b]
                events.append(
                    (
                        0.0,
                        [
                            {
                                "kind": "rewind",
                                "seq": r.seq,
                                "at": r.at,
                                "to": dict(r.to),
                                "undone": {s: [e.epoch for e in es] for s, es in r.undone.items()},
                                "undone_epochs": [
                                    {**describe_epoch(self.live.spec, src, s, e.epoch, e.to_json()), "undone": True}
                                    for s, es in r.undone.items()
                                    for e in es
                                ],
                                "restored": {f: list(ids) for f, ids in r.restored.items()},
                            }
                        ],
                    )
                )
        return [e for _, g in events for e in g]

    def last_run(self) -> dict[str, Any] | None:
        """The newest run's stage epochs (reading only their entries), or None before any epoch."""
        self.journal.refresh()
        last: dict[str, dict[str, Any]] = {}
        for stage, st in self.live.st.stages.items():
            if st.epoch:
                last[stage] = self.log.epoch(self.live.st, stage, st.epoch) or {}
        if not last:
            return None
        newest = max(last.values(), key=lambda e: e.get("seq") or 0)
        key = _run_key(newest.get("run"))
        src = _Sources(self.live, self.log)
        found: list[tuple[int, dict[str, Any]]] = []
        for stage, entry in last.items():
            e = self.live.st.stages[stage].epoch
            while e >= 1 and (key is not None and _run_key(entry.get("run")) == key or entry is newest):
                found.append((entry.get("seq") or 0, describe_epoch(self.live.spec, src, stage, e, entry)))
                e -= 1
                entry = self.log.epoch(self.live.st, stage, e) or {} if e >= 1 else {}
        found.sort(key=lambda f: f[0])
        return {"run": newest.get("run"), "epochs": [ep for _, ep in found]}
