"""Runaway and dying translators: time limits per stage (YAML) and per run (--epoch-timeout),
os._exit and SystemExit reported as user-code failures naming stage and epoch, nothing committed."""

from __future__ import annotations

import pytest
from conftest import WORD_COUNT

import cbp
from cbp.cli import main
from cbp.errors import UserCodeError

PIPE = WORD_COUNT + "    TIMEOUT\n"  # the shared word count, with a line for the stage's time limit
MODULE = """
import os, sys, time

MODE = {"how": None}

def count(key, state, words, out):
    prev = next(state, None)
    n = sum(1 for _ in words) + (prev["n"] if prev else 0)
    if key == "bad":
        how = open(os.path.join(os.path.dirname(__file__), "how")).read().strip()
        if how == "loop":
            while True:  # never returns (waiting, not spinning a core for the 5 s of the limit)
                try:
                    time.sleep(0.01)
                except Exception:  # a translator that swallows everything still stops
                    pass
        if how == "sleep":
            time.sleep(3600)
        if how == "masked":  # the task's alarm (its own stop at the limit) never delivered: only a cancel ends it
            import signal

            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
            while True:
                time.sleep(0.01)
        if how == "exit":
            sys.exit(3)
        if how == "os_exit":
            os._exit(7)
    out.state.write({"w": key, "n": n})
"""


def _pipeline(make_pipeline, how: str, timeout: str = ""):
    path = make_pipeline(PIPE.replace("TIMEOUT", timeout), MODULE)
    (path.parent / "how").write_text(how)
    return path


def _counts(p):
    return {r["w"]: r["n"] for r in p.state("count")}


#: The limit a translator that never returns must meet (the 5 s of the tests below) is wall time from
#: the epoch's plan; a cold Connect server on a loaded 2-core machine can take longer than that to start
#: its Python workers. So an epoch that is to end without the limit (a failing function's, a fixed
#: function's rerun) runs under a limit no busy machine misses and that still ends a hang before
#: pytest's own timeout; only the never-ending epoch meets the 5 s (12 s until 2026-11-30: the tests' longest
#: wait, and a limit only bounds the epoch from below, so a shorter one checks the same).
ROOMY = "timeout: 300"


def _relimit(path, timeout: str) -> None:
    """Rewrite the stage's time limit in the YAML at ``path`` (a pipeline loaded from it afterwards
    has the new one; the limit is not part of what a home records of its spec)."""
    text = path.read_text()
    old = next(line.strip() for line in text.splitlines() if line.strip().startswith("timeout:"))
    path.write_text(text.replace(old, timeout))


# What is checked is that the epoch ends, not when: a limit is the least time before a cancel.
def test_stage_timeout_cancels_the_epoch_and_names_stage_epoch_key(spark, make_pipeline, tmp_path):
    path = _pipeline(make_pipeline, "loop", "timeout: 5")
    p = cbp.load(path, home=str(tmp_path / "h"), spark=spark)
    p.feed("words", [{"w": "a"}, {"w": "bad"}])
    with pytest.raises(UserCodeError) as e:  # the translator never returns: the run ends only if cancelled
        p.run()
    assert e.value.code == "timeout"
    msg = str(e.value)
    assert "stage 'count' epoch 1" in msg and "time limit of 5 s" in msg
    if "key" in msg:  # named when the translator was interrupted (not when the job had to be cancelled)
        assert "'bad'" in msg
    assert p.status()["stages"]["count"]["epochs"] == 0 and p.state("count") == []  # nothing committed
    (path.parent / "how").write_text("fixed")  # once fixed, the same epoch runs (under a roomy limit)
    _relimit(path, ROOMY)
    p = cbp.load(path, home=str(tmp_path / "h"), spark=spark)
    p.run()
    assert _counts(p) == {"a": 1, "bad": 1}


def test_a_translator_that_blocks_its_tasks_alarm_is_cancelled_by_the_driver(spark, make_pipeline, tmp_path):
    """A task stops itself at the limit (SIGALRM); a translator that blocks that signal is stopped by the
    driver, which cancels the epoch's job a grace period after the limit (on Connect by interrupting the
    job's tag): the run ends with ``timeout``, nothing committed. The limit is 1 s: the epoch is to fail."""
    path = _pipeline(make_pipeline, "masked", "timeout: 1")
    p = cbp.load(path, home=str(tmp_path / "h"), spark=spark)
    p.feed("words", [{"w": "a"}, {"w": "bad"}])
    with pytest.raises(UserCodeError) as e:  # the translator never returns and never sees the alarm
        p.run()
    assert e.value.code == "timeout" and "stage 'count' epoch 1" in str(e.value)
    assert e.value.key is None, str(e.value)  # the job cancelled: no task stopped at a key to say which
    assert p.status()["stages"]["count"]["epochs"] == 0 and p.state("count") == []


def test_epoch_timeout_of_a_run_through_the_cli(spark, make_pipeline, tmp_path, capsys):
    path = _pipeline(make_pipeline, "sleep")
    home = str(tmp_path / "h")
    (tmp_path / "in.jsonl").write_text('{"w": "bad"}\n{"w": "x"}\n')
    assert main(["feed", str(path), "words", str(tmp_path / "in.jsonl"), "--home", home]) == 0
    assert main(["run", str(path), "--home", home, "--epoch-timeout", "5", "--quiet"]) == 4
    err = capsys.readouterr().err
    assert "stage 'count' epoch 1" in err and "time limit of 5 s" in err
    with pytest.raises(SystemExit) as bad:  # not a time limit: argparse's usage error
        main(["run", str(path), "--home", home, "--epoch-timeout", "0"])
    assert bad.value.code == 2
    capsys.readouterr()
    assert main(["status", str(path), "--home", home, "--json"]) == 0
    assert '"epochs": 0' in capsys.readouterr().out


@pytest.mark.parametrize("how,code", [("exit", "user-code"), ("os_exit", "worker-died")])
def test_exiting_translator_is_a_user_code_failure(spark, make_pipeline, tmp_path, capsys, how, code):
    path = _pipeline(make_pipeline, how)
    p = cbp.load(path, home=str(tmp_path / "h"), spark=spark)
    p.feed("words", [{"w": "bad"}, {"w": "ok"}])
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert e.value.code == code
    assert "stage 'count' epoch 1" in str(e.value)
    assert "'bad'" in str(e.value)  # the key it was called for, also when it called os._exit
    if how == "exit":
        assert "SystemExit" in str(e.value)
    else:
        assert e.value.key == "bad"
    assert p.status()["stages"]["count"]["epochs"] == 0
    assert main(["run", str(path), "--home", str(tmp_path / "h"), "--quiet"]) == 4
    assert "stage 'count' epoch 1" in capsys.readouterr().err
    (path.parent / "how").write_text("fixed")
    p.run()
    assert _counts(p) == {"bad": 1, "ok": 1}


ROUTE = """
import os, time

def route(r):
    if r["w"] == "bad":
        how = open(os.path.join(os.path.dirname(__file__), "how")).read().strip()
        if how == "loop":
            while True:
                time.sleep(0.01)
        if how == "os_exit":
            os._exit(7)
        if how == "raise":
            raise KeyError("no such word")
        if how == "nan":
            return float("nan")  # no JSON value: no key
        if how == "unprintable":
            raise Unprintable()
    return r["w"]


class Unprintable(Exception):
    def __str__(self):
        raise ValueError("no message either")
"""


@pytest.mark.parametrize("small", [True, False], ids=["small", "shuffle"])
@pytest.mark.parametrize(
    "how,code",
    [
        ("raise", "user-code"),
        ("loop", "timeout"),
        ("os_exit", "worker-died"),
        ("nan", "user-code"),
        ("unprintable", "user-code"),
    ],
)
def test_a_failing_route_by_function(spark, make_pipeline, tmp_path, how, code, small):
    """RouteBy functions run in a Spark job on both paths (a small epoch's routing job, the
    shuffle's map side): an error names the record and the function, a loop meets the time limit,
    an exit is the worker's death; the driver lives on, nothing is committed, and the fixed
    function runs the same epoch."""
    limit = "timeout: 5" if how == "loop" else ROOMY  # only the loop is to meet the limit
    path = make_pipeline(PIPE.replace("TIMEOUT", limit).replace("route_by: w", "route_by: 'MOD:route'"), MODULE + ROUTE)
    (path.parent / "how").write_text(how)
    kw = {} if small else {"small_epoch_records": 0}
    p = cbp.Pipeline(str(path), home=str(tmp_path / "h"), spark=spark, **kw)
    p.feed("words", [{"w": "a"}, {"w": "bad"}])
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert e.value.code == code and e.value.stage == "count" and e.value.epoch == 1
    if how in ("raise", "nan", "unprintable"):
        assert "route_by" in str(e.value) and '"bad"' in str(e.value) and "Traceback" not in str(e.value), str(e.value)
        assert {"raise": "KeyError", "nan": "not a JSON value", "unprintable": "Unprintable"}[how] in str(e.value)
    assert p.status()["stages"]["count"]["epochs"] == 0 and p.state("count") == []
    (path.parent / "how").write_text("fixed")
    _relimit(path, ROOMY)
    p = cbp.Pipeline(str(path), home=str(tmp_path / "h"), spark=spark, **kw)
    [r] = p.run()
    assert (
        _counts(p) == {"a": 1, "bad": 1} and (r.shuffle_records == 0) == small
    )  # a small epoch: routed by the driver's job


def test_timeout_must_be_positive(make_pipeline):
    from cbp.errors import SpecError

    for bad in ("timeout: 0", "timeout: -3", "timeout: forever"):
        with pytest.raises(SpecError) as e:
            cbp.load_spec(_pipeline(make_pipeline, "x", bad))
        assert e.value.code == "invalid-spec"
    assert cbp.load_spec(_pipeline(make_pipeline, "x", "timeout: 2.5")).stages["count"].timeout == 2.5
