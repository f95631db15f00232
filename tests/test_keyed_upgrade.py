"""``cbp upgrade`` rewrites a keyed-row stage's state (issue 38 with "change is normal"): a new
schema, a new partition count, a migrate function, and a row_key added, changed or removed.

Each test builds a home with the keyed-rows property test's operations (keys and row keys whose
hashes collide on purpose), changes the YAML, upgrades, goes on feeding, and compares the state and
every get / get_many / iterate answer with the Python dict model of ``tests/test_keyed_rows.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_keyed_rows import MODULE, YAML, _expected, _records

import cbp

MODULE_U = (
    MODULE
    + '''

def whole(key, state, ops, out):
    """The same stage without keyed rows: the key's rows are read and re-emitted whole."""
    rows = {r["rk"]: r for r in state}
    for op in ops:
        if op["op"] == "w":
            rows[op["rk"]] = {"k": key, "rk": op["rk"], "v": op["v"]}
        elif op["op"] == "d":
            rows.pop(op["rk"], None)
    for r in rows.values():
        out.state.write(r)


def upper(row):
    """A migrate that renames every row key (the rows must then be found under the new one)."""
    return {**row, "rk": row["rk"].upper()}


def clash(row):
    return {**row, "rk": "same"}


def pair(key, state, ops, out):
    """The stage keyed by (k, rk): row keys are tuples."""
    for op in ops:
        if op["op"] == "w":
            out.state.write({"k": key, "rk": op["rk"], "v": op["v"]})
        elif op["op"] == "d":
            out.state.delete((key, op["rk"]))
        elif op["op"] == "g":
            got = json.dumps(state.get((key, op["rk"])), sort_keys=True)
            out.seen.write({"key": key, "seq": op["seq"], "got": got})
'''
)

# (kind, key, row key, value, get_many keys); keys and row keys from test_keyed_rows' colliding pools
BEFORE = [
    [
        ("w", "k49569", "r49971", 1, []),
        ("w", "k74517", "r118633", 2, []),
        ("w", "z", "a", 3, []),
        ("w", "z", "b", 4, []),
    ],
    [
        ("d", "k49569", "r49971", 0, []),
        ("w", "k49569", "r35529", 5, []),
        ("w", "k74517", "r169704", 6, []),
        ("w", "z", "a", 7, []),
    ],
]
AFTER = [
    [
        ("g", "k74517", "r118633", 0, []),
        ("g", "k74517", "r169704", 0, []),
        ("i", "z", "a", 0, []),
        ("m", "k49569", "a", 0, ["r35529", "r49971"]),
        ("w", "k49569", "r49971", 8, []),
        ("d", "z", "b", 0, []),
    ],
    [("i", "k49569", "a", 0, []), ("i", "z", "a", 0, []), ("g", "k74517", "r118633", 0, []), ("w", "z", "c", 9, [])],
]


def _home(make_pipeline, spark, fn: str, state: str, before=BEFORE):
    text = YAML.replace("FN", fn).replace("    BATCH\n", "")
    if state == "}":  # whole-key state
        text = text.replace(", row_key: rk}", "}")
    path = make_pipeline(text, MODULE_U)
    p = cbp.load(path, home=_where(path), spark=spark)
    for ops in before:
        p.feed("ops", _records(ops))
        p.run()
    return path, p


def _where(path: Path) -> str:
    return str(Path(path).parent / "home")


def _go_on(path: Path, p, spark, after=AFTER):
    """Upgrade to the YAML now at ``path``, feed ``after``; the pipeline and every ``seen`` record of those epochs."""
    p = cbp.load(path, home=_where(path), spark=spark)
    plan = p.plan()
    assert not plan.refused and [c.kind for c in plan.changes if c.verdict == "migrates"] == ["state-rewrite"], [
        c.line() for c in plan.changes
    ]
    p.upgrade()
    seen = []
    for ops in after:
        p.feed("ops", _records(ops))
        rep = p.run()
        seen += p.output("seen", epoch=rep[0].epoch) if rep and rep[0].records_out else []
    return p, seen


def _answers(epochs, since: int) -> list[str]:
    """The dict model's get/get_many/iterate answers of epochs ``since`` on (seq restarts each epoch)."""
    _, all_seen = _expected(epochs)
    _, earlier = _expected(epochs[:since])
    got = sorted(json.dumps(r, sort_keys=True) for r in all_seen)
    for r in earlier:
        got.remove(json.dumps(r, sort_keys=True))
    return got


def _without_note(seen: dict) -> dict:
    """A seen record with the rows it shows as before the new field (null everywhere)."""
    got = json.loads(seen["got"])
    for r in got if isinstance(got, list) else [got] if got else []:
        assert r.pop("note") is None
    return {**seen, "got": json.dumps(got, sort_keys=True)}


def _state(p) -> list[dict]:
    """The stage's rows as the model has them: a keyed-row stage's rows carry the key they belong to
    (``_key``, here the field ``k``); a whole-key stage's rows (between upgrades) carry none."""
    rows = p.state("site")
    assert all(r.get("_key", r["k"]) == r["k"] for r in rows)
    return sorted(({k: r[k] for k in ("k", "rk", "v")} for r in rows), key=lambda r: (r["k"], r["rk"]))


def _expected_state(ops: list[tuple]) -> list[dict]:
    """The model's state (:func:`test_keyed_rows._expected`) without the ``_key`` it gives each row."""
    return [{k: r[k] for k in ("k", "rk", "v")} for r in _expected(ops)[0]]


def test_new_partitions_and_field_rewrite_the_keyed_rows(make_pipeline, spark):
    path, p = _home(make_pipeline, spark, "per_key", "row_key: rk}")
    Path(path).write_text(
        Path(path)
        .read_text()
        .replace("{k: string, rk: string, v: int}", '{k: string, rk: string, v: int, note: "string?"}')
        .replace("partitions: 1", "partitions: 3")
    )
    p, seen = _go_on(path, p, spark)
    want_state = _expected_state(BEFORE + AFTER)
    assert _state(p) == want_state
    assert {r.get("note") for r in p.state("site")} == {None}
    assert sorted(json.dumps(_without_note(r), sort_keys=True) for r in seen) == _answers(BEFORE + AFTER, len(BEFORE))


def test_a_row_key_added_to_a_whole_key_stage(make_pipeline, spark):
    """A stage that rewrote whole keys becomes keyed: each stored row gets its row key and row hash."""
    path, p = _home(make_pipeline, spark, "whole", "}")
    Path(path).write_text(
        Path(path).read_text().replace("}\n    outputs", ", row_key: rk}\n    outputs").replace(":whole", ":per_key")
    )
    assert "row_key: rk}" in Path(path).read_text()
    p, seen = _go_on(path, p, spark)
    want_state = _expected_state(BEFORE + AFTER)
    assert _state(p) == want_state
    assert sorted(json.dumps(r, sort_keys=True) for r in seen) == _answers(BEFORE + AFTER, len(BEFORE))


def test_a_row_key_removed_and_changed(make_pipeline, spark):
    """Keyed -> whole-key state (the key's rows read whole again), then a row key of two fields."""
    path, p = _home(make_pipeline, spark, "per_key", "row_key: rk}")
    Path(path).write_text(Path(path).read_text().replace(", row_key: rk}", "}").replace(":per_key", ":whole"))
    writes = [[op for op in ops if op[0] in "wd"] for ops in AFTER]
    p, _ = _go_on(path, p, spark, writes)
    want_state = _expected_state(BEFORE + writes)
    assert _state(p) == want_state
    Path(path).write_text(
        Path(path).read_text().replace("v: int}}", "v: int}, row_key: [k, rk]}").replace(":whole", ":pair")
    )
    last = [
        ("w", "z", "d", 10, []),
        ("d", "k74517", "r118633", 0, []),
        ("g", "k49569", "r35529", 0, []),
        ("g", "k74517", "r169704", 0, []),
    ]
    p, seen = _go_on(path, p, spark, [last])
    want_state = _expected_state(BEFORE + writes + [last])
    assert _state(p) == want_state
    assert sorted(json.dumps(r, sort_keys=True) for r in seen) == _answers(
        BEFORE + writes + [last], len(BEFORE + writes)
    )


def test_a_migrate_that_renames_row_keys(make_pipeline, spark):
    path, p = _home(make_pipeline, spark, "per_key", "row_key: rk}")
    text = Path(path).read_text()
    Path(path).write_text(text.replace("    outputs: [seen]", f"    migrate: {_mod(path)}:upper\n    outputs: [seen]"))
    renamed = [[(k, key, rk.upper(), v, [m.upper() for m in many]) for k, key, rk, v, many in ops] for ops in BEFORE]
    after = [[("g", "k74517", "R118633", 0, []), ("m", "k49569", "a", 0, ["R35529", "r35529"]), ("i", "z", "a", 0, [])]]
    p, seen = _go_on(path, p, spark, after)
    want_state = _expected_state(renamed + after)
    assert _state(p) == want_state
    assert sorted(json.dumps(r, sort_keys=True) for r in seen) == _answers(renamed + after, len(renamed))


def _mod(path: Path) -> str:
    return next(f.stem for f in Path(path).parent.glob("*.py"))


@pytest.mark.parametrize("change", ["row_key", "migrate"])
def test_rows_that_would_share_a_row_key_fail_the_upgrade_and_change_nothing(make_pipeline, spark, change):
    """Two rows of a key under one row key would lose one: the upgrade fails (migrate-failed), the home is as it was."""
    if change == "row_key":  # whole-key rows with equal 'v' under a new row_key v
        path, p = _home(make_pipeline, spark, "whole", "}", [[("w", "z", "a", 1, []), ("w", "z", "b", 1, [])]])
        new = Path(path).read_text().replace("}\n    outputs", ", row_key: v}\n    outputs")
    else:
        path, p = _home(make_pipeline, spark, "per_key", "row_key: rk}")
        new = (
            Path(path)
            .read_text()
            .replace("    outputs: [seen]", f"    migrate: {_mod(path)}:clash\n    outputs: [seen]")
        )
    before = _state(p)
    old = Path(path).read_text()
    Path(path).write_text(new)
    with pytest.raises(cbp.CbpError) as e:
        cbp.load(path, home=_where(path), spark=spark).upgrade()
    assert e.value.code == "migrate-failed"
    Path(path).write_text(old)
    p = cbp.load(path, home=_where(path), spark=spark)
    assert _state(p) == before and not p.plan().changes


def test_a_narrowed_type_on_a_keyed_stage_is_still_refused(make_pipeline, spark):
    """What an upgrade cannot make itself (int -> string without a migrate) is refused, with or without a new
    row_key."""
    path, p = _home(make_pipeline, spark, "per_key", "row_key: rk}")
    Path(path).write_text(
        Path(path)
        .read_text()
        .replace(
            "{k: string, rk: string, v: int}, row_key: rk}", "{k: string, rk: string, v: string}, row_key: [k, rk]}"
        )
    )
    plan = cbp.load(path, home=_where(path), spark=spark).plan()
    assert [c.code for c in plan.refused] == ["schema-refused"]


def test_a_rewrite_task_given_rows_of_two_new_partitions_writes_nothing(tmp_path):
    """The state rewrite places new partition q in Spark partition q by its probe; a task that
    gets rows of two (a probe placed wrong) reports a failure and writes no file (no Spark)."""
    import pickle

    import pyarrow as pa

    from cbp.engine.task.restate import write_parts

    batch = pa.RecordBatch.from_pydict(
        {"q": pa.array([0, 1], pa.int32()), "probe": ["a", "b"], "data": pa.array([b"x", b"y"])}
    )
    job = SimpleNamespace(home=None)  # never reached: nothing is written
    got = list(write_parts(job, iter([batch])))
    assert len(got) == 1
    result = pickle.loads(got[0].column("result")[0].as_py())
    assert "errors" in result and "[0, 1]" in result["errors"][0]
    assert list(write_parts(job, iter([]))) == []  # an empty new partition: nothing to report
