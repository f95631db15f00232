#!/usr/bin/env python
"""A fresh ``cbp run`` from a client without a JVM against a classic driver's (issue 49's benchmark):
what a new process (an Airflow task, say) pays for one small epoch.

URLCount (``flows/url_count.yaml``) on two homes, one per side; each round feeds the same 1,000 records
to both with ``cbp feed`` (no Spark) and times, as whole processes, side by side (their order alternating
from round to round):

- **classic**: ``cbp run`` from ``.venv`` (pyspark with its driver JVM, started by the process);
- **client**: ``cbp --remote URL run`` from ``.venv-client`` (pyspark-client: no py4j, no jars) with no
  Java on ``PATH`` (``scripts/nojava.py``), against a Spark Connect server that is already running
  (``--remote``; without it, one is started by ``scripts/connect`` for the run and stopped after).

Prints the median wall and CPU seconds (the process and its children: the classic side's driver JVM is one)
of each side.

    .venv/bin/python bench/client_fresh_run.py --rounds 3
    .venv/bin/python bench/client_fresh_run.py --remote sc://127.0.0.1:15002
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
YAML = ROOT / "flows" / "url_count.yaml"
CLIENT = ROOT / ".venv-client" / "bin" / "python"
CLASSIC = ROOT / ".venv" / "bin" / "python"


def _session_cpu(sid: int, seen: dict[int, float]) -> None:
    """Record in ``seen`` the CPU seconds of every process of session ``sid`` now (pid -> user + system)."""
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # field 6 of stat: the session id
            seen[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / tick  # utime, stime


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Run ``cmd`` in a session of its own; its wall seconds and the CPU seconds of its processes (the
    classic side's driver JVM is one of them: sampled from /proc while they run, a JVM being killed at
    exit rather than waited for, so ``getrusage`` would miss it)."""
    seen: dict[int, float] = {}
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    while proc.poll() is None:
        _session_cpu(proc.pid, seen)
        time.sleep(0.05)
    wall = time.perf_counter() - t0
    _, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{err[-3000:]}")
    return wall, sum(seen.values())


def nojava_env(shadow: Path) -> dict[str, str]:
    """This environment with no Java on PATH (scripts/nojava.py)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from nojava import env_without_java

    return env_without_java(os.environ, shadow)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--remote", default="", help="a running Spark Connect server (default: one started here)")
    args = ap.parse_args()
    if not CLIENT.exists():
        sys.exit("no .venv-client: run 'bash scripts/client-env'")
    tmp = Path(tempfile.mkdtemp(prefix="cbp-client-fresh-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CBP_REMOTE", None)
    env.pop("SPARK_REMOTE", None)
    state = {**env, "CBP_CONNECT_STATE": str(tmp / "server")}
    remote = args.remote
    if not remote:
        subprocess.run([str(CLASSIC), "scripts/connect.py", "start"], env=state, cwd=ROOT, check=True)
        remote = json.loads((tmp / "server" / "server.json").read_text())["url"]
    client_env = {**nojava_env(tmp / "bin"), "PYTHONPATH": str(ROOT)}
    client_env.pop("CBP_REMOTE", None)
    sides = {
        "classic": ([str(CLASSIC), "-m", "cbp.cli"], env),
        "client": ([str(CLIENT), "-m", "cbp.cli", "--remote", remote], client_env),
    }
    times: dict[str, list[tuple[float, float]]] = {s: [] for s in sides}
    rng = random.Random(1)
    try:
        for r in range(args.rounds):
            feed = tmp / f"feed{r}.jsonl"
            feed.write_text(
                "".join(json.dumps({"url": f"http://h{rng.randint(0, 99)}/p{i}"}) + "\n" for i in range(1000))
            )
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for side in order:
                cli, side_env = sides[side]
                home = str(tmp / f"home-{side}")
                subprocess.run(
                    [str(CLASSIC), "-m", "cbp.cli", "feed", str(YAML), "urls", str(feed), "--home", home],
                    env=env,
                    cwd=ROOT,
                    check=True,
                    capture_output=True,
                )
                times[side].append(timed([*cli, "run", str(YAML), "--home", home], side_env))
                print(
                    f"round {r + 1} {side}: {times[side][-1][0]:.2f} s wall, {times[side][-1][1]:.2f} s CPU", flush=True
                )
    finally:
        if not args.remote:
            subprocess.run([str(CLASSIC), "scripts/connect.py", "stop"], env=state, cwd=ROOT, capture_output=True)
    print(f"\nfresh 'cbp run' (one epoch of 1,000 records, URLCount), median of {args.rounds}:")
    print("| side | wall s | CPU s (process + children) |\n| --- | --- | --- |")
    for side, got in times.items():
        print(f"| {side} | {statistics.median(w for w, _ in got):.2f} | {statistics.median(c for _, c in got):.2f} |")


if __name__ == "__main__":
    main()
