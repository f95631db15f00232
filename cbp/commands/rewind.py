"""``cbp rewind FLOW.yaml --to-epoch N [--stage S]``: put the pipeline back as it was after a stage epoch.

$ cbp rewind flows/url_count.yaml --to-epoch 2
rewound to after stage 'url_count' epoch 2: undone url_count epochs 3-4; pending now: 'urls' 2 increment(s)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

NAME = "rewind"


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        NAME,
        help="put state, outputs and the controller back as they were after a stage epoch; "
        "every feed since stays pending, recomputed by the next 'cbp run'",
    )
    with_home(p)
    p.add_argument(
        "--to-epoch",
        type=int,
        required=True,
        metavar="N",
        help="the stage epoch to go back to (as 'cbp history' numbers them); 0: before any stage epoch",
    )
    p.add_argument("--stage", help="whose epoch N (needed when the pipeline has several stages)")
    p.add_argument("--json", action="store_true", help="print what was done as JSON")


def run(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from ..pipeline import Pipeline

    pipe = Pipeline(args.flow_yaml, args.home)
    pipe.parts.notice.listener = lambda message: print(f"cbp rewind: {message}", file=sys.stderr, flush=True)
    command = (
        "cbp " + " ".join(sys.argv[1:]) if sys.argv and sys.argv[0].endswith("cbp") else f"cbp rewind {args.flow_yaml}"
    )
    rep = pipe.rewind(args.to_epoch, args.stage, command=command)
    if args.json:
        print(json.dumps(asdict(rep), indent=2))
    elif rep.undone:
        print(rep.line())
        print("the next 'cbp run' recomputes the pending increments with the translators as they are now")
    return 0
