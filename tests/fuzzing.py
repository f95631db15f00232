"""A time-boxed property-based fuzzing loop on hypothesis, shared by the ``test_fuzz_*`` tests.

Each target runs fresh hypothesis runs of ``BATCH`` examples until its time box is spent
(``CBP_FUZZ_SECONDS`` per target, default 10 s in the test suite; ``scripts/fuzz`` runs a long
session with a bigger box). A failing example is shrunk and reported by hypothesis as usual.
How many inputs each target tried is printed at the end of the pytest run (see conftest.py)
and, when ``CBP_FUZZ_REPORT`` names a file, appended to it as JSON lines.

    def test_fuzz_thing():
        fuzz("thing", st.text(), lambda s: check(s))
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

BATCH = 200
TRIED: dict[str, tuple[int, float]] = {}  # target -> (inputs tried, seconds), read by conftest


def budget() -> float:
    """Seconds per fuzz target."""
    return float(os.environ.get("CBP_FUZZ_SECONDS", "10"))


def fuzz(
    name: str, strategy: st.SearchStrategy[Any], check: Callable[[Any], None], *, seconds: float | None = None
) -> int:
    """Feed examples of ``strategy`` to ``check`` until the time box is spent; return how many."""
    seconds = budget() if seconds is None else seconds
    count = 0
    t0 = time.monotonic()

    @settings(
        max_examples=BATCH, deadline=None, database=None, derandomize=False, suppress_health_check=list(HealthCheck)
    )
    @given(strategy)
    def batch(example: Any) -> None:
        nonlocal count
        count += 1
        check(example)

    while True:
        batch()
        if time.monotonic() - t0 >= seconds:
            break
    took = time.monotonic() - t0
    TRIED[name] = (count, took)
    report = os.environ.get("CBP_FUZZ_REPORT")
    if report:
        with open(report, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"target": name, "inputs": count, "seconds": round(took, 1)}) + "\n")
    return count
