"""An Airflow event trigger that fires when an increment lands on a cbp flow (for ``AssetWatcher``).

The DAGs of :mod:`cbp.airflow.dagfactory` watch every external input flow of a pipeline with
:class:`IncrementLanded`. It fires when

- the flow has feeds that were not announced yet: landed by ``cbp feed``, by the Python API,
  or by any Airflow task, wherever it ran;
- files wait in the flow's inbox directory (``*.jsonl`` or ``*.parquet``), which the DAG's first task lands (or
  moves to ``rejected/`` if they cannot be landed: a rejected file is not announced again). A file
  counts once it is complete: names starting with ``.`` or ``_`` and temporary suffixes
  (``.tmp``, ``.part``, ``._COPYING_``, ...) are ignored, and a file is taken only when it was
  not modified for ``settle`` seconds (a ``cp``, ``scp`` or ``curl -o`` still writing it is left alone).

What was announced is kept in a local directory, ``markers`` (default: beside the home,
``<home>/_airflow``; a home on an object store needs one on the Airflow machine's disk), as
``<markers>/announced/<flow>.json``, so a trigger restarted by the triggerer (it is re-created
after every event) does not fire twice for the same feed or file.

    >>> t = IncrementLanded("/srv/state/crawl_queue", "pages", inbox="/srv/state/inbox/crawl_queue/pages")  # doctest: +SKIP
    >>> t.check()          # what the trigger would announce now, or None      # doctest: +SKIP
    {'flow': 'pages', 'feeds': 3, 'new_feeds': 1, 'inbox_files': []}
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
import time
from typing import Any, AsyncIterator, Optional, Sequence

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

__all__ = ["IncrementLanded", "landed_feeds", "inbox_files", "announce_landed", "INBOX_SUFFIXES", "INBOX_SETTLE_SECONDS", "settled",
           "REJECTED", "inbox_feed_id", "reject_file", "keep_landed", "shown_name"]

INBOX_SUFFIXES = (".jsonl", ".parquet")  # what the inbox lands: JSON lines or Parquet (cbp.Pipeline.feed)
TEMP_SUFFIXES = (".tmp", ".part", ".crdownload", "._COPYING_", ".filepart")  # files being written (browsers, hadoop fs -put, WinSCP)
INBOX_SETTLE_SECONDS = 5.0  # an inbox file modified more recently may still be being written: it waits


def landed_feeds(home: str, flow: str) -> int:
    """How many feeds the flow has had in the home (0 if nothing was ever landed)."""
    from ..storage import Home

    snap = Home(home).read_controller()
    if snap is None or flow not in snap.get("flows", {}):
        return 0
    return int(snap["flows"][flow]["feeds"])


def settled(st: os.stat_result, settle: float, now: Optional[float] = None) -> bool:
    """Whether a file was last modified at least ``settle`` seconds ago (its writer is done)."""
    return (time.time() if now is None else now) - st.st_mtime >= settle


def inbox_files(inbox: Optional[str], settle: float = INBOX_SETTLE_SECONDS) -> list[str]:
    """The ``*.jsonl`` and ``*.parquet`` files waiting in an inbox directory, oldest name first: regular files, and
    symbolic links (which the DAG rejects); not directories, FIFOs or devices. Not the files still
    being written: hidden or temporary names (``.x.jsonl``, ``_x.jsonl``, ``x.jsonl.part``) and files
    modified less than ``settle`` seconds ago."""
    if not inbox or not os.path.isdir(inbox):
        return []
    names = []
    now = time.time()
    for f in os.listdir(inbox):
        if f.endswith(INBOX_SUFFIXES) and not f.startswith((".", "_")) and not f.endswith(TEMP_SUFFIXES):
            try:
                st = os.lstat(os.path.join(inbox, f))
            except OSError:
                continue
            if (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)) and settled(st, settle, now):
                names.append(f)
    return sorted(names)


# ---------------------------------------------------------------------------- landing inbox files (cbp.airflow.dagfactory.land_inbox)
REJECTED = "rejected"  # beside landed/: files that could not be landed, each with <name>.error.txt


def shown_name(name: str) -> str:
    """A file name as printable text (undecodable bytes as escapes)."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def inbox_feed_id(path: str, name: str) -> str:
    """``inbox:<name>:<size>:<sha256 prefix>``: the same file lands once however often it is retried,
    and another file dropped later under the same name and size is landed too."""
    h = hashlib.sha256()
    size = 0
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            raise ValueError("not a regular file")
        while chunk := fh.read(1 << 20):
            h.update(chunk)
            size += len(chunk)
    return f"inbox:{name}:{size}:{h.hexdigest()[:16]}"


def _free_name(d: str, name: str) -> str:
    """``name``, or ``<stem>.<n>.<suffix>`` with the first ``n`` no file in ``d`` has."""
    target, n = name, 0
    while os.path.lexists(os.path.join(d, target)):
        n += 1
        stem, dot, suffix = name.rpartition(".")
        target = f"{stem}.{n}.{suffix}" if dot else f"{name}.{n}"
    return target


def reject_file(d: str, name: str, code: str, message: str) -> str:
    """Move ``d/name`` to ``d/rejected/`` (never over an earlier rejected file) with the error beside it."""
    rej = os.path.join(d, REJECTED)
    os.makedirs(rej, exist_ok=True)
    target = _free_name(rej, name)
    err = os.path.join(rej, f"{target}.error.txt")
    with open(f"{err}.tmp", "w", encoding="utf-8", errors="backslashreplace") as fh:  # the error first: a crash leaves the file in the inbox
        fh.write(f"{code}: {message}\n")
    os.replace(f"{err}.tmp", err)
    os.replace(os.path.join(d, name), os.path.join(rej, target))
    return target


def keep_landed(d: str, name: str, feed_id: str) -> str:
    """Move the landed ``d/name`` to ``d/landed/``: over an earlier file of that name only if it is the
    same file (a retried task), beside it otherwise (``<stem>.<n>.<suffix>``)."""
    done = os.path.join(d, "landed")
    os.makedirs(done, exist_ok=True)
    target = name
    if os.path.lexists(os.path.join(done, name)):
        try:
            same = inbox_feed_id(os.path.join(done, name), name) == feed_id
        except (OSError, ValueError):
            same = False
        target = name if same else _free_name(done, name)
    os.replace(os.path.join(d, name), os.path.join(done, target))
    return target



def _announced_path(home: str, flow: str, markers: Optional[str] = None) -> str:
    if markers is None:
        if "://" in home and not home.startswith("file://"):
            raise ValueError(f"the announcement markers of {home} need a local directory (markers=...)")
        markers = os.path.join(home, "_airflow")
    return os.path.join(markers, "announced", f"{flow}.json")


def _read_announced(home: str, flow: str, markers: Optional[str] = None) -> dict[str, Any]:
    try:
        with open(_announced_path(home, flow, markers)) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {"feeds": 0, "inbox": []}


def _write_announced(home: str, flow: str, seen: dict[str, Any], markers: Optional[str] = None) -> None:
    path = _announced_path(home, flow, markers)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as fh:
        json.dump(seen, fh)
    os.replace(tmp, path)


def announce_landed(home: str, flow: str, files: list[str], feeds: int, rejected: Sequence[str] = (), markers: Optional[str] = None) -> None:
    """Record that announced inbox ``files`` were landed as ``feeds`` feeds (and that ``rejected``
    files left the inbox without a feed), so they are not announced again, and a file dropped later
    under the same name is."""
    seen = _read_announced(home, flow, markers)
    done = [f for f in files if f in seen["inbox"]]
    gone = [f for f in rejected if f in seen["inbox"]]
    if done or gone:
        seen["inbox"] = [f for f in seen["inbox"] if f not in done and f not in gone]
        seen["feeds"] += min(feeds, len(done))
        _write_announced(home, flow, seen, markers)


class IncrementLanded(BaseEventTrigger):
    """Fires once per batch of new feeds (or inbox files) of ``flow`` in ``home``; see the module docstring."""

    def __init__(self, home: str, flow: str, inbox: Optional[str] = None, poke_interval: float = 5.0, markers: Optional[str] = None,
                 settle: float = INBOX_SETTLE_SECONDS) -> None:
        super().__init__()
        self.home = home
        self.flow = flow
        self.inbox = inbox
        self.poke_interval = poke_interval
        self.markers = markers
        self.settle = settle

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return ("cbp.airflow.triggers.IncrementLanded", {"home": self.home, "flow": self.flow, "inbox": self.inbox,
                                                         "poke_interval": self.poke_interval, "markers": self.markers,
                                                         "settle": self.settle})

    def check(self) -> Optional[dict[str, Any]]:
        """The event to send now (and remember as announced), or None if nothing new landed."""
        seen = _read_announced(self.home, self.flow, self.markers)
        feeds = landed_feeds(self.home, self.flow)
        waiting = inbox_files(self.inbox, self.settle)  # complete files only: one still being written is announced once settled
        new_files = [f for f in waiting if f not in seen["inbox"]]
        if feeds <= seen["feeds"] and not new_files:
            return None
        _write_announced(self.home, self.flow, {"feeds": max(feeds, seen["feeds"]), "inbox": waiting}, self.markers)
        return {"flow": self.flow, "feeds": feeds, "new_feeds": max(0, feeds - seen["feeds"]),
                "inbox_files": [os.fsencode(f).decode("utf-8", "backslashreplace") for f in new_files]}  # undecodable names as escapes

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            event = await asyncio.get_running_loop().run_in_executor(None, self.check)
            if event is not None:
                self.log.info("new increments on %s in %s: %s", self.flow, self.home, event)
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.poke_interval)
