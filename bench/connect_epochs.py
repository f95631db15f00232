#!/usr/bin/env python
"""cbp on a classic driver and on a Spark Connect server, side by side in one run (issue 49).

Four measurements, each mode in a process of its own (a Connect session cannot share a process with a
classic one):

1. **Small epochs, local** (``classic``, ``connect``): URLCount (``flows/url_count.yaml``, direct mode),
   ``--keys`` state keys built in one epoch, ``--warmup`` epochs not counted, then ``--epochs`` epochs of
   ``--increment`` records (half stored keys, half new): median epoch time (wall, and CPU seconds of the
   mode's processes, the server's included), state-cache hits and Connect RPCs per epoch, a classic
   ``local[2]`` driver against a Connect server in front of ``local[2]``, run side by side in lock-step
   (:func:`_lockstep`).
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
    .venv/bin/python bench/connect_epochs.py --epochs-only   # 1 alone
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from jvmcounts import jit_counts  # noqa: E402 - bench/ is not a package

OUT = ROOT / "bench" / "out"
PLOT = ROOT / "docs" / "benchmarks" / "connect.png"


def _tree_cpu(root: int) -> float:
    """CPU seconds (user + system, with reaped children's) of process ``root`` and its descendants."""
    procs: dict[int, list[str]] = {}
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            st = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        procs[int(d)] = st
        kids.setdefault(int(st[1]), []).append(int(d))
    ticks, todo = 0, [root]
    while todo:
        q = todo.pop()
        if q in procs:
            ticks += sum(int(x) for x in procs[q][11:15])  # utime stime cutime cstime
        todo += kids.get(q, [])
    return ticks / os.sysconf("SC_CLK_TCK")


def _count_rpcs(spark: Any) -> dict[str, int]:
    """Count the Connect client's calls to the server, by RPC (``ExecutePlan``, ``AnalyzePlan``, ...)."""
    counts: dict[str, int] = {}
    stub = spark.client._stub

    def counter(name: str) -> Any:
        orig = getattr(stub, name)

        def counted(*a: Any, **k: Any) -> Any:
            counts[name] = counts.get(name, 0) + 1
            return orig(*a, **k)

        return counted

    for name in ("ExecutePlan", "AnalyzePlan", "Config", "ReattachExecute", "ReleaseExecute", "AddArtifacts"):
        setattr(stub, name, counter(name))
    return counts


class Child:
    """One mode's run (in its own process): the home built, then one small epoch per :meth:`epoch`, each
    timed (wall and CPU seconds: this process's tree, and on Connect the server's), the executor of each
    partition noted (the tasks' result rows)."""

    def __init__(
        self, mode: str, url: str, keys: int, increment: int, home: str, server_pid: int, warmup: int = 0
    ) -> None:
        sys.path.insert(0, str(ROOT / "flows"))
        import cbp
        from cbp.engine.driver import job

        self.ran: list[dict[int, str]] = []
        decode = job.decode_results

        def noted(table: Any) -> Any:
            out = decode(table)
            self.ran.append({int(r.part): str(r.executor) for r in out})
            return out

        job.decode_results = noted  # type: ignore[assignment]
        self.rpcs: dict[str, int] = {}
        if mode.startswith("connect"):
            from cbp.engine.driver.session import connect_spark

            spark = connect_spark(url)
            self.rpcs = _count_rpcs(spark)
        else:
            from cbp.engine.driver.session import get_spark

            spark = get_spark()
        self.roots = [os.getpid()] + ([server_pid] if server_pid else [])
        self.codegen: Any = None  # classes Spark's code generation compiled in this process's JVM so far
        if server_pid:
            self.jvm = server_pid
        else:
            jvm = spark.sparkContext._jvm
            self.jvm = int(jvm.java.lang.ProcessHandle.current().pid())
            metrics = jvm.org.apache.spark.metrics.source.CodegenMetrics
            self.codegen = lambda: int(metrics.METRIC_COMPILATION_TIME().getCount())
        self.jit: list[dict[str, float]] = []
        self.keys, self.increment = keys, increment
        self.p = cbp.Pipeline(str(ROOT / "flows" / "url_count.yaml"), home, spark=spark)
        self.p.feed("urls", [{"url": f"u{i}"} for i in range(keys)])
        self.p.run()
        self.seconds: list[float] = []
        self.cpu: list[float] = []
        self.warmup = warmup
        for e in range(warmup):  # JIT-compiled code paths, warm Python workers: the steady state
            self.epoch(e)
        self.ran.clear()
        self.rpcs.clear()
        self.seconds.clear()
        self.cpu.clear()
        self.jit.clear()
        self.hits = self.lookups = 0

    def epoch(self, e: int) -> float:
        """Feed epoch ``e``'s records (half stored keys, half new) and run it; its wall seconds."""
        half = self.increment // 2
        stored = [{"url": f"u{(e * half + i) % self.keys}"} for i in range(half)]
        self.p.feed("urls", stored + [{"url": f"n{e}-{i}"} for i in range(half)])
        j0, g0 = jit_counts(self.jvm), self.codegen() if self.codegen else 0
        c0 = sum(_tree_cpu(r) for r in self.roots)
        t0 = time.perf_counter()
        reps = self.p.run()
        self.seconds.append(time.perf_counter() - t0)
        self.cpu.append(sum(_tree_cpu(r) for r in self.roots) - c0)
        j1, g1 = jit_counts(self.jvm), self.codegen() if self.codegen else 0
        self.jit.append(
            {k: v - j0[k] for k, v in j1.items() if k in j0} | ({"codegen": g1 - g0} if self.codegen else {})
        )
        self.hits = getattr(self, "hits", 0) + sum(r.cache_hits for r in reps)
        self.lookups = getattr(self, "lookups", 0) + sum(r.cache_lookups for r in reps)
        return self.seconds[-1]

    def summary(self, mode: str) -> dict[str, Any]:
        """The run's numbers (:func:`_mode`'s line)."""
        ran = self.ran
        epochs = max(len(self.seconds), 1)
        return {
            "mode": mode,
            "seconds": self.seconds,
            "median": statistics.median(self.seconds),
            "cpu": self.cpu,
            "median_cpu": statistics.median(self.cpu),
            "rpcs_per_epoch": {k: v / epochs for k, v in sorted(self.rpcs.items())},
            "cache_hits": self.hits,
            "cache_lookups": self.lookups,
            "moves": sum(1 for a, b in zip(ran, ran[1:]) for q in b if a.get(q) != b[q]),
            "partition_epochs": sum(len(b) for b in ran[1:]),
            "executors": sorted({e for r in ran for e in r.values()}),
            # the epochs' JVM (classic: the driver's; Connect: the server's): methods the JIT compiled, classes
            # loaded, and on classic classes Spark's code generation compiled (CodegenMetrics), per epoch
            "jit": {k: [j.get(k, 0) for j in self.jit] for k in sorted({k for j in self.jit for k in j})},
        }


def child(args: argparse.Namespace) -> None:
    """The ``--child`` process: all epochs at once, or (``--lockstep``) one per ``go`` line on stdin,
    answering each with a line, until ``end``; the summary as the last line of stdout."""
    c = Child(args.child, args.url or "", args.keys, args.increment, args.home, args.server_pid, args.warmup)
    if not args.lockstep:
        for e in range(args.epochs):
            c.epoch(args.warmup + e)
    else:
        print("ready", flush=True)
        for e, line in enumerate(sys.stdin):
            if line.strip() != "go":
                break
            print(json.dumps({"seconds": c.epoch(args.warmup + e)}), flush=True)
    print(json.dumps(c.summary(args.child)), flush=True)


def _script(
    name: str, state: str, *args: str, check: bool = True, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **(env or {}), f"CBP_{'CONNECT' if name == 'connect' else 'CLUSTER'}_STATE": state}
    cmd = [sys.executable, str(ROOT / "scripts" / f"{name}.py"), *args]
    return subprocess.run(cmd, env=env, check=check, capture_output=True, text=True)


def _server(state: str, master: str = "local[2]", java_options: str | None = None) -> str:
    """A server on a port ``scripts/connect`` picks (below the kernel's ephemeral range), its JVM started with
    ``java_options`` (``CBP_DRIVER_JAVA_OPTIONS``) if given; its URL."""
    opts = {} if java_options is None else {"CBP_DRIVER_JAVA_OPTIONS": java_options}
    _script("connect", state, "start", "--master", master, env=opts)
    return str(json.loads(Path(state, "server.json").read_text())["url"])


def _daemons(state: str) -> int:
    pid = Path(state, "server.pid").read_text().strip()
    ps = subprocess.run(["ps", "--ppid", pid, "--no-headers", "-o", "pid"], capture_output=True, text=True)
    return len(ps.stdout.split())


def _child_cmd(mode: str, url: str, args: argparse.Namespace, work: str, server: str | None) -> list[str]:
    cmd = [sys.executable, __file__, "--child", mode, "--home", os.path.join(work, mode), "--url", url]
    cmd += ["--keys", str(args.keys), "--increment", str(args.increment), "--epochs", str(args.epochs)]
    cmd += ["--warmup", str(args.warmup)]
    if server:  # the server's CPU counts in a Connect epoch's
        cmd += ["--server-pid", Path(server, "server.pid").read_text().strip()]
    return cmd


def _said(r: dict[str, Any]) -> dict[str, Any]:
    rpcs = " ".join(f"{k} {v:.1f}" for k, v in r["rpcs_per_epoch"].items())
    print(
        f"{r['mode']:24} median epoch {r['median']:.3f} s, {r['median_cpu']:.3f} CPU s  cache hits "
        f"{r['cache_hits']}/{r['cache_lookups']}  moves {r['moves']}/{r['partition_epochs']}  "
        f"epochs {' '.join(f'{s:.2f}' for s in r['seconds'])}" + (f"  RPCs per epoch: {rpcs}" if rpcs else ""),
        flush=True,
    )
    jit = r.get("jit", {})
    if jit:
        print(f"{'':24} per epoch: " + "; ".join(f"{k} {' '.join(f'{v:g}' for v in vs)}" for k, vs in jit.items()))
    return r


def _jit_median(r: dict[str, Any], what: str) -> str:
    """The median per epoch of a JIT counter of :meth:`Child.summary` (``-`` when not measured)."""
    vs = r.get("jit", {}).get(what)
    return f"{statistics.median(vs):g}" if vs else "-"


def _mode(
    mode: str, url: str, args: argparse.Namespace, work: str, env: dict[str, str] | None = None, server: str = ""
) -> dict[str, Any]:
    """One mode's epochs in a process of its own, alone."""
    cmd = _child_cmd(mode, url, args, work, server)
    out = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})})
    if out.returncode:
        sys.exit(f"{mode} failed:\n{out.stderr[-3000:]}")
    return _said(json.loads(out.stdout.strip().splitlines()[-1]))


def _lockstep(modes: list[tuple[str, str, dict[str, str], str]], args: argparse.Namespace, work: str) -> list[Any]:
    """Modes ``(name, url, env, server state)`` in processes of their own, started together and run in
    turns, one epoch at a time (the order of each round reversed from the last): the machine's load,
    which varies by the minute on a shared machine, weighs on each mode alike."""
    procs = []
    for mode, url, env, server in modes:
        cmd = [*_child_cmd(mode, url, args, work, server), "--lockstep"]
        procs.append(
            subprocess.Popen(
                cmd,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                text=True,
                env={**os.environ, **env},
            )
        )
    try:
        for p, (mode, *_) in zip(procs, modes):
            assert p.stdout is not None
            if p.stdout.readline().strip() != "ready":
                sys.exit(f"{mode} failed to build its home (run it alone: {' '.join(p.args)})")
        order = list(range(len(procs)))
        for _ in range(args.epochs):
            for i in order:
                assert procs[i].stdin is not None and procs[i].stdout is not None
                procs[i].stdin.write("go\n")
                procs[i].stdin.flush()
                procs[i].stdout.readline()
            order.reverse()
        results = []
        for p in procs:
            out, _ = p.communicate("end\n")
            results.append(_said(json.loads(out.strip().splitlines()[-1])))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


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
            results.append(_mode("connect-cluster-unplaced", url, args, work, {"CBP_PLACEMENT": "0"}, server))
            results.append(_mode("connect-cluster", url, args, work, server=server))
        finally:
            _script("connect", server, "stop", check=False)
        return results
    finally:
        if not was_up:
            _script("cluster", state, "down", check=False)


def report(results: list[dict[str, Any]], extra: dict[str, Any]) -> str:
    """The markdown table of a run."""
    lines = [
        "| mode | median epoch (s) | median epoch (CPU s) | state-cache hits | partition moves | RPCs per epoch "
        "| JIT compilations / classes loaded / Spark codegen, per epoch (medians) |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        moves = f"{r['moves']}/{r['partition_epochs']}" if r["mode"].endswith(("cluster", "unplaced")) else "-"
        rpcs = ", ".join(f"{k} {v:.1f}" for k, v in r["rpcs_per_epoch"].items()) or "-"
        lines.append(
            f"| {r['mode']} | {r['median']:.3f} | {r['median_cpu']:.3f} | {r['cache_hits']}/{r['cache_lookups']} "
            f"| {moves} | {rpcs} | {_jit_median(r, 'compiled')} / {_jit_median(r, 'classes')} / "
            f"{_jit_median(r, 'codegen')} |"
        )
    if len(results) > 1 and results[0]["mode"] == "classic" and results[1]["mode"] == "connect":
        lines.append(
            f"\nConnect / classic, local: {results[1]['median'] / results[0]['median']:.2f}x (wall), "
            f"{results[1]['median_cpu'] / results[0]['median_cpu']:.2f}x (CPU)"
        )
    if not extra:
        return "\n".join(lines) + "\n"
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
    ap.add_argument("--warmup", type=int, default=8, help="epochs run first and not counted (JIT, warm workers)")
    ap.add_argument("--cluster", action="store_true", help="also measure placement on scripts/cluster's workers")
    ap.add_argument("--cluster-state", default=str(ROOT / "state" / "cluster"), help="scripts/cluster's state")
    ap.add_argument("--epochs-only", action="store_true", help="only measurement 1 (and 2 with --cluster)")
    ap.add_argument(
        "--server-java-options",
        help="measurement 1 also on a second server whose JVM has these options (mode 'connect-opts'), e.g. JIT flags",
    )
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--home", help=argparse.SUPPRESS)
    ap.add_argument("--server-pid", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--lockstep", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    work = tempfile.mkdtemp(prefix="cbp-connect-bench-")
    state = os.path.join(work, "server")
    url = _server(state)
    extra: dict[str, Any] = {}
    other = os.path.join(work, "server-opts")
    try:
        local = [("classic", "", {"CBP_SPARK_MASTER": "local[2]"}, ""), ("connect", url, {}, state)]
        if args.server_java_options is not None:
            local.append(("connect-opts", _server(other, java_options=args.server_java_options), {}, other))
        results = _lockstep(local, args, work)
        if not args.epochs_only:
            extra = daemons_and_fresh_runs(url, state, work)
    finally:
        _script("connect", state, "stop", check=False)
        if args.server_java_options is not None:
            _script("connect", other, "stop", check=False)
    if args.cluster:
        results += cluster_modes(args, work)
    table = report(results, extra)
    print(table)
    OUT.mkdir(exist_ok=True)
    (OUT / "connect_epochs.md").write_text(table)
    (OUT / "connect_epochs.json").write_text(json.dumps({"args": vars(args), "results": results, **extra}, indent=1))
    if not args.epochs_only:
        plot(results)


if __name__ == "__main__":
    main()
