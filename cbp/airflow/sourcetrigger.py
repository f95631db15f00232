"""An Airflow event trigger that fires when a source flow's Delta table gains a version cbp has not landed.

The DAG of a pipeline (:func:`cbp.airflow.dagfactory.pipeline_dag`) watches each flow declared
``source: {delta: URI}`` with :class:`SourceVersionAdded` instead of the inbox watcher: the
table's owner commits (an append, a MERGE, a DELETE), the trigger sees the table's newest version
above the one the home landed last, and the DAG's run task (``cbp run``, which syncs first) lands
it and runs the epochs. The version announced is kept beside the other announcement markers
(``<markers>/announced/<flow>.source.json``), so a restarted trigger does not fire twice for one
version.

Example (a home at ``/srv/state/orders`` whose flow ``orders`` reads the Delta table ``/data/orders``)::

    t = SourceVersionAdded("/srv/state/orders", "orders", "/data/orders")
    t.check()  # what the trigger would announce now, or None
    # {'flow': 'orders', 'table': '/data/orders', 'version': 12, 'landed': 10}
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseEventTrigger, TriggerEvent

__all__ = ["SourceVersionAdded", "landed_source_version"]


def landed_source_version(home: str, flow: str) -> int | None:
    """The newest version of ``flow``'s source table landed in ``home`` (None before the first sync)."""
    from ..controller.sources import parse_feed_id
    from ..storage import LAYOUT, Home

    h = Home(home)
    snap = h.read_controller()
    n = int(snap["flows"][flow]["feeds"]) if snap is not None and flow in snap.get("flows", {}) else 0
    while n > 0:
        entry = h.read_json(LAYOUT.feed_entry(flow, n))
        got = parse_feed_id(entry.get("id")) if entry else None
        if got is not None:
            return got[1]
        n -= 1
    return None


def _marker(home: str, flow: str, markers: str | None) -> str:
    if markers is None:
        if "://" in home and not home.startswith("file://"):
            raise ValueError(f"the announcement markers of {home} need a local directory (markers=...)")
        markers = os.path.join(home, "_airflow")
    return os.path.join(markers, "announced", f"{flow}.source.json")


class SourceVersionAdded(BaseEventTrigger):
    """Fires once per batch of new versions of ``flow``'s source table ``uri``; see the module docstring."""

    def __init__(self, home: str, flow: str, uri: str, poke_interval: float = 5.0, markers: str | None = None) -> None:
        super().__init__()
        self.home, self.flow, self.uri, self.poke_interval, self.markers = home, flow, uri, poke_interval, markers

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            "cbp.airflow.sourcetrigger.SourceVersionAdded",
            {
                "home": self.home,
                "flow": self.flow,
                "uri": self.uri,
                "poke_interval": self.poke_interval,
                "markers": self.markers,
            },
        )

    def check(self) -> dict[str, Any] | None:
        """The event to send now (and remember as announced), or None if the table has no version to land."""
        from ..errors import CbpError
        from ..storage.deltasource import SourceTable

        try:
            newest = SourceTable(self.uri).version()
        except CbpError as e:  # not there (yet): the run would fail the same way; say so in the log, fire later
            self.log.warning("source table of %s: %s", self.flow, e)
            return None
        landed = landed_source_version(self.home, self.flow)
        path = _marker(self.home, self.flow, self.markers)
        try:
            with open(path, encoding="utf-8") as fh:
                announced = json.load(fh).get("version")
        except (OSError, ValueError, AttributeError):
            announced = None
        seen = max([v for v in (landed, announced) if isinstance(v, int)], default=-1)
        if newest <= seen and landed is not None:
            return None
        if landed is None and announced is not None and announced >= newest:
            return None  # announced, the run has not landed it yet
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"version": newest}, fh)
        os.replace(tmp, path)
        return {"flow": self.flow, "table": self.uri, "version": newest, "landed": landed}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        while True:
            event = await asyncio.get_running_loop().run_in_executor(None, self.check)
            if event is not None:
                self.log.info("source table %s of %s has new versions: %s", self.uri, self.flow, event)
                yield TriggerEvent(event)
                return
            await asyncio.sleep(self.poke_interval)
