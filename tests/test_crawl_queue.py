"""The crawl queue of paper 001 Fig. 1 (flows/crawl_queue.yaml), its crawler and its link rules.

After every crawl round the queue must equal the from-scratch computation (pandas) over the
pages crawled so far; bad pages of every kind are crawled without failing an epoch.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys

import pytest
from conftest import FLOWS, ROOT
from crawl_site import BAD_PAGES, HOST, huge_page, make_site

import cbp
from cbp.errors import UsageError
from cbp_crawl.crawler import Corpus, Crawler, decode_html
from cbp_crawl.links import normalize_url, page_links, site_of
from cbp_crawl.reference import counts_from_scratch, latest_versions, queue_from_scratch

CRAWL = FLOWS / "crawl_queue.yaml"
LANDMARK = FLOWS / "crawl_queue_landmark.yaml"


# ---------------------------------------------------------------- link rules, one test per bad kind
def test_links_of_invalid_html_are_found_as_a_browser_would():
    data, _ = BAD_PAGES["bad/markup.html"]
    got = page_links(f"http://{HOST}/bad/markup.html", decode_html(data))
    assert got[:2] == [f"http://{HOST}/p1.html", f"http://{HOST}/bad/p2.html"]
    assert f"http://{HOST}/p4.html" in got or f"http://{HOST}/bad/p3.html" in got  # the tag soup still yields links


def test_non_utf8_page_is_decoded_by_its_meta_charset():
    data, _ = BAD_PAGES["bad/latin1.html"]
    text = decode_html(data)
    assert "café" in text and "\ufffd" not in text[:-3]
    assert page_links(f"http://{HOST}/bad/latin1.html", text) == [
        f"http://{HOST}/p6.html",
        f"http://{HOST}/r%C3%A9sum%C3%A9.html",
    ]


def test_binary_junk_and_nul_bytes_do_not_stop_the_parser():
    data, _ = BAD_PAGES["bad/binary.html"]
    assert page_links(f"http://{HOST}/bad/binary.html", decode_html(data)) == [f"http://{HOST}/p7.html"]


def test_empty_page_has_no_links():
    assert page_links(f"http://{HOST}/bad/empty.html", decode_html(b"")) == []
    assert page_links(f"http://{HOST}/x", "   ") == []


def test_huge_page_is_parsed_up_to_the_limit():
    text = decode_html(huge_page(20_000))
    assert len(page_links(f"http://{HOST}/huge.html", text)) == 50
    cut = page_links(f"http://{HOST}/huge.html", text, max_chars=2_000)
    assert 0 < len(cut) < 50


def test_odd_schemes_and_malformed_urls_are_dropped_and_the_rest_normalized():
    data, _ = BAD_PAGES["bad/odd.html"]
    got = page_links(f"http://{HOST}/bad/odd.html", decode_html(data))
    # "http:///nohost" is http://nohost/ to a browser (WHATWG URL Standard), and so to cbp
    assert got == [
        "http://nohost/",
        f"http://{HOST}/p8.html",
        f"http://{HOST}/p9.html",
        "http://ext0.example/Index.html",
        f"http://{HOST}/p1.html?a=1&b=%41",
    ]


def test_url_rules():
    assert normalize_url("HTTPS://Ex.ORG:443/a/../b?x#f") == "https://ex.org/b?x"
    assert normalize_url("http://ex.org:8080") == "http://ex.org:8080/"
    assert normalize_url("http://user:pw@Ex.org/") == "http://ex.org/"
    assert normalize_url("http://[2001:DB8::1]/x") == "http://[2001:db8::1]/x"
    for bad in ["ftp://x/", "mailto:a@b", "http://", "http://a b/", "http://h:0x50/", "//x", "x.html", "http://[::1"]:
        assert normalize_url(bad) is None, bad
    assert site_of("http://ex.org:8080/a?b") == "http://ex.org:8080" and site_of("nonsense") == ""
    assert page_links(
        "http://h/a", '<a href="a">self</a><a href="http://h/a#x">self</a><a href="b">b</a><a href="b">b</a>'
    ) == ["http://h/b"]


def test_reference_on_a_hand_computed_example():
    pages = [
        {"url": "http://a/", "html": '<a href="x">1</a><a href="x#2">2</a><a href="y">3</a><a href="http://b/z">'},
        {"url": "http://a/y", "html": '<a href="x"><a href="http://b/z">'},
        {"url": "http://b/w", "html": '<a href="z">'},
    ]
    url_in, site_in, crawled = counts_from_scratch(pages)
    assert dict(url_in) == {"http://a/x": 2, "http://a/y": 1, "http://b/z": 3}
    assert dict(site_in) == {"http://a": 3, "http://b": 3}
    assert crawled == {"http://a/", "http://a/y", "http://b/w"}
    assert queue_from_scratch(pages, 3.0) == {"http://a/x": 3.0, "http://b/z": 4.0}
    assert queue_from_scratch(pages, 3.5) == {"http://b/z": 4.0}


# ---------------------------------------------------------------- the crawler
@pytest.fixture
def site(tmp_path):
    seed = make_site(str(tmp_path))
    return tmp_path / HOST, seed


def test_corpus_fetch_rules(site):
    root, _ = site
    c = Corpus(root)
    assert c.host == HOST and c.url_of(root / "dir" / "index.html") == f"http://{HOST}/dir/index.html"
    assert c.fetch(f"http://{HOST}/p0.html").html.startswith("<!DOCTYPE html>")
    assert "../p0.html" in c.fetch(f"http://{HOST}/dir/").html  # a directory is its index.html
    assert c.fetch(f"http://{HOST}/data.bin").reason == "not HTML"
    assert c.fetch(f"http://{HOST}/missing.html").reason == "not found"
    assert c.fetch(f"http://{HOST}/escape.html").reason == "outside the corpus"  # a symlink out of the corpus
    assert c.fetch(f"http://{HOST}/%2e%2e/outside.html").reason == "outside the corpus"
    assert c.fetch("http://other.example/p0.html").reason == "outside the corpus"
    big = c.fetch(f"http://{HOST}/huge.html", max_bytes=1000)
    assert big.truncated and len(big.html) == 1000
    with pytest.raises(UsageError, match="does not exist"):
        Corpus(root / "nope")
    for host in ("a/b", "x y", "a..b", "-a", "a:80", "h\n", "ü"):  # pages of such a corpus would be at no URL of it
        with pytest.raises(UsageError) as e:
            Corpus(root, host)
        assert e.value.code == "bad-host"
    assert Corpus(root, "Ext0.Example").host == "ext0.example"


def test_crawler_round_killed_half_way_is_redone_identically_and_lands_once(site, tmp_path):
    root, seed = site
    p = cbp.load(CRAWL, home=str(tmp_path / "home"))
    c = Crawler(p, [Corpus(root)], max_pages=5)
    c.round(seeds=[seed])
    st = c.state()
    # a round that wrote its intention, landed its pages, and died before recording that it did
    st["doing"] = {
        "round": 2,
        "cursor": 0,
        "picks": [f"http://{HOST}/p0.html", f"http://{HOST}/p1.html", "http://ext0.example/x"],
        "queued": 0,
        "frontier": {f"http://{HOST}/p2.html": 4.0},
    }
    p.home.write_json("_crawler/state.json", st)
    p.feed("pages", [{"url": u, "html": c.fetch(u).html} for u in st["doing"]["picks"][:2]], feed_id="crawl:2")
    rep = c.round()
    assert rep.redone and rep.round == 2 and rep.landed == st["doing"]["picks"][:2]
    assert rep.failed == {"http://ext0.example/x": "outside the corpus"}
    assert p.status()["stages"]["extract_links"]["connectors"]["pages"]["pending"] == 2  # feed 2 landed once
    after = c.state()
    assert after["doing"] is None and after["round"] == 2 and after["frontier"] == {f"http://{HOST}/p2.html": 4.0}
    rep3 = c.round()
    assert rep3.round == 3 and rep3.picked == [f"http://{HOST}/p2.html"]
    with pytest.raises(UsageError, match="not an http"):
        c.round(seeds=["mailto:x@y"])


def test_crawler_refuses_a_pipeline_without_the_flows_it_needs(tmp_path, site):
    root, _ = site
    p = cbp.load(FLOWS / "url_count.yaml", home=str(tmp_path / "h"))
    with pytest.raises(UsageError, match="crawl_queue"):
        Crawler(p, [Corpus(root)])
    with pytest.raises(UsageError, match="lacks the field"):
        Crawler(p, [Corpus(root)], queue="counts", pages="urls")


# ---------------------------------------------------------------- the loop against the from-scratch queue
def _check_round(
    p, ever: dict[str, float], crawled_pages: list[dict], epochs_before: int, threshold: float = 3.0
) -> None:
    """The queue records this round's epochs wrote = URLs newly at/above the threshold, with their scores."""
    ref = queue_from_scratch(crawled_pages, threshold)
    new = {}
    for e in range(epochs_before + 1, p.status()["stages"]["threshold"]["epochs"] + 1):
        for r in p.output("crawl_queue", epoch=e):
            assert r["url"] not in new and r["url"] not in ever, f"{r['url']} queued twice"
            new[r["url"]] = r["score"]
    crawled = {normalize_url(x["url"]) for x in crawled_pages}
    want = {u: s for u, s in ref.items() if u not in ever}
    assert set(new) - crawled == set(want), sorted(set(new) ^ set(want))[:5]
    for u, s in want.items():
        assert math.isclose(new[u], s), (u, new[u], s)
    ever.update(new)
    pending = {u for u in ever if u not in crawled}
    assert pending == set(ref)


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
def test_crawl_loop_equals_from_scratch_after_every_round(spark, site, tmp_path, mode):
    root, seed = site
    p = cbp.load(CRAWL, home=str(tmp_path / "home"), mode=mode, spark=spark)
    c = Crawler(p, [Corpus(root)], max_pages=12, max_bytes=64 * 1024)
    ever: dict[str, float] = {}
    crawled: list[dict] = []
    rounds = 0
    for _ in range(5 if mode == "direct" else 3):
        rounds += 1
        before = p.status()["stages"]["threshold"]["epochs"]
        rep = c.round(seeds=[seed])
        crawled += [{"url": u, "html": c.fetch(u).html} for u in rep.landed]
        p.run()
        _check_round(p, ever, crawled, before)
    assert rounds >= 3
    if mode == "direct":
        got = {x["url"] for x in crawled}
        assert {f"http://{HOST}/{n}" for n in BAD_PAGES} | {
            f"http://{HOST}/huge.html"
        } <= got  # every bad kind was crawled
        failed = c.state()["failed"]
        assert failed and all(
            c.fetch(u).reason == why for u, why in failed.items()
        )  # each recorded with its real reason
        assert not set(failed) & got
        # count_links' state, read back, is the from-scratch in-link count of every URL and site
        url_in, site_in, _ = counts_from_scratch(crawled)
        st = {(r["kind"], r["name"]): r["inlinks"] for r in p.state("count_links")}
        assert st == {
            **{("url", u): int(n) for u, n in url_in.items()},
            **{("site", s): int(n) for s, n in site_in.items()},
        }


def test_landmark_variant_recomputes_the_whole_queue(spark, site, tmp_path):
    root, seed = site
    direct = cbp.load(CRAWL, home=str(tmp_path / "d"), spark=spark)
    land = cbp.load(LANDMARK, home=str(tmp_path / "l"), spark=spark)
    c = Crawler(direct, [Corpus(root)], max_pages=15, max_bytes=64 * 1024)
    crawled: list[dict] = []
    for _ in range(3):
        rep = c.round(seeds=[seed])
        crawled += [{"url": u, "html": c.fetch(u).html} for u in rep.landed]
        direct.run()
        land.feed("pages", crawled)
        land.run()
        e = land.status()["stages"]["threshold"]["epochs"]
        full = {r["url"]: r["score"] for r in land.output("crawl_queue", epoch=e)}
        ref = queue_from_scratch(crawled)
        assert set(full) == set(ref) and all(math.isclose(full[u], ref[u]) for u in ref)
        pending = {r["url"] for r in direct.output("crawl_queue")} - {x["url"] for x in crawled}
        assert pending == set(full)


@pytest.mark.parametrize("kind", sorted(BAD_PAGES) + ["huge.html", "not-a-url"])
def test_each_bad_page_kind_lands_and_runs_without_failing_the_epoch(spark, make_pipeline, tmp_path, kind):
    """A bad page fed straight to the pipeline (no crawler in between) beside a good one."""
    if kind == "huge.html":
        page = {"url": f"http://{HOST}/huge.html", "html": decode_html(huge_page(60_000))}  # ~4 MB of text
    elif kind == "not-a-url":
        page = {"url": "not a url at all", "html": '<a href="p1.html">x</a>'}
    else:
        page = {"url": f"http://{HOST}/{kind}", "html": decode_html(BAD_PAGES[kind][0])}
    good = {"url": f"http://{HOST}/p0.html", "html": "".join(f'<a href="p{i}.html">' for i in range(1, 20))}
    yaml = CRAWL.read_text().replace("threshold: 3.0", "threshold: 1.0")
    path = tmp_path / "flows" / "crawl_queue.yaml"
    path.parent.mkdir()
    path.write_text(yaml)
    shutil.copy(FLOWS / "crawl_queue.py", path.parent)
    p = cbp.load(path, home=str(tmp_path / "home"), spark=spark)
    p.feed("pages", [page, good])
    reports = p.run()
    assert [r.stage for r in reports] == ["extract_links", "count_links", "merge", "score", "threshold"]
    got = {r["url"]: r["score"] for r in p.output("crawl_queue")}
    ref = queue_from_scratch([page, good], 1.0)
    assert set(got) == set(ref) and all(math.isclose(got[u], ref[u]) for u in ref)


def test_cbp_crawl_cli_rounds_and_failures(site, tmp_path, capsys):
    """``cbp crawl`` as a process, then ``cbp output`` and the refused command lines through the CLI's own
    code (``cbp.cli.main``) in this process: they start no Spark, and need no interpreter of their own."""
    from cbp.cli import main

    root, seed = site
    home = tmp_path / "home"
    args = ["crawl", str(CRAWL), "--home", str(home), "--corpus", str(root), "--seed", seed, "--max-pages", "5"]
    r = subprocess.run([sys.executable, "-m", "cbp.cli", *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "crawl round 1: 0 new in queue, fetched 1 of 1 (0 failed); 0 left in the frontier" in r.stdout
    assert main(["output", str(CRAWL), "--home", str(home), "pages"]) == 0
    assert [json.loads(x)["url"] for x in capsys.readouterr().out.splitlines()] == [seed]
    with pytest.raises(SystemExit) as bad:  # argparse's usage error
        main(args[:-2] + ["--max-pages", "0"])
    assert bad.value.code == 2 and "must be 1 or more" in capsys.readouterr().err
    assert main(["crawl", str(CRAWL), "--home", str(home), "--corpus", str(tmp_path / "nope")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert os.path.exists(home / "_crawler" / "state.json")


# ---------------------------------------------------------------- merge's keyed rows (issue 38)
def test_a_link_to_a_big_site_makes_merge_read_few_of_its_rows(spark, tmp_path):
    """A site of 4,000 URLs in merge's state: a page linking to one of them and to a new one makes
    merge read the site's row and that URL's row (keyed rows), not the 4,000; a link to a small
    site reads that site's few rows; the queue is the from-scratch queue after every epoch."""
    p = cbp.load(CRAWL, home=str(tmp_path / "home"), spark=spark, mode="direct")
    big = "http://big.example"
    feeds = [
        [
            {
                "url": f"http://hub.example/{i}",
                "html": "".join(f'<a href="{big}/{j}">' for j in range(i * 1000, i * 1000 + 1000)),
            }
            for i in range(4)
        ]
        + [{"url": "http://hub.example/s", "html": '<a href="http://small.example/a">'}]
    ]
    p.feed("pages", feeds[0])
    p.run()
    assert sum(1 for r in p.state("merge") if r["url"].startswith(big)) == 4000
    for feed, most in (
        ([{"url": "http://x.example/1", "html": f'<a href="{big}/7"><a href="{big}/new">'}], 2),
        ([{"url": "http://x.example/2", "html": f'<a href="{big}/7"><a href="http://small.example/a">'}], 2 + 3),
        (
            [
                {"url": f"{big}/7", "html": ""},
                {"url": "http://x.example/1", "status": 404, "html": None, "fetched": 1e10},
            ],
            2 + 2,
        ),
    ):
        feeds.append(feed)
        p.feed("pages", feed)
        merge = next(r for r in p.run() if r.stage == "merge")
        assert 0 < merge.keys_read <= most  # rows read: big's row and its URLs of the epoch (+ small's rows)
        queued: dict[str, int] = {}
        for r in p.output("crawl_queue"):
            queued[r["url"]] = queued.get(r["url"], 0) + r.get("_diff", 1)
        _, crawled = latest_versions(feeds)
        assert {u for u, n in queued.items() if n > 0} - crawled == set(queue_from_scratch(feeds, feeds=True))


def test_a_home_of_the_crawl_queue_before_keyed_rows_is_refused_by_the_plan(tmp_path):
    """merge's state is stored in another layout with keyed rows: a home built before is not resumed."""
    flows = tmp_path / "flows"
    flows.mkdir()
    old = ROOT / "bench" / "crawl_before"
    (flows / "crawl_queue.yaml").write_text(
        (old / "crawl_queue_before.yaml").read_text().replace("crawl_queue_before", "crawl_queue")
    )
    (flows / "crawl_queue.py").write_text((old / "crawl_queue_before.py").read_text())
    home = str(tmp_path / "home")
    p = cbp.load(flows / "crawl_queue.yaml", home=home)
    p.feed("pages", [{"url": "http://a.example/", "html": '<a href="x"><a href="y">'}])
    p.run()
    shutil.copy(CRAWL, flows / "crawl_queue.yaml")
    shutil.copy(FLOWS / "crawl_queue.py", flows / "crawl_queue.py")
    plan = cbp.load(flows / "crawl_queue.yaml", home=home).plan()
    assert [c.code for c in plan.refused] == ["schema-refused"], plan.lines()


def test_merges_keyed_rows_through_an_upgrade_keep_the_queue_equal_to_from_scratch(spark, tmp_path):
    """The crawl queue grows: merge goes from 4 to 8 partitions and gets a new nullable field; the
    upgrade rewrites its keyed rows, and the queue stays the from-scratch queue in the epochs after."""
    flows = tmp_path / "flows"
    flows.mkdir()
    shutil.copy(CRAWL, flows / "crawl_queue.yaml")
    shutil.copy(FLOWS / "crawl_queue.py", flows / "crawl_queue.py")
    home = str(tmp_path / "home")
    hubs = [
        [
            {
                "url": f"http://hub{i}.example/",
                "html": "".join(f'<a href="http://s{j % 7}.example/{j % 13}">' for j in range(i, i + 40)),
            }
            for i in range(k, k + 3)
        ]
        for k in (0, 3)
    ]
    later = [
        [
            {"url": "http://s1.example/1", "html": '<a href="http://s2.example/5"><a href="http://new.example/">'},
            {"url": "http://hub0.example/", "status": 404, "html": None, "fetched": 1e10},
        ],
        [
            {"url": f"http://x{i}.example/", "html": '<a href="http://s3.example/3"><a href="http://s4.example/new">'}
            for i in range(4)
        ],
    ]
    p = cbp.load(flows / "crawl_queue.yaml", home=home, spark=spark)
    for feed in hubs:
        p.feed("pages", feed)
        p.run()
    text = (flows / "crawl_queue.yaml").read_text()
    merge = text[text.index("  merge:") : text.index("  score:")]
    grown = merge.replace("partitions: 4", "partitions: 8").replace(
        'sent_site: "int?"}', 'sent_site: "int?", note: "string?"}'
    )
    assert grown != merge and grown.count("note") == 1
    (flows / "crawl_queue.yaml").write_text(text.replace(merge, grown))
    p = cbp.load(flows / "crawl_queue.yaml", home=home, spark=spark)
    assert [(c.name, c.kind) for c in p.plan().changes if c.data] == [("merge", "state-rewrite")]
    p.upgrade()
    feeds = list(hubs)
    for feed in later:
        feeds.append(feed)
        p.feed("pages", feed)
        p.run()
        queued: dict[str, int] = {}
        for r in p.output("crawl_queue"):
            queued[r["url"]] = queued.get(r["url"], 0) + r.get("_diff", 1)
        _, crawled = latest_versions(feeds)
        assert {u for u, n in queued.items() if n > 0} - crawled == set(queue_from_scratch(feeds, feeds=True))
