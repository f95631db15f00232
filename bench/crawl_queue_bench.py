#!/usr/bin/env python
"""Crawl-queue benchmark (paper 001 §5.1, Fig. 11 and 12): direct vs black-box vs landmark.

A real crawl of the OpenJDK 17 API documentation (Debian package ``openjdk-17-doc``, about
10,000 HTML pages, downloaded once with ``apt-get download`` and unpacked into ``bench/data/``):
the crawler starts at the documentation's index page and fetches up to ``--pages`` pages per
round, best score first, until the queue is empty or ``--max-rounds`` rounds were done. Each
round's pages are one increment, processed in the same run, side by side, by

- **direct**: ``flows/crawl_queue.yaml`` in direct mode (the crawler's own pipeline),
- **black-box**: the same pipeline in black-box mode (state re-read and re-shuffled, §4.4),
- **landmark**: ``flows/crawl_queue_landmark.yaml``, the same stages without state, fed all
  pages crawled so far and recomputing the whole queue (the non-incremental strawman).

The time per increment is the ``run`` of each pipeline (landing the increment is timed apart).
After every increment all three queues are checked against the from-scratch computation in
pandas (:mod:`cbp_crawl.reference`). Prints a markdown table, writes it to
``bench/out/crawl_queue.md``, every measurement to ``bench/out/crawl_queue.json`` and the plot
(per-increment and cumulative time, the shape of Fig. 12 and 11) to ``bench/out/crawl_queue.png``.

    .venv/bin/python bench/crawl_queue_bench.py                 # openjdk-17-doc, 900 pages per round
    .venv/bin/python bench/crawl_queue_bench.py --quick         # python3.11-doc, 60 pages per round, 6 rounds
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import math
import os
import platform
import shutil
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DATA = BENCH / "data"
OUT = BENCH / "out"
sys.path.insert(0, str(ROOT))  # run from a checkout without installing

SEEDS = {
    "openjdk-17-doc": "/usr/share/doc/openjdk-17-jre-headless/api/index.html",
    "python3.11-doc": "/usr/share/doc/python3.11/html/index.html",
}
MODES = ("direct", "blackbox", "landmark")
COUNT, DECIDE = (
    ("extract_links", "count_links"),
    ("merge", "score", "threshold"),
)  # the paper's CountLinks / DecideCrawl


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def check(name: str, got: dict[str, float], want: dict[str, float]) -> None:
    if set(got) != set(want):
        extra, missing = sorted(set(got) - set(want))[:3], sorted(set(want) - set(got))[:3]
        raise SystemExit(f"{name}: queue differs from the from-scratch queue (extra {extra}, missing {missing})")
    bad = [u for u in want if not math.isclose(got[u], want[u])]
    if bad:
        raise SystemExit(
            f"{name}: scores differ from the from-scratch queue, e.g. {bad[0]}: {got[bad[0]]} vs {want[bad[0]]}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--package", default="openjdk-17-doc")
    ap.add_argument("--pages", type=int, default=900, help="pages fetched per crawl round (one increment)")
    ap.add_argument("--max-rounds", type=int, default=14)
    ap.add_argument("--quick", action="store_true", help="python3.11-doc, 60 pages per round, 6 rounds")
    ap.add_argument("--work", default=str(OUT / "crawl_work"), help="scratch directory for the three homes")
    args = ap.parse_args()
    if args.quick:
        args.package, args.pages, args.max_rounds = "python3.11-doc", 60, 6

    import cbp
    from cbp.engine.driver.session import get_spark
    from cbp_crawl.corpus import fetch_debian_doc
    from cbp_crawl.crawler import Corpus, Crawler
    from cbp_crawl.reference import queue_from_scratch

    root = fetch_debian_doc(args.package, str(DATA))
    if root is None:
        raise SystemExit(
            f"could not download {args.package} (apt-get download {args.package}); the benchmark needs the real corpus"
        )
    corpus = Corpus(root, host=args.package)
    seed = corpus.site + SEEDS.get(args.package, "/index.html")
    n_html = len(corpus.pages())
    log(f"corpus {args.package}: {n_html} HTML files; seed {seed}; {args.pages} pages per round")

    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    OUT.mkdir(exist_ok=True)
    spark = get_spark()
    pipes = {
        "direct": cbp.load(
            ROOT / "flows" / "crawl_queue.yaml", home=os.path.join(args.work, "direct"), mode="direct", spark=spark
        ),
        "blackbox": cbp.load(
            ROOT / "flows" / "crawl_queue.yaml", home=os.path.join(args.work, "blackbox"), mode="blackbox", spark=spark
        ),
        "landmark": cbp.load(
            ROOT / "flows" / "crawl_queue_landmark.yaml", home=os.path.join(args.work, "landmark"), spark=spark
        ),
    }
    log("warm-up (untimed): the seed page through both pipelines in a scratch home")
    warm = corpus.fetch(seed)
    for name in ("crawl_queue.yaml", "crawl_queue_landmark.yaml"):
        w = cbp.load(ROOT / "flows" / name, home=os.path.join(args.work, f"warmup-{name}"), spark=spark)
        w.feed("pages", [{"url": seed, "html": warm.html or ""}])
        w.run()
    crawler = Crawler(pipes["direct"], [corpus], max_pages=args.pages)
    crawled: list[dict[str, Any]] = []
    cache: dict[str, list[str]] = {}
    rows: list[dict[str, Any]] = []
    ever: dict[str, dict[str, float]] = {"direct": {}, "blackbox": {}}
    seen_epochs = {"direct": 0, "blackbox": 0}
    # Start-up (untimed): crawl from the seed until the frontier holds a full round, so that every
    # measured increment has --pages pages; black-box and landmark get those pages as one increment.
    start: list[dict[str, Any]] = []
    seeds = [seed]
    while True:
        rep = crawler.round(seeds=seeds)
        seeds = []
        start += [{"url": u, "html": crawler.fetch(u).html} for u in rep.landed]
        pipes["direct"].run()
        if crawler.pending() >= args.pages or not rep.landed:
            break
    crawled += start
    pipes["blackbox"].feed("pages", start)
    pipes["landmark"].feed("pages", start)
    for mode in ("blackbox", "landmark"):
        pipes[mode].run()
    for mode in ("direct", "blackbox"):
        seen_epochs[mode] = pipes[mode].status()["stages"]["threshold"]["epochs"]
        ever[mode] = {r["url"]: r["score"] for r in pipes[mode].output("crawl_queue")}
    log(f"start-up: {crawler.state()['round']} crawl round(s), {len(start)} pages, {crawler.pending()} URLs waiting")
    t_start = time.perf_counter()
    for i in range(1, args.max_rounds + 1):
        t0 = time.perf_counter()
        rep = crawler.round()
        crawl_s = time.perf_counter() - t0
        if not rep.landed:
            log(f"round {i}: nothing left to crawl")
            break
        pages = [{"url": u, "html": crawler.fetch(u).html} for u in rep.landed]
        crawled += pages
        row: dict[str, Any] = {
            "increment": i,
            "pages": len(pages),
            "crawled": len(crawled),
            "crawl_s": round(crawl_s, 2),
            "html_mb": round(sum(len(p["html"]) for p in pages) / 1e6, 1),
        }
        for mode, p in pipes.items():
            t0 = time.perf_counter()
            if mode == "blackbox":
                p.feed("pages", pages, feed_id=f"round:{i}")
            elif mode == "landmark":
                p.feed("pages", crawled, feed_id=f"round:{i}")
            feed_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            reports = p.run()
            run_s = time.perf_counter() - t0
            row[mode] = round(run_s, 2)
            row[f"{mode}_feed"] = round(feed_s, 2)
            row[f"{mode}_count"] = round(sum(r.seconds for r in reports if r.stage in COUNT), 2)
            row[f"{mode}_decide"] = round(sum(r.seconds for r in reports if r.stage in DECIDE), 2)
            row[f"{mode}_links"] = sum(r.outputs.get("links", 0) for r in reports)
        t0 = time.perf_counter()
        want = queue_from_scratch(crawled, cache=cache)
        done = {p["url"] for p in crawled}
        for mode in ("direct", "blackbox"):  # this increment's queue records: URLs newly at the threshold, scored now
            p = pipes[mode]
            new: dict[str, float] = {}
            for e in range(seen_epochs[mode] + 1, p.status()["stages"]["threshold"]["epochs"] + 1):
                for r in p.output("crawl_queue", epoch=e):
                    if r["url"] in new or r["url"] in ever[mode]:
                        raise SystemExit(f"{mode}: {r['url']} queued twice")
                    new[r["url"]] = r["score"]
            seen_epochs[mode] = p.status()["stages"]["threshold"]["epochs"]
            check(
                f"{mode} after increment {i}",
                {u: s for u, s in new.items() if u not in done},
                {u: s for u, s in want.items() if u not in ever[mode]},
            )
            ever[mode].update(new)
            if {u for u in ever[mode] if u not in done} != set(want):
                raise SystemExit(f"{mode} after increment {i}: the pending queue differs from the from-scratch queue")
        e = pipes["landmark"].status()["stages"]["threshold"]["epochs"]
        check(
            f"landmark after increment {i}",
            {r["url"]: r["score"] for r in pipes["landmark"].output("crawl_queue", epoch=e)},
            want,
        )
        row["queue"] = len(want)
        row["check_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        log(
            f"increment {i}: {len(pages)} pages ({row['html_mb']} MB, {row['direct_links']} links), {len(crawled)} "
            f"crawled, queue {len(want)}: "
            f"direct {row['direct']:.1f}s  black-box {row['blackbox']:.1f}s  landmark {row['landmark']:.1f}s (+feed "
            f"{row['landmark_feed']:.1f}s); "
            "all three equal the from-scratch queue"
        )
        write(rows, args, n_html, seed, time.perf_counter() - t_start)
    spark.stop()


def write(rows: list[dict[str, Any]], args: argparse.Namespace, n_html: int, seed: str, wall: float) -> None:
    cum = {m: 0.0 for m in MODES}
    lines = [
        "| inc | pages | crawled | queue | direct s | black-box s | landmark s | cum. direct | cum. black-box | cum. "
        "landmark |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        for m in MODES:
            cum[m] += r[m]
            r[f"{m}_cum"] = round(cum[m], 2)
        lines.append(
            f"| {r['increment']} | {r['pages']} | {r['crawled']} | {r['queue']} | {r['direct']:.1f} | "
            f"{r['blackbox']:.1f} | "
            f"{r['landmark']:.1f} | {cum['direct']:.0f} | {cum['blackbox']:.0f} | {cum['landmark']:.0f} |"
        )
    summary = {}
    if len(rows) >= 2:
        full = [r for r in rows if r["pages"] >= 0.5 * args.pages] or rows  # the crawl's tail is smaller
        summary = {
            "direct_last_over_second": round(rows[-1]["direct"] / rows[1]["direct"], 2),
            "direct_last_full_over_second": round(full[-1]["direct"] / rows[1]["direct"], 2),
            "landmark_last_over_second": round(rows[-1]["landmark"] / rows[1]["landmark"], 2),
            "cum_direct_over_landmark": round(cum["direct"] / cum["landmark"], 2),
            "cum_direct_over_blackbox": round(cum["direct"] / cum["blackbox"], 2),
        }
        lines += [
            "",
            f"Direct: last increment / second = {summary['direct_last_over_second']}x "
            f"(last full-size increment {summary['direct_last_full_over_second']}x); landmark: "
            f"{summary['landmark_last_over_second']}x. "
            f"Cumulative direct / landmark = {summary['cum_direct_over_landmark']}x, direct / black-box = "
            f"{summary['cum_direct_over_blackbox']}x.",
        ]
    table = "\n".join(lines)
    print(table, flush=True)
    (OUT / "crawl_queue.md").write_text(table + "\n")
    meta = {
        "package": args.package,
        "html_files": n_html,
        "pages_per_round": args.pages,
        "seed": seed,
        "wall_s": round(wall),
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "summary": summary,
    }
    (OUT / "crawl_queue.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    plot(rows, args.package)


def plot(rows: list[dict[str, Any]], package: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["increment"] for r in rows]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    styles = {"direct": ("tab:blue", "o"), "blackbox": ("tab:orange", "s"), "landmark": ("tab:red", "^")}
    for m, (c, mk) in styles.items():
        ax[0].plot(x, [r[m] for r in rows], color=c, marker=mk, label=m)
        ax[1].plot(x, [r[f"{m}_cum"] for r in rows], color=c, marker=mk, label=m)
    ax[0].set(title="Time per increment (cf. Fig. 12)", xlabel="increment", ylabel="seconds")
    ax[1].set(title="Cumulative time (cf. Fig. 11)", xlabel="increment", ylabel="seconds")
    w = 0.27
    for k, m in enumerate(MODES):
        xs = [v + (k - 1) * w for v in x]
        ax[2].bar(xs, [r[f"{m}_count"] for r in rows], w, color=styles[m][0], label=f"{m}: CountLinks")
        ax[2].bar(
            xs,
            [r[f"{m}_decide"] for r in rows],
            w,
            bottom=[r[f"{m}_count"] for r in rows],
            color=styles[m][0],
            alpha=0.45,
            label=f"{m}: DecideCrawl",
        )
    ax[2].set(title="CountLinks / DecideCrawl per increment", xlabel="increment", ylabel="seconds (stage epochs)")
    for a in ax:
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    fig.suptitle(f"Incremental crawl queue on {package}: {rows[-1]['crawled']} pages in {len(rows)} increments")
    fig.tight_layout()
    fig.savefig(OUT / "crawl_queue.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
