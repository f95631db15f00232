"""``cbp init NAME``: scaffold a pipeline of one's own that validates and passes its test as made.

    $ cbp init clicks --dir myproject
    created myproject/flows/clicks.yaml, myproject/flows/clicks.py, myproject/tests/test_clicks.py

The pipeline counts events per key (a stateful stage with an output flow): change the YAML's
schemas and the translator to make it yours. The translator sums each event's multiplicity
``_diff`` (+1, or -1 for a retraction), so the stage says ``signed: true``; the test replays
three increments with :func:`cbp.testing.replay`, the last one a retraction, and compares the
state with a sum from scratch.
"""

from __future__ import annotations

import argparse
import keyword
import os
import re
import sys
from collections.abc import Callable
from typing import Any

from ..errors import UsageError

__all__ = ["NAME", "add_parser", "run", "scaffold"]

NAME = "init"

YAML = """\
# {name}: counts events per key. Made by 'cbp init {name}': change it into your own pipeline.
pipeline: {name}
flows:
  events:
    external: true              # you feed it: cbp feed flows/{name}.yaml events FILE.jsonl
    schema: {{key: string}}
  counts:
    description: every key whose count changed in the epoch, with its new count
    schema: {{key: string, count: int}}
stages:
  count:
    translator: {name}:count    # the function count in {name}.py, beside this file
    signed: true                # count sums _diff, so retractions (_diff: -1) may reach it
    partitions: 4
    inputs:
      - {{flow: events, route_by: key}}   # one translate call per key with new events
    state:
      schema: {{key: string, count: int}}
      grouping: inner           # only keys with new input are read and called
    outputs: [counts]
"""

TRANSLATOR = '''\
"""The translator of pipeline {name} (flows/{name}.yaml)."""


def count(key, state, events, out):
    """Called once per key with new events: add them to the key's stored count, emit the new count.

    ``state`` iterates the key's stored state records (none the first time), ``events`` its new
    records of the flow 'events'; ``out.state.write`` replaces the key's state, ``out.counts.write``
    emits a record on the flow 'counts'. Every record has a multiplicity ``_diff``: +1, -1 for a
    retraction (an event taken back), n for n copies; so sum ``_diff``, never count records.
    """
    prev = next(state, None)
    total = sum(e["_diff"] for e in events) + (prev["count"] if prev else 0)
    if total:
        out.state.write({{"key": key, "count": total}})  # a count of 0: no state, the key is dropped
    out.counts.write({{"key": key, "count": total}})
'''

TEST = '''\
"""Tests of pipeline {name}: replay recorded increments, compare with a sum from scratch."""

from collections import Counter
from pathlib import Path

from cbp.testing import Increment, replay

YAML = Path(__file__).resolve().parents[1] / "flows" / "{name}.yaml"

DAYS = [
    [{{"key": "a"}}, {{"key": "b"}}, {{"key": "a"}}],
    [{{"key": "b"}}, {{"key": "c"}}],
    [{{"key": "a", "_diff": -1}}, {{"key": "c", "_diff": -1}}],  # retractions: one 'a' and the 'c' taken back
]


def from_scratch(days):
    """Each key's count: the sum of its events' multiplicities (_diff, +1 when absent), zeros left out."""
    total = Counter()
    for day in days:
        for e in day:
            total[e["key"]] += e.get("_diff", 1)
    return {{k: n for k, n in total.items() if n}}


def test_{name}_counts_every_key(tmp_path):
    r = replay(YAML, [Increment("events", day) for day in DAYS], home=str(tmp_path / "home"))
    for i, step in enumerate(r.steps):  # after every increment, the state is the sum from scratch
        assert {{s["key"]: s["count"] for s in step.state["count"]}} == from_scratch(DAYS[: i + 1])
    # an epoch emits the keys whose count changed, with their new count (0: the key is gone)
    assert sorted((o["key"], o["count"]) for o in r.steps[1].outputs["counts"]) == [("b", 2), ("c", 1)]
    assert sorted((o["key"], o["count"]) for o in r.steps[2].outputs["counts"]) == [("a", 1), ("c", 0)]
'''


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        NAME,
        help="scaffold a pipeline: flows/NAME.yaml, its translator flows/NAME.py and tests/test_NAME.py",
        description="Make a pipeline that validates and passes its test as made (a count per key); "
        "then change it into your own.",
    )
    p.add_argument(
        "name", metavar="NAME", help="the pipeline's name: lower-case letters, digits and _, starting with a letter"
    )
    p.add_argument("--dir", default=".", help="the project directory to create it in (default: the current one)")


def check_name(name: str) -> None:
    """Refuse a name that is not a usable module name (``bad-name``)."""
    if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", name) or keyword.iskeyword(name):
        raise UsageError(
            f"pipeline name {name!r}: use lower-case letters, digits and _, starting with a letter "
            "(it names the translator module)",
            code="bad-name",
        )
    if name in sys.stdlib_module_names or name in ("cbp", "pyspark", "deltalake", "pyarrow", "pandas", "test", "tests"):
        raise UsageError(
            f"pipeline name {name!r} is also the name of a module Python or cbp imports; choose another",
            code="bad-name",
        )


def scaffold(name: str, directory: str = ".") -> list[str]:
    """Write the three files of a new pipeline under ``directory``; return their paths.

    Example::

        scaffold("clicks", "/tmp/myproject")
        # ['/tmp/myproject/flows/clicks.yaml', '/tmp/myproject/flows/clicks.py', '/tmp/myproject/tests/test_clicks.py']
    """
    check_name(name)
    files = {
        os.path.join(directory, "flows", f"{name}.yaml"): YAML,
        os.path.join(directory, "flows", f"{name}.py"): TRANSLATOR,
        os.path.join(directory, "tests", f"test_{name}.py"): TEST,
    }
    there = [f for f in files if os.path.lexists(f)]
    if there:
        raise UsageError(f"{', '.join(there)} already exist(s): nothing was written", code="exists")
    for path in files:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    for path, text in files.items():
        with open(path, "x", encoding="utf-8") as f:
            f.write(text.format(name=name))
    return list(files)


def run(args: argparse.Namespace) -> int:
    made = scaffold(args.name, args.dir)
    print(f"created {', '.join(made)}")
    print(f"next: cbp validate {made[0]}   then   python -m pytest {made[2]}")
    return 0
