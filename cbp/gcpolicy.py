"""Fewer cyclic garbage collections while cbp makes many short-lived Python objects.

A per-key task decodes each batch of records into dicts, calls the translator once per key and
builds state and output rows: hundreds of thousands of containers that reference counting frees
at once. Python's cyclic collector makes a full collection, which walks every live object, every
70,000 allocations by default; measured on a 100k-record URLCount epoch (300k state keys), that
was a third of the epoch (run 2.0 s -> 1.2-1.4 s; task time decoding input 0.75 s -> 0.2 s, reading
state 0.65 s -> 0.3-0.4 s). :func:`fewer_collections` makes the older generations' collections
100x rarer for a block and keeps the young ones as they are (so short-lived cycles, such as a
translator may make per key, are still collected at once), and puts the thresholds back after
the last block ends.

    >>> import gc
    >>> before = gc.get_threshold()
    >>> with fewer_collections():
    ...     gc.get_threshold() == THRESHOLDS
    True
    >>> gc.get_threshold() == before
    True
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["fewer_collections", "THRESHOLDS"]

#: allocations before a young collection (Python's default: short-lived cycles, such as a
#: translator may make per key, are collected as promptly as ever); young collections per middle
#: one (default 10); middle ones per full one (default 10)
THRESHOLDS = (700, 100, 100)
_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] = ()


@contextmanager
def fewer_collections() -> Iterator[None]:
    """Make the cyclic collector's older-generation collections rarer for the block (re-entrant, and thread-safe: the
    thresholds are per process, so the last block to end puts the previous ones back)."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.set_threshold(*THRESHOLDS)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)
