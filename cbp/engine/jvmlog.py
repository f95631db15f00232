"""Keep Spark's and the JVM's lines off the terminal unless asked for (``cbp --verbose``, ``CBP_VERBOSE=1``).

The driver JVM (and the Python workers it forks) write to the stderr they inherit. :func:`launching`
gives the JVM being started a pipe instead; a daemon thread copies what arrives to this process's
stderr, leaving out what is Spark's or the JVM's: its start-up notices (``WARNING: Using incubator
modules``, ``Setting default log level``), log4j lines (``HH:mm:ss LEVEL Class: ...``, the layout of
cbp's ``log4j2.properties``) with the Java stack traces that follow them. Anything else (a
translator's own ``print(..., file=sys.stderr)`` in a Python worker) passes. With verbose on, every
line passes. The last lines left out are kept (:func:`recent`) for a report of a failure.

    >>> is_jvm_line("WARNING: Using incubator modules: jdk.incubator.vector"), is_jvm_line("my translator says hi")
    (True, False)
"""

from __future__ import annotations

import collections
import contextlib
import os
import re
import sys
import threading
from typing import Iterator

__all__ = ["verbose", "launching", "is_jvm_line", "recent"]

_JVM = re.compile(
    r"^(WARNING: (Using incubator modules|An illegal reflective|Please consider reporting|Use --illegal-access|"
    r"All illegal access|A terminally deprecated|sun\.misc\.Unsafe|Restricted methods)"
    r"|Setting default log level to|To adjust logging level use sc\.setLogLevel"
    r"|\d\d:\d\d:\d\d(\.\d+)? (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) "  # cbp's log4j layout
    r"|\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) "  # Spark's default layout
    r"|(TRACE|DEBUG|INFO|WARN|ERROR|FATAL) [A-Z][\w$]*: "
    r"|SLF4J\(?[A-Z]*\)?: |log4j:|OpenJDK .*VM warning|Picked up (JAVA_TOOL_OPTIONS|_JAVA_OPTIONS)"
    r"|\[[\d.]+s\]\[\w+\]\[[\w,+]+\])"  # unified JVM logging (-Xlog)
)
_MORE = re.compile(r"^(\s+at |\s+\.\.\. \d+ more|Caused by: |\s+Suppressed: |[\w$.]+(Exception|Error)(: |$))")
_RECENT: collections.deque[str] = collections.deque(maxlen=200)


def verbose() -> bool:
    """True when Spark's and the JVM's lines are to be shown (``CBP_VERBOSE`` set and not 0)."""
    return os.environ.get("CBP_VERBOSE", "") not in ("", "0")


def is_jvm_line(line: str) -> bool:
    """Whether ``line`` is one of Spark's or the JVM's own (see the module docstring)."""
    return bool(_JVM.match(line))


def recent() -> list[str]:
    """The last (up to 200) lines left out, oldest first."""
    return list(_RECENT)


def _copy(fd: int, out: int, everything: bool) -> None:
    dropping = False
    with os.fdopen(fd, "rb", buffering=0) as pipe:
        buf = b""
        while True:
            chunk = pipe.read(65536)
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for raw in lines:
                line = raw.decode("utf-8", "replace")
                if not everything:
                    dropping = is_jvm_line(line) or (dropping and bool(_MORE.match(line)))
                    if dropping:
                        _RECENT.append(line)
                        continue
                try:
                    os.write(out, raw + b"\n")
                except OSError:
                    pass


@contextlib.contextmanager
def launching() -> Iterator[None]:
    """While this block starts a JVM, its stderr (fd 2) is a pipe whose lines are filtered onto the
    real stderr by a daemon thread for the rest of the process; this process's fd 2 is restored after."""
    sys.stderr.flush()
    read, write = os.pipe()
    out = os.dup(2)
    saved = os.dup(2)
    threading.Thread(target=_copy, args=(read, out, verbose()), name="cbp-jvm-stderr", daemon=True).start()
    os.dup2(write, 2)
    os.close(write)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
