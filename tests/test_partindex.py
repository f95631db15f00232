"""A partition's index against a list of entries, over random epochs: drops (hash collisions
included), adds, deltas and whole writes, read back from disk or kept in memory."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cbp.engine import partindex
from cbp.engine.partindex import PartitionIndex
from cbp.storage import Home


def _as_model(idx: PartitionIndex) -> list[tuple[int, str, int]]:
    return sorted((int(h), idx.files[int(f)], int(g)) for h, f, g in zip(idx.h, idx.f, idx.g))


def _entries(idx: PartitionIndex, hashes: list[int]) -> list[tuple[int, str, int]]:
    h, f, g = idx.entries(np.unique(np.array(hashes, np.int64)))
    return sorted((int(a), idx.files[int(b)], int(c)) for a, b, c in zip(h, f, g))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_index_updates_match_a_list_of_entries(tmp_path, seed):
    rng = random.Random(seed)
    home = Home(str(tmp_path))
    hashes = list(range(-40, 160))  # few hashes: collisions (several keys per hash) are common
    model = [(rng.choice(hashes), "f0", rng.randrange(4)) for _ in range(300)]
    model.sort()
    idx = PartitionIndex(np.array([e[0] for e in model], np.int64), np.zeros(len(model), np.int32),
                         np.array([e[2] for e in model], np.int32), ["f0"])
    idx.save(home, "i/e0.parquet")
    idx = PartitionIndex.load(home, "i/e0.parquet")
    rel = "i/e0.parquet"
    for epoch in range(1, 40):
        # drop some live entries, by (hash, file id, row group) as a task reports them
        live_h = sorted({e[0] for e in model})
        asked = rng.sample(live_h, min(len(live_h), rng.randint(0, 25)))
        found = list(zip(*idx.entries(np.unique(np.array(asked, np.int64))))) if asked else []
        drops = [t for t in found if rng.random() < 0.7]
        dropped = {(int(h), idx.files[int(f)], int(g)) for h, f, g in drops}
        model = [e for e in model if e not in dropped]
        path = f"f{epoch}"
        adds = sorted((rng.choice(hashes), rng.randrange(3)) for _ in range(rng.randint(0, 30)))
        model = sorted(model + [(h, path, g) for h, g in adds])
        delta = (np.array([d[0] for d in drops], np.int64), np.array([d[1] for d in drops], np.int32),
                 np.array([d[2] for d in drops], np.int32), np.array([a[0] for a in adds], np.int64),
                 path, np.array([a[1] for a in adds], np.int32))
        new = idx.updated(*delta)
        assert _as_model(new) == model
        assert new.live_keys == len(model) and new.live_files == len({e[1] for e in model})
        probe = rng.sample(hashes, 30)
        assert _entries(new, probe) == sorted(e for e in model if e[0] in probe)
        new_rel = f"i/e{epoch}.parquet"
        parent_chain = list(idx.chain)
        garbage = new.save(home, new_rel, idx, delta)
        chain = PartitionIndex.load(home, new_rel).chain
        assert (garbage, chain) in [([], parent_chain + [new_rel]), (parent_chain, [new_rel])]  # a delta, or whole
        if rng.random() < 0.5:  # a new worker: the chain replayed from disk
            partindex._INDEXES.clear()
        idx, rel = PartitionIndex.load(home, new_rel), new_rel
        assert _as_model(idx) == model
        assert len(idx.chain) <= partindex.MAX_DELTAS + 1


def test_an_update_does_not_copy_the_index():
    """An epoch's update costs what changed: the new index shares the old one's arrays."""
    n = 1_000_000
    idx = PartitionIndex(np.arange(n, dtype=np.int64) * 2, np.zeros(n, np.int32), np.arange(n, dtype=np.int32) // 8192, ["a"])
    new = idx.updated(np.array([10], np.int64), np.array([0], np.int32), np.array([0], np.int32),
                      np.array([11, 12], np.int64), "b", np.array([0, 0], np.int32))
    assert new._bh is idx._bh and new._dead.size == 1 and new._oh.size == 2
    assert new.live_keys == n + 1 and idx.live_keys == n
    h, f, _ = new.entries(np.array([10, 11, 12], np.int64))
    assert sorted(zip(h.tolist(), f.tolist())) == [(11, 1), (12, 0), (12, 1)]
