"""A partition's index read page by page (cbp.engine.task.indexpages) against a dict model, over many
random epochs: inserts, updates and deletes (hash collisions included), deltas, whole writes,
compactions (entries of merged files replaced), new workers that reopen it from disk, and a
page cache far smaller than the index."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cbp.engine.task import indexpages, partindex
from cbp.engine.task.indexpages import CACHE, PagedBase
from cbp.engine.task.partindex import PartitionIndex
from cbp.storage import Home


@pytest.fixture
def small_pages(monkeypatch):
    """Pages of 7 entries and a budget of a few pages: every path crosses page boundaries and evicts."""
    monkeypatch.setattr(indexpages, "PAGE", 7)
    monkeypatch.setenv("CBP_STATE_INDEX_MB", str(40 * 16 / 2**20))  # ~40 entries of pages
    partindex._INDEXES.clear()
    CACHE.pages.clear()
    CACHE.used = CACHE.held = 0
    yield
    partindex._INDEXES.clear()
    CACHE.pages.clear()
    CACHE.used = CACHE.held = 0


def _model_of(idx: PartitionIndex) -> list[tuple[int, str, int]]:
    return sorted((int(h), idx.files[int(f)], int(g)) for h, f, g in zip(*idx._all()))


def _check(idx: PartitionIndex, model: list[tuple[int, str, int]], rng: random.Random, hashes: list[int]) -> None:
    assert _model_of(idx) == model
    assert idx.live_keys == len(model) and idx.live_files == len({e[1] for e in model})
    probe = np.unique(np.array(rng.sample(hashes, 25), np.int64))
    h, f, g = idx.entries(probe)
    assert sorted((int(a), idx.files[int(b)], int(c)) for a, b, c in zip(h, f, g)) == [
        e for e in model if e[0] in set(probe.tolist())
    ]
    lo, hi = sorted(rng.sample(hashes, 2))
    assert idx.hashes_between(lo, hi).tolist() == sorted({e[0] for e in model if lo <= e[0] <= hi})
    size = rng.randint(1, 12)
    chunks = [c[0].tolist() for c in idx.chunks(size)]
    assert [x for c in chunks for x in c] == [e[0] for e in model]
    assert all(a[-1] != b[0] for a, b in zip(chunks, chunks[1:]))  # a hash's entries in one chunk
    assert all(
        len(c) >= size and len(set(c[size - 1 :])) == 1 for c in chunks[:-1]
    )  # about size: longer by one hash's entries
    assert CACHE.used + CACHE.held <= CACHE.budget or len(partindex._INDEXES) == 1


@pytest.mark.parametrize("seed", [11, 12, 13])
def test_paged_index_matches_a_dict_over_many_epochs(tmp_path, small_pages, monkeypatch, seed):
    rng = random.Random(seed)
    home = Home(str(tmp_path))
    hashes = list(range(-60, 240))
    model = sorted((rng.choice(hashes), "f0", rng.randrange(5)) for _ in range(400))
    idx = PartitionIndex(
        np.array([e[0] for e in model], np.int64),
        np.zeros(len(model), np.int32),
        np.array([e[2] for e in model], np.int32),
        ["f0"],
    )
    idx.save(home, "i/e0.parquet")
    idx = PartitionIndex.load(home, "i/e0.parquet")
    assert isinstance(idx._base, PagedBase) and idx._base.starts.size - 1 == -(-len(model) // 7)
    if seed % 2:  # fewer deltas allowed: whole writes more often
        monkeypatch.setattr(partindex, "MAX_DELTAS", 2)
    for epoch in range(1, 50):
        if rng.random() < 0.15 and len({e[1] for e in model}) > 2:  # a compaction: some files merged into one
            names = set(rng.sample(sorted({e[1] for e in model}), 2))
            moved = sorted((e[0], e[2]) for e in model if e[1] in names)
            path = f"m{epoch}"
            new = idx.without_files(names).updated(
                np.empty(0, np.int64),
                np.empty(0, np.int32),
                np.empty(0, np.int32),
                np.array([m[0] for m in moved], np.int64),
                path if moved else None,
                np.array([m[1] for m in moved], np.int32),
            )
            model = sorted([e for e in model if e[1] not in names] + [(h, path, g) for h, g in moved])
            delta = None
        else:  # an epoch: drop some live entries (as a task finds them), add new ones
            asked = rng.sample(sorted({e[0] for e in model}), min(len(model), rng.randint(0, 30)))
            found = list(zip(*idx.entries(np.unique(np.array(asked, np.int64))))) if asked else []
            drops = [t for t in found if rng.random() < 0.7]
            dropped = {(int(h), idx.files[int(f)], int(g)) for h, f, g in drops}
            path = f"f{epoch}"
            adds = sorted((rng.choice(hashes), rng.randrange(4)) for _ in range(rng.randint(0, 40)))
            model = sorted([e for e in model if e not in dropped] + [(h, path, g) for h, g in adds])
            delta = (
                np.array([d[0] for d in drops], np.int64),
                np.array([d[1] for d in drops], np.int32),
                np.array([d[2] for d in drops], np.int32),
                np.array([a[0] for a in adds], np.int64),
                path,
                np.array([a[1] for a in adds], np.int32),
            )
            new = idx.updated(*delta)
        _check(new, model, rng, hashes)
        rel = f"i/e{epoch}.parquet"
        new.save(home, rel, idx, delta)
        if rng.random() < 0.5:  # a new worker: reopened from the files, no page cached
            partindex._INDEXES.clear()
            CACHE.pages.clear()
            CACHE.used = 0
        idx = PartitionIndex.load(home, rel)
        _check(idx, model, rng, hashes)


def test_a_lookup_reads_the_pages_of_its_hashes_only(tmp_path, monkeypatch):
    """1M entries in pages of 65,536: a worker that opens the index reads its footer, and a lookup
    of 3 hashes reads at most 3 pages (of 16), not the index."""
    monkeypatch.setenv("CBP_STATE_INDEX_MB", "1024")
    home = Home(str(tmp_path))
    n = 1_000_000
    PartitionIndex(
        np.arange(n, dtype=np.int64) * 3, np.zeros(n, np.int32), np.arange(n, dtype=np.int32) // 8192, ["a"]
    ).save(home, "i/e1.parquet")
    assert pq.ParquetFile(home.path("i/e1.parquet")).metadata.num_row_groups == 16
    partindex._INDEXES.clear()
    CACHE.pages.clear()
    CACHE.used = 0
    idx = PartitionIndex.load(home, "i/e1.parquet")
    assert not CACHE.pages and idx.nbytes < 1000
    h, _, g = idx.entries(np.array([3, 150_000, 2_999_997], np.int64))
    assert h.tolist() == [3, 150_000, 2_999_997] and g.tolist() == [0, 50_000 // 8192, 999_999 // 8192]
    assert len(CACHE.pages) == 2  # hashes 3 and 150,000 share the first page
    assert idx.hashes_between(30, 60).tolist() == list(range(30, 61, 3)) and len(CACHE.pages) == 2
    assert idx.live_keys == n and idx.live_files == 1  # from the footer's counts


def test_an_index_file_of_the_earlier_release_is_read_by_pages(tmp_path, monkeypatch):
    """A whole index written before pages (row groups of up to 1M entries, no counts in the footer)."""
    monkeypatch.setattr(indexpages, "PAGE", 4)
    home = Home(str(tmp_path))
    t = pa.table(
        {
            "h": pa.array([1, 2, 2, 5, 8, 9], pa.int64()),
            "f": pa.array([0, 1, 0, 1, 1, 0], pa.int32()),
            "g": pa.array([0, 0, 1, 0, 0, 1], pa.int32()),
        }
    )
    path = home.path("i/old.parquet")
    home.make_parent(path)
    pq.write_table(
        t.replace_schema_metadata({"cbp.files": json.dumps(["a", "b", "c"]), "cbp.hash": "spark-xxhash64"}),
        path,
        filesystem=home.fs,
        row_group_size=3,
    )
    partindex._INDEXES.clear()
    idx = PartitionIndex.load(home, "i/old.parquet")
    assert isinstance(idx._base, PagedBase) and idx.live_files == 2 and idx.live_keys == 6
    assert idx.entries(np.array([2], np.int64))[1].tolist() == [1, 0]
    new = idx.updated(
        np.array([2], np.int64),
        np.array([1], np.int32),
        np.array([0], np.int32),
        np.array([3], np.int64),
        "d",
        np.array([0], np.int32),
    )
    new.save(home, "i/new.parquet")  # whole: renumbered, unused "c" gone
    partindex._INDEXES.clear()
    back = PartitionIndex.load(home, "i/new.parquet")
    assert back.files == ["a", "b", "d"] and _model_of(back) == [
        (1, "a", 0),
        (2, "a", 1),
        (3, "d", 0),
        (5, "b", 0),
        (8, "b", 0),
        (9, "a", 1),
    ]
    assert pq.ParquetFile(home.path("i/new.parquet")).metadata.num_row_groups == 2


def test_a_state_file_larger_than_the_cache_is_never_held_whole(tmp_path, monkeypatch):
    """The scan rule reads a file whole only if the worker's state cache could hold it (or it is
    small): a task's memory stays bounded by state_cache_mb whatever the partition's size."""
    from test_scan_fraction import _state

    from cbp.engine.task import bipindex

    monkeypatch.delenv("CBP_STATE_SCAN_FRACTION", raising=False)
    home, index = _state(tmp_path)  # 40 keys, 10 row groups
    r = bipindex.StateReader(home, "stages/s/state", index, cache_mb=1e-6, scan_fraction=0.0)
    assert r.rows_of(np.array([0, 12], np.int64))[0].num_rows == 2 and r.row_groups_read == 10  # small: read whole
    monkeypatch.setattr(bipindex, "WHOLE_FLOOR", 0)
    r = bipindex.StateReader(home, "stages/s/state", index, cache_mb=1e-6, scan_fraction=0.0)
    for part in np.array_split(np.arange(40, dtype=np.int64), 5):
        assert r.rows_of(part)[0].num_rows == part.size
    assert r.row_groups_read == 10 and r.cache_hits == 0 and not r._whole  # row group by row group, each once
