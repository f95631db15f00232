"""Links of a web page, and the URL rules of the crawl queue (paper 001, Fig. 1).

These functions are the contract of ``flows/crawl_queue.yaml``: the pipeline's ``extract_links``
stage, the crawler and the from-scratch reference all use them, and so do the demo and the
benchmarks (over the pages of :mod:`cbp.crawl.corpus`), so "a link" means the same thing
everywhere. There is no other link extractor in cbp.

    >>> page_links("http://Ex.org/a/b.html", '<a href="../c.html#s">c</a><a href="mailto:x@y">m</a>'
    ...            '<a href="b.html">self</a><a href="/c.html">again</a><a href="HTTPS://EX.ORG:8443/d?q=1&amp;r=2">d</a>')
    ['http://ex.org/c.html', 'https://ex.org:8443/d?q=1&r=2']
    >>> site_of("https://ex.org:8443/d?q=1")
    'https://ex.org:8443'

``page_links(..., every_occurrence=True)`` keeps a target each time a link to it occurs (for
counting link occurrences, as the URLCount demo does); everything else about it is the same.

    >>> page_links("http://h/a", '<a href="b#1">b</a><a href="a">self</a><a href="./b#2">b</a>', every_occurrence=True)
    ['http://h/b', 'http://h/b']

HTML is parsed with lexbor (through ``selectolax``), an HTML5 parser that accepts any input:
invalid markup, unclosed tags, binary junk. Pages larger than ``max_chars`` are parsed only up
to that many characters.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Optional
from urllib.parse import quote, urldefrag, urljoin, urlsplit, urlunsplit

__all__ = ["page_links", "normalize_url", "site_of", "MAX_PAGE_CHARS", "RULES_VERSION"]

MAX_PAGE_CHARS = 8 * 1024 * 1024  # characters of a page that are parsed; the rest is ignored
#: Raise it whenever a change here gives some page other links: whatever is derived from links
#: and kept across runs (e.g. the URL vocabulary bench/url_count_bench.py caches) is keyed by it.
#: 1: the lexbor parser and normalize_url (before it, cbp.crawl.corpus had an HTMLParser of its own).
RULES_VERSION = 1

_STRIP = re.compile(r"[\t\n\r]")  # removed anywhere in a URL, as browsers do (WHATWG URL parser)
_HOST = re.compile(r"^(?:[a-z0-9_~!$&'()*+,;=%-]+(?:\.[a-z0-9_~!$&'()*+,;=%-]+)*\.?)$")
_ABSOLUTE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # "http:///x" is a malformed absolute URL, not a relative one
_SAFE = "/%:@!$&'()*+,;=-._~?"  # characters kept as they are in paths and queries; others are %-encoded


def normalize_url(url: str, base: Optional[str] = None) -> Optional[str]:
    """The absolute form of ``url`` (resolved against ``base``) that the crawl queue uses, or None.

    Fragment removed, scheme and host lower-cased, default ports dropped, spaces and non-ASCII
    characters of the path and query %-encoded; None unless it is a well-formed ``http``/``https`` URL.

        >>> normalize_url("../x y.html#top", "HTTP://Host.ORG:80/a/b/")
        'http://host.org/a/x%20y.html'
        >>> normalize_url("javascript:void(0)", "http://h/") is None, normalize_url("http://[::1", "http://h/") is None
        (True, True)
        >>> normalize_url("http://h/\\ud800") is None
        True
    """
    url = _STRIP.sub("", url).strip(" \x00\x0b\x0c")
    try:
        absolute = urljoin(base, url) if base is not None and not _ABSOLUTE.match(url) else url
        absolute = urldefrag(absolute)[0]
        parts = urlsplit(absolute)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            return None
        host = parts.hostname  # lower-cased by urlsplit
        port = parts.port  # raises ValueError for a port that is not a number in range
    except ValueError:
        return None
    if host and ":" in host:  # an IPv6 literal, written in brackets
        try:
            host = f"[{ipaddress.IPv6Address(host).compressed}]"
        except ValueError:
            return None
    elif not host or not _HOST.match(host):
        return None
    if port is not None and port != (80 if scheme == "http" else 443):
        host = f"{host}:{port}"
    try:
        path = quote(_remove_dot_segments(parts.path or "/"), safe=_SAFE)
        query = quote(parts.query, safe=_SAFE)
    except UnicodeEncodeError:  # a lone surrogate: no URL a page can mean
        return None
    return urlunsplit((scheme, host, path, query, ""))


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 §5.2.4: ``/a/./b/../c`` -> ``/a/c`` (urljoin does it only for relative links)."""
    segs = path.split("/")
    out: list[str] = []
    for i, seg in enumerate(segs):
        last = i == len(segs) - 1
        if seg in (".", ".."):
            if seg == ".." and len(out) > 1:
                out.pop()
            if last:
                out.append("")
            continue
        out.append(seg)
    return "/".join(out)


def site_of(url: str) -> str:
    """``scheme://host[:port]`` of a normalized URL (``""`` for a string that is not a URL).

        >>> site_of("http://python3.11-doc/usr/share/doc/index.html")
        'http://python3.11-doc'
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        return ""
    return f"{scheme}://{rest.split('/', 1)[0].split('?', 1)[0]}"


def page_links(url: str, html: str, max_chars: int = MAX_PAGE_CHARS, *, every_occurrence: bool = False) -> list[str]:
    """Distinct normalized targets of a page's ``<a href>`` links, in document order, without the page itself.

    With ``every_occurrence`` a target is listed each time a link to it occurs (still in document
    order, still without the page itself and without what is not an http(s) URL). A page whose
    own URL is not a well-formed http(s) URL has no links (relative links could not be
    resolved). Never raises for any ``html`` string.

        >>> page_links("http://h/", "<p>no links</p>"), page_links("not a url", '<a href="http://h/">x</a>')
        ([], [])
    """
    from selectolax.lexbor import LexborHTMLParser

    src = normalize_url(url)
    if src is None or not html:
        return []
    if len(html) > max_chars:
        html = html[:max_chars]
    if "\x00" in html:
        html = html.replace("\x00", "\ufffd")  # as the HTML5 tokenizer would; lexbor's C strings stop at NUL
    tree = LexborHTMLParser(html)
    base = src
    node = tree.css_first("base[href]")  # <base href> changes what relative links resolve against
    if node is not None and node.attributes.get("href"):
        base = normalize_url(node.attributes["href"] or "", src) or src
    seen: set[str] = set()
    out: list[str] = []
    for node in tree.css("a[href]"):
        href = node.attributes.get("href")
        if not href:
            continue
        dst = normalize_url(href, base)
        if dst is None or dst == src:
            continue
        if every_occurrence:
            out.append(dst)
        elif dst not in seen:
            seen.add(dst)
            out.append(dst)
    return out
