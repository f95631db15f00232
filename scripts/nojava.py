"""An environment in which no Java is found, for running cbp's Spark Connect client as on a machine
without a JVM (``bash scripts/test --connect``, ``tests/test_connect.py``): every ``PATH`` directory
that holds ``java`` is replaced by one directory of links to its other programs (a JDK's programs left
out: ``java``, ``javac``, ``jar``, ``keytool``, ...), and ``JAVA_HOME`` / ``SPARK_HOME`` are unset.

    python scripts/nojava.py SHADOW_DIR      # prints the PATH; SHADOW_DIR receives the links
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path


def _jvm_program(path: Path) -> bool:
    """Whether ``path`` is a JDK's or JRE's program: ``java`` itself, or (through links or not) a file of a
    JDK's directory, one whose ``java`` is a file and not a link (``/usr/bin/keytool`` ->
    ``/usr/lib/jvm/.../bin/keytool``), or of a ``jvm`` tree. ``/usr/bin/sh`` -> ``dash`` is not one, although
    ``/usr/bin`` holds a link named ``java``: its programs stay on the ``PATH``."""
    if path.name == "java":
        return True
    real = path.resolve()
    java = real.parent / "java"
    return "jvm" in real.parts or (java.is_file() and not java.is_symlink())


def path_without_java(path: str, shadow: Path) -> str:
    """``path`` with every directory that holds ``java`` replaced by ``shadow`` (made here: links to those
    directories' other programs, the first directory's program winning as on ``path``)."""
    shadow.mkdir(parents=True, exist_ok=True)
    out: list[str] = []
    for d in path.split(os.pathsep):
        if not d or not (Path(d) / "java").exists():
            out.append(d)
            continue
        for program in sorted(Path(d).iterdir()):
            link = shadow / program.name
            if not _jvm_program(program) and not link.exists() and not link.is_symlink():
                link.symlink_to(program)
        if str(shadow) not in out:
            out.append(str(shadow))
    return os.pathsep.join(d for d in out if d)


def env_without_java(env: Mapping[str, str], shadow: Path) -> dict[str, str]:
    """``env`` with ``PATH`` from :func:`path_without_java` and no ``JAVA_HOME`` or ``SPARK_HOME``."""
    out = {k: v for k, v in env.items() if k not in ("JAVA_HOME", "SPARK_HOME")}
    out["PATH"] = path_without_java(env.get("PATH", os.defpath), shadow)
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python scripts/nojava.py SHADOW_DIR")
    print(path_without_java(os.environ.get("PATH", os.defpath), Path(sys.argv[1]).resolve()))
