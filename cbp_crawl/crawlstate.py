"""The crawler's position in ``<home>/_crawler/state.json``: what a crawler writes (nothing else is
resumed from), and the upgrade of a state written before revisits (no ``pages`` schedule)."""

from __future__ import annotations

from typing import Any

from .schedule import Revisits

_STATE_FIELDS = {
    "round": int,
    "cursor": int,
    "frontier": dict,
    "fetched": list,
    "failed": dict,
}  # and "doing": a dict or None


def _well_formed(st: Any) -> bool:
    """Whether ``st`` has the fields, types and ranges a crawler writes (nothing else is resumed from).

    >>> st = {"round": 1, "cursor": 2, "frontier": {"http://h/": 1.5}, "fetched": ["http://h/a"], "failed": {}}
    >>> _well_formed({**st, "doing": None})
    True
    >>> _well_formed({"round": 1, "cursor": -5, "frontier": {}, "fetched": [[2]], "failed": {}, "doing": {}})
    False
    """

    def count(v: Any) -> bool:
        return type(v) is int and v >= 0

    def scores(v: Any) -> bool:
        return isinstance(v, dict) and all(isinstance(u, str) and type(x) in (int, float) for u, x in v.items())

    def urls(v: Any) -> bool:
        return isinstance(v, list) and all(isinstance(u, str) for u in v)

    if not (
        isinstance(st, dict)
        and all(type(st.get(k)) is t for k, t in _STATE_FIELDS.items())
        and isinstance(st.get("rounds", []), list)
    ):
        return False
    if not (
        count(st["round"])
        and count(st["cursor"])
        and scores(st["frontier"])
        and urls(st["fetched"])
        and all(isinstance(u, str) and isinstance(r, str) for u, r in st["failed"].items())
    ):
        return False
    if not (
        isinstance(st.get("pages", {}), dict)
        and all(isinstance(u, str) and _entry_ok(e) for u, e in st.get("pages", {}).items())
        and isinstance(st.get("outages", {}), dict)
        and all(count(v) for v in st.get("outages", {}).values())
    ):
        return False
    doing = st.get("doing")
    return doing is None or (
        isinstance(doing, dict)
        and count(doing.get("round"))
        and doing["round"] == st["round"] + 1
        and count(doing.get("cursor"))
        and urls(doing.get("picks"))
        and count(doing.get("queued"))
        and scores(doing.get("frontier"))
        and urls(doing.get("revisits", []))
        and urls(doing.get("outside", []))
        and _number(doing.get("now", 0.0))
        and count(doing.get("feeds", 0))
    )


def _number(v: Any) -> bool:
    return type(v) in (int, float) and v == v and abs(v) != float("inf")


def _entry_ok(e: Any) -> bool:
    """A page's schedule entry as the crawler writes it (see :mod:`cbp_crawl.schedule`)."""
    return (
        isinstance(e, dict)
        and e.get("status") in (200, 404, 410)
        and _number(e.get("interval"))
        and e["interval"] > 0
        and _number(e.get("next"))
        and (e.get("last") is None or _number(e["last"]))
        and type(e.get("misses", 0)) is int
        and (e.get("digest") is None or isinstance(e["digest"], str))
        and (
            e.get("stamp") is None
            or (isinstance(e["stamp"], list) and len(e["stamp"]) == 3 and all(type(x) is int for x in e["stamp"]))
        )
    )


def upgrade_state(st: dict[str, Any], now: float, pol: Revisits) -> dict[str, Any]:
    """A state of a crawler without revisits (no ``pages``): its fetched URLs get a schedule, due now."""
    if "pages" not in st:
        st["pages"] = {
            u: {
                "status": 200,
                "digest": None,
                "stamp": None,
                "interval": pol.clamp(pol.revisit_min),
                "last": None,
                "next": now,
                "misses": 0,
                "changes": 0,
                "fetches": 1,
            }
            for u in dict.fromkeys(st["fetched"])
        }
    return st
