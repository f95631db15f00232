"""Garbage collection: increments no connector references leave the snapshot, as one durable change.

Dropped increments leave the snapshot for the history (a collected-increment entry each, still
readable through ``output`` by Delta time travel until the table is vacuumed); the flow table's
commit removes their files. The complete increments of a flow nobody reads leave the snapshot
too, but stay in its table (their entries have no version).

Reads: ``live.spec`` and ``live.st`` (flows, increments, connectors), the flow tables' files.
Writes: through the journal, one change: the flow tables' commits, the snapshot updates
(increments dropped, the garbage-collection run) and the collected-increment entries.
"""

from __future__ import annotations

import copy

from ..storage import INC, LAYOUT, Home
from .change import Change, Commit, FlowVersion, GcRun, IncrementsDropped
from .entries import CollectedEntry
from .journal import Journal
from .live import Live

__all__ = ["collect_garbage"]


def collect_garbage(home: Home, live: Live, journal: Journal) -> list[tuple[str, int]]:
    """Drop increments no connector references from flows that have readers (one durable change);
    return the ``(flow, increment)`` pairs dropped.

    Example::

        collect_garbage(parts.home, parts.live, parts.journal)  # [('urls', 1), ('urls', 2)]
    """
    dropped: list[tuple[str, int]] = []
    commits: list[Commit] = []
    updates: list[IncrementsDropped] = []
    entries: list[tuple[str, CollectedEntry]] = []
    st = live.st
    run = st.gc_runs + 1
    for flow, fs in st.flows.items():
        consumers = live.spec.flows[flow].consumers if flow in live.spec.flows else ()
        if fs.version is None:
            continue
        if not consumers:  # nobody reads it: its increments stay in the table, not in the snapshot
            done = sorted(i for i, m in fs.incs.items() if m.complete)
            entries += [
                (LAYOUT.collected_entry(flow, i), CollectedEntry(i, None, copy.deepcopy(fs.incs[i]))) for i in done
            ]
            dropped += [(flow, i) for i in done]
            updates += [IncrementsDropped(flow, tuple(done))] if done else []
            continue
        referenced = {i for c in consumers for i in st.connector(c, flow)}
        dead = sorted(i for i, m in fs.incs.items() if m.complete and i not in referenced)
        if not dead:
            continue
        rel = LAYOUT.flow(flow)
        removes = [f for f in home.table_files(rel, fs.version) if int(f["partition"]) in set(dead)]
        commits.append(Commit(rel, INC, (), tuple(removes), "cbp:gc", run, (FlowVersion(flow),)))
        for i in dead:  # meta: for a rewind
            entries.append((LAYOUT.collected_entry(flow, i), CollectedEntry(i, fs.version, copy.deepcopy(fs.incs[i]))))
            dropped.append((flow, i))
        updates.append(IncrementsDropped(flow, tuple(dead)))
    if dropped:
        counted = (GcRun(run),) if commits else ()
        with journal.transaction():
            change = Change("gc", f"garbage collection {run}", tuple(commits), (*updates, *counted), tuple(entries))
            journal.commit(change)
    return dropped
