"""The engine's paths: every state partition kind passes the same protocol test (two epochs of the
same keys, the second reading what the first wrote), every translator runner is one of the
runner protocol, and the path a stage epoch takes is chosen once, when its frozen plan is built,
from the YAML, the tuning and the settings (a table). No Spark."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest

from cbp.engine.driver.taskplan import build_task_plan, choose_path
from cbp.engine.task.bipindex import StateMeta
from cbp.engine.task.calls import _Calls
from cbp.engine.task.copies import Copies
from cbp.engine.task.groups import Group
from cbp.engine.task.keyedstate import state_partition
from cbp.engine.task.partition import StatePartition
from cbp.engine.task.plan import EnginePath, TaskPlan, _Clock
from cbp.engine.task.routing import encode_key
from cbp.engine.task.translators import RUNNERS, TranslatorRunner, runner_for
from cbp.settings import Settings
from cbp.spec import load_spec
from cbp.storage import Home

FLOWS = Path(__file__).resolve().parents[1] / "flows"
URL_COUNT = (FLOWS / "url_count.yaml").read_text()
VEC = (FLOWS / "url_count_vec.yaml").read_text()
KEYED = URL_COUNT.replace("      grouping: inner\n", "      grouping: inner\n      row_key: url\n")
STATELESS = URL_COUNT.replace("    state:\n      schema: {url: string, count: int}\n      grouping: inner\n", "")


def _stage(text: str, name: str = "url_count", yaml: str = "url_count.yaml"):
    return load_spec(str(FLOWS / yaml), text).stages[name]


def _tuning(**kw):
    base = dict(
        max_state_files=8,
        state_row_group=4,
        state_cache_mb=0.0,
        state_scan_fraction=None,
        small_epoch_records=None,
        state_index_mb=None,
    )
    return SimpleNamespace(**{**base, **kw})


def _plan(tmp_path, stage, mode, epoch, parts=None, **kw) -> TaskPlan:
    spec = load_spec(str(FLOWS / "url_count.yaml"))
    return build_task_plan(
        home=Home(str(tmp_path)),
        stage=stage,
        epoch=epoch,
        mode=mode,
        out_schemas={f: spec.flows[f].schema for f in stage.outputs},
        out_incs={f: epoch for f in stage.outputs},
        out_frames={},
        input_schemas=[spec.flows["urls"].schema.signed()],
        state_rel="stages/url_count/state",
        parts=parts or {},
        tuning=_tuning(),
        master="local[2]",
        new_records=10,
        **kw,
    )


KINDS = {  # partition kind -> (stage YAML, mode)
    "none": (STATELESS, "direct"),
    "direct": (URL_COUNT, "direct"),
    "blackbox": (URL_COUNT, "blackbox"),
    "keyed-direct": (KEYED, "direct"),
    "keyed-blackbox": (KEYED, "blackbox"),
}


def _write(part: StatePartition, g: Group, old, new: list[dict]) -> None:
    """A translator's new state for ``g``: keyed rows go through ``out.state`` (one write per row)."""
    if part.kind.startswith("keyed"):
        for r in new:
            part.out.write(r)  # type: ignore[attr-defined]
        part.update(g.key, g.h, old, [])
    else:
        part.update(g.key, g.h, old, new)


def _epoch(tmp_path, kind: str, epoch: int, parts: dict, stored: dict[str, list[dict]]):
    """One epoch of keys u0..u9 on partition 0: each key's count goes up by one; the stored
    records the partition gave each key, and what it finished with."""
    text, mode = KINDS[kind]
    plan = _plan(tmp_path, _stage(text), mode, epoch, parts)
    assert plan.path.partition == kind
    calls = _Calls(plan, 0)
    part = state_partition(plan, 0, calls)
    assert isinstance(part, StatePartition) and part.kind == kind
    keys = [(encode_key(f"http://h/u{i}"), i) for i in range(10)]
    found = part.lookup(np.array([h for _, h in keys], np.int64))
    seen = {}
    for k, h in keys:
        g = Group(k, h, 1)
        g.state = list(stored.get(k, []))  # black-box mode: the state comes with the input
        hit = found.get(k)
        old = part.stored(g, hit[1] if hit is not None else None)
        recs = [dict(r) for r in part.records(g, old)]
        seen[k] = recs
        n = recs[0]["count"] if recs else 0
        _write(part, g, old, [{"url": f"http://h/u{h}", "count": n + 1}])
    stats: dict = {}
    finished = part.finish(stats)
    calls.abort()
    return seen, finished, stats


def _live(tmp_path, adds) -> dict[str, list[dict]]:
    """The live rows of the files ``adds``, by key, as stored (the newest epoch of each key)."""
    out: dict[str, list[dict]] = {}
    for a in adds:
        for r in pq.read_table(tmp_path / "stages/url_count/state" / a["path"]).to_pylist():
            if r["_alive"]:
                out.setdefault(r["_key"], []).append({"url": r["url"], "count": r["count"]})
    return out


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_partition_kind_passes_the_same_protocol_test(tmp_path, kind):
    seen, (index, adds, removes), stats = _epoch(tmp_path, kind, 1, {}, {})
    assert all(v == [] for v in seen.values())  # nothing stored yet
    if kind == "none":
        assert (index, adds, removes) == (None, [], []) and part_free(tmp_path)
        return
    assert len(adds) == 1 and removes == []
    first = _live(tmp_path, adds)
    assert {k: [r["count"] for r in v] for k, v in first.items()} == {k: [1] for k in seen}
    parts = {0: StateMeta(files=list(adds), index=index)} if kind.endswith("direct") else {}
    stored = first if kind.endswith("blackbox") else {}
    seen2, (index2, adds2, removes2), _ = _epoch(tmp_path, kind, 2, parts, stored)
    assert seen2 == first  # what epoch 1 wrote, read back through the partition
    assert {k: [r["count"] for r in v] for k, v in _live(tmp_path, adds2).items()} == {k: [2] for k in seen}
    if kind.endswith("direct"):
        assert index2 is not None and index2 != index


def part_free(tmp_path) -> bool:
    """A stateless partition wrote no state file."""
    return not (tmp_path / "stages/url_count/state").exists()


def test_every_runner_is_a_translator_runner(tmp_path):
    text = {"per-key": URL_COUNT, "batch": VEC, "keyed-batch": KEYED, "columnar": VEC}
    for name, cls in RUNNERS.items():
        yaml = "url_count_vec.yaml" if text[name] is VEC else "url_count.yaml"
        stage = _stage(text[name], yaml=yaml)
        if name == "keyed-batch":
            stage = dataclasses.replace(stage, batch=True)
        plan = _plan(tmp_path, stage, "direct", 1)
        plan = dataclasses.replace(plan, path=dataclasses.replace(plan.path, runner=name))
        calls = _Calls(plan, 0)
        part = state_partition(plan, 0, calls)
        runner: TranslatorRunner = runner_for(plan, calls, part, Copies(plan), _Clock())
        assert type(runner) is cls and isinstance(runner.stats, dict)
        assert runner.run([]) == 0  # no envelopes: no records, no call
        part.abort()
        calls.abort()


# (stage YAML, mode, tuning, CBP_* settings, Spark master, new records) -> the path
PATHS = [
    (URL_COUNT, "direct", {}, {}, "local[2]", 10, "per-key/direct/driver/local"),
    (URL_COUNT, "direct", {}, {}, "local[2]", None, "per-key/direct/shuffle/local"),
    (URL_COUNT, "direct", {"small_epoch_records": 5}, {}, "local[2]", 10, "per-key/direct/shuffle/local"),
    (URL_COUNT, "direct", {}, {"CBP_SMALL_EPOCH_RECORDS": "0"}, "local[2]", 10, "per-key/direct/shuffle/local"),
    (
        URL_COUNT,
        "direct",
        {"small_epoch_records": 50},
        {"CBP_SMALL_EPOCH_RECORDS": "0"},
        "local",
        10,
        "per-key/direct/driver/local",
    ),
    (URL_COUNT, "blackbox", {}, {}, "local[2]", 10, "per-key/blackbox/shuffle/local"),
    (URL_COUNT, "direct", {}, {}, "spark://h:7077", 10**6, "per-key/direct/shuffle/placed"),
    (URL_COUNT, "direct", {}, {"CBP_PLACEMENT": "0"}, "spark://h:7077", 10**6, "per-key/direct/shuffle/local"),
    (URL_COUNT, "blackbox", {}, {}, "spark://h:7077", 10, "per-key/blackbox/shuffle/local"),
    (VEC, "direct", {}, {}, "local[2]", 10**6, "columnar/direct/shuffle/local"),
    (VEC, "direct", {}, {"CBP_COLUMNAR": "0"}, "local[2]", 10**6, "batch/direct/shuffle/local"),
    (VEC, "blackbox", {}, {}, "local[2]", 10, "batch/blackbox/shuffle/local"),
    (VEC.replace("grouping: inner", "grouping: outer"), "direct", {}, {}, "local[2]", 10, "batch/direct/driver/local"),
    (KEYED, "direct", {}, {}, "local[2]", 10, "per-key/keyed-direct/driver/local"),
    (KEYED, "blackbox", {}, {}, "local[2]", 10, "per-key/keyed-blackbox/shuffle/local"),
    (STATELESS, "direct", {}, {}, "local[2]", 10, "per-key/none/driver/local"),
]


@pytest.mark.parametrize("text, mode, tuning, env, master, new, want", PATHS)
def test_the_path_is_chosen_once_from_yaml_tuning_and_settings(
    tmp_path, monkeypatch, text, mode, tuning, env, master, new, want
):
    yaml = "url_count_vec.yaml" if "url_count_vec" in text else "url_count.yaml"
    stage = _stage(text, yaml=yaml)
    got = choose_path(
        stage,
        mode,
        master=master,
        new_records=new,
        small_limit=tuning.get("small_epoch_records"),
        env=Settings.from_env(env),
    )
    assert str(got) == want
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    plan = build_task_plan(
        home=Home(str(tmp_path)),
        stage=stage,
        epoch=1,
        mode=mode,
        out_schemas={},
        out_incs={},
        out_frames={},
        input_schemas=[],
        state_rel="s",
        parts={},
        tuning=_tuning(**tuning),
        master=master,
        new_records=new or 0,
        records_known=new is not None,
    )
    assert plan.path == got  # the plan records the path chosen
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.epoch = 2  # type: ignore[misc]


def test_the_record_wise_stage_and_multicast_bindings():
    crawl = load_spec(str(FLOWS / "crawl_queue.yaml"))
    assert str(choose_path(crawl.stages["score"], "direct", master="local", new_records=1, env=Settings())) == (
        "record/none/shuffle/local"
    )
    vec = _stage(VEC, yaml="url_count_vec.yaml")
    assert choose_path(vec, "direct", master="local", bindings=True, env=Settings()).runner == "batch"


def test_tasks_get_the_drivers_settings_in_the_plan(tmp_path, monkeypatch):
    monkeypatch.setenv("CBP_STATE_INDEX_MB", "12")
    monkeypatch.setenv("CBP_STATE_SCAN_FRACTION", "0.5")
    monkeypatch.setenv("CBP_FAULT", "task-exit:task:state-written:x")
    plan = _plan(tmp_path, _stage(URL_COUNT), "direct", 1)
    assert (plan.index_mb, plan.scan_fraction, plan.fault, plan.scan_choice) == (
        12.0,
        0.5,
        "task-exit:task:state-written:x",
        {},
    )
    monkeypatch.delenv("CBP_STATE_SCAN_FRACTION")
    meta = StateMeta(files=[{"path": "x.parquet", "rows": 1000}])
    plan = _plan(tmp_path, _stage(URL_COUNT), "direct", 1, parts={0: meta})
    assert plan.scan_fraction is None and set(plan.scan_choice) == {0}  # the driver chose per partition


def test_engine_path_is_checked():
    with pytest.raises(AssertionError):
        EnginePath(runner="row-by-row")
