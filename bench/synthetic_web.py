#!/usr/bin/env python
"""A synthetic web through the crawl queue, ``merge`` before and after keyed rows (issue 38, item 5b).

The web: ``10M x --scale`` URLs over ``100k x --scale`` sites whose sizes follow a Zipf law with
the largest site holding ``--top`` (10%) of the URLs (>= 1M at scale 1). It is fed as hub pages
(``http://hub.example/b<i>``) of ``--per-page`` links each, in site order, ``--chunk`` links per
build epoch, so every URL of the web has one in-link and a row in ``merge``'s state. Then
``--epochs`` epochs each land ``--links`` new links (``10k x --scale`` by default, at least 1,000)
on new pages: each link's target is a URL of the web drawn uniformly (so a site gets links in
proportion to its size: the largest gets ``--top`` of them), or half the time a new URL of that
site.

Two homes, the same pages, side by side in one run:

- **before**: ``bench/crawl_before/crawl_queue_before.yaml``, ``flows/crawl_queue.yaml`` as it
  was before keyed rows (``merge`` keeps a site's URLs as one list, read and written whole, and
  re-sends every URL of a site whose count changed);
- **after**: ``flows/crawl_queue.yaml`` (``merge`` with ``row_key: url``).

Every measured epoch's ``crawl_queue`` records must be equal in both homes (the run stops
otherwise), and with ``--reference`` (default up to 2M URLs) the final queue equals the
from-scratch queue (:mod:`cbp_crawl.reference`). Prints a table, writes
``bench/out/synthetic_web.{md,json,png}``.

    .venv/bin/python bench/synthetic_web.py --scale 0.01        # 100k URLs, 1k sites, largest 10k
    .venv/bin/python bench/synthetic_web.py --epochs 3 --chunk 1000000   # 10M URLs, 100k sites (33 min on 2 cores)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "out"
FORMS = {
    "before": ROOT / "bench" / "crawl_before" / "crawl_queue_before.yaml",
    "after": ROOT / "flows" / "crawl_queue.yaml",
}
STAGES = ("extract_links", "count_links", "merge", "score", "threshold")


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def zipf_sizes(n_urls: int, n_sites: int, top: float) -> np.ndarray:
    """Site sizes ``~ 1/rank^s`` summing to ``n_urls``, each >= 1, the largest ``top * n_urls``
    (``s`` found by bisection; the sizes rounded by largest remainder).

        >>> s = zipf_sizes(1000, 50, 0.1); int(s.sum()), int(s[0]), int(s.min()) >= 1, bool((np.diff(s) <= 0).all())
        (1000, 100, True, True)
    """
    if n_sites * 1 > n_urls or not 0 < top < 1:
        raise ValueError("need at least one URL per site and 0 < top < 1")
    ranks = np.arange(1, n_sites + 1, dtype=np.float64)
    spare = n_urls - n_sites  # every site gets 1, the rest by the law

    def first(s: float) -> float:
        w = ranks**-s
        return 1 + spare * w[0] / w.sum()

    lo, hi = 0.0, 8.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if first(mid) < top * n_urls else (lo, mid)
    w = ranks**-hi
    exact = spare * w / w.sum()
    sizes = np.floor(exact).astype(np.int64)
    rest = spare - int(sizes.sum())
    sizes[np.argsort(-(exact - sizes), kind="stable")[:rest]] += 1
    return np.sort(sizes + 1)[::-1]


class Web:
    """The synthetic web: site ``k`` is ``http://s<k>.example``, its URLs ``/p<j>``, j < size."""

    def __init__(self, sizes: np.ndarray) -> None:
        self.sizes = sizes
        self.starts = np.concatenate([[0], np.cumsum(sizes)])
        self.n = int(self.starts[-1])

    def url(self, i: int) -> str:
        k = int(np.searchsorted(self.starts, i, side="right")) - 1
        return f"http://s{k}.example/p{i - int(self.starts[k])}"

    def hub_pages(self, a: int, b: int, per_page: int) -> list[dict[str, Any]]:
        """The build's pages linking to URLs ``a .. b-1`` of the web (in site order)."""
        return [
            {
                "url": f"http://hub.example/b{i // per_page}",
                "html": "".join(f'<a href="{self.url(j)}">' for j in range(i, min(i + per_page, b))),
            }
            for i in range(a, b, per_page)
        ]

    def new_pages(self, rng: np.random.Generator, epoch: int, links: int, per_page: int) -> list[dict[str, Any]]:
        """An epoch's new pages: ``links`` links to uniform URLs of the web, half of them moved to a new URL of the
        site."""
        targets = rng.integers(0, self.n, links)
        fresh = rng.random(links) < 0.5
        urls = []
        for n, (i, f) in enumerate(zip(targets.tolist(), fresh.tolist())):
            u = self.url(i)
            urls.append(u.rsplit("/", 1)[0] + f"/n{epoch}-{n}" if f else u)
        return [
            {
                "url": f"http://new.example/e{epoch}-{i // per_page}",
                "html": "".join(f'<a href="{u}">' for u in urls[i : i + per_page]),
            }
            for i in range(0, links, per_page)
        ]


def queue_records(p: Any, since: int) -> tuple[dict[tuple[str, float], int], int]:
    """The crawl_queue records of threshold's epochs after ``since`` ({(url, score): summed _diff}), and its last
    epoch."""
    last = p.status()["stages"]["threshold"]["epochs"]
    got: dict[tuple[str, float], int] = {}
    for e in range(since + 1, last + 1):
        for r in p.output("crawl_queue", epoch=e):
            k = (r["url"], round(r["score"], 9))
            got[k] = got.get(k, 0) + r.get("_diff", 1)
    return {k: v for k, v in got.items() if v}, last


def run(p: Any) -> dict[str, Any]:
    t0 = time.perf_counter()
    reports = p.run()
    wall = time.perf_counter() - t0
    by = {r.stage: r for r in reports}
    m = by.get("merge")
    return {
        "seconds": wall,
        "stages": {s: round(by[s].seconds, 3) for s in STAGES if s in by},
        "merge_rows_read": m.keys_read if m else 0,
        "candidates": m.outputs.get("candidates", 0) if m else 0,
    }


def build(pipes: dict[str, Any], web: Web, chunk: int, per_page: int) -> dict[str, float]:
    took = {f: 0.0 for f in pipes}
    for a in range(0, web.n, chunk):
        pages = web.hub_pages(a, min(a + chunk, web.n), per_page)
        for f, p in pipes.items():
            p.feed("pages", pages)
            took[f] += run(p)["seconds"]
        log(
            f"built {min(a + chunk, web.n):,} of {web.n:,} URLs (before {took['before']:.0f}s, after "
            f"{took['after']:.0f}s so far)"
        )
    return took


def measure(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import cbp
    from cbp.engine.driver.session import get_spark

    spark = get_spark()
    sizes = zipf_sizes(int(10_000_000 * args.scale), int(100_000 * args.scale), args.top)
    web = Web(sizes)
    links = args.links or max(1000, int(10_000 * args.scale))
    log(
        f"web: {web.n:,} URLs, {len(sizes):,} sites, largest {int(sizes[0]):,}, median {int(np.median(sizes))}; "
        f"{links:,} links per epoch"
    )
    pipes = {f: cbp.load(y, home=str(work / f), mode="direct", spark=spark) for f, y in FORMS.items()}
    built = build(pipes, web, args.chunk, args.per_page)
    seen = {f: queue_records(p, 0)[1] for f, p in pipes.items()}
    rng = np.random.default_rng(args.seed)
    epochs, all_pages = [], []
    for e in range(args.epochs):
        pages = web.new_pages(rng, e, links, args.per_page)
        all_pages.append(pages)
        row: dict[str, Any] = {"epoch": e + 1}
        for f in ("before", "after") if e % 2 == 0 else ("after", "before"):  # alternate who runs first
            pipes[f].feed("pages", pages)
            row[f] = run(pipes[f])
        got = {}
        for f, p in pipes.items():
            got[f], seen[f] = queue_records(p, seen[f])
        if got["before"] != got["after"]:
            diff = sorted(set(got["before"].items()) ^ set(got["after"].items()))[:5]
            raise SystemExit(f"epoch {e + 1}: crawl_queue differs between before and after, e.g. {diff}")
        row["queue_records"] = len(got["after"])
        epochs.append(row)
        log(
            f"epoch {e + 1}: before {row['before']['seconds']:.1f}s (merge {row['before']['stages']['merge']:.1f}s, "
            f"{row['before']['candidates']:,} candidates), after {row['after']['seconds']:.1f}s (merge "
            f"{row['after']['stages']['merge']:.1f}s, "
            f"{row['after']['merge_rows_read']:,} rows read, {row['after']['candidates']:,} candidates); queue records "
            f"equal ({row['queue_records']:,})"
        )
    final = {f: queue_records(p, 0)[0] for f, p in pipes.items()}
    if final["before"] != final["after"]:
        raise SystemExit("the whole crawl_queue differs between before and after")
    checked = None
    if args.reference if args.reference is not None else web.n <= 2_000_000:
        checked = check_reference(web, args, final["after"], all_pages)
    return {
        "urls": web.n,
        "sites": len(sizes),
        "largest": int(sizes[0]),
        "median_site": float(np.median(sizes)),
        "links": links,
        "build_seconds": built,
        "epochs": epochs,
        "queue_size": sum(1 for v in final["after"].values() if v > 0),
        "reference_checked": checked,
    }


def check_reference(
    web: Web, args: argparse.Namespace, queue: dict[tuple[str, float], int], epoch_pages: list[list[dict[str, Any]]]
) -> bool:
    """The URLs of the final queue (records summed) are the from-scratch queue over every page fed
    (a record keeps the score of the epoch it was queued in; the scores are compared epoch by epoch, before/after)."""
    from cbp_crawl.reference import queue_from_scratch

    pages = [
        pg for a in range(0, web.n, args.chunk) for pg in web.hub_pages(a, min(a + args.chunk, web.n), args.per_page)
    ]
    pages += [pg for ps in epoch_pages for pg in ps]
    ref = queue_from_scratch(pages)
    got = {u: s for (u, s), n in queue.items() if n > 0}
    if set(got) != set(ref):
        raise SystemExit(f"the queue differs from the from-scratch queue ({len(got):,} vs {len(ref):,} URLs)")
    log(f"the final queue equals the from-scratch queue ({len(ref):,} URLs)")
    return True


def recheck(args: argparse.Namespace, work: Path) -> None:
    """:func:`check_reference` on the 'after' home of an earlier run, its pages regenerated from the same arguments and
    seed."""
    import cbp

    web = Web(zipf_sizes(int(10_000_000 * args.scale), int(100_000 * args.scale), args.top))
    links = args.links or max(1000, int(10_000 * args.scale))
    rng = np.random.default_rng(args.seed)
    pages = [web.new_pages(rng, e, links, args.per_page) for e in range(args.epochs)]
    queue, _ = queue_records(cbp.load(FORMS["after"], home=str(work / "after"), mode="direct"), 0)
    if not check_reference(web, args, queue, pages):
        raise SystemExit("the queue differs from the from-scratch queue")


def report(res: dict[str, Any]) -> str:
    lines = [
        "| epoch | before (s) | after (s) | before / after | merge before (s) | merge after (s) | candidates before | "
        "candidates after "
        "| merge rows read after | queue records (equal) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in res["epochs"]:
        b, a = r["before"], r["after"]
        lines.append(
            f"| {r['epoch']} | {b['seconds']:.1f} | {a['seconds']:.1f} | {b['seconds'] / a['seconds']:.1f}x | "
            f"{b['stages']['merge']:.1f} "
            f"| {a['stages']['merge']:.1f} | {b['candidates']:,} | {a['candidates']:,} | {a['merge_rows_read']:,} | "
            f"{r['queue_records']:,} |"
        )
    med = {f: statistics.median(r[f]["seconds"] for r in res["epochs"]) for f in ("before", "after")}
    mm = {f: statistics.median(r[f]["stages"]["merge"] for r in res["epochs"]) for f in ("before", "after")}
    lines.append(
        f"| **median** | **{med['before']:.1f}** | **{med['after']:.1f}** | **{med['before'] / med['after']:.1f}x** "
        f"| {mm['before']:.1f} | {mm['after']:.1f} | | | | |"
    )
    return "\n".join(lines)


def plot(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(10, 4))
    xs = [r["epoch"] for r in res["epochs"]]
    for f, style in (("before", "o-"), ("after", "s-")):
        ax.plot(xs, [r[f]["seconds"] for r in res["epochs"]], style, label=f"{f} keyed rows")
        bx.plot(xs, [r[f]["stages"]["merge"] for r in res["epochs"]], style, label=f"{f} keyed rows")
    ax.set_title(f"epoch seconds ({res['links']:,} new links)")
    bx.set_title("merge stage seconds")
    for x in (ax, bx):
        x.xaxis.set_major_locator(MaxNLocator(integer=True))
        x.set_xlabel("epoch")
        x.set_ylim(bottom=0)
        x.grid(True, alpha=0.3)
        x.legend()
    fig.suptitle(f"synthetic web: {res['urls']:,} URLs, {res['sites']:,} sites, largest {res['largest']:,}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="1.0: 10M URLs over 100k sites")
    ap.add_argument("--top", type=float, default=0.1, help="the largest site's share of the URLs")
    ap.add_argument("--links", type=int, default=None, help="new links per epoch (default 10k x scale, at least 1,000)")
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--chunk", type=int, default=200_000, help="links per build epoch")
    ap.add_argument("--per-page", type=int, default=200, help="links per page")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--reference",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="check the final queue against the from-scratch queue (default: up to 2M URLs)",
    )
    ap.add_argument(
        "--workdir",
        default=None,
        help="where the two homes go (default: a new directory under bench/out, deleted after)",
    )
    ap.add_argument(
        "--check-only",
        action="store_true",
        help="check the 'after' home a run left in --workdir against the from-scratch queue (the same arguments as "
        "that run)",
    )
    args = ap.parse_args()
    if args.check_only:
        if not args.workdir or not (Path(args.workdir) / "after").is_dir():
            ap.error("--check-only needs --workdir of an earlier run (its 'after' home)")
        recheck(args, Path(args.workdir))
        return
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="tmp-synthetic-web-", dir=OUT))
    t0 = time.perf_counter()
    try:
        res = measure(args, work)
    finally:
        if not args.workdir:
            shutil.rmtree(work, ignore_errors=True)
    res.update(
        command=" ".join(["bench/synthetic_web.py", *sys.argv[1:]]),
        wall_seconds=round(time.perf_counter() - t0),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        cores=os.cpu_count(),
        load=os.getloadavg()[0],
    )
    table = report(res)
    print(table)
    (OUT / "synthetic_web.json").write_text(json.dumps(res, indent=1))
    (OUT / "synthetic_web.md").write_text(
        f"`{res['command']}` ({res['date']}, local[2], {res['cores']} cores; {res['urls']:,} URLs, "
        f"{res['sites']:,} sites, largest {res['largest']:,}; {res['links']:,} links per epoch)\n\n{table}\n"
    )
    plot(res, OUT / "synthetic_web.png")
    log(f"wrote {OUT}/synthetic_web.{{md,json,png}} in {res['wall_seconds']}s")


if __name__ == "__main__":
    main()
