"""Translators of the incremental crawl queue (paper 001, Fig. 1; ``crawl_queue.yaml``).

The link rules (what counts as a link, how URLs are normalized, what a site is) live in
:mod:`cbp.crawl.links`, shared with the crawler and the from-scratch reference.
"""

import math

from cbp.crawl.links import normalize_url, page_links, site_of


# ---------------------------------------------------------------- extract_links (record-wise)
def extract_links(key, state, pages, out):
    """A page -> one ``{src, dst}`` per distinct link target (never fails on bad HTML)."""
    for page in pages:
        src = normalize_url(page["url"]) or page["url"]
        for dst in page_links(src, page["html"]):
            out.links.write({"src": src, "dst": dst})


# ---------------------------------------------------------------- count_links (keys: URL and site)
def url_and_site(link):
    """RouteBy of ``links``: each link counts for its target URL and for the target's site."""
    return [["url", link["dst"]], ["site", site_of(link["dst"])]]


def count_links(key, state, links, out):
    """Add the key's new in-links to its stored count; emit the new count."""
    kind, name = key
    prev = next(state, None)
    n = (prev["inlinks"] if prev else 0) + sum(1 for _ in links)
    if out.has_state:  # the landmark variant keeps no state
        out.state.write({"kind": kind, "name": name, "inlinks": n})
    if kind == "url":
        out.url_counts.write({"url": name, "inlinks": n})
    else:
        out.site_counts.write({"site": name, "inlinks": n})


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
    for c in url_counts:  # counts only grow: the largest is the newest
        r = urls.setdefault(c["url"], {"url": c["url"], "inlinks": 0, "crawled": False, "sent_inlinks": None, "sent_site": None})
        if c["inlinks"] > r["inlinks"]:
            r["inlinks"] = c["inlinks"]
            changed.add(c["url"])
    new_site_in = max([site_in] + [c["inlinks"] for c in site_counts])
    for p in pages:
        u = normalize_url(p["url"]) or p["url"]
        r = urls.setdefault(u, {"url": u, "inlinks": 0, "crawled": False, "sent_inlinks": None, "sent_site": None})
        r["crawled"] = True
    candidates = urls.values() if new_site_in != site_in else (urls[u] for u in changed)
    for r in sorted(candidates, key=lambda r: r["url"]):
        if r["crawled"] or r["inlinks"] == 0:
            continue
        if (r["sent_inlinks"], r["sent_site"]) != (r["inlinks"], new_site_in):
            out.candidates.write({"url": r["url"], "inlinks": r["inlinks"], "site_inlinks": new_site_in,
                                  "prev_inlinks": r["sent_inlinks"], "prev_site_inlinks": r["sent_site"]})
            r["sent_inlinks"], r["sent_site"] = r["inlinks"], new_site_in
    if not out.has_state:  # the landmark variant keeps no state
        return
    out.state.write({"url": None, "inlinks": new_site_in, "crawled": False, "sent_inlinks": None, "sent_site": None})
    for u in sorted(urls):
        out.state.write(urls[u])


# ---------------------------------------------------------------- score and threshold (record-wise)
def crawl_score(inlinks, site_inlinks):
    """``inlinks(u) + 0.5 * log2(1 + inlinks(site(u)))``."""
    return inlinks + 0.5 * math.log2(1 + site_inlinks)


def score(key, state, candidates, out):
    """Score a candidate now and as it was last sent."""
    for c in candidates:
        prev = None if c["prev_inlinks"] is None else crawl_score(c["prev_inlinks"], c["prev_site_inlinks"])
        out.scored.write({"url": c["url"], "score": crawl_score(c["inlinks"], c["site_inlinks"]), "prev_score": prev})


def threshold(key, state, scored, out):
    """Queue a URL when its score reaches the threshold (``params.threshold``) for the first time."""
    t = float(out.params.get("threshold", 3.0))
    for s in scored:
        if s["score"] >= t and (s["prev_score"] is None or s["prev_score"] < t):
            out.crawl_queue.write({"url": s["url"], "score": s["score"]})
