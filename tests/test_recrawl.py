"""Re-crawl, the crawler's side (no Spark): revisits on an adaptive schedule driven by a clock the
test gives, conditional fetches, gone pages, suspected outages, priority and politeness, pages
changing while they are read, and an older crawler state resumed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from conftest import FLOWS, ROOT

import cbp
import cbp_crawl.fetch as fetch_mod
from cbp.errors import UsageError
from cbp_crawl.crawler import Corpus, Crawler
from cbp_crawl.schedule import Revisits, pick

CRAWL = FLOWS / "crawl_queue.yaml"
H = "site"


class Clock:
    """Time the test moves by hand (no sleeping)."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _write(root, name: str, html: str) -> None:
    path = os.path.join(root, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        fh.write(html)
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))  # a new Last-Modified even on a coarse clock


@pytest.fixture
def web(tmp_path):
    root = tmp_path / H
    root.mkdir()
    for i in range(4):
        _write(root, f"p{i}.html", f'<html><a href="p{(i + 1) % 4}.html">next</a> v1 of p{i}</html>')
    clock = Clock()
    p = cbp.load(CRAWL, home=str(tmp_path / "home"))
    return root, p, clock


def _crawler(p, root, clock, **pol):
    return Crawler(
        p, [Corpus(root)], max_pages=10, clock=clock, policy=Revisits(revisit_min=100, revisit_max=1000, **pol)
    )


def _seed_all(c, n=4):
    return c.round(seeds=[f"http://{H}/p{i}.html" for i in range(n)])


def _last_feed(p):
    return p.output("pages", epoch=p.feeds("pages"))


def test_revisits_adapt_and_land_only_what_changed(web):
    root, p, clock = web
    c = _crawler(p, root, clock)
    rep = _seed_all(c)
    assert sorted(rep.fetched) == [f"http://{H}/p{i}.html" for i in range(4)]
    first = _last_feed(p)
    assert {r["status"] for r in first} == {200} and all(r["digest"] and r["fetched"] == clock.t for r in first)
    assert c.round().picked == []  # nothing due yet
    clock.t += 100
    feeds = p.feeds("pages")
    rep = c.round()
    assert len(rep.revisited) == 4 and len(rep.unchanged) == 4 and not rep.landed
    assert p.feeds("pages") == feeds  # unchanged pages land nothing: no increment, no epoch
    pages = c.state()["pages"]
    assert {e["interval"] for e in pages.values()} == {150.0}  # lengthened (x1.5)
    _write(root, "p1.html", '<html><a href="p3.html">new link</a> v2</html>')  # edited
    os.remove(root / "p2.html")  # removed
    clock.t += 150
    rep = c.round()
    assert rep.changed == [f"http://{H}/p1.html"] and rep.gone == [f"http://{H}/p2.html"] and len(rep.unchanged) == 2
    got = {r["url"]: r for r in _last_feed(p)}
    assert got[f"http://{H}/p1.html"]["status"] == 200 and "v2" in got[f"http://{H}/p1.html"]["html"]
    assert got[f"http://{H}/p2.html"]["status"] == 404 and got[f"http://{H}/p2.html"]["html"] is None
    pages = c.state()["pages"]
    assert pages[f"http://{H}/p1.html"]["interval"] == 100.0  # shortened (x0.5, not below revisit_min)
    assert pages[f"http://{H}/p0.html"]["interval"] == 225.0
    _write(root, "p2.html", '<html><a href="p0.html">back</a></html>')  # restored
    clock.t += 1000
    rep = c.round()
    assert (
        rep.back == [f"http://{H}/p2.html"]
        and {r["url"]: r["status"] for r in _last_feed(p)}[f"http://{H}/p2.html"] == 200
    )
    assert max(e["interval"] for e in c.state()["pages"].values()) <= 1000  # never beyond revisit_max


def test_conditional_fetch_reads_nothing_when_the_stamp_is_the_same(web):
    root, _, _ = web
    corpus = Corpus(root)
    f = corpus.fetch(f"http://{H}/p0.html")
    path = root / "p0.html"
    st = os.stat(path)
    with open(path, "r+") as fh:  # same size, same inode, and the old mtime put back: the stamp cannot tell
        fh.write("<html>XX")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    again = corpus.fetch(f"http://{H}/p0.html", unless=f.stamp)
    assert again.not_modified and again.html is None and again.digest is None  # not read at all
    assert corpus.fetch(f"http://{H}/p0.html").digest != f.digest  # an unconditional fetch reads the new bytes


def test_same_digest_after_a_touch_is_unchanged(web):
    root, p, clock = web
    c = _crawler(p, root, clock)
    _seed_all(c)
    os.utime(root / "p0.html", ns=(0, 10**18))  # a new Last-Modified, the same bytes
    clock.t += 100
    rep = c.round()
    assert f"http://{H}/p0.html" in rep.unchanged and not rep.landed  # the digest decides, not the fetch


def test_gone_after_two_misses(web):
    root, p, clock = web
    c = _crawler(p, root, clock, gone_after=2)
    _seed_all(c)
    os.remove(root / "p0.html")
    clock.t += 100
    rep = c.round()
    assert rep.gone == [] and f"http://{H}/p0.html" in rep.revisited
    clock.t += 100
    rep = c.round()
    assert rep.gone == [f"http://{H}/p0.html"]
    assert c.state()["pages"][f"http://{H}/p0.html"]["status"] == 404


def test_a_host_whose_pages_all_vanish_is_held_back_not_purged(web):
    root, p, clock = web
    c = _crawler(p, root, clock, outage_rounds=2)
    _seed_all(c)
    hidden = root.parent / "hidden"
    os.rename(root, hidden)
    root.mkdir()  # the server answers, with nothing
    for _ in range(2):
        clock.t += 1000
        rep = c.round()
        assert len(rep.held) == 4 and rep.gone == [] and not rep.landed
    assert all(e["status"] == 200 for e in c.state()["pages"].values())
    clock.t += 1000
    rep = c.round()  # still all gone after outage_rounds: they are gone
    assert len(rep.gone) == 4 and {r["status"] for r in _last_feed(p)} == {404}
    os.rmdir(root)
    os.rename(hidden, root)
    clock.t += 5000
    rep = c.round()
    assert len(rep.back) == 4


def test_priority_and_per_host_limit():
    pol = Revisits(max_per_host=2)
    picks, rv = pick(
        [], ["http://a/1", "http://a/2", "http://a/3", "http://b/1"], ["http://a/9", "http://c/1"], 10, pol
    )
    assert picks == ["http://a/1", "http://a/2", "http://b/1", "http://c/1"] and rv == [
        "http://a/1",
        "http://a/2",
        "http://b/1",
    ]
    assert pick([], [], ["n1", "n2", "n3"], 2, Revisits())[0] == ["n1", "n2"]  # no revisits: new URLs take all
    assert pick([], ["r1", "r2", "r3"], [], 2, Revisits())[0] == ["r1", "r2"]  # no new URLs: revisits take all
    for bad in (
        {"revisit_min": 10, "revisit_max": 5},
        {"revisit_min": 0},
        {"gone_after": 0},
        {"max_per_host": 0},
        {"revisit_max": float("inf")},
    ):
        with pytest.raises(UsageError) as e:
            Revisits(**bad)
        assert e.value.code == "bad-option"


def test_due_revisits_share_max_pages_with_new_urls(web):
    root, p, clock = web
    for i in range(4, 10):
        _write(root, f"p{i}.html", "<html>more</html>")
    c = Crawler(p, [Corpus(root)], max_pages=4, clock=clock, policy=Revisits(revisit_min=100, revisit_max=1000))
    _seed_all(c)
    st = c.state()
    st["frontier"] = {f"http://{H}/p{i}.html": 5.0 - i / 10 for i in range(4, 10)}  # as if queued
    p.home.write_json("_crawler/state.json", st)
    clock.t += 100
    rep = c.round()
    assert len(rep.revisited) == 2 and rep.fetched == [f"http://{H}/p4.html", f"http://{H}/p5.html"]


def test_a_page_rewritten_while_read_is_read_again_never_half(web, monkeypatch):
    root, _, _ = web
    corpus = Corpus(root)
    path = root / "p0.html"
    real = os.fdopen
    calls = {"n": 0}

    class Racing:
        def __init__(self, fh, replace):
            self.fh, self.replace = fh, replace

        def __enter__(self):
            return self

        def __exit__(self, *a):
            self.fh.close()

        def read(self, n):
            half = self.fh.read(10)
            if self.replace:  # a new file renamed over the name while the old one is read
                _write(root, ".new", "<html>v2, replaced</html>")
                os.replace(root / ".new", path)
            else:  # the same file rewritten in place
                with open(path, "a") as fh:
                    fh.write(" appended")
            return half + self.fh.read(n)

    for replace in (False, True):
        calls["n"] = 0

        def racing(fd, *a, _replace=replace, **k):
            calls["n"] += 1
            fh = real(fd, *a, **k)
            return Racing(fh, _replace) if calls["n"] == 1 else fh

        monkeypatch.setattr(fetch_mod.os, "fdopen", racing)
        f = corpus.fetch(f"http://{H}/p0.html")
        monkeypatch.setattr(fetch_mod.os, "fdopen", real)
        assert calls["n"] == 2 and f.html == path.read_text()  # read again, whole
    always = lambda fd, *a, **k: Racing(real(fd, *a, **k), False)  # noqa: E731
    monkeypatch.setattr(fetch_mod.os, "fdopen", always)
    assert corpus.fetch(f"http://{H}/p0.html").reason == "unreadable: changing while read"


def test_a_changed_page_cannot_lead_out_of_the_corpus(web, tmp_path):
    root, p, clock = web
    c = _crawler(p, root, clock)
    _seed_all(c)
    secret = tmp_path / "secret.html"
    secret.write_text("<html>SECRET</html>")
    os.remove(root / "p0.html")
    os.symlink(secret, root / "p0.html")  # the page now points out of the corpus
    clock.t += 100
    rep = c.round()
    assert rep.gone == [f"http://{H}/p0.html"]
    assert not any(
        "SECRET" in (r.get("html") or "") for e in range(1, p.feeds("pages") + 1) for r in p.output("pages", epoch=e)
    )


def test_an_older_crawler_state_is_resumed_with_a_schedule(web):
    root, p, clock = web
    old = {
        "round": 1,
        "cursor": 0,
        "frontier": {f"http://{H}/p3.html": 4.0},
        "fetched": [f"http://{H}/p0.html"],
        "failed": {},
        "doing": None,
        "rounds": [
            {
                "round": 1,
                "cursor": 0,
                "queued": 0,
                "picked": 1,
                "landed": 1,
                "failed": 0,
                "frontier": 1,
                "feed": 1,
                "at": "2026-01-01T00:00:00",
            }
        ],
    }
    p.feed(
        "pages", [{"url": f"http://{H}/p0.html", "html": "<html>old</html>"}], feed_id="crawl:1"
    )  # an old record: no status
    p.home.write_json("_crawler/state.json", old)
    c = _crawler(p, root, clock)
    st = c.state()
    assert st["pages"][f"http://{H}/p0.html"]["next"] == clock.t  # due now
    rep = c.round()
    assert rep.round == 2 and rep.changed == [f"http://{H}/p0.html"] and rep.fetched == [f"http://{H}/p3.html"]
    st["pages"][f"http://{H}/p0.html"]["interval"] = -1
    p.home.write_json("_crawler/state.json", st)
    with pytest.raises(cbp.errors.RuntimeStateError) as e:
        c.state()
    assert e.value.code == "bad-crawler-state"


def test_a_round_killed_after_landing_keeps_the_schedule_of_what_landed(web):
    root, p, clock = web
    c = _crawler(p, root, clock)
    _seed_all(c)
    clock.t += 100
    _write(root, "p0.html", "<html>v2</html>")
    st = c.state()
    # the killed try planned the revisits, landed v2 and died before saving
    st["doing"] = {
        "round": 2,
        "cursor": 0,
        "picks": sorted(st["pages"]),
        "queued": 0,
        "frontier": {},
        "revisits": sorted(st["pages"]),
        "now": clock.t,
        "feeds": p.feeds("pages"),
        "retracted": 0,
    }
    p.home.write_json("_crawler/state.json", st)
    v2 = Corpus(root).fetch(f"http://{H}/p0.html")
    p.feed(
        "pages",
        [{"url": v2.url, "status": 200, "html": v2.html, "digest": v2.digest, "fetched": clock.t}],
        feed_id="crawl:2",
    )
    _write(root, "p0.html", "<html>v3</html>")  # changed again before the redo
    feeds = p.feeds("pages")
    rep = c.round()
    assert rep.redone and p.feeds("pages") == feeds  # lands once
    assert (
        c.state()["pages"][f"http://{H}/p0.html"]["digest"] == v2.digest
    )  # what landed, so v3 is seen as a change next time
    clock.t += 1000
    assert c.round().changed == [f"http://{H}/p0.html"]


def test_cli_revisits_and_stats(web, tmp_path):
    root, _, _ = web
    home = tmp_path / "clihome"
    base = [sys.executable, "-m", "cbp.cli", "crawl", str(CRAWL), "--home", str(home), "--corpus", str(root)]
    r = subprocess.run(
        base + ["--seed", f"http://{H}/p0.html", "--revisit-min", "60", "--revisit-max", "600", "--freshness"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    png = tmp_path / "s.png"
    r = subprocess.run(
        base + ["--stats", "--stats-json", "--stats-png", str(png)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout[: r.stdout.rindex("}") + 1])
    assert rep["pages_by_status"] == {"200": 1} and rep["freshness"] == 1.0 and rep["rounds"][0]["fetched"] == 1
    assert rep["interval_quantiles_s"]["max"] == 60.0 and png.stat().st_size > 1000
    bad = subprocess.run(
        base + ["--revisit-min", "10", "--revisit-max", "5"], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert bad.returncode == 2 and "[bad-option]" in bad.stderr


def test_a_url_the_queue_takes_back_leaves_the_frontier(web, monkeypatch):
    root, p, clock = web
    c = Crawler(p, [Corpus(root)], max_pages=1, clock=clock, policy=Revisits(revisit_min=100, revisit_max=1000))
    batches = iter(
        [
            (
                [
                    {"url": f"http://{H}/p1.html", "score": 5.0},
                    {"url": f"http://{H}/p2.html", "score": 4.0},
                    {"url": f"http://{H}/p3.html", "score": 3.5},
                    {"url": "http://elsewhere.example/x", "score": 9.0},
                ],
                1,
            ),
            ([{"url": f"http://{H}/p2.html", "score": 4.0, "_diff": -1}], 2),
        ]
    )
    monkeypatch.setattr(c, "new_queue_records", lambda cursor: next(batches, ([], 2)))
    rep = c.round()
    assert rep.picked == [f"http://{H}/p1.html"] and rep.failed == {
        "http://elsewhere.example/x": "outside the corpus"
    }  # no pick used
    rep = c.round()
    assert rep.retracted == 1 and rep.picked == [f"http://{H}/p3.html"] and c.state()["frontier"] == {}
