"""Optimistic commits of stage epochs: what an epoch's plan read, and whether it still holds.

A stage epoch holds the home's mutation lock only to *plan* (read the newest snapshot, take the
Runnable's decision, write the intention) and to *commit*; its Spark job runs without it (the
runner lock, one runner per home, stays held), so feeds, syncs, ``cbp status`` and ``cbp output``
never wait for a job. The commit re-reads the newest snapshot and applies the epoch to it, after
:func:`conflict` compared it with the :class:`Base` the plan read:

- changes that leave what the epoch read alone are kept: a feed or a sync appends increments at
  the tail of a connector (complete or still framed), so what landed during the job is pending for
  the next epoch, neither lost nor counted twice, and no garbage collection drops it;
- a change to what the epoch read is a conflict: an upgrade (the recorded shapes), a rewind or
  another commit to the stage (its epoch, state version, index, bindings or runnable state), a
  withdrawn or re-delivered input (the heads of its input connectors, the increments it read), a
  change to one of its output flows. The commit is refused before anything is written: the job's
  files are deleted with its intention (:meth:`.intentions.Intentions.abandon_quietly`; files left
  by a kill are deleted when the next run drops or finishes the intention) and the scheduler plans
  the epoch again on the new snapshot.

The runner lock keeps ``cbp upgrade``, ``cbp rewind`` and a second runner out while a run holds
it; the check is what keeps a commit exact when that lock was lost (a lease that expired while the
runner stalled) and when a withdrawal (``cbp unfeed``) takes an increment a running epoch reads.

Reads: the plan's snapshot and the newest one (:class:`~.snapshot.Snapshot`). Writes: nothing.

    >>> from cbp.controller.snapshot import Snapshot
    >>> st = Snapshot.new("p", {"words": True}, {"count": ["words"]})
    >>> st.connectors["count.words"] = [1]
    >>> b = base_of(st, "count", {"words": 1}, {"words": 1}, [])
    >>> later = st.copy(); later.seq += 1; later.connectors["count.words"].append(2)  # a feed landed meanwhile
    >>> conflict(b, later) is None
    True
    >>> later.stages["count"].epoch = 1  # another commit to the stage
    >>> conflict(b, later)
    "stage 'count' was changed (epoch, state, index or bindings)"
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from ..engine.driver.deltaread import StateSource
from ..engine.task.plan import TaskPlan
from .records import Decision
from .snapshot import Increment, Sched, Snapshot, StageState, conn

__all__ = ["Base", "Conflict", "OutputState", "Planned", "base_of", "conflict"]


@dataclass(frozen=True)
class OutputState:
    """What an output flow's epochs extend: its next increment id, table version, framing state
    and the increment still being framed (its id and record), if any."""

    next_inc: int
    version: int | None
    frame_state: Any
    open: tuple[int, Increment] | None


@dataclass(frozen=True)
class Base:
    """What an epoch's plan read of the snapshot, to compare with the one it commits on."""

    seq: int
    stage: str
    stage_state: StageState  # a copy of the stage's record: epoch, state version, index, bindings, runnable state
    heads: dict[str, list[int]]  # input connector -> the ids at its head the epoch reads or removes
    read: dict[str, Increment | None]  # "<flow>/<inc>" -> a copy of each increment it reads
    outputs: dict[str, OutputState | None]  # output flow -> what its epochs extend (None: not in the snapshot)
    shapes: dict[str, Any]  # what the stored data was written with (an upgrade changes it)


@dataclass(frozen=True)
class Planned:
    """A stage epoch planned under the lock, for its job to run and its commit to check and apply."""

    stage: str
    epoch: int
    decision: Decision
    inputs: dict[str, list[int]]  # input flow -> the increment ids it reads
    input_files: dict[int, list[str]]  # input index -> the files of those increments
    out_incs: dict[str, int]  # output flow -> the increment id it writes
    plan: TaskPlan
    state_uris: StateSource | None
    base: Base
    sched: Sched | None  # the scheduler's position after choosing this epoch, committed with it (None: unchanged)
    started: float  # time.perf_counter() when it was planned


@dataclass(frozen=True)
class Conflict:
    """A commit refused: what changed under the epoch while its job ran."""

    stage: str
    epoch: int
    reason: str


def _outputs(st: Snapshot, outputs: list[str]) -> dict[str, OutputState | None]:
    out: dict[str, OutputState | None] = {}
    for f in outputs:
        fs = st.flows.get(f)
        if fs is None:
            out[f] = None
            continue
        i = fs.open_increment()
        open_inc = (i, copy.deepcopy(fs.incs[i])) if i is not None else None
        out[f] = OutputState(fs.next_inc, fs.version, copy.deepcopy(fs.frame_state), open_inc)
    return out


def base_of(st: Snapshot, stage: str, reads: dict[str, int], removes: dict[str, int], outputs: list[str]) -> Base:
    """What a plan of ``stage`` reading and removing the oldest ``reads``/``removes`` increments of
    its inputs reads of ``st`` (taken before it allocates output increments)."""
    heads: dict[str, list[int]] = {}
    read: dict[str, Increment | None] = {}
    for flow in sorted(set(reads) | set(removes)):
        q = st.connectors.get(conn(stage, flow), [])
        heads[flow] = list(q[: max(reads.get(flow, 0), removes.get(flow, 0))])
        for i in q[: reads.get(flow, 0)]:
            m = st.flows[flow].incs.get(i)
            read[f"{flow}/{i}"] = copy.deepcopy(m)
    return Base(
        seq=st.seq,
        stage=stage,
        stage_state=copy.deepcopy(st.stages[stage]),
        heads=heads,
        read=read,
        outputs=_outputs(st, outputs),
        shapes=dict(st.shapes),
    )


def conflict(base: Base, st: Snapshot) -> str | None:
    """Why the epoch planned on ``base`` cannot commit on ``st`` (None: it can, on top of ``st``)."""
    if st.seq == base.seq:
        return None
    if st.shapes != base.shapes:
        return "the pipeline was upgraded"
    sst = st.stages.get(base.stage)
    if sst is None or sst != base.stage_state:
        return f"stage '{base.stage}' was changed (epoch, state, index or bindings)"
    for flow, ids in base.heads.items():
        if st.connectors.get(conn(base.stage, flow), [])[: len(ids)] != ids:
            return f"its input '{flow}' was changed (increments withdrawn or delivered again)"
    for key, rec in base.read.items():
        flow, _, inc = key.rpartition("/")
        m = st.flows[flow].incs.get(int(inc)) if flow in st.flows else None
        if m != rec:
            return f"increment {inc} of '{flow}', which it read, was changed"
    if _outputs(st, list(base.outputs)) != base.outputs:
        return f"its output flows {', '.join(repr(f) for f in base.outputs)} were changed"
    return None
