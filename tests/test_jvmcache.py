"""The driver JVM's class archive (cbp.engine.driver.jvmcache): the first driver of a Java and class path
records it as its process exits, the drivers after it start from it, and a driver never waits
for another's recording."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cbp.engine.driver import jvmcache

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.classic(reason="the driver JVM's class archive: a Connect client starts no JVM (nor has Java)")

# a new driver: its JVM options, and how many classes its JVM took from a shared archive
# (HotSpot's own counter, read with jcmd), after one job
_DRIVER = """
import subprocess, sys
from pyspark import SparkContext
from cbp.engine.driver.session import get_spark
spark = get_spark()
assert spark.range(10).count() == 10
pid = SparkContext._gateway.proc.pid
counters = subprocess.run(["jcmd", str(pid), "PerfCounter.print"], capture_output=True, text=True, check=True).stdout
shared = [line.split("=")[1] for line in counters.splitlines() if line.startswith("java.cls.sharedLoadedClasses=")]
print("OPTIONS", spark.sparkContext.getConf().get("spark.driver.extraJavaOptions"))
print("SHARED", shared[0])
"""


def _driver(cache: Path, **env: str) -> dict[str, str]:
    e = {**os.environ, "CBP_JVM_CACHE": str(cache), "CBP_SPARK_MASTER": "local[1]", **env}
    e.pop("CBP_SPARK_CONF", None)
    p = subprocess.run([sys.executable, "-c", _DRIVER], cwd=ROOT, env=e, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    return dict(line.split(" ", 1) for line in p.stdout.splitlines() if line.startswith(("OPTIONS", "SHARED")))


@pytest.mark.skipif(shutil.which("jcmd") is None, reason="needs the JDK's jcmd to read the JVM's class counters")
def test_the_first_driver_records_the_archive_and_the_next_one_starts_from_it(tmp_path):
    cache = tmp_path / "jvm"
    first = _driver(cache)
    assert "ArchiveClassesAtExit" in first["OPTIONS"]
    archives = sorted(cache.iterdir())
    assert [a.suffix for a in archives] == [".jsa", ".ok"], archives  # no lock, no recording left behind
    assert int(archives[1].read_text()) == archives[0].stat().st_size  # checked whole by a second JVM at this size
    made = archives[0].stat().st_mtime_ns

    second = _driver(cache)
    assert f"-XX:SharedArchiveFile={archives[0]}" in second["OPTIONS"]
    # the JVM really took Spark's classes from it: the first driver, which recorded, mapped only the JDK's
    # own archive (~1,300 classes), as a driver without cbp's archive does
    assert int(second["SHARED"]) > 3 * int(first["SHARED"]), (second, first)
    assert archives[0].stat().st_mtime_ns == made and sorted(cache.iterdir()) == archives


def test_the_key_follows_java_and_the_class_path(tmp_path):
    jar = tmp_path / "extra.jar"
    jar.write_bytes(b"PK" + b"\0" * 20)
    key = jvmcache.archive_key(str(jar))
    assert key is not None and key == jvmcache.archive_key(str(jar))
    assert key != jvmcache.archive_key("")
    jar.write_bytes(b"PK" + b"\0" * 21)  # the jar changed: the JVM would refuse the old archive
    assert jvmcache.archive_key(str(jar)) != key


def test_one_driver_records_at_a_time_and_a_dead_recorder_is_taken_over(tmp_path, monkeypatch):
    monkeypatch.setenv("CBP_JVM_CACHE", str(tmp_path))
    monkeypatch.delenv("CBP_JVM_ARCHIVE", raising=False)
    options, job = jvmcache.driver_java_options("")
    assert job is not None and f"-XX:ArchiveClassesAtExit={job[0]}" in options
    assert jvmcache.driver_java_options("") == ("", None)  # another driver meanwhile: no archive, no wait
    old = time.time() - 3600
    os.utime(job[2], (old, old))  # its process died an hour ago
    options2, job2 = jvmcache.driver_java_options("")
    assert job2 is not None and "ArchiveClassesAtExit" in options2
    jvmcache.abandon(job2)
    assert not list(tmp_path.iterdir())

    # a recorder killed a moment ago (its pid gone on this machine): taken over at once, its .tmp removed
    _, job4 = jvmcache.driver_java_options("")
    dead = subprocess.Popen(["true"])
    dead.wait()
    Path(job4[2]).write_text(f"{jvmcache._HOST} {dead.pid}")
    left = Path(f"{job4[1]}.{dead.pid}.tmp")
    left.write_bytes(b"half an archive")
    _, job5 = jvmcache.driver_java_options("")
    assert job5 is not None and not left.exists()
    assert jvmcache.driver_java_options("") == ("", None)  # this one is alive: its lock holds
    jvmcache.abandon(job5)
    assert not list(tmp_path.iterdir())

    Path(job[1]).write_bytes(b"archive")
    Path(job[1] + ".ok").write_text("7")
    options3, job3 = jvmcache.driver_java_options("")
    assert job3 is None and f"-XX:SharedArchiveFile={job[1]}" in options3
    monkeypatch.setenv("CBP_JVM_ARCHIVE", "0")
    assert jvmcache.driver_java_options("") == ("", None)


def test_a_java_that_wrote_no_archive_is_not_asked_again(tmp_path, monkeypatch):
    monkeypatch.setenv("CBP_JVM_CACHE", str(tmp_path))
    monkeypatch.delenv("CBP_JVM_ARCHIVE", raising=False)
    _, job = jvmcache.driver_java_options("")
    assert job is not None
    jvmcache.abandon(job)
    Path(job[1] + ".failed").write_text("no archive\n")
    assert jvmcache.driver_java_options("") == ("", None)
    Path(job[1]).write_bytes(b"archive")  # a driver did not start with this archive and did without: not used again
    Path(job[1] + ".ok").write_text("7")
    assert jvmcache.driver_java_options("") == ("", None)


def test_an_archive_not_checked_whole_or_since_cut_short_is_never_handed_to_a_jvm(tmp_path, monkeypatch):
    """A JVM that maps a truncated archive dies (SIGBUS) instead of ignoring it."""
    monkeypatch.setenv("CBP_JVM_CACHE", str(tmp_path))
    monkeypatch.delenv("CBP_JVM_ARCHIVE", raising=False)
    _, job = jvmcache.driver_java_options("")
    jvmcache.abandon(job)
    archive = Path(job[1])
    for ok in (None, "4096"):  # never checked; checked at another size
        archive.write_bytes(b"x" * 1000)
        if ok is not None:
            Path(job[1] + ".ok").write_text(ok)
        options, again = jvmcache.driver_java_options("")
        assert again is not None and "SharedArchiveFile" not in options  # recorded anew instead
        assert not archive.exists() and not Path(job[1] + ".ok").exists()
        jvmcache.abandon(again)


def test_a_cache_whose_path_spark_would_split_is_not_used(tmp_path, monkeypatch):
    """Spark splits ``spark.driver.extraJavaOptions`` at blanks: such a path would break the JVM's start."""
    monkeypatch.setenv("CBP_JVM_CACHE", str(tmp_path / "a b"))
    monkeypatch.delenv("CBP_JVM_ARCHIVE", raising=False)
    assert jvmcache.driver_java_options("") == ("", None)
    assert not (tmp_path / "a b").exists()


def test_a_java_that_cannot_record_still_starts_a_driver_and_is_not_asked_again(tmp_path):
    """Asked to record without the JDK's own archive (here ``-Xshare:off`` from JAVA_TOOL_OPTIONS,
    as on a JDK built without one), a JVM refuses to start at all."""
    cache = tmp_path / "jvm"
    env = {
        **os.environ,
        "CBP_JVM_CACHE": str(cache),
        "CBP_SPARK_MASTER": "local[1]",
        "JAVA_TOOL_OPTIONS": "-Xshare:off",
    }
    env.pop("CBP_SPARK_CONF", None)
    # the driver started (its JVM refused, then started again without), then what the next driver of this
    # Java and class path is handed, asked in the same process: no archive to record or map
    run = (
        "from cbp.engine.driver.session import get_spark; from cbp.engine.driver import jvmcache; s = get_spark(); "
        "print('COUNT', s.range(7).count()); "
        "print('NEXT', jvmcache.driver_java_options(s.sparkContext.getConf().get('spark.driver.extraClassPath', '')))"
    )
    p = subprocess.run([sys.executable, "-c", run], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "COUNT 7" in p.stdout, p.stderr[-3000:]
    assert [f.name.split(".", 1)[1] for f in cache.iterdir()] == ["jsa.failed"]
    assert "NEXT ('', None)" in p.stdout.splitlines(), p.stdout
