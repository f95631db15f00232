"""Fuzzing the crawler's URL -> corpus path (target "crawler-url-to-path", see tests/fuzzing.py).

Hostile URLs (random text, random %-encoded bytes, dot segments plain and encoded, encoded
slashes, NULs, surrogates and other Unicode, very long parts, other schemes, the corpus host in
odd case, with ports or user info) against a corpus holding inside pages and inside links, links
pointing out to a file with a secret marker, a FIFO and links to devices. ``Corpus.fetch`` must
never raise (nor hang), must give either a page or a reason from ``REASONS``, must never give
the secret, and a page it gives was read from a regular file below the corpus root.
"""

from __future__ import annotations

import os
import tempfile

from fuzzing import fuzz
from hypothesis import strategies as st
from test_crawler_containment import HOST, hostile_corpus, no_hang

from cbp_crawl.crawler import REASONS, Corpus

NAMES = [
    "",
    "index.html",
    "ok.html",
    "a",
    "b",
    "page.html",
    "deep.html",
    "d",
    "e",
    "racy",
    "out_file.html",
    "out_dir",
    "private",
    "secret.html",
    "sub",
    "up.html",
    "up_dir",
    "comeback.html",
    "in_file.html",
    "in_dir",
    "in_up.html",
    "abs_in.html",
    "loop.html",
    "fifo.html",
    "fifo_dir",
    "dev_zero.html",
    "dev_null.html",
    "C",
]
DOTS = [
    ".",
    "..",
    "%2e",
    "%2E",
    "%2e%2e",
    "%2E%2E",
    ".%2e",
    "%2e.",
    "%252e%252e",
    "%c0%ae%c0%ae",
    "%c0%2e",
    "%e0%80%ae",
    "..%00",
    "...",
    "..;",
    "..%2f",
    "%2e%2e%2f",
    "%2E%2E%5C",
    "..\\",
    "\\..",
    "%5c..",
    "%2f",
    "%2F",
    "%5c",
    "%5C",
    "%00",
    "\x00",
    "%",
    "%z",
    "%4",
    "%ED%A0%80",
    "%ed%b3%bf",
    "%FF",
    "%C0%AF",
    "\ud800",
    "\udfff",
    "\u202e",
    "\ufeff",
    "\uff0e\uff0e",
    "\u2024\u2024",
    "~",
    ";",
    "%20",
]
SCHEMES = [
    "http",
    "https",
    "HTTP",
    "HtTp",
    "file",
    "ftp",
    "javascript",
    "data",
    "",
    "http:",
    "http:/",
    "jar:file",
    "view-source:http",
]
HOSTS = [
    HOST,
    HOST.upper(),
    f"{HOST}.",
    f"{HOST}:80",
    f"{HOST}:8080",
    f"{HOST}:",
    f"{HOST}:abc",
    f"{HOST}:99999",
    f"user@{HOST}",
    f"{HOST}@evil",
    f"evil@{HOST}",
    f"user:pw@{HOST}",
    "evil",
    "[::1]",
    "[::1",
    "localhost",
    "127.0.0.1",
    "",
    f"{HOST}%00",
    f"{HOST}\x00",
]


def _pct(data: bytes) -> str:
    return "".join(f"%{b:02X}" for b in data)


segments = st.one_of(
    st.sampled_from(NAMES),
    st.sampled_from(DOTS),
    st.text(max_size=12),
    st.binary(max_size=12).map(_pct),
    st.text(alphabet=st.characters(codec="utf-8"), max_size=6).map(lambda s: _pct(s.encode())),
    st.text(alphabet=st.characters(categories=["Cs", "Co", "Cn", "Cc", "Zs"]), max_size=4),
    st.builds(
        lambda c, n: c * n, st.sampled_from(["x", "%41", "é", "/", "a/", "../", "%2e%2e/"]), st.integers(100, 3000)
    ),
)
paths = st.builds(
    lambda segs, sep, tail: sep.join(segs) + tail,
    st.lists(segments, max_size=8),
    st.sampled_from(["/", "/", "/", "//", "\\", "/./"]),
    st.sampled_from(["", "", "/", "?q=1", "#f", "?../../x", "%00", "/%2e%2e"]),
)
urls = st.one_of(
    st.builds(lambda s, h, p: f"{s}://{h}/{p}", st.sampled_from(SCHEMES), st.sampled_from(HOSTS), paths),
    st.builds(lambda h, p: f"http://{h}/{p}", st.sampled_from(HOSTS[:3]), paths),
    st.builds(lambda p: f"http://{HOST}/{p}", paths),
    st.builds(lambda s: f"http://{HOST}/{s}", st.text()),
    st.builds(lambda s: f"http://{HOST}{s}", st.text(max_size=30)),
    st.text(),
    st.sampled_from(
        [
            "file:///etc/passwd",
            "file://h/ok.html",
            f"http://{HOST}",
            f"http://{HOST}/",
            f"http://{HOST}/" + "y" * 100_000,
        ]
    ),
)


def test_fuzz_crawler_url_to_path():
    with tempfile.TemporaryDirectory(prefix="cbp-fuzz-crawler-") as base:
        root, marker = hostile_corpus(base)
        c = Corpus(root, HOST)
        below = c.root + os.sep
        seen = {"html": 0, "reasons": set()}

        def check(url: str) -> None:
            with no_hang(10):
                f = c.fetch(url)
            assert (f.html is None) != (f.reason is None), (url, f)
            if f.reason is not None:
                assert f.reason.startswith(REASONS) and f.path is None, (url, f.reason)
                seen["reasons"].add(f.reason)
                return
            assert marker not in f.html, url
            assert f.path is not None and f.path.startswith(below), (url, f.path)
            real = os.path.realpath(f.path)
            assert real.startswith(below) and os.path.isfile(real), (url, f.path, real)
            seen["html"] += 1

        n = fuzz("crawler-url-to-path", urls, check)
        assert n > 0
        assert seen["html"] and "outside the corpus" in seen["reasons"]  # the strategies reach both sides
