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
from conftest import FLOWS, ROOT

from cbp.model import Emitter
from cbp_crawl.reference import counts_from_scratch, latest_versions, queue_from_scratch


def _module(name: str, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


cq = _module("crawl_queue_translators", FLOWS / "crawl_queue.py")
# the translators before merge kept keyed rows (merge's state a list per site, re-sent whole on a site change)
before = _module("crawl_queue_before", ROOT / "bench" / "crawl_before" / "crawl_queue_before.py")


def stages(m) -> list:
    """stage -> (translator, [(input flow, route_by)], outputs); in the YAML's order."""
    return [
        ("extract_links", m.extract_links, [("pages", m.page_url)], ["links"]),
        ("count_links", m.count_links, [("links", m.url_and_site)], ["url_counts", "site_counts"]),
        (
            "merge",
            m.merge,
            [("url_counts", m.site_of_url), ("site_counts", lambda r: r["site"]), ("pages", m.site_of_url)],
            ["candidates"],
        ),
        ("score", m.score, [("candidates", None)], ["scored"]),
        ("threshold", m.threshold, [("scored", lambda r: r["url"])], ["crawl_queue"]),
    ]


def _keys(route, rec) -> list[Any]:
    k = route(rec)
    if isinstance(k, list) and k and isinstance(k[0], list):
        return [tuple(x) for x in k]
    return [tuple(k) if isinstance(k, list) else k]


KEYED = {"merge": "url"}  # stages whose state has keyed rows (row_key), as in crawl_queue.yaml


class KeyedMemory:
    """A key's keyed rows in memory: ``state`` (get, get_many, iteration) and ``out.state`` (write, delete).
    Reads see the rows as they were before the call; ``read`` counts the rows handed out."""

    def __init__(self, rows: dict[str, dict], field: str) -> None:
        self.rows, self.field, self.new, self.read, self._it = rows, field, dict(rows), 0, None

    def get(self, rk, default=None):
        got = self.get_many([rk])
        return got.get(rk, default)

    def get_many(self, rks) -> dict:
        found = {rk: dict(self.rows[rk]) for rk in set(rks) if rk in self.rows}
        self.read += len(found)
        return found

    def __iter__(self):
        for rk in sorted(self.rows):
            self.read += 1
            yield dict(self.rows[rk])

    def __next__(self):
        self._it = self._it or iter(self)
        return next(self._it)

    def write(self, rec: dict) -> None:
        self.new[rec[self.field]] = dict(rec)

    def delete(self, rk) -> None:
        self.new.pop(rk, None)


class Memory:
    """The pipeline in memory: each stage one epoch per step, state per key, flows as per-epoch lists."""

    def __init__(self, stateful: bool = True, threshold: float = 2.0, module=cq) -> None:
        self.stages = stages(module)
        self.keyed = KEYED if module is cq else {}
        self.state: dict[str, dict[Any, list[dict]]] = {s[0]: {} for s in self.stages}
        self.stateful, self.t = stateful, threshold
        self.queue: dict[tuple[str, float], int] = {}
        self.rows_read: dict[str, dict[Any, int]] = {}  # keyed rows read in the last step, per stage and key

    def step(self, pages: list[dict]) -> list[dict]:
        flows: dict[str, list[dict]] = {"pages": pages}
        for name, fn, inputs, outputs in self.stages:
            written: dict[str, list[dict]] = {o: [] for o in outputs}
            groups: dict[Any, list[list[dict]]] = {}
            for i, (flow, route) in enumerate(inputs):
                for n, rec in enumerate(flows.get(flow, [])):
                    for k in _keys(route, rec) if route else [("rec", n)]:
                        groups.setdefault(k, [[] for _ in inputs])[i].append({"_diff": 1, **rec})
            keep = self.stateful and name not in ("score",)
            self.rows_read[name] = {}
            for k in sorted(groups, key=repr):
                new_state: list[dict] = []

                def sink(flow, rec, new_state=new_state, written=written):
                    (new_state if flow == "state" else written[flow]).append(dict(rec))

                out = Emitter(name, 1, {"threshold": self.t}, outputs, keep, sink)
                key = list(k) if isinstance(k, tuple) else k
                if keep and name in self.keyed:
                    st = KeyedMemory(self.state[name].get(k, {}), self.keyed[name])
                    out.__dict__["state"] = st
                    fn(key, st, *[iter(g) for g in groups[k]], out)
                    self.rows_read[name][k] = st.read
                    if st.new:
                        self.state[name][k] = st.new
                    else:
                        self.state[name].pop(k, None)
                    continue
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


def _random_feed(rnd: random.Random, urls: list[str], t: float) -> tuple[list[dict], float]:
    feed = []
    for _ in range(rnd.randint(1, 7)):
        t += 1
        u = rnd.choice(urls)
        ft = t - rnd.choice([0, 0, 0, 5, 30])  # some stale
        feed.append(_random_version(rnd, u, ft))
    if rnd.random() < 0.3:  # one page twice in the feed
        feed.append(_random_version(rnd, feed[0]["url"], t + 0.5))
    rnd.shuffle(feed)
    return feed, t


@pytest.mark.parametrize("seed,threshold", [(s, 2.0) for s in range(6)] + [(s, 3.0) for s in range(6, 9)] + [(9, 4.5)])
def test_counts_and_queue_equal_from_scratch_after_every_epoch(seed, threshold):
    """Also: the queue records of every epoch equal those of the translators before keyed rows
    (merge re-sending a site's every URL when the site's count changed)."""
    rnd = random.Random(seed)
    mem, old = Memory(threshold=threshold), Memory(threshold=threshold, module=before)
    feeds: list[list[dict]] = []
    t = 0.0
    urls = [f"http://{s}/{i}" for s in "ab" for i in range(8)]
    for _ in range(25):
        feed, t = _random_feed(rnd, urls, t)
        feeds.append(feed)
        queued = mem.step(feed)
        assert sorted(queued, key=repr) == sorted(old.step(feed), key=repr)
        url_in, site_in, _ = counts_from_scratch(feeds, feeds=True)
        want = {**{("url", u): int(n) for u, n in url_in.items()}, **{("site", s): int(n) for s, n in site_in.items()}}
        assert mem.counts() == want
        assert all(n in (0, 1) for n in mem.queue.values())
        _, crawled = latest_versions(feeds)
        got = {u for (u, s), n in mem.queue.items() if n == 1 and u not in crawled}
        ref = queue_from_scratch(feeds, threshold, feeds=True)
        assert got == set(ref)  # queued and not crawled = the from-scratch queue
        for q in queued:  # a URL queued in this epoch carries the from-scratch score of this epoch
            if q.get("_diff", 1) > 0:
                assert math.isclose(q["score"], ref[q["url"]])


def test_a_link_to_a_big_site_reads_a_bounded_number_of_its_rows():
    """A site of 3,000 URLs (each linked once): a page linking to one of them and to a new one makes
    merge read the site's row and those two URLs' rows, not the site's 3,000; the queue stays the
    from-scratch queue and what the translators before keyed rows queued."""
    mem, old = Memory(threshold=3.0), Memory(threshold=3.0, module=before)
    hub = [
        {"url": f"http://hub/{i}", "html": "".join(f'<a href="http://big/{j}">' for j in range(i * 500, i * 500 + 500))}
        for i in range(6)
    ]
    small = [{"url": "http://hub/s", "html": '<a href="http://small/1"><a href="http://small/2">'}]
    feeds = [hub, small]
    for f in feeds:
        assert sorted(mem.step(f), key=repr) == sorted(old.step(f), key=repr)
    assert len(mem.state["merge"]["http://big"]) == 3001  # the site's row and a row per URL
    assert set(mem.rows_read["merge"].values()) == {0}  # new sites and URLs: nothing stored
    for f in (
        [{"url": "http://x/1", "html": '<a href="http://big/7"><a href="http://big/new"><a href="http://small/1">'}],
        [{"url": "http://x/2", "html": '<a href="http://big/7"><a href="http://big/8"><a href="http://big/new">'}],
        [{"url": "http://big/7", "html": ""}, {"url": "http://x/1", "status": 404, "html": None, "fetched": 9.0}],
    ):
        feeds.append(f)
        queued = mem.step(f)
        assert sorted(queued, key=repr) == sorted(old.step(f), key=repr)
        assert mem.rows_read["merge"]["http://big"] <= 4  # the site's row and those of its 1-3 URLs of the epoch
        _, crawled = latest_versions(feeds)
        got = {u for (u, s), n in mem.queue.items() if n == 1 and u not in crawled}
        assert got == set(queue_from_scratch(feeds, 3.0, feeds=True))
    assert {q["url"] for q in mem.step([])} == set()


def test_a_consolidated_epoch_is_read_the_same():
    """Records equal but for _diff arrive summed (a retraction among them): _diff n counts n times."""
    out: list = []
    e = Emitter("count_links", 1, {}, ["url_counts", "site_counts"], True, lambda f, r: out.append((f, r)))
    cq.count_links(
        ["url", "http://a/x"],
        iter([{"kind": "url", "name": "http://a/x", "inlinks": 5}]),
        iter([{"src": "s", "dst": "http://a/x", "_diff": -3}, {"src": "t", "dst": "http://a/x", "_diff": 2}]),
        e,
    )
    assert out == [
        ("state", {"kind": "url", "name": "http://a/x", "inlinks": 4}),
        ("url_counts", {"url": "http://a/x", "inlinks": 4, "change": -1}),
    ]
