"""Translators of the incremental crawl queue (paper 001, Fig. 1; ``crawl_queue.yaml``).

The link rules (what counts as a link, how URLs are normalized, what a site is) live in
:mod:`cbp_crawl.links`, shared with the crawler and the from-scratch reference.
"""

import math

from cbp_crawl.links import normalize_url, page_links, site_of
from cbp_crawl.versions import latest, replaces, status_of


def _diff(record):
    """A record's multiplicity (``_diff``, +1 when absent): ``_diff: n`` stands for n copies."""
    return record.get("_diff", 1)


# ---------------------------------------------------------------- extract_links (key: the page's URL)
def page_url(page):
    """RouteBy of ``pages``: the page's normalized URL (its versions meet at one key)."""
    return normalize_url(page["url"]) or page["url"]


def extract_links(key, state, pages, out):
    """A page's latest version -> the links it gained (``{src, dst}``) and lost (``_diff: -1``).

    State: the page's current links (none once gone). A 304 or a stale version changes nothing.
    Without state (the landmark variant) every page's links are sent, as in a from-scratch count.
    """
    if not out.has_state:
        for page in pages:
            if page.get("_diff", 1) > 0 and status_of(page) == 200:
                src = normalize_url(page["url"]) or page["url"]
                for dst in page_links(src, page.get("html") or ""):
                    out.links.write({"src": src, "dst": dst})
        return
    prev = next(state, None)
    page = latest(pages)
    if page is None or (prev is not None and not replaces(page, prev["fetched"])):
        if prev is not None:
            out.state.write(
                {"url": prev["url"], "status": prev["status"], "fetched": prev["fetched"], "links": list(prev["links"])}
            )
        return
    src = key
    status = status_of(page)
    new = page_links(src, page.get("html") or "") if status == 200 else []
    old = list(prev["links"]) if prev is not None else []
    new_set, old_set = set(new), set(old)
    for dst in old:
        if dst not in new_set:
            out.links.write({"src": src, "dst": dst, "_diff": -1})
    for dst in new:  # in the page's order
        if dst not in old_set:
            out.links.write({"src": src, "dst": dst})
    out.state.write({"url": src, "status": status, "fetched": page.get("fetched"), "links": new})


# ---------------------------------------------------------------- count_links (keys: URL and site)
def url_and_site(link):
    """RouteBy of ``links``: each link counts for its target URL and for the target's site."""
    return [["url", link["dst"]], ["site", site_of(link["dst"])]]


def count_links(key, state, links, out):
    """Add the key's signed in-links (a retraction counts -1) to its stored count; emit the new
    count and the change when it changed. A count of zero drops the key's state."""
    kind, name = key
    prev = next(state, None)
    change = sum(_diff(link) for link in links)
    n = (prev["inlinks"] if prev else 0) + change
    if out.has_state and n != 0:  # the landmark variant keeps no state
        out.state.write({"kind": kind, "name": name, "inlinks": n})
    if change == 0:
        return
    if kind == "url":
        out.url_counts.write({"url": name, "inlinks": n, "change": change})
    else:
        out.site_counts.write({"site": name, "inlinks": n, "change": change})


# ---------------------------------------------------------------- merge (key: site)
def site_of_url(record):
    """RouteBy of ``url_counts`` and ``pages``: the record's site."""
    return site_of(normalize_url(record["url"]) or record["url"])


SITE_ROW = ""  #: merge's row key of the site's own row (its in-link count): no URL is empty
_NEW = {"inlinks": 0, "crawled": False, "sent_inlinks": None, "sent_site": None}


def merge(site, state, url_counts, site_counts, pages, out):
    """Combine the site's counts with its crawled URLs; send the not-yet-crawled URLs whose in-link
    count changed, and those whose place in the queue a change of the site's count flips.

    State (keyed rows, ``row_key: url``): one row per URL of the site, and the site's own count
    under ``url: ""``. ``sent_*`` are the counts last sent on ``candidates``. The site's count
    enters every score, but a change of it can put a URL in the queue or take it out only for
    URLs with few in-links on sites with few in-links (``params.threshold``, the same as
    threshold's: :func:`flip_band`); only then are all the site's rows read.
    Without state (the landmark variant) every URL counted in the epoch and not crawled is sent.
    """
    if not out.has_state:
        _merge_all(url_counts, site_counts, pages, out)
        return
    t = float(out.params.get("threshold", 3.0))
    change = _url_changes(url_counts)
    crawled = {u for u in map(page_url, pages) if u != SITE_ROW}  # a page landed with an empty URL can have no in-link
    wanted = sorted(set(change) | crawled)
    stored = state.get_many([SITE_ROW, *wanted])  # one read: the site's row and the rows of the URLs of the epoch
    site_row = stored.pop(SITE_ROW, None)
    site_in = site_row["inlinks"] if site_row else 0
    new_site_in = site_in + sum(_change(c) * _diff(c) for c in site_counts)
    rows = {}
    for u in wanted:
        r = dict(stored.get(u) or {"url": u, **_NEW})
        r["inlinks"] += change.get(u, 0)
        r["crawled"] = r["crawled"] or u in crawled
        rows[u] = r
    flips = []
    if flip_band(t, site_in, new_site_in):  # a site with few in-links: some URL may enter or leave the queue
        for r in state:
            if (
                r["url"] != SITE_ROW
                and r["url"] not in rows
                and not r["crawled"]
                and _above(r["sent_inlinks"], r["sent_site"], t) != _above(r["inlinks"], new_site_in, t)
            ):
                stored[r["url"]] = r
                flips.append(dict(r))
    rows.update((r["url"], r) for r in flips)
    for u in sorted(rows):
        r = rows[u]
        if r["crawled"] or (r["inlinks"] == 0 and r["sent_inlinks"] is None):
            continue
        if (r["sent_inlinks"], r["sent_site"]) != (r["inlinks"], new_site_in):
            out.candidates.write(
                {
                    "url": u,
                    "inlinks": r["inlinks"],
                    "site_inlinks": new_site_in,
                    "prev_inlinks": r["sent_inlinks"],
                    "prev_site_inlinks": r["sent_site"],
                }
            )
            r["sent_inlinks"], r["sent_site"] = r["inlinks"], new_site_in
    if new_site_in != site_in:
        _put(out, SITE_ROW, {"url": SITE_ROW, **_NEW, "inlinks": new_site_in} if new_site_in != 0 else None, site_row)
    for u, r in rows.items():  # a URL no page links to any more (and not crawled) is forgotten
        _put(out, u, r if r["crawled"] or r["inlinks"] != 0 else None, stored.get(u))


def flip_band(t, site_before, site_after):
    """Whether a change of a site's in-link count from ``site_before`` to ``site_after`` moves some
    in-link count ``v >= 1`` across threshold ``t``: ``v + 0.5*log2(1 + site)`` on one side of ``t``
    before and on the other after. The ``v`` that can lie between ``t - 0.5*log2(1 + site_after)``
    and ``t - 0.5*log2(1 + site_before)`` are few (the band is at most 0.5*log2 of the count wide)
    and each is checked with the score itself, so rounding cannot disagree with ``threshold``.

        >>> flip_band(3.0, 14, 15), flip_band(3.0, 15, 1_000_000), flip_band(3.0, 2, 3), flip_band(3.0, 0, 1), flip_band(10.0, 5000, 5001)
        (True, False, True, False, False)
    """
    if site_before == site_after:
        return False
    lo, hi = sorted((site_before, site_after))
    first = max(1, math.floor(t - 0.5 * math.log2(1 + max(hi, 0))) - 1)
    last = max(1, math.ceil(t - 0.5 * math.log2(1 + max(lo, 0))) + 1)
    return any(_above(v, lo, t) != _above(v, hi, t) for v in range(first, last + 1))


def _above(inlinks, site_inlinks, t):
    """Whether ``threshold`` holds a URL with these counts in the queue (a URL no page links to is no candidate)."""
    return bool(inlinks) and crawl_score(inlinks, site_inlinks) >= t


def _put(out, url, row, before):
    """Write ``row`` under ``url`` if it differs from the stored ``before`` (``None``: delete the stored row)."""
    if row is None:
        if before is not None:
            out.state.delete(url)
    elif row != before:
        out.state.write(row)


def _url_changes(url_counts):
    """The change of each URL's in-link count (changes add up, whatever the order: an epoch may read several of count_links')."""
    change = {}
    for c in url_counts:
        change[c["url"]] = change.get(c["url"], 0) + _change(c) * _diff(c)
    return change


def _merge_all(url_counts, site_counts, pages, out):
    """Merge without state (the landmark variant): every URL counted in the epoch and not crawled in it."""
    change = _url_changes(url_counts)
    site_in = sum(_change(c) * _diff(c) for c in site_counts)
    crawled = set(map(page_url, pages))
    for u in sorted(change):
        if u not in crawled and change[u] != 0:
            out.candidates.write(
                {
                    "url": u,
                    "inlinks": change[u],
                    "site_inlinks": site_in,
                    "prev_inlinks": None,
                    "prev_site_inlinks": None,
                }
            )


def _change(count):
    """A count record's change (older records have none: their count is the change from nothing)."""
    return count["inlinks"] if count.get("change") is None else count["change"]


# ---------------------------------------------------------------- score and threshold (record-wise)
def crawl_score(inlinks, site_inlinks):
    """``inlinks(u) + 0.5 * log2(1 + inlinks(site(u)))``."""
    return inlinks + 0.5 * math.log2(1 + site_inlinks)


def score(key, state, candidates, out):
    """Score a candidate now and as it was last sent."""
    for c in candidates:
        prev = None if c["prev_inlinks"] is None else crawl_score(c["prev_inlinks"], c["prev_site_inlinks"])
        out.scored.write(
            {
                "url": c["url"],
                "score": crawl_score(c["inlinks"], c["site_inlinks"]),
                "prev_score": prev,
                "inlinks": c["inlinks"],
            }
        )


def threshold(key, state, scored, out):
    """Queue a URL when its score reaches the threshold (``params.threshold``); take it back
    (``_diff: -1`` on the record queued) when its score falls below it again.

    State (keyed by URL): the queued record. Without state (the landmark variant), every
    candidate at or above the threshold is queued.
    """
    t = float(out.params.get("threshold", 3.0))
    if not out.has_state:
        for s in scored:
            if s["score"] >= t and (s["prev_score"] is None or s["prev_score"] < t):
                out.crawl_queue.write({"url": s["url"], "score": s["score"]})
        return
    queued = next(state, None)
    last = None
    for s in scored:  # one per epoch of merge; several only if this epoch reads several of merge's
        last = s
    above = (
        last is not None and last["score"] >= t and last.get("inlinks") != 0
    )  # a URL no page links to is no candidate
    if last is not None and above and queued is None:
        queued = {"url": last["url"], "score": last["score"]}
        out.crawl_queue.write(queued)
    elif last is not None and not above and queued is not None:
        out.crawl_queue.write({"url": queued["url"], "score": queued["score"], "_diff": -1})
        queued = None
    if queued is not None:
        out.state.write({"url": queued["url"], "score": queued["score"]})
