#!/usr/bin/env python
"""Re-crawl benchmark: the crawl queue follows a real site that changes between two real releases.

The site is Debian's ``python3.11-doc`` (about 500 HTML pages) served from one corpus directory
(host ``python3.11-doc``) under the same URLs in two versions, ``apt-get download
python3.11-doc=VERSION`` (default 3.11.2-6+deb12u8, then +deb12u9; ``apt-cache madison
python3.11-doc`` lists what the mirror has). Phases, each one or more crawl rounds driven by a
clock the benchmark moves (nothing sleeps):

1. ``crawl v1``: the first version crawled from the index page, ``--pages`` pages per round;
2. ``no change``: every page due for a revisit, nothing changed: conditional fetches, nothing lands;
3. ``v2``: the files replaced by the second release (only files whose bytes differ are written);
4. ``mutate``: 5% of the crawled pages removed and 5% edited (every other link of the page
   dropped and one link to another crawled page added: a documented mutation of real pages);
5. ``restore``: the removed pages put back; 6. ``no change`` again.

Per round: the crawler's round, ``flows/crawl_queue.yaml`` (cbp direct: ``p.run()``), the landmark
(``flows/crawl_queue_landmark.yaml``: the latest version of every page, no state) and a
from-scratch count in pandas (:mod:`cbp_crawl.reference`) are timed, and the in-link counts per URL
and per site of direct and landmark are checked equal to the from-scratch count (and direct's queue
to the from-scratch queue) after every round: a difference stops the benchmark.

Then freshness for the same fetch budget: a simulated day-by-hour life of the crawled pages (10%
"hot" pages each changing with probability 0.5 per hour, the rest with 0.005; a change appends a
comment) crawled with ``--budget`` pages per hourly round, once with a fixed revisit interval
(revisit_min = revisit_max = pages/budget hours) and once adaptive (1 hour .. 7 days).

    .venv/bin/python bench/recrawl.py            # table on stdout, bench/out/recrawl.{md,json,png}
"""

from __future__ import annotations

import argparse
import filecmp
import glob
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
DATA = BENCH / "data" / "recrawl"
OUT = BENCH / "out"
sys.path.insert(0, str(ROOT))

PACKAGE = "python3.11-doc"
SEED_PATH = "/usr/share/doc/python3.11/html/index.html"
HOUR, DAY = 3600.0, 86400.0


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


class Clock:
    def __init__(self) -> None:
        self.t = 1.7e9

    def __call__(self) -> float:
        return self.t


def unpack(version: str) -> Path:
    """``apt-get download PACKAGE=VERSION`` and ``dpkg-deb -x`` into bench/data/recrawl/VERSION."""
    dest = DATA / version
    if dest.is_dir() and any(dest.iterdir()):
        return dest
    DATA.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        ["apt-get", "download", f"{PACKAGE}={version}"], cwd=DATA, check=True, capture_output=True, timeout=600
    )
    deb = glob.glob(str(DATA / f"{PACKAGE}_{version.replace(':', '%3a')}_*.deb"))
    if not deb:
        raise SystemExit(f"apt-get download {PACKAGE}={version} left no .deb in {DATA}")
    subprocess.run(["dpkg-deb", "-x", deb[0], str(dest)], check=True, capture_output=True, timeout=600)
    return dest


def sync(src: Path, dst: Path) -> int:
    """Make ``dst`` hold ``src``'s files, writing only those whose bytes differ (a new mtime); returns files written."""
    written = 0
    for d, _dirs, files in os.walk(src):
        rel = os.path.relpath(d, src)
        os.makedirs(dst / rel, exist_ok=True)
        for f in files:
            s, t = Path(d) / f, dst / rel / f
            if os.path.islink(s):
                if not os.path.islink(t) or os.readlink(t) != os.readlink(s):
                    if os.path.lexists(t):
                        os.remove(t)
                    os.symlink(os.readlink(s), t)
                continue
            if not t.exists() or os.path.islink(t) or not filecmp.cmp(s, t, shallow=False):
                if os.path.lexists(t):
                    os.remove(t)
                shutil.copyfile(s, t)
                written += 1
    return written


def want_counts(feeds: list[list[dict[str, Any]]]) -> dict[tuple[str, str], int]:
    from cbp_crawl.reference import counts_from_scratch

    url_in, site_in, _ = counts_from_scratch(feeds, feeds=True)
    return {**{("url", u): int(n) for u, n in url_in.items()}, **{("site", s): int(n) for s, n in site_in.items()}}


def check(
    label: str, direct: Any, land: Any, feeds: list[list[dict[str, Any]]], want: dict, threshold: float, queued: bool
) -> None:
    import math

    from cbp_crawl.reference import latest_versions, queue_from_scratch

    got = {(r["kind"], r["name"]): r["inlinks"] for r in direct.state("count_links")}
    if got != want:
        diff = sorted(set(got.items()) ^ set(want.items()))[:4]
        raise SystemExit(f"{label}: direct's in-link counts differ from the from-scratch count, e.g. {diff}")
    e = land.status()["stages"]["count_links"]["epochs"]
    full = {
        **{("url", r["url"]): r["inlinks"] for r in land.output("url_counts", epoch=e)},
        **{("site", r["site"]): r["inlinks"] for r in land.output("site_counts", epoch=e)},
    }
    if full != want:
        raise SystemExit(f"{label}: the landmark's in-link counts differ from the from-scratch count")
    signed: dict = {}
    for ep in range(1, direct.status()["stages"]["threshold"]["epochs"] + 1):
        for q in direct.output("crawl_queue", epoch=ep):
            signed[(q["url"], q["score"])] = signed.get((q["url"], q["score"]), 0) + q.get("_diff", 1)
    _, crawled = latest_versions(feeds)
    queue = {u: s for (u, s), n in signed.items() if n > 0 and u not in crawled}
    ref = queue_from_scratch(feeds, threshold, feeds=True)
    if set(queue) != set(ref):
        raise SystemExit(f"{label}: direct's queue differs from the from-scratch queue ({len(queue)} vs {len(ref)})")
    for q in (
        direct.output("crawl_queue", epoch=direct.status()["stages"]["threshold"]["epochs"]) if queued else ()
    ):  # this round's: its score
        if q.get("_diff", 1) > 0 and q["url"] in ref and not math.isclose(q["score"], ref[q["url"]]):
            raise SystemExit(f"{label}: {q['url']} queued with {q['score']}, from scratch {ref[q['url']]}")


def mutate(
    web: Path, urls: list[str], corpus: Any, share: float, rnd: random.Random
) -> tuple[list[tuple[Path, bytes]], int]:
    """Remove ``share`` of the pages and edit another ``share``; returns the removed files (to restore) and the count
    edited."""
    files = []
    for u in urls:
        f = corpus.fetch(u)
        if f.html is not None and f.path and not os.path.islink(f.path):
            files.append(Path(f.path))
    files = sorted(set(files))
    rnd.shuffle(files)
    k = max(1, int(len(files) * share))
    removed = [(p, p.read_bytes()) for p in files[:k]]
    for p, _ in removed:
        p.unlink()
    others = [p for p in files[k:]]
    for p in files[k : 2 * k]:
        text = p.read_text(encoding="utf-8", errors="replace")
        n = [0]

        def drop(m: re.Match, n: list[int] = n) -> str:
            n[0] += 1
            return m.group(0) if n[0] % 2 else m.group(0).replace("href=", "data-dropped=")

        text = re.sub(r"<a\s[^>]*href=", drop, text)
        target = os.path.relpath(rnd.choice(others), p.parent)
        p.write_text(
            text.replace("</body>", f'<a href="{target}">added by the benchmark</a></body>', 1), encoding="utf-8"
        )
    return removed, k


def timed(fn: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def crawl_round(ctx: dict[str, Any], phase: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One round through the crawler, cbp direct, the landmark and the from-scratch count, checked."""
    from cbp_crawl.reference import latest_versions

    direct, land, crawler, feeds = ctx["direct"], ctx["land"], ctx["crawler"], ctx["feeds"]
    before = direct.feeds("pages")
    rep, crawl_s = timed(lambda: crawler.round(seeds=ctx.pop("seeds", ())))
    landed = direct.feeds("pages") > before
    if landed:
        feeds.append(direct.output("pages", epoch=direct.feeds("pages")))
    reports, run_s = timed(direct.run)
    links = [r for rr in reports if rr.stage == "extract_links" for r in direct.output("links", epoch=rr.epoch)]
    current, _ = latest_versions(feeds)
    live = [r for r in current.values() if r.get("status") in (None, 200)]
    t0 = time.perf_counter()
    land.feed("pages", live)
    land.run()
    land_s = time.perf_counter() - t0
    want, scratch_s = timed(lambda: want_counts(feeds))
    check(
        f"{phase} round {rep.round}",
        direct,
        land,
        feeds,
        want,
        ctx["threshold"],
        any(r.stage == "threshold" for r in reports),
    )
    row = {
        "phase": phase,
        "round": rep.round,
        "picked": len(rep.picked),
        "fetched": len(rep.fetched),
        "revisited": len(rep.revisited),
        "unchanged": len(rep.unchanged),
        "changed": len(rep.changed),
        "gone": len(rep.gone),
        "back": len(rep.back),
        "records": rep.records,
        "links_added": sum(1 for r in links if r.get("_diff", 1) > 0),
        "links_retracted": sum(1 for r in links if r.get("_diff", 1) < 0),
        "epochs": len(reports),
        "crawl_s": round(crawl_s, 2),
        "direct_s": round(run_s, 2),
        "cbp_s": round(crawl_s + run_s, 2),
        "landmark_s": round(land_s, 2),
        "scratch_s": round(scratch_s, 2),
        "pages_now": len(live),
        "keys": len(want),
        "equal": True,
    }
    rows.append(row)
    log(
        f"{phase:>9} round {rep.round}: {rep.line()} | cbp {row['cbp_s']:.1f}s ({len(reports)} epochs, links "
        f"+{row['links_added']} "
        f"-{row['links_retracted']}), landmark {land_s:.1f}s, from scratch {scratch_s:.1f}s; counts equal"
    )
    return row


def freshness_run(
    web: Path, urls: list[str], policy: Any, budget: int, hours: int, work: Path, seed: int
) -> dict[str, Any]:
    """Hourly rounds of ``budget`` fetches over a copy of the pages that change as a simulated day goes by."""
    import cbp
    from cbp_crawl.crawler import Corpus, Crawler

    copy = work / PACKAGE
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(web, copy, symlinks=True)
    corpus = Corpus(copy, host=PACKAGE)
    files = {u: Path(corpus.fetch(u).path) for u in urls}
    rnd = random.Random(seed)
    hot = set(rnd.sample(sorted(files), max(1, len(files) // 10)))
    p = cbp.load(
        ROOT / "flows" / "crawl_queue.yaml", home=str(work / "home")
    )  # never run: only the crawler's side is measured
    clock = Clock()
    crawler = Crawler(p, [corpus], max_pages=len(urls), clock=clock, policy=policy, measure_freshness=True)
    crawler.round(seeds=urls)  # everything fetched once at hour 0
    crawler.max_pages = budget
    series, fetches = [], 0
    for h in range(1, hours + 1):
        clock.t += HOUR
        for u, path in files.items():
            if rnd.random() < (0.5 if u in hot else 0.005):
                with open(path, "a", encoding="utf-8") as fh:
                    fh.write(f"\n<!-- changed at hour {h} -->\n")
        rep = crawler.round()
        fetches += len(rep.picked)
        series.append(crawler.state()["rounds"][-1]["freshness"])
    warm = hours // 3
    return {
        "series": series,
        "fetches": fetches,
        "mean": round(sum(series[warm:]) / len(series[warm:]), 4),
        "warmup_hours": warm,
        "hot_interval_h": round(sum(crawler.state()["pages"][u]["interval"] for u in hot) / len(hot) / HOUR, 1),
    }


def setup(args: argparse.Namespace, old: Path, work: Path) -> dict[str, Any]:
    import cbp
    from cbp.engine.driver.session import get_spark
    from cbp_crawl.crawler import Corpus, Crawler
    from cbp_crawl.schedule import Revisits

    shutil.rmtree(work, ignore_errors=True)
    web = work / "web" / PACKAGE
    web.parent.mkdir(parents=True)
    shutil.copytree(old, web, symlinks=True)
    spark = get_spark()
    flows = work / "flows"
    flows.mkdir()
    for name in ("crawl_queue.yaml", "crawl_queue_landmark.yaml"):
        (flows / name).write_text(
            (ROOT / "flows" / name).read_text().replace("threshold: 3.0", f"threshold: {args.threshold}")
        )
    shutil.copy(ROOT / "flows" / "crawl_queue.py", flows)
    log("warm-up (untimed): one page through both pipelines in scratch homes")
    corpus = Corpus(web, host=PACKAGE)
    seed = corpus.site + SEED_PATH
    for name in ("crawl_queue.yaml", "crawl_queue_landmark.yaml"):
        w = cbp.load(flows / name, home=str(work / f"warm-{name}"), spark=spark)
        w.feed("pages", [{"url": seed, "html": corpus.fetch(seed).html or ""}])
        w.run()
    direct = cbp.load(flows / "crawl_queue.yaml", home=str(work / "direct"), spark=spark)
    land = cbp.load(flows / "crawl_queue_landmark.yaml", home=str(work / "landmark"), spark=spark)
    clock = Clock()
    policy = Revisits(revisit_min=HOUR, revisit_max=7 * DAY)
    crawler = Crawler(direct, [corpus], max_pages=args.pages, clock=clock, policy=policy)
    return {
        "direct": direct,
        "land": land,
        "crawler": crawler,
        "clock": clock,
        "feeds": [],
        "seeds": [seed],
        "web": web,
        "corpus": corpus,
        "threshold": args.threshold,
        "spark": spark,
    }


def everything_due(ctx: dict[str, Any]) -> None:
    ctx["clock"].t += 8 * DAY
    ctx["crawler"].max_pages = 100_000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", default="3.11.2-6+deb12u8")
    ap.add_argument("--new", default="3.11.2-6+deb12u9")
    ap.add_argument("--pages", type=int, default=150, help="pages per round of the first crawl")
    ap.add_argument(
        "--threshold", type=float, default=2.0, help="the queue's threshold (2.0: most of the site gets crawled)"
    )
    ap.add_argument(
        "--budget", type=int, default=0, help="fetches per hourly round in the freshness runs (default: pages/12)"
    )
    ap.add_argument("--hours", type=int, default=72)
    ap.add_argument("--work", default=str(OUT / "recrawl_work"))
    ap.add_argument(
        "--freshness-only",
        action="store_true",
        help="redo only the freshness runs on the site a full run left in --work",
    )
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    work = Path(args.work)
    if args.freshness_only:
        done = json.loads((OUT / "recrawl.json").read_text())
        st = json.loads((work / "direct" / "_crawler" / "state.json").read_text())
        live = sorted(u for u, e in st["pages"].items() if e["status"] == 200)
        budget = args.budget or max(1, len(live) // 12)
        fresh = freshness_all(work / "web" / PACKAGE, live, budget, args.hours, work)
        first = [r for r in done["rows"] if r["phase"] == "crawl v1"]
        write(done["rows"], first, fresh, args, budget, done["wall_s"])
        return
    old, new = unpack(args.old), unpack(args.new)
    differ = sum(
        1
        for a in old.rglob("*.html")
        if (new / a.relative_to(old)).exists() and not filecmp.cmp(a, new / a.relative_to(old), shallow=False)
    )
    log(
        f"{PACKAGE} {args.old} and {args.new}: {sum(1 for _ in old.rglob('*.html'))} and "
        f"{sum(1 for _ in new.rglob('*.html'))} HTML files; {differ} differ"
    )
    ctx = setup(args, old, work)
    rows: list[dict[str, Any]] = []
    t_start = time.perf_counter()
    for _ in range(40):  # 1. the first version, round after round until nothing is left
        ctx["clock"].t += 60  # a minute per round: no revisit falls due while the site is first crawled
        row = crawl_round(ctx, "crawl v1", rows)
        if row["records"] == 0 and ctx["crawler"].pending() == 0:
            if row["picked"] == 0:
                rows.pop()
            break
    first = [r for r in rows if r["phase"] == "crawl v1"]
    everything_due(ctx)
    crawl_round(ctx, "no change", rows)
    n = sync(new, ctx["web"])
    log(f"v2: {n} files of {args.new} written over {args.old}")
    everything_due(ctx)
    crawl_round(ctx, "v2", rows)
    urls = sorted(ctx["crawler"].state()["pages"])
    removed, edited = mutate(ctx["web"], urls, ctx["corpus"], 0.05, random.Random(5))
    log(f"mutate: {len(removed)} pages removed, {edited} edited")
    everything_due(ctx)
    crawl_round(ctx, "mutate", rows)
    for path, data in removed:
        path.write_bytes(data)
    everything_due(ctx)
    crawl_round(ctx, "restore", rows)
    everything_due(ctx)
    crawl_round(ctx, "no change", rows)
    wall = time.perf_counter() - t_start
    ctx["spark"].stop()
    live = [u for u, e in ctx["crawler"].state()["pages"].items() if e["status"] == 200]
    budget = args.budget or max(1, len(live) // 12)

    fixed_iv = len(live) / budget * HOUR
    log(
        f"freshness: {len(live)} pages, {budget} fetches per hourly round, {args.hours} hours; fixed interval "
        f"{fixed_iv / HOUR:.1f} h vs adaptive 1 h .. 7 days"
    )
    fresh = freshness_all(ctx["web"], live, budget, args.hours, work)
    write(rows, first, fresh, args, budget, wall)


def freshness_all(web: Path, live: list[str], budget: int, hours: int, work: Path) -> dict[str, Any]:
    """The freshness runs: a fixed interval of pages/budget hours, a fixed interval as short as the budget
    allows (every page always due: round robin, the whole budget used), and adaptive (1 hour .. 7 days)."""
    from cbp_crawl.schedule import Revisits

    fixed_iv = len(live) / budget * HOUR
    log(
        f"freshness: {len(live)} pages, {budget} fetches per hourly round, {hours} hours; fixed {fixed_iv / HOUR:.1f} "
        f"h, "
        "fixed 1 h (round robin), adaptive 1 h .. 7 days"
    )
    fresh = {
        "fixed": freshness_run(
            web, live, Revisits(revisit_min=fixed_iv, revisit_max=fixed_iv), budget, hours, work / "fresh-fixed", 11
        ),
        "round robin": freshness_run(
            web, live, Revisits(revisit_min=HOUR, revisit_max=HOUR), budget, hours, work / "fresh-rr", 11
        ),
        "adaptive": freshness_run(
            web, live, Revisits(revisit_min=HOUR, revisit_max=7 * DAY), budget, hours, work / "fresh-adaptive", 11
        ),
    }
    for k, v in fresh.items():
        log(
            f"freshness {k}: mean {v['mean']} after hour {v['warmup_hours']}, {v['fetches']} fetches, hot pages' "
            f"interval {v['hot_interval_h']} h"
        )
    return fresh


def write(
    rows: list[dict[str, Any]],
    first: list[dict[str, Any]],
    fresh: dict[str, Any],
    args: argparse.Namespace,
    budget: int,
    wall: float,
) -> None:
    cols = (
        "phase",
        "round",
        "fetched",
        "unchanged",
        "changed",
        "gone",
        "back",
        "links_added",
        "links_retracted",
        "epochs",
        "crawl_s",
        "direct_s",
        "cbp_s",
        "landmark_s",
        "scratch_s",
        "pages_now",
        "equal",
    )
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        lines.append("| " + " | ".join("yes" if r[c] is True else str(r[c]) for c in cols) + " |")
    first_s = sum(r["cbp_s"] for r in first)
    nochange = [r for r in rows if r["phase"] == "no change"]
    ratio = [round(r["cbp_s"] / first_s, 4) for r in nochange]
    summary = {
        "first_crawl_cbp_s": round(first_s, 2),
        "first_crawl_pages": sum(r["fetched"] for r in first),
        "no_change_cbp_s": [r["cbp_s"] for r in nochange],
        "no_change_over_first": ratio,
        **{f"freshness_{k}": v["mean"] for k, v in fresh.items()},
        **{f"fetches_{k}": v["fetches"] for k, v in fresh.items()},
        "budget_per_round": budget,
    }
    lines += [
        "",
        f"Re-crawl rounds that change nothing: {summary['no_change_cbp_s']} s (crawler + cbp) vs {first_s:.1f} s for "
        f"the rounds "
        f"that first fetched those {summary['first_crawl_pages']} pages: {ratio}x (goal <= 0.1x).",
        f"Freshness over hours {fresh['fixed']['warmup_hours']}..{args.hours} with at most {budget} fetches per hourly "
        f"round: "
        + ", ".join(
            f"{k} {v['mean']} ({v['fetches']} fetches, hot pages' interval {v['hot_interval_h']} h)"
            for k, v in fresh.items()
        )
        + ".",
    ]
    table = "\n".join(lines)
    print(table, flush=True)
    (OUT / "recrawl.md").write_text(table + "\n")
    (OUT / "recrawl.json").write_text(
        json.dumps(
            {
                "rows": rows,
                "summary": summary,
                "freshness": fresh,
                "wall_s": round(wall),
                "old": args.old,
                "new": args.new,
            },
            indent=1,
        )
    )
    plot(rows, fresh)


def plot(rows: list[dict[str, Any]], fresh: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(14, 4.5))
    x = list(range(len(rows)))
    w = 0.27
    for k, (col, label) in enumerate(
        (
            ("cbp_s", "cbp direct (crawler + run)"),
            ("landmark_s", "landmark (all pages, no state)"),
            ("scratch_s", "from scratch (pandas)"),
        )
    ):
        ax[0].bar([v + (k - 1) * w for v in x], [r[col] for r in rows], w, label=label)
    ax[0].set_xticks(x, [f"{r['phase']}\n#{r['round']}" for r in rows], fontsize=7)
    ax[0].set(ylabel="seconds", title="Per round: cbp direct vs landmark vs from scratch (counts checked equal)")
    ax[0].legend(fontsize=8)
    for k, v in fresh.items():
        ax[1].plot(range(1, len(v["series"]) + 1), v["series"], label=f"{k} (mean {v['mean']}, {v['fetches']} fetches)")
    ax[1].set(
        xlabel="hour",
        ylabel="share of pages whose stored version is current",
        title="Freshness for the same fetch budget",
        ylim=(0, 1.02),
    )
    ax[1].legend(fontsize=8)
    for a in ax:
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(OUT / "recrawl.png", dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
