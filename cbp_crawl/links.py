"""Links of a web page, and the URL rules of the crawl queue (paper 001, Fig. 1).

These functions are the contract of ``flows/crawl_queue.yaml``: the pipeline's ``extract_links``
stage, the crawler and the from-scratch reference all use them, and so do the demo and the
benchmarks (over the pages of :mod:`cbp_crawl.corpus`), so "a link" means the same thing
everywhere. There is no other link extractor in cbp.

    >>> html = '<a href="../c.html#s">c</a><a href="mailto:x@y">m</a><a href="b.html">self</a>'
    >>> html += '<a href="/c.html">again</a><a href="HTTPS://EX.ORG:8443/d?q=1&amp;r=2">d</a>'
    >>> page_links("http://Ex.org/a/b.html", html)
    ['http://ex.org/c.html', 'https://ex.org:8443/d?q=1&r=2']
    >>> site_of("https://ex.org:8443/d?q=1")
    'https://ex.org:8443'

``page_links(..., every_occurrence=True)`` keeps a target each time a link to it occurs (for
counting link occurrences, as the URLCount demo does); everything else about it is the same.

    >>> page_links("http://h/a", '<a href="b#1">b</a><a href="a">self</a><a href="./b#2">b</a>', every_occurrence=True)
    ['http://h/b', 'http://h/b']

HTML is parsed with lexbor (through ``selectolax``), an HTML5 parser that accepts any input:
invalid markup, unclosed tags, binary junk; a page nested thousands of elements deep (which
lexbor takes seconds on) is read by a linear scan of its tags instead. Pages larger than
``max_chars`` are parsed only up to that many characters. URLs are parsed and resolved by the
WHATWG URL Standard (``ada``), as browsers do.
"""

from __future__ import annotations

import re
from html import unescape

from ada_url import URL

__all__ = ["page_links", "normalize_url", "site_of", "MAX_PAGE_CHARS", "RULES_VERSION"]

MAX_PAGE_CHARS = 8 * 1024 * 1024  # characters of a page that are parsed; the rest is ignored
#: Raise it whenever a change here gives some page other links: whatever is derived from links
#: and kept across runs (e.g. the URL vocabulary bench/url_count_bench.py caches) is keyed by it.
#: 1: the lexbor parser and normalize_url (before it, cbp_crawl.corpus had an HTMLParser of its own).
#: 2: URLs parsed and resolved by the WHATWG URL Standard (ada), as browsers do: backslashes,
#:    IDN hosts, encoded dot segments, a ``<base>`` of another scheme, ``href=""``.
#: 3: a tag of more than 1,000 attributes (quoted values apart) is read by the linear scan, not lexbor.
RULES_VERSION = 3


def normalize_url(url: str, base: str | None = None) -> str | None:
    """The absolute form of ``url`` (resolved against ``base``) that the crawl queue uses, or None.

    Parsed and resolved as a browser does (the WHATWG URL Standard, by the ``ada`` library:
    backslashes are slashes, hosts IDNA-encoded and lower-cased, dot segments plain or encoded
    removed, spaces and non-ASCII characters %-encoded, default ports dropped); then the fragment
    and any user info are dropped. None unless the result is an ``http``/``https`` URL.

        >>> normalize_url("../x y.html#top", "HTTP://Host.ORG:80/a/b/")
        'http://host.org/a/x%20y.html'
        >>> normalize_url("http://evil\\\\@other/x"), normalize_url("http://Bücher.de/%2e%2e/a")
        ('http://evil/@other/x', 'http://xn--bcher-kva.de/a')
        >>> normalize_url("javascript:void(0)", "http://h/") is None, normalize_url("http://[::1", "http://h/") is None
        (True, True)
        >>> normalize_url("http://h/\\ud800") is None, normalize_url("x.html", "ftp://h/") is None
        (True, True)
    """
    try:
        u = URL(url, base) if base is not None else URL(url)
        scheme = u.protocol
        if scheme != "http:" and scheme != "https:" or not u.hostname:
            return None
        return f"{scheme}//{u.host}{u.pathname}{u.search}"
    except (ValueError, TypeError, UnicodeError):  # not a URL; a lone surrogate
        return None


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
    src = normalize_url(url)
    if src is None or not html:
        return []
    if len(html) > max_chars:
        html = html[:max_chars]
    if "\x00" in html:
        html = html.replace("\x00", "\ufffd")  # as the HTML5 tokenizer would; lexbor's C strings stop at NUL
    base_href, hrefs = _hrefs(html)
    base = src
    if base_href:  # <base href> changes what relative links resolve against (one that is no URL is ignored)
        base = _resolve(base_href, src) or src
    seen: set[str] = set()
    out: list[str] = []
    resolved: dict[str, str | None] = {}  # a page repeats its links: each distinct href is resolved once
    for href in hrefs:
        dst = resolved[href] if href in resolved else resolved.setdefault(href, normalize_url(href, base))
        if dst is None or dst == src:
            continue
        if every_occurrence:
            out.append(dst)
        elif dst not in seen:
            seen.add(dst)
            out.append(dst)
    return out


def _resolve(href: str, base: str) -> str | None:
    """``href`` resolved against ``base``, whatever its scheme (None if it is no URL)."""
    try:
        return URL(href, base).href
    except (ValueError, TypeError, UnicodeError):
        return None


#: Pages lexbor's tree builder would take seconds on (its cost grows with nesting depth times
#: tags, and with the square of one tag's attributes): a page with more tags or ``=`` than the first
#: of these, or a tag of over 2,000 characters, whose estimated depth, longest tag or most
#: attributes in one tag (``<a a0 a1 ...>``: attributes need no ``=``; quoted values, such as an
#: SVG path's coordinates, are no attributes) passes the others is read by :func:`_hrefs_by_tokens`
#: instead, which finds the same ``<a href>`` and ``<base href>`` in linear time (the standard
#: library's ``html.parser`` is quadratic on unclosed tags).
_FEW_TAGS, _MAX_DEPTH, _MAX_TAG_CHARS, _MAX_ATTRS = 20_000, 2_000, 64 * 1024, 1_000
_ATTR_START = re.compile(r"\s[^\s=>]")
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")
_LONG_RUN = re.compile(rf"<[A-Za-z][^>]{{{2 * _MAX_ATTRS}}}")  # tried at <= _FEW_TAGS tags: linear enough
_QUOTED_GT = re.compile(r"=\s*(?:\"[^\"<>]*>|'[^'<>]*>)")  # a quoted value holding a '>' (which _LONG_RUN stops at)
#: a tag, to its ``>`` outside quoted values (an unclosed quote runs to the end: linear in a finditer)
_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)(?:[^>\"']+|\"[^\"]*(?:\"|\Z)|'[^']*(?:'|\Z))*>?")
_NOT_NESTING = frozenset(
    "a area base br col embed hr img input link meta source track wbr p li dt dd option optgroup tr td th "
    "thead tbody tfoot rb rt rtc rp colgroup caption html head body".split()
)


def _hrefs(html: str) -> tuple[str | None, list[str]]:
    """The first ``<base href>`` and every ``<a href>`` of a page, in document order."""
    if (html.count("<") > _FEW_TAGS or html.count("=") > _FEW_TAGS or _long_tag(html)) and _pathological(html):
        return _hrefs_by_tokens(html)
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    node = tree.css_first("base[href]")
    base = node.attributes.get("href") if node is not None else None
    return base, [h for h in (n.attributes.get("href") for n in tree.css("a[href]")) if h is not None]


def _long_tag(html: str) -> bool:
    """Whether a tag is long enough to hold more attributes than any real one: at once when no
    quoted value holds a ``>``, else by reading the tags (~0.5 ms a page)."""
    if _LONG_RUN.search(html):
        return True
    return bool(_QUOTED_GT.search(html)) and any(m.end() - m.start() > 2 * _MAX_ATTRS for m in _TAG.finditer(html))


def _pathological(html: str) -> bool:
    """Whether a page nests elements deeper than a browser would build (an estimate from its tags)
    or has a tag longer, or with more attributes, than any real one."""
    depth = deepest = 0
    for m in _TAG.finditer(html):
        size = m.end() - m.start()
        if size > _MAX_TAG_CHARS or (
            size > 2 * _MAX_ATTRS and len(_ATTR_START.findall(_QUOTED.sub(" ", m.group()))) > _MAX_ATTRS
        ):
            return True
        name = m.group(2).lower()
        if name in _NOT_NESTING:
            continue
        depth = max(0, depth - 1) if m.group(1) else depth + 1
        if depth > deepest:
            deepest = depth
            if deepest > _MAX_DEPTH:
                return True
    return False


#: A pathological page's pieces, left to right, in one linear pass (every alternative ends at the
#: end of the text if its closing never comes, so nothing is scanned twice): comments, the raw text
#: of elements whose content is no markup (and template contents, which lexbor's selectors do not
#: search), and the start tags of ``a`` and ``base`` (a quoted value may hold ``>``).
_PIECE = re.compile(
    r"<!--.*?(?:-->|\Z)|<(script|style|textarea|title|xmp|iframe|noembed|noframes|template)\b[^>]*>.*?(?:</\1\s*>|\Z)"
    r"|<plaintext\b.*|<(a|base)(?=[\s/>])((?:[^>\"']|\"[^\"]*\"?|'[^']*'?)*)",
    re.S | re.I,
)
_ATTR = re.compile(r"""([^\s"'=/>]+)(?:\s*=\s*(?:"([^"]*)"?|'([^']*)'?|([^\s>]*)))?""")


def _hrefs_by_tokens(html: str) -> tuple[str | None, list[str]]:
    """:func:`_hrefs` by a linear scan instead of a tree: the first ``<base href>`` and every
    ``<a href>`` outside comments and raw-text elements (attribute values unescaped)."""
    base: str | None = None
    hrefs: list[str] = []
    for m in _PIECE.finditer(html):
        tag = m.group(2)
        href = (
            _href(m.group(3)) if tag is not None and m.end() < len(html) else None
        )  # a tag the text ends in is dropped
        if href is None:
            continue
        if tag.lower() == "a":
            hrefs.append(href)
        elif base is None:
            base = href
    return base, hrefs


def _href(attributes: str) -> str | None:
    """The value of the first ``href`` among a start tag's attributes (``""`` for one without a value)."""
    for a in _ATTR.finditer(attributes):
        if a.group(1).lower() == "href":
            value = next((v for v in a.group(2, 3, 4) if v is not None), "")
            return unescape(value)
    return None
