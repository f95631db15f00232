"""One set of link rules: the pages of :mod:`cbp_crawl.corpus` and :func:`cbp_crawl.links.page_links`
give the demo and the benchmarks exactly the links the crawl queue's ``extract_links`` stage finds.
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from types import SimpleNamespace

import pytest
from conftest import FLOWS, ROOT
from crawl_site import BAD_PAGES, HOST, make_site

import cbp
from cbp_crawl import corpus as corpus_mod
from cbp_crawl.corpus import iter_pages
from cbp_crawl.crawler import Corpus
from cbp_crawl.links import RULES_VERSION, page_links


def _load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture
def site(tmp_path):
    make_site(str(tmp_path))
    return tmp_path / HOST


def _stage_links(translators, url, html):
    """What the ``extract_links`` translator of flows/crawl_queue.py writes for one page, in order."""
    got: list[tuple[str, str]] = []
    out = SimpleNamespace(
        links=SimpleNamespace(write=lambda r: got.append((r["src"], r["dst"]))),
        has_state=True,
        state=SimpleNamespace(write=lambda r: None),
    )
    translators.extract_links(url, iter(()), iter([{"url": url, "html": html}]), out)  # a page's first version
    return got


def test_corpus_pages_are_the_pages_the_crawler_fetches(site):
    pages = dict(iter_pages(str(site), HOST))
    c = Corpus(site)
    assert list(pages) == c.pages()  # the same (normalized) URLs, sorted
    assert all(pages[u] == c.fetch(u).html for u in pages)  # the same text: decoded and capped as the crawler does
    assert "café" in pages[f"http://{HOST}/bad/latin1.html"]  # by its <meta charset>, not as UTF-8 with U+FFFD
    assert f"http://{HOST}/escape.html" not in pages  # a symbolic link out of the corpus is not read


def test_corpus_links_equal_what_the_extract_links_translator_writes(site):
    translators = _load(FLOWS / "crawl_queue.py", "crawl_queue_for_links_test")
    n = 0
    for url, html in iter_pages(str(site), HOST):
        assert _stage_links(translators, url, html) == [(url, d) for d in page_links(url, html)], url
        n += len(page_links(url, html))
    assert n > 100


def test_corpus_links_equal_the_extract_links_stage_of_the_pipeline(spark, site, tmp_path):
    pages = list(iter_pages(str(site), HOST))
    p = cbp.load(FLOWS / "crawl_queue.yaml", home=str(tmp_path / "home"), spark=spark)
    p.feed("pages", [{"url": u, "html": h} for u, h in pages])
    assert [r.stage for r in p.run(max_epochs=1)] == [
        "extract_links"
    ]  # the stage itself; the rest of the queue is not needed
    got = Counter((r["src"], r["dst"]) for r in p.output("links"))
    assert got == Counter((u, d) for u, h in pages for d in page_links(u, h))


def test_every_occurrence_keeps_repeats_and_changes_nothing_else(site):
    html = (
        '<a href="b#1">b</a><a href="a">self</a><a href="mailto:x@y">m</a><a href="./b#2">b</a>'
        '<a href="HTTP://H:80/c">c</a><a href="b">b</a>'
    )
    assert page_links("http://h/a", html, every_occurrence=True) == [
        "http://h/b",
        "http://h/b",
        "http://h/c",
        "http://h/b",
    ]
    assert page_links("http://h/a", html) == ["http://h/b", "http://h/c"]
    index = (site / "index.html").read_text()  # every link three times
    assert len(page_links(f"http://{HOST}/index.html", index, every_occurrence=True)) == 3 * len(
        page_links(f"http://{HOST}/index.html", index)
    )
    for url, html in list(iter_pages(str(site), HOST)) + [
        (f"http://{HOST}/{n}", d.decode("latin-1")) for n, (d, _) in BAD_PAGES.items()
    ]:
        every = page_links(url, html, every_occurrence=True)
        assert list(dict.fromkeys(every)) == page_links(url, html), url  # distinct = every occurrence, first ones kept
        assert url not in every and not any(c.isspace() for u in every for c in u)


def test_url_count_bench_rebuilds_a_vocabulary_cached_with_other_rules(site, tmp_path, monkeypatch):
    bench = _load(ROOT / "bench" / "url_count_bench.py", "url_count_bench_for_links_test")
    make_site(str(tmp_path / "big"), pages=150)  # >= 100 distinct targets, so the real-URL path is taken
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    monkeypatch.setattr(bench, "DATA", data)
    monkeypatch.setattr(bench, "DOC_PACKAGE", HOST)
    monkeypatch.setattr(corpus_mod, "fetch_debian_doc", lambda package, dest: str(tmp_path / "big" / HOST))
    cache = data / f"{HOST}-urls.txt"
    cache.write_text("".join(f"http://old-rules/{i}\n" for i in range(200)))  # as the old extractor wrote it: no header
    want = sorted({d for u, h in iter_pages(str(tmp_path / "big" / HOST), HOST) for d in page_links(u, h)})
    urls, why = bench.load_vocabulary()
    assert urls == want and "now cached" in why
    assert cache.read_text().splitlines()[0].endswith(f"rules {RULES_VERSION}")
    urls, why = bench.load_vocabulary()
    assert urls == want and "now cached" not in why
    cache.write_text(cache.read_text().replace(f"rules {RULES_VERSION}", f"rules {RULES_VERSION - 1}", 1))
    urls, why = bench.load_vocabulary()
    assert urls == want and "now cached" in why


def test_the_linear_scan_for_pathological_pages_finds_lexbors_links_on_every_page(site):
    """cbp_crawl.links reads a page nested too deep for lexbor with a linear scan of its tags: on
    ordinary pages (these, and all 1,714 pages of python3.11-doc, postgresql-doc-15 and
    debian-reference-en, checked 2026-11-26) it finds exactly what lexbor finds."""
    from cbp_crawl import links

    pages = list(iter_pages(str(site), HOST))
    assert len(pages) > 50
    for url, html in pages:
        assert links._hrefs_by_tokens(html) == links._hrefs(html), url
