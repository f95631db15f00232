"""One runner per home, stale-lock take-over, `cbp status` on an interrupted home, and bad
conditions (a failing translator, a read-only or full home): the epoch aborts with nothing
visible, and after the cause is fixed `cbp run` continues from where it stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, WORD_COUNT, WORD_COUNT_MODULE

import cbp
from cbp.errors import BusyError, RuntimeStateError, UserCodeError


def _cli(*args: str, fault: str | None = None, start=None, **kw):
    """``cbp ARGS`` to its end; or, with ``start`` (fixture ``background``'s ``popen``), started and returned."""
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("CBP_FAULT", None)
    if fault:
        env["CBP_FAULT"] = fault
    cmd = [sys.executable, "-m", "cbp.cli", *args]
    if start is not None:
        return start(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, **kw)
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, **kw)


def _words(tmp_path: Path, name: str, words: list[str]) -> str:
    f = tmp_path / name
    f.write_text("".join(f'{{"w": "{w}"}}\n' for w in words))
    return str(f)


def _wait_for(proc: subprocess.Popen, text: str, timeout: float = 120) -> str:
    """Read the process's stderr until ``text`` appears."""
    seen = ""
    t0 = time.time()
    assert proc.stderr is not None
    while time.time() - t0 < timeout:
        line = proc.stderr.readline()
        if not line and proc.poll() is not None:
            break
        seen += line
        if text in line:
            return seen
    raise AssertionError(f"never saw {text!r}:\n{seen}")


def test_second_runner_is_refused_and_a_killed_ones_lock_is_taken_over(spark, make_pipeline, tmp_path, background):
    gate = tmp_path / "gate"  # the translator waits for this file: the first runner is surely mid-epoch when killed
    module = (
        WORD_COUNT_MODULE
        + f"""
import os as _os

def count(key, state, words, out):
    while not _os.path.exists({str(gate)!r}):
        time.sleep(0.05)
    prev = next(state, None)
    out.state.write({{"w": key, "n": sum(1 for _ in words) + (prev["n"] if prev else 0)}})
"""
    )
    path = str(make_pipeline(WORD_COUNT, module))
    home = str(tmp_path / "h")
    from crash_harness import cli_here  # the commands that are not the runners in question: in this process

    assert (
        cli_here(["feed", "words", _words(tmp_path, "a.jsonl", ["a", "b", "c", "a"])], home, Path(path)).returncode == 0
    )
    first = _cli("run", path, "--home", home, start=background.popen)
    _wait_for(first, "running count epoch 1")
    # a second runner (CLI, or the Python API in another process) is refused at once, naming the holder
    second = _cli("run", path, "--home", home)
    assert second.returncode == 6, second.stderr
    assert f"pid {first.pid}" in second.stderr and "only one runner per home" in second.stderr
    with pytest.raises(BusyError, match="another cbp run is already working"):
        cbp.load(path, home=home, spark=spark).run()
    status = cli_here(["status"], home, Path(path))
    assert f"a cbp run is working on this home: pid {first.pid}" in status.stdout
    first.send_signal(signal.SIGKILL)  # killed while holding the lock, mid-epoch
    first.wait()
    gate.touch()
    assert cli_here(["feed", "words", _words(tmp_path, "b.jsonl", ["b"])], home, Path(path)).returncode == 0
    third = cli_here(["run"], home, Path(path))  # the take-over
    assert third.returncode == 0, third.stderr
    assert f"took over the home from a cbp run that was killed (pid {first.pid}" in third.stderr
    p = cbp.load(path, home=home, spark=spark)
    assert {r["w"]: r["n"] for r in p.state("count")} == {"a": 2, "b": 2, "c": 1}
    assert p.status()["runner"] is None and p.status()["interrupted"] == []


@pytest.mark.parametrize(
    "fault,shows",
    [
        (
            "kill:epoch:ran:1",
            "interrupted: stage 'count' epoch 1; the next 'cbp run' re-runs stage 'count' epoch 1 with the same inputs "
            "(words [1])",
        ),
        (
            "kill:epoch:pending:1",
            "interrupted commit of stage 'count' epoch 1; the next 'cbp run' or 'cbp feed' finishes committing it (0 "
            "of 1 Delta commits made)",
        ),
        ("kill:epoch:committed:0:1", "(1 of 1 Delta commits made)"),
    ],
)
def test_status_shows_an_interrupted_epoch_and_what_recovery_will_do(spark, make_pipeline, tmp_path, fault, shows):
    path = str(make_pipeline(WORD_COUNT, WORD_COUNT_MODULE))
    home = str(tmp_path / "h")
    from crash_harness import cli, cli_here  # the commands not killed: in this process (no Python start of their own)

    cli_here(["feed", "words", _words(tmp_path, "a.jsonl", ["a", "b", "a"])], home, yaml=Path(path))
    # killed at a driver's point after its job: a process of its own on this process's JVM (crash_harness.run_victim)
    assert cli(["run"], home, fault, yaml=Path(path), on_test_jvm=True).returncode == -9
    status = cli_here(["status"], home, yaml=Path(path))
    assert shows in status.stdout, status.stdout
    p = cbp.load(path, home=home, spark=spark)
    assert p.state("count") == []  # nothing of the epoch is visible through cbp
    p.run()
    assert {r["w"]: r["n"] for r in p.state("count")} == {"a": 2, "b": 1}
    assert p.status()["interrupted"] == [] and p.status()["stages"]["count"]["epochs"] == 1


FAILING_MODULE = (
    WORD_COUNT_MODULE
    + """
def count(key, state, words, out):
    prev = next(state, None)
    if key == "poison":
        raise ValueError("cannot count poison")
    out.state.write({"w": key, "n": sum(1 for _ in words) + (prev["n"] if prev else 0)})
"""
)


def test_after_a_failing_translator_is_fixed_the_run_continues(spark, make_pipeline, tmp_path):
    path = make_pipeline(WORD_COUNT, FAILING_MODULE)
    home = str(tmp_path / "h")
    p = cbp.load(path, home=home, spark=spark)
    p.feed("words", [{"w": "a"}])
    p.run()
    p.feed("words", [{"w": "a"}, {"w": "poison"}])
    p.feed("words", [{"w": "b"}])
    with pytest.raises(UserCodeError, match="stage 'count' epoch 2 key 'poison'"):
        p.run()
    assert {r["w"]: r["n"] for r in cbp.load(path, home=home, spark=spark).state("count")} == {"a": 1}
    assert not any(Path(home, "_cbp", "intentions").glob("*.json"))  # the aborted epoch left no intention
    module = next(Path(path).parent.glob("*.py"))
    module.write_text(module.read_text().replace('raise ValueError("cannot count poison")', "pass"))
    for name in [m for m in sys.modules if m.startswith(module.stem)]:
        del sys.modules[name]
    fixed = cbp.load(path, home=home, spark=spark)
    [rep] = fixed.run()
    assert rep.epoch == 2 and rep.records_in == 3
    assert {r["w"]: r["n"] for r in fixed.state("count")} == {"a": 2, "poison": 1, "b": 1}


# ------------------------------------------------------------------ read-only and full homes
@pytest.fixture
def tmpfs(tmp_path):
    """A small tmpfs mounted in tmp_path (needs root or CAP_SYS_ADMIN; skipped otherwise)."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=48m", "tmpfs", str(mnt)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"needs to mount a tmpfs (root or CAP_SYS_ADMIN): {r.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _bind_read_only(path: Path) -> bool:
    r = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True)
    r2 = subprocess.run(["mount", "-o", "remount,ro,bind", str(path)], capture_output=True)
    return r.returncode == 0 and r2.returncode == 0


@pytest.mark.parametrize("what", ["stages", "whole"])
def test_read_only_home(spark, make_pipeline, tmp_path, tmpfs, what):
    """A home (or its state directory) that became read-only: nothing changes, the message names
    the path (and the stage and epoch when the epoch got that far); once writable, the run continues."""
    path = make_pipeline(WORD_COUNT, WORD_COUNT_MODULE)
    home = tmpfs / "h"
    p = cbp.load(path, home=str(home), spark=spark)
    p.feed("words", [{"w": "a"}])
    p.run()
    p.feed("words", [{"w": "a"}, {"w": "b"}])
    target = home / "stages" if what == "stages" else tmpfs
    if what == "whole":
        assert subprocess.run(["mount", "-o", "remount,ro", str(tmpfs)]).returncode == 0
    elif not _bind_read_only(target):
        pytest.skip("needs a read-only bind mount (root or CAP_SYS_ADMIN)")
    try:
        with pytest.raises(RuntimeStateError) as e:
            cbp.load(path, home=str(home), spark=spark).run()
        msg = str(e.value)
        assert "Read-only file system" in msg and str(home) in msg, msg
        if what == "stages":
            assert "stage 'count' epoch 2" in msg and "nothing of this epoch was committed" in msg, msg
        assert {r["w"]: r["n"] for r in cbp.load(path, home=str(home), spark=spark).state("count")} == {"a": 1}
    finally:
        # a Spark worker may still hold a file under the bind mount ("target is busy"): detach it lazily
        undo = ["umount", "-l", str(target)] if what == "stages" else ["mount", "-o", "remount,rw", str(tmpfs)]
        assert subprocess.run(undo, capture_output=True).returncode == 0
    again = cbp.load(path, home=str(home), spark=spark)
    [rep] = again.run()
    assert rep.epoch == 2
    assert {r["w"]: r["n"] for r in again.state("count")} == {"a": 2, "b": 1}


def test_full_home(spark, make_pipeline, tmp_path, tmpfs):
    """A home whose disk is full: the epoch aborts with the path and 'No space left'; after space is
    freed, the run continues and the results are those of a run that never failed."""
    path = make_pipeline(WORD_COUNT, WORD_COUNT_MODULE)
    home = tmpfs / "h"
    p = cbp.load(path, home=str(home), spark=spark)
    p.feed("words", [{"w": "a"}])
    p.run()
    p.feed("words", [{"w": f"w{i}"} for i in range(2000)])
    filler = tmpfs / "filler"
    for room, where in (
        (0, "cannot write"),
        (16 * 1024, "stage 'count' epoch 2"),
    ):  # full; then room for small files only
        free = os.statvfs(tmpfs).f_bavail * os.statvfs(tmpfs).f_frsize
        with open(filler, "ab") as f:
            try:
                f.write(b"\0" * max(0, free - room))
            except OSError:
                pass  # full
        try:
            with pytest.raises(RuntimeStateError) as e:
                cbp.load(path, home=str(home), spark=spark).run()
            msg = str(e.value)
            assert "No space left on device" in msg and str(home) in msg and where in msg, msg
            assert {r["w"]: r["n"] for r in cbp.load(path, home=str(home), spark=spark).state("count")} == {"a": 1}
        finally:
            filler.unlink()
    again = cbp.load(path, home=str(home), spark=spark)
    again.run()
    state = {r["w"]: r["n"] for r in again.state("count")}
    assert state == {"a": 1, **{f"w{i}": 1 for i in range(2000)}}
    assert again.status()["interrupted"] == []
