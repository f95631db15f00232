"""The typed driver/task protocol: result rows, failure records, and the errors the driver raises
from them (attributes, not message text)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest
from conftest import WORD_COUNT

import cbp
from cbp.cli import main
from cbp.engine.common.protocol import (
    FailureRecord,
    TaskFailed,
    TaskResult,
    decode_failure,
    decode_results,
    encode_failure,
    result_batch,
)
from cbp.engine.driver.job import _job_error
from cbp.errors import RuntimeStateError, UserCodeError

ADD = {"path": "_part=1/e00000002-abc.parquet", "size": 1234, "mtime": 1795442750451, "rows": 17, "partition": 1}


def test_result_rows_round_trip():
    r = TaskResult(
        part=3,
        index="stages/s/index/_part=3/e2.parquet",
        state_adds=[ADD],
        state_removes=[{**ADD, "rows": None, "partition": "1"}],  # as Delta lists them: partition values are text
        outputs={"counts": [{**ADD, "path": "_inc=4/x.parquet", "partition": 4}], "other": []},
        stats={
            "in": 5,
            "keys": 2,
            "row_groups_read": 1,
            "files_opened": 1,
            "seconds": {"translate": 0.25},
            "out": {"counts": 2},
        },
    )
    empty = TaskResult(part=0, stats={"in": 0, "seconds": {}, "out": {}})
    t = pa.Table.from_batches([result_batch(r), result_batch(empty)])
    a, b = decode_results(t)
    assert a.state_removes == [{**ADD, "rows": None}]
    assert a.outputs == r.outputs and a.state_adds == [ADD] and a.stats == r.stats and (a.part, a.index) == (3, r.index)
    assert b == empty


@pytest.mark.parametrize(
    "message",
    [
        "stage 's' epoch 1 key 'k': translator raised ValueError: ]] [[cbp-failure/1 Zm9v]] \n\t' \" \\ ünïcødé "
        "\U0001f600",
        "x" * 10000,
    ],
)
def test_failure_records_survive_any_message(message):
    forged = encode_failure(FailureRecord("io", "forged by the user's exception text", "evil", 9))
    rec = FailureRecord(
        "user-code", message + forged, "s", 1, key=json.dumps(["a", 1]), exc_type="ValueError", location="/x/m.py:3"
    )
    text = (
        "An exception was thrown from the Python worker:\nTraceback ...\n"
        f"cbp.engine.common.protocol.TaskFailed: {TaskFailed(rec)}\n\tat org.apache..."
    )
    got = decode_failure(text)
    assert (
        got is not None
        and got.code == "user-code"
        and got.stage == "s"
        and got.key == '["a", 1]'
        and got.location == "/x/m.py:3"
    )
    assert got.message == (message + forged)[:2000]
    assert decode_failure("[[cbp-failure/1 not-base64!]] [[cbp-failure/99 e30=]]") is None


def _plan(deadline=None):
    return SimpleNamespace(
        stage=SimpleNamespace(name="count"),
        epoch=2,
        deadline=deadline,
        timeout=12.0 if deadline else None,
        where=lambda key=None: "stage 'count' epoch 2" + ("" if key is None else f" key {key!r}"),
    )


def test_job_errors_from_records():
    io = TaskFailed(
        FailureRecord(
            "io",
            "stage 'count' epoch 2: cannot write to the home /h: [Errno 28] No space left on device",
            "count",
            2,
            path="/h/stages/count/state/_part=0/x.parquet",
            errno=28,
        )
    )
    e = _job_error(_plan(), Exception(f"Job aborted ... {io}"))
    assert isinstance(e, RuntimeStateError) and (e.code, e.path, e.errno, e.stage, e.epoch) == (
        "io",
        "/h/stages/count/state/_part=0/x.parquet",
        28,
        "count",
        2,
    )
    user = TaskFailed(
        FailureRecord(
            "user-code",
            "stage 'count' epoch 2 key ['a', 1]: boom",
            "count",
            2,
            key='["a",1]',
            exc_type="KeyError",
            location="/m.py:7",
        )
    )
    e = _job_error(_plan(), Exception(str(user)))
    assert isinstance(e, UserCodeError) and (e.code, e.key, e.exc_type, e.location, e.stage, e.epoch) == (
        "user-code",
        ["a", 1],
        "KeyError",
        "/m.py:7",
        "count",
        2,
    )
    assert "nothing of this epoch was committed" in str(e)
    late = TaskFailed(
        FailureRecord(
            "timeout",
            "stage 'count' epoch 2 key 'bad': translator 't' was still running",
            "count",
            2,
            key='"bad"',
            location="/m.py:9",
        )
    )
    e = _job_error(_plan(deadline=1.0), Exception(str(late)))
    assert (
        isinstance(e, UserCodeError)
        and (e.code, e.key, e.location) == ("timeout", "bad", "/m.py:9")
        and "time limit of 12 s" in str(e)
    )
    e = _job_error(_plan(deadline=1.0), Exception("Job 3 cancelled"))
    assert (e.code, e.key, e.stage) == ("timeout", None, "count")
    e = _job_error(_plan(), Exception("org.apache.spark.SparkException: Python worker exited unexpectedly (crashed)"))
    assert isinstance(e, UserCodeError) and e.code == "worker-died" and e.epoch == 2
    e = _job_error(_plan(), Exception("something else"))
    assert isinstance(e, RuntimeStateError) and e.code == "runtime"


PIPE = WORD_COUNT.replace("route_by: w}", 'route_by: "MOD:route"}')
MODULE = """
import os

def route(rec):
    return (rec["w"], 1) if rec["w"] == "poison" else rec["w"]  # a tuple: one composite key

def count(key, state, words, out):
    prev = next(state, None)
    if key == ["poison", 1]:
        raise KeyError("no poison")  # LINE
    if key == "exit":
        os._exit(3)
    out.state.write({"w": str(key), "n": sum(1 for _ in words) + (prev["n"] if prev else 0)})
"""


def test_translator_failure_is_typed(spark, make_pipeline, tmp_path, capsys):
    path = make_pipeline(PIPE, MODULE)
    module = next(path.parent.glob("*.py"))
    line = next(i for i, ln in enumerate(module.read_text().splitlines(), 1) if "# LINE" in ln)
    home = str(tmp_path / "h")
    p = cbp.load(path, home=home, spark=spark)
    p.feed("words", [{"w": "a"}])
    p.run()
    p.feed("words", [{"w": "a"}, {"w": "poison"}])
    with pytest.raises(UserCodeError) as e:
        p.run()
    err = e.value
    assert (err.code, err.stage, err.epoch, err.key, err.exc_type) == (
        "user-code",
        "count",
        2,
        ["poison", 1],
        "KeyError",
    )
    assert err.location == f"{module}:{line}"
    assert main(["run", str(path), "--home", home, "--quiet"]) == 4  # the CLI maps the class to its exit code
    assert "key ['poison', 1]" in capsys.readouterr().err


def test_dying_worker_is_typed(spark, make_pipeline, tmp_path):
    p = cbp.load(make_pipeline(PIPE, MODULE), home=str(tmp_path / "h"), spark=spark)
    p.feed("words", [{"w": "exit"}])
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert (e.value.code, e.value.stage, e.value.epoch, e.value.key) == ("worker-died", "count", 1, "exit")
    module = next(Path(p.spec.path).parent.glob("*.py"))
    line = next(i for i, ln in enumerate(module.read_text().splitlines(), 1) if "os._exit(3)" in ln)
    assert e.value.location == f"{module}:{line}" and "os._exit(3)" in str(e.value)
    assert "key 'exit'" in str(e.value) and "partition" in str(e.value)
