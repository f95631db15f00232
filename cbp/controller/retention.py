"""History and log retention: how far back a home keeps what happened (as Delta's ``delta.logRetentionDuration``).

Each stage epoch leaves history behind (its entry, the snapshot copy ``cbp rewind`` goes back to,
feed, feed-id and feed-hash entries, collected-increment entries) and Delta log entries in the
home's tables; landed feeds that every stage read stay in their table's data files until removed.
The *retention* of a home says how much of that is kept: the last ``epochs`` epochs of each
stage, or the epochs of the last ``days`` days, whichever keeps more (a setting left out keeps
nothing by that rule; both left out: everything is kept). It is recorded in the home
(:data:`RECORD`), set with :func:`set_retention` (``Pipeline.set_retention``); a home that never
recorded one keeps :data:`DEFAULT` (30 days, Delta's default log retention).

As epochs commit, :class:`Retention` trims what fell out of it, once per a batch of epochs
(:meth:`RetentionSetting.batch`: amortized, and never a listing of the history): the *horizon* is
the oldest change still within reach (the seq of the oldest kept epoch over all stages); every
stage epoch, feed and collected increment older than it goes, with the table versions only it
needed (:func:`cbp.storage.logretention.trim_log`: the logs before the newest checkpoint at or
before the horizon's version, and the data files only those versions held).

What stays reachable: ``cbp rewind`` to any kept epoch (one before the horizon is refused with
code ``rewind-expired``, which names the oldest epoch reachable; ``--to-epoch 0`` once anything
was trimmed); ``cbp history`` from the horizon on (it says where it starts); ``output`` of a whole
flow, of the increments within reach; a feed id's repeat is recognised while its feed is kept.

Crash safety (write-ahead, as the journal's): the new horizon is recorded first, then history
entries are deleted dependents first (snapshot copies and collected entries before the epoch or
feed entry that names them), then each table's data files and then its log entries; last the
record says what was trimmed. A kill anywhere leaves entries below the horizon that nothing reads
(rewinds and history stop at the horizon) and that the next pass deletes; nothing live (the
current snapshot, the horizon's snapshot, the increments either holds) is ever deleted. The
collected entries a pass keeps because their increments are live at the horizon (a stage's epochs
of one run) are recorded with the horizon and deleted by a later pass once they are live no more.

Reads: the record, epoch and feed entries, the horizon's snapshot copy, the rewinds' records,
the tables' logs. Writes: the record; deletes history entries, snapshot copies, log entries and
data files of versions before the horizon.

    >>> RetentionSetting(epochs=100).batch(), DEFAULT.describe()
    (25, 'the last 30 days')
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import faults
from ..errors import RuntimeStateError, UsageError
from ..storage import LAYOUT, Home
from ..storage.logretention import trim_log
from .entries import FeedEntry, FeedHashEntry, FeedIdEntry, parse
from .live import Live
from .viewtables import view_flows

__all__ = [
    "COMPACT_FILES",
    "DEFAULT",
    "RECORD",
    "Retention",
    "RetentionSetting",
    "horizon",
    "refuse_rewind",
    "set_retention",
]

RECORD = LAYOUT.RETENTION
COMPACT_FILES = 32  # a flow nobody reads is compacted once this many of its files are out of reach (.compaction)
MAX_PER_PASS = 2000  # epochs of a stage trimmed per pass at most (an old home's first pass is spread over several)
_DAY = 86400.0


@dataclass(frozen=True)
class RetentionSetting:
    """Keep the last ``epochs`` epochs of each stage, or those of the last ``days`` days, whichever
    keeps more; None: that rule keeps nothing; both None: everything is kept."""

    epochs: int | None = None
    days: float | None = None
    compact_files: int = COMPACT_FILES  # 0: never compact (:mod:`.compaction`)

    def keeps_all(self) -> bool:
        return self.epochs is None and self.days is None

    def batch(self) -> int:
        """Epochs between trimming passes: a quarter of the epochs kept (1 to 32), 32 by days alone."""
        return 32 if self.epochs is None else max(1, min(32, self.epochs // 4))

    def describe(self) -> str:
        parts = ([f"the last {self.epochs} epoch(s) of each stage"] if self.epochs is not None else []) + (
            [f"the last {self.days:g} days"] if self.days is not None else []
        )
        return " or ".join(parts) or "everything"

    @classmethod
    def from_record(cls, rec: dict[str, Any] | None) -> RetentionSetting:
        if rec is None or "setting" not in rec:
            return DEFAULT
        s = rec["setting"]
        epochs = None if s.get("epochs") is None else int(s["epochs"])
        return cls(epochs, s.get("days"), int(s.get("compact_files", COMPACT_FILES)))


DEFAULT = RetentionSetting(epochs=None, days=30.0)


def _checked(epochs: int | None, days: float | None, compact_files: int = COMPACT_FILES) -> RetentionSetting:
    if epochs is not None and (isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0):
        raise UsageError(f"retention epochs must be a whole number, 0 or more; got {epochs!r}", code="bad-option")
    if days is not None and (isinstance(days, bool) or not isinstance(days, int | float) or not days >= 0):
        raise UsageError(f"retention days must be a number, 0 or more; got {days!r}", code="bad-option")
    if isinstance(compact_files, bool) or not isinstance(compact_files, int) or compact_files < 0:
        raise UsageError(f"compact_files must be a whole number, 0 or more; got {compact_files!r}", code="bad-option")
    return RetentionSetting(epochs, None if days is None else float(days), compact_files)


def read_record(home: Home) -> dict[str, Any]:
    """The home's retention record (``{}`` for a home that never recorded one)."""
    return home.read_json(RECORD) or {}


def set_retention(
    home: Home, epochs: int | None = None, days: float | None = None, compact_files: int = COMPACT_FILES
) -> RetentionSetting:
    """Record the home's retention (see the module docstring) and when the out-of-reach increments of
    a flow nobody reads are compacted (:mod:`.compaction`; 0: never); trimming follows as epochs commit."""
    setting = _checked(epochs, days, compact_files)
    with home.lock():
        rec = read_record(home)
        rec["setting"] = {"epochs": setting.epochs, "days": setting.days, "compact_files": setting.compact_files}
        home.write_json(RECORD, rec)
    return setting


def horizon(home: Home) -> dict[str, Any] | None:
    """``{"seq", "stages": {stage: first kept epoch}, "setting"}`` once anything was trimmed, else None."""
    rec = read_record(home)
    h = rec.get("horizon")
    if not h:
        return None
    return {"seq": int(h["seq"]), "stages": {s: int(e) for s, e in h["stages"].items()}, "setting": rec.get("setting")}


def _deferrals(plan: _Plan, earlier: dict[str, set[int]]) -> dict[str, list[int]]:
    """The increments whose collected entries a pass keeps because they are live now or at the horizon, though the
    epoch that wrote or read them goes (a stage's epochs of one run: the horizon's snapshot is taken before the run
    collects them): ``earlier`` ones still live, and the dropped epochs'. Recorded with the horizon (write-ahead), so
    a later pass deletes them once they are live no more.

    >>> plan = _Plan(9, {}, {"s": [(1, {"outputs": {"f": [3, 4]}})]}, {}, {"f": {4, 5}})
    >>> _deferrals(plan, {"f": {2, 5}})
    {'f': [4, 5]}
    """
    named = {f: set(v) for f, v in earlier.items()}
    for entries in plan.entries.values():
        for _e, entry in entries:
            for key in ("inputs", "outputs"):
                for flow, incs in (entry.get(key) or {}).items():
                    named.setdefault(flow, set()).update(int(i) for i in incs)
    kept = {f: sorted(v & plan.live.get(f, set())) for f, v in sorted(named.items())}
    return {f: v for f, v in kept.items() if v}


def refuse_rewind(home: Home, stage: str | None, to_epoch: int, have: int) -> None:
    """Raise ``rewind-expired`` for a rewind to before the horizon (``have``: the stage's epochs now)."""
    h = horizon(home)
    if h is None:
        return
    first = h["stages"].get(stage or "", 1)
    if to_epoch and to_epoch >= first:
        return
    setting = RetentionSetting.from_record({"setting": h["setting"]} if h["setting"] else None)
    if to_epoch == 0 or stage is None:
        where = "the beginning: the history before it was trimmed"
    else:
        where = f"stage '{stage}' epoch {to_epoch}"
    oldest = f"stage '{stage}' epoch {first}" if stage and first <= have else "none before the last epoch"
    raise RuntimeStateError(
        f"cannot rewind {home.location} to {where}: the home keeps {setting.describe()} "
        f"(retention), and the oldest epoch reachable is {oldest}",
        code="rewind-expired",
    )


@dataclass
class _Plan:
    """One trimming pass: the horizon, and per stage the epoch entries below it."""

    seq: int
    first: dict[str, int]  # stage -> first epoch kept
    entries: dict[str, list[tuple[int, dict[str, Any]]]]  # stage -> (epoch, entry) to delete
    snap: dict[str, Any]  # the horizon's snapshot
    live: dict[str, set[int]]  # flow -> increments live now or at the horizon


class Retention:
    """Trims a home's history and logs as its epochs commit (see the module docstring)."""

    def __init__(self, home: Home, live: Live, notify: Callable[[str], None]) -> None:
        self.home, self.live, self.notify = home, live, notify
        self._since = -1  # epochs committed since the last pass (-1: none yet in this process)
        self._batch = 1
        self.compact_due = False  # a pass trimmed something: the run compacts at its end (.compaction)

    def after_epoch(self) -> None:
        """Called once a stage epoch committed (under the home's lock): a pass once per batch. Never
        fails the epoch: a failed pass is reported and tried again with the next batch."""
        self._since += 1
        if 0 < self._since < self._batch:  # the first epoch a process commits always has a pass
            return
        self._since = 0
        try:
            self.trim()
        except Exception as e:  # the epoch is committed: a failed pass must not look like a failed epoch
            self.notify(f"warning: trimming the history of {self.home.location} failed ({e}); tried again later")

    def trim(self) -> dict[str, int] | None:
        """One pass; what it deleted (per kind), or None if nothing was due."""
        rec = read_record(self.home)
        setting = RetentionSetting.from_record(rec or None)
        self._batch = setting.batch()
        if setting.keeps_all() or self.live.committed is None:
            return None
        trimmed = rec.get("trimmed", {})
        plan = self._plan(setting, trimmed.get("stages", {}))
        if plan is None:
            return None
        rec["horizon"] = {"seq": plan.seq, "stages": plan.first}
        deferred = {f: {int(i) for i in incs} for f, incs in rec.get("deferred", {}).items()}
        rec["deferred"] = _deferrals(plan, deferred)
        self.home.write_json(RECORD, rec)  # write-ahead: from here on nothing reads below the horizon
        faults.point("retention:horizon")
        done = {"epochs": 0, "feeds": 0, "rewinds": 0, "log_files": 0, "data_files": 0}
        for flow, incs in deferred.items():  # collected since an earlier horizon that held them live
            self._drop_collected(flow, sorted(incs), plan)
        for stage, entries in plan.entries.items():
            for e, entry in entries:
                self._drop_epoch(stage, e, entry, plan)
                done["epochs"] += 1
        feeds = self._drop_feeds(plan, dict(trimmed.get("feeds", {})), done)
        kept_rewinds = self._drop_rewinds(plan, done)
        if not kept_rewinds:  # a rewind within reach may have put back files removed long ago: logs wait
            self._trim_logs(plan, done)
        rec["trimmed"] = {"stages": plan.first, "feeds": feeds}
        self.home.write_json(RECORD, rec)
        self.compact_due = True
        return done

    # ------------------------------------------------------------------ the horizon
    def _first_kept(self, stage: str, have: int, start: int, setting: RetentionSetting) -> int:
        """The first epoch of ``stage`` the setting keeps (``have`` + 1: none), at most MAX_PER_PASS past ``start``."""
        by_count = have + 1 if setting.epochs is None else max(1, have - setting.epochs + 1)
        first = by_count
        if setting.days is not None:
            oldest = time.time() - setting.days * _DAY
            e = start
            while e < by_count and e <= have:
                at = (self.home.read_json(LAYOUT.epoch_entry(stage, e)) or {}).get("at")
                if at is None or float(at) >= oldest:
                    break
                e += 1
            first = e
        return min(max(first, start), start + MAX_PER_PASS)

    def _plan(self, setting: RetentionSetting, trimmed: dict[str, int]) -> _Plan | None:
        st = self.live.st
        first: dict[str, int] = {}
        seqs: list[int] = []
        for stage, sst in st.stages.items():
            if sst.epoch == 0:
                continue
            start = int(trimmed.get(stage, 1))
            k = self._first_kept(stage, sst.epoch, start, setting)
            if k > sst.epoch:
                seqs.append(st.seq)
            else:
                seq = (self.home.read_json(LAYOUT.epoch_entry(stage, k)) or {}).get("seq")
                if seq is None:  # committed by a cbp that kept no seq: nothing before it can be placed
                    return None
                seqs.append(int(seq))
            first[stage] = k
        if not seqs:
            return None
        h = min(seqs)
        entries: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for stage, k in first.items():
            start = int(trimmed.get(stage, 1))
            entries[stage] = []
            for e in range(start, k):
                entry = self.home.read_json(LAYOUT.epoch_entry(stage, e))
                if entry is not None and entry.get("seq") is not None and int(entry["seq"]) >= h:
                    break  # kept: within reach of the horizon another stage set
                entries[stage].append((e, entry or {}))
            first[stage] = start + len(entries[stage])
        if not any(entries.values()):
            return None
        doc = self.live.committed if h >= st.seq else self.home.read_json(LAYOUT.snapshot_copy(h))
        if doc is None:
            return None
        live = {f: set(fs.incs) for f, fs in st.flows.items()}
        for f, fd in doc.get("flows", {}).items():
            live.setdefault(f, set()).update(int(i) for i in fd.get("incs", {}))
        return _Plan(h, first, entries, doc, live)

    # ------------------------------------------------------------------ deleting
    def _drop_collected(self, flow: str, incs: list[int], plan: _Plan) -> None:
        """Delete the collected entries of ``incs`` but those live now or at the horizon (:func:`_deferrals`)."""
        for i in incs:
            if int(i) not in plan.live.get(flow, set()):
                self.home.delete_file(LAYOUT.collected_entry(flow, int(i)))

    def _drop_epoch(self, stage: str, epoch: int, entry: dict[str, Any], plan: _Plan) -> None:
        if entry.get("seq") is not None:
            self.home.delete_file(LAYOUT.snapshot_copy(int(entry["seq"])))
        for key in ("inputs", "outputs"):
            for flow, incs in (entry.get(key) or {}).items():
                self._drop_collected(flow, incs, plan)
        self.home.delete_file(LAYOUT.epoch_entry(stage, epoch))  # last: it names the rest
        faults.point("retention:epoch")

    def _drop_feeds(self, plan: _Plan, cursor: dict[str, int], done: dict[str, int]) -> dict[str, int]:
        """Feeds landed before the horizon whose increments are live neither now nor at the horizon."""
        for flow, fs in self.live.st.flows.items():
            n = int(cursor.get(flow, 1))
            while n <= fs.feeds and n - int(cursor.get(flow, 1)) < MAX_PER_PASS:
                rel = LAYOUT.feed_entry(flow, n)
                doc = self.home.read_json(rel)
                if doc is not None:
                    e = parse(FeedEntry.from_json, doc, rel)
                    if e.seq is None or e.seq >= plan.seq or set(e.incs) & plan.live.get(flow, set()):
                        break
                    self._drop_feed(flow, n, e, plan)
                    done["feeds"] += 1
                n += 1
            cursor[flow] = n
        return cursor

    def _drop_feed(self, flow: str, n: int, e: FeedEntry, plan: _Plan) -> None:
        if e.id:
            rel = LAYOUT.feed_id_entry(flow, e.id)
            doc = self.home.read_json(rel)
            if doc is not None and parse(FeedIdEntry.from_json, doc, rel).feed == n:
                self.home.delete_file(rel)
        if e.hash:
            rel = LAYOUT.feed_hash_entry(flow, e.hash)
            doc = self.home.read_json(rel)
            if doc is None or all(m <= n for m in parse(FeedHashEntry.from_json, doc, rel).feeds):
                self.home.delete_file(rel)
        self._drop_collected(flow, list(e.incs), plan)
        self.home.delete_file(LAYOUT.feed_entry(flow, n))  # last: it names the rest
        faults.point("retention:feed")

    def _drop_rewinds(self, plan: _Plan, done: dict[str, int]) -> bool:
        """Delete the records of rewinds before the horizon; whether one within reach is left."""
        base = f"{LAYOUT.HISTORY}/rewinds"
        kept = False
        for name in self.home.list_dir(base):
            if name.endswith(".json") and name[:-5].isdigit():
                if int(name[:-5]) < plan.seq:
                    self.home.delete_file(f"{base}/{name}")
                    done["rewinds"] += 1
                else:
                    kept = True
        return kept

    def _view_tables(self, plan: _Plan) -> list[tuple[str, Any, Any]]:
        """The SQL views' tables (cbp.storage.viewtable), each kept as many versions back as its flow's
        table (an epoch commits to both; cbp itself needs only the newest: a rewind rebuilds it)."""
        out: list[tuple[str, Any, Any]] = []
        for f in (f for f in view_flows(self.live.spec) if f in self.live.st.flows):
            keep, now = (plan.snap.get("flows", {}).get(f) or {}).get("version"), self.live.st.flows[f].version
            head = self.home.head_files(LAYOUT.view_table(f))
            if keep is not None and now is not None and head is not None:
                out.append((LAYOUT.view_table(f), max(0, head[0] - (int(now) - int(keep))), head[0]))
        return out

    def _trim_logs(self, plan: _Plan, done: dict[str, int]) -> None:
        """Each table's log before the version the horizon's snapshot names (and the data files only it held)."""
        st = self.live.st
        tables: list[tuple[str, Any, Any]] = [
            (LAYOUT.flow(f), fd.get("version"), st.flows[f].version)
            for f, fd in plan.snap.get("flows", {}).items()
            if f in st.flows
        ]
        tables += [
            (LAYOUT.state(s), sd.get("state_version"), st.stages[s].state_version)
            for s, sd in plan.snap.get("stages", {}).items()
            if s in st.stages
        ]
        tables += self._view_tables(plan)
        for rel, keep, head in tables:
            if keep is None or head is None or int(keep) > int(head):
                continue
            t = trim_log(self.home, rel, int(keep), int(head))
            done["log_files"] += t.log_files
            done["data_files"] += t.data_files
            faults.point("retention:log")
