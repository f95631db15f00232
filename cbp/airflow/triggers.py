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

Example (a home with three feeds of ``pages``, one of them not announced yet)::

    t = IncrementLanded("/srv/state/crawl_queue", "pages", inbox="/srv/state/inbox/crawl_queue/pages")
    t.check()  # what the trigger would announce now, or None
    # {'flow': 'pages', 'feeds': 3, 'new_feeds': 1, 'inbox_files': []}
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

from .inbox import (
    INBOX_SETTLE_SECONDS,
    INBOX_SUFFIXES,
    REJECTED,
    announce_landed,
    inbox_files,
    read_announced,
    settled,
    shown_name,
    write_announced,
)

__all__ = [
    "IncrementLanded",
    "landed_feeds",
    "inbox_files",
    "announce_landed",
    "INBOX_SUFFIXES",
    "INBOX_SETTLE_SECONDS",
    "settled",
    "REJECTED",
    "shown_name",
]


def landed_feeds(home: str, flow: str) -> int:
    """How many feeds the flow has had in the home (0 if nothing was ever landed)."""
    from ..storage import Home

    snap = Home(home).read_controller()
    if snap is None or flow not in snap.get("flows", {}):
        return 0
    return int(snap["flows"][flow]["feeds"])


class IncrementLanded(BaseEventTrigger):
    """Fires once per batch of new feeds (or inbox files) of ``flow`` in ``home``; see the module docstring."""

    def __init__(
        self,
        home: str,
        flow: str,
        inbox: str | None = None,
        poke_interval: float = 5.0,
        markers: str | None = None,
        settle: float = INBOX_SETTLE_SECONDS,
    ) -> None:
        super().__init__()
        self.home = home
        self.flow = flow
        self.inbox = inbox
        self.poke_interval = poke_interval
        self.markers = markers
        self.settle = settle

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "cbp.airflow.triggers.IncrementLanded",
            {
                "home": self.home,
                "flow": self.flow,
                "inbox": self.inbox,
                "poke_interval": self.poke_interval,
                "markers": self.markers,
                "settle": self.settle,
            },
        )

    def check(self) -> dict[str, Any] | None:
        """The event to send now (and remember as announced), or None if nothing new landed."""
        seen = read_announced(self.home, self.flow, self.markers)
        feeds = landed_feeds(self.home, self.flow)
        waiting = inbox_files(
            self.inbox, self.settle
        )  # complete files only: one still being written is announced once settled
        new_files = [f for f in waiting if f not in seen["inbox"]]
        if feeds <= seen["feeds"] and not new_files:
            return None
        write_announced(self.home, self.flow, {"feeds": max(feeds, seen["feeds"]), "inbox": waiting}, self.markers)
        return {
            "flow": self.flow,
            "feeds": feeds,
            "new_feeds": max(0, feeds - seen["feeds"]),
            "inbox_files": [shown_name(f) for f in new_files],
        }  # undecodable names and control characters as escapes

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            event = await asyncio.get_running_loop().run_in_executor(None, self.check)
            if event is not None:
                self.log.info("new increments on %s in %s: %s", self.flow, self.home, event)
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.poke_interval)
