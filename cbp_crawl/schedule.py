"""When the crawler fetches a page again: an adaptive revisit schedule per URL, and what one round picks.

Each crawled URL has an entry in the crawler's state (``pages`` of ``_crawler/state.json``):
its last landed ``status`` (200, or 404 once gone), the ``digest`` and ``stamp`` (modification
time, size, inode: the Last-Modified of a conditional fetch) of the version landed, its revisit
``interval`` (seconds), the time it was ``last`` fetched, when it is due (``next``) and its
consecutive ``misses``. After a revisit the interval is multiplied by :attr:`Revisits.grow` when
the page had not changed (the digest decides, not the fetch) and by :attr:`Revisits.shrink` when
it had (or came back), always kept within ``[revisit_min, revisit_max]``; a new page starts at
``revisit_min``.

**Priority** (documented in docs/howto/recrawl.md): seeds first; then due revisits (most overdue
relative to their interval first) and new URLs (highest score first) share ``max_pages``, the
revisits taking at most ``revisit_share`` of it while new URLs wait and whatever one side
leaves unused going to the other; at most ``max_per_host`` picks per host (URLs left out stay
in the frontier or stay due).

    >>> pol = Revisits(revisit_min=60, revisit_max=3600)
    >>> e = pol.new_entry(0.0, "d1", (1, 2, 3)); e["interval"], e["next"]
    (60.0, 60.0)
    >>> pol.revisited(e, 100.0, changed=False)["interval"], pol.revisited(e, 200.0, changed=True)["interval"]
    (90.0, 60.0)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from cbp import UsageError

__all__ = ["Revisits", "pick", "host_of", "due_revisits"]

DAY = 86400.0


@dataclass(frozen=True)
class Revisits:
    """The revisit policy: interval bounds (seconds), how it adapts, gone pages, politeness."""

    revisit_min: float = 3600.0
    revisit_max: float = 30 * DAY
    gone_after: int = 1  # consecutive misses (file missing, or no longer a page) before a page is landed as gone (404)
    grow: float = 1.5  # interval factor after a revisit that found the page unchanged
    shrink: float = 0.5  # ... that found it changed (or back)
    revisit_share: float = 0.5  # share of max_pages due revisits take at most while new URLs wait
    max_per_host: int | None = None  # picks per host and round (politeness); None: no limit
    outage_rounds: int = (
        3  # rounds a host whose revisited pages all vanished is held back before its pages count as gone
    )

    def __post_init__(self) -> None:
        for name in ("revisit_min", "revisit_max", "grow", "shrink"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0):
                raise UsageError(f"{name} must be a finite number > 0, got {v!r}", code="bad-option")
        if self.revisit_min > self.revisit_max:
            raise UsageError(
                f"revisit_min ({self.revisit_min}) is more than revisit_max ({self.revisit_max})", code="bad-option"
            )
        if not (0 <= self.revisit_share <= 1):
            raise UsageError(f"revisit_share must be within 0..1, got {self.revisit_share!r}", code="bad-option")
        for name in ("gone_after", "outage_rounds"):
            if type(getattr(self, name)) is not int or getattr(self, name) < 1:
                raise UsageError(f"{name} must be a whole number >= 1, got {getattr(self, name)!r}", code="bad-option")
        if self.max_per_host is not None and (type(self.max_per_host) is not int or self.max_per_host < 1):
            raise UsageError(f"max_per_host must be a whole number >= 1, got {self.max_per_host!r}", code="bad-option")

    def clamp(self, interval: float) -> float:
        return float(min(self.revisit_max, max(self.revisit_min, interval)))

    def new_entry(
        self, now: float, digest: str | None, stamp: Iterable[int] | None, status: int = 200
    ) -> dict[str, Any]:
        """The schedule of a page landed for the first time."""
        iv = self.clamp(self.revisit_min)
        return {
            "status": status,
            "digest": digest,
            "stamp": list(stamp) if stamp else None,
            "interval": iv,
            "last": now,
            "next": now + iv,
            "misses": 0,
            "changes": 0,
            "fetches": 1,
        }

    def revisited(self, entry: dict[str, Any], now: float, *, changed: bool) -> dict[str, Any]:
        """The entry after a revisit that found the page (un)changed; a new dict."""
        e = dict(entry)
        e["interval"] = self.clamp(e["interval"] * (self.shrink if changed else self.grow))
        e["last"], e["next"], e["misses"] = now, now + e["interval"], 0
        e["fetches"] = e.get("fetches", 0) + 1
        e["changes"] = e.get("changes", 0) + int(changed)
        return e

    def missed(self, entry: dict[str, Any], now: float, *, gone: bool) -> dict[str, Any]:
        """The entry after a revisit that did not find the page (``gone``: it is landed as gone now)."""
        e = dict(entry)
        e["fetches"] = e.get("fetches", 0) + 1
        e["last"] = now
        if e["status"] != 200 or gone:  # gone: look again less and less often (it may come back)
            e["interval"] = self.clamp(e["interval"] * self.grow)
            e["misses"] = e.get("misses", 0) + 1 if e["status"] == 200 else e.get("misses", 0)
            if gone:
                e["status"], e["digest"], e["stamp"], e["changes"] = 404, None, None, e.get("changes", 0) + 1
        else:  # missing, not gone yet: try again soon
            e["misses"] = e.get("misses", 0) + 1
        e["next"] = now + (e["interval"] if e["status"] != 200 else self.revisit_min)
        return e


def host_of(url: str) -> str:
    """The host a URL is fetched from (for the per-host limit)."""
    try:
        return urlsplit(url).netloc.lower()
    except ValueError:
        return ""


def due_revisits(pages: dict[str, dict[str, Any]], now: float) -> list[str]:
    """Crawled URLs due for a revisit, most overdue (relative to their interval) first."""
    due = [(now - e["next"]) / max(e["interval"], 1e-9) for e in pages.values()]
    order = [(-d, u) for (u, e), d in zip(pages.items(), due) if e["next"] <= now]
    return [u for _, u in sorted(order)]


def pick(
    seeds: list[str], revisits: list[str], new: list[str], max_pages: int, pol: Revisits
) -> tuple[list[str], list[str]]:
    """``(picks, revisits picked)`` by the documented priority (see the module docstring).

    >>> pick(["s"], ["r1", "r2", "r3"], ["n1", "n2"], 4, Revisits())
    (['s', 'r1', 'r2', 'n1'], ['r1', 'r2'])
    >>> pick([], ["r1", "r2", "r3"], ["n1"], 4, Revisits())
    (['r1', 'r2', 'n1', 'r3'], ['r1', 'r2', 'r3'])
    """
    per_host: dict[str, int] = {}

    def take(urls: Iterable[str], room: int, into: list[str]) -> None:
        for u in urls:
            if room <= 0:
                return
            h = host_of(u)
            if pol.max_per_host is not None and per_host.get(h, 0) >= pol.max_per_host:
                continue
            if u in chosen:
                continue
            per_host[h] = per_host.get(h, 0) + 1
            chosen.add(u)
            into.append(u)
            room -= 1

    chosen: set[str] = set()
    first: list[str] = []
    take(seeds, max_pages, first)
    left = max_pages - len(first)
    rv_cap = left if not new else int(math.ceil(left * pol.revisit_share))
    rv: list[str] = []
    take(revisits, rv_cap, rv)
    nw: list[str] = []
    take(new, left - len(rv), nw)
    more: list[str] = []
    take((u for u in revisits if u not in chosen), left - len(rv) - len(nw), more)
    return first + rv + nw + more, rv + more
