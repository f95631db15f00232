"""``cbp retention FLOW.yaml [--epochs N] [--days D | --keep-all] [--json]``: how far back the home keeps history.

Without options it shows the home's retention and where its history starts; with them it records
a new retention, trimmed as epochs commit (:mod:`cbp.controller.retention`).

$ cbp retention flows/url_count.yaml --epochs 100
retention of /tmp/home: the last 100 epoch(s) of each stage (recorded; trimmed as epochs commit)
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

NAME = "retention"


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        NAME,
        help="how far back the home keeps history and table logs (show, or set with --epochs/--days/--keep-all)",
    )
    with_home(p)
    p.add_argument("--epochs", type=int, default=None, metavar="N", help="keep the last N epochs of each stage")
    p.add_argument("--days", type=float, default=None, metavar="D", help="keep the epochs of the last D days")
    p.add_argument("--keep-all", action="store_true", help="keep everything (nothing is trimmed)")
    p.add_argument("--json", action="store_true", help="print the retention and the horizon as JSON")


def run(args: argparse.Namespace) -> int:
    from ..controller.retention import RetentionSetting, horizon, read_record, set_retention
    from ..errors import UsageError
    from ..pipeline import Pipeline

    pipe = Pipeline(args.flow_yaml, args.home)
    setting_given = args.epochs is not None or args.days is not None
    if args.keep_all and setting_given:
        raise UsageError("--keep-all keeps everything: give it without --epochs or --days", code="bad-option")
    if args.keep_all or setting_given:
        setting = set_retention(pipe.home, args.epochs, args.days)
        recorded = True
    else:
        rec = read_record(pipe.home)
        setting, recorded = RetentionSetting.from_record(rec or None), "setting" in rec
    start = horizon(pipe.home)
    if args.json:
        doc = {"epochs": setting.epochs, "days": setting.days, "recorded": recorded, "starts": start}
        print(json.dumps(doc, indent=2))
        return 0
    how = "recorded" if recorded else "the default: the home recorded none"
    print(f"retention of {pipe.home.location}: {setting.describe()} ({how}; trimmed as epochs commit)")
    if start is not None:
        firsts = ", ".join(f"'{s}' epoch {e}" for s, e in start["stages"].items())
        print(f"history starts at change {start['seq']} ({firsts})")
    return 0
