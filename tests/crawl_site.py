"""A small generated web site for crawl tests: linked pages plus one page of each bad kind.

``make_site(dir)`` writes ``dir/gen-site/...`` (host ``gen-site``) and returns the seed URL.
Links follow a skewed (Zipf-like) choice of targets, so some pages collect many in-links and
the queue's threshold matters; pages also link outside the site and to files that are not pages.
"""

from __future__ import annotations

import os
import random

HOST = "gen-site"
BAD_PAGES = {
    # name: (bytes, what it tests)
    "bad/markup.html": (
        b'<html><body><a href="../p1.html">ok<a href=p2.html>no quotes</a><div><<a>>'
        b'<a href="p3.html"<a href="../p4.html">x</a></tr></table><a href="../p5.html"',
        "invalid HTML",
    ),
    "bad/latin1.html": (
        (
            '<html><meta charset="iso-8859-1"><a href="../p6.html">caf\u00e9</a>'
            '<a href="../r\u00e9sum\u00e9.html">r</a></html>'
        ).encode("latin-1")
        + b"\xff\xfe\x81",
        "non-UTF-8 bytes",
    ),
    "bad/binary.html": (
        bytes(range(256)) * 4 + b'<a href="../p7.html">after junk</a>' + b"\x00\x00",
        "binary junk and NUL bytes",
    ),
    "bad/empty.html": (b"", "an empty page"),
    "bad/odd.html": (
        b'<a href="javascript:alert(1)">j</a><a href="mailto:x@y.org">m</a><a href="ftp://f.org/x">f</a>'
        b'<a href="data:text/html,<a href=x>">d</a><a href="http://[::1">v6</a><a href="http://h:99999/">port</a>'
        b'<a href="http://bad host/">space</a><a href="http:///nohost">nohost</a><a href="  ../p8.html  ">ws</a>'
        b'<a href="../p9.html\n">nl</a><a href="HTTP://EXT0.Example:80/Index.html#top">ext</a>'
        b'<a href="#frag">self</a><a href="">empty</a><a>no href</a><a href="../p1.html?a=1&amp;b=%41">q</a>',
        "odd schemes and malformed URLs",
    ),
}


def huge_page(n_links: int = 20_000) -> bytes:
    """A page far bigger than the crawler's limit in the tests, with links all the way through."""
    return (
        "<html><body>" + "".join(f'<p>{"x" * 40}<a href="p{i % 50}.html">l</a></p>' for i in range(n_links))
    ).encode()


def make_site(root: str, pages: int = 60, seed: int = 7) -> str:
    """Write the site below ``root``; return the seed URL (its index page)."""
    rnd = random.Random(seed)
    site = os.path.join(root, HOST)
    os.makedirs(os.path.join(site, "bad"), exist_ok=True)
    os.makedirs(os.path.join(site, "dir"), exist_ok=True)
    weights = [1.0 / (i + 1) ** 0.9 for i in range(pages)]
    names = [f"p{i}.html" for i in range(pages)]
    extra = list(BAD_PAGES) + ["huge.html", "dir/", "data.bin", "missing.html", "../../etc/passwd", "escape.html"]
    for i, name in enumerate(names):
        targets = rnd.choices(names, weights, k=rnd.randint(2, 9))
        hrefs = [t if rnd.random() < 0.6 else f"http://{HOST}/{t}#s{rnd.randint(0, 3)}" for t in targets]
        if rnd.random() < 0.3:
            hrefs.append(f"http://ext{rnd.randint(0, 3)}.example/page{rnd.randint(0, 5)}.html")
        if rnd.random() < 0.25:
            hrefs.append(rnd.choice(extra))
        body = "".join(f'<li><a href="{h}">link {j}</a></li>' for j, h in enumerate(hrefs))
        with open(os.path.join(site, name), "w", encoding="utf-8") as fh:
            fh.write(f"<!DOCTYPE html><html><head><title>page {i}</title></head><body><ul>{body}</ul></body></html>")
    index = "".join(f'<a href="{n}">{n}</a>' for n in names[:20] + list(BAD_PAGES) + ["huge.html", "dir/"])
    with open(os.path.join(site, "index.html"), "w", encoding="utf-8") as fh:
        fh.write(f"<html><body>{index}{index}{index}</body></html>")  # repeated links count once per page
    for name, (data, _) in BAD_PAGES.items():
        with open(os.path.join(site, name), "wb") as fh:
            fh.write(data)
    with open(os.path.join(site, "huge.html"), "wb") as fh:
        fh.write(huge_page())
    with open(os.path.join(site, "dir", "index.html"), "w", encoding="utf-8") as fh:
        fh.write('<a href="../p0.html">up</a><a href="../p1.html">up</a><a href="../index.html">home</a>')
    with open(os.path.join(site, "data.bin"), "wb") as fh:
        fh.write(b"\x89PNG not a page")
    outside = os.path.join(root, "outside.html")
    with open(outside, "w") as fh:
        fh.write('<a href="http://gen-site/p0.html">secret</a>')
    os.symlink(outside, os.path.join(site, "escape.html"))
    return f"http://{HOST}/index.html"
