#!/usr/bin/env python
"""Where the time of a small epoch goes (issue 14, item 4).

URLCount (``flows/url_count.yaml``, direct mode) with ``--keys`` state keys (default 100k, built in
one epoch), then ``--epochs`` (default 20) epochs of a ``--increment``-record feed (default 1,000:
half stored keys, half new, as ``url_count_bench.py``), one SparkSession. For each epoch it
splits the wall time of ``run()`` into:

- **controller**: everything outside the Spark job (deciding, the intention, the plan, the
  commits of state, outputs and the controller's records);
- **Spark job**: ``run_stage_epoch``, itself split with Spark's status store (the jobs started in
  the epoch) into *planning* (before the first job is submitted and after the last one ends: query
  planning, the result's Arrow conversion, reading the shuffle metrics), *scheduling* (job time
  not covered by any stage), and per Spark stage (map side: reading and routing the increment;
  reduce side: the grouped tasks) its wall time, its tasks' summed run time, deserialisation
  time and the Python task phases (``EpochReport.phases``).

It prints the medians as a table, writes ``bench/out/epoch_cost.{md,json,png}``. Compare two
settings side by side in one run with ``--compare KEY=VALUE`` (a pipeline tuning option, e.g.
``state_cache_mb=0``): both run on copies of the same built home, alternating epochs.

    .venv/bin/python bench/epoch_cost.py                       # 100k keys, 20 epochs of 1k records (~2 min)
    .venv/bin/python bench/epoch_cost.py --keys 1000000 --increment 1000
    .venv/bin/python bench/epoch_cost.py --keys 1000000 --increment 100000 --epochs 5 --vectorised
"""

from __future__ import annotations

import argparse
import datetime as _dt
import functools
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from url_count_bench import (
    OUT,
    YAML,
    Keys,
    _version,
    build,
    increments,
    load_vocabulary,
    log,
    run_one,
    vec_yaml,
)  # puts ROOT on sys.path

SPARK_JOB = "run_stage_epoch"


class SparkJobs:
    """Times ``run_stage_epoch`` where the controller calls it and reads what Spark's status store
    says of the jobs that ran inside it."""

    def __init__(self, spark: Any) -> None:
        import cbp.controller.epoch as ce

        self.sc, self.seconds, self.jobs = spark.sparkContext, 0.0, []  # type: ignore[var-annotated]
        fn = getattr(ce, SPARK_JOB)
        if getattr(fn, "_bench_timed", False):
            fn = fn.__wrapped__

        @functools.wraps(fn)
        def timed(*a: Any, **kw: Any) -> Any:
            before = self._job_ids()
            t0 = time.time()
            try:
                return fn(*a, **kw)
            finally:
                t1 = time.time()
                self.seconds += t1 - t0
                self.jobs.append((t0, t1, sorted(self._job_ids() - before)))

        timed._bench_timed = True  # type: ignore[attr-defined]
        setattr(ce, SPARK_JOB, timed)

    def _job_ids(self) -> set[int]:
        return set(self.sc.statusTracker().getJobIdsForGroup(None))

    def _store(self) -> Any:
        return self.sc._jsc.sc().statusStore()

    def take(self) -> dict[str, Any]:
        """Seconds of the Spark job(s) since the last call, split as the module docstring says."""
        out: dict[str, Any] = {"spark_job": self.seconds, "jobs": 0, "scheduling": 0.0, "planning": 0.0, "stages": []}
        store = self._store()
        time.sleep(0.2)  # the status store is filled by a listener, a moment after a job ends
        for t0, t1, ids in self.jobs:
            first, last, covered = None, None, 0.0
            for jid in ids:
                job = store.job(jid)
                js, je = _ms(job.submissionTime()), _ms(job.completionTime())
                if js is None or je is None:
                    continue
                out["jobs"] += 1
                first = js if first is None else min(first, js)
                last = je if last is None else max(last, je)
                spans = []
                it = job.stageIds().iterator()
                while it.hasNext():
                    try:
                        st = store.lastStageAttempt(it.next())
                    except Exception:  # skipped stage
                        continue
                    ss, se = _ms(st.submissionTime()), _ms(st.completionTime())
                    if ss is None or se is None:
                        continue
                    spans.append((ss, se))
                    out["stages"].append(
                        {
                            "job": jid,
                            "tasks": int(st.numTasks()),
                            "wall": (se - ss) / 1000,
                            "run": int(st.executorRunTime()) / 1000,
                            "deserialize": int(st.executorDeserializeTime()) / 1000,
                            "shuffle_write_records": int(st.shuffleWriteRecords()),
                            "name": str(st.name())[:60],
                        }
                    )
                covered += _union(spans) / 1000
                out["scheduling"] += max((je - js) / 1000 - _union(spans) / 1000, 0.0)
            if first is not None:
                out["planning"] += (t1 - t0) - (last - first) / 1000
        self.seconds, self.jobs = 0.0, []
        return out


def _ms(opt: Any) -> Any:
    return int(opt.get().getTime()) if opt.isDefined() else None


def _union(spans: list[tuple[int, int]]) -> int:
    total, end = 0, None
    for s, e in sorted(spans):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


def one_epoch(p: Any, jobs: SparkJobs, records: list[dict[str, str]]) -> dict[str, Any]:
    r = run_one(p, records)  # feed + run(), one epoch
    sj = jobs.take()
    stages = sj.pop("stages")
    # the epoch's stages in order: the map side(s) and the reduce side (the largest number of tasks = P is last)
    m = {
        "feed": r["feed"],
        "run": r["run_wall"],
        "epoch_seconds": r["seconds"],
        "controller": r["run_wall"] - sj["spark_job"],
        **sj,
        "stage_walls": [s["wall"] for s in stages],
        "stage_tasks": [s["tasks"] for s in stages],
        "stage_run": [s["run"] for s in stages],
        "stage_deser": [s["deserialize"] for s in stages],
        "phases": r["phases"],
    }
    return m


ROWS = [
    ("run() wall", "run"),
    ("controller (outside the Spark job)", "controller"),
    ("Spark job (run_stage_epoch)", "spark_job"),
    ("  planning + result conversion (outside Spark jobs)", "planning"),
    ("  job scheduling (outside stages)", "scheduling"),
]


def summary(ms: list[dict[str, Any]]) -> dict[str, float]:
    out = {label: statistics.median(m[k] for m in ms) for label, k in ROWS}
    n = max(len(m["stage_walls"]) for m in ms)
    for i in range(n):
        got = [m for m in ms if len(m["stage_walls"]) > i]
        out[f"stage {i + 1} wall ({got[0]['stage_tasks'][i]} tasks)"] = statistics.median(
            m["stage_walls"][i] for m in got
        )
        out[f"stage {i + 1} task run time, summed"] = statistics.median(m["stage_run"][i] for m in got)
        out[f"stage {i + 1} task deserialisation, summed"] = statistics.median(m["stage_deser"][i] for m in got)
    phases = sorted({k for m in ms for k in m["phases"]})
    for k in phases:
        out[f"reduce task phase '{k}', summed"] = statistics.median(m["phases"].get(k, 0.0) for m in ms)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--increment", type=int, default=1000)
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument(
        "--compare", default=None, metavar="KEY=VALUE", help="a tuning option for a second arm, run alternately"
    )
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument(
        "--vectorised",
        action="store_true",
        help="time the epochs of flows/url_count_vec.yaml (batch translate) on the built state",
    )
    ap.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also print the N functions the driver spends most time in (cProfile)",
    )
    args = ap.parse_args(argv)

    import cbp
    from cbp.engine.driver.session import get_spark

    vocab, source = load_vocabulary()
    keys = Keys(vocab)
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="tmp-epoch-cost-", dir=OUT))
    try:
        spark = get_spark()
        jobs = SparkJobs(spark)
        base = work / "base"
        p = cbp.Pipeline(YAML, home=str(base), spark=spark)
        t0 = time.perf_counter()
        build(p, keys, 0, args.keys, args.keys, "build")
        log(f"built {args.keys:,} keys in {time.perf_counter() - t0:.1f}s")
        del p
        arms: dict[str, Any] = {}
        names = ["default"] + ([args.compare] if args.compare else [])
        for name in names:
            shutil.copytree(base, work / f"arm-{len(arms)}")
            tuning: dict[str, Any] = {}
            if name != "default":
                k, v = name.split("=", 1)
                tuning[k] = json.loads(v) if v[:1].isdigit() or v in ("true", "false") else v
            arms[name] = cbp.Pipeline(
                vec_yaml(work) if args.vectorised else YAML, home=str(work / f"arm-{len(arms)}"), spark=spark, **tuning
            )
        incs = increments(args.keys, args.increment, args.warmup + args.epochs, args.seed)
        jobs.take()
        results: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        prof = None
        for j, ids in enumerate(incs):
            recs = keys.records(ids)
            if j == args.warmup and args.profile:
                import cProfile

                prof = cProfile.Profile()
                prof.enable()
            for name in names if j % 2 == 0 else names[::-1]:
                m = one_epoch(arms[name], jobs, recs)
                if j >= args.warmup:
                    results[name].append(m)
            if j >= args.warmup:
                log(
                    f"epoch {j - args.warmup + 1}: "
                    + "; ".join(
                        f"{n} run {results[n][-1]['run']:.3f}s spark {results[n][-1]['spark_job']:.3f}s" for n in names
                    )
                )
        sums = {n: summary(ms) for n, ms in results.items()}
        if prof is not None:
            import pstats

            prof.disable()
            pstats.Stats(prof).sort_stats("cumulative").print_stats(args.profile)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = list(dict.fromkeys(k for s in sums.values() for k in s))
    lines = [
        "# Where a small epoch's time goes (URLCount, direct mode)",
        "",
        f"- command: `.venv/bin/python bench/epoch_cost.py {' '.join(argv if argv is not None else os.sys.argv[1:])}`",
        f"- date: {_dt.datetime.now().isoformat(timespec='seconds')}; {os.cpu_count()} cores; pyspark "
        f"{_version('pyspark')}, "
        f"deltalake {_version('deltalake')}, Python {platform.python_version()}; data: {source}",
        f"- {args.keys:,} state keys; {args.epochs} measured epochs of {args.increment:,} records after {args.warmup} "
        f"warm-up; seconds, median",
        "",
        "| | " + " | ".join(names) + (" | ratio |" if len(names) == 2 else " |"),
        "|:---|" + "---:|" * (len(names) + (1 if len(names) == 2 else 0)),
    ]
    for k in rows:
        vals = [sums[n].get(k) for n in names]
        cells = [f"{v:.3f}" if v is not None else "" for v in vals]
        if len(names) == 2:
            cells.append(f"{vals[1] / vals[0]:.2f}x" if vals[0] and vals[1] is not None else "")
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    md = "\n".join(lines) + "\n"
    (OUT / "epoch_cost.md").write_text(md, encoding="utf-8")
    (OUT / "epoch_cost.json").write_text(
        json.dumps({"args": vars(args), "results": results, "summary": sums}, indent=1), encoding="utf-8"
    )
    plot(sums, names, OUT / "epoch_cost.png")
    print(md)
    return 0


def plot(sums: dict[str, dict[str, float]], names: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3 + 0.4 * len(names)))
    for i, n in enumerate(names):
        s = sums[n]
        stage_walls = [v for k, v in s.items() if k.startswith("stage ") and " wall " in k]
        segs = [(label.strip(), s[label]) for label, k in ROWS if k not in ("run", "spark_job")]
        segs += [(f"stage {j + 1}", w) for j, w in enumerate(stage_walls)]
        left = 0.0
        for j, (label, w) in enumerate(segs):
            ax.barh(i, w, left=left, color=plt.cm.tab10(j), label=label if i == 0 else None)
            left += w
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("seconds (medians; stages may overlap)")
    ax.set_title("A small URLCount epoch, split")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    raise SystemExit(main())
