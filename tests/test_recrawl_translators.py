"""The crawl queue's translators on page versions, driven in memory (no Spark, fast): random
sequences of versions (edits, 404/410, 304, stale and repeated records, pages coming back) and,
after every epoch, count_links' state and the queue (retractions summed in) equal the from-scratch
computation over the latest versions. The same translators run on Spark in test_recrawl_pipeline.py."""

from __future__ import annotations

import importlib.util
import math
import random
from typing import Any

import pytest

from cbp.crawl.reference import counts_from_scratch, latest_versions, queue_from_scratch
from cbp.model import Emitter
from conftest import FLOWS

spec = importlib.util.spec_from_file_location("crawl_queue_translators", FLOWS / "crawl_queue.py")
cq = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cq)

# stage -> (translator, [(input flow, route_by)], outputs, stateful); in the YAML's order
STAGES = [
    ("extract_links", cq.extract_links, [("pages", cq.page_url)], ["links"]),
    ("count_links", cq.count_links, [("links", cq.url_and_site)], ["url_counts", "site_counts"]),
    ("merge", cq.merge, [("url_counts", cq.site_of_url), ("site_counts", lambda r: r["site"]), ("pages", cq.site_of_url)], ["candidates"]),
    ("score", cq.score, [("candidates", None)], ["scored"]),
    ("threshold", cq.threshold, [("scored", lambda r: r["url"])], ["crawl_queue"]),
]


def _keys(route, rec) -> list[Any]:
    k = route(rec)
    if isinstance(k, list) and k and isinstance(k[0], list):
        return [tuple(x) for x in k]
    return [tuple(k) if isinstance(k, list) else k]


class Memory:
    """The pipeline in memory: each stage one epoch per step, state per key, flows as per-epoch lists."""

    def __init__(self, stateful: bool = True, threshold: float = 2.0) -> None:
        self.state: dict[str, dict[Any, list[dict]]] = {s[0]: {} for s in STAGES}
        self.stateful, self.t = stateful, threshold
        self.queue: dict[tuple[str, float], int] = {}

    def step(self, pages: list[dict]) -> list[dict]:
        flows: dict[str, list[dict]] = {"pages": pages}
        for name, fn, inputs, outputs in STAGES:
            written: dict[str, list[dict]] = {o: [] for o in outputs}
            groups: dict[Any, list[list[dict]]] = {}
            for i, (flow, route) in enumerate(inputs):
                for n, rec in enumerate(flows.get(flow, [])):
                    for k in (_keys(route, rec) if route else [("rec", n)]):
                        groups.setdefault(k, [[] for _ in inputs])[i].append({"_diff": 1, **rec})
            keep = self.stateful and name not in ("score",)
            for k in sorted(groups, key=repr):
                new_state: list[dict] = []

                def sink(flow, rec, new_state=new_state):
                    (new_state if flow == "state" else written[flow]).append(dict(rec))

                out = Emitter(name, 1, {"threshold": self.t}, outputs, keep, sink)
                key = list(k) if isinstance(k, tuple) else k
                fn(key, iter(self.state[name].get(k, [])), *[iter(g) for g in groups[k]], out)
                if keep:
                    if new_state:
                        self.state[name][k] = new_state
                    else:
                        self.state[name].pop(k, None)
            flows.update(written)
        for q in flows["crawl_queue"]:
            self.queue[(q["url"], q["score"])] = self.queue.get((q["url"], q["score"]), 0) + q.get("_diff", 1)
        return flows["crawl_queue"]

    def counts(self) -> dict:
        return {(r["kind"], r["name"]): r["inlinks"] for rows in self.state["count_links"].values() for r in rows}


def _random_version(rnd: random.Random, url: str, t: float) -> dict:
    r = rnd.random()
    if r < 0.12:
        return {"url": url, "status": rnd.choice([404, 410]), "html": None, "fetched": t}
    if r < 0.2:
        return {"url": url, "status": 304, "html": None, "fetched": t}
    links = "".join(f'<a href="http://{rnd.choice("ab")}/{rnd.randint(0, 14)}">x</a>' for _ in range(rnd.randint(0, 6)))
    rec = {"url": url, "html": links, "fetched": t}
    if rnd.random() < 0.5:
        rec["status"] = 200
    return rec


@pytest.mark.parametrize("seed", range(6))
def test_counts_and_queue_equal_from_scratch_after_every_epoch(seed):
    rnd = random.Random(seed)
    mem = Memory()
    feeds: list[list[dict]] = []
    t = 0.0
    urls = [f"http://{s}/{i}" for s in "ab" for i in range(8)]
    for _ in range(25):
        feed = []
        for _ in range(rnd.randint(1, 7)):
            t += 1
            u = rnd.choice(urls)
            ft = t - rnd.choice([0, 0, 0, 5, 30])  # some stale
            feed.append(_random_version(rnd, u, ft))
        if rnd.random() < 0.3:  # one page twice in the feed
            feed.append(_random_version(rnd, feed[0]["url"], t + 0.5))
        rnd.shuffle(feed)
        feeds.append(feed)
        queued = mem.step(feed)
        url_in, site_in, _ = counts_from_scratch(feeds, feeds=True)
        want = {**{("url", u): int(n) for u, n in url_in.items()}, **{("site", s): int(n) for s, n in site_in.items()}}
        assert mem.counts() == want
        assert all(n in (0, 1) for n in mem.queue.values())
        _, crawled = latest_versions(feeds)
        got = {u for (u, s), n in mem.queue.items() if n == 1 and u not in crawled}
        ref = queue_from_scratch(feeds, 2.0, feeds=True)
        assert got == set(ref)  # queued and not crawled = the from-scratch queue
        for q in queued:  # a URL queued in this epoch carries the from-scratch score of this epoch
            if q.get("_diff", 1) > 0:
                assert math.isclose(q["score"], ref[q["url"]])


def test_a_consolidated_epoch_is_read_the_same():
    """Records equal but for _diff arrive summed (a retraction among them): _diff n counts n times."""
    out: list = []
    e = Emitter("count_links", 1, {}, ["url_counts", "site_counts"], True, lambda f, r: out.append((f, r)))
    cq.count_links(["url", "http://a/x"], iter([{"kind": "url", "name": "http://a/x", "inlinks": 5}]),
                   iter([{"src": "s", "dst": "http://a/x", "_diff": -3}, {"src": "t", "dst": "http://a/x", "_diff": 2}]), e)
    assert out == [("state", {"kind": "url", "name": "http://a/x", "inlinks": 4}), ("url_counts", {"url": "http://a/x", "inlinks": 4, "change": -1})]
