"""A home recorded by an older cbp, whose pipeline names the crawl application's functions by their
old dotted paths (``cbp.crawl.<module>:<name>``) and whose translator module imports
``cbp.crawl.links``, still loads and runs now that the application is :mod:`cbp_crawl`: each run's
state equals a from-scratch count."""

from __future__ import annotations

from collections import Counter

import cbp
from cbp_crawl.links import site_of
from cbp_crawl.versions import status_of

OLD = """
pipeline: old_crawl_names
flows:
  pages: {external: true, schema: {url: string, status: int}}
stages:
  by_status:
    translator: MOD:count
    signed: true
    partitions: 2
    inputs: [{flow: pages, route_by: "cbp.crawl.versions:status_of"}]
    state: {schema: {status: int, sites: "list<string>", n: int}}
"""
OLD_MODULE = """
from cbp.crawl.links import site_of


def count(key, state, pages, out):
    prev, pages = next(state, None), list(pages)
    n = sum(r["_diff"] for r in pages) + (prev["n"] if prev else 0)
    sites = sorted(set(prev["sites"] if prev else []) | {site_of(r["url"]) for r in pages if r["_diff"] > 0})
    if n:
        out.state.write({"status": key, "sites": sites, "n": n})
"""


def _from_scratch(pages: list[dict]) -> dict[int, tuple[int, list[str]]]:
    n = Counter(status_of(p) for p in pages)
    sites: dict[int, set[str]] = {}
    for p in pages:
        sites.setdefault(status_of(p), set()).add(site_of(p["url"]))
    return {s: (n[s], sorted(sites[s])) for s in n}


def _state(p: cbp.Pipeline) -> dict[int, tuple[int, list[str]]]:
    return {r["status"]: (r["n"], list(r["sites"])) for r in p.state("by_status")}


def test_a_home_naming_old_crawl_paths_loads_and_runs(spark, make_pipeline, tmp_path):
    yaml = make_pipeline(OLD, OLD_MODULE)
    home = str(tmp_path / "home")
    first = [{"url": f"http://a{i % 3}.example/{i}", "status": 200 if i % 4 else 404} for i in range(12)]
    p = cbp.Pipeline(str(yaml), home)
    p.feed("pages", first)
    p.run()
    assert _state(p) == _from_scratch(first)
    more = [{"url": f"http://b{i % 2}.example/{i}", "status": 200 if i % 3 else 410} for i in range(7)]
    again = cbp.Pipeline(str(yaml), home)  # the home as recorded, names and all
    again.feed("pages", more)
    again.run()
    assert _state(again) == _from_scratch(first + more)
