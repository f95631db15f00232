"""The crawl queue computed from scratch (pandas), to check the incremental pipeline against.

Given every page crawled so far, the queue is every URL that is not crawled and whose
``score(u) = inlinks(u) + 0.5 * log2(1 + inlinks(site(u)))`` is at least the threshold, where
``inlinks`` counts the distinct links of each page (:func:`cbp.crawl.links.page_links`).

    >>> pages = [{"url": "http://a/", "html": '<a href="x">1</a><a href="x">2</a><a href="y">3</a>'},
    ...          {"url": "http://a/y", "html": '<a href="x">'}]
    >>> queue_from_scratch(pages, threshold=2.0)
    {'http://a/x': 3.0}
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Optional

import pandas as pd

from .links import normalize_url, page_links, site_of

__all__ = ["queue_from_scratch", "counts_from_scratch"]


def counts_from_scratch(pages: Iterable[Mapping[str, Any]], cache: Optional[dict[str, list[str]]] = None) -> tuple[pd.Series, pd.Series, set[str]]:
    """In-links per URL, in-links per site, and the crawled URLs.

    ``cache`` (url -> links) saves re-parsing pages when this is called again on more pages.
    """
    crawled: set[str] = set()
    src, dst = [], []
    for p in pages:
        u = normalize_url(p["url"]) or p["url"]
        crawled.add(u)
        if cache is None:
            found = page_links(u, p["html"])
        elif u in cache:
            found = cache[u]
        else:
            found = cache[u] = page_links(u, p["html"])
        for d in found:
            src.append(u)
            dst.append(d)
    links = pd.DataFrame({"src": src, "dst": dst}, dtype=object)
    url_in = links.groupby("dst").size() if len(links) else pd.Series(dtype="int64")
    sites = links["dst"].map(site_of)
    site_in = links.groupby(sites).size() if len(links) else pd.Series(dtype="int64")
    return url_in, site_in, crawled


def queue_from_scratch(pages: Iterable[Mapping[str, Any]], threshold: float = 3.0,
                       cache: Optional[dict[str, list[str]]] = None) -> dict[str, float]:
    """``{url: score}`` of every not-yet-crawled URL whose score is at least ``threshold``."""
    url_in, site_in, crawled = counts_from_scratch(pages, cache)
    out = {}
    for url, n in url_in.items():
        if url in crawled:
            continue
        s = int(n) + 0.5 * math.log2(1 + int(site_in[site_of(url)]))
        if s >= threshold:
            out[url] = s
    return out
