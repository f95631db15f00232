"""A class-data-sharing archive for the driver's JVM, so that a new process reaches its first
Spark job seconds sooner (internal; used by :func:`cbp.engine.driver.session.get_spark`).

Most of a SparkSession's start and of its first job is the JVM loading and verifying classes.
Java 13 and newer can write the classes a run loaded to an archive when the JVM exits
(``-XX:ArchiveClassesAtExit``), and map that archive when a later JVM starts
(``-XX:SharedArchiveFile``). cbp does both on its own: the first driver of a configuration records
its classes and, when its process exits, waits for the JVM to write them (~10 s, once); every
driver after it starts from the archive. On 2 cores this took a session's start from 4.2 s to
2.7 s and its first job from 1.9 s to 0.9 s.

An archive belongs to one Java and one class path (each jar's name, size and time), which make
its key; a JVM that finds it does not match ignores it (``-Xshare:auto``). A truncated archive is
another matter: the JVM dies of SIGBUS mapping it. So an archive is kept only once a second JVM
has mapped it whole (``-Xshare:on``), and used only at the size it had then. A JVM refuses to start
when asked to record without the JDK's own archive (a JDK without ``lib/server/classes.jsa``,
``-Xshare:off`` in ``JAVA_TOOL_OPTIONS``): the driver then starts again without, and the key is
marked ``.failed`` so that no later driver tries. The executors of a cluster whose workers have the
jars at the driver's paths (``CBP_JARS_ON_WORKERS``: ``scripts/cluster``'s, on this machine) have the
driver's class path, and start from its archive too (``session.executor_archive``). ``CBP_JVM_ARCHIVE=0`` turns
this off; ``CBP_JVM_CACHE`` says where archives are kept (default ``$XDG_CACHE_HOME/cbp/jvm``,
else ``~/.cache/cbp/jvm``).

    >>> _options("/c/k.jsa", dump=None)
    '-XX:SharedArchiveFile=/c/k.jsa -Xshare:auto -Xlog:cds=off,cds+dynamic=off'
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import socket
import time
from typing import TYPE_CHECKING

from ... import settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["abandon", "cache_dir", "driver_java_options", "finish_at_exit", "pid_alive", "recording", "refuse"]

_QUIET = "-Xlog:cds=off,cds+dynamic=off"  # the JVM lists every class it cannot archive on stdout otherwise
_STALE = 30 * 60  # a recording whose process has not finished in this long is abandoned
_KEEP = 4  # archives kept (other Java versions or class paths), newest first


def _machine() -> str:
    """This machine and PID namespace (a lock names its process by it: caches may be shared by
    hosts, or by containers of one host name)."""
    parts = [socket.gethostname().replace(" ", "_") or "-"]
    for path, read in (
        ("/proc/sys/kernel/random/boot_id", lambda p: open(p).read().strip()[:8]),
        ("/proc/self/ns/pid", os.readlink),
    ):
        try:
            parts.append(read(path).replace(" ", "_"))
        except OSError:
            pass
    return ":".join(parts)


_HOST = _machine()
_recording: list[tuple[str, str, str]] = []  # this process's recording, if it makes one


def recording() -> str | None:
    """The archive this process will write as it exits, if it records one."""
    return _recording[0][1] if _recording else None


def cache_dir() -> str:
    """Where archives are kept."""
    explicit = settings.current().jvm_cache
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "cbp", "jvm")


def _java_home() -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home and os.path.isfile(os.path.join(home, "bin", "java")):
        return os.path.realpath(home)
    java = shutil.which("java")
    return os.path.dirname(os.path.dirname(os.path.realpath(java))) if java else None


def _spark_jars() -> str | None:
    try:
        from pyspark.find_spark_home import _find_spark_home

        return os.path.join(_find_spark_home(), "jars")
    except Exception:  # noqa: BLE001 - no Spark home found: no archive
        return None


def _stamp(path: str) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return f"{path}:-"
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


def archive_key(extra_class_path: str) -> str | None:
    """The key of the archive for this Java and class path (Spark's jars, ``extra_class_path``, and
    the directories Spark's launcher adds); None when Java or Spark's jars cannot be found."""
    java, jars = _java_home(), _spark_jars()
    if java is None or jars is None or not os.path.isdir(jars):
        return None
    parts = [_stamp(os.path.join(java, "lib", "server", "libjvm.so")), _stamp(os.path.join(java, "lib", "modules"))]
    parts += [_stamp(os.path.join(jars, n)) for n in sorted(os.listdir(jars))]
    parts += [_stamp(p) for p in extra_class_path.split(os.pathsep) if p]
    parts += [
        f"{v}={os.environ.get(v, '')}"
        for v in ("SPARK_CONF_DIR", "HADOOP_CONF_DIR", "YARN_CONF_DIR", "SPARK_DIST_CLASSPATH")
    ]
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()[:24]


def _options(path: str, dump: str | None) -> str:
    if dump is not None:
        return f"-XX:ArchiveClassesAtExit={dump} {_QUIET}"
    return f"-XX:SharedArchiveFile={path} -Xshare:auto {_QUIET}"


def driver_java_options(extra_class_path: str) -> tuple[str, tuple[str, str, str] | None]:
    """The JVM options for a new driver (empty when off or impossible) and, when this driver is
    the one to record the archive, ``(recording, archive, lock)`` for :func:`finish_at_exit`."""
    if not settings.current().jvm_archive:
        return "", None
    key = archive_key(extra_class_path)
    if key is None:
        return "", None
    where = cache_dir()
    if any(c.isspace() or c in "'\"\\" for c in where):  # Spark splits the JVM's options at blanks
        return "", None
    path = os.path.join(where, f"{key}.jsa")
    if os.path.exists(path + ".failed"):  # this Java could not write or start with one: do not try on every start
        return "", None
    if _intact(path):
        return _options(path, None), None
    try:
        os.makedirs(where, exist_ok=True)
        lock = path + ".lock"
        if os.path.exists(lock) and _abandoned(lock):
            os.unlink(lock)
            _prune(where)
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except OSError:  # another process records it now, or the cache is not writable
        return "", None
    os.write(fd, f"{_HOST} {os.getpid()}".encode())
    os.close(fd)
    recording = f"{path}.{os.getpid()}.tmp"
    return _options(path, recording), (recording, path, lock)


def _abandoned(lock: str) -> bool:
    """Whether the recording that holds ``lock`` was given up: its process (on this machine) is gone,
    or it has held the lock longer than any recording takes. Its ``.tmp`` goes with it."""
    try:
        host, pid = open(lock, encoding="utf-8").read().split()
        gone = host == _HOST and not pid_alive(int(pid))
    except (OSError, ValueError):
        host, pid, gone = "", "", False
    if not gone and time.time() - os.path.getmtime(lock) <= _STALE:
        return False
    if gone:
        try:
            os.unlink(f"{lock[: -len('.lock')]}.{pid}.tmp")
        except OSError:
            pass
    return True


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (under any user)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, under another user
        return True
    return True


def refuse(extra_class_path: str, reason: str) -> None:
    """Mark this Java and class path as one that cannot use an archive (a driver did not start with
    one, and did without): later drivers start without trying."""
    key = archive_key(extra_class_path)
    if key is None:
        return
    try:
        os.makedirs(cache_dir(), exist_ok=True)
        with open(os.path.join(cache_dir(), f"{key}.jsa.failed"), "w", encoding="utf-8") as f:
            f.write(reason + "\n")
    except OSError:
        pass


def _intact(path: str) -> bool:
    """Whether ``path`` is an archive that was checked when it was made and has not changed size
    since: a JVM that maps a truncated archive dies of SIGBUS instead of ignoring it. One that is
    not is removed, to be recorded again."""
    try:
        with open(path + ".ok", encoding="utf-8") as f:
            if int(f.read().strip() or -1) == os.path.getsize(path):
                return True
    except (OSError, ValueError):
        if not os.path.exists(path):
            return False
    for bad in (path, path + ".ok"):
        try:
            os.unlink(bad)
        except OSError:
            pass
    return False


def _check(java: str, class_path: str, archive: str) -> bool:
    """Whether a JVM maps ``archive`` whole (``-Xshare:on`` fails rather than ignore it)."""
    import subprocess

    try:
        p = subprocess.run(
            [
                java,
                "-Xshare:on",
                f"-XX:SharedArchiveFile={archive}",
                "-Xlog:disable",
                "-XX:ErrorFile=/dev/null",
                "-cp",
                class_path,
                "-version",
            ],
            capture_output=True,
            timeout=120,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0


def finish_at_exit(spark: SparkSession, job: tuple[str, str, str]) -> None:
    """When this process exits: stop ``spark``, let the JVM write the archive, and keep it if the
    JVM exited cleanly and a second JVM maps it whole."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    system = jvm.java.lang.System
    java = os.path.join(system.getProperty("java.home"), "bin", "java")
    _recording.append(job)
    atexit.register(_finish, spark, *job, java, system.getProperty("java.class.path"))


def abandon(job: tuple[str, str, str]) -> None:
    """Give up recording (the session did not start): free the lock for the next process."""
    for leftover in (job[0], job[2]):
        try:
            os.unlink(leftover)
        except OSError:
            pass


def _finish(spark: SparkSession, recording: str, path: str, lock: str, java: str, class_path: str) -> None:
    from pyspark import SparkContext

    try:
        proc = getattr(SparkContext._gateway, "proc", None)
        if proc is None or proc.poll() is not None:
            return
        try:
            spark.stop()
        except Exception:  # noqa: BLE001 - the archive is written whatever the session's state
            pass
        proc.stdin.close()  # Spark's gateway exits on end of input; the JVM writes the archive as it exits
        proc.wait(timeout=120)
        if proc.returncode != 0:
            return
        if os.path.isfile(recording) and _check(java, class_path, recording):
            with open(path + ".ok", "w", encoding="utf-8") as f:
                f.write(str(os.path.getsize(recording)))
            os.replace(recording, path)
            _prune(os.path.dirname(path))
        else:
            with open(path + ".failed", "w", encoding="utf-8") as f:
                f.write("the JVM wrote no archive, or one that another JVM could not map\n")
    except Exception:  # noqa: BLE001 - an optimisation: never fail a process's exit
        pass
    finally:
        abandon((recording, path, lock))


def _prune(where: str) -> None:
    """Keep the newest few archives; remove recordings left by processes that died."""
    names = os.listdir(where)
    archives = sorted((os.path.join(where, n) for n in names if n.endswith(".jsa")), key=os.path.getmtime, reverse=True)
    for old in archives[_KEEP:]:
        for f in (old, old + ".ok"):
            os.unlink(f)
    for n in names:
        p = os.path.join(where, n)
        if n.endswith(".tmp") and time.time() - os.path.getmtime(p) > _STALE:
            os.unlink(p)
