"""Bounded work counted in operations, not seconds.

A test that says "this input is refused after bounded work" counts what the code did (function
calls, Python's and calls into C), which is the same on a busy machine as on an idle one, and
compares it with a bound far above what the code needs and far below what an unbounded reading
would take (an alias bomb expanded, a 64 MiB line read whole, a nesting walked to the end):

    with counting_calls() as calls:
        load_spec(path)
    assert calls.n < 200_000, calls.n

Only the calling thread is counted (``sys.setprofile``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import FrameType
from typing import Any


@dataclass
class Calls:
    """How many function calls were made in the block (``n``), so far or in all."""

    n: int = 0


@contextmanager
def counting_calls() -> Iterator[Calls]:
    """Count the calls the block makes in this thread (Python functions and C functions alike)."""
    calls = Calls()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            calls.n += 1

    before = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(before)
