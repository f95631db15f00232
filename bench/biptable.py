#!/usr/bin/env python
"""BIPtable break-even (paper 001 §5.2, Fig. 13): reading state through the index vs scanning it.

A stage stores a set of unique keys in inner state (URLCount, ``flows/url_count.yaml`` with one
partition, direct mode), pre-loaded with N keys (default 500k; ``--quick`` 50k) in one epoch, so
the partition is one state file of ceil(N / R) row groups (R = 8192 rows per row group). Then,
for each fraction f of the stored keys (0.01%, 0.1%, 1%, 5%, 10%, 20%, 40%, 60%, 80%, 100%), one
epoch whose increment holds f·N distinct stored keys drawn at random runs twice, each time on a
fresh copy of the pre-loaded home: once forced to read through the index (only the row groups
that hold the keys; ``state_scan_fraction`` > 1) and once forced to scan (read the whole file;
``state_scan_fraction`` 0). The worker's state cache is set to 1 MB so that nothing read in
one measurement survives to the next (each epoch reads its state from the files). Reported per f:
the epoch time (EpochReport.seconds) and the task's ``state_read`` phase (EpochReport.phases)
(median over ``--repeats`` epochs, default 1), and, since those include the same translate and
decode work on both sides and the machine is shared, the time of the state reader alone
(:class:`cbp.engine.task.bipindex.StateReader` on the same files in this process, minimum of
``--reader-repeats``), which decides the break-even fraction of keys touched (the smallest f from
which on scanning is no slower, interpolated), reported next to the paper's 60%.

    .venv/bin/python bench/biptable.py            # 500k keys (~10 min on 2 shared cores)
    .venv/bin/python bench/biptable.py --quick    # 50k keys (~2 min)

Output: a markdown table on stdout and in ``bench/out/biptable.md``, every measurement in
``bench/out/biptable.json``, a plot in ``bench/out/biptable.png``. The keys are the real URLs of
``bench/url_count_bench.py`` (python3.11-doc link targets, padded with ``?p=N``).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
FLOWS = ROOT / "flows"
OUT = BENCH / "out"

sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(BENCH))

from url_count_bench import Keys, load_vocabulary  # noqa: E402  (the same real URL keys)

FRACTIONS = [0.0001, 0.001, 0.01, 0.05, 0.10, 0.20, 0.40, 0.60, 0.80, 1.00]
#: Extra fractions for the reader-alone timing (cheap): where the index stops saving row groups.
READER_EXTRA = [0.00002, 0.00005, 0.0002, 0.0003, 0.0005]
MODES = {"index": 2.0, "scan": 0.0}  # state_scan_fraction that forces each side
PAPER_BREAK_EVEN = 0.60  # §4.5.2/§5.2: BIPtables beat a sequential scan up to ~60% of the state records
CACHE_MB = 1.0  # per-worker state cache in the measured epochs: too small to keep a state file
# keys per lookup in the reader-alone timing: spark.sql.execution.arrow.maxRecordsPerBatch (cbp.engine.driver.session)
CHUNK = 20_000


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def one_partition_yaml(work: Path) -> Path:
    """``flows/url_count.yaml`` with ``partitions: 1``, beside a copy of its translator module."""
    text = (FLOWS / "url_count.yaml").read_text(encoding="utf-8")
    if "partitions: 4" not in text:
        raise SystemExit("flows/url_count.yaml no longer says 'partitions: 4'; update bench/biptable.py")
    d = work / "flow"
    d.mkdir(parents=True, exist_ok=True)
    (d / "url_count.yaml").write_text(text.replace("partitions: 4", "partitions: 1"), encoding="utf-8")
    shutil.copy(FLOWS / "url_count.py", d / "url_count.py")
    return d / "url_count.yaml"


def epoch(
    yaml: Path,
    home: Path,
    records: list[dict[str, str]],
    row_group: int,
    scan: float | None,
    cache_mb: float | None,
) -> tuple[Any, dict[str, Any]]:
    from cbp.pipeline import Pipeline

    tuning: dict[str, Any] = {"state_row_group": row_group}
    if scan is not None:
        tuning["state_scan_fraction"] = scan
    if cache_mb is not None:
        tuning["state_cache_mb"] = cache_mb
    from url_count_bench import run_one  # bench/ is on the path when a benchmark runs

    p = Pipeline(yaml, home=str(home), mode="direct", **tuning)
    return p, run_one(p, records)


def state_shape(home: Path) -> dict[str, int]:
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    uris = DeltaTable(str(home / "stages" / "url_count" / "state")).file_uris()
    groups = [pq.ParquetFile(u.removeprefix("file://")).metadata.num_row_groups for u in uris]
    return {
        "files": len(uris),
        "row_groups": sum(groups),
        "bytes": sum(os.path.getsize(u.removeprefix("file://")) for u in uris),
    }


def break_even(fr: list[float], index: list[float], scan: list[float]) -> tuple[float | None, str]:
    """The fraction from which on scanning is no slower than the index, robust to a noisy point:
    the first measured fraction at which scan <= index and the median scan/index ratio over it and
    every larger fraction is <= 1; interpolated linearly with the fraction just below it."""
    d = [i - s for i, s in zip(index, scan)]  # > 0: the index is slower
    ratios = [s / max(i, 1e-12) for i, s in zip(index, scan)]
    for k in range(len(fr)):
        if d[k] >= 0 and statistics.median(ratios[k:]) <= 1.0:
            if k == 0:
                return fr[0], f"scan no slower from the smallest fraction measured ({fr[0]:.3%}) on"
            a, b = fr[k - 1], fr[k]
            x = a + (b - a) * (-d[k - 1]) / (d[k] - d[k - 1]) if d[k - 1] < 0 else a
            return (
                x,
                f"index faster at {a:.3%}, scan no slower at {b:.3%} (median scan/index from there on "
                f"{statistics.median(ratios[k:]):.2f})",
            )
    return None, "the index is faster, or no slower in the median, at every fraction measured: no break-even up to 100%"


def reader_bench(base: Path, fractions: list[float], repeats: int, chunk: int, seed: int) -> dict[str, Any]:
    """Time :meth:`StateReader.rows_of` alone (in this process, no Spark) on the pre-loaded state:
    for each fraction, the hashes of that many random stored keys, sorted and handed over in chunks
    of ``chunk`` (as a task's input batches arrive), through the index and by scanning; a fresh
    reader, index and 1 MB cache each time. Returns the minimum and median seconds per side."""
    import glob

    from cbp.engine.task import bipindex
    from cbp.storage import Home

    home = Home(str(base))
    rel = os.path.relpath(
        sorted(glob.glob(str(base / "stages" / "url_count" / "index" / "_part=0" / "*.parquet")))[-1], base
    )
    rng = np.random.default_rng(seed)
    sides = {**MODES, "rule": None}  # "rule": the engine's default (SCAN_FRACTION, or CBP_STATE_SCAN_FRACTION)
    out: dict[str, Any] = {mode: {"min": [], "median": [], "row_groups": []} for mode in sides}
    out["rule_scan_fraction"] = bipindex.scan_fraction()
    for f in fractions:
        bipindex._INDEXES.clear()
        all_h = bipindex.PartitionIndex.load(home, rel).h
        h = np.sort(rng.choice(all_h, size=max(1, round(f * all_h.size)), replace=False))
        times: dict[str, list[float]] = {mode: [] for mode in sides}
        rgs: dict[str, int] = {}
        for rep in range(repeats):
            for mode in list(sides) if rep % 2 == 0 else list(sides)[::-1]:
                bipindex._INDEXES.clear()
                t0 = time.perf_counter()
                idx = bipindex.PartitionIndex.load(home, rel)
                reader = bipindex.StateReader(
                    home, "stages/url_count/state", idx, cache_mb=CACHE_MB, scan_fraction=sides[mode]
                )
                n = 0
                for a in range(0, h.size, chunk):
                    n += reader.rows_of(h[a : a + chunk])[0].num_rows
                times[mode].append(time.perf_counter() - t0)
                rgs[mode] = reader.row_groups_read
                if n != h.size:
                    raise RuntimeError(f"reader found {n} rows for {h.size} keys")
        for mode in sides:
            out[mode]["min"].append(min(times[mode]))
            out[mode]["median"].append(statistics.median(times[mode]))
            out[mode]["row_groups"].append(rgs[mode])
        log(
            f"  reader f {f:8.3%}: index {min(times['index']):.3f}s  scan {min(times['scan']):.3f}s  "
            f"rule {min(times['rule']):.3f}s ({rgs['rule']} row groups) (min of {repeats})"
        )
    return out


def rows_to_row_groups(f: float, r: int) -> float:
    """Fraction of row groups touched when a fraction ``f`` of the keys, uniformly random, is touched."""
    return 1.0 - (1.0 - f) ** r


# ------------------------------------------------------------------------------------- reporting
def report(res: dict[str, Any], args: argparse.Namespace, command: str) -> str:
    fr = res["fractions"]
    lines = [
        "# BIPtable break-even: state read through the index vs a scan (paper Fig. 13)",
        "",
        f"- command: `{command}`",
        f"- date: {_dt.datetime.now().isoformat(timespec='seconds')}; machine: {os.cpu_count()} cores (shared), "
        f"{platform.python_implementation()} {platform.python_version()}, Spark master "
        f"{os.environ.get('CBP_SPARK_MASTER', 'local[*,2]')}",
        f"- data: {res['source']}",
        f"- state: URLCount, 1 partition, {args.keys:,} keys pre-loaded in one epoch = {res['shape']['files']} file, "
        f"{res['shape']['row_groups']} row groups of {args.row_group} rows, {res['shape']['bytes'] / 2**20:.1f} MiB on "
        f"disk",
        f"- epoch columns: median of {args.repeats} Spark epoch(s), each on a fresh copy of that state, worker state "
        f"cache {CACHE_MB:g} MB "
        "(nothing survives between measurements); increment = f x keys distinct stored keys drawn at random (seed "
        f"{args.seed}); the two sides alternate order; 'state_read' is the task's state_read phase "
        f"(EpochReport.phases)",
        "",
        f"- 'reader' columns: StateReader.rows_of alone, in the driver (no Spark), keys handed over sorted in chunks "
        f"of {CHUNK:,} "
        f"as a task's input batches come, minimum of {args.reader_repeats} runs each (the machine is shared: minima "
        f"are the "
        "stable statistic); this is exactly what the knob changes",
        "",
        "| keys touched f | keys | row groups read (index) | reader: index s | reader: scan s | scan/index (reader) "
        "| index: state_read s | scan: state_read s | index: epoch s | scan: epoch s | scan/index (epoch) | outputs "
        "agree |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    rd = res["reader"]
    for k, f in enumerate(fr):
        i, s = res["median"]["index"], res["median"]["scan"]
        q = rd["fractions"].index(f)
        lines.append(
            f"| {f:.2%} | {res['touched'][k]:,} | {res['rg_index'][k]:.0f} / {res['shape']['row_groups']} "
            f"| {rd['index']['min'][q]:.3f} | {rd['scan']['min'][q]:.3f} | "
            f"{rd['scan']['min'][q] / max(rd['index']['min'][q], 1e-9):.2f} "
            f"| {i['state_read'][k]:.3f} | {s['state_read'][k]:.3f} "
            f"| {i['seconds'][k]:.2f} | {s['seconds'][k]:.2f} | {s['seconds'][k] / i['seconds'][k]:.2f} | "
            f"{'yes' if res['agree'][k] else 'NO'} |"
        )
    lines += [
        "",
        "Reader alone, every fraction timed (minimum seconds; row groups = what the index read):",
        "",
        f"| keys touched f | row groups (index) | 1-(1-f)^R | index s | scan s | scan/index | rule (SCAN_FRACTION "
        f"{rd['rule_scan_fraction']:g}) s "
        "| rule row groups read |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for q, f in enumerate(rd["fractions"]):
        lines.append(
            f"| {f:.3%} | {rd['index']['row_groups'][q]} / {res['shape']['row_groups']} | "
            f"{rows_to_row_groups(f, args.row_group):.0%} "
            f"| {rd['index']['min'][q]:.3f} | {rd['scan']['min'][q]:.3f} | "
            f"{rd['scan']['min'][q] / max(rd['index']['min'][q], 1e-9):.2f} "
            f"| {rd['rule']['min'][q]:.3f} | {rd['rule']['row_groups'][q]} |"
        )
    be, be_s, be_r = res["break_even"]["state_read"], res["break_even"]["seconds"], res["break_even"]["reader"]
    r = args.row_group

    def fmt(x: float | None) -> str:
        return (
            "none up to 100%" if x is None else f"{x:.3%} of keys (= {rows_to_row_groups(x, r):.1%} of the row groups)"
        )

    rg_be = res["break_even"]["reader_row_groups"]
    lines += [
        "",
        f"Break-even fraction of keys touched (scan no slower than the index from there on), from the reader alone: "
        f"**{fmt(be_r)}** "
        f"({res['break_even']['reader_how']}); the same timings against the fraction of row groups the index read: "
        f"{'none' if rg_be is None else format(rg_be, '.1%')} of the row groups; "
        f"from the epochs' state_read phase: {fmt(be)} ({res['break_even']['state_read_how']}); "
        f"from the whole epoch time: {fmt(be_s)} ({res['break_even']['seconds_how']}). "
        f"Paper (§5.2, Fig. 13, BIPtable vs 'sequential, no sort' on HDFS): ~{PAPER_BREAK_EVEN:.0%} of the state "
        f"records.",
        "",
        f"Row groups of {r} rows: a fraction f of uniformly random keys touches about 1-(1-f)^{r} of the row groups "
        f"(f = 0.01%: {rows_to_row_groups(1e-4, r):.0%}, 0.1%: {rows_to_row_groups(1e-3, r):.0%}, 1%: "
        f"{rows_to_row_groups(1e-2, r):.0%}), "
        "so from ~0.1% of the keys up the index reads every row group too, and the two sides differ only in how they "
        "read "
        "and match them. Suggested SCAN_FRACTION (rule on row groups) = 1-(1-f*)^R for the reader's break-even f*: "
        f"**{res['suggested_scan_fraction']}**.",
        "",
    ]
    return "\n".join(lines)


def plot(res: dict[str, Any], args: argparse.Namespace, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fr = [f * 100 for f in res["fractions"]]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for ax, key, title in (
        (axes[0], "reader", "StateReader alone (min)"),
        (axes[1], "state_read", "task state_read phase"),
        (axes[2], "seconds", "epoch time"),
    ):
        for mode, style in (("index", "o-"), ("scan", "s--")):
            xs = [f * 100 for f in res["reader"]["fractions"]] if key == "reader" else fr
            ys = res["reader"][mode]["min"] if key == "reader" else res["median"][mode][key]
            ax.plot(xs, ys, style, label="through the index (row groups)" if mode == "index" else "scan (whole file)")
        be = res["break_even"][key]
        if be is not None:
            ax.axvline(be * 100, color="red", lw=1, label=f"break-even {be:.2%}")
        ax.axvline(PAPER_BREAK_EVEN * 100, color="grey", ls=":", lw=1, label="paper's break-even 60%")
        ax.set_xscale("log")
        ax.set_xlabel("keys touched (% of the state, log scale)")
        ax.set_ylabel("seconds (median)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(
        f"BIPtable break-even: {args.keys:,} keys, 1 partition, {res['shape']['row_groups']} row groups of "
        f"{args.row_group} rows"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)


# ------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="50k keys instead of 500k")
    ap.add_argument("--keys", type=int, default=None, help="state keys pre-loaded (500000; --quick 50000)")
    ap.add_argument(
        "--fractions", default=",".join(f"{f:g}" for f in FRACTIONS), help="fractions of the keys an increment touches"
    )
    ap.add_argument("--repeats", type=int, default=None, help="Spark epochs per (fraction, side) (1; 0 skips them)")
    ap.add_argument(
        "--reader-repeats", type=int, default=11, help="StateReader-alone timings per (fraction, side) (11)"
    )
    ap.add_argument("--row-group", type=int, default=None, help="rows per state row group (the engine's ROW_GROUP)")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument(
        "--workdir", default=None, help="directory for the temporary homes (default: a new one under bench/out/)"
    )
    ap.add_argument("--keep", action="store_true", help="keep the pre-loaded home")
    args = ap.parse_args(argv)
    from cbp.engine.task.bipindex import ROW_GROUP

    args.keys = args.keys or (50_000 if args.quick else 500_000)
    args.repeats = 1 if args.repeats is None else args.repeats
    args.row_group = args.row_group or ROW_GROUP
    fractions = [float(x) for x in args.fractions.split(",")]
    command = "bench/biptable.py " + " ".join(sys.argv[1:] if argv is None else argv)
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="tmp-biptable-", dir=OUT))
    work.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    vocab, source = load_vocabulary()
    keys = Keys(vocab)
    log(source)
    yaml = one_partition_yaml(work)
    base = work / "base"
    log(f"pre-loading {args.keys:,} keys in one epoch")
    _, m = epoch(yaml, base, keys.records(np.arange(args.keys)), args.row_group, None, None)
    shape = state_shape(base)
    log(f"  {m['seconds']:.1f}s; state: {shape}")

    log(f"reader alone (no Spark): {args.reader_repeats} repeats per fraction and side")
    rfr = sorted(
        set(fractions) | (set(READER_EXTRA) if args.fractions == ",".join(f"{f:g}" for f in FRACTIONS) else set())
    )
    reader = reader_bench(base, rfr, args.reader_repeats, CHUNK, args.seed)
    reader["fractions"] = rfr
    rd_be, rd_how = break_even(rfr, reader["index"]["min"], reader["scan"]["min"])
    n_rg = shape["row_groups"]
    rg_frac = [g / n_rg for g in reader["index"]["row_groups"]]
    by_rg = sorted(zip(rg_frac, reader["index"]["min"], reader["scan"]["min"]))  # the same timings, by row groups read
    rg_be, rg_how = break_even([x[0] for x in by_rg], [x[1] for x in by_rg], [x[2] for x in by_rg])

    rng = np.random.default_rng(args.seed)
    touched = [max(1, round(f * args.keys)) for f in fractions]
    incs = [keys.records(rng.choice(args.keys, size=n, replace=False)) for n in touched]

    def measure(k: int, mode: str, rep: int) -> dict[str, Any]:
        home = work / f"m-{mode}-{k}-{rep}"
        shutil.copytree(base, home)
        p, m = epoch(yaml, home, incs[k], args.row_group, MODES[mode], CACHE_MB)
        m["state_read"] = m["phases"].get("state_read", 0.0)
        m["out"] = sorted((r["url"], r["count"]) for r in p.output("counts", m["epoch"])) if rep == 0 else None
        shutil.rmtree(home, ignore_errors=True)
        return m

    log("warm-up epoch (unmeasured)")
    measure(len(fractions) // 2, "index", 1)
    runs: dict[str, list[list[dict[str, Any]]]] = {mode: [[] for _ in fractions] for mode in MODES}
    agree = [True] * len(fractions)
    for rep in range(args.repeats if args.repeats > 0 else 0):
        for k, f in enumerate(fractions):
            order = list(MODES) if (k + rep) % 2 == 0 else list(MODES)[::-1]
            for mode in order:
                m = measure(k, mode, rep)
                runs[mode][k].append(m)
                log(
                    f"  rep {rep} f {f:8.2%} {mode:<5} epoch {m['seconds']:6.2f}s  state_read {m['state_read']:6.3f}s  "
                    f"row groups {m['row_groups_read']:>4}  keys read {m['keys_read']:>7}"
                )
            if rep == 0:  # the two sides must give the same output
                agree[k] = runs["index"][k][0]["out"] == runs["scan"][k][0]["out"]
                for mode in MODES:
                    runs[mode][k][0]["out"] = None
    nan = float("nan")
    med = {
        mode: {
            key: [
                statistics.median(x[key] for x in runs[mode][k]) if runs[mode][k] else nan
                for k in range(len(fractions))
            ]
            for key in ("seconds", "state_read")
        }
        for mode in MODES
    }
    be, how = (
        break_even(fractions, med["index"]["state_read"], med["scan"]["state_read"])
        if args.repeats
        else (None, "not measured")
    )
    be_s, how_s = (
        break_even(fractions, med["index"]["seconds"], med["scan"]["seconds"])
        if args.repeats
        else (None, "not measured")
    )
    suggested = "above 1 (never scan)" if rd_be is None else f"{rows_to_row_groups(rd_be, args.row_group):.2f}"
    res = {
        "fractions": fractions,
        "touched": touched,
        "shape": shape,
        "source": source,
        "median": med,
        "agree": agree,
        "rg_index": [reader["index"]["row_groups"][rfr.index(f)] for f in fractions],
        "reader": reader,
        "break_even": {
            "reader": rd_be,
            "reader_how": rd_how,
            "reader_row_groups": rg_be,
            "reader_row_groups_how": rg_how,
            "state_read": be,
            "state_read_how": how,
            "seconds": be_s,
            "seconds_how": how_s,
        },
        "suggested_scan_fraction": suggested,
        "paper_break_even": PAPER_BREAK_EVEN,
        "runs": runs,
    }
    md = report(res, args, command) + f"\nTotal {time.perf_counter() - t_start:.0f} s.\n"
    (OUT / "biptable.md").write_text(md, encoding="utf-8")
    (OUT / "biptable.json").write_text(json.dumps({"args": vars(args), **res}, indent=1), encoding="utf-8")
    plot(res, args, OUT / "biptable.png")
    if not args.keep and not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    print()
    print(md)
    print(f"wrote {OUT / 'biptable.md'}, {OUT / 'biptable.png'}, {OUT / 'biptable.json'}")
    return 0 if all(agree) else 1


if __name__ == "__main__":
    sys.exit(main())
