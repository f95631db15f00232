"""The state scan rule's knob (cbp.engine.task.bipindex.SCAN_FRACTION): 0 scans, above 1 never does,
the environment variable and the plan's value override the constant, and a file read whole is
read once per task even when the worker's cache cannot hold it."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from cbp.engine.task import bipindex
from cbp.engine.task.bipindex import PartitionIndex, StateMeta, StateReader
from cbp.engine.task.statepart import DirectPartition
from cbp.spec.schema import RecordSchema
from cbp.storage import Home


def _plan(tmp_path, epoch, parts=None, scan_fraction=None, cache_mb=0.0):
    schema = RecordSchema.parse({"w": "string", "n": "int"})
    return SimpleNamespace(
        home=Home(str(tmp_path)),
        stage=SimpleNamespace(name="s", state_schema=schema, row_key=()),
        epoch=epoch,
        state_rel="stages/s/state",
        row_group=4,
        cache_mb=cache_mb,
        scan_fraction=scan_fraction,
        max_files=8,
        parts=parts or {},
        scan_choice={},
        mode="direct",
    )


def _state(tmp_path):
    """One state file of 40 keys (hashes 0..39) in 10 row groups of 4 rows; its index."""
    part = DirectPartition(_plan(tmp_path, 1), 0)
    for h in range(40):
        part.update(f'"k{h}"', h, None, [{"w": f"k{h}", "n": h}])
    index, adds, _ = part.finish({})
    return Home(str(tmp_path)), PartitionIndex.load(Home(str(tmp_path)), index)


def _read(home, index, hashes, chunks=1, **kw):
    r = StateReader(home, "stages/s/state", index, cache_mb=0.001, **kw)  # a cache too small to keep the file
    n = 0
    for part in np.array_split(np.array(hashes, np.int64), chunks):
        n += r.rows_of(part)[0].num_rows
    assert n == len(hashes)
    return r


def test_scan_fraction_forces_each_side(tmp_path, monkeypatch):
    monkeypatch.delenv("CBP_STATE_SCAN_FRACTION", raising=False)
    home, index = _state(tmp_path)
    assert _read(home, index, [0, 12], scan_fraction=2.0).row_groups_read == 2  # through the index: 2 of 10
    assert _read(home, index, [0, 12], scan_fraction=0.0).row_groups_read == 10  # scan: the whole file
    # the default: 2 of 10 row groups is below SCAN_FRACTION, 10 of 10 above
    assert _read(home, index, [0, 12]).row_groups_read == 2
    assert _read(home, index, list(range(0, 40, 4))).row_groups_read == 10
    # the environment variable, read when a reader is made
    monkeypatch.setenv("CBP_STATE_SCAN_FRACTION", "0")
    assert bipindex.scan_fraction() == 0.0 and _read(home, index, [0, 12]).row_groups_read == 10
    assert bipindex.scan_fraction(1.5) == 1.5 and _read(home, index, [0, 12], scan_fraction=1.5).row_groups_read == 2


def test_a_file_read_whole_is_read_once_per_task(tmp_path, monkeypatch):
    monkeypatch.delenv("CBP_STATE_SCAN_FRACTION", raising=False)
    home, index = _state(tmp_path)
    r = _read(home, index, list(range(40)), chunks=5, scan_fraction=0.0)  # 5 lookups, the file is too big to cache
    assert r.row_groups_read == 10 and r.files_opened == 1 and r.cache_lookups == 5 and r.cache_hits == 4


def test_the_plan_carries_the_fraction_to_the_partition_reader(tmp_path):
    _, index = _state(tmp_path)
    meta = StateMeta(files=[], index=None)
    part = DirectPartition(_plan(tmp_path, 2, {0: meta}, scan_fraction=0.25), 0)
    assert part.reader.scan_fraction == 0.25


def test_the_driver_chooses_index_or_scan_per_partition_and_epoch(spark, tmp_path, monkeypatch):
    """A small increment reads only its keys' row groups; one touching every key reads each state
    file whole, once (no switch half-way, which read row groups and then the whole file)."""
    from conftest import FLOWS

    import cbp

    monkeypatch.delenv("CBP_STATE_SCAN_FRACTION", raising=False)
    urls = [{"url": f"http://x/{i}"} for i in range(400)]
    reads = {}
    for name, fraction in (("driver", None), ("mid-stream", 0.9)):
        p = cbp.Pipeline(
            FLOWS / "url_count.yaml",
            str(tmp_path / name),
            spark=spark,
            state_row_group=4,
            state_cache_mb=0.001,
            state_scan_fraction=fraction,
        )
        p.feed("urls", urls)
        p.run()  # 400 keys: 100 row groups of 4 rows over the 4 partitions
        p.feed("urls", urls[:2])
        (small,) = p.run()
        assert 1 <= small.row_groups_read <= 2 and small.keys_read == 2
        p.feed("urls", urls)
        key = "spark.sql.execution.arrow.maxRecordsPerBatch"
        before = spark.conf.get(key)
        spark.conf.set(key, "8")  # the task's keys arrive in many chunks, as in a large epoch
        try:
            (full,) = p.run()
        finally:
            spark.conf.set(key, before)
        assert full.keys_read == 400
        reads[name] = full.row_groups_read
    # the driver's choice reads each file once (+ the 2-row files of epoch 2); deciding chunk by chunk
    # reads row groups one by one, then the whole file
    assert 100 <= reads["driver"] <= 104 < reads["mid-stream"]


def test_a_file_read_whole_first_evicts_what_the_budget_cannot_hold_beside_it(tmp_path, monkeypatch):
    """The worker holds at most about its cache's budget plus the file being read, not the full
    cache beside it: older files are evicted before the read, least recently used first."""
    monkeypatch.delenv("CBP_STATE_SCAN_FRACTION", raising=False)
    home, index = _state(tmp_path)
    size = bipindex._decoded_bytes(bipindex.pq.ParquetFile(home.path(f"stages/s/state/{index.files[0]}")))
    r = StateReader(home, "stages/s/state", index, scan_fraction=0.0)
    cache = r.cache  # the worker's cache, which the reader's making has set to the default budget
    cache.files.clear()
    cache.used = 0
    old = bipindex._CachedFile(
        bipindex.pa.table({"x": np.zeros(size // 8 + 1, np.int64)}), np.zeros(0, np.int64), np.zeros(1, np.int64)
    )
    cache.put("old", old)
    cache.budget = old.nbytes + size // 2  # holds the old file, or the new one, not both
    held = []
    real = bipindex.pq.ParquetFile.read
    monkeypatch.setattr(
        bipindex.pq.ParquetFile, "read", lambda self, *a, **k: held.append(cache.used) or real(self, *a, **k)
    )
    assert r.rows_of(np.arange(40, dtype=np.int64))[0].num_rows == 40
    assert held == [0] and "old" not in cache.files  # evicted before the read, not after
    assert r.cache_hits == 0 and r.row_groups_read == 10


def _write(tmp_path, epoch, row_group, values, parts=None):
    """One epoch of a direct partition with row groups of ``row_group`` rows: key ``k<i>`` (hash
    ``i * 1000``) gets ``{"w": ..., "n": values[i]}``; its index, adds and the partition."""
    plan = _plan(tmp_path, epoch, parts)
    plan.row_group = row_group
    part = DirectPartition(plan, 0)
    hashes = np.array(sorted(values), np.int64) * 1000
    found = part.lookup(hashes)
    for i in sorted(values):
        part.update(f'"k{i}"', i * 1000, found.get(f'"k{i}"', (0, None))[1], [{"w": f"k{i}", "n": values[i]}])
    index, adds, _ = part.finish({})
    return index, adds


def test_a_lookup_decodes_its_keys_row_groups_of_1024_rows_without_dictionaries(tmp_path, monkeypatch):
    """A lookup decodes whole row groups (pyarrow reads no less): 3 keys among 5,000 cost at most
    3 x 1,024 rows (8,192 before the tenth round: the whole file), and no state column is
    dictionary-encoded (a zstd dictionary chunk costs more to open than 1,024 rows to decode)."""
    monkeypatch.delenv("CBP_STATE_SCAN_FRACTION", raising=False)
    index, adds = _write(tmp_path, 1, bipindex.ROW_GROUP, {i: i for i in range(5000)})
    home = Home(str(tmp_path))
    md = bipindex.pq.ParquetFile(home.path(f"stages/s/state/{adds[0]['path']}")).metadata
    assert md.num_row_groups == 5 and md.row_group(0).num_rows == 1024
    used = {
        e for g in range(md.num_row_groups) for c in range(md.num_columns) for e in md.row_group(g).column(c).encodings
    }
    assert not used & {"PLAIN_DICTIONARY", "RLE_DICTIONARY"}, used
    r = StateReader(home, "stages/s/state", PartitionIndex.load(home, index), cache_mb=0)
    rows = r.rows_of(np.array([10, 2500, 4990], np.int64) * 1000)[0]
    assert sorted(rows["n"].to_pylist()) == [10, 2500, 4990]
    assert r.row_groups_read == 3 and r.rows_decoded == 3 * 1024 - 1024 + 5000 - 4096  # the last row group: 904


def test_files_an_older_cbp_wrote_are_read_beside_new_ones(tmp_path, monkeypatch):
    """A home whose state files have row groups of 8,192 rows and dictionaries (as cbp wrote them
    before the tenth round) keeps them: the next epochs look keys up in them and write new files
    in the new layout, and every key's latest row is the model's."""
    from cbp.engine.task import statepart

    monkeypatch.delenv("CBP_STATE_SCAN_FRACTION", raising=False)
    monkeypatch.setattr(statepart, "STATE_DICTIONARY", True)
    model = {i: i % 7 for i in range(3000)}
    index, adds = _write(tmp_path, 1, 8192, model)
    home = Home(str(tmp_path))
    old = bipindex.pq.ParquetFile(home.path(f"stages/s/state/{adds[0]['path']}")).metadata
    assert old.num_row_groups == 1 and "RLE_DICTIONARY" in old.row_group(0).column(5).encodings  # n: 7 values
    monkeypatch.setattr(statepart, "STATE_DICTIONARY", False)
    files = list(adds)
    for epoch, change in ((2, {i: -i for i in range(0, 3000, 3)}), (3, {i: i for i in range(1, 3600, 5)})):
        index, adds = _write(tmp_path, epoch, bipindex.ROW_GROUP, change, {0: StateMeta(files=files, index=index)})
        files += adds
        model.update(change)
    new = bipindex.pq.ParquetFile(home.path(f"stages/s/state/{files[-1]['path']}")).metadata
    assert new.row_group(0).num_rows == min(1024, new.num_rows)
    r = StateReader(home, "stages/s/state", PartitionIndex.load(home, index), cache_mb=0)
    rows = bipindex.latest_rows(r.rows_of(np.array(sorted(model), np.int64) * 1000)[0])
    assert dict(zip([int(w[1:]) for w in rows["w"].to_pylist()], rows["n"].to_pylist())) == model
