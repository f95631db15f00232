"""Feeds a user regrets: a feed that repeats an earlier one is warned about, one no stage has read can be withdrawn.

Each feed's records are hashed as they land (:func:`content_hash`, over their Arrow form); a
history entry per hash (:meth:`Layout.feed_hash_entry`) lists the feeds with those records, so a
feed without ``--id`` whose records equal an earlier feed's of the same flow is reported (a
:class:`DuplicateFeedWarning`, the controller's ``notify``, and ``cbp status`` while it is
pending). A source flow's feeds (``cbp sync``) are not hashed (:func:`hashed_flow`): each has the
feed id ``delta:<URI>@<version>``, which says what it holds. :meth:`Feeds.unfeed` withdraws a feed
whose increments no stage has read yet, as one durable change; a feed that a stage read is refused
(code ``feed-read``): a rewind (:mod:`.rewind`) or a retraction is the way then.

Reads: ``live.spec`` and ``live.st`` (flows, increments, connectors, stage epochs), feed,
feed-hash and epoch history entries, the home's intentions and whether a runner is active.
Writes: feed-hash entries (with the feed that lands, :meth:`Feeds.note`); a withdrawal, through
the journal: the flow table's commit removing the feed's files, ``live.st`` (the increments leave
the flow and its connectors), and the feed, feed-id, feed-hash and collected-increment entries.

    >>> content_hash(pa.table({"w": ["a"]})) == content_hash(pa.table({"w": ["a"]}))
    True
"""

from __future__ import annotations

import copy
import hashlib
import io
import warnings
from dataclasses import replace
from typing import Any

import pyarrow as pa

from ..errors import InputError, UsageError
from ..spec.objects import FlowSpec
from ..storage import INC, LAYOUT, Home
from .change import Change, Commit, FlowVersion, IncrementsDropped
from .entries import CollectedEntry, EpochEntry, FeedEntry, FeedHashEntry, FeedIdEntry, HistoryEntry, Withdrawal, parse
from .history import History
from .intentions import Intention
from .journal import Journal
from .live import Live, Notice

__all__ = ["DuplicateFeedWarning", "content_hash", "hashed_flow", "Feeds", "MAX_CHECKED"]


class DuplicateFeedWarning(UserWarning):
    """A feed landed the same records as an earlier feed of the same flow (and had no feed id)."""


class _HashSink(io.RawIOBase):
    """A writable file that only feeds a hash (the records are never copied whole)."""

    def __init__(self) -> None:
        super().__init__()
        self.h = hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.h.update(b)
        return len(b)


def content_hash(table: pa.Table) -> str:
    """A SHA-256 of records as they are stored (their Arrow IPC stream, written batch by batch
    into the hash): equal for the same records in the same order, fed the same way."""
    sink = _HashSink()
    t = table.replace_schema_metadata(None)
    with pa.ipc.new_stream(pa.PythonFile(sink, mode="w"), t.schema) as w:
        w.write_table(t)
    return sink.h.hexdigest()


def hashed_flow(fl: FlowSpec) -> bool:
    """Whether the feeds of flow ``fl`` (a :class:`~cbp.spec.FlowSpec`) are hashed. A source flow's
    are not: only ``cbp sync`` feeds it, each feed with the id ``delta:<URI>@<version>`` (a re-land's
    with its feed number too), which a landed feed's records cannot repeat without repeating the id
    (then :meth:`.landing.Landing.feed` lands nothing); the hash would only cost a pass over every
    record of the table (0.8 CPU s for TPC-H SF 1's lineitem) for a warning that cannot come."""
    return fl.source is None


#: ``cbp status`` looks at the newest this many pending feeds of each flow (one small read each).
MAX_CHECKED = 100


class Feeds:
    """Feed hashes and duplicate warnings, and withdrawing a feed no stage has read."""

    def __init__(self, home: Home, live: Live, journal: Journal, history: History, notify: Notice) -> None:
        self.home, self.live, self.journal, self.history, self.notify = home, live, journal, history, notify

    def hash_entry(self, flow: str, digest: str) -> FeedHashEntry:
        """The feeds of ``flow`` whose records hash to ``digest`` (none listed if no entry)."""
        rel = LAYOUT.feed_hash_entry(flow, digest)
        doc = self.home.read_json(rel)
        return FeedHashEntry(digest) if doc is None else parse(FeedHashEntry.from_json, doc, rel)

    def note(
        self, flow: str, number: int, data: pa.Table, feed_id: str | None, known: FeedHashEntry | None = None
    ) -> tuple[FeedEntry, list[tuple[str, HistoryEntry]]]:
        """What feed ``number``'s entry gets (``hash``, ``seq``, and ``duplicate_of`` when it
        repeats an earlier feed without a feed id), and its hash's entry, to commit with the feed:
        feed 3 repeating feed 1 gets ``FeedEntry((), seq=..., hash=h, duplicate_of=1)`` and
        ``[(<flows/F/hashes/h.json>, FeedHashEntry(h, (1, 3)))]``. ``known``: the hash's entry
        :meth:`refuse_retry` read for the same records (under the same lock), neither hashed nor read again.
        """
        out = FeedEntry((), seq=self.live.st.seq + 1)
        if not data.num_rows or not hashed_flow(self.live.spec.flows[flow]):
            return out, []
        entry = known if known is not None else self.hash_entry(flow, content_hash(data))
        digest = entry.hash
        earlier = [n for n in entry.feeds if n < number]  # one above ours did not commit
        noted = (LAYOUT.feed_hash_entry(flow, digest), FeedHashEntry(digest, (*earlier, number)))
        return replace(out, hash=digest, duplicate_of=earlier[0] if earlier and feed_id is None else None), [noted]

    def refuse_retry(self, flow: str, data: pa.Table, feed_id: str | None, force: bool) -> FeedHashEntry | None:
        """Before a feed with ``feed_id`` lands: refuse it (code ``duplicate-feed``) when its records
        equal a pending feed of ``flow`` that had no id: most likely the same delivery retried with
        an id; ``force`` lands it anyway. A keyed flow's feed entries hash the changes its events
        made, so it is not checked, nor a source flow's feeds (:func:`hashed_flow`). Returns the
        hash's entry it read (for :meth:`note`: a feed's records are hashed once), None if it
        checked nothing."""
        fl = self.live.spec.flows[flow]
        if force or feed_id is None or not data.num_rows or fl.key or not hashed_flow(fl):
            return None
        e = self.hash_entry(flow, content_hash(data))
        pending = {i for c in fl.consumers for i in self.live.st.connector(c, flow)}
        for n in sorted(e.feeds):
            entry = self.history.feed(self.live.st, flow, n)
            if entry is not None and entry.id is None and pending & set(entry.incs):
                yaml = self.live.spec.path
                raise InputError(
                    f"flow '{flow}': these records equal feed {n}, landed without an id and not yet "
                    f"read by every stage, so --id {feed_id} would land them twice; nothing was landed. "
                    "If they are new records after all, feed them with --force (Python: force=True); "
                    f"'cbp unfeed {yaml} {flow} --feed {n}' withdraws the earlier feed",
                    code="duplicate-feed",
                )
        return e

    def warn_duplicate(self, flow: str, number: int, note: FeedEntry, yaml: str = "FLOW.yaml") -> None:
        """Tell the user that a feed repeated an earlier one: through the controller's ``notify`` (``cbp feed``
        prints it on stderr) or, when nothing listens, as a :class:`DuplicateFeedWarning`."""
        first = note.duplicate_of
        if first is None:
            return
        text = (
            f"warning [duplicate-feed]: feed {number} of flow '{flow}' has the same records as feed {first}; "
            "both are landed. Give each feed an id (cbp feed --id NAME, e.g. the file's name; Python feed_id=) "
            "so that a re-delivered file lands nothing; while no stage has read it, "
            f"'cbp unfeed {yaml} {flow} --feed {number}' withdraws it"
        )
        if not self.notify.listened:  # nobody listens: a Python warning
            # stack: Feeds.warn_duplicate, Landing.feed, Pipeline.feed, the caller
            warnings.warn(text, DuplicateFeedWarning, stacklevel=4)
        else:
            self.notify(text)

    def pending_duplicates(self) -> list[dict[str, Any]]:
        """Feeds still pending for some stage that repeat an earlier feed (for ``cbp status``; the
        newest :data:`MAX_CHECKED` pending feeds of each flow)."""
        out = []
        for flow, fl in self.live.spec.flows.items():
            if not fl.external or flow not in self.live.st.flows:
                continue
            pending = {i for c in fl.consumers for i in self.live.st.connector(c, flow)}
            feeds = sorted(
                {
                    int(s)
                    for i in pending
                    if (m := self.live.st.flows[flow].incs.get(i)) and m.producer.startswith("feed:")
                    for s in (m.srcs or [int(m.producer[5:])])
                }
            )
            for n in feeds[-MAX_CHECKED:]:
                e = self.history.feed(self.live.st, flow, n)
                if e is not None and e.duplicate_of is not None:
                    out.append({"flow": flow, "feed": n, "duplicate_of": e.duplicate_of})
        return out

    def unfeed(self, flow: str, number: int) -> dict[str, Any]:
        """Withdraw feed ``number`` of external flow ``flow``: its increments leave the flow and every
        connector, as one durable change. Refused (``feed-read``) once a stage has read any of them."""
        fl = self.live.spec.flow(flow)
        if not fl.external:
            raise InputError(
                f"flow '{flow}' is produced by stage '{fl.producer}'; only feeds of external flows can be withdrawn",
                code="not-external",
            )
        if fl.key or fl.source is not None:  # its keyed table / its source's versions already took the feed in
            raise UsageError(
                f"flow '{flow}' is {'keyed' if fl.key else 'synced from ' + str(fl.source)}: its feeds change "
                f"{'the current row per key' if fl.key else 'what was landed of the table'} as well, so one cannot be "
                "withdrawn alone; feed the opposite change (an upsert of the old row, or a delete) instead",
                code="feed-keyed",
            )
        with self.journal.locked(), self.journal.transaction():
            fs = self.live.st.flows[flow]
            e = (
                self.history.feed(self.live.st, flow, number)
                if isinstance(number, int) and not isinstance(number, bool)
                else None
            )
            if e is None:
                raise UsageError(
                    f"flow '{flow}' has had {fs.feeds} feed(s); there is no feed {number!r} to withdraw",
                    code="unknown-feed",
                )
            if e.withdrawn is not None:
                raise UsageError(f"feed {number} of flow '{flow}' was withdrawn already", code="unknown-feed")
            ids = list(e.incs)
            self._check_unread(flow, number, ids, e)
            seq = self.live.st.seq + 1
            rel = LAYOUT.flow(flow)
            removes = (
                [f for f in self.home.table_files(rel, fs.version) if int(f["partition"]) in ids]
                if fs.version is not None
                else []
            )
            commits = [Commit(rel, INC, (), tuple(removes), "cbp:unfeed", seq, (FlowVersion(flow),))] if removes else []
            entries: list[tuple[str, HistoryEntry]] = [
                (LAYOUT.collected_entry(flow, i), CollectedEntry(i, fs.version, copy.deepcopy(fs.incs[i]), seq, True))
                for i in ids
            ]
            withdrawal = Withdrawal(tuple(ids), e.records, fs.version, seq)
            entries.append((LAYOUT.feed_entry(flow, number), replace(e, incs=(), records=0, withdrawn=withdrawal)))
            if e.id is not None:  # its id may land again
                entries.append((LAYOUT.feed_id_entry(flow, e.id), FeedIdEntry(None, withdrawn_feed=number)))
            if e.hash:
                entries.append((LAYOUT.feed_hash_entry(flow, e.hash), self.hash_entry(flow, e.hash).without(number)))
            what = f"withdrawal of feed {number} of flow '{flow}'"
            withdrawn = IncrementsDropped(flow, tuple(ids), tuple(fl.consumers))
            self.journal.commit(Change("unfeed", what, tuple(commits), (withdrawn,), tuple(entries)))
            return {"flow": flow, "feed": number, "increments": ids, "records": e.records}

    def _check_unread(self, flow: str, number: int, ids: list[int], entry: FeedEntry) -> None:
        """Refuse (``feed-read``, ``feed-shared``) to withdraw increments a stage read or that hold
        other feeds' records."""
        fl = self.live.spec.flows[flow]
        fs = self.live.st.flows[flow]
        for i in ids:
            m = fs.incs.get(i)
            if m is None or any(i not in self.live.st.connector(c, flow) for c in fl.consumers):
                raise UsageError(
                    f"feed {number} of flow '{flow}' was read by a stage already (increment {i}); withdrawing it would "
                    "leave results that counted it: rewind the pipeline to before it ('cbp rewind'), or feed "
                    "retractions",
                    code="feed-read",
                )
            if fl.frame_by is not None and (set(m.srcs) != {number} or fl.frame_by.field is None):
                raise UsageError(
                    f"feed {number} of flow '{flow}': its increment {i} is framed "
                    + (
                        "with records of other feeds"
                        if set(m.srcs) != {number}
                        else "by a frame_by function whose state went on"
                    )
                    + "; it cannot be withdrawn alone",
                    code="feed-shared",
                )
        # an epoch that reads them while its job runs is refused at its commit and planned again
        # (cbp.controller.commitcheck); one a killed runner left would be finished by the next run
        interrupted = self.home.intentions() if not self.home.runner_active() else {}
        for stage, doc in interrupted.items():
            it = Intention.from_json(doc)
            if any(i in it.inputs.get(flow, []) for i in ids):
                raise UsageError(
                    f"feed {number} of flow '{flow}' is being read by stage '{stage}' epoch {it.epoch} "
                    "(interrupted; the next 'cbp run' finishes it)",
                    code="feed-read",
                )
        since = entry.seq
        for c in fl.consumers:  # a runnable may read an increment and keep it: epochs since the feed say
            e = self.live.st.stages[c].epoch
            while e >= 1:
                ep = self.history.epoch_entry(self.live.st, c, e) or EpochEntry(None, {}, {})
                if since is not None and (ep.seq or 0) < since:
                    break
                if any(i in ep.inputs.get(flow, []) for i in ids):
                    raise UsageError(
                        f"feed {number} of flow '{flow}' was read by stage '{c}' epoch {e}; rewind the pipeline to "
                        "before it "
                        "('cbp rewind'), or feed retractions",
                        code="feed-read",
                    )
                e -= 1
