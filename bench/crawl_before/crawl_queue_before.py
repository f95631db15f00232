"""The crawl queue's translators as they were before merge kept keyed rows (flows/crawl_queue.py at a08d8e0).

Translators of the incremental crawl queue (paper 001, Fig. 1; ``crawl_queue.yaml``).

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


def merge(site, state, url_counts, site_counts, pages, out):
    """Combine the site's counts with its crawled URLs; send not-yet-crawled URLs whose counts changed.

    State: one record per URL of the site (``url`` null: the site's own count). ``sent_*`` are
    the counts last sent on ``candidates``, so ``threshold`` can tell a first crossing.
    """
    site_in, urls = 0, {}
    for r in state:
        if r["url"] is None:
            site_in = r["inlinks"]
        else:
            urls[r["url"]] = dict(r)
    changed = set()
    for c in url_counts:  # changes add up, whatever the order (an epoch may read several of count_links')
        r = urls.setdefault(
            c["url"], {"url": c["url"], "inlinks": 0, "crawled": False, "sent_inlinks": None, "sent_site": None}
        )
        r["inlinks"] += _change(c) * _diff(c)
        changed.add(c["url"])
    new_site_in = site_in + sum(_change(c) * _diff(c) for c in site_counts)
    for p in pages:
        u = normalize_url(p["url"]) or p["url"]
        r = urls.setdefault(u, {"url": u, "inlinks": 0, "crawled": False, "sent_inlinks": None, "sent_site": None})
        r["crawled"] = True
    candidates = urls.values() if new_site_in != site_in else (urls[u] for u in changed)
    for r in sorted(candidates, key=lambda r: r["url"]):
        if r["crawled"] or (r["inlinks"] == 0 and r["sent_inlinks"] is None):
            continue
        if (r["sent_inlinks"], r["sent_site"]) != (r["inlinks"], new_site_in):
            out.candidates.write(
                {
                    "url": r["url"],
                    "inlinks": r["inlinks"],
                    "site_inlinks": new_site_in,
                    "prev_inlinks": r["sent_inlinks"],
                    "prev_site_inlinks": r["sent_site"],
                }
            )
            r["sent_inlinks"], r["sent_site"] = r["inlinks"], new_site_in
    if not out.has_state:  # the landmark variant keeps no state
        return
    out.state.write({"url": None, "inlinks": new_site_in, "crawled": False, "sent_inlinks": None, "sent_site": None})
    for u in sorted(urls):
        if (
            urls[u]["crawled"] or urls[u]["inlinks"] != 0
        ):  # a URL no page links to any more (and not crawled) is forgotten
            out.state.write(urls[u])


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
