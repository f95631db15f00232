"""The fixed cost of a small black-box epoch (issue 47): seconds, CPU, Spark jobs and py4j calls per epoch.

A word count (2 partitions) gets ``--epochs`` tiny increments in one warm process. For each epoch it
prints the wall time, the CPU time of this process and its children (the JVM, Spark's Python
workers: less sensitive than wall time to a busy machine), the Spark jobs it started
(``statusTracker``) and the py4j calls the driver made; then the median of each (the first epoch, a
warm-up, left out), for ``blackbox`` and ``direct``. ``--profile FILE`` writes cProfile stats of the
black-box epochs.

    .venv/bin/python bench/blackbox_epoch.py --epochs 8
"""

from __future__ import annotations

import argparse
import cProfile
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

YAML = """
pipeline: counter
flows:
  words: {{external: true, schema: {{w: string}}}}
stages:
  count:
    translator: {module}:count
    signed: true
    partitions: 2
    inputs: [{{flow: words, route_by: w}}]
    state: {{schema: {{w: string, n: int}}}}
"""
MODULE = """
def count(key, state, words, out):
    prev = next(state, None)
    n = sum(r["_diff"] for r in words) + (prev["n"] if prev else 0)
    if n:
        out.state.write({"w": key, "n": n})
"""


class Calls:
    """Counts the py4j commands the driver sends to ``spark``'s JVM."""

    def __init__(self, spark: Any) -> None:
        self.n = 0
        klass = type(
            spark.sparkContext._gateway._gateway_client
        )  # py4j's JavaClient (its base class's calls are its own)
        orig = klass.send_command

        def send(inner: Any, command: Any, *a: Any, **k: Any) -> Any:
            self.n += 1
            return orig(inner, command, *a, **k)

        klass.send_command = send


def tree_cpu() -> float:
    """CPU seconds of this process and its descendants (the JVM, Spark's Python workers), reaped ones included:
    a measure of an epoch's work that the machine's other load does not change much."""
    procs: dict[int, tuple[int, float]] = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                f = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            procs[int(d)] = (int(f[1]), sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK"))
    mine, total, grew = {os.getpid()}, 0.0, True
    while grew:
        grew = False
        for pid, (ppid, _) in procs.items():
            if ppid in mine and pid not in mine:
                mine.add(pid)
                grew = True
    for pid in mine:
        total += procs.get(pid, (0, 0.0))[1]
    return total


def run(spark: Any, mode: str, epochs: int, work: str, calls: Calls, prof: cProfile.Profile | None) -> list[tuple]:
    """``epochs`` one-increment epochs in ``mode``; (seconds, CPU seconds, jobs, py4j calls) of each."""
    from cbp.pipeline import Pipeline

    d = tempfile.mkdtemp(dir=work)
    mod = f"bbmod_{mode}"
    Path(d, f"{mod}.py").write_text(MODULE)
    sys.path.insert(0, d)
    y = Path(d, "p.yaml")
    y.write_text(textwrap.dedent(YAML.format(module=mod)))
    p = Pipeline(y, os.path.join(d, "home"), mode=mode, spark=spark)
    st = spark.sparkContext.statusTracker()
    out = []
    for e in range(epochs):
        p.feed("words", [{"w": f"w{(e * 3 + i) % 7}"} for i in range(4)] + [{"w": f"new{e}"}])
        jobs0 = len(st.getJobIdsForGroup(None))
        c0, cpu0 = calls.n, tree_cpu()
        t = time.perf_counter()
        if prof is not None and e > 0:
            prof.enable()
        p.run()
        if prof is not None:
            prof.disable()
        wall = time.perf_counter() - t
        out.append((wall, tree_cpu() - cpu0, len(st.getJobIdsForGroup(None)) - jobs0, calls.n - c0))
        o = out[-1]
        print(f"{mode} epoch {e}: {o[0]:.2f} s, {o[1]:.2f} CPU s, {o[2]} jobs, {o[3]} py4j calls", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--modes", default="blackbox,direct")
    ap.add_argument("--profile", help="write cProfile stats of the black-box epochs (after the first) here")
    a = ap.parse_args()
    os.environ.setdefault("CBP_SPARK_MASTER", "local[2,2]")
    os.environ.setdefault("CBP_DRIVER_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")
    from cbp.engine.driver.session import get_spark

    spark = get_spark()
    calls = Calls(spark)
    work = tempfile.mkdtemp(prefix="cbp-bb-")
    for mode in a.modes.split(","):
        prof = cProfile.Profile() if a.profile and mode == "blackbox" else None
        res = run(spark, mode, a.epochs, work, calls, prof)[1:]  # the first epoch warms up
        m = [statistics.median(x[i] for x in res) for i in range(4)]
        print(
            f"{mode}: median of {len(res)} epochs: {m[0]:.2f} s, {m[1]:.2f} CPU s, {m[2]:g} jobs, {m[3]:g} py4j calls"
        )
        if prof is not None:
            prof.dump_stats(a.profile)
    spark.stop()


if __name__ == "__main__":
    main()
