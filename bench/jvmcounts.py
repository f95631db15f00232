"""A running HotSpot JVM's own counters, read from its performance data file (what ``jstat`` reads), without
starting a process: methods the JIT compiled, the JIT's time, classes loaded (issues 48 and 49).

HotSpot (``-XX:+UsePerfData``, the default) maps ``/tmp/hsperfdata_<user>/<pid>``: a header (magic
``0xcafec0c0``, byte order, entry offset and count), then entries of a name and a value (``J``: a 64-bit
integer). ``jstat -compiler PID`` prints ``sun.ci.totalCompiles`` as *Compiled*, ``jstat -class`` prints
``java.cls.loadedClasses`` (+ ``java.cls.sharedLoadedClasses``) as *Loaded*; a ``jstat`` is itself a JVM
(about 0.3 CPU s), too dear to run after every epoch.

    >>> counters = jvm_counters(pid)                     # doctest: +SKIP
    >>> counters["sun.ci.totalCompiles"]                 # doctest: +SKIP
    51234
"""

from __future__ import annotations

import getpass
import os
import struct
import tempfile

__all__ = ["jvm_counters", "jit_counts", "WANTED"]

#: The counters :func:`jit_counts` gives, by the name it gives them.
WANTED = {
    "compiled": "sun.ci.totalCompiles",
    "classes": "java.cls.loadedClasses",
    "shared_classes": "java.cls.sharedLoadedClasses",
}
_MAGIC = 0xCAFEC0C0


def _path(pid: int) -> str:
    return os.path.join(tempfile.gettempdir(), f"hsperfdata_{getpass.getuser()}", str(pid))


def jvm_counters(pid: int) -> dict[str, int]:
    """Every 64-bit counter of JVM ``pid`` (this user's) by name; empty when it has no performance data."""
    try:
        with open(_path(pid), "rb") as f:
            data = f.read()
    except OSError:
        return {}
    if len(data) < 32 or struct.unpack_from(">I", data, 0)[0] != _MAGIC:
        return {}
    order = "<" if data[4] == 1 else ">"
    offset, entries = struct.unpack_from(order + "ii", data, 24)
    out: dict[str, int] = {}
    for _ in range(entries):
        length, name_at, vector, kind, _flags, _units, _var, data_at = struct.unpack_from(
            order + "iiicbbbi", data, offset
        )
        if length <= 0:
            break
        if kind == b"J" and vector == 0:
            end = data.index(b"\0", offset + name_at)
            out[data[offset + name_at : end].decode()] = struct.unpack_from(order + "q", data, offset + data_at)[0]
        offset += length
    return out


def jit_counts(pid: int) -> dict[str, float]:
    """:data:`WANTED` of JVM ``pid`` (classes: loaded from files and from the class archive) and ``jit_seconds``,
    the compiler threads' time compiling (``java.ci.totalTime``, wall time of each compilation); empty when
    unknown."""
    c = jvm_counters(pid)
    if not c:
        return {}
    out: dict[str, float] = {k: c.get(v, 0) for k, v in WANTED.items()}
    out["classes"] += out.pop("shared_classes")
    out["jit_seconds"] = c.get("java.ci.totalTime", 0) / max(c.get("sun.os.hrt.frequency", 1), 1)
    return out
