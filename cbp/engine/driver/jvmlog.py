"""Keep Spark's and the JVM's lines off the terminal unless asked for (``cbp --verbose``, ``CBP_VERBOSE=1``).

The driver JVM (and the Python workers it forks) write to the stderr they inherit. :func:`launch`
starts the JVM with a pipe instead; a daemon thread copies what arrives to this process's
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
import os
import re
import threading
from typing import Any

from ... import settings

__all__ = ["verbose", "launch", "filtered_stderr", "is_jvm_line", "recent"]

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
    return settings.current().verbose


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


def filtered_stderr() -> int:
    """The write end of a new pipe whose lines a daemon thread copies to this process's stderr,
    leaving out Spark's and the JVM's unless :func:`verbose`; give it to a child as its stderr
    and close it here."""
    read, write = os.pipe()
    threading.Thread(target=_copy, args=(read, os.dup(2), verbose()), name="cbp-jvm-stderr", daemon=True).start()
    return write


def launch(builder: Any) -> Any:
    """``builder.getOrCreate()`` (a PySpark ``SparkSession.Builder``), the driver JVM started with a
    pipe for its stderr whose lines a daemon thread filters onto this process's stderr for the rest
    of the process. Only the JVM (and the Python workers it forks) write into the pipe: this
    process's own stderr is left as it is."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is None and "PYSPARK_GATEWAY_PORT" not in os.environ:
        conf = SparkConf(loadDefaults=False)
        conf.setAll(list(builder._options.items()))  # what getOrCreate would pass to spark-submit
        write = filtered_stderr()
        try:
            gateway = launch_gateway(conf, popen_kwargs={"stderr": write})  # type: ignore[no-untyped-call]
        finally:
            os.close(write)
        SparkContext._ensure_initialized(gateway=gateway)
    return builder.getOrCreate()
