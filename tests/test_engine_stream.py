"""Streaming grouped tasks: key groups that span Arrow batches, state read chunk by chunk and
written row group by row group, keys with several state rows across row groups, inner and outer
grouping, compaction; and what a task reports about the state it read."""

from __future__ import annotations

import random
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from cbp.engine.task.bipindex import PartitionIndex, StateMeta
from cbp.engine.task.statepart import DirectPartition
from cbp.pipeline import Pipeline
from cbp.spec.schema import RecordSchema
from cbp.storage import Home

PIPE = """
pipeline: stream
flows:
  words: {external: true, schema: {w: string}}
  counts: {schema: {w: string, n: int}}
stages:
  count:
    translator: MOD:count
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int, i: int}}
    outputs: [counts]
  age:
    translator: MOD:age
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, age: int}, grouping: outer}
"""
MODULE = """
def count(key, state, words, out):
    rows = list(state)
    prev = rows[0]["n"] if rows else 0
    if [r["i"] for r in rows] != list(range(min(prev, 3))) or any(r["n"] != prev for r in rows):
        raise AssertionError(f"not the latest state rows of {key}: {rows}")
    n = prev + sum(1 for _ in words)
    for i in range(min(n, 3)):  # up to 3 rows per key: a key's rows span row groups of 4
        out.state.write({"w": key, "n": n, "i": i})
    out.counts.write({"w": key, "n": n})


def age(key, state, words, out):  # outer: every stored key, every epoch; dropped after 2 epochs without input
    prev = next(state, None)
    a = 0 if sum(1 for _ in words) else (prev["age"] + 1 if prev else 0)
    if a < 2:
        out.state.write({"w": key, "age": a})
"""


@pytest.fixture
def small_batches(spark):
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    old = spark.conf.get(key)
    spark.conf.set(key, "5")  # tasks get their input 5 records at a time
    yield
    spark.conf.set(key, old)


@pytest.mark.parametrize("mode,cache_mb", [("direct", 0), ("direct", 64), ("blackbox", 0)])
def test_streamed_epochs_match_from_scratch(spark, make_pipeline, tmp_path, small_batches, mode, cache_mb):
    rng = random.Random(7)
    vocab = [f"w{i:02d}" for i in range(40)]
    p = Pipeline(
        make_pipeline(PIPE, MODULE),
        str(tmp_path / "h"),
        mode=mode,
        spark=spark,
        state_row_group=4,
        max_state_files=3,
        state_cache_mb=cache_mb,
    )
    total: Counter[str] = Counter()
    ages: dict[str, int] = {}
    for epoch in range(1, 6):
        words = [rng.choice(vocab[: 10 + 6 * epoch]) for _ in range(30)] + ["hot"] * 12  # 'hot' spans batches
        p.feed("words", [{"w": w} for w in words])
        p.run()
        inc = Counter(words)
        total.update(inc)
        ages = {w: (0 if w in inc else a + 1) for w, a in ages.items()} | {w: 0 for w in inc}
        ages = {w: a for w, a in ages.items() if a < 2}
        assert {r["w"]: r["n"] for r in p.output("counts", epoch=epoch)} == {w: total[w] for w in inc}
        rows = p.state("count")
        assert Counter(r["w"] for r in rows) == {w: min(n, 3) for w, n in total.items()}
        assert {r["w"]: r["n"] for r in rows} == dict(total)
        assert {r["w"]: r["age"] for r in p.state("age")} == ages


def _plan(tmp_path, epoch, parts=None, cache_mb=0):
    schema = RecordSchema.parse({"w": "string", "n": "int"})
    return SimpleNamespace(
        home=Home(str(tmp_path)),
        stage=SimpleNamespace(name="s", state_schema=schema, row_key=()),
        epoch=epoch,
        state_rel="stages/s/state",
        row_group=4,
        cache_mb=cache_mb,
        scan_fraction=None,
        max_files=8,
        parts=parts or {},
        scan_choice={},
        mode="direct",
    )


def _epoch(tmp_path, epoch, parts, updates, cache_mb=0):
    """One direct-mode epoch on partition 0: ``updates`` maps hash -> new records ([] drops the key)."""
    part = DirectPartition(_plan(tmp_path, epoch, parts, cache_mb), 0)
    found = part.lookup(np.array(sorted(updates), np.int64))
    for h in sorted(updates):
        hit = found.get(f'"k{h}"')
        part.update(f'"k{h}"', h, hit[1] if hit else None, updates[h])
    stats: dict = {}
    index, adds, removes = part.finish(stats)
    meta = parts.get(0, StateMeta())
    files = [f for f in meta.files if f not in removes] + adds
    return {0: StateMeta(files=files, index=index)}, stats


def test_state_reads_touch_only_the_row_groups_of_their_keys(tmp_path):
    rec = lambda h, n=1: [{"w": f"k{h}", "n": n}]  # noqa: E731
    # epoch 1: 40 keys, hashes 0..39, in row groups of 4 rows; key 3 has 3 rows (rows 3-5: row groups 0 and 1),
    # so key h > 3 is row h + 2
    parts, stats = _epoch(tmp_path, 1, {}, {h: rec(h) * (3 if h == 3 else 1) for h in range(40)})
    assert stats["state_written"] == 40 and stats["row_groups_read"] == 0
    part = DirectPartition(_plan(tmp_path, 2, parts), 0)
    found = part.lookup(np.array([12], np.int64))  # row 14: row group 3
    assert found['"k12"'][1].records == rec(12) and part.reader.row_groups_read == 1 and part.reader.files_opened == 1
    part.lookup(np.array([13], np.int64))  # the same row group: not read again
    part.lookup(np.array([30], np.int64))
    assert (part.reader.row_groups_read, part.reader.files_opened) == (2, 1)
    # epoch 2 rewrites key 3 (3 rows over two row groups -> 1 row), drops key 5, changes key 13
    parts, stats = _epoch(tmp_path, 2, parts, {3: rec(3, 2), 5: [], 13: rec(13, 7)})
    assert stats["state_read"] == 3 and stats["state_written"] == 3 and stats["row_groups_read"] == 3
    index = PartitionIndex.load(Home(str(tmp_path)), parts[0].index)
    assert np.count_nonzero(index.h == 3) == 1 and 5 not in index.h  # no stale entries of key 3, none of key 5
    part = DirectPartition(_plan(tmp_path, 3, parts), 0)
    found = part.lookup(np.array([3, 5, 13, 20], np.int64))
    assert {k: v[1].records for k, v in found.items()} == {'"k3"': rec(3, 2), '"k13"': rec(13, 7), '"k20"': rec(20)}
    assert part.reader.files_opened == 2


@pytest.mark.parametrize("budget_kb,cached", [(1024, True), (1, False)])
def test_a_written_file_is_cached_only_within_the_budget(tmp_path, budget_kb, cached):
    """A state file a task writes goes into its worker's cache when it fits the budget; when it
    does not, the writer stops holding its rows as soon as they outgrow the budget (a big epoch's
    rows are not all kept in memory for nothing), and reads go to the file."""
    from cbp.engine.task.statepart import StateWriter

    mb = budget_kb / 1024
    rec = lambda h, n=1: [{"w": f"k{h}", "n": n}]  # noqa: E731
    w = StateWriter(_plan(tmp_path / "w", 1, cache_mb=mb), 0, prefix="e1")
    for h in range(400):
        w.add(f'"k{h}"', h, {"w": f"k{h}", "n": 1})
    assert (w._written is not None) == cached  # 400 rows are ~10 kB
    w.close()
    parts, _ = _epoch(tmp_path, 1, {}, {h: rec(h) for h in range(400)}, cache_mb=mb)
    part = DirectPartition(_plan(tmp_path, 2, parts, cache_mb=mb), 0)
    found = part.lookup(np.array([7, 250], np.int64))
    assert {k: v[1].records for k, v in found.items()} == {'"k7"': rec(7), '"k250"': rec(250)}
    assert (part.reader.cache_hits > 0, part.reader.row_groups_read == 0) == (cached, cached)


@pytest.mark.parametrize("keep_tombstones", [True, False])
def test_merging_state_files_in_hash_order(tmp_path, keep_tombstones):
    """Compaction and index rebuilds merge files row group by row group, in hash order; the result is
    each key's newest rows, as a Delta reader sees them (3 keys share each hash, row groups of 4)."""
    import pyarrow.parquet as pq

    from cbp.engine.task.bipindex import latest_rows, read_partition_rows
    from cbp.engine.task.statepart import StateWriter, _merge_files

    rng = random.Random(3)
    plan = _plan(tmp_path, 1)
    files = []
    for epoch in (1, 2, 3, 4):
        plan.epoch = epoch
        w = StateWriter(plan, 0, f"e{epoch}")
        for k in sorted(rng.sample(range(60), 25 + 5 * epoch)):
            if rng.random() < 0.2:
                w.add(f'"k{k:02d}"', k // 3, None)  # a tombstone
            for i in range(0 if rng.random() < 0.2 else rng.choice([1, 2, 3])):
                w.add(f'"k{k:02d}"', k // 3, {"w": f"k{k:02d}", "n": epoch * 10 + i})
        files.append(w.close()[0])
    plan.epoch = 5
    out = StateWriter(plan, 0, "merged")
    _merge_files(plan, files, out, keep_tombstones=keep_tombstones)
    add, h, g = out.close()
    home = plan.home
    got = pq.read_table(home.path(f"{plan.state_rel}/{add['path']}"))
    want = latest_rows(read_partition_rows(home, plan.state_rel, files), keep_tombstones=keep_tombstones)
    cols = ["_key", "_h", "_epoch", "_alive", "w", "n"]
    rows = lambda t: sorted(tuple(r.values()) for r in t.select(cols).to_pylist())  # noqa: E731
    assert rows(got) == rows(want) and any(r[3] is False for r in rows(got)) == keep_tombstones
    assert got["_h"].to_pylist() == sorted(got["_h"].to_pylist())
    assert list(h) == [r["_h"] for r in got.to_pylist() if r["_alive"]] and list(g) == [
        i // 4 for i, r in enumerate(got.to_pylist()) if r["_alive"]
    ]
