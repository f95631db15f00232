"""A partition's index against a list of entries, over random epochs: drops (hash collisions
included), adds, deltas and whole writes, read back from disk or kept in memory."""

from __future__ import annotations

import random

import numpy as np
import pytest

from cbp.engine.task import partindex
from cbp.engine.task.partindex import PartitionIndex
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
    idx = PartitionIndex(
        np.array([e[0] for e in model], np.int64),
        np.zeros(len(model), np.int32),
        np.array([e[2] for e in model], np.int32),
        ["f0"],
    )
    idx.save(home, "i/e0.parquet")
    idx = PartitionIndex.load(home, "i/e0.parquet")
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
        delta = (
            np.array([d[0] for d in drops], np.int64),
            np.array([d[1] for d in drops], np.int32),
            np.array([d[2] for d in drops], np.int32),
            np.array([a[0] for a in adds], np.int64),
            path,
            np.array([a[1] for a in adds], np.int32),
        )
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
        idx = PartitionIndex.load(home, new_rel)
        assert _as_model(idx) == model
        assert len(idx.chain) <= partindex.MAX_DELTAS + 1


def test_an_update_does_not_copy_the_index():
    """An epoch's update costs what changed: the new index shares the old one's arrays."""
    n = 1_000_000
    idx = PartitionIndex(
        np.arange(n, dtype=np.int64) * 2, np.zeros(n, np.int32), np.arange(n, dtype=np.int32) // 8192, ["a"]
    )
    new = idx.updated(
        np.array([10], np.int64),
        np.array([0], np.int32),
        np.array([0], np.int32),
        np.array([11, 12], np.int64),
        "b",
        np.array([0, 0], np.int32),
    )
    assert new._base is idx._base and new._dead.size == 1 and new._oh.size == 2
    assert new.live_keys == n + 1 and idx.live_keys == n
    h, f, _ = new.entries(np.array([10, 11, 12], np.int64))
    assert sorted(zip(h.tolist(), f.tolist())) == [(11, 1), (12, 0), (12, 1)]


def _write(home: Home, rel: str, table, meta: dict) -> None:
    import pyarrow.parquet as pq

    path = home.path(rel)
    home.make_parent(path)
    pq.write_table(table.replace_schema_metadata(meta), path, filesystem=home.fs)


def test_deltas_of_the_earlier_release_are_replayed_as_written(tmp_path):
    """Before file ids were kept, each update forgot the files no entry pointed to and renumbered
    the rest: a chain written then still reads back right (here: after the first delta file "b" is
    unused, so "c" is id 1 for the second delta)."""
    import json

    import pyarrow as pa

    home = Home(str(tmp_path))
    whole = pa.table(
        {
            "h": pa.array([1, 2, 3], pa.int64()),
            "f": pa.array([0, 1, 2], pa.int32()),
            "g": pa.array([0, 0, 0], pa.int32()),
        }
    )
    _write(home, "i/e1.parquet", whole, {"cbp.files": json.dumps(["a", "b", "c"]), "cbp.hash": "spark-xxhash64"})

    def delta(drop, add_h):
        return pa.table(
            {
                "add": pa.array([False, True]),
                "h": pa.array([drop[0], add_h], pa.int64()),
                "f": pa.array([drop[1], 0], pa.int32()),
                "g": pa.array([0, 0], pa.int32()),
            }
        )

    _write(
        home, "i/e2.parquet", delta((2, 1), 2), {"cbp.kind": "delta", "cbp.parent": "i/e1.parquet", "cbp.add_file": "d"}
    )
    _write(
        home, "i/e3.parquet", delta((3, 1), 3), {"cbp.kind": "delta", "cbp.parent": "i/e2.parquet", "cbp.add_file": "e"}
    )
    partindex._INDEXES.clear()
    idx = PartitionIndex.load(home, "i/e3.parquet")
    assert _as_model(idx) == [(1, "a", 0), (2, "d", 0), (3, "e", 0)]
    assert idx.chain == ["i/e1.parquet", "i/e2.parquet", "i/e3.parquet"]
    # and a delta this release writes on top of it reads back the same
    new = idx.updated(
        np.array([1], np.int64),
        np.array([0], np.int32),
        np.array([0], np.int32),
        np.array([1], np.int64),
        "f",
        np.array([0], np.int32),
    )
    new.save(
        home,
        "i/e4.parquet",
        idx,
        (
            np.array([1], np.int64),
            np.array([0], np.int32),
            np.array([0], np.int32),
            np.array([1], np.int64),
            "f",
            np.array([0], np.int32),
        ),
    )
    partindex._INDEXES.clear()
    assert _as_model(PartitionIndex.load(home, "i/e4.parquet")) == [(1, "f", 0), (2, "d", 0), (3, "e", 0)]
