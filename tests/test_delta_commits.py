"""cbp's own Delta commits (cbp.storage.tables): what delta-rs reads back, another process's commits,
a lost race, checkpoints, and tables whose protocol cbp's commits do not speak."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable

from cbp.errors import RuntimeStateError
from cbp.storage import Home
from cbp.storage.layout import INC

SCHEMA = pa.schema([(INC, pa.int64()), ("v", pa.string())])


def _add(home: Home, inc: int, values: list[str]) -> dict:
    a = home.write_parquet(f"t/{INC}={inc}", pa.table({"v": values}), "in", inc)
    a["path"] = a.pop("rel")[len("t/") :]
    return a


def _rows(home: Home) -> list[tuple[int, str]]:
    dt = DeltaTable(home.uri("t"))
    return sorted((r[INC], r["v"]) for r in dt.to_pyarrow_table().to_pylist())


def test_commits_read_back_by_delta_rs_with_transactions_and_removes(tmp_path):
    home = Home(tmp_path / "h")
    home.ensure_table("t", SCHEMA, INC)
    a1, a2 = _add(home, 1, ["a", "b"]), _add(home, 2, ["c"])
    assert home.commit_once("t", INC, [a1, a2], [], overwrite=False, app_id="cbp:feed", app_version=1) == (1, True)
    assert home.commit_once("t", INC, [a1, a2], [], overwrite=False, app_id="cbp:feed", app_version=1) == (
        1,
        False,
    )  # made already
    files = home.table_files("t", 1)
    assert sorted(f["path"] for f in files) == sorted([a1["path"], a2["path"]]) and {f["rows"] for f in files} == {1, 2}
    gone = [f for f in files if f["partition"] in (1, "1")]
    assert home.commit_once("t", INC, [], gone, overwrite=False, app_id="cbp:gc", app_version=1) == (2, True)
    assert _rows(home) == [(2, "c")]
    dt = DeltaTable(home.uri("t"))
    assert dt.version() == 2 and dt.transaction_version("cbp:feed") == 1 and dt.transaction_version("cbp:gc") == 1
    assert [h["operation"] for h in dt.history()][:2] == ["DELETE", "WRITE"]
    assert DeltaTable(home.uri("t"), version=1).to_pyarrow_table().num_rows == 3  # time travel sees the removed file
    a3 = _add(home, 3, ["d"])
    assert home.commit_once("t", INC, [a3], [], overwrite=True, app_id="cbp:s", app_version=1) == (3, True)
    assert _rows(home) == [(3, "d")]  # overwrite drops every live file


def test_a_commit_by_another_process_is_seen_before_the_next_commit(tmp_path):
    one, two = Home(tmp_path / "h"), Home(tmp_path / "h")
    one.ensure_table("t", SCHEMA, INC)
    assert one.commit_once("t", INC, [_add(one, 1, ["a"])], [], overwrite=False, app_id="x", app_version=1) == (1, True)
    assert two.commit_once("t", INC, [_add(two, 2, ["b"])], [], overwrite=False, app_id="x", app_version=2) == (2, True)
    # `one` still holds version 1 but finds version 2 before committing: it reads it, and its transaction
    assert one.commit_once("t", INC, [_add(one, 9, ["z"])], [], overwrite=False, app_id="x", app_version=2) == (
        2,
        False,
    )
    assert one.commit_once("t", INC, [_add(one, 3, ["c"])], [], overwrite=False, app_id="x", app_version=3) == (3, True)
    assert _rows(one) == [(1, "a"), (2, "b"), (3, "c")]
    assert sorted(f["partition"] for f in one.table_files("t", 3)) == [1, 2, 3]


def test_a_lost_race_for_a_version_commits_nothing_and_the_next_try_succeeds(tmp_path):
    home = Home(tmp_path / "h")
    home.ensure_table("t", SCHEMA, INC)
    home.commit_once("t", INC, [_add(home, 1, ["a"])], [], overwrite=False, app_id="x", app_version=1)
    other = Home(tmp_path / "h")
    other.commit_once("t", INC, [_add(other, 2, ["b"])], [], overwrite=False, app_id="y", app_version=1)
    home.exists = lambda rel: False  # type: ignore[method-assign]  # the look for a newer commit misses it (a race)
    with pytest.raises(RuntimeStateError) as e:
        home.commit_once("t", INC, [_add(home, 3, ["c"])], [], overwrite=False, app_id="x", app_version=2)
    assert e.value.code == "io"
    assert _rows(home) == [(1, "a"), (2, "b")]  # the other writer's commit is intact, nothing of this one is visible
    del home.exists
    assert home.commit_once("t", INC, [_add(home, 3, ["c"])], [], overwrite=False, app_id="x", app_version=2) == (
        3,
        True,
    )
    assert _rows(home) == [(1, "a"), (2, "b"), (3, "c")]


def test_checkpoints_every_interval_and_a_fresh_load_agrees(tmp_path):
    home = Home(tmp_path / "h")
    home.ensure_table("t", SCHEMA, INC)
    n = int(DeltaTable(home.uri("t")).metadata().configuration["delta.checkpointInterval"])
    for i in range(1, n + 3):
        removes = [f for f in home.table_files("t", i - 1) if f["partition"] in (i - 2, str(i - 2))]
        home.commit_once("t", INC, [_add(home, i, [str(i)])], removes, overwrite=False, app_id="x", app_version=i)
    last = json.loads((tmp_path / "h" / "t" / "_delta_log" / "_last_checkpoint").read_text())
    assert last["version"] == n
    fresh = DeltaTable(home.uri("t"))
    assert fresh.version() == n + 2 and fresh.transaction_version("x") == n + 2
    assert sorted(fresh.file_uris()) == sorted(home.uri("t", f["path"]) for f in home.table_files("t", n + 2))
    assert _rows(home) == [(n + 1, str(n + 1)), (n + 2, str(n + 2))]


def test_a_table_with_table_features_is_committed_by_delta_rs(tmp_path):
    home = Home(tmp_path / "h")
    DeltaTable.create(
        home.uri("t"), schema=SCHEMA, partition_by=[INC], configuration={"delta.enableChangeDataFeed": "true"}
    )
    assert DeltaTable(home.uri("t")).protocol().min_writer_version > 2
    assert home.commit_once("t", INC, [_add(home, 1, ["a"])], [], overwrite=False, app_id="x", app_version=1) == (
        1,
        True,
    )
    log = (Path(tmp_path) / "h" / "t" / "_delta_log" / f"{1:020d}.json").read_text()
    assert "cbp/" not in log  # written by delta-rs, which knows what the features need
    assert _rows(home) == [(1, "a")] and DeltaTable(home.uri("t")).transaction_version("x") == 1


def test_a_large_table_checkpoints_once_its_log_holds_a_tenth_of_the_checkpoint(tmp_path):
    home = Home(tmp_path / "h")
    home.ensure_table("t", SCHEMA, INC)
    many = [dict(_add(home, 0, ["x"]), path=f"{INC}=0/f{i}.parquet") for i in range(400)]  # 400 live files (one real)
    home.commit_once("t", INC, many, [], overwrite=False, app_id="x", app_version=1)
    for i in range(2, 61):  # one file per commit after it
        home.commit_once("t", INC, [_add(home, i, [str(i)])], [], overwrite=False, app_id="x", app_version=i)
    log = tmp_path / "h" / "t" / "_delta_log"
    # at 10 the log holds 409 actions, as many as the checkpoint will: due. After it, a tenth of the
    # checkpoint's ~410 actions takes over 40 one-file commits; a fixed interval of 10 would write 6.
    written = sorted(int(p.name.split(".")[0]) for p in log.glob("*.checkpoint.parquet"))
    assert written[0] == 10 and len(written) == 2 and 50 <= written[1] <= 60, written
    assert json.loads((log / "_last_checkpoint").read_text())["version"] == written[1]
    assert sorted(DeltaTable(home.uri("t")).file_uris()) == sorted(
        home.uri("t", f["path"]) for f in home.table_files("t", 60)
    )


def test_a_checkpoint_keeps_the_tombstones_of_files_retention_has_not_deleted(tmp_path):
    """Tombstones of files cbp's retention deleted leave the next checkpoint; the others stay (a
    VACUUM still knows them); delta-rs reads every version from the checkpoint on."""
    from cbp.storage.logretention import trim_log

    home = Home(tmp_path / "h")
    home.ensure_table("t", SCHEMA, INC)
    files = {}
    for i in range(1, 36):  # each commit replaces the previous file: one removed file per version
        files[i] = _add(home, i, [str(i)])
        home.commit_once(
            "t", INC, [files[i]], [files[i - 1]] if i > 1 else [], overwrite=False, app_id="x", app_version=i
        )
    assert trim_log(home, "t", 30, 35).data_files == 28  # removed before checkpoint 30: deleted
    for i in range(36, 46):
        files[i] = _add(home, i, [str(i)])
        home.commit_once("t", INC, [files[i]], [files[i - 1]], overwrite=False, app_id="x", app_version=i)
    log = tmp_path / "h" / "t" / "_delta_log"
    last = json.loads((log / "_last_checkpoint").read_text())
    v = last["version"]
    assert v > 35
    actions = pq.read_table(log / f"{v:020d}.checkpoint.parquet").to_pylist()
    tombstones = sorted(a["remove"]["path"] for a in actions if a["remove"])
    assert tombstones == sorted(files[i]["path"] for i in range(29, v))  # removed at 30 to v, still there
    assert last["size"] == len(actions)
    dt = DeltaTable(home.uri("t"))
    assert dt.version() == 45 and dt.transaction_version("x") == 45 and _rows(home) == [(45, "45")]
    assert DeltaTable(home.uri("t"), version=v).to_pyarrow_table().column("v").to_pylist() == [str(v)]
    stale = {Path(u).name for u in dt.vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=True)}
    assert stale == {Path(files[i]["path"]).name for i in range(29, 45)}
