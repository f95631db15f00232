"""Internal: ``cbp run --follow``, continuous mode on the command line (see :mod:`cbp.follow`).

    $ cbp run --follow flows/url_count.yaml --min-interval 2 --inbox state/inbox/url_count

The options are added to ``cbp run``'s parser by :func:`add_arguments`; :func:`run` follows the
home until Ctrl-C or SIGTERM, which stop it after the epoch in flight (exit 0). A second Ctrl-C
stops it at once (exit 130; the epoch in flight is not committed and the next run redoes it).
With ``--inbox DIR``, the files dropped in ``DIR/<flow>/`` are landed as the Airflow DAG's
``land_inbox`` task lands them (:func:`cbp.airflow.inbox.land_inbox`: the same sandbox rules,
``landed/`` and ``rejected/``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from ..airflow.inbox import INBOX_SETTLE_SECONDS, inbox_files, land_inbox
from ..errors import UsageError
from ..follow import Follower, Source

__all__ = ["add_arguments", "run", "inbox_source"]


def _seconds(text: str) -> float:
    try:
        n = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None
    if not 0 <= n < float("inf"):
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, got {text}")
    return n


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The continuous-mode options of ``cbp run``."""
    g = p.add_argument_group("continuous mode")
    g.add_argument(
        "--follow",
        action="store_true",
        help="keep running: an epoch round whenever an increment lands (cbp feed by any process, --inbox files, "
        "a Delta source's new version), until Ctrl-C or SIGTERM, which stop it after the epoch in flight",
    )
    g.add_argument(
        "--min-interval",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="with --follow: the least time between the starts of two runs (default 0)",
    )
    g.add_argument(
        "--poll",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="with --follow: seconds between looks for new input (default 0.05; 1 on an object store, one HEAD "
        "request per look)",
    )
    g.add_argument(
        "--inbox",
        metavar="DIR",
        help="with --follow: land the *.jsonl and *.parquet files dropped in DIR/<flow>/ (as the Airflow DAG does)",
    )
    g.add_argument(
        "--settle",
        type=_seconds,
        default=INBOX_SETTLE_SECONDS,
        metavar="SECONDS",
        help=f"with --inbox: an inbox file is landed once unchanged this long (default {INBOX_SETTLE_SECONDS:g})",
    )
    g.add_argument(
        "--markers", metavar="DIR", help=argparse.SUPPRESS
    )  # the Airflow DAG's announcement markers (cbp.airflow.follower)


def inbox_source(pipe: Any, inbox: str, settle: float = INBOX_SETTLE_SECONDS, markers: str | None = None) -> Source:
    """A follower's source that lands the files waiting in ``<inbox>/<flow>/`` for every external flow."""
    flows = list(pipe.spec.external_flows)
    home = pipe.home.location
    if markers is None and pipe.home.local_dir() is None:
        markers = os.path.join(inbox, ".cbp-markers")  # the announcement markers of an object-store home stay local
    yaml_path = str(pipe.spec.path)

    def poll() -> bool:
        if not any(inbox_files(os.path.join(inbox, f), settle) for f in flows):
            return False  # a listing per flow directory: nothing to land
        out = land_inbox(yaml_path, home, inbox, flows, markers=markers, settle=settle)
        return bool(out["landed"])

    return poll


class _Signals:
    """SIGTERM and the first Ctrl-C ask to stop after the epoch in flight; a second Ctrl-C stops at once."""

    def __init__(self) -> None:
        self.asked = False

    def __call__(self, signum: int, frame: Any) -> None:
        if self.asked and signum == signal.SIGINT:
            raise KeyboardInterrupt()
        if not self.asked:
            print(
                f"cbp run: {signal.Signals(signum).name}: stopping after the epoch in flight"
                + (" (Ctrl-C again to stop now)" if signum == signal.SIGINT else ""),
                file=sys.stderr,
                flush=True,
            )
        self.asked = True

    def install(self, *signums: int) -> None:
        for s in signums:
            signal.signal(s, self)


def _warm(pipe: Any, signals: _Signals) -> None:
    """Start Spark and its Python workers now, not at the first increment; then take Ctrl-C
    (SparkContext installs its own SIGINT handler, which would cancel the epoch in flight)."""
    from ..engine.driver.session import is_connect

    spark = pipe.parts.spark.get()
    if is_connect(spark):  # no RDDs on Spark Connect: a one-task DataFrame job starts a Python worker
        spark.range(0, 1, 1, 1).mapInArrow(lambda batches: batches, "id BIGINT").collect()
    else:
        spark.sparkContext.parallelize([0], 1).map(lambda x: x).collect()
    signals.install(signal.SIGINT)


def _check_options(args: argparse.Namespace) -> None:
    """The options of ``cbp run`` that go only with ``--follow``, or only without it (code ``usage``)."""
    if not args.follow:
        given = [
            o
            for o, v in (
                ("--inbox", args.inbox),
                ("--markers", args.markers),
                ("--poll", args.poll),
                ("--min-interval", args.min_interval or None),
            )
            if v is not None
        ]
        if given:
            raise UsageError(f"{', '.join(given)} only go with --follow", code="usage")
        return
    if args.max_epochs is not None:
        raise UsageError("--max-epochs does not go with --follow (a follower runs until stopped)", code="usage")
    if not getattr(args, "sync", True):
        raise UsageError(
            "--no-sync does not go with --follow (a follower syncs source flows as their tables change); "
            "run 'cbp run --no-sync' without --follow",
            code="usage",
        )


def run(pipe: Any, args: argparse.Namespace, plain: Callable[[Any, argparse.Namespace], int]) -> int:
    """``cbp run``: ``plain`` without ``--follow``; with it, follow the home until stopped (0 after a clean stop)."""
    _check_options(args)
    if not args.follow:
        return plain(pipe, args)
    logging.getLogger().setLevel(logging.CRITICAL)  # as cbp run: py4j's tracebacks are not cbp's messages
    signals = _Signals()
    signals.install(signal.SIGTERM)
    quiet = args.quiet
    sources = [inbox_source(pipe, args.inbox, args.settle, args.markers)] if args.inbox else []

    def start(stage: str, epoch: int) -> None:
        if not quiet:
            print(f"... running {stage} epoch {epoch}", file=sys.stderr, flush=True)

    def ready() -> None:
        if not quiet:
            print(
                f"cbp run: following {pipe.home.location} (min interval {args.min_interval:g} s): an epoch round "
                "whenever an increment lands; Ctrl-C or SIGTERM stops it after the epoch in flight",
                file=sys.stderr,
                flush=True,
            )

    def round_done(reports: list[Any]) -> None:
        if reports and not quiet:
            took = time.monotonic() - follower.summary.round_starts[-1]
            print(
                f"cbp run: {len(reports)} stage epoch(s) in {took:.2f}s; waiting for increments",
                file=sys.stderr,
                flush=True,
            )

    def epoch_done(rep: Any) -> None:
        print(rep.line(), flush=True)

    command = (
        "cbp " + " ".join(sys.argv[1:])
        if sys.argv and sys.argv[0].endswith("cbp")
        else f"cbp run --follow {args.flow_yaml}"
    )
    follower = Follower(
        pipe,
        min_interval=args.min_interval,
        stop=lambda: signals.asked,
        poll=args.poll,
        sources=sources,
        command=command,
        epoch_timeout=args.epoch_timeout,
        on_epoch=epoch_done,
        on_start=start,
        on_round=round_done,
        on_ready=ready,
    )
    summary = follower.run(warm=lambda: _warm(pipe, signals))
    print(
        f"stopped: {summary.rounds} run(s), {summary.epochs} stage epoch(s); the next run continues from the last "
        f"committed epoch",
        flush=True,
    )
    return 0
