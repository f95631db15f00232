"""``cbp upgrade FLOW.yaml [--home H]``: apply the plan (``cbp plan``) as one durable change.

State and increments are rewritten into the new schemas and partition counts, removed stages
archived, stages added back restored (``--restore-archived STAGE``) or started empty
(``--discard-archived STAGE``); the home records the YAML it came from. A kill at any point
leaves the old pipeline or the new one. A plan with a refused change changes nothing (exit 2).

    $ cbp upgrade flows/url_count.yaml --home state/url_count
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["NAME", "add_parser", "run"]

NAME = "upgrade"


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(NAME, help="apply the plan of a changed YAML to the home, as one durable change")
    with_home(p)
    p.add_argument(
        "--restore-archived",
        action="append",
        default=[],
        metavar="STAGE",
        help="add an archived stage back from its archive, with every increment it missed",
    )
    p.add_argument(
        "--discard-archived", action="append", default=[], metavar="STAGE", help="add an archived stage back empty"
    )


def run(args: argparse.Namespace) -> int:
    from ..pipeline import Pipeline

    pipe = Pipeline(args.flow_yaml, args.home)
    pipe.parts.notice.listener = lambda m: print(f"cbp upgrade: {m}", file=sys.stderr)
    plan = pipe.upgrade(
        restore_archived=args.restore_archived,
        discard_archived=args.discard_archived,
        command=f"cbp upgrade {args.flow_yaml}",
    )
    for line in plan.lines():
        print(line)
    print("upgraded" if plan.needs_upgrade else "nothing to upgrade: no change touches stored data")
    return 0
