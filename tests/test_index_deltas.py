"""A partition's index is written as deltas on top of a whole file: an epoch writes what changed,
the chain stays short, files no index stands on are deleted, and an index read back from its
files (a new worker) is the index the tasks kept in memory: the live keys of the state table."""

from __future__ import annotations

import os
import random

from deltalake import DeltaTable
from test_model import KV, KV_MODULE

import cbp
from cbp.engine.task import bipindex
from cbp.engine.task.bipindex import MAX_DELTAS, PartitionIndex, latest_rows
from cbp.storage import Home


def _index_files(home: str) -> dict[str, list[str]]:
    base = os.path.join(home, "stages", "kv", "index")
    return {p: sorted(os.listdir(os.path.join(base, p))) for p in sorted(os.listdir(base))}


def test_index_deltas_follow_the_change(spark, make_pipeline, tmp_path):
    rng = random.Random(5)
    keys = [f"k{i}" for i in range(4000)]
    model: dict[str, int] = {}
    home = str(tmp_path / "h")
    p = cbp.Pipeline(
        make_pipeline(KV, KV_MODULE), home=home, max_state_files=1000
    )  # no state compaction: only the index is tested
    p.feed("ops", [{"k": k, "v": i} for i, k in enumerate(keys)])
    p.run()
    model.update({k: i for i, k in enumerate(keys)})
    longest = 0
    for step in range(24):
        ops = [{"k": rng.choice(keys), "v": rng.choice([None, step, step + 1])} for _ in range(rng.randint(5, 30))]
        p.feed("ops", ops)
        p.run()
        for op in ops:
            if op["v"] is None:
                model.pop(op["k"], None)
            else:
                model[op["k"]] = op["v"]
        files = _index_files(home)
        longest = max(longest, max(len(v) for v in files.values()))
        assert all(len(v) <= MAX_DELTAS + 1 for v in files.values()), files  # replaced chains are deleted
    assert longest > 2  # deltas were written (and a chain was written whole again: at most MAX_DELTAS + 1 files)
    assert {r["k"]: r["v"] for r in p.state("kv")} == model

    # read back from the files alone, as a new worker does: the live keys of the state table
    bipindex._INDEXES.clear()
    h = Home(home)
    rows = latest_rows(DeltaTable(os.path.join(home, "stages", "kv", "state")).to_pyarrow_table())
    for part, names in _index_files(home).items():
        newest = max(names)  # e<epoch>-...: the newest file is the partition's index
        idx = PartitionIndex.load(h, f"stages/kv/index/{part}/{newest}")
        assert len(idx.chain) == len(names) and set(idx.chain) == {f"stages/kv/index/{part}/{n}" for n in names}
        live = rows.filter(rows["_part"].to_numpy() == int(part.split("=")[1]))
        assert sorted(idx.h.tolist()) == sorted(live["_h"].to_pylist())
        assert all(idx.files[f] for f in set(idx.f.tolist()))
