"""A stage output framed by a field is framed in the tasks that write it: the same increments as
a FrameBy function (framed on the driver), records never read back by the driver, and results
equal to a from-scratch computation."""

from __future__ import annotations

import json
import random

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable

import cbp
from cbp.controller.landing import Landing
from cbp.engine.task.framing import frame_runs

FRAMED = """
pipeline: framed
flows:
  events: {external: true, schema: {user: string, day: int, tag: "json?"}}
  daily: {schema: {user: string, day: int, tag: "json?"}}
  totals: {schema: {day: int, users: int}}
stages:
  pass:
    translator: MOD:passthrough
    partitions: 3
    inputs: [{flow: events, route_by: user}]
    outputs: [daily]
  per_day:
    translator: MOD:per_day
    partitions: 2
    inputs: [{flow: daily, route_by: day, frame_by: FRAME}]
    state: {schema: {day: int, users: list<string>}}
    outputs: [totals]
"""
MODULE = """
def passthrough(user, state, events, out):
    for e in events:
        out.daily.write(e)

def per_day(day, state, daily, out):
    prev = next(state, None)
    users = sorted(set(prev["users"] if prev else []) | {d["user"] for d in daily})
    out.state.write({"day": day, "users": users})
    out.totals.write({"day": day, "users": len(users)})

def by_day(rec, state):
    return rec["day"], state

def by_tag(rec, state):
    return rec["tag"], state
"""
FUNCTIONS = {"day": "MOD:by_day", "tag": "MOD:by_tag"}


def _tag(rng: random.Random, day: int) -> object:
    """Tags whose runs cross JSON's forms of one value: 1 and 1.0 are one framing key, as are two nulls."""
    return rng.choice([None, day % 2, float(day % 2), {"d": day % 2}])


def _increments(home: str) -> list[tuple[int, int, list[tuple[str, int]]]]:
    """The flow's increments as stored: (increment id, producing epoch, its records sorted)."""
    t = DeltaTable(f"{home}/flows/daily").to_pyarrow_table().to_pandas()
    out = []
    for inc, rows in sorted(t.groupby("_inc"), key=lambda x: x[0]):
        out.append((int(inc), sorted(set(rows["_src"])), sorted(zip(rows["user"], rows["day"], rows["tag"].map(str)))))
    return out


@pytest.mark.parametrize("field", ["day", "tag"])
def test_field_framing_in_tasks_equals_framing_on_the_driver(spark, make_pipeline, tmp_path, monkeypatch, field):
    rng = random.Random(11 + len(field))
    users = [f"u{i}" for i in range(40)]
    feeds = []
    day = 0
    for _ in range(5):
        batch = []
        for _ in range(rng.randint(20, 60)):
            day += rng.random() < 0.15
            batch.append({"user": rng.choice(users), "day": day, "tag": _tag(rng, day)})
        feeds.append(batch)
    feeds.append([{"user": "last", "day": 999, "tag": "end"}])  # completes every frame before it

    homes = {}
    for how in ("field", "function"):
        frame = field if how == "field" else FUNCTIONS[field]
        p = cbp.load(make_pipeline(FRAMED.replace("FRAME", frame), MODULE), home=str(tmp_path / how))
        with monkeypatch.context() as m:
            if how == "field":  # the driver never reads the tasks' records back
                m.setattr(
                    Landing, "read_task_files", lambda *a: pytest.fail("the driver re-read a field-framed output")
                )
            frames = []
            for batch in feeds:
                p.feed("events", batch)
                p.run()
                frames.append(p.parts.scheduler.frames("per_day"))
        homes[how] = (p, str(tmp_path / how), frames)

    field_p, field_home, field_frames = homes["field"]
    func_p, func_home, func_frames = homes["function"]
    assert _increments(field_home) == _increments(func_home)
    assert field_frames == func_frames
    assert field_p.output("totals") == func_p.output("totals")
    # each increment holds one framing key; each record's _src is the pass epoch that wrote it
    t = DeltaTable(f"{field_home}/flows/daily").to_pyarrow_table().to_pandas()
    for _, rows in t.groupby("_inc"):
        values = [json.loads(v) if field == "tag" and v is not None else v for v in rows[field]]
        assert all(v == values[0] for v in values)
    assert t[t.user == "last"]["_src"].tolist() == [len(feeds)]
    # from scratch: distinct users per day over every record before the last (open) frame
    fed = pd.DataFrame([r for b in feeds[:-1] for r in b])
    expected = fed.groupby("day")["user"].nunique().to_dict()
    newest = {}
    for r in field_p.output("totals"):
        newest[r["day"]] = r["users"]
    if field == "day":
        assert newest == expected
    else:  # framed by tag: a day's records may still sit in the open frame
        assert all(newest[d] <= expected[d] for d in newest)
        assert set(newest) <= set(expected)
    assert field_p.epochs("pass") == func_p.epochs("pass") == len(feeds)
    for e in range(1, len(feeds) + 1):
        assert field_p.epoch_record("pass", e) == func_p.epoch_record("pass", e)
        assert {r["user"] for r in field_p.output("daily", epoch=e)} == {r["user"] for r in feeds[e - 1]}


def test_frame_runs_compares_as_python_does():
    assert frame_runs(pa.chunked_array([[], []], pa.int64())) == []
    assert frame_runs(pa.chunked_array([[1, 1], [1, 2], [2, None], [None]])) == [(1, 0, 3), (2, 3, 2), (None, 5, 2)]
    assert frame_runs(pa.array([[1, 2], [1, 2], [1], None, None])) == [([1, 2], 0, 2), ([1], 2, 1), (None, 3, 2)]
    assert frame_runs(pa.array(['{"a":1,"b":2}', '{"b":2,"a":1}', "null", None]), json_text=True) == [
        ({"a": 1, "b": 2}, 0, 2),
        (None, 2, 2),
    ]
    nan = frame_runs(pa.array([float("nan"), float("nan"), 0.0, -0.0]))
    assert [r[1:] for r in nan] == [(0, 1), (1, 1), (2, 2)]  # NaN equals nothing; 0.0 == -0.0


#: SIGKILLs around a pass epoch whose framed output the tasks wrote: inside the Spark job, before
#: anything is pending, with the flow's commit made but not the snapshot, and after the snapshot.
KILLS = {
    1: ["kill-driver:task:outputs-written:1", "kill:epoch:ran:1", "kill:epoch:pending:1"],
    2: ["kill:epoch:committed:0:1", "kill:epoch:snapshot:1"],
}


def test_framed_outputs_survive_crashes(spark, make_pipeline, tmp_path):
    """Killed at every moment of an epoch that frames its output in the tasks, the restarted runs
    end with the same increments, frames and outputs as an uninterrupted run."""
    import crash_harness as ch

    rng = random.Random(5)
    feeds = [
        [{"user": f"u{rng.randrange(30)}", "day": d // 15 + 10 * k, "tag": None} for d in range(45)] for k in range(3)
    ]
    yaml = make_pipeline(FRAMED.replace("FRAME", "day"), MODULE)
    ref = cbp.load(yaml, home=str(tmp_path / "ref"), spark=spark)
    for batch in feeds:
        ref.feed("events", batch)
        ref.run()
    victim = str(tmp_path / "victim")
    for k, batch in enumerate(feeds):
        if k not in KILLS:  # a feed and run never killed: in this process (a `cbp run` starts a Spark driver)
            p = cbp.load(yaml, home=victim, spark=spark)
            p.feed("events", batch)
            p.run()
            continue
        src = tmp_path / f"feed{k}.jsonl"
        src.write_text("".join(json.dumps(r) + "\n" for r in batch))
        assert ch.cli_here(["feed", "events", str(src)], victim, yaml=yaml).returncode == 0
        for fault in KILLS.get(k, []):  # each kill in a `cbp run` process; the recovery after them here
            r = ch.cli(["run"], victim, fault, yaml=yaml, on_test_jvm=True)  # see crash_harness.run_victim
            assert r.returncode == -9, (fault, r.stderr[-2000:])
        r = ch.cli_here(["run"], victim, yaml=yaml)
        assert r.returncode == 0, r.stderr[-2000:]
    got = cbp.load(yaml, home=victim, spark=spark)
    assert _increments(victim) == _increments(str(tmp_path / "ref"))
    assert got.parts.scheduler.frames("per_day") == ref.parts.scheduler.frames("per_day")
    assert got.output("totals") == ref.output("totals")
    assert [got.epochs(s) for s in ("pass", "per_day")] == [ref.epochs(s) for s in ("pass", "per_day")]
