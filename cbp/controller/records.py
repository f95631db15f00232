"""What the controller hands out: epoch reports and records, Runnable decisions, feed results.

Reads: nothing. Writes: nothing (data classes, and checks that a value can be stored)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import UserCodeError
from ..spec.resolve import safe_str

__all__ = ["EpochReport", "EpochRecord", "Decision", "Landed", "check_storable", "signature"]


@dataclass
class EpochReport:
    """What one stage epoch did (one line of ``cbp run``)."""

    stage: str
    epoch: int
    records_in: int
    records_out: int
    keys_read: int
    keys_written: int
    seconds: float
    outputs: dict[str, int] = field(default_factory=dict)
    mode: str = "direct"
    phases: dict[str, float] = field(default_factory=dict)  # task seconds per phase, summed over tasks
    row_groups_read: int = 0  # state row groups the tasks read (direct mode)
    rows_decoded: int = 0  # the rows of those row groups (a lookup decodes whole row groups)
    executors: dict[int, str] = field(default_factory=dict)  # partition -> executor that ran its task ("<id>@<host>")
    cache_hits: int = 0  # state-file reads served from the executors' state caches (direct mode) ...
    cache_lookups: int = 0  # ... of all state-file reads
    copies_in: int = 0  # copies of broadcast and multicast records the tasks received (one per partition each)
    bindings_in: int = 0  # multicast bindings of the stage's last epoch the tasks received
    delivered: int = 0  # broadcast and multicast records handed to translate calls
    shuffle_records: int | None = None  # records and bytes the epoch's Spark job wrote to its shuffle
    shuffle_bytes: int | None = None  # (Spark's own task metrics; None when Spark did not report them)
    columnar_tasks: int = (
        0  # tasks that ran a batch translator on Arrow chunks, without key groups (cbp.engine.task.columnar)
    )

    @property
    def cache_hit_rate(self) -> float | None:
        """``cache_hits / cache_lookups``; ``None`` when no state was read."""
        return round(self.cache_hits / self.cache_lookups, 4) if self.cache_lookups else None

    def line(self) -> str:
        outs = ", ".join(f"{f}={n}" for f, n in self.outputs.items()) or "-"
        rate = self.cache_hit_rate
        cache = f"  cache {rate:4.0%}" if rate is not None else ""
        where = len(set(self.executors.values()))
        return (
            f"{self.stage:<16} epoch {self.epoch:>4}  in {self.records_in:>9}  out {self.records_out:>9} ({outs})  "
            f"state read {self.keys_read:>8}  written {self.keys_written:>8}  {self.seconds:7.2f}s{cache}"
            + (f"  on {where} executors" if where > 1 else "")
        )


@dataclass(frozen=True)
class EpochRecord:
    """A committed stage epoch: the increment ids it read per input flow, and the increment ids and
    records it wrote per output flow."""

    stage: str
    epoch: int
    inputs: dict[str, list[int]]
    outputs: dict[str, list[int]]
    records: dict[str, int]


@dataclass
class Decision:
    """A Runnable's answer: how many of the oldest complete increments to read and remove per flow."""

    reads: dict[str, int]
    removes: dict[str, int]
    state: Any


class Landed(list):  # type: ignore[type-arg]
    """What a feed landed: the increment ids (the list), ``feed`` its number (what
    ``output(flow, epoch=N)`` and ``cbp output --epoch N`` take for an external flow), ``records``
    how many records it landed, ``repeated`` whether its feed id had landed before (then nothing was)."""

    def __init__(self, incs: Iterable[int] = (), *, feed: int = 0, records: int = 0, repeated: bool = False) -> None:
        super().__init__(incs)
        self.feed, self.records, self.repeated = feed, records, repeated


def check_storable(value: Any, what: str) -> None:
    """Runnable states, frame states and framing keys live in the JSON controller snapshot."""
    try:
        text = json.dumps(value, allow_nan=False)
    except RecursionError:
        raise UserCodeError(
            f"{what} cannot be stored as JSON (nested too deeply); nothing was run or landed", code="not-storable"
        ) from None
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - TypeError, ValueError, or a user's object whose methods fail
        raise UserCodeError(
            f"{what} cannot be stored as JSON ({type(e).__name__}: {safe_str(e)}); use dicts, lists, strings, numbers, "
            "booleans or None (tuples come back as lists); nothing was run or landed",
            code="not-storable",
        ) from None
    if len(text) > MAX_STORED_CHARS:  # every snapshot (each feed and epoch writes one) would carry it
        raise UserCodeError(
            f"{what} takes {len(text):,} characters as JSON, more than the {MAX_STORED_CHARS:,} the controller "
            "keeps of one; keep large data in the stage's state; nothing was run or landed",
            code="not-storable",
        )


#: The longest runnable state, frame state or framing key (as JSON) the controller snapshot keeps.
MAX_STORED_CHARS = 1 << 20


def signature(schema: Any) -> dict[str, str]:
    """A record schema as stored in the snapshot's shapes (field -> type)."""
    return {name: str(ft) for name, ft in schema.fields.items()}
