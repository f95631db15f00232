"""A page's versions: which ``pages`` record is a page's latest, shared by the pipeline and the reference.

A ``pages`` record is ``{url, status, html, digest?, fetched?}``. ``status`` 200 (the default when
a record has none, so older feeds still work) is a new version of the page: it replaces the one
before; 404 and 410 say the page is gone (no links); 304 ("not modified") and any other status
leave the stored version as it is. ``fetched`` (seconds, e.g. the crawler's clock) orders the
versions: of the records one epoch brings for a page, the one fetched last is the latest (ties:
the larger ``(status, html)``, so the result does not depend on record order); a record fetched
before the stored version is stale and ignored; without times, a later epoch wins. A record with a
negative ``_diff`` is ignored: versions are replaced, not retracted (land a 404 to remove a page).

    >>> latest([{"url": "u", "html": "a", "fetched": 2.0}, {"url": "u", "status": 304, "fetched": 3.0},
    ...         {"url": "u", "status": 404, "html": None, "fetched": 1.0}])["html"]
    'a'
    >>> replaces({"fetched": 1.0}, 2.0), replaces({"fetched": None}, 2.0), replaces({"fetched": 3.0}, None)
    (False, True, True)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["status_of", "latest", "replaces", "VERSION_STATUSES", "GONE"]

GONE = (404, 410)
VERSION_STATUSES = (200,) + GONE  # the statuses that set a page's version


def status_of(record: Mapping[str, Any]) -> int:
    """The record's status (200 when it has none)."""
    s = record.get("status")
    return 200 if s is None else int(s)


def _order(record: Mapping[str, Any]) -> tuple[float, int, str]:
    f = record.get("fetched")
    return (float("-inf") if f is None else float(f), status_of(record), record.get("html") or "")


def latest(records: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The record that sets the page's version among one epoch's records of one page (None: none does)."""
    best = None
    for r in records:
        if r.get("_diff", 1) <= 0 or status_of(r) not in VERSION_STATUSES:
            continue
        if best is None or _order(r) > _order(best):
            best = r
    return best


def replaces(record: Mapping[str, Any], stored_fetched: float | None) -> bool:
    """Whether ``record`` (the latest of an epoch) replaces a stored version fetched at ``stored_fetched``."""
    f = record.get("fetched")
    return f is None or stored_fetched is None or float(f) >= float(stored_fetched)
