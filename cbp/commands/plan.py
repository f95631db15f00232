"""``cbp plan FLOW.yaml [--home H]``: what the YAML changes against the pipeline the home recorded.

One line per change: ``applies`` (nothing stored changes), ``migrates`` (what ``cbp upgrade``
rewrites or archives) or ``refused`` (why, and what to do). Exit 0 when every change applies
or migrates, 2 (code ``plan-refused``) when one is refused. Nothing is changed.

    $ cbp plan flows/url_count.yaml --home state/url_count
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["NAME", "add_parser", "run", "show"]

NAME = "plan"


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(NAME, help="what the YAML changes against the pipeline the home recorded (nothing is changed)")
    with_home(p)
    p.add_argument(
        "--restore-archived",
        action="append",
        default=[],
        metavar="STAGE",
        help="plan adding STAGE back from its archive",
    )
    p.add_argument(
        "--discard-archived", action="append", default=[], metavar="STAGE", help="plan adding STAGE back empty"
    )


def show(plan: Any, command: str) -> int:
    """Print a plan; its exit code (2 with a refused change)."""
    for line in plan.lines():
        print(line)
    if plan.refused:
        print(
            f"cbp {command}: error [plan-refused]: {len(plan.refused)} change(s) cannot be made; see 'refused' above",
            file=sys.stderr,
        )
        return 2
    if plan.needs_upgrade:
        print("run 'cbp upgrade' to apply it (or 'cbp run --upgrade')")
    return 0


def run(args: argparse.Namespace) -> int:
    from ..pipeline import Pipeline

    pipe = Pipeline(args.flow_yaml, args.home)
    pipe.parts.notice.listener = lambda m: print(f"cbp plan: {m}", file=sys.stderr)
    return show(pipe.plan(restore_archived=args.restore_archived, discard_archived=args.discard_archived), NAME)
