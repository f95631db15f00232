"""Keyed rows (issue 38): ``state: {schema, row_key}``, ``state.get/get_many``, ``out.state.write/delete``.

Property tests: random sequences of get / get_many / write / delete / iterate per key, through
epochs, against a Python dict model, for per-key and batch translators, in direct and black-box
modes. The keys and row keys are drawn from pools that hold hash collisions on purpose (two row
keys whose row hashes share their low 32 bits, two keys sharing the top 32 bits of their hash),
so rows that share index entries are exercised every run.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as hs

import cbp
from cbp.engine.common.sparkhash import spark_xxhash64
from cbp.engine.task.keyedstate import key_range, row_hashes
from cbp.errors import SpecError

# row keys r49971/r118633 and r35529/r169704 have equal low 32 bits of their row hash; keys
# k49569/k74517 equal top 32 bits of their key hash (found by a birthday search; checked below)
ROW_KEYS = ["r49971", "r118633", "r35529", "r169704", "a", "b"]
KEYS = ["k49569", "k74517", "z"]

MODULE = """
import json
import pyarrow as pa


def per_key(key, state, ops, out):
    for op in ops:
        kind, rk = op["op"], op["rk"]
        if kind == "w":
            out.state.write({"k": key, "rk": rk, "v": op["v"]})
        elif kind == "d":
            out.state.delete(rk)
        elif kind == "g":
            out.seen.write({"key": key, "seq": op["seq"], "got": json.dumps(state.get(rk), sort_keys=True)})
        elif kind == "m":
            got = state.get_many(rk.split(","))
            rows = sorted(got.values(), key=lambda r: r["rk"])
            out.seen.write({"key": key, "seq": op["seq"], "got": json.dumps(rows, sort_keys=True)})
        else:
            rows = sorted(state, key=lambda r: r["rk"])
            out.seen.write({"key": key, "seq": op["seq"], "got": json.dumps(rows, sort_keys=True)})


def batch(keys, state, ops, out):
    rows = ops.to_pylist()
    gets = [(r["_pos"], g) for r in rows if r["op"] in "gm" for g in r["rk"].split(",")]
    found = state.get(pa.table({"_pos": pa.array([p for p, _ in gets], pa.int64()), "rk": [g for _, g in gets]}))
    at = {(p, r["rk"]): r for p, r in zip(found["_pos"].to_pylist(), found.drop_columns(["_key", "_pos"]).to_pylist())}
    every = state.all(sorted({r["_pos"] for r in rows if r["op"] == "i"}))
    by_pos = {}
    for p, r in zip(every["_pos"].to_pylist(), every.drop_columns(["_key", "_pos"]).to_pylist()):
        by_pos.setdefault(p, []).append(r)
    seen, last = [], {}
    for r in rows:
        p, kind, key = r["_pos"], r["op"], r["_key"]
        if kind == "g":
            seen.append({"key": key, "seq": r["seq"], "got": json.dumps(at.get((p, r["rk"])), sort_keys=True)})
        elif kind == "m":
            got = [at[(p, g)] for g in sorted(set(r["rk"].split(","))) if (p, g) in at]
            rows = sorted(got, key=lambda x: x["rk"])
            seen.append({"key": key, "seq": r["seq"], "got": json.dumps(rows, sort_keys=True)})
        elif kind == "i":
            rows = sorted(by_pos.get(p, []), key=lambda x: x["rk"])
            seen.append({"key": key, "seq": r["seq"], "got": json.dumps(rows, sort_keys=True)})
        else:
            last[(p, r["rk"])] = (key, r)
    ups = [(k, r) for (_, _), (k, r) in last.items() if r["op"] == "w"]
    dels = [(k, r) for (_, _), (k, r) in last.items() if r["op"] == "d"]
    return {"state": pa.table({"_key": [k for k, _ in ups], "k": [k for k, _ in ups], "rk": [r["rk"] for _, r in ups],
                               "v": pa.array([r["v"] for _, r in ups], pa.int64())}),
            "deleted": pa.table({"_key": [k for k, _ in dels], "rk": [r["rk"] for _, r in dels]}),
            "seen": pa.Table.from_pylist(
                seen, schema=pa.schema([("key", pa.string()), ("seq", pa.int64()), ("got", pa.string())]))}
"""

YAML = """
pipeline: keyed
flows:
  ops: {schema: {key: string, seq: int, op: string, rk: string, v: int}, external: true}
  seen: {schema: {key: string, seq: int, got: string}}
stages:
  site:
    translator: MOD:FN
    inputs: [{flow: ops, route_by: key, order_by: seq}]
    state: {schema: {k: string, rk: string, v: int}, row_key: rk}
    outputs: [seen]
    partitions: 1
    BATCH
"""


def test_pools_collide() -> None:
    """The pools hold the collisions the module docstring promises (so the tests exercise them)."""
    kh = [int(h) for h in spark_xxhash64([json.dumps(k) for k in KEYS[:2]])]
    assert key_range(kh[0]) == key_range(kh[1])
    h = row_hashes(kh[0], [json.dumps(r) for r in ROW_KEYS[:4]]).tolist()
    assert h[0] == h[1] and h[2] == h[3] and h[0] != h[2]


_op = hs.tuples(
    hs.sampled_from("wwwddggmi"),
    hs.sampled_from(KEYS),
    hs.sampled_from(ROW_KEYS),
    hs.integers(-3, 3),
    hs.lists(hs.sampled_from(ROW_KEYS), min_size=1, max_size=4),
)
_epochs = hs.lists(hs.lists(_op, min_size=1, max_size=14), min_size=1, max_size=4)


def _expected(epochs: list[list[tuple]]) -> tuple[list[dict], list[dict]]:
    """The dict model: the state rows after all epochs and every get/get_many/iterate answer."""
    model: dict[str, dict[str, dict]] = {}
    seen = []
    for ops in epochs:
        by_key: dict[str, list] = {}
        for seq, op in enumerate(ops):
            by_key.setdefault(op[1], []).append((seq, op))
        for key, kops in by_key.items():
            before = dict(model.get(key, {}))
            after = dict(before)
            for seq, (kind, _, rk, v, many) in kops:
                if kind == "w":
                    after[rk] = {"k": key, "rk": rk, "v": v}
                elif kind == "d":
                    after.pop(rk, None)
                elif kind == "g":
                    seen.append({"key": key, "seq": seq, "got": json.dumps(before.get(rk), sort_keys=True)})
                else:
                    rows = [before[r] for r in set(many) if r in before] if kind == "m" else list(before.values())
                    seen.append(
                        {"key": key, "seq": seq, "got": json.dumps(sorted(rows, key=lambda r: r["rk"]), sort_keys=True)}
                    )
            model[key] = after
    state = [{**r, "_key": key} for key, rows in model.items() for r in rows.values()]  # Pipeline.state: each row's key
    return sorted(state, key=lambda r: (r["k"], r["rk"])), sorted(seen, key=lambda r: (r["key"], r["seq"]))


def _records(ops: list[tuple]) -> list[dict]:
    return [
        {"key": key, "seq": seq, "op": kind, "rk": ",".join(many) if kind == "m" else rk, "v": v}
        for seq, (kind, key, rk, v, many) in enumerate(ops)
    ]


def _check(make_pipeline, epochs: list[list[tuple]], mode: str, batch: bool) -> None:
    path = make_pipeline(
        YAML.replace("FN", "batch" if batch else "per_key").replace("BATCH", "batch: true" if batch else ""), MODULE
    )
    home = tempfile.mkdtemp(prefix="keyed-home-")
    try:
        p = cbp.load(path, home=home, mode=mode)
        got_seen = []
        for i, ops in enumerate(epochs):
            p.feed("ops", _records(ops))
            reports = p.run()
            assert len(reports) == 1
            got_seen += p.output("seen", epoch=reports[0].epoch) if reports[0].records_out else []
            want_state, _ = _expected(epochs[: i + 1])
            assert sorted(p.state("site"), key=lambda r: (r["k"], r["rk"])) == want_state
        _, want_seen = _expected(epochs)
        # seq numbers restart each epoch: compare per epoch order-free by (key, seq, got) multiset
        assert sorted(json.dumps(r, sort_keys=True) for r in got_seen) == sorted(
            json.dumps(r, sort_keys=True) for r in want_seen
        )
    finally:
        shutil.rmtree(home, ignore_errors=True)


_SETTINGS = dict(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],
)  # no shrinking: each example runs Spark epochs


@settings(max_examples=6, **_SETTINGS)
@given(epochs=_epochs)
def test_direct_per_key_matches_dict_model(make_pipeline, epochs) -> None:
    _check(make_pipeline, epochs, "direct", batch=False)


@settings(max_examples=4, **_SETTINGS)
@given(epochs=_epochs)
def test_direct_batch_matches_dict_model(make_pipeline, epochs) -> None:
    _check(make_pipeline, epochs, "direct", batch=True)


@settings(max_examples=3, **_SETTINGS)
@given(epochs=_epochs)
def test_blackbox_per_key_matches_dict_model(make_pipeline, epochs) -> None:
    _check(make_pipeline, epochs, "blackbox", batch=False)


@settings(max_examples=3, **_SETTINGS)
@given(epochs=_epochs)
def test_blackbox_batch_matches_dict_model(make_pipeline, epochs) -> None:
    _check(make_pipeline, epochs, "blackbox", batch=True)


def test_many_epochs_compact_and_keep_rows(make_pipeline) -> None:
    """Twelve epochs (past compaction at 8 files) touching two rows each: every row stays, the
    touched ones updated; each epoch reads and writes the touched rows only."""
    path = make_pipeline(YAML.replace("FN", "per_key").replace("BATCH", ""), MODULE)
    p = cbp.load(path, home=str(Path(path).parent / "home"))
    p.feed("ops", [{"key": "z", "seq": i, "op": "w", "rk": f"r{i}", "v": 0} for i in range(300)])
    p.run()
    for e in range(12):
        p.feed(
            "ops",
            [
                {"key": "z", "seq": 0, "op": "w", "rk": f"r{e}", "v": e + 1},
                {"key": "z", "seq": 1, "op": "d", "rk": f"r{100 + e}", "v": 0},
            ],
        )
        (r,) = p.run()
        assert r.keys_written == 1
    state = {x["rk"]: x["v"] for x in p.state("site")}
    assert len(state) == 300 - 12
    assert all(state[f"r{e}"] == e + 1 for e in range(12)) and "r105" not in state and state["r299"] == 0


@pytest.mark.parametrize(
    "state, code",
    [
        ("{schema: {rk: string, v: int}, row_key: nope}", "bad-row-key"),
        ("{schema: {rk: 'string?', v: int}, row_key: rk}", "bad-row-key"),
        ("{schema: {rk: float, v: int}, row_key: rk}", "bad-row-key"),
        ("{schema: {rk: string, v: int}, row_key: [rk, rk]}", "bad-row-key"),
        ("{schema: {rk: string, v: int}, row_key: []}", "bad-row-key"),
    ],
)
def test_bad_row_key_is_a_spec_error(make_pipeline, state: str, code: str) -> None:
    path = make_pipeline(
        textwrap.dedent(f"""
        pipeline: bad
        flows:
          ops: {{schema: {{key: string}}, external: true}}
        stages:
          s:
            translator: MOD:f
            inputs: [{{flow: ops, route_by: key}}]
            state: {state}
        """),
        "def f(key, state, ops, out):\n    pass\n",
    )
    with pytest.raises(SpecError) as e:
        cbp.load(path, home=str(Path(path).parent / "home"))
    assert e.value.code == code


def test_killed_runs_recover_keyed_rows(make_pipeline, spark) -> None:
    """SIGKILL after the state's commit (outputs not), and inside the Spark job after a task wrote
    its state files: the restarted runs end with the dict model's rows."""
    import crash_harness as ch

    path = make_pipeline(YAML.replace("FN", "per_key").replace("BATCH", ""), MODULE)
    home = str(Path(path).parent / "home")
    rk = ROW_KEYS
    epochs = [
        [("w", k, r, i, []) for i, (k, r) in enumerate((k, r) for k in KEYS for r in rk)],
        [("w", "k49569", rk[0], 7, []), ("d", "k74517", rk[1], 0, []), ("w", "z", "c", 1, []), ("g", "z", "a", 0, [])],
        [("d", "k49569", rk[0], 0, []), ("w", "k74517", rk[0], 9, []), ("d", "z", "a", 0, []), ("i", "z", "a", 0, [])],
    ]
    p = cbp.load(path, home=home)
    p.feed("ops", _records(epochs[0]))
    p.run()
    for ops, fault in zip(epochs[1:], ("kill:epoch:committed:0:1", "kill-driver:task:state-written:1")):
        p.feed("ops", _records(ops))
        killed = ch.cli(["run"], home, fault=fault, yaml=Path(path), on_test_jvm=True)  # crash_harness.run_victim
        assert killed.returncode == -9, killed.stderr[-2000:]
    done = ch.cli_here(["run"], home, yaml=Path(path))  # the recovery: in this process
    assert done.returncode == 0, done.stderr[-2000:]
    want, _ = _expected(epochs)
    assert sorted(cbp.load(path, home=home).state("site"), key=lambda r: (r["k"], r["rk"])) == want


@pytest.mark.parametrize(
    "body, code",
    [
        ('out.state.write({"k": key, "rk": "a", "v": "x"})', "user-code"),
        ('out.state.write({"k": key, "rk": "a", "v": 1, "_diff": -1})', "bad-diff"),
        ('out.state.delete(("a", "b"))', "user-code"),
    ],
)
def test_bad_keyed_write_fails_the_epoch_with_nothing_landed(make_pipeline, body: str, code: str) -> None:
    path = make_pipeline(
        YAML.replace("FN", "f").replace("BATCH", ""), f"def f(key, state, ops, out):\n    list(ops)\n    {body}\n"
    )
    p = cbp.load(path, home=str(Path(path).parent / "home"))
    p.feed("ops", _records([("w", "z", "a", 1, [])]))
    with pytest.raises(cbp.CbpError) as e:
        p.run()
    assert e.value.code == code
    assert p.epochs("site") == 0 and p.state("site") == []


def test_rewind_and_replay_keep_keyed_rows(spark, make_pipeline, tmp_path):
    """A rewind puts a keyed-row stage's state back (its per-row index rebuilt), and the replay of
    the feeds since gives the dict model's rows and answers, as an uninterrupted run does."""
    epochs = [
        [("w", "k49569", "r49971", 1, ["a"]), ("w", "k74517", "r118633", 2, ["a"]), ("w", "z", "a", 3, ["a"])],
        [("d", "k49569", "r49971", 0, ["a"]), ("w", "z", "b", 4, ["a"]), ("g", "k74517", "r118633", 0, ["a"])],
        [("w", "k49569", "r35529", 5, ["a"]), ("i", "z", "a", 0, ["a"]), ("m", "k74517", "a", 0, ["r118633", "a"])],
    ]
    yaml = make_pipeline(YAML.replace("FN", "per_key").replace("    BATCH\n", ""), MODULE)
    p = cbp.load(yaml, str(tmp_path / "home"), spark=spark)
    for ops in epochs:
        p.feed("ops", _records(ops))
        p.run()
    p.rewind(1)
    assert p.epochs("site") == 1
    p.run()
    state, _ = _expected(epochs)
    assert sorted(p.state("site"), key=lambda r: (r["k"], r["rk"])) == state
    fresh = cbp.load(
        yaml, str(tmp_path / "fresh"), spark=spark
    )  # the replay read feeds 2 and 3 in one epoch: so does this
    fresh.feed("ops", _records(epochs[0]))
    fresh.run()
    for ops in epochs[1:]:
        fresh.feed("ops", _records(ops))
    fresh.run()
    assert sorted(map(str, p.output("seen"))) == sorted(map(str, fresh.output("seen")))
    assert sorted(map(str, p.state("site"))) == sorted(map(str, fresh.state("site")))
