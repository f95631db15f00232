#!/usr/bin/env python
"""URLCount benchmark: per-epoch time of direct (per-key and vectorised translate) vs black-box mode as the state grows.

For each state size S (default 1M, 3M, 10M distinct URLs) the benchmark builds URLCount state
with S keys (in direct mode, fed in chunks), copies the home three times, and runs the same fixed
increments (default 100k records: half existing keys drawn uniformly, half new keys, fixed seed)
on the direct copy, the black-box copy and a direct copy run by ``flows/url_count_vec.yaml`` (the
vectorised translator), alternating the modes epoch by epoch. The
first epoch on each copy is an unmeasured warm-up (the first black-box epoch after direct
epochs also dedupes the state). It prints a markdown table of median epoch times and ratios and
writes it to ``bench/out/url_count.md``, a plot to ``bench/out/url_count.png`` and every
measurement to ``bench/out/url_count.json``.

    .venv/bin/python bench/url_count_bench.py            # 1M, 3M, 10M keys, 100k increment
    .venv/bin/python bench/url_count_bench.py --quick    # 20k, 60k, 200k keys, 5k increment

URLs are real: the link targets of the Python 3.11 HTML documentation (Debian package
``python3.11-doc``, downloaded once with ``apt-get download`` and cached in ``bench/data/``), by
the crawl queue's link rules (:func:`cbp_crawl.links.page_links`: absolute and normalized), padded
with a numeric query parameter (``?p=N``) to reach millions of distinct keys. The list is cached
in ``bench/data/python3.11-doc-urls.txt`` under the rules' version
(:data:`cbp_crawl.links.RULES_VERSION`) and rebuilt when the rules change. Without the package,
generated URLs are used and the output says so.
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
YAML = ROOT / "flows" / "url_count.yaml"
YAML_VEC = ROOT / "flows" / "url_count_vec.yaml"  # the same pipeline with a vectorised translator (batch: true)
MODES = ("direct", "blackbox", "vectorised")
DATA = BENCH / "data"
OUT = BENCH / "out"
DOC_PACKAGE = "python3.11-doc"

sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------- URL vocabulary
def load_vocabulary() -> tuple[list[str], str]:
    """Base URLs and a sentence saying where they came from (cached in bench/data/).

    The cache's first line names the link rules it was built with; a cache built with other rules
    (or before the line existed) is rebuilt.
    """
    from cbp_crawl.corpus import fetch_debian_doc, iter_pages
    from cbp_crawl.links import RULES_VERSION, page_links

    cache = DATA / f"{DOC_PACKAGE}-urls.txt"
    header = f"# link targets of {DOC_PACKAGE}, cbp_crawl.links rules {RULES_VERSION}"
    if cache.exists():
        head, _, rest = cache.read_text(encoding="utf-8").partition("\n")
        urls = [u for u in rest.splitlines() if u] if head == header else []
        if urls:
            return (
                urls,
                f"real URLs: {len(urls)} distinct link targets of Debian package {DOC_PACKAGE} (cached "
                f"{cache.relative_to(ROOT)})",
            )
    root = fetch_debian_doc(DOC_PACKAGE, str(DATA))
    urls = sorted({u for page, html in iter_pages(root, DOC_PACKAGE) for u in page_links(page, html)}) if root else []
    if len(urls) >= 100:
        cache.write_text(header + "\n" + "\n".join(urls) + "\n", encoding="utf-8")
        return (
            urls,
            f"real URLs: {len(urls)} distinct link targets of Debian package {DOC_PACKAGE} (now cached in "
            f"{cache.relative_to(ROOT)})",
        )
    why = "apt-get download failed" if root is None else f"only {len(urls)} URLs found"
    rng = np.random.default_rng(7)
    words = ["news", "docs", "blog", "shop", "wiki", "forum", "api", "static", "user", "item", "tag", "page"]
    urls = sorted(
        {
            f"https://www.site{rng.integers(1000)}.example/{rng.choice(words)}/{rng.choice(words)}-{rng.integers(100)}.html"
            for _ in range(4000)
        }
    )
    return urls, f"GENERATED URLs ({len(urls)} synthetic bases): could not get real ones ({why})"


class Keys:
    """Key number i -> URL: base URL ``i mod V`` with query parameter ``p = i div V``."""

    def __init__(self, vocab: list[str]) -> None:
        self.vocab = vocab
        self.sep = ["&" if "?" in u else "?" for u in vocab]

    def records(self, ids: np.ndarray) -> list[dict[str, str]]:
        v, sep, n = self.vocab, self.sep, len(self.vocab)
        q, r = np.divmod(ids.astype(np.int64), n)
        return [{"url": f"{v[b]}{sep[b]}p={a}"} for a, b in zip(q.tolist(), r.tolist())]


# ---------------------------------------------------------------------------------- running epochs
def vec_yaml(work: Path, partitions: int | None = None) -> Path:
    """``flows/url_count_vec.yaml`` under the pipeline name ``url_count``, so that it runs on a copy of
    the state built by ``url_count.yaml`` (a home belongs to one pipeline name); ``partitions``
    replaces the stage's partition count (a larger state wants more, smaller partitions)."""
    d = work / "vec-flow"
    d.mkdir(parents=True, exist_ok=True)
    text = YAML_VEC.read_text(encoding="utf-8")
    if "pipeline: url_count_vec" not in text or "    partitions: 4\n" not in text:
        raise SystemExit(
            "flows/url_count_vec.yaml no longer says 'pipeline: url_count_vec' and 'partitions: 4'; update "
            "bench/url_count_bench.py"
        )
    if partitions:
        text = text.replace("    partitions: 4\n", f"    partitions: {int(partitions)}\n")
    (d / "url_count_vec.yaml").write_text(
        text.replace("pipeline: url_count_vec", "pipeline: url_count"), encoding="utf-8"
    )
    shutil.copy(YAML_VEC.with_suffix(".py"), d / "url_count_vec.py")
    return d / "url_count_vec.yaml"


def run_one(p: Any, records: list[dict[str, str]]) -> dict[str, Any]:
    """Feed one increment and run; exactly one epoch must run."""
    t0 = time.perf_counter()
    p.feed("urls", records)
    t1 = time.perf_counter()
    reports = p.run()
    t2 = time.perf_counter()
    if len(reports) != 1:
        raise RuntimeError(f"expected one epoch per increment, got {len(reports)}: {[r.line() for r in reports]}")
    r = reports[0]
    return {
        "epoch": r.epoch,
        "seconds": r.seconds,
        "run_wall": t2 - t1,
        "feed": t1 - t0,
        "records_in": r.records_in,
        "records_out": r.records_out,
        "keys_read": r.keys_read,
        "keys_written": r.keys_written,
        "line": r.line(),
        "row_groups_read": r.row_groups_read,
        "cache_hits": r.cache_hits,
        "cache_lookups": r.cache_lookups,
        "phases": dict(getattr(r, "phases", {}) or {}),
    }  # task seconds per phase, summed over the stage's tasks


def build(p: Any, keys: Keys, start: int, stop: int, chunk: int, log_prefix: str) -> list[dict[str, Any]]:
    """Grow the state from ``start`` to ``stop`` distinct keys, one epoch per chunk of new keys."""
    rows = []
    for a in range(start, stop, chunk):
        b = min(a + chunk, stop)
        m = run_one(p, keys.records(np.arange(a, b)))
        m["keys_after"] = b
        rows.append(m)
        log(
            f"{log_prefix} keys {b:>10,}  feed {m['feed']:6.1f}s  epoch {m['seconds']:6.1f}s  run() "
            f"{m['run_wall']:6.1f}s"
        )
    return rows


def increments(size: int, n: int, count: int, seed: int) -> list[np.ndarray]:
    """``count`` increments of ``n`` records: n/2 existing keys drawn uniformly, n/2 new keys.

    Increment j may also draw the keys that increments before it added.
    """
    rng = np.random.default_rng(seed + size)
    out, nxt = [], size
    n_old = n // 2
    for _ in range(count):
        old = rng.integers(0, nxt, size=n_old)
        new = np.arange(nxt, nxt + n - n_old)
        nxt += n - n_old
        ids = np.concatenate([old, new])
        rng.shuffle(ids)
        out.append(ids)
    return out


def counts_of(p: Any, epoch: int) -> list[tuple[str, int]]:
    return sorted((r["url"], r["count"]) for r in p.output("counts", epoch))


def live_state_files(home: Path) -> int:
    """Live data files of the stage's state table (a drop means the epoch compacted)."""
    from deltalake import DeltaTable

    return len(DeltaTable(str(home / "stages" / "url_count" / "state")).file_uris())


def measure(size: int, build_home: Path, work: Path, keys: Keys, args: argparse.Namespace) -> dict[str, Any]:
    import cbp

    homes = {m: work / f"{m}-{size}" for m in MODES}
    t0 = time.perf_counter()
    for h in homes.values():
        shutil.copytree(build_home, h)
    copy_s = time.perf_counter() - t0
    pipes = {
        m: cbp.load(
            vec_yaml(work) if m == "vectorised" else YAML, home=str(h), mode="direct" if m == "vectorised" else m
        )
        for m, h in homes.items()
    }
    n_epochs = {"direct": args.direct_epochs, "blackbox": args.epochs, "vectorised": args.direct_epochs}
    incs = increments(size, args.increment, max(n_epochs.values()) + 1, args.seed)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    files = live_state_files(homes["direct"])
    for j, ids in enumerate(incs):
        recs = keys.records(ids)
        order = list(MODES) if j % 2 == 0 else list(reversed(MODES))  # cancel drift
        for mode in order:
            if j > n_epochs[mode]:
                continue
            m = run_one(pipes[mode], recs)
            m["warmup"] = j == 0
            note = ""
            if mode == "direct":
                m["state_files"] = live_state_files(homes[mode])
                m["compacted"] = m["state_files"] < files
                files = m["state_files"]
                note = f"  state files {files}{' (compacted)' if m['compacted'] else ''}"
            runs[mode].append(m)
            log(
                f"  {size:>10,} keys  {mode:<10} {'warm-up' if j == 0 else f'epoch {j}':<8} {m['seconds']:7.2f}s "
                f"(run() {m['run_wall']:6.2f}s)  in {m['records_in']}  state read {m['keys_read']}  written "
                f"{m['keys_written']}{note}"
            )
    # the two modes must agree (same state, same increments): compare the last common epoch's output
    common = min(n_epochs.values())
    ep = {mode: rs[common]["epoch"] for mode, rs in runs.items()}
    want = counts_of(pipes["direct"], ep["direct"])
    agree = want == counts_of(pipes["blackbox"], ep["blackbox"]) and want == counts_of(
        pipes["vectorised"], ep["vectorised"]
    )
    if not agree:
        log(f"  WARNING: the modes' outputs differ at {size} keys, measured epoch {common}")
    disk = {m: sum(f.stat().st_size for f in (h / "stages").rglob("*") if f.is_file()) for m, h in homes.items()}
    if not args.keep:
        for h in homes.values():
            shutil.rmtree(h, ignore_errors=True)
    res: dict[str, Any] = {
        "size": size,
        "copy_seconds": copy_s,
        "outputs_agree": agree,
        "stage_bytes": disk,
        "runs": runs,
    }
    for mode, rs in runs.items():
        xs = [r["seconds"] for r in rs if not r["warmup"]]
        res[mode] = {
            "median": statistics.median(xs),
            "mean": statistics.fmean(xs),
            "min": min(xs),
            "max": max(xs),
            "epochs": xs,
            "warmup": rs[0]["seconds"],
            "run_wall_median": statistics.median(r["run_wall"] for r in rs if not r["warmup"]),
            "compactions": sum(1 for r in rs if not r["warmup"] and r.get("compacted")),
        }
    return res


# ---------------------------------------------------------------------------------- reporting
def fmt_keys(n: int) -> str:
    if n >= 1_000_000 and n % 100_000 == 0:
        return f"{n / 1e6:g}M"
    if n >= 1000 and n % 100 == 0:
        return f"{n / 1e3:g}k"
    return str(n)


def phase_lines(results: list[dict[str, Any]]) -> list[str]:
    """Where a median direct epoch's task time goes, per size (EpochReport.phases, summed over tasks)."""
    rows = []
    for r in results:
        runs = [x for x in r["runs"]["direct"] if not x["warmup"] and not x.get("compacted") and x.get("phases")]
        if not runs:
            continue
        names = list(dict.fromkeys(k for x in runs for k in x["phases"]))
        med = {k: statistics.median(x["phases"].get(k, 0.0) for x in runs) for k in names}
        rows.append((r["size"], med, statistics.median(x["seconds"] for x in runs)))
    if not rows:
        return []
    names = list(dict.fromkeys(k for _, med, _ in rows for k in med))
    out = [
        "Direct mode, where the time goes (median over non-compacting epochs; task seconds per phase summed over the "
        "4 tasks, which run 2 at a time, so they add up to about 2x the task part of the epoch):",
        "",
        "| state keys | epoch s | " + " | ".join(names) + " |",
        "|---:|---:|" + "---:|" * len(names),
    ]
    for size, med, ep in rows:
        out.append(f"| {fmt_keys(size)} | {ep:.2f} | " + " | ".join(f"{med.get(k, 0.0):.2f}" for k in names) + " |")
    return out + [""]


def report(
    results: list[dict[str, Any]],
    builds: list[dict[str, Any]],
    args: argparse.Namespace,
    source: str,
    command: str,
    total_s: float,
    spark_s: float,
) -> str:
    base = results[0]
    d0, b0 = base["direct"]["median"], base["blackbox"]["median"]
    lines = [
        "# URLCount: direct (per-key, vectorised) vs black-box epoch time",
        "",
        f"- command: `{command}`",
        f"- date: {_dt.datetime.now().isoformat(timespec='seconds')}; machine: {os.cpu_count()} cores, "
        f"{_mem_gib():.0f} GiB RAM, {platform.python_implementation()} {platform.python_version()}, pyspark "
        f"{_version('pyspark')}, "
        f"Spark master {os.environ.get('CBP_SPARK_MASTER', 'local[*]')}, state cache {args.cache_mb:.0f} MB per Python "
        f"worker",
        f"- data: {source}",
        f"- increment: {args.increment:,} records per epoch ({args.increment // 2:,} existing keys drawn uniformly, "
        f"{args.increment - args.increment // 2:,} new keys), seed {args.seed}; per size, both modes start from copies "
        f"of the same state "
        f"and get the same increments; 1 unmeasured warm-up epoch each, then {args.direct_epochs} measured direct and "
        f"{args.epochs} measured black-box epochs, modes alternating",
        "- times are EpochReport.seconds of one stage epoch: median [min-max]; 'direct mean' includes the epochs that "
        "compacted "
        "the state (count in parentheses), i.e. the amortized cost; 'direct 1st' is the unmeasured first epoch on the "
        "fresh copy "
        "(the workers' state cache is cold for it); ratios use medians",
        "",
        f"| state keys | direct s | direct mean s | direct 1st s | black-box s | black-box / direct | direct vs "
        f"{fmt_keys(base['size'])} "
        f"| black-box vs {fmt_keys(base['size'])} | vectorised s | vectorised / direct | direct state keys read | "
        f"outputs agree |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|:---:|",
    ]
    for r in results:
        d, b, v = r["direct"], r["blackbox"], r["vectorised"]
        kr = statistics.median(x["keys_read"] for x in r["runs"]["direct"] if not x["warmup"])
        lines.append(
            f"| {fmt_keys(r['size'])} | {d['median']:.2f} [{d['min']:.2f}-{d['max']:.2f}] | {d['mean']:.2f} "
            f"({d['compactions']}) | {d['warmup']:.2f} "
            f"| {b['median']:.2f} [{b['min']:.2f}-{b['max']:.2f}] "
            f"| {b['median'] / d['median']:.1f}x | {d['median'] / d0:.2f}x | {b['median'] / b0:.2f}x "
            f"| {v['median']:.2f} [{v['min']:.2f}-{v['max']:.2f}] | {v['median'] / d['median']:.2f}x "
            f"| {kr:,.0f} | {'yes' if r['outputs_agree'] else 'NO'} |"
        )
    top = results[-1]
    dr, br = top["direct"]["median"] / d0, top["blackbox"]["median"] / b0
    dmr = top["direct"]["mean"] / base["direct"]["mean"]
    grow = top["size"] / base["size"]
    d_ok, b_ok = dr <= 1.5, br >= 2.0
    lines += [
        "",
        f"Acceptance ({fmt_keys(top['size'])} vs {fmt_keys(base['size'])} state keys, {grow:g}x the state): "
        f"direct {dr:.2f}x (needs <= 1.5x: {'PASS' if d_ok else 'FAIL'}); "
        f"black-box {br:.2f}x (grows with the state, taken as >= 2x: {'PASS' if b_ok else 'FAIL'}). "
        f"Direct with compactions amortized (means): {dmr:.2f}x.",
        "",
        *phase_lines(results),
        "State build (direct mode, one epoch per chunk of "
        f"{args.chunk:,} new keys; each size continues from the previous one, so times are cumulative):",
        "",
        "| state keys | epochs | feed s | epoch s | run() s | build total s (cumulative) | keys/s |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    cum = 0.0
    for b in builds:
        total = sum(x["feed"] + x["run_wall"] for x in b["rows"])
        cum += total
        lines.append(
            f"| {fmt_keys(b['size'])} | {len(b['rows'])} | {sum(x['feed'] for x in b['rows']):.0f} | "
            f"{sum(x['seconds'] for x in b['rows']):.0f} | {sum(x['run_wall'] for x in b['rows']):.0f} | {cum:.0f} | "
            f"{b['size'] / cum:,.0f} |"
        )
    lines += [
        "",
        f"Total benchmark time: {total_s / 60:.1f} min (Spark session start {spark_s:.0f}s, not in the build times).",
        "",
    ]
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], args: argparse.Namespace, path: Path, source_is_real: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["size"] for r in results]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    styles = {
        "direct": ("tab:blue", "o", "direct"),
        "blackbox": ("tab:red", "s", "black-box"),
        "vectorised": ("tab:green", "^", "direct, vectorised translate"),
    }
    for mode, (color, marker, label) in styles.items():
        med = np.array([r[mode]["median"] for r in results])
        lo = med - np.array([r[mode]["min"] for r in results])
        hi = np.array([r[mode]["max"] for r in results]) - med
        ax1.errorbar(xs, med, yerr=[lo, hi], color=color, marker=marker, capsize=3, label=label)
        ax2.plot(xs, med / med[0], color=color, marker=marker, label=label)
        if mode == "direct":
            mean = np.array([r[mode]["mean"] for r in results])
            ax1.plot(xs, mean, color=color, ls="--", lw=1, label="direct mean (compactions amortized)")
    ax2.plot(xs, np.array(xs) / xs[0], color="grey", ls=":", label="state size")
    ax2.axhline(1.5, color="tab:blue", ls="--", lw=0.8, label="1.5x (direct limit)")
    for ax in (ax1, ax2):
        ax.set_xscale("log")
        ax.set_xticks(xs)
        ax.set_xticklabels([fmt_keys(x) for x in xs])
        ax.minorticks_off()
        ax.set_xlabel("state keys")
        ax.grid(True, alpha=0.3)
        ax.legend()
    ax1.set_ylabel("epoch seconds (median, min-max)")
    ax1.set_ylim(bottom=0)
    ax1.set_title(f"URLCount epoch time, {args.increment:,}-record increment")
    ax2.set_yscale("log")
    ax2.set_ylabel(f"epoch time / time at {fmt_keys(xs[0])}")
    ax2.set_title("growth with the state")
    fig.suptitle(
        f"cbp direct vs black-box ({os.cpu_count()} cores; {'real' if source_is_real else 'GENERATED'} URLs)",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _mem_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return float("nan")


def _version(pkg: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(pkg)
    except PackageNotFoundError:
        return "?"


# ---------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--sizes", default=None, help="state sizes in keys, comma-separated (default 1000000,3000000,10000000)"
    )
    ap.add_argument("--increment", type=int, default=None, help="records per measured epoch (default 100000)")
    ap.add_argument("--epochs", type=int, default=3, help="measured epochs per mode and size (default 3)")
    ap.add_argument(
        "--direct-epochs",
        type=int,
        default=8,
        help="measured epochs of direct mode (cheap; default 8, so that one compaction falls in them)",
    )
    ap.add_argument("--chunk", type=int, default=None, help="new keys per epoch while building state (default 1000000)")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--quick", action="store_true", help="smoke run: 20k,60k,200k keys, 5k increment, 50k chunks")
    ap.add_argument(
        "--workdir", default=None, help="where the temporary homes go (default: a new dir under bench/out/)"
    )
    ap.add_argument(
        "--cache-mb",
        type=float,
        default=4096,
        help="CBP_STATE_CACHE_MB: decoded state files each Spark Python worker keeps (default 4096, "
        "enough for 10M URL keys on 2 workers)",
    )
    ap.add_argument("--keep", action="store_true", help="keep the temporary homes")
    args = ap.parse_args(argv)
    if args.quick:
        args.sizes = args.sizes or "20000,60000,200000"
        args.increment = args.increment or 5000
        args.chunk = args.chunk or 50000
    args.sizes = sorted({int(s) for s in (args.sizes or "1000000,3000000,10000000").split(",")})
    args.increment = args.increment or 100_000
    args.chunk = args.chunk or 1_000_000
    args.direct_epochs = max(args.direct_epochs, args.epochs)
    if args.epochs < 1 or args.increment < 2 or args.chunk < 1 or args.sizes[0] < 1:
        ap.error("--epochs, --increment, --chunk and --sizes must be positive")
    command = " ".join(
        [
            ".venv/bin/python",
            os.path.relpath(sys.argv[0], ROOT) if argv is None else "bench/url_count_bench.py",
            *(sys.argv[1:] if argv is None else argv),
        ]
    )

    t_start = time.perf_counter()
    OUT.mkdir(parents=True, exist_ok=True)
    vocab, source = load_vocabulary()
    log(f"data: {source}")
    keys = Keys(vocab)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="tmp-url-count-", dir=OUT))
    work.mkdir(parents=True, exist_ok=True)
    log(f"work dir: {work}")

    os.environ["CBP_STATE_CACHE_MB"] = str(args.cache_mb)  # before Spark starts its Python workers
    import cbp
    from cbp.engine.driver.session import get_spark

    t0 = time.perf_counter()
    get_spark()
    spark_s = time.perf_counter() - t0
    log(f"Spark session started in {spark_s:.1f}s")

    results: list[dict[str, Any]] = []
    builds: list[dict[str, Any]] = []
    try:
        build_home = work / "build"
        builder = cbp.load(YAML, home=str(build_home), mode="direct")
        have = 0
        for size in args.sizes:
            t0 = time.perf_counter()
            rows = build(builder, keys, have, size, args.chunk, "build")
            have = size
            builds.append({"size": size, "rows": rows, "seconds": time.perf_counter() - t0})
            log(f"state of {size:,} keys built in {builds[-1]['seconds']:.0f}s (this step); measuring ...")
            results.append(measure(size, build_home, work, keys, args))
            r = results[-1]
            log(
                f"{size:>10,} keys: direct {r['direct']['median']:.2f}s  black-box {r['blackbox']['median']:.2f}s  "
                f"(ratio {r['blackbox']['median'] / r['direct']['median']:.1f}x)"
            )
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    total = time.perf_counter() - t_start
    md = report(results, builds, args, source, command, total, spark_s)
    (OUT / "url_count.md").write_text(md, encoding="utf-8")
    (OUT / "url_count.json").write_text(
        json.dumps(
            {"args": vars(args), "source": source, "builds": builds, "results": results, "total_seconds": total},
            indent=1,
        ),
        encoding="utf-8",
    )
    plot(results, args, OUT / "url_count.png", source.startswith("real"))
    print()
    print(md)
    print(f"wrote {OUT / 'url_count.md'}, {OUT / 'url_count.png'}, {OUT / 'url_count.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
