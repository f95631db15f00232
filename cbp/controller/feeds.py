"""Feeds a user regrets: a feed that repeats an earlier one is warned about, one no stage has read can be withdrawn.

Each feed's records are hashed as they land (:func:`content_hash`, over their Arrow form); a
history entry per hash (:meth:`Layout.feed_hash_entry`) lists the feeds with those records, so a
feed without ``--id`` whose records equal an earlier feed's of the same flow is reported (a
:class:`DuplicateFeedWarning`, the controller's ``notify``, and ``cbp status`` while it is
pending). :func:`unfeed` withdraws a feed whose increments no stage has read yet, as one durable
change; a feed that a stage read is refused (code ``feed-read``): a rewind
(:mod:`.rewind`) or a retraction is the way then.

    >>> content_hash(pa.table({"w": ["a"]})) == content_hash(pa.table({"w": ["a"]}))
    True
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, Optional

import pyarrow as pa

from ..errors import InputError, UsageError
from ..storage import INC, LAYOUT

if TYPE_CHECKING:
    from . import Controller

__all__ = ["DuplicateFeedWarning", "content_hash", "note_feed", "warn_duplicate", "unfeed", "pending_duplicates"]


class DuplicateFeedWarning(UserWarning):
    """A feed landed the same records as an earlier feed of the same flow (and had no feed id)."""


def content_hash(table: pa.Table) -> str:
    """A SHA-256 of records as they are stored (their Arrow IPC form): equal for the same records
    in the same order, fed the same way."""
    h = hashlib.sha256()
    sink = pa.BufferOutputStream()
    t = table.replace_schema_metadata(None).combine_chunks()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    h.update(sink.getvalue().to_pybytes())
    return h.hexdigest()


def note_feed(ctl: "Controller", flow: str, number: int, data: pa.Table, feed_id: Optional[str]) -> dict[str, Any]:
    """Record feed ``number``'s hash with the change that lands it; what its feed entry gets
    (``hash``, ``seq``, and ``duplicate_of`` when it repeats an earlier feed without a feed id)."""
    out: dict[str, Any] = {"seq": ctl.st.seq + 1}
    if not data.num_rows:
        return out
    digest = content_hash(data)
    rel = LAYOUT.feed_hash_entry(flow, digest)
    e = ctl.home.read_json(rel) or {"hash": digest, "feeds": []}
    earlier = [int(n) for n in e["feeds"] if int(n) < number]  # a feed number above ours did not commit
    ctl._entry(rel, {"hash": digest, "feeds": earlier + [number]})
    out["hash"] = digest
    if earlier and feed_id is None:
        out["duplicate_of"] = earlier[0]
    return out


def warn_duplicate(ctl: "Controller", flow: str, number: int, note: dict[str, Any], yaml: str = "FLOW.yaml") -> None:
    """Tell the user that a feed repeated an earlier one: through the controller's ``notify`` (``cbp feed``
    prints it on stderr) or, when nothing listens, as a :class:`DuplicateFeedWarning`."""
    first = note.get("duplicate_of")
    if first is None:
        return
    text = (f"warning [duplicate-feed]: feed {number} of flow '{flow}' has the same records as feed {first}; both are landed. "
            f"Give each feed an id (cbp feed --id NAME, e.g. the file's name; Python feed_id=) so that a re-delivered file lands "
            f"nothing; while no stage has read it, 'cbp unfeed {yaml} {flow} --feed {number}' withdraws it")
    if "Controller.__init__" in getattr(ctl.notify, "__qualname__", ""):  # nobody listens: a Python warning
        warnings.warn(text, DuplicateFeedWarning, stacklevel=4)
    else:
        ctl.notify(text)


#: ``cbp status`` looks at the newest this many pending feeds of each flow (one small read each).
MAX_CHECKED = 100


def pending_duplicates(ctl: "Controller") -> list[dict[str, Any]]:
    """Feeds still pending for some stage that repeat an earlier feed (for ``cbp status``; the
    newest :data:`MAX_CHECKED` pending feeds of each flow)."""
    out = []
    for flow, fl in ctl.spec.flows.items():
        if not fl.external or flow not in ctl.st.flows:
            continue
        pending = {i for c in fl.consumers for i in ctl.st.connector(c, flow)}
        feeds = sorted({int(s) for i in pending if (m := ctl.st.flows[flow].incs.get(i)) and m.producer.startswith("feed:")
                        for s in (m.srcs or [int(m.producer[5:])])})
        for n in feeds[-MAX_CHECKED:]:
            e = ctl.history.feed(ctl.st, flow, n) or {}
            if e.get("duplicate_of") is not None:
                out.append({"flow": flow, "feed": n, "duplicate_of": e["duplicate_of"]})
    return out


def unfeed(ctl: "Controller", flow: str, number: int) -> dict[str, Any]:
    """Withdraw feed ``number`` of external flow ``flow``: its increments leave the flow and every
    connector, as one durable change. Refused (``feed-read``) once a stage has read any of them."""
    fl = ctl.spec.flow(flow)
    if not fl.external:
        raise InputError(f"flow '{flow}' is produced by stage '{fl.producer}'; only feeds of external flows can be withdrawn",
                         code="not-external")
    with ctl._locked(), ctl._transaction():
        fs = ctl.st.flows[flow]
        e = ctl.history.feed(ctl.st, flow, number) if isinstance(number, int) and not isinstance(number, bool) else None
        if e is None:
            raise UsageError(f"flow '{flow}' has had {fs.feeds} feed(s); there is no feed {number!r} to withdraw", code="unknown-feed")
        if e.get("withdrawn"):
            raise UsageError(f"feed {number} of flow '{flow}' was withdrawn already", code="unknown-feed")
        ids = [int(i) for i in e["incs"]]
        _check_unread(ctl, flow, number, ids, e)
        seq = ctl.st.seq + 1
        rel = LAYOUT.flow(flow)
        removes = [f for f in ctl.home.table_files(rel, fs.version) if int(f["partition"]) in ids] if fs.version is not None else []
        commits = [{"table": rel, "partition_by": INC, "adds": [], "removes": removes, "app": "cbp:unfeed", "version": seq,
                    "targets": [["flows", flow, "version"]]}] if removes else []
        for i in ids:
            ctl._entry(LAYOUT.collected_entry(flow, i), {"inc": i, "version": fs.version, "meta": asdict(fs.incs[i]), "undone": seq,
                                                        "withdrawn": True})
            del fs.incs[i]
        for c in fl.consumers:
            q = ctl.st.connector(c, flow)
            q[:] = [i for i in q if i not in ids]
        ctl._entry(LAYOUT.feed_entry(flow, number), {**e, "incs": [], "records": 0,
                                                      "withdrawn": {"incs": ids, "records": e.get("records"), "version": fs.version, "seq": seq}})
        if e.get("id") is not None:  # its id may land again
            ctl._entry(LAYOUT.feed_id_entry(flow, e["id"]), {"id": None, "withdrawn_feed": number})
        if e.get("hash"):
            rel_h = LAYOUT.feed_hash_entry(flow, e["hash"])
            h = ctl.home.read_json(rel_h) or {"hash": e["hash"], "feeds": []}
            ctl._entry(rel_h, {"hash": e["hash"], "feeds": [n for n in h["feeds"] if n != number]})
        ctl._commit("unfeed", f"withdrawal of feed {number} of flow '{flow}'", commits)
        return {"flow": flow, "feed": number, "increments": ids, "records": e.get("records")}


def _check_unread(ctl: "Controller", flow: str, number: int, ids: list[int], entry: dict[str, Any]) -> None:
    """Refuse (``feed-read``, ``feed-shared``) to withdraw increments a stage read or that hold other feeds' records."""
    fl = ctl.spec.flows[flow]
    fs = ctl.st.flows[flow]
    for i in ids:
        m = fs.incs.get(i)
        if m is None or any(i not in ctl.st.connector(c, flow) for c in fl.consumers):
            raise UsageError(f"feed {number} of flow '{flow}' was read by a stage already (increment {i}); withdrawing it would "
                             "leave results that counted it: rewind the pipeline to before it ('cbp rewind'), or feed retractions",
                             code="feed-read")
        if fl.frame_by is not None and (set(m.srcs) != {number} or fl.frame_by.field is None):
            raise UsageError(f"feed {number} of flow '{flow}': its increment {i} is framed "
                             + ("with records of other feeds" if set(m.srcs) != {number} else "by a frame_by function whose state went on")
                             + "; it cannot be withdrawn alone", code="feed-shared")
    for stage, it in ctl.home.intentions().items():
        if any(i in it["inputs"].get(flow, []) for i in ids):
            raise UsageError(f"feed {number} of flow '{flow}' is being read by stage '{stage}' epoch {it['epoch']} (interrupted; "
                             "the next 'cbp run' finishes it)", code="feed-read")
    since = entry.get("seq")
    for c in fl.consumers:  # a runnable may read an increment and keep it: epochs since the feed say
        e = ctl.st.stages[c].epoch
        while e >= 1:
            ep = ctl.history.epoch(ctl.st, c, e) or {}
            if since is not None and (ep.get("seq") or 0) < since:
                break
            if any(i in ep.get("inputs", {}).get(flow, []) for i in ids):
                raise UsageError(f"feed {number} of flow '{flow}' was read by stage '{c}' epoch {e}; rewind the pipeline to before it "
                                 "('cbp rewind'), or feed retractions", code="feed-read")
            e -= 1
