"""Compaction of a flow's out-of-reach increments (cbp.controller.compaction): URLCount's ``counts``
(nobody reads it) keeps a bounded number of files, its table holds what a from-scratch computation
(pandas) says, ``output`` of the epochs within reach is unchanged, a rewind across a compaction puts
the files of its moment back, and a crash at each step of a
compaction (emulated in-process: the step raises, the Pipeline object is dropped, a new one
recovers) loses nothing and duplicates nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import pytest
from deltalake import DeltaTable

import cbp
from cbp import faults
from cbp.controller.retention import horizon

ROOT = Path(__file__).resolve().parents[1]
YAML = ROOT / "flows" / "url_count.yaml"


def _feed(k: int) -> list[dict[str, str]]:
    return [{"url": f"http://a/{k}"}, {"url": f"http://a/{k // 3}"}, {"url": f"http://a/{k % 4}"}]


def _round(p: cbp.Pipeline, k: int, fed: list[tuple[int, str]]) -> None:
    recs = _feed(k)
    fed += [(k, r["url"]) for r in recs]
    p.feed("urls", recs, feed_id=f"round-{k}")
    p.run()


def _from_scratch(fed: list[tuple[int, str]]) -> pd.DataFrame:
    """What ``counts`` holds, consolidated, from scratch: (url, count) after every round that saw the
    url, once each (the counts only grow)."""
    df = pd.DataFrame(fed, columns=["round", "url"])
    per = df.groupby(["url", "round"]).size().groupby(level="url").cumsum().rename("count").reset_index()
    return per[["url", "count"]].assign(_diff=1).sort_values(["url", "count"]).reset_index(drop=True)


def _table(home: Path) -> pd.DataFrame:
    """``counts`` as a plain Delta reader sees it, consolidated (sum of _diff, zeros dropped)."""
    df = DeltaTable(str(home / "flows" / "counts")).to_pandas()
    df["_diff"] = df["_diff"].fillna(1).astype("int64")
    g = df.groupby(["url", "count"], as_index=False)["_diff"].sum()
    g = g[g["_diff"] != 0].astype({"count": "int64"})
    return g.sort_values(["url", "count"]).reset_index(drop=True)


def _data_files(home: Path) -> int:
    return sum(len(fs) for d, _, fs in os.walk(home / "flows" / "counts") if "_delta_log" not in d)


def _per_epoch(fed: list[tuple[int, str]], k: int) -> list[tuple[str, int]]:
    want = _from_scratch([f for f in fed if f[0] <= k])
    seen = {u for r, u in fed if r == k}
    last = want[want["url"].isin(seen)].groupby("url")["count"].max()
    return sorted(last.items())


def test_compaction_bounds_files_and_keeps_contents(spark, tmp_path):
    home = tmp_path / "home"
    p = cbp.load(YAML, home=str(home), spark=spark)
    p.set_retention(epochs=2, compact_files=4)
    fed: list[tuple[int, str]] = []
    files = []
    for k in range(1, 21):
        _round(p, k, fed)
        files.append(_data_files(home))
        if k % 5 == 0:  # the whole table, as any Delta reader sees it: as from scratch
            pd.testing.assert_frame_equal(_table(home), _from_scratch(fed), check_dtype=False)
    assert horizon(p.home) is not None
    assert max(files[8:]) < 36, files  # bounded: retention + compaction + files removed, not yet trimmed
    assert min(files[16:]) < 24, files  # without compaction: a file or more per epoch, 2-3 here
    for k in (19, 20):  # the epochs within reach: exactly what they wrote
        got = sorted((r["url"], r["count"]) for r in p.output("counts", epoch=k))
        assert got == _per_epoch(fed, k), k
    p = cbp.load(YAML, home=str(home), spark=spark)  # a new Pipeline object goes on
    _round(p, 21, fed)
    pd.testing.assert_frame_equal(_table(home), _from_scratch(fed), check_dtype=False)
    # a rewind to the oldest epoch kept puts back the files of that moment, across the compactions since
    first = horizon(p.home)["stages"]["url_count"]  # type: ignore[index]
    names = [f["path"].rsplit("/", 1)[-1] for f in p.home.table_files("flows/counts", _version(p))]
    compacted_at = max(int(n[1:13]) for n in names if n.startswith("c"))  # the change that wrote it: c<seq>-...
    entry = p.parts.history.epoch_entry(p.parts.live.st, "url_count", first)
    assert entry is not None and entry.seq is not None and compacted_at > entry.seq  # compacted after it
    p.rewind(first)
    pd.testing.assert_frame_equal(_table(home), _from_scratch(fed[: 3 * first]), check_dtype=False)


def _version(p: cbp.Pipeline) -> int:
    v = p.parts.live.st.flows["counts"].version
    assert v is not None
    return v


class _Killed(BaseException):
    """A crash at a kill point, in-process: nothing catches it but the test."""


@pytest.mark.parametrize("point", ["compact:written", "compact:pending", "compact:committed:0", "compact:snapshot"])
def test_crash_during_compaction_loses_and_duplicates_nothing(spark, tmp_path, monkeypatch, point):
    home = tmp_path / "home"
    p = cbp.load(YAML, home=str(home), spark=spark)
    p.set_retention(epochs=1, compact_files=3)
    fed: list[tuple[int, str]] = []
    hit: list[str] = []

    def crash(name: str) -> None:
        if name == point and not hit:
            hit.append(name)
            raise _Killed(name)

    monkeypatch.setattr(faults, "point", crash)
    k = 0
    while not hit and k < 20:
        k += 1
        try:
            _round(p, k, fed)
        except _Killed:
            pass
    assert hit == [point]
    monkeypatch.undo()
    p = cbp.load(YAML, home=str(home), spark=spark)  # a new process would: recovers what was pending
    for n in range(k + 1, k + 6):
        _round(p, n, fed)
    assert p.home.pending() is None
    pd.testing.assert_frame_equal(_table(home), _from_scratch(fed), check_dtype=False)
    got = {r["url"]: r["count"] for r in p.state("url_count")}
    assert got == pd.DataFrame(fed, columns=["round", "url"])["url"].value_counts().to_dict()
