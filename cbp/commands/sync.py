"""``cbp sync FLOW.yaml [--flow NAME]``: land what the source flows' Delta tables gained.

Prints one line per source flow (the versions landed, or that there was none) and exits 0; a
version that cannot be landed is an error naming the table and the version (exit 3), after the
versions before it have landed. ``cbp run`` syncs first too; ``cbp sync`` lands without running.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Callable

NAME = "sync"


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(NAME, help="land the new versions of the Delta tables of source flows (source: {delta: URI})")
    with_home(p)
    p.add_argument("--flow", action="append", default=None, metavar="NAME",
                   help="sync only this source flow (may be repeated; default: every source flow)")


def run(args: argparse.Namespace) -> int:
    from ..pipeline import Pipeline

    pipe = Pipeline(args.flow_yaml, args.home)
    pipe.controller.notify = lambda message: print(f"cbp sync: {message}", file=sys.stderr, flush=True)
    flows = args.flow
    if flows is not None:
        for f in flows:
            pipe.spec.flow(f)  # unknown-flow, naming the pipeline's flows
    reports = pipe.sync(flows)
    if not reports:
        print(f"cbp sync: pipeline '{pipe.spec.name}' has no source flow (source: {{delta: URI}}); nothing to do", file=sys.stderr)
    for r in reports:
        print(r.line())
    return 0
