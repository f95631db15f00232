#!/usr/bin/env python
"""cbp on a classic driver and on a Spark Connect server, side by side in one run (issue 49).

Four measurements, each mode in a process of its own (a Connect session cannot share a process with a
classic one):

1. **Small epochs, local** (``classic``, ``connect``): URLCount (``flows/url_count.yaml``, direct mode),
   ``--keys`` state keys built in one epoch, then ``--epochs`` epochs of ``--increment`` records (half
   stored keys, half new): median epoch time and state-cache hits, a classic ``local[2]`` driver against
   a Connect server in front of ``local[2]``.
2. **Placement on the two-worker cluster** (``--cluster``; ``scripts/cluster`` with its state in
   ``--cluster-state``): the same epochs on a classic driver (preferred locations), on a Connect server in
   front of the cluster without placement (``CBP_PLACEMENT=0``) and with the anchor
   (``cbp.engine.driver.anchor``): partition moves per partition-epoch (each task's executor, from its
   result row), state-cache hits, median epoch.
3. **Python daemons on a long-lived server**: the server's child processes before and after 20 ``cbp``
   commands (5 x feed, run, status, output) with cbp's shared session, and after 4 ``cbp run`` with a
   session per process (``CBP_CONNECT_SESSION=process``).
4. **A fresh ``cbp run``** (one small epoch, the whole command timed): a client against the Connect
   server (from ``.venv-client``, the JVM-less ``pyspark-client`` environment, if it exists; else this
   venv, said in the output) against a classic driver's (a JVM started by the command).

Output: a table on stdout and in ``bench/out/connect_epochs.md``, ``bench/out/connect_epochs.json``,
and the plot ``docs/benchmarks/connect.png``.

    .venv/bin/python bench/connect_epochs.py                 # 1, 3, 4 (local servers only)
    .venv/bin/python bench/connect_epochs.py --cluster       # and 2, on scripts/cluster's two workers
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
PLOT = ROOT / "docs" / "benchmarks" / "connect.png"


def child(mode: str, url: str, keys: int, increment: int, epochs: int, home: str) -> dict[str, Any]:
    """One mode's run (in its own process): build the home, time ``epochs`` small epochs, note which
    executor ran each partition (the tasks' result rows)."""
    sys.path.insert(0, str(ROOT / "flows"))
    import cbp
    from cbp.engine.driver import job

    ran: list[dict[int, str]] = []
    decode = job.decode_results

    def noted(table: Any) -> Any:
        out = decode(table)
        ran.append({int(r.part): str(r.executor) for r in out})
        return out

    job.decode_results = noted  # type: ignore[assignment]
    if mode.startswith("connect"):
        from cbp.engine.driver.session import connect_spark

        spark = connect_spark(url)
    else:
        from cbp.engine.driver.session import get_spark

        spark = get_spark()
    p = cbp.Pipeline(str(ROOT / "flows" / "url_count.yaml"), home, spark=spark)
    p.feed("urls", [{"url": f"u{i}"} for i in range(keys)])
    p.run()
    ran.clear()
    seconds, hits, lookups = [], 0, 0
    for e in range(epochs):
        half = increment // 2
        p.feed(
            "urls",
            [{"url": f"u{(e * half + i) % keys}"} for i in range(half)] + [{"url": f"n{e}-{i}"} for i in range(half)],
        )
        t0 = time.perf_counter()
        reps = p.run()
        seconds.append(time.perf_counter() - t0)
        hits += sum(r.cache_hits for r in reps)
        lookups += sum(r.cache_lookups for r in reps)
    moves = sum(1 for a, b in zip(ran, ran[1:]) for q in b if a.get(q) != b[q])
    return {
        "mode": mode,
        "seconds": seconds,
        "median": statistics.median(seconds),
        "cache_hits": hits,
        "cache_lookups": lookups,
        "moves": moves,
        "partition_epochs": sum(len(b) for b in ran[1:]),
        "executors": sorted({e for r in ran for e in r.values()}),
    }


def _script(name: str, state: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, f"CBP_{'CONNECT' if name == 'connect' else 'CLUSTER'}_STATE": state}
    cmd = [sys.executable, str(ROOT / "scripts" / f"{name}.py"), *args]
    return subprocess.run(cmd, env=env, check=check, capture_output=True, text=True)


def _server(state: str, master: str = "local[2]") -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    _script("connect", state, "start", "--port", str(port), "--master", master)
    return f"sc://127.0.0.1:{port}"


def _daemons(state: str) -> int:
    pid = Path(state, "server.pid").read_text().strip()
    ps = subprocess.run(["ps", "--ppid", pid, "--no-headers", "-o", "pid"], capture_output=True, text=True)
    return len(ps.stdout.split())


def _mode(
    mode: str, url: str, args: argparse.Namespace, work: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--child", mode, "--home", os.path.join(work, mode), "--url", url]
    cmd += ["--keys", str(args.keys), "--increment", str(args.increment), "--epochs", str(args.epochs)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})})
    if out.returncode:
        sys.exit(f"{mode} failed:\n{out.stderr[-3000:]}")
    r: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    print(
        f"{mode:24} median epoch {r['median']:.3f} s  cache hits {r['cache_hits']}/{r['cache_lookups']}  "
        f"moves {r['moves']}/{r['partition_epochs']}  epochs {' '.join(f'{s:.2f}' for s in r['seconds'])}",
        flush=True,
    )
    return r


def _cbp(python: str, args: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    run = subprocess.run([python, "-m", "cbp.cli", *args], env=env, capture_output=True, text=True, check=False)
    if run.returncode:
        sys.exit(f"cbp {' '.join(args)} failed:\n{run.stderr[-3000:]}")
    return time.perf_counter() - t0


def _cli_env(work: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "flows")])}
    env["XDG_CACHE_HOME"] = os.path.join(work, "cache")  # the shared session ids of this run only
    for name in ("CBP_REMOTE", "SPARK_REMOTE", "CBP_CONNECT_SESSION", "CBP_JVM_CACHE"):
        env.pop(name, None)
    return env


def daemons_and_fresh_runs(url: str, state: str, work: str) -> dict[str, Any]:
    """Measurements 3 and 4 against the local server at ``url``."""
    yaml = str(ROOT / "flows" / "url_count.yaml")
    env = _cli_env(work)
    feed = Path(work, "feed.jsonl")
    feed.write_text("".join(json.dumps({"url": f"u{i % 50}"}) + "\n" for i in range(200)))
    home = os.path.join(work, "cli-home")
    py = sys.executable
    before = _daemons(state)
    for _ in range(5):
        _cbp(py, ["feed", yaml, "urls", str(feed), "--home", home], env)
        _cbp(py, ["--remote", url, "run", yaml, "--home", home], env)
        _cbp(py, ["status", yaml, "--home", home], env)
        _cbp(py, ["output", yaml, "counts", "--home", home], env)
    shared = _daemons(state)
    for _ in range(4):
        _cbp(py, ["feed", yaml, "urls", str(feed), "--home", home], env)
        _cbp(py, ["--remote", url, "run", yaml, "--home", home], {**env, "CBP_CONNECT_SESSION": "process"})
    per_process = _daemons(state)
    client = ROOT / ".venv-client" / "bin" / "python"
    client_py = str(client) if client.exists() else py
    fresh: dict[str, list[float]] = {"connect": [], "classic": []}
    for i in range(3):
        for mode in ("connect", "classic"):
            h = os.path.join(work, f"fresh-{mode}-{i}")
            _cbp(py, ["feed", yaml, "urls", str(feed), "--home", h], env)
            if mode == "connect":
                fresh[mode].append(_cbp(client_py, ["--remote", url, "run", yaml, "--home", h], env))
            else:
                fresh[mode].append(_cbp(py, ["run", yaml, "--home", h], {**env, "CBP_SPARK_MASTER": "local[2]"}))
    out = {
        "daemons": {"before": before, "after_20_shared": shared, "after_4_per_process": per_process},
        "fresh_run": {k: statistics.median(v) for k, v in fresh.items()},
        "fresh_runs": fresh,
        "client": "pyspark-client (.venv-client)" if client.exists() else "the main venv (no .venv-client)",
    }
    print(json.dumps(out), flush=True)
    return out


def cluster_modes(args: argparse.Namespace, work: str) -> list[dict[str, Any]]:
    """Measurement 2: classic, then Connect without and with the anchor, on scripts/cluster's workers
    (one application at a time: each takes both workers' cores)."""
    state = args.cluster_state
    was_up = _script("cluster", state, "status", check=False).returncode == 0
    _script("cluster", state, "up")
    try:
        env: dict[str, str] = {}
        for line in Path(state, "env.sh").read_text().splitlines():
            if line.startswith("export ") and "PYTHONPATH" not in line:
                k, _, v = line[len("export ") :].partition("=")
                env[k] = v.strip("'")
        results = [_mode("classic-cluster", "", args, work, env)]
        server = os.path.join(work, "cluster-server")
        url = _server(server, env["CBP_SPARK_MASTER"])
        try:
            results.append(_mode("connect-cluster-unplaced", url, args, work, {"CBP_PLACEMENT": "0"}))
            results.append(_mode("connect-cluster", url, args, work))
        finally:
            _script("connect", server, "stop", check=False)
        return results
    finally:
        if not was_up:
            _script("cluster", state, "down", check=False)


def report(results: list[dict[str, Any]], extra: dict[str, Any]) -> str:
    """The markdown table of a run."""
    lines = [
        "| mode | median epoch (s) | state-cache hits | partition moves |",
        "| --- | --- | --- | --- |",
    ]
    for r in results:
        moves = f"{r['moves']}/{r['partition_epochs']}" if r["mode"].endswith(("cluster", "unplaced")) else "-"
        lines.append(f"| {r['mode']} | {r['median']:.3f} | {r['cache_hits']}/{r['cache_lookups']} | {moves} |")
    d, f = extra["daemons"], extra["fresh_run"]
    lines += [
        "",
        f"Server Python daemons: {d['before']} before, {d['after_20_shared']} after 20 cbp commands (shared "
        f"session), {d['after_4_per_process']} after 4 more runs with a session per process.",
        f"Fresh `cbp run` (one small epoch, whole command, median of 3): {f['connect']:.2f} s against the Connect "
        f"server ({extra['client']}), {f['classic']:.2f} s with a classic driver.",
    ]
    return "\n".join(lines) + "\n"


def plot(results: list[dict[str, Any]]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(10, 3.6))
    names = [r["mode"] for r in results]
    ax[0].barh(names, [r["median"] for r in results], color="tab:blue")
    ax[0].set_xlabel("median small epoch (s)")
    ax[1].barh(names, [r["cache_hits"] / max(r["cache_lookups"], 1) for r in results], color="tab:green")
    ax[1].set_xlabel("state-cache hit rate")
    ax[1].set_yticks([])
    for i, r in enumerate(results):
        if r["mode"].endswith(("cluster", "unplaced")):
            ax[1].text(0.02, i, f"moves {r['moves']}/{r['partition_epochs']}", va="center", color="white")
    fig.suptitle("URLCount small epochs: classic driver vs Spark Connect (bench/connect_epochs.py)")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=10_000)
    ap.add_argument("--increment", type=int, default=1_000)
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--cluster", action="store_true", help="also measure placement on scripts/cluster's workers")
    ap.add_argument("--cluster-state", default=str(ROOT / "state" / "cluster"), help="scripts/cluster's state")
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--home", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.url or "", args.keys, args.increment, args.epochs, args.home)))
        return
    work = tempfile.mkdtemp(prefix="cbp-connect-bench-")
    results = [_mode("classic", "", args, work, {"CBP_SPARK_MASTER": "local[2]"})]
    state = os.path.join(work, "server")
    url = _server(state)
    try:
        results.append(_mode("connect", url, args, work))
        extra = daemons_and_fresh_runs(url, state, work)
    finally:
        _script("connect", state, "stop", check=False)
    if args.cluster:
        results += cluster_modes(args, work)
    table = report(results, extra)
    print(table)
    OUT.mkdir(exist_ok=True)
    (OUT / "connect_epochs.md").write_text(table)
    (OUT / "connect_epochs.json").write_text(json.dumps({"args": vars(args), "results": results, **extra}, indent=1))
    plot(results)


if __name__ == "__main__":
    main()
