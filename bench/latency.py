#!/usr/bin/env python
"""Land-to-output latency of a 1,000-record increment (issue 40, item 4): a fresh ``cbp run``
per increment vs one warm follower (``cbp run --follow``) vs the Airflow path, side by side in one run.

URLCount vectorised (``flows/url_count_vec.yaml``) on a home of ``--keys`` state keys (default
100k, real URLs as ``url_count_bench.py``). Every increment is ``--increment`` records (half
existing keys, half new). *Landed* is the moment the increment is durable in the home (the feed
returned, as ``cbp feed`` does; for the inbox row, the moment the file was renamed into the inbox);
*output* is the moment the epoch that read it is committed (its ``counts`` increment visible),
seen by this process polling the home's controller snapshot every 10 ms. Methods:

- ``cbp run`` per increment: a fresh process (``python -m cbp.cli run``) started as soon as the
  increment landed, as a cron job or a script would;
- ``--follow``, feed: one ``cbp run --follow`` process, started (and warmed with two unmeasured
  increments) before; the increment is landed by this process (another process than the follower);
- ``--follow``, inbox file: the same follower with ``--inbox DIR --settle 0``; a JSON-lines file
  is written under a temporary name and renamed into ``DIR/urls/``;
- Airflow: the pipeline's DAG (``cbp.airflow.dagfactory.pipeline_dag``) run in-process with
  ``dag.test()`` right after the feed (``land_inbox``, ``run`` = a fresh ``cbp run``, publish
  tasks), as tests/test_airflow.py does. A deployment adds the asset watcher's poke interval
  (``poke_interval``, 5 s: 2.5 s on average) and the scheduler's and triggerer's loops, which
  ``airflow standalone`` would add and this does not measure (``--no-airflow`` skips the row).

Prints a table; writes ``bench/out/latency.{md,json,png}`` and ``bench/latency.png`` (the docs' plot).

    .venv/bin/python bench/latency.py                    # 100k keys; 5 fresh runs, 5 DAG runs, 20+20 followed (~8 min)
    .venv/bin/python bench/latency.py --runs 3 --follow-runs 10 --no-airflow
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from url_count_bench import (
    OUT,
    ROOT,
    YAML_VEC,
    Keys,
    _version,
    increments,
    load_vocabulary,
    log,
)  # puts ROOT on sys.path

STAGE = "url_count"
GOAL = 1.0  # seconds: the goal for --follow's median


class Home:
    """The benchmark's home: feeds from this process, and the moment an epoch becomes visible."""

    def __init__(self, yaml: Path, home: Path) -> None:
        import cbp

        self.yaml, self.home = yaml, home
        self.pipe = cbp.load(yaml, home=str(home))

    def epochs(self) -> int:
        return self.pipe.epochs(STAGE)

    def feed(self, records: list[dict[str, str]]) -> float:
        """Land an increment; the time it landed."""
        self.pipe.feed("urls", records)
        return time.perf_counter()

    def wait_epoch(self, n: int, timeout: float = 600.0, alive: Callable[[], bool] | None = None) -> float:
        """Poll until stage epoch ``n`` is committed; the time it was seen."""
        deadline = time.perf_counter() + timeout
        while time.perf_counter() < deadline:
            if self.epochs() >= n:
                return time.perf_counter()
            if alive is not None and not alive():
                raise RuntimeError(f"the process that should run epoch {n} is gone")
            time.sleep(0.01)
        raise TimeoutError(f"epoch {n} not committed within {timeout:g} s")


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def cbp(*args: Any) -> list[str]:
    return [sys.executable, "-m", "cbp.cli", *map(str, args)]


def per_process(h: Home, batches: list[list[dict[str, str]]]) -> dict[str, list[float]]:
    """A fresh ``cbp run`` process per increment."""
    lat, proc_s = [], []
    for recs in batches:
        n = h.epochs() + 1
        landed = h.feed(recs)
        p = subprocess.Popen(
            cbp("run", h.yaml, "--home", h.home, "--quiet"),
            cwd=ROOT,
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        seen = h.wait_epoch(n, alive=lambda p=p, n=n: p.poll() is None or h.epochs() >= n)
        _, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"cbp run exited {p.returncode}: {err[-2000:]}")
        lat.append(seen - landed)
        proc_s.append(time.perf_counter() - landed)
        log(f"  cbp run per increment: {lat[-1]:.2f}s to output, process {proc_s[-1]:.2f}s")
    return {"latency": lat, "process": proc_s}


class Follower:
    """A ``cbp run --follow`` process, ready once it says it follows; stopped with SIGTERM."""

    def __init__(self, h: Home, inbox: Path) -> None:
        self.lines: list[str] = []
        self.ready = threading.Event()
        self.proc = subprocess.Popen(
            cbp("run", "--follow", h.yaml, "--home", h.home, "--inbox", inbox, "--settle", 0),
            cwd=ROOT,
            env=env(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line)
            if "following" in line:
                self.ready.set()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> int:
        if self.alive():
            self.proc.send_signal(signal.SIGTERM)  # the follower only: its JVM would die mid-epoch
        try:
            return self.proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait(30)


def followed(
    h: Home, batches: list[list[dict[str, str]]], inbox: Path, warmup: list[list[dict[str, str]]]
) -> dict[str, Any]:
    """One follower; increments alternately fed by this process and dropped in its inbox."""
    (inbox / "urls").mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    f = Follower(h, inbox)
    try:
        while not f.ready.wait(0.5):
            if not f.alive():
                raise RuntimeError("the follower exited: " + "".join(f.lines)[-2000:])
        started = time.perf_counter() - t0
        for recs in warmup:  # the first epochs of a new driver start its Python workers and load the state index
            n = h.epochs() + 1
            h.feed(recs)
            h.wait_epoch(n, alive=f.alive)
        out: dict[str, list[float]] = {"feed": [], "inbox": []}
        for i, recs in enumerate(batches):
            time.sleep(0.5)  # the follower is idle, as between real increments
            n = h.epochs() + 1
            if i % 2 == 0:
                landed, kind = h.feed(recs), "feed"
            else:
                tmp = inbox / "urls" / f"inc-{i}.jsonl.part"
                tmp.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
                tmp.rename(tmp.with_suffix(""))  # .jsonl: complete, landed at once (--settle 0)
                landed, kind = time.perf_counter(), "inbox"
            out[kind].append(h.wait_epoch(n, alive=f.alive) - landed)
            log(f"  --follow, {kind}: {out[kind][-1]:.3f}s to output")
    finally:
        code = f.stop()
    if code != 0:
        raise RuntimeError(f"the follower exited {code} after SIGTERM: {''.join(f.lines)[-2000:]}")
    return {**out, "startup": started}


def airflow(h: Home, batches: list[list[dict[str, str]]], work: Path) -> dict[str, list[float]]:
    """The pipeline's DAG, run in-process with dag.test() after each feed."""
    af = work / "airflow"
    af.mkdir()
    config = af / "cbp.yaml"  # read by dags/cbp_dags.py, the DAG file dag.test() serializes
    config.write_text(
        f"flows: {h.yaml.parent}\nhomes: {h.home.parent}\ninbox: {work / 'dag-inbox'}\n", encoding="utf-8"
    )
    os.environ.update(
        {
            "AIRFLOW_HOME": str(af),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "PYTHONPATH": str(ROOT),
            "CBP_DAGS_CONFIG": str(config),
        }
    )
    r = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"airflow db migrate failed: {r.stderr[-2000:]}")
    import logging

    from cbp.airflow.dagfactory import make_dags

    dag = make_dags(str(config))[f"cbp_{h.pipe.spec.name}"]
    logging.getLogger("airflow").setLevel(logging.WARNING)
    lat, total = [], []
    for recs in batches:
        n = h.epochs() + 1
        landed = h.feed(recs)
        seen: dict[str, float] = {}
        poll = threading.Thread(target=lambda seen=seen, n=n: seen.setdefault("t", h.wait_epoch(n)), daemon=True)
        poll.start()
        dr = dag.test()
        poll.join(600)
        if str(dr.state) != "success" or "t" not in seen:
            raise RuntimeError(f"the DAG run ended {dr.state}")
        lat.append(seen["t"] - landed)
        total.append(time.perf_counter() - landed)
        log(f"  Airflow dag.test(): {lat[-1]:.2f}s to output, DAG run {total[-1]:.2f}s")
    return {"latency": lat, "dag_run": total}


def build(args: argparse.Namespace, work: Path) -> tuple[Home, list[list[dict[str, str]]]]:
    """The home with ``--keys`` keys (one cbp run), and the increments to land."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    vocab, source = load_vocabulary()
    keys = Keys(vocab)
    flows = work / "flows"
    flows.mkdir()
    yaml = flows / "url_count_vec.yaml"
    shutil.copy(YAML_VEC, yaml)
    shutil.copy(YAML_VEC.with_suffix(".py"), flows / "url_count_vec.py")
    home = work / "homes" / "url_count_vec"
    pq.write_table(pa.table({"url": [r["url"] for r in keys.records(np.arange(args.keys))]}), work / "base.parquet")
    subprocess.run(
        cbp("feed", yaml, "--home", home, "urls", work / "base.parquet"),
        cwd=ROOT,
        env=env(),
        check=True,
        capture_output=True,
    )
    subprocess.run(cbp("run", yaml, "--home", home, "--quiet"), cwd=ROOT, env=env(), check=True, capture_output=True)
    count = args.runs * 2 + args.follow_runs * 2 + 2
    batches = [keys.records(ids) for ids in increments(args.keys, args.increment, count, args.seed)]
    args.source = source
    return Home(yaml, home), batches


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--increment", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5, help="increments for a fresh cbp run each, and for the Airflow DAG")
    ap.add_argument("--follow-runs", type=int, default=20, help="increments for the follower, each of feed and inbox")
    ap.add_argument("--no-airflow", action="store_true")
    ap.add_argument("--seed", type=int, default=11)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="cbp-latency-"))
    try:
        t0 = time.perf_counter()
        log(f"building a home of {args.keys:,} keys in {work}")
        h, batches = build(args, work)
        log(f"built in {time.perf_counter() - t0:.0f}s ({args.source})")
        res: dict[str, Any] = {
            "args": {k: v for k, v in vars(args).items()},
            "version": _version("cbp"),
            "commit": _commit(),
            "load_before": os.getloadavg()[1],
        }
        log(f"a fresh cbp run per increment ({args.runs})")
        res["cbp_run"] = per_process(h, batches[: args.runs])
        log(f"one follower: {args.follow_runs * 2} increments, fed and dropped in its inbox")
        res["follow"] = followed(
            h,
            batches[args.runs + 2 : args.runs + 2 + args.follow_runs * 2],
            work / "inbox",
            batches[args.runs : args.runs + 2],
        )
        if not args.no_airflow:
            log(f"the Airflow DAG, in-process dag.test() ({args.runs})")
            res["airflow"] = airflow(h, batches[-args.runs :], work)
        res["total_seconds"] = time.perf_counter() - t0
        res["load_after"] = os.getloadavg()[1]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    write(res)
    return 0


def _commit() -> str:
    p = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return p.stdout.strip() or "?"


def _stats(xs: list[float]) -> str:
    p90 = float(np.percentile(xs, 90))
    return f"{len(xs)} | **{statistics.median(xs):.2f}** | {p90:.2f} | {min(xs):.2f} | {max(xs):.2f}"


def rows(res: dict[str, Any]) -> list[tuple[str, list[float], str]]:
    out = [
        (
            "`cbp run` per increment (fresh process)",
            res["cbp_run"]["latency"],
            f"process ends {statistics.median(res['cbp_run']['process']):.2f} s after landing (median)",
        ),
        (
            "`cbp run --follow`, feed by another process",
            res["follow"]["feed"],
            f"one follower; it started in {res['follow']['startup']:.1f} s",
        ),
        (
            "`cbp run --follow --inbox`, file dropped",
            res["follow"]["inbox"],
            "the same follower; `--settle 0`, file renamed into the inbox",
        ),
    ]
    if "airflow" in res:
        out.append(
            (
                "Airflow DAG, in-process `dag.test()`",
                res["airflow"]["latency"],
                f"DAG run ends {statistics.median(res['airflow']['dag_run']):.2f} s after landing; add the watcher's "
                f"poke interval "
                "(5 s: 2.5 s on average) and the scheduler in a deployment",
            )
        )
    return out


def write(res: dict[str, Any]) -> None:
    a = res["args"]
    follow_median = statistics.median(res["follow"]["feed"])
    lines = [
        "# Land-to-output latency of a 1,000-record increment",
        "",
        f"- {_dt.datetime.now().strftime('%Y-%m-%d %H:%M')}, cbp {res['version']} (`{res['commit']}`), "
        f"{os.cpu_count()} cores; "
        f"`python bench/latency.py {' '.join(sys.argv[1:])}`",
        f"- URLCount vectorised, {a['keys']:,} state keys, {a['increment']:,}-record increments (half new keys); "
        f"{a['source']}",
        "- seconds from the increment landed (durable in the home) to the epoch that read it committed; "
        f"machine load (5-minute average) {res['load_before']:.1f} at the start, {res['load_after']:.1f} at the end",
        "",
        "| method | n | median | p90 | min | max | notes |",
        "|:---|---:|---:|---:|---:|---:|:---|",
        *[f"| {name} | {_stats(xs)} | {note} |" for name, xs, note in rows(res)],
        "",
        f"Goal: `--follow` median <= {GOAL:g} s: **{'met' if follow_median <= GOAL else 'not met'}** "
        f"({follow_median:.2f} s).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "latency.md").write_text(text, encoding="utf-8")
    (OUT / "latency.json").write_text(json.dumps(res, indent=1), encoding="utf-8")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = rows(res)
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.boxplot([xs for _, xs, _ in data], vert=False, widths=0.5)
    for i, (_, xs, _) in enumerate(data, 1):
        ax.scatter(
            xs, np.full(len(xs), i) + np.random.default_rng(i).uniform(-0.12, 0.12, len(xs)), s=10, color="k", zorder=3
        )
    ax.axvline(GOAL, color="C3", linestyle="--", label=f"goal for --follow ({GOAL:g} s)")
    ax.set_yticks(range(1, len(data) + 1), [n.replace("`", "") for n, _, _ in data], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("seconds from landed to output committed (log scale)")
    ax.set_title(f"land-to-output latency, {a['increment']:,}-record increment, {a['keys']:,} keys")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(OUT / "latency.png", dpi=120)
    shutil.copy(
        OUT / "latency.png", Path(__file__).with_name("latency.png")
    )  # the docs' plot (docs/benchmarks/latency.md)
    log(f"wrote {OUT / 'latency.md'}, .json, .png (and bench/latency.png)")


if __name__ == "__main__":
    raise SystemExit(main())
