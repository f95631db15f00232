"""The crawl queue computed from scratch (pandas), to check the incremental pipeline against.

Given every page version crawled so far, the in-link counts are those of the *latest version* of
each page (:mod:`cbp_crawl.versions`: a 200 replaces the version before, a 404/410 is a page
without links, a 304 changes nothing); the queue is every URL that is not crawled (no version of
it landed, whatever its status) and whose ``score(u) = inlinks(u) + 0.5 * log2(1 + inlinks(site(u)))``
is at least the threshold, where ``inlinks`` counts the distinct links of each page
(:func:`cbp_crawl.links.page_links`).

    >>> pages = [{"url": "http://a/", "html": '<a href="x">1</a><a href="x">2</a><a href="y">3</a>'},
    ...          {"url": "http://a/y", "html": '<a href="x">'}]
    >>> queue_from_scratch(pages, threshold=2.0)
    {'http://a/x': 3.0}
    >>> gone_y = [{"url": "http://a/y", "status": 404, "html": None}]
    >>> gone = queue_from_scratch([pages, gone_y], threshold=1.0, feeds=True)
    >>> {u: round(s, 3) for u, s in gone.items()}  # a/y's link gone: 1 in-link, site a 2 (x and y)
    {'http://a/x': 1.792}
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from .links import normalize_url, page_links, site_of
from .versions import latest, replaces, status_of

__all__ = ["queue_from_scratch", "counts_from_scratch", "latest_versions"]


def latest_versions(feeds: Iterable[Iterable[Mapping[str, Any]]]) -> tuple[dict[str, Mapping[str, Any]], set[str]]:
    """The latest version of every page (normalized URL -> record) after ``feeds`` (each the records
    one epoch of the pipeline reads, in order), and every URL any record landed for (the crawled ones)."""
    current: dict[str, Mapping[str, Any]] = {}
    crawled: set[str] = set()
    for feed in feeds:
        by_url: dict[str, list[Mapping[str, Any]]] = {}
        for p in feed:
            u = normalize_url(p["url"]) or p["url"]
            crawled.add(u)
            by_url.setdefault(u, []).append(p)
        for u, recs in by_url.items():
            best = latest(recs)
            if best is not None and (u not in current or replaces(best, current[u].get("fetched"))):
                current[u] = best
    return current, crawled


def counts_from_scratch(
    pages: Iterable[Any], cache: dict[tuple[str, str], list[str]] | None = None, feeds: bool = False
) -> tuple[pd.Series, pd.Series, set[str]]:
    """In-links per URL, in-links per site (keys with none left out), and the crawled URLs.

    ``pages``: page records, all read in one epoch; with ``feeds``, a list of such lists, one per
    epoch. ``cache`` ((url, html) -> links) saves re-parsing pages when this is called again.
    """
    current, crawled = latest_versions(pages if feeds else [pages])
    src, dst = [], []
    for u, p in current.items():
        if status_of(p) != 200:
            continue  # gone: no links
        html = p.get("html") or ""
        if cache is None:
            found = page_links(u, html)
        else:
            k = (u, html)
            found = cache[k] if k in cache else cache.setdefault(k, page_links(u, html))
        for d in found:
            src.append(u)
            dst.append(d)
    links = pd.DataFrame({"src": src, "dst": dst}, dtype=object)
    url_in = links.groupby("dst").size() if len(links) else pd.Series(dtype="int64")
    sites = links["dst"].map(site_of)
    site_in = links.groupby(sites).size() if len(links) else pd.Series(dtype="int64")
    return url_in, site_in, crawled


def queue_from_scratch(
    pages: Iterable[Any],
    threshold: float = 3.0,
    cache: dict[tuple[str, str], list[str]] | None = None,
    feeds: bool = False,
) -> dict[str, float]:
    """``{url: score}`` of every not-yet-crawled URL whose score is at least ``threshold``."""
    url_in, site_in, crawled = counts_from_scratch(pages, cache, feeds)
    out = {}
    for url, n in url_in.items():
        if url in crawled:
            continue
        s = int(n) + 0.5 * math.log2(1 + int(site_in[site_of(url)]))
        if s >= threshold:
            out[url] = s
    return out
