"""``cbp unfeed FLOW.yaml FLOW --feed N``: withdraw a feed that no stage has read yet.

$ cbp unfeed flows/url_count.yaml urls --feed 3
withdrew feed 3 of 'urls': 120 record(s), increment(s) 3
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

NAME = "unfeed"


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(NAME, help="withdraw a feed of an external flow that no stage has read yet")
    with_home(p)
    p.add_argument("input_flow", metavar="INPUT_FLOW")
    p.add_argument("--feed", type=int, required=True, metavar="N", help="the feed's number (what 'cbp feed' printed)")


def run(args: argparse.Namespace) -> int:
    from ..pipeline import Pipeline

    pipe = Pipeline(args.flow_yaml, args.home)
    pipe.parts.notice.listener = lambda message: print(f"cbp unfeed: {message}", file=sys.stderr, flush=True)
    r = pipe.unfeed(args.input_flow, args.feed)
    incs = f"increment(s) {', '.join(map(str, r['increments']))}" if r["increments"] else "no increment"
    print(f"withdrew feed {r['feed']} of '{r['flow']}': {r['records']} record(s), {incs}")
    return 0
