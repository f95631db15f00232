"""Real web pages for demos and benchmarks: the HTML of Debian documentation packages.

A package such as ``python3.11-doc`` (about 500 pages) or ``openjdk-17-doc`` (about 10,000) is
downloaded with ``apt-get download`` (no installation) and unpacked with ``dpkg-deb -x``.
:func:`iter_pages` gives its pages as the crawler would fetch them (:class:`cbp_crawl.crawler.Corpus`
with host ``<package>``): file ``<path>`` is URL ``http://<package>/<path>`` (normalized), the
text decoded and capped as the crawler does. The links of a page are
:func:`cbp_crawl.links.page_links`, the crawl queue's rules; this module has none of its own.

Example::

    from cbp_crawl.links import page_links
    root = fetch_debian_doc("python3.11-doc", "bench/data")
    links = {url: page_links(url, html) for url, html in iter_pages(root, "python3.11-doc")}
"""

from __future__ import annotations

import glob
import os
import subprocess
from collections.abc import Iterator

from .crawler import Corpus

__all__ = ["fetch_debian_doc", "iter_pages"]


def fetch_debian_doc(package: str, dest: str) -> str | None:
    """Download and unpack a Debian package into ``dest/<package>``; return that directory or None.

    Runs ``apt-get download`` (and ``apt-get update`` once if the package is not found).
    """
    root = os.path.join(dest, package)
    if os.path.isdir(root) and any(os.scandir(root)):
        return root
    os.makedirs(dest, exist_ok=True)

    def download() -> str | None:
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
    """``(url, html)`` of every HTML page below ``root``, sorted by URL, exactly as the crawler fetches it.

    The pages of ``Corpus(root, host=package)``: files outside the root (through symbolic links)
    are left out, the URL is the crawl queue's normalized one, the bytes are decoded by
    :func:`cbp_crawl.crawler.decode_html` and capped at ``MAX_PAGE_BYTES``.
    """
    corpus = Corpus(root, host=package)
    for url in corpus.pages():
        page = corpus.fetch(url)
        if page.html is not None:
            yield url, page.html
