"""``cbp sync FLOW.yaml [--flow NAME] [--reland NAME]``: land what the source flows' Delta tables gained.

Prints one line per source flow (the versions landed, or that there was none) and exits 0; a
version that cannot be landed is an error naming the table and the version (exit 3), after the
versions before it have landed. ``cbp run`` syncs first too (not with ``--no-sync``); ``cbp sync``
lands without running. ``--reland NAME`` lands the flow's table as it is now, as signed changes
against what the flow holds (after versions written without a change data feed); warnings
(``source-no-cdf``: a table without change data feed) go to stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from ..errors import UsageError

NAME = "sync"


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(NAME, help="land the new versions of the Delta tables of source flows (source: {delta: URI})")
    with_home(p)
    p.add_argument(
        "--flow",
        action="append",
        default=None,
        metavar="NAME",
        help="sync only this source flow (may be repeated; default: every source flow)",
    )
    p.add_argument(
        "--reland",
        action="append",
        default=None,
        metavar="FLOW",
        help="re-land this source flow from its table as it is now: signed changes against what the "
        "flow holds, one feed; later syncs go on from the table's current version (may be repeated)",
    )


def run(args: argparse.Namespace) -> int:
    from ..pipeline import Pipeline

    pipe = Pipeline(args.flow_yaml, args.home)
    pipe.parts.notice.listener = lambda message: print(f"cbp sync: {message}", file=sys.stderr, flush=True)
    flows = args.flow
    for f in (flows or []) + (args.reland or []):
        pipe.spec.flow(f)  # unknown-flow, naming the pipeline's flows
    if flows is not None and args.reland:
        raise UsageError("--flow and --reland do not go together: --reland names the flows it re-lands", code="usage")
    reports = pipe.sync(flows, reland=args.reland)
    if not reports:
        print(
            f"cbp sync: pipeline '{pipe.spec.name}' has no source flow (source: {{delta: URI}}); nothing to do",
            file=sys.stderr,
        )
    for r in reports:
        print(r.line())
    return 0
