"""Re-crawl through the pipeline: a corpus that changes between rounds (pages edited, removed, added,
restored; a page fetched twice in one feed), and after every round count_links' in-link counts per
URL and per site equal a from-scratch count over the latest version of each crawled page (gone
pages contribute nothing), the queue's not-yet-crawled URLs equal the from-scratch queue, and the
landmark variant (latest versions, no state) agrees."""

from __future__ import annotations

import math
import os
import random

from conftest import FLOWS

import cbp
from cbp_crawl.crawler import Corpus, Crawler
from cbp_crawl.reference import counts_from_scratch, latest_versions, queue_from_scratch
from cbp_crawl.schedule import Revisits

CRAWL = FLOWS / "crawl_queue.yaml"
LANDMARK = FLOWS / "crawl_queue_landmark.yaml"
H = "web"
N = 24


class Clock:
    def __init__(self) -> None:
        self.t = 1_000_000.0

    def __call__(self) -> float:
        return self.t


def _page(root, i: int, rnd: random.Random, extra: str = "") -> None:
    targets = rnd.sample(range(N + 6), rnd.randint(1, 6))  # some targets do not exist (yet)
    hrefs = "".join(f'<a href="p{t}.html">{t}</a>' for t in targets)
    if rnd.random() < 0.3:
        hrefs += f'<a href="http://other{rnd.randint(0, 2)}.example/x{rnd.randint(0, 3)}.html">out</a>'
    path = root / f"p{i}.html"
    path.write_text(f"<html><body>{hrefs}{extra}</body></html>")
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def _counts_state(p) -> dict:
    return {(r["kind"], r["name"]): r["inlinks"] for r in p.state("count_links")}


def _want(feeds) -> dict:
    url_in, site_in, _ = counts_from_scratch(feeds, feeds=True)
    return {**{("url", u): int(n) for u, n in url_in.items()}, **{("site", s): int(n) for s, n in site_in.items()}}


def _queue(p) -> dict[str, float]:
    """crawl_queue with its retractions summed in: url -> score of what is queued now."""
    signed: dict = {}
    for e in range(1, p.status()["stages"]["threshold"]["epochs"] + 1):
        for q in p.output("crawl_queue", epoch=e):
            signed[(q["url"], q["score"])] = signed.get((q["url"], q["score"]), 0) + q.get("_diff", 1)
    assert all(n in (0, 1) for n in signed.values()), signed
    out = {u: s for (u, s), n in signed.items() if n == 1}
    assert len(out) == sum(1 for n in signed.values() if n == 1)  # one live record per URL
    return out


def _check(p, land, feeds) -> None:
    assert _counts_state(p) == _want(feeds)
    _, crawled = latest_versions(feeds)
    ref = queue_from_scratch(feeds, 2.0, feeds=True)
    got = {u: s for u, s in _queue(p).items() if u not in crawled}
    assert set(got) == set(ref), sorted(set(got) ^ set(ref))[:5]  # queued and not crawled = the from-scratch queue
    e = p.status()["stages"]["threshold"]["epochs"]
    if e > _check.seen.get(id(p), 0):  # what this round queued carries this round's from-scratch score
        for q in p.output("crawl_queue", epoch=e):
            if q.get("_diff", 1) > 0:
                assert math.isclose(q["score"], ref[q["url"]]), q
        _check.seen[id(p)] = e
    current, _ = latest_versions(feeds)
    land.feed("pages", list(current.values()))
    land.run()
    e = land.status()["stages"]["count_links"]["epochs"]
    full = {
        **{("url", r["url"]): r["inlinks"] for r in land.output("url_counts", epoch=e)},
        **{("site", r["site"]): r["inlinks"] for r in land.output("site_counts", epoch=e)},
    }
    assert full == _want(feeds)


_check.seen = {}


def _pipelines(tmp_path, spark):
    flows = tmp_path / "flows"
    flows.mkdir()
    for src in (CRAWL, LANDMARK):
        (flows / src.name).write_text(src.read_text().replace("threshold: 3.0", "threshold: 2.0"))
    (flows / "crawl_queue.py").write_text((FLOWS / "crawl_queue.py").read_text())
    return (
        cbp.load(flows / CRAWL.name, home=str(tmp_path / "home"), spark=spark),
        cbp.load(flows / LANDMARK.name, home=str(tmp_path / "land"), spark=spark),
    )


def test_counts_follow_a_changing_web_round_after_round(spark, tmp_path):
    rnd = random.Random(3)
    root = tmp_path / H
    root.mkdir()
    for i in range(N):
        _page(root, i, rnd)
    p, land = _pipelines(tmp_path, spark)
    clock = Clock()
    c = Crawler(p, [Corpus(root)], max_pages=40, clock=clock, policy=Revisits(revisit_min=10, revisit_max=10))
    feeds: list[list[dict]] = []
    kinds: set[str] = set()

    def round_(seeds=()):
        before = p.feeds("pages")
        rep = c.round(seeds=seeds)
        if p.feeds("pages") > before:
            feeds.append(p.output("pages", epoch=p.feeds("pages")))
        p.run()
        _check(p, land, feeds)
        return rep

    round_([f"http://{H}/p{i}.html" for i in range(0, N, 3)])
    round_()  # queued URLs
    removed = [3, 7, 8]
    for step in range(4):
        clock.t += 10
        if step == 0:  # edits and removals
            for i in (0, 1, 2, 5):
                _page(root, i, rnd, extra=f"<p>edit {step}</p>")
            for i in removed:
                if (root / f"p{i}.html").exists():
                    os.remove(root / f"p{i}.html")
        elif step == 1:  # new pages (linked from an edited one), more edits
            for i in (N, N + 1):
                _page(root, i, rnd)
            (root / "p0.html").write_text(
                f'<html><a href="p{N}.html">a</a><a href="p{N + 1}.html">b</a><a href="p1.html">c</a></html>'
            )
            os.utime(root / "p0.html", ns=(0, 2 * 10**18))
        elif step == 2:  # removed pages restored, with other links
            for i in removed:
                _page(root, i, rnd, extra="<p>back</p>")
        rep = round_()
        kinds |= {k for k, v in rep.counts().items() if v}
    assert {"changed", "gone", "back", "unchanged", "fetched"} <= kinds
    assert any(
        r.get("_diff", 1) < 0
        for e in range(1, p.status()["stages"]["extract_links"]["epochs"] + 1)
        for r in p.output("links", epoch=e)
    )  # links were retracted


def test_versions_fed_directly_twice_in_one_feed_304_stale_and_old_records(spark, tmp_path):
    p, land = _pipelines(tmp_path, spark)
    a, b = "http://s/a.html", "http://s/b.html"
    feeds = [
        [
            {"url": a, "html": '<a href="x.html"><a href="y.html">'},  # an old record: no status, no time
            {"url": b, "status": 200, "html": '<a href="x.html"><a href="z.html">', "fetched": 1.0},
        ],
        [
            {
                "url": b,
                "status": 200,
                "html": '<a href="y.html">',
                "fetched": 2.0,
            },  # fetched twice in one feed: the later wins
            {"url": b, "status": 200, "html": '<a href="w.html">', "fetched": 3.0},
            {"url": a, "status": 304, "html": None, "fetched": 9.0},
        ],  # unchanged: nothing
        [
            {
                "url": b,
                "status": 200,
                "html": '<a href="q.html">',
                "fetched": 2.5,
            },  # stale: older than the stored version
            {"url": a, "status": 410, "html": None, "fetched": 5.0},
        ],  # gone at once
        [{"url": a, "status": 200, "html": '<a href="x.html"><a href="w.html">', "fetched": 6.0}],  # back
    ]
    for f in feeds[:1]:
        p.feed("pages", f)
    p.run()
    _check(p, land, feeds[:1])
    for k in range(1, len(feeds)):
        p.feed("pages", feeds[k])
        p.run()
        _check(p, land, feeds[: k + 1])
    assert _counts_state(p) == {("url", "http://s/x.html"): 1, ("url", "http://s/w.html"): 2, ("site", "http://s"): 3}
