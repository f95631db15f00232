"""Real web pages for demos and benchmarks: the HTML of Debian documentation packages.

A package such as ``python3.11-doc`` (about 500 pages) or ``openjdk-17-doc`` (about 10,000) is
downloaded with ``apt-get download`` (no installation) and unpacked with ``dpkg-deb -x``; each
file maps to a URL ``http://<package>/<path>``.

    >>> root = fetch_debian_doc("python3.11-doc", "bench/data")      # doctest: +SKIP
    >>> pages = list(iter_pages(root, "python3.11-doc"))              # doctest: +SKIP
    >>> links("http://x/a/b.html", '<a href="../c.html#s">c</a> <a href="d?a=1&amp;b=2">d</a>')
    ['http://x/c.html', 'http://x/a/d?a=1&b=2']
"""

from __future__ import annotations

import glob
import os
import subprocess
from typing import Iterator, Optional
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin, urlsplit

__all__ = ["fetch_debian_doc", "iter_pages", "links"]



class _Hrefs(HTMLParser):
    """Collects the href of every <a> element; attribute values come back with entities decoded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, Optional[str]]]) -> None:
        if tag == "a":
            for name, value in attrs:
                if name == "href" and value is not None:
                    self.hrefs.append(value)
                    break


def fetch_debian_doc(package: str, dest: str) -> Optional[str]:
    """Download and unpack a Debian package into ``dest/<package>``; return that directory or None.

    Runs ``apt-get download`` (and ``apt-get update`` once if the package is not found).
    """
    root = os.path.join(dest, package)
    if os.path.isdir(root) and any(os.scandir(root)):
        return root
    os.makedirs(dest, exist_ok=True)

    def download() -> Optional[str]:
        try:
            subprocess.run(["apt-get", "download", package], cwd=dest, check=True, capture_output=True, timeout=600)
        except (OSError, subprocess.SubprocessError):
            return None
        debs = sorted(glob.glob(os.path.join(dest, f"{package}_*.deb")))
        return debs[-1] if debs else None

    deb = download()
    if deb is None:
        try:
            subprocess.run(["apt-get", "update"], check=True, capture_output=True, timeout=600)
        except (OSError, subprocess.SubprocessError):
            return None
        deb = download()
    if deb is None:
        return None
    try:
        subprocess.run(["dpkg-deb", "-x", deb, root], check=True, capture_output=True, timeout=600)
    except (OSError, subprocess.SubprocessError):
        return None
    return root


def iter_pages(root: str, package: str) -> Iterator[tuple[str, str]]:
    """``(url, html)`` for every ``.html`` file below ``root``, in a stable order; undecodable bytes replaced."""
    found = []
    for d, _, files in os.walk(root):
        for f in files:
            if f.endswith((".html", ".htm")):
                found.append(os.path.join(d, f))
    for path in sorted(found):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        with open(path, "rb") as fh:
            yield f"http://{package}/{rel}", fh.read().decode("utf-8", errors="replace")


def links(url: str, html: str) -> list[str]:
    """Absolute http(s) link targets of a page (fragment removed, the page itself dropped), in order."""
    parser = _Hrefs()
    parser.feed(html)
    parser.close()
    out = []
    for href in parser.hrefs:
        try:
            target = urldefrag(urljoin(url, href.strip()))[0]
        except ValueError:
            continue  # a malformed URL (e.g. a bad IPv6 host) is not a link
        if urlsplit(target).scheme in ("http", "https") and target != url:
            out.append(target)
    return out
