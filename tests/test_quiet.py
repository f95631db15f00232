"""Quiet, informative runs: no Spark or JVM line on the terminal unless --verbose, progress for Python.

A real ``cbp feed`` + ``cbp run`` (their own Spark JVM) has nothing of Spark's or the JVM's on stderr;
the filter itself is checked on a child that prints such lines (and lets them through when verbose);
``Pipeline.run`` logs each epoch (logger ``cbp``) and calls ``progress`` while an epoch runs.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys

from conftest import FLOWS, ROOT, WORD_COUNT

import cbp
from cbp.engine.driver.jvmlog import is_jvm_line
from cbp.engine.driver.progress import Progress

SPARK_WORDS = re.compile(
    r"incubator|log4j|Setting default log level|setLogLevel|NativeCodeLoader|WARN |SparkContext|"
    r"org\.apache|java\.|SLF4J|Exception"
)


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    full.pop("CBP_VERBOSE", None)
    return subprocess.run(
        [sys.executable, "-m", "cbp.cli", *args], capture_output=True, text=True, env=full, timeout=600
    )


def test_a_real_cbp_run_prints_no_spark_or_jvm_line(tmp_path):
    flows = tmp_path / "flows"
    flows.mkdir()
    for f in ("url_count.yaml", "url_count.py"):
        shutil.copy(FLOWS / f, flows / f)
    (tmp_path / "d.jsonl").write_text('{"url": "http://a/"}\n{"url": "http://b/"}\n{"url": "http://a/"}\n')
    yaml = str(flows / "url_count.yaml")
    fed = _cli("feed", yaml, "urls", str(tmp_path / "d.jsonl"))
    assert fed.returncode == 0, fed.stderr
    run = _cli("run", yaml)
    assert run.returncode == 0, run.stderr
    assert "url_count        epoch    1  in         3" in run.stdout  # the per-epoch line stays
    assert run.stderr.splitlines() == ["... running url_count epoch 1"], run.stderr  # and nothing else
    assert not SPARK_WORDS.search(run.stderr + fed.stderr)


CHILD = """
import os, subprocess, time
from cbp.engine.driver.jvmlog import filtered_stderr
w = filtered_stderr()
p = subprocess.Popen(["sh", "-c", "echo 'WARNING: Using incubator modules: jdk.incubator.vector' >&2; "
                      "echo '12:00:01 ERROR Executor: task failed' >&2; echo 'java.lang.RuntimeException: boom' >&2; "
                      "printf '\\tat org.apache.Foo(Foo.java:1)\\n' >&2; echo 'a translator says hi' >&2"], stderr=w)
os.close(w)
p.wait()
time.sleep(0.5)  # the copying thread is a daemon: give it the pipe's last lines
"""


def test_the_jvms_stderr_is_filtered_unless_verbose():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CBP_VERBOSE", None)
    quiet = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=60)
    assert quiet.stderr.splitlines() == ["a translator says hi"], quiet.stderr
    loud = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env={**env, "CBP_VERBOSE": "1"}, timeout=60
    )
    assert loud.stderr.splitlines()[0] == "WARNING: Using incubator modules: jdk.incubator.vector"
    assert len(loud.stderr.splitlines()) == 5


def test_jvm_lines_are_known():
    for line in (
        "WARNING: Using incubator modules: jdk.incubator.vector",
        'Setting default log level to "WARN".',
        "To adjust logging level use sc.setLogLevel(newLevel). For SparkR, use setLogLevel(newLevel).",
        "26/11/27 12:00:00 WARN NativeCodeLoader: Unable to load native-hadoop library",
        "12:00:00 ERROR TaskSchedulerImpl: Lost executor",
    ):
        assert is_jvm_line(line), line
    assert not is_jvm_line("url_count        epoch    1  in         3")


GATED = """
import os, time

def count(key, state, words, out):
    gate = os.path.join(os.path.dirname(__file__), "seen")
    deadline = time.time() + 120
    while not os.path.exists(gate) and time.time() < deadline:  # until the progress callback saw this job
        time.sleep(0.05)
    prev = next(state, None)
    out.state.write({"w": key, "n": sum(1 for _ in words) + (prev["n"] if prev else 0)})
"""


def test_python_run_logs_each_epoch_and_reports_progress(spark, make_pipeline, tmp_path, caplog):
    path = make_pipeline(WORD_COUNT, GATED)
    gate = path.parent / "seen"
    seen: list[Progress] = []

    def progress(p: Progress) -> None:
        seen.append(p)
        if p.tasks_total > 0:  # the epoch's Spark job is running (its tasks wait on the gate)
            gate.touch()

    p = cbp.Pipeline(path, home=str(tmp_path / "h"), spark=spark, small_epoch_records=0)  # a Spark job, not the driver
    p.feed("words", [{"w": "a"}, {"w": "b"}, {"w": "a"}])
    with caplog.at_level(logging.INFO, logger="cbp"):
        [rep] = p.run(progress=progress)
    assert gate.exists(), "the progress callback was never called while the epoch ran"
    assert seen and all((g.stage, g.epoch) == ("count", 1) for g in seen)
    assert all(0 <= g.tasks_done <= g.tasks_total for g in seen)
    assert [r.getMessage() for r in caplog.records if r.name == "cbp" and r.levelno == logging.INFO] == [rep.line()]
    assert {r["w"]: r["n"] for r in p.state("count")} == {"a": 2, "b": 1}


DISPLAY = """
import time
from cbp.commands._terminal import EpochDisplay
from cbp.engine.driver.progress import Progress
d = EpochDisplay()
d.progress(Progress("count", 1, 0.5, 0, 0, None, "starting Spark"))  # under 2 s: nothing shows
for i in range(4):
    d.progress(Progress("count", 1, 2.5 + i, i, 4, i * 100, "job"))
    time.sleep(0.3)
d.done("count", 1)
d.progress(Progress("count", 1, 9.0, 4, 4, 400, "job"))  # a late look at an ended epoch: ignored
print("count epoch 1 done")
"""


def test_the_progress_bar_shows_on_a_terminal_and_goes_away(tmp_path):
    """cbp run's bar (tasks done of all, records read), in a pseudo-terminal (``script``)."""
    if shutil.which("script") is None:
        import pytest

        pytest.skip("needs 'script' (util-linux) to give the child a terminal")
    (tmp_path / "d.py").write_text(DISPLAY)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm", "COLUMNS": "100"}
    r = subprocess.run(
        ["script", "-qec", f"{sys.executable} {tmp_path / 'd.py'}", str(tmp_path / "tty.txt")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    screen = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", (tmp_path / "tty.txt").read_text(errors="replace")).replace(
        "\r", "\n"
    )
    assert "count epoch 1" in screen and "3/4 tasks" in screen and "300 records read" in screen
    assert "starting Spark" not in screen  # that look came before 2 s
    assert "4/4" not in screen  # nor after the epoch ended
    assert "count epoch 1 done" in screen
