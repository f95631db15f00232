"""``cbp validate FLOW.yaml [--home H]``: check a pipeline YAML without running anything.

Prints the pipeline's flows and stages, and warnings (dead ends, unsigned readers) on stderr; with
``--home``, also the plan of the YAML against the pipeline the home recorded (as ``cbp plan``).

    $ cbp validate flows/url_count.yaml
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["NAME", "add_parser", "run"]

NAME = "validate"


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(NAME, help="check a pipeline YAML without running anything")
    p.add_argument("flow_yaml", metavar="FLOW.yaml", help="the pipeline file")
    p.add_argument("--home", help="also plan the YAML against the pipeline this home recorded (as 'cbp plan')")


def run(args: argparse.Namespace) -> int:
    from ..spec import load_spec
    from ..spec.deadends import dead_ends
    from ..spec.signing import unsigned_readers

    spec = load_spec(args.flow_yaml)
    print(
        f"{args.flow_yaml}: pipeline '{spec.name}' is valid: {len(spec.flows)} flows, {len(spec.stages)} stages "
        f"({', '.join(spec.order)}); external inputs: {', '.join(spec.external_flows) or 'none'}"
    )
    warnings = [(d.code, d.message) for d in dead_ends(spec)] + [(u.code, u.message) for u in unsigned_readers(spec)]
    for code, message in warnings:
        print(f"cbp validate: warning [{code}]: {message}", file=sys.stderr)
    if not args.home:
        return 0
    from ..pipeline import Pipeline
    from .plan import show

    return show(Pipeline(args.flow_yaml, args.home).plan(), "validate")
