"""The fixed cost of a small black-box epoch (issue 47): seconds, Spark jobs and py4j calls per epoch.

A word count (2 partitions) gets ``--epochs`` tiny increments in one warm process; each epoch's wall
time, the Spark jobs it started (``statusTracker``) and the py4j calls the driver made are printed,
then the median of each, for ``blackbox`` and ``direct``. ``--profile FILE`` writes cProfile stats
of the black-box epochs.

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
    """Counts py4j commands sent by the driver."""

    def __init__(self) -> None:
        from py4j import clientserver, java_gateway

        self.n = 0
        for mod, cls in ((java_gateway, "GatewayClient"), (clientserver, "JavaClient")):
            klass = getattr(mod, cls, None)
            if klass is None:
                continue
            orig = klass.send_command

            def send(inner: Any, command: Any, *a: Any, _orig: Any = orig, **k: Any) -> Any:
                self.n += 1
                return _orig(inner, command, *a, **k)

            klass.send_command = send


def run(spark: Any, mode: str, epochs: int, work: str, calls: Calls, prof: cProfile.Profile | None) -> list[tuple]:
    """``epochs`` one-increment epochs in ``mode``; (seconds, jobs, py4j calls) of each."""
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
        p.feed("words", [{"w": f"w{(e * 3 + i) % 7}"} for i in range(5)])
        jobs0 = len(st.getJobIdsForGroup(None))
        c0 = calls.n
        t = time.perf_counter()
        if prof is not None and e > 0:
            prof.enable()
        p.run()
        if prof is not None:
            prof.disable()
        out.append((time.perf_counter() - t, len(st.getJobIdsForGroup(None)) - jobs0, calls.n - c0))
        print(f"{mode} epoch {e}: {out[-1][0]:.2f} s, {out[-1][1]} jobs, {out[-1][2]} py4j calls", flush=True)
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
    calls = Calls()
    work = tempfile.mkdtemp(prefix="cbp-bb-")
    for mode in a.modes.split(","):
        prof = cProfile.Profile() if a.profile and mode == "blackbox" else None
        res = run(spark, mode, a.epochs, work, calls, prof)[1:]  # the first epoch warms up
        med = [statistics.median(x[i] for x in res) for i in range(3)]
        print(f"{mode}: median of {len(res)} epochs: {med[0]:.2f} s, {med[1]:g} jobs, {med[2]:g} py4j calls")
        if prof is not None:
            prof.dump_stats(a.profile)
    spark.stop()


if __name__ == "__main__":
    main()
