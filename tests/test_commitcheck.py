"""The optimistic commit's check (cbp.controller.commitcheck): which changes made while an epoch's
job ran leave its commit alone and which refuse it. Snapshots only, no Spark."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from cbp.controller.commitcheck import Base, base_of, conflict
from cbp.controller.snapshot import Increment, Snapshot


def _planned() -> tuple[Snapshot, Base]:
    """Stage 'count' reads words 1-2 (of 1-3 pending, 4 still framed) and writes flow 'counts'."""
    st = Snapshot.new("p", {"words": True, "counts": False}, {"count": ["words"], "sink": ["counts"]})
    st.seq = 7
    for i in (1, 2, 3, 4):
        st.flows["words"].incs[i] = Increment(i, 2, 3, f"feed:{i}", i < 4, [i])
    st.flows["words"].next_inc = 5
    st.connectors["count.words"] = [1, 2, 3, 4]
    st.stages["count"].epoch, st.stages["count"].state_version = 3, 5
    st.flows["counts"].next_inc, st.flows["counts"].version = 4, 2
    return st, base_of(st, "count", {"words": 2}, {"words": 2}, ["counts"])


def _feed(st: Snapshot) -> None:
    st.flows["words"].incs[4].complete = True  # a framing key arrived: the open increment completes
    st.flows["words"].incs[5] = Increment(5, 1, 4, "feed:5", True, [5])
    st.connectors["count.words"].append(5)
    st.flows["words"].version, st.flows["words"].feeds = 4, 5


def _unfeed_read(st: Snapshot) -> None:
    del st.flows["words"].incs[2]
    st.connectors["count.words"].remove(2)


def _unfeed_unread(st: Snapshot) -> None:
    del st.flows["words"].incs[3]
    st.connectors["count.words"].remove(3)


def _redeliver(st: Snapshot) -> None:  # a rewind of an upstream stage puts increments back in front
    st.connectors["count.words"].insert(0, 9)


def _commit_stage(st: Snapshot) -> None:
    st.stages["count"].epoch, st.stages["count"].state_version = 4, 6


def _upgrade(st: Snapshot) -> None:
    st.shapes["pipeline"] = {"n": 1}


def _output(st: Snapshot) -> None:
    st.flows["counts"].next_inc = 9


def _other_stage(st: Snapshot) -> None:  # the consumer of the stage's output: not what it read
    st.stages["sink"].epoch = 8
    st.connectors["sink.counts"] = []


@pytest.mark.parametrize(
    "change,refused",
    [
        (_feed, False),
        (_unfeed_unread, False),
        (_other_stage, False),
        (_unfeed_read, True),
        (_redeliver, True),
        (_commit_stage, True),
        (_upgrade, True),
        (_output, True),
    ],
    ids=lambda v: v.__name__.strip("_") if callable(v) else str(v),
)
def test_what_refuses_the_commit(change: Callable[[Snapshot], None], refused: bool) -> None:
    st, base = _planned()
    assert conflict(base, st) is None  # nothing changed
    later = st.copy()
    change(later)
    later.seq += 1
    assert (conflict(base, later) is not None) == refused
