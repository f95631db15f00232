"""The CPU seconds a command costs, with every process it starts: Spark JVMs and Python workers included.

    .venv/bin/python scripts/cputree.py -- .venv/bin/python -m pytest -q -n 0 tests/test_crash.py

prints ``cputree: wall W s, cpu C s over N processes, exit E`` on stderr and exits with the command's code.
A driver JVM that pyspark starts is never waited for (``time``'s children's times miss it), and where no
cgroup accounts CPU (``cpuacct.usage`` reads 0 in some sandboxes) this is how the suite's cuts are measured
(docs/concepts/test-suite.md): the processes are found by a marker in their environment, which every child
inherits (also one reparented to init), and their user + system times are sampled every 0.25 s, so a
process that lives less than that is missed (the command itself is measured exactly when it ends). CPU
seconds, unlike wall time, hardly move with the load of other work on a shared machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid


def _sample(needle: bytes, seen: dict[tuple[int, int], float], tick: int) -> None:
    """Each marked process's user + system seconds so far, by (pid, start time)."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle not in f.read():
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone, or not ours to read
            continue
        seen[(int(pid), int(fields[19]))] = (int(fields[11]) + int(fields[12])) / tick


def main(argv: list[str]) -> int:
    if "--" not in argv or argv.index("--") == len(argv) - 1:
        print("usage: cputree.py -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    tag = uuid.uuid4().hex
    needle = f"CPUTREE_TAG={tag}".encode()
    tick = os.sysconf("SC_CLK_TCK")
    seen: dict[tuple[int, int], float] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv[argv.index("--") + 1 :], env={**os.environ, "CPUTREE_TAG": tag})
    while True:
        _sample(needle, seen, tick)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        time.sleep(0.25)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    # the command itself (and the children it waited for), exactly; the others as last sampled
    direct = [k for k in seen if k[0] == proc.pid]
    own = max(usage.ru_utime + usage.ru_stime, sum(seen.pop(k) for k in direct))
    cpu = own + sum(seen.values())
    print(
        f"cputree: wall {wall:.1f} s, cpu {cpu:.1f} s over {len(seen) + 1} processes, exit {code}",
        file=sys.stderr,
    )
    proc.returncode = code  # reaped here: Popen must not wait for it again
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
