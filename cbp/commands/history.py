"""``cbp history FLOW.yaml [--json]``: per run, which feeds each stage epoch read and what it wrote; rewinds.

$ cbp history flows/url_count.yaml
run 1: cbp run flows/url_count.yaml (pid 4242 on vm, 2026-11-27 12:00:01 UTC)
  url_count  epoch 1  read urls: feed 1 (increment 1)  wrote counts: 3 records (increment 1)
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

NAME = "history"


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        NAME, help="per run, which feeds each stage epoch read and what it wrote; rewinds and the epochs they undid"
    )
    with_home(p)
    p.add_argument("--json", action="store_true", help="print the history as JSON")
    p.add_argument("--last", type=int, default=None, metavar="N", help="only the last N runs and rewinds")


def _when(t: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t)) if t else "time unknown"


def _ids(ids: list[int]) -> str:
    return f"increment{'s' if len(ids) != 1 else ''} {', '.join(map(str, ids))}" if ids else "no increment"


def epoch_line(ep: dict[str, Any]) -> str:
    """One stage epoch of ``cbp history`` / ``cbp status`` as a line."""
    reads = []
    for flow, r in ep["read"].items():
        if "feeds" in r:
            what = f"feed{'s' if len(r['feeds']) != 1 else ''} {', '.join(map(str, r['feeds']))}"
        else:
            what = ", ".join(r.get("from", [])) or "?"
        reads.append(f"{flow}: {what} ({_ids(r['increments'])})")
    wrote = [f"{flow}: {w['records']} record(s) ({_ids(w['increments'])})" for flow, w in ep["wrote"].items()]
    return (
        f"{ep['stage']:<12} epoch {ep['epoch']:>4}  read {'; '.join(reads) or 'nothing'}  "
        f"wrote {'; '.join(wrote) or 'nothing'}" + ("  [undone]" if ep.get("undone") else "")
    )


def run_head(n: int, run: dict[str, Any] | None) -> str:
    if not run:
        return f"run {n}: stage epochs run outside 'cbp run' (or by a cbp that did not record its runs)"
    return f"run {n}: {run.get('command')} (pid {run.get('pid')} on {run.get('host')}, {_when(run.get('started'))})"


def print_events(events: list[dict[str, Any]]) -> None:
    n = 0
    for ev in events:
        if ev["kind"] == "run":
            n += 1
            print(run_head(n, ev["run"]))
            for ep in ev["epochs"]:
                print("  " + epoch_line(ep))
            continue
        to = ev["to"]
        where = f"stage '{to['stage']}' epoch {to['epoch']}" if to["epoch"] else "the beginning"
        undone = "; ".join(f"{s} epoch(s) {', '.join(map(str, e))}" for s, e in ev["undone"].items())
        print(
            f"rewind (change {ev['seq']}, {_when(ev.get('at'))}): back to after {where}; undid {undone} "
            "(their records stay readable: Pipeline.undone_output)"
        )
        for ep in ev["undone_epochs"]:
            print("  " + epoch_line(ep))


def run(args: argparse.Namespace) -> int:
    from ..controller.retention import horizon
    from ..pipeline import Pipeline

    pipe = Pipeline(args.flow_yaml, args.home)
    events = pipe.history()
    start = horizon(pipe.home)  # None: the history starts at the first epoch
    if args.last is not None:
        events = events[-args.last :] if args.last > 0 else []
    if args.json:
        doc = {"pipeline": pipe.spec.name, "home": pipe.home.location, "starts": start, "events": events}
        print(json.dumps(doc, indent=2))
        return 0
    if start is not None:
        firsts = ", ".join(f"'{s}' epoch {e}" for s, e in start["stages"].items())
        print(f"history starts at change {start['seq']} ({firsts}): older epochs were trimmed (retention)")
    if not events:
        print(f"no stage epoch has run in {pipe.home.location} yet")
    print_events(events)
    return 0


def print_status(st: dict[str, Any], yaml: str) -> None:
    """What ``cbp status`` adds: the last run's stage epochs, and pending feeds that repeat earlier ones."""
    last = st.get("last_run")
    if last:
        run = last["run"]
        print(
            "  last run: "
            + (f"{run.get('command')} ({_when(run.get('started'))})" if run else "stage epochs run outside 'cbp run'")
        )
        for ep in last["epochs"]:
            print("    " + epoch_line(ep))
    for d in st.get("duplicate_feeds", []):
        print(
            f"  warning [duplicate-feed]: pending feed {d['feed']} of '{d['flow']}' has the same records as feed "
            f"{d['duplicate_of']}; "
            f"'cbp unfeed {yaml} {d['flow']} --feed {d['feed']}' withdraws it while no stage has read it"
        )
