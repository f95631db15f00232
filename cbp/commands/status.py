"""``cbp status FLOW.yaml [--home H] [--json]``: stages, epochs run, pending increments per connector.

Also a run working on the home or interrupted, the code each stage last ran with, and the last
run's epochs and pending feeds that repeat earlier ones (:mod:`cbp.commands.history`).

    $ cbp status flows/url_count.yaml
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from . import history
from ._open import open_pipeline

__all__ = ["NAME", "add_parser", "run"]

NAME = "status"


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(NAME, help="stages, epochs run, pending increments per connector")
    with_home(p)
    p.add_argument("--json", action="store_true", help="print the status as JSON")


def run(args: argparse.Namespace) -> int:
    st = open_pipeline(args).status()
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(f"pipeline {st['pipeline']}  home {st['home']}  mode {st['mode']}")
    _runner(st)
    for name, s in st["stages"].items():
        print(f"  stage {name:<16} epochs {s['epochs']:>5}  runnable {s['runnable']}")
        for flow, c in s["connectors"].items():
            print(
                f"    <- {flow:<16} pending increments {c['pending']:>4} (complete {c['complete']}, records "
                f"{c['records']})"
            )
    for view, uri in st.get("view_tables", {}).items():
        print(f"  view  {view:<16} Delta table of its rows: {uri}")
    from ..controller.codehash import status_lines

    for line in status_lines(st):
        print(line)
    # the last run's epochs; pending feeds that repeat earlier ones
    history.print_status(st, args.flow_yaml)
    return 0


def _runner(st: dict[str, Any]) -> None:
    """The run working on the home, and what is under way or was interrupted."""
    if st["runner"]:
        r = st["runner"]
        print(f"  a cbp run is working on this home: pid {r.get('pid')} on {r.get('host')} ({r.get('command')})")
    for it in st["interrupted"]:
        verb = "under way" if st["runner"] else "interrupted"
        head = (
            f"{verb} commit of {it['what']}"
            if it["kind"] == "commit"
            else f"{verb}: stage '{it['stage']}' epoch {it['epoch']}"
        )
        print(f"  {head}; {it['recovery']}")
