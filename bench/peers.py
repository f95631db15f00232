#!/usr/bin/env python
"""Peers benchmark: URLCount state kept by cbp and by what Spark users use today, side by side.

For each state size S (default 1M, 10M, 30M keys) the benchmark writes the same Parquet files once:
the S initial URLs (one file per million) and ``--epochs`` + 1 increments of ``--increment``
records (half existing keys drawn uniformly, half new, fixed seed; as ``bench/url_count_bench.py``).
Then, one system after the other, each in its own Python process (a fresh JVM, so its peak memory
is its own), it builds the state, runs one unmeasured warm-up increment and the measured ones, and
fingerprints the final state. The fingerprints must all equal a from-scratch Spark count of
the same files.

Systems (``bench/peer_systems.py``):

- ``cbp-direct``: ``flows/url_count.yaml``, per-key translate;
- ``cbp-vectorised``: ``flows/url_count_vec.yaml`` (batch translate), built by itself;
- ``cbp-blackbox``: black-box mode, on a copy of cbp-direct's built home;
- ``spark-merge``: Structured Streaming ``foreachBatch`` + Delta ``MERGE`` through delta-spark;
- ``tws-pandas``: ``transformWithStateInPandas``, RocksDB state store;
- ``apply-pandas``: ``applyInPandasWithState``, RocksDB state store;
- ``deltars-merge``: a hand-written job, Arrow aggregation + delta-rs ``MERGE``.

A system that exceeds ``--timeout-min`` at a size is stopped, reported with the size it reached,
and not run at larger sizes.

    .venv/bin/python bench/peers.py                     # 1M, 10M, 30M keys (hours on 2 cores)
    .venv/bin/python bench/peers.py --sizes 1000000     # one size
    .venv/bin/python bench/peers.py --quick             # smoke run: 20k keys, 5k increment

Output: ``bench/out/peers.md`` (table), ``bench/out/peers.json``, ``bench/out/peers.png``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
OUT = BENCH / "out"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

SYSTEMS = ("cbp-direct", "cbp-vectorised", "cbp-blackbox", "spark-merge", "tws-pandas", "apply-pandas", "deltars-merge")
LABELS = {
    "cbp-direct": "cbp direct, per-key translate",
    "cbp-vectorised": "cbp direct, vectorised translate",
    "cbp-blackbox": "cbp black-box",
    "spark-merge": "foreachBatch + delta-spark MERGE",
    "tws-pandas": "transformWithStateInPandas (RocksDB)",
    "apply-pandas": "applyInPandasWithState (RocksDB)",
    "deltars-merge": "Arrow + delta-rs MERGE job",
}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------- data
def write_data(size: int, args: argparse.Namespace, keys: Any, where: Path) -> dict[str, Any]:
    """The initial files and the increments of one size, as Parquet (column ``url``)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    from url_count_bench import increments

    where.mkdir(parents=True, exist_ok=True)
    build, incs = [], []
    for a in range(0, size, args.chunk):
        b = min(a + args.chunk, size)
        f = where / f"build-{a // args.chunk:04d}.parquet"
        pq.write_table(pa.table({"url": [r["url"] for r in keys.records(np.arange(a, b))]}), f)
        build.append(str(f))
    for j, ids in enumerate(increments(size, args.increment, args.epochs + 1, args.seed)):
        f = where / f"inc-{j:04d}.parquet"
        pq.write_table(pa.table({"url": [r["url"] for r in keys.records(ids)]}), f)
        incs.append(str(f))
    return {"build": build, "increments": incs}


# ---------------------------------------------------------------------------------- one system, in a child process
class PeakRss:
    """Peak resident memory of this process and all its descendants (JVM, Python workers), sampled."""

    def __init__(self, every: float = 0.25) -> None:
        import psutil

        self.proc, self.every, self.peak, self._stop = psutil.Process(), every, 0, threading.Event()
        self.parts: dict[str, int] = {}  # at the peak: RSS of the driver's Python, the JVM, the Python workers
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        import psutil

        while not self._stop.is_set():
            total, parts = 0, {"driver": 0, "jvm": 0, "workers": 0}
            for p in [self.proc, *self.proc.children(recursive=True)]:
                try:
                    rss = p.memory_info().rss
                    kind = "driver" if p.pid == self.proc.pid else "jvm" if "java" in p.name() else "workers"
                except psutil.Error:
                    continue
                total += rss
                parts[kind] += rss
            if total > self.peak:
                self.peak, self.parts = total, parts
            self._stop.wait(self.every)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def child(args: argparse.Namespace) -> int:
    """Run one system at one size; write its measurements as JSON to ``args.result``."""
    import peer_systems as ps

    spec = json.loads(Path(args.child).read_text(encoding="utf-8"))
    name, work, data = spec["system"], Path(spec["work"]), spec["data"]
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("CBP_STATE_CACHE_MB", "4096")
    from cbp.engine.driver.session import get_spark

    mem = PeakRss()
    conf = {} if name.startswith("cbp-") else {**ps.STREAMING_CONF, "spark.sql.adaptive.enabled": "true"}
    t0 = time.perf_counter()
    spark = get_spark(conf=conf)
    res: dict[str, Any] = {"system": name, "size": spec["size"], "spark_start": time.perf_counter() - t0}
    if name == "cbp-direct":
        sysm: Any = ps.Cbp(spark, work, "direct", ps.YAML)
    elif name == "cbp-vectorised":
        from url_count_bench import vec_yaml

        sysm = ps.Cbp(spark, work, "direct", vec_yaml(work, spec.get("partitions")))
    elif name == "cbp-blackbox":
        sysm = ps.Cbp(spark, work, "blackbox", ps.YAML, seed_home=Path(spec["seed_home"]))
    else:
        cls = {
            c.name: c
            for c in (ps.ForeachBatchMerge, ps.TransformWithStateInPandas, ps.ApplyInPandasWithState, ps.DeltaRsMerge)
        }[name]
        sysm = cls(spark, work)
    if spec.get("seed_home"):
        res["build"] = None  # copied, not built
    else:
        t0 = time.perf_counter()
        sysm.build(data["build"])
        res["build"] = time.perf_counter() - t0
        log(f"{name} {spec['size']:,} keys: state built in {res['build']:.1f}s")
    res["peak_rss_build"], res["peak_parts_build"] = mem.peak, mem.parts  # then the epochs' peak alone
    mem.peak, mem.parts = 0, {}
    if name == "cbp-direct" and spec.get("save_home"):
        shutil.copytree(work / "home", spec["save_home"])
    res["epochs"] = []
    for j, f in enumerate(data["increments"]):
        s = sysm.epoch(f)
        res["epochs"].append(s)
        log(f"{name} {spec['size']:,} keys: {'warm-up' if j == 0 else f'epoch {j}'} {s:.2f}s")
    if isinstance(sysm, ps.Cbp):
        res["phases"] = sysm.phases[-len(data["increments"]) :]
    res["fingerprint"] = ps.fingerprint(sysm.final_state())
    sysm.close()
    res["peak_rss_epochs"], res["peak_parts_epochs"] = mem.stop(), mem.parts
    res["peak_rss"] = max(res["peak_rss_build"], res["peak_rss_epochs"])
    gib = lambda parts: ", ".join(f"{k} {v / 2**30:.1f}" for k, v in parts.items())  # noqa: E731
    log(
        f"{name} {spec['size']:,} keys: peak RSS GiB: build {res['peak_rss_build'] / 2**30:.1f} "
        f"({gib(res['peak_parts_build'])}), "
        f"epochs {res['peak_rss_epochs'] / 2**30:.1f} ({gib(res['peak_parts_epochs'])})"
    )
    if name == "cbp-vectorised" and not spec.get(
        "no_warm_build"
    ):  # the same build again in this process, now warm (JVM compiled, Python workers up)
        again = ps.Cbp(spark, work / "again", "direct", vec_yaml(work, spec.get("partitions")))
        t0 = time.perf_counter()
        again.build(data["build"])
        res["build_warm"] = time.perf_counter() - t0
        keys, total = again.final_state().selectExpr("count(*)", "sum(`count`)").first()
        if (keys, total) != (spec["size"], spec["size"]):  # every URL of the build files once
            raise RuntimeError(f"the warm build's state has {keys} keys and counts {total}, not {spec['size']}")
        log(f"{name} {spec['size']:,} keys: state built again, warm, in {res['build_warm']:.1f}s")
    Path(args.result).write_text(json.dumps(res), encoding="utf-8")
    return 0


def run_child(
    system: str,
    size: int,
    work: Path,
    data: dict[str, Any],
    args: argparse.Namespace,
    seed_home: Path | None,
    save_home: Path | None,
) -> dict[str, Any]:
    spec = {
        "system": system,
        "size": size,
        "work": str(work / system),
        "data": data,
        "seed_home": str(seed_home) if seed_home else None,
        "save_home": str(save_home) if save_home else None,
        "no_warm_build": args.no_warm_build,
        "partitions": args.partitions,
    }
    spec_f, res_f = work / f"{system}.spec.json", work / f"{system}.result.json"
    spec_f.write_text(json.dumps(spec), encoding="utf-8")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(spec_f), "--result", str(res_f)]
    t0 = time.perf_counter()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
    }
    proc = subprocess.Popen(
        cmd, cwd=str(ROOT), env=env, start_new_session=True
    )  # Spark's Python workers import peer_systems
    try:
        rc = proc.wait(timeout=args.timeout_min * 60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.wait()
        return {"system": system, "size": size, "failed": f"timeout after {args.timeout_min:g} min"}
    finally:
        shutil.rmtree(work / system, ignore_errors=True)
    if rc != 0 or not res_f.exists():
        return {"system": system, "size": size, "failed": f"exit code {rc}"}
    res = json.loads(res_f.read_text(encoding="utf-8"))
    res["wall"] = time.perf_counter() - t0
    xs = res["epochs"][1:]
    res.update(median=statistics.median(xs), min=min(xs), max=max(xs))
    return res


def reference_fingerprint(data: dict[str, Any]) -> dict[str, int]:
    import peer_systems as ps

    from cbp.engine.driver.session import get_spark

    spark = get_spark()
    try:
        return ps.reference(spark, data["build"] + data["increments"])
    finally:
        spark.stop()


# ---------------------------------------------------------------------------------- report
def fmt_keys(n: int) -> str:
    from url_count_bench import fmt_keys as f

    return f(n)


def _version(pkg: str) -> str:
    from url_count_bench import _version as v

    return v(pkg)


def report(
    results: dict[int, dict[str, dict[str, Any]]],
    refs: dict[int, dict[str, int]],
    args: argparse.Namespace,
    source: str,
    command: str,
    total_s: float,
) -> str:
    sizes = sorted(results)
    lines = [
        "# URLCount peers: per-epoch time, state build and memory, side by side",
        "",
        f"- command: `{command}`",
        f"- date: {_dt.datetime.now().isoformat(timespec='seconds')}; machine: {os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}, pyspark {_version('pyspark')}, delta-spark "
        f"{_version('delta-spark')}, deltalake {_version('deltalake')}; Spark master "
        f"{os.environ.get('CBP_SPARK_MASTER', 'local[*]')}",
        f"- data: {source}",
        f"- increment: {args.increment:,} records ({args.increment // 2:,} existing keys, "
        f"{args.increment - args.increment // 2:,} new); "
        f"1 unmeasured warm-up, then {args.epochs} measured epochs per system; seconds: median [min-max]",
        "- epoch time: cbp `run()` wall time; streaming peers: the micro-batch's triggerExecution (query start left "
        "out); "
        "delta-rs job: read + aggregate + MERGE. Peak memory: RSS of the system's process tree (driver, JVM, Python "
        "workers).",
        f"- build: the first {args.chunk:,}-key files, each URL once: cbp feeds them all, then one `run()` (one "
        f"epoch); "
        "delta-rs and delta-spark write the table once; the streaming peers take them as their first micro-batches. "
        "Each system builds first thing in its process (cold: the JVM's first jobs, the Python workers' start); "
        + (
            "cbp vectorised's second, warm build was skipped (--no-warm-build)."
            if getattr(args, "no_warm_build", False)
            else "cbp vectorised then builds the same state again in a new home of the same process (warm; not in "
            "its peak memory)."
        ),
        *(
            [f"- cbp vectorised's stage ran with {args.partitions} partitions (--partitions; the flow's YAML says 4)."]
            if getattr(args, "partitions", None)
            else []
        ),
        "",
        "| state keys | system | epoch s | records/s | vs cbp vectorised | build s | build keys/s | peak memory GiB | "
        "state = from-scratch |",
        "|---:|:---|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for size in sizes:
        row = results[size]
        vec = row.get("cbp-vectorised", {}).get("median")
        for name in SYSTEMS:
            r = row.get(name)
            if r is None:
                continue
            if "failed" in r:
                lines.append(f"| {fmt_keys(size)} | {name} | not reached: {r['failed']} | | | | | | |")
                continue
            ok = "yes" if r["fingerprint"] == refs[size] else "NO"
            ratio = f"{r['median'] / vec:.2f}x" if vec else "-"
            b = f"{r['build']:.0f} | {size / r['build']:,.0f}" if r.get("build") else "(copied) | "
            if r.get("build_warm"):
                b += f" ({size / r['build_warm']:,.0f} warm)"
            lines.append(
                f"| {fmt_keys(size)} | {name} | {r['median']:.2f} [{r['min']:.2f}-{r['max']:.2f}] | "
                f"{args.increment / r['median']:,.0f} | {ratio} | {b} | "
                f"{r['peak_rss'] / 2**30:.1f} | {ok} |"
            )
    lines += [
        "",
        *goals(results, args),
        "",
        *phase_lines(results),
        f"Total benchmark time: {total_s / 60:.1f} min.",
        "",
    ]
    return "\n".join(lines)


def phase_lines(results: dict[int, dict[str, dict[str, Any]]]) -> list[str]:
    """Where cbp's measured epochs spend their time: EpochReport.seconds and task seconds per phase (medians)."""
    rows = []
    for size in sorted(results):
        for name, r in results[size].items():
            ph = (r.get("phases") or [])[1:]  # the warm-up left out
            if ph:
                names = list(dict.fromkeys(k for x in ph for k in x))
                rows.append((size, name, {k: statistics.median(x.get(k, 0.0) for x in ph) for k in names}))
    if not rows:
        return []
    cols = list(dict.fromkeys(k for _, _, m in rows for k in m))
    out = [
        "cbp, where an epoch goes (medians; `epoch_seconds` is EpochReport.seconds, the rest task seconds per phase "
        "summed over the stage's tasks, which run 2 at a time):",
        "",
        "| state keys | system | " + " | ".join(cols) + " |",
        "|---:|:---|" + "---:|" * len(cols),
    ]
    out += [
        f"| {fmt_keys(size)} | {name} | " + " | ".join(f"{m.get(k, 0.0):.2f}" for k in cols) + " |"
        for size, name, m in rows
    ]
    return out + [""]


def goals(results: dict[int, dict[str, dict[str, Any]]], args: argparse.Namespace) -> list[str]:
    """Issue 14's goals, each PASS / FAIL / not measured."""

    def med(size: int, name: str) -> float | None:
        r = results.get(size, {}).get(name)
        return r["median"] if r and "median" in r else None

    out = ["Goals (issue 14):", ""]

    def say(text: str, ok: bool | None) -> None:
        out.append(f"- {text}: {'not measured' if ok is None else 'PASS' if ok else 'FAIL'}")

    v1 = med(1_000_000, "cbp-vectorised")
    say(
        f"cbp vectorised at 1M keys <= 0.5 s per epoch ({v1:.2f} s)" if v1 else "cbp vectorised at 1M keys <= 0.5 s",
        v1 <= 0.5 if v1 else None,
    )
    d1 = med(1_000_000, "cbp-direct")
    say(
        f"cbp per-key at 1M keys <= 1.0 s ({d1:.2f} s)" if d1 else "cbp per-key at 1M keys <= 1.0 s",
        d1 <= 1.0 if d1 else None,
    )
    for size in sorted(results):
        v, m, d = med(size, "cbp-vectorised"), med(size, "spark-merge"), med(size, "deltars-merge")
        if v and m:
            say(
                f"{fmt_keys(size)}: vectorised faster than foreachBatch + delta-spark MERGE ({v:.2f} vs {m:.2f} s)",
                v < m,
            )
        if v and d and size >= 3_000_000:
            need = 5.0 if size >= 30_000_000 else 1.0
            say(
                f"{fmt_keys(size)}: vectorised {'>= 5x faster than' if need > 1 else 'at or below'} the delta-rs MERGE "
                f"job "
                f"({d / v:.2f}x)",
                d / v >= need,
            )
        t = med(size, "tws-pandas")
        if v and t:
            say(
                f"{fmt_keys(size)}: vectorised >= 100x the records/s of transformWithStateInPandas ({t / v:.0f}x)",
                t / v >= 100,
            )
        r = results.get(size, {}).get("cbp-vectorised")
        if r and r.get("build"):
            say(
                f"{fmt_keys(size)}: vectorised state build >= 500k keys/s, cold ({size / r['build']:,.0f})",
                size / r["build"] >= 500_000,
            )
        if r and r.get("build_warm"):
            say(
                f"{fmt_keys(size)}: vectorised state build >= 500k keys/s, warm ({size / r['build_warm']:,.0f})",
                size / r["build_warm"] >= 500_000,
            )
    return out


def plot(results: dict[int, dict[str, dict[str, Any]]], path: Path, increment: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
    for i, name in enumerate(SYSTEMS):
        color = f"C{i}"  # one colour per system in both panels (black-box has no build of its own)
        pts = [(s, results[s][name]) for s in sizes if name in results[s] and "median" in results[s][name]]
        if not pts:
            continue
        xs = [s for s, _ in pts]
        ax1.plot(xs, [r["median"] for _, r in pts], marker="o", color=color, label=LABELS[name])
        built = [(s, r) for s, r in pts if r.get("build")]
        if built:
            ax2.plot(
                [s for s, _ in built], [s / r["build"] for s, r in built], marker="s", color=color, label=LABELS[name]
            )
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("state keys")
        ax.grid(True, alpha=0.3)
    ax1.set_ylabel("seconds per epoch (median)")
    ax1.set_title(f"URLCount epoch, {increment:,}-record increment")
    ax2.set_ylabel("state build, keys/s")
    ax2.set_title("state build")
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def rerender(path: Path) -> int:
    """Write peers.md and peers.png again from a peers.json (e.g. after a change to the report's form)."""
    saved = json.loads(path.read_text(encoding="utf-8"))
    args = argparse.Namespace(**saved["args"])
    results = {int(k): v for k, v in saved["results"].items()}
    refs = {int(k): v for k, v in saved["references"].items()}
    md = report(results, refs, args, saved["source"], saved.get("command", "bench/peers.py"), saved["total_seconds"])
    (OUT / "peers.md").write_text(md, encoding="utf-8")
    plot(results, OUT / "peers.png", args.increment)
    print(md)
    return 0


# ---------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sizes", default=None, help="state sizes in keys, comma-separated (default 1000000,10000000,30000000)"
    )
    ap.add_argument("--increment", type=int, default=None, help="records per epoch (default 100000)")
    ap.add_argument("--epochs", type=int, default=5, help="measured epochs per system and size (default 5)")
    ap.add_argument("--chunk", type=int, default=None, help="keys per initial file (default 1000000)")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated subset of {','.join(SYSTEMS)}")
    ap.add_argument(
        "--timeout-min", type=float, default=40.0, help="stop a system that takes longer at one size (default 40)"
    )
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--quick", action="store_true", help="smoke run: 20k keys, 5k increment, 2 epochs")
    ap.add_argument("--workdir", default=None)
    ap.add_argument(
        "--partitions",
        type=int,
        default=None,
        help="cbp vectorised's stage partitions (default: flows/url_count_vec.yaml's 4; more keep each "
        "partition's files small)",
    )
    ap.add_argument(
        "--no-warm-build",
        action="store_true",
        help="skip cbp vectorised's second (warm) build of the state, which doubles a large size's run time",
    )
    ap.add_argument(
        "--report", default=None, metavar="JSON", help="only render bench/out/peers.md and .png again from a peers.json"
    )
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)
    if args.report:
        return rerender(Path(args.report))
    if args.quick:
        args.sizes, args.increment, args.chunk = args.sizes or "20000", args.increment or 5000, args.chunk or 10000
        args.epochs = min(args.epochs, 2)
    args.sizes = sorted({int(s) for s in (args.sizes or "1000000,10000000,30000000").split(",")})
    args.increment, args.chunk = args.increment or 100_000, args.chunk or 1_000_000
    systems = [s for s in args.systems.split(",") if s]
    bad = [s for s in systems if s not in SYSTEMS]
    if bad or args.epochs < 1:
        ap.error(f"unknown systems {bad}" if bad else "--epochs must be positive")
    if "cbp-blackbox" in systems and "cbp-direct" not in systems:
        ap.error("cbp-blackbox runs on a copy of cbp-direct's home: select cbp-direct too")
    systems = [s for s in SYSTEMS if s in systems]  # cbp-direct before cbp-blackbox
    command = " ".join([".venv/bin/python", "bench/peers.py", *(sys.argv[1:] if argv is None else argv)])

    from url_count_bench import Keys, load_vocabulary

    t_start = time.perf_counter()
    OUT.mkdir(parents=True, exist_ok=True)
    vocab, source = load_vocabulary()
    log(f"data: {source}")
    keys = Keys(vocab)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="tmp-peers-", dir=OUT))
    results: dict[int, dict[str, dict[str, Any]]] = {}
    refs: dict[int, dict[str, int]] = {}
    given_up: dict[str, int] = {}
    last: dict[str, tuple[int, float]] = {}  # system -> (size, wall seconds) of its last finished size

    def write_out() -> str:
        md = report(results, refs, args, source, command, time.perf_counter() - t_start)
        (OUT / "peers.md").write_text(md, encoding="utf-8")
        (OUT / "peers.json").write_text(
            json.dumps(
                {
                    "args": vars(args),
                    "source": source,
                    "command": command,
                    "references": refs,
                    "results": results,
                    "total_seconds": time.perf_counter() - t_start,
                },
                indent=1,
                default=str,
            ),
            encoding="utf-8",
        )
        plot(results, OUT / "peers.png", args.increment)
        return md

    try:
        for size in args.sizes:
            wsize = work / f"size-{size}"
            data = write_data(size, args, keys, wsize / "data")
            log(f"{size:,} keys: data written; from-scratch reference ...")
            refs[size] = reference_fingerprint(data)
            results[size] = {}
            saved = wsize / "cbp-direct-home"
            for name in systems:
                if name in given_up:
                    results[size][name] = {"failed": f"skipped (did not finish at {fmt_keys(given_up[name])})"}
                    continue
                if name in last and last[name][1] * size / last[name][0] > args.timeout_min * 60:
                    proj = last[name][1] * size / last[name][0] / 60
                    results[size][name] = {
                        "failed": f"skipped: {proj:.0f} min projected from its time at {fmt_keys(last[name][0])} "
                        f"(limit {args.timeout_min:g} min)"
                    }
                    given_up[name] = size
                    continue
                if name == "cbp-blackbox" and not saved.exists():
                    results[size][name] = {"failed": "skipped (cbp-direct built no home)"}
                    continue
                log(f"{size:,} keys: {name} ...")
                r = run_child(
                    name,
                    size,
                    wsize,
                    data,
                    args,
                    seed_home=saved if name == "cbp-blackbox" else None,
                    save_home=saved if name == "cbp-direct" and "cbp-blackbox" in systems else None,
                )
                results[size][name] = r
                if "failed" in r:
                    given_up[name] = size
                    log(f"{size:,} keys: {name} FAILED ({r['failed']})")
                else:
                    last[name] = (size, r["wall"])
                    same = r["fingerprint"] == refs[size]
                    log(
                        f"{size:,} keys: {name} epoch {r['median']:.2f}s, build {r['build'] or 0:.0f}s, peak "
                        f"{r['peak_rss'] / 2**30:.1f} GiB, "
                        f"state {'= from-scratch' if same else 'DIFFERS from from-scratch'}"
                    )
            shutil.rmtree(wsize, ignore_errors=True)
            write_out()  # after every size, so a long run leaves its results so far
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    md = write_out()
    print()
    print(md)
    print(f"wrote {OUT / 'peers.md'}, {OUT / 'peers.png'}, {OUT / 'peers.json'}")
    wrong = [
        (s, n)
        for s, row in results.items()
        for n, r in row.items()
        if "fingerprint" in r and r["fingerprint"] != refs[s]
    ]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
