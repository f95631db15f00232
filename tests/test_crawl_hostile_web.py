"""Pages and URLs of the open web that once stopped or fooled the crawler (cbp_crawl/).

A ``<meta charset>`` naming a Python codec that is no web encoding (``unicode_escape``,
``utf-7``...) gave text with lone surrogates, which the ``pages`` flow refuses: the whole round
failed, and failed again on every retry. Pages nested thousands of elements deep took lexbor
minutes. URLs were resolved by urllib, not as a browser resolves them (backslashes, IDN hosts,
encoded dot segments, a ``<base>`` of another scheme). A directory named without its ``/``
resolved its links against its parent. A truncated UTF-8 page became windows-1252 mojibake. A
file name with ``?``, ``#`` or ``%`` had no URL that reached it. A huge ``max_bytes`` made every
fetch a ``MemoryError``. A seed that failed once was never fetched again, even when given again.
"""

from __future__ import annotations

import os

import pytest
from conftest import FLOWS

import cbp
from cbp.errors import RuntimeStateError
from cbp_crawl import links as links_mod
from cbp_crawl.crawler import Corpus, Crawler
from cbp_crawl.fetch import decode_html
from cbp_crawl.links import normalize_url, page_links

CRAWL = FLOWS / "crawl_queue.yaml"
NOT_WEB_ENCODINGS = [
    "unicode_escape",
    "raw_unicode_escape",
    "utf-7",
    "utf-32",
    "hex",
    "base64",
    "zlib",
    "rot13",
    "idna",
    "undefined",
    "x-user-defined",
    "bogus",
]


def _site(root, pages: dict[str, bytes]) -> Corpus:
    for name, data in pages.items():
        path = os.path.join(root, "h", name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(data)
    return Corpus(os.path.join(root, "h"))


@pytest.mark.parametrize("label", NOT_WEB_ENCODINGS)
def test_a_meta_charset_that_is_no_web_encoding_is_ignored_and_the_text_is_storable(label):
    data = f'<html><meta charset="{label}"><a href="ok.html">+2AA- \\ud800</a>'.encode() + b"\xff\x81 caf\xe9"
    text = decode_html(data)
    text.encode("utf-8")  # no lone surrogate
    assert text.endswith("ÿ\ufffd café") and "\\ud800" in text  # windows-1252, as a browser falls back to
    assert page_links("http://h/", text) == ["http://h/ok.html"]


@pytest.mark.parametrize(
    "label, data, text",
    [
        ("latin1", b"caf\xe9", "café"),
        ("us-ascii", b"\x80", "€"),
        ("windows-1251", b"\xc0", "А"),
        ("Shift_JIS", b"\x82\xa0", "あ"),
        ("utf-16", b"caf\xc3\xa9\xff", "café\ufffd"),
        (" KOI8-R ", b"\xc1", "а"),
        ("gb2312", b"\xb0\xa1", "啊"),
    ],
)
def test_web_encodings_decode_as_the_encoding_standard_says(label, data, text):
    assert decode_html(f'<meta charset="{label}">'.encode() + data + b"\xff" * 0).endswith(text)


def test_a_utf8_page_cut_inside_a_character_stays_utf8():
    page = '<a href="café-1.html">é</a>'.encode()
    cut = page + "é".encode()[:1]
    assert decode_html(cut, truncated=True) == page.decode()
    assert "Ã" in decode_html(cut)  # untruncated, the same bytes are no UTF-8: windows-1252


def test_a_page_cut_by_max_bytes_keeps_its_utf8(tmp_path):
    page = '<html><a href="café-1.html">é</a>'.encode() + "é".encode()
    c = _site(tmp_path, {"p.html": page})
    f = c.fetch("http://h/p.html", max_bytes=len(page) - 1)
    assert f.truncated and page_links(f.url, f.html) == ["http://h/caf%C3%A9-1.html"]


def test_a_huge_max_bytes_reads_the_file_as_it_is(tmp_path):
    c = _site(tmp_path, {"p.html": b"<html>x"})
    f = c.fetch("http://h/p.html", max_bytes=10**14)
    assert f.html == "<html>x" and not f.truncated


def test_the_crawler_survives_a_page_in_a_non_web_encoding(spark, tmp_path):
    c = _site(
        tmp_path,
        {
            "index.html": b'<html><meta charset="unicode_escape"><a href="ok.html">\\ud800</a>\xff',
            "ok.html": b"<html>fine</html>",
        },
    )
    p = cbp.load(CRAWL, home=str(tmp_path / "home"), spark=spark)
    cr = Crawler(p, [c])
    rep = cr.round(seeds=["http://h/", "http://h/ok.html"])
    assert rep.landed == ["http://h/", "http://h/ok.html"] and not rep.failed
    assert {r["url"] for r in p.output("pages")} == {"http://h/", "http://h/ok.html"}


def test_a_page_the_pages_flow_refuses_fails_alone(spark, tmp_path, monkeypatch):
    c = _site(tmp_path, {"a.html": b"<html>a", "b.html": b"<html>b"})
    p = cbp.load(CRAWL, home=str(tmp_path / "home"), spark=spark)
    cr = Crawler(p, [c])
    real = c.fetch
    monkeypatch.setattr(
        c,
        "fetch",
        lambda u, n: (lambda f: f if not u.endswith("a.html") else type(f)(f.url, html="\ud800"))(real(u, n)),
    )
    rep = cr.round(seeds=["http://h/a.html", "http://h/b.html"])
    assert rep.landed == ["http://h/b.html"] and rep.failed == {"http://h/a.html": "failed: RecordError"}
    assert cr.state()["doing"] is None


def test_a_directory_without_its_slash_is_the_page_at_the_url_with_it(spark, tmp_path):
    c = _site(tmp_path, {"dir/index.html": b'<html><a href="sub.html">s</a>', "dir/sub.html": b"<html>sub"})
    f = c.fetch("http://h/dir")
    assert f.url == "http://h/dir/" and page_links(f.url, f.html) == ["http://h/dir/sub.html"]
    assert (
        c.fetch("http://h/dir/").url == "http://h/dir/"
        and c.fetch("http://h/dir/index.html").url == "http://h/dir/index.html"
    )
    p = cbp.load(CRAWL, home=str(tmp_path / "home"), spark=spark)
    cr = Crawler(p, [c])
    rep = cr.round(seeds=["http://h/dir", "http://h/dir/"])
    assert rep.landed == ["http://h/dir/"] and not rep.failed  # landed once, under the URL its links resolve against
    assert [r["url"] for r in p.output("pages")] == ["http://h/dir/"]
    assert {"http://h/dir", "http://h/dir/"} <= set(cr.state()["fetched"])
    assert cr.round(seeds=["http://h/dir"]).landed == []  # not fetched again


def test_file_names_a_url_must_encode_have_urls_that_reach_them(tmp_path):
    names = ["q?.html", "a#b.html", "100%.html", "a b.html", "caf%C3%A9.html", "café.html", "x|y[1].html", "(p).html"]
    c = _site(tmp_path, {n: f"<html>{n}".encode() for n in names})
    urls = c.pages()
    assert len(urls) == len(names)
    assert sorted(c.fetch(u).html[6:] for u in urls) == sorted(names)
    assert "http://h/(p).html" in urls and "http://h/caf%C3%A9.html" in urls  # what a link to the name gives
    assert normalize_url("café.html", "http://h/") == "http://h/caf%C3%A9.html"


def test_a_seed_that_failed_is_fetched_again_when_given_again(spark, tmp_path):
    c = _site(tmp_path, {"a.html": b"<html>a"})
    p = cbp.load(CRAWL, home=str(tmp_path / "home"), spark=spark)
    cr = Crawler(p, [c])
    assert cr.round(seeds=["http://h/b.html"]).failed == {"http://h/b.html": "not found"}
    _site(tmp_path, {"b.html": b"<html>b"})
    rep = cr.round(seeds=["http://h/b.html"])
    assert rep.landed == ["http://h/b.html"] and "http://h/b.html" not in cr.state()["failed"]
    assert cr.round(seeds=["http://h/b.html"]).picked == []  # fetched: not again


# WHATWG URL Standard results (node's URL, 2026-11-26), then cbp's policy: fragment and user info
# dropped, nothing but http(s)
@pytest.mark.parametrize(
    "href, expected",
    [
        ("\\\\evil.com/x", "http://evil.com/x"),
        ("..\\c.html", "http://h.org/c.html"),
        ("http:\\\\evil.com\\x", "http://evil.com/x"),
        ("http://hostile\\@other/x", "http://hostile/@other/x"),
        ("http://Bücher.de/x", "http://xn--bcher-kva.de/x"),
        ("http://ＥＸ.com/", "http://ex.com/"),
        ("http://h.org/%2e%2e/x", "http://h.org/x"),
        ("http://h.org/a/%2E/x", "http://h.org/a/x"),
        ("http://0x7f.1/", "http://127.0.0.1/"),
        ("https:foo", "https://foo/"),
        ("http:foo", "http://h.org/a/foo"),
        ("..//x", "http://h.org//x"),
        ("http://u:p@x.org/", "http://x.org/"),
        ("http://x.org/a b", "http://x.org/a%20b"),
        ("http://x.org/?q=a b", "http://x.org/?q=a%20b"),
        ("http://x.org/é", "http://x.org/%C3%A9"),
        ("http://h%41.org/", "http://ha.org/"),
        ("#frag", "http://h.org/a/b.html"),
        ("\x01http://x.org/", "http://x.org/"),
        ("http://[::1", None),
        ("ftp://x.org/", None),
        ("http://x.org:99999/", None),
    ],
)
def test_urls_resolve_as_a_browser_resolves_them(href, expected):
    assert normalize_url(href, "http://h.org/a/b.html") == expected


def test_a_base_of_another_scheme_and_an_empty_href_resolve_as_in_a_browser():
    assert page_links("http://h/a/", '<base href="ftp://f/"><a href="x">x</a><a href="http://h/y">y</a>') == [
        "http://h/y"
    ]
    assert page_links("http://h/a/", '<base href="http://o/d/"><a href="">e</a>') == ["http://o/d/"]
    assert page_links("http://h/a/", '<base href="http://[::1"><a href="x">x</a>') == [
        "http://h/a/x"
    ]  # no URL: ignored


@pytest.mark.parametrize(
    "html",
    [
        "<div>" * 200_000 + '<a href="x">x</a>',
        "<a " + " ".join(f"a{i}=1" for i in range(100_000)) + ' href="x">',
        "<b><i><u><font>" * 50_000 + '<a href="x">x</a>',
        "<a " + " ".join(f"a{i}" for i in range(100_000)) + ' href="x">',  # attributes without '=' (few '<' and '=')
        "<p>text</p>" * 100
        + "<div "
        + " ".join(f"d{i}" for i in range(5_000))
        + '><a href="x">x</a></div>',  # a short tag of many attributes
        '<a t=">" ' + " ".join(f"a{i}" for i in range(100_000)) + ' href="x">',  # a '>' in a quoted value first
        "<a t='>' " + " ".join(f"a{i}" for i in range(100_000)) + ' href="x">',
    ],
)
def test_pages_lexbor_would_take_minutes_on_are_read_by_a_linear_scan(html, monkeypatch):
    monkeypatch.setattr(
        "selectolax.lexbor.LexborHTMLParser", lambda *a: pytest.fail("lexbor parsed a pathological page")
    )
    assert page_links("http://h/", html) == ["http://h/x"]


def test_a_long_quoted_value_is_no_attributes(monkeypatch):
    """An inline SVG path of thousands of coordinates is one attribute: lexbor reads the page."""
    monkeypatch.setattr(
        links_mod, "_hrefs_by_tokens", lambda *a: pytest.fail("an ordinary page went to the linear scan")
    )
    html = '<svg><path d="' + " ".join(str(i) for i in range(5_000)) + '"/></svg><!--><a href="/after">'
    assert page_links("http://h/", html) == ["http://h/after"]


def test_the_linear_scan_finds_what_lexbor_finds_on_ordinary_pages():
    html = (
        '<html><head><base href="/d/"><title>t</title></head><body><p>x<a href="a.html">a</a><a href="b.html#f">b</a>'
        '<!-- <a href="c.html"> --><script>var s = "<a href=\\"s.html\\">";</script><A HREF="A&amp;B.html">c</A>'
        '<a href=\'q?x=1&amp;y=2\'>q</a><a name="n">n</a><a href="http://o/">o</a></body></html>'
    )
    assert links_mod._hrefs_by_tokens(html) == links_mod._hrefs(html)
    assert page_links("http://h/", html) == [
        "http://h/d/a.html",
        "http://h/d/b.html",
        "http://h/d/A&B.html",
        "http://h/d/q?x=1&y=2",
        "http://o/",
    ]


_POS = '"round": 1, "cursor": 0, "frontier": {}, "fetched": [], "failed": {}'


@pytest.mark.parametrize(
    "text",
    [
        b"{not json",
        b"[]",
        b'{"round": "1"}',
        b"\xff\xfe",
        b'{"round": 1, "cursor": 0, "frontier": {}, "fetched": [], "failed": {}, "doing": 3}',
        *(
            f'{{{_POS.replace(a, b)}, "doing": {d}}}'.encode()
            for a, b, d in [
                ('"round": 1', '"round": 1', "{}"),
                ('"fetched": []', '"fetched": [1, [2]]', "null"),
                ('"cursor": 0', '"cursor": -5', "null"),
                ('"frontier": {}', '"frontier": {"http://h/": "high"}', "null"),
                ('"failed": {}', '"failed": {"http://h/": 3}', "null"),
                ('"round": 1', '"round": 1', '{"round": 7}'),
                ('"round": 1', '"round": true', "null"),
            ]
        ),
    ],
)
def test_a_damaged_crawler_position_is_a_typed_error_not_a_restart(spark, tmp_path, text):
    c = _site(tmp_path, {"a.html": b"<html>a"})
    p = cbp.load(CRAWL, home=str(tmp_path / "home"), spark=spark)
    cr = Crawler(p, [c])
    p.home.write_bytes("_crawler/state.json", text)
    with pytest.raises(RuntimeStateError) as e:
        cr.round(seeds=["http://h/a.html"])
    assert e.value.code == "bad-crawler-state"
    assert p.feeds("pages") == 0


def test_a_corpus_must_be_a_directory_named_by_a_host_urls_keep(tmp_path):
    from cbp.errors import UsageError

    for name in ("2024", "0x7f", "lib.2", "foo.0x1"):  # URL parsers read these as IPv4 addresses
        (tmp_path / name).mkdir()
        with pytest.raises(UsageError) as e:
            Corpus(tmp_path / name)
        assert e.value.code == "bad-host", name
    (tmp_path / "file").write_text("x")
    for root in ("", " ", "a\0b", str(tmp_path / "file"), str(tmp_path / "missing")):  # '' is not the current directory
        with pytest.raises(UsageError) as e:
            Corpus(root, host="h")
        assert e.value.code == "no-corpus", root
    assert Corpus(tmp_path / "2024", host="python3.11-doc").site == "http://python3.11-doc"


def test_two_corpora_of_one_host_are_refused_not_one_dropped(spark, tmp_path):
    from cbp.errors import UsageError

    (tmp_path / "a" / "h").mkdir(parents=True)
    (tmp_path / "b" / "h").mkdir(parents=True)
    p = cbp.load(CRAWL, home=str(tmp_path / "home"), spark=spark)
    with pytest.raises(UsageError) as e:
        Crawler(p, [Corpus(tmp_path / "a" / "h"), Corpus(tmp_path / "b" / "h")])
    assert e.value.code == "bad-host"
