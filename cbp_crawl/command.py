"""``cbp crawl``: crawl rounds (fetch queued URLs and due revisits from a local corpus, land them as
pages), optionally running the pipeline after each round, and crawl statistics (``--stats``).

    $ cbp crawl flows/crawl_queue.yaml --corpus bench/data/python3.11-doc --seed URL --max-pages 100 --rounds 5 --run
    $ cbp crawl flows/crawl_queue.yaml --corpus bench/data/python3.11-doc --stats --stats-png crawl.png
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from typing import Any

from cbp import UsageError

NAME = "crawl"


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {n}")
    return n


def _seconds(text: str) -> float:
    try:
        n = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not (n > 0 and math.isfinite(n)):
        raise argparse.ArgumentTypeError(f"must be a finite number of seconds > 0, got {text}")
    return n


def add_parser(sub: Any, with_home: Any) -> None:
    """The ``crawl`` subcommand's arguments."""
    p = sub.add_parser(
        "crawl", help="crawl rounds: fetch queued URLs and due revisits from a local corpus and land them as pages"
    )
    with_home(p)
    p.add_argument(
        "--corpus",
        action="append",
        required=True,
        metavar="DIR",
        help="a directory standing for a web site: file DIR/PATH is http://HOST/PATH (repeatable)",
    )
    p.add_argument(
        "--host",
        action="append",
        default=[],
        metavar="NAME",
        help="the host of each --corpus, in order (default: the directory's name)",
    )
    p.add_argument("--seed", action="append", default=[], metavar="URL", help="URL(s) to fetch first (repeatable)")
    p.add_argument(
        "--max-pages",
        type=_positive,
        default=1000,
        help="pages fetched per round at most, new URLs and revisits (default 1000)",
    )
    p.add_argument(
        "--max-bytes",
        type=_positive,
        default=None,
        help="bytes read of a page at most; a bigger page is truncated (default 8 MiB)",
    )
    p.add_argument("--rounds", type=_positive, default=None, help="crawl rounds to do (default 1; with --stats 0)")
    p.add_argument(
        "--run",
        action="store_true",
        help="after each round, run the pipeline until quiescent (the loop without a scheduler)",
    )
    p.add_argument("--queue", default="crawl_queue", help="the flow of URLs to crawl (default crawl_queue)")
    p.add_argument("--pages", default="pages", help="the external flow pages are landed on (default pages)")
    p.add_argument(
        "--revisit-min",
        type=_seconds,
        default=3600.0,
        metavar="SECONDS",
        help="shortest revisit interval of a page (default 3600)",
    )
    p.add_argument(
        "--revisit-max",
        type=_seconds,
        default=30 * 86400.0,
        metavar="SECONDS",
        help="longest revisit interval (default 30 days)",
    )
    p.add_argument(
        "--gone-after",
        type=_positive,
        default=1,
        metavar="N",
        help="consecutive misses before a page is landed as gone (default 1)",
    )
    p.add_argument(
        "--max-per-host",
        type=_positive,
        default=None,
        metavar="N",
        help="pages fetched per host and round at most (default: no limit)",
    )
    p.add_argument(
        "--freshness",
        action="store_true",
        help="measure the freshness after each round (one stat of each crawled file)",
    )
    p.add_argument(
        "--stats", action="store_true", help="print crawl statistics (and do no round unless --rounds is given)"
    )
    p.add_argument("--stats-json", action="store_true", help="with --stats: print them as JSON")
    p.add_argument("--stats-png", metavar="PATH", help="with --stats: plot the statistics over rounds into this PNG")


def crawler_of(pipe: Any, args: argparse.Namespace) -> Any:
    """The :class:`~cbp_crawl.crawler.Crawler` the arguments describe."""
    from .crawler import MAX_PAGE_BYTES, Corpus, Crawler
    from .schedule import Revisits

    if len(args.host) > len(args.corpus):
        raise UsageError(
            f"{len(args.host)} --host for {len(args.corpus)} --corpus; give at most one --host per --corpus",
            code="usage",
        )
    hosts = args.host + [None] * (len(args.corpus) - len(args.host))
    policy = Revisits(
        revisit_min=args.revisit_min,
        revisit_max=args.revisit_max,
        gone_after=args.gone_after,
        max_per_host=args.max_per_host,
    )
    return Crawler(
        pipe,
        [Corpus(d, h) for d, h in zip(args.corpus, hosts)],
        max_pages=args.max_pages,
        queue=args.queue,
        pages=args.pages,
        max_bytes=args.max_bytes or MAX_PAGE_BYTES,
        policy=policy,
        measure_freshness=args.freshness,
    )


def run(args: argparse.Namespace) -> int:
    """Run the rounds asked for, then print the statistics if asked."""
    from cbp import Pipeline

    from . import stats

    pipe = Pipeline(args.flow_yaml, args.home)
    pipe.parts.notice.listener = lambda message: print(f"cbp crawl: {message}", file=sys.stderr, flush=True)
    crawler = crawler_of(pipe, args)
    rounds = args.rounds if args.rounds is not None else 0 if (args.stats or args.stats_png) else 1
    if args.run:
        logging.getLogger().setLevel(logging.CRITICAL)
    for n in range(rounds):
        rep = crawler.round(seeds=args.seed if n == 0 else ())
        print(rep.line(), flush=True)
        for url, reason in sorted(rep.failed.items()):
            print(f"  could not fetch {url}: {reason}", file=sys.stderr)
        if args.run:
            t0 = time.perf_counter()
            reports = pipe.run(command=f"cbp crawl {args.flow_yaml} --run")
            print(f"  {len(reports)} stage epoch(s) in {time.perf_counter() - t0:.1f}s", flush=True)
        if not rep.picked and (not args.run or crawler.pending() == 0):
            print("nothing due and nothing left to crawl", flush=True)
            break
    if args.stats or args.stats_png:
        rep = stats.report(crawler)
        if args.stats_json:
            print(json.dumps(rep, indent=1))
        else:
            print("\n".join(stats.lines(rep)))
        if args.stats_png:
            stats.plot_rounds(rep, args.stats_png)
            print(f"plot: {args.stats_png}")
    return 0
