"""A crawl round's report (:class:`CrawlRound`) and how the crawler reads a queue record's
multiplicity and score."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["CrawlRound"]


def _diff(record: Any) -> int:
    """A record's multiplicity (``_diff``, +1 when absent)."""
    d = record.get("_diff", 1) if isinstance(record, dict) else 1
    return d if type(d) is int else 1


def _score(value: Any) -> float:
    """A queue record's score as a number (one that is not a number ranks last: -inf)."""
    try:
        score = float(value)
    except (TypeError, ValueError):
        return float("-inf")
    return score if score == score else float("-inf")


@dataclass
class CrawlRound:
    """One round: what was new in the queue, what was fetched and landed, what failed."""

    round: int
    queued: int = 0
    picked: list[str] = field(default_factory=list)
    landed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    truncated: list[str] = field(default_factory=list)
    frontier: int = 0
    increments: list[int] = field(default_factory=list)
    redone: bool = False
    fetched: list[str] = field(default_factory=list)  # new pages landed (status 200)
    revisited: list[str] = field(default_factory=list)  # crawled pages fetched again
    unchanged: list[str] = field(default_factory=list)  # ... found unchanged (landed nothing: a 304)
    changed: list[str] = field(default_factory=list)  # ... found changed (landed a new version)
    back: list[str] = field(default_factory=list)  # ... found again after they were gone
    gone: list[str] = field(default_factory=list)  # ... landed as gone (404)
    held: list[str] = field(default_factory=list)  # ... missing on a host held back as a suspected outage
    retracted: int = 0  # queue records taken back (URLs whose score fell below the threshold)
    records: int = 0  # pages records landed (new pages, new versions, gone pages)

    def counts(self) -> dict[str, list[str]]:
        """The per-round lists the statistics count."""
        return {
            "fetched": self.fetched,
            "revisited": self.revisited,
            "unchanged": self.unchanged,
            "changed": self.changed,
            "back": self.back,
            "gone": self.gone,
            "held": self.held,
        }

    def line(self) -> str:
        """One line for a log."""
        extra = f", {len(self.truncated)} truncated" if self.truncated else ""
        again = " (redone after an interruption)" if self.redone else ""
        text = (
            f"crawl round {self.round}{again}: {self.queued} new in queue, "
            f"fetched {len(self.landed)} of {len(self.picked)} ({len(self.failed)} failed{extra}); "
            f"{self.frontier} left in the frontier"
        )
        if self.revisited:
            text += (
                f"; revisited {len(self.revisited)}: {len(self.unchanged)} unchanged, {len(self.changed)} changed, "
                f"{len(self.gone)} gone, {len(self.back)} back, {len(self.held)} held"
            )
        return text
