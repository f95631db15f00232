"""The crawler stays inside its corpus, and no URL stops it (cbp_crawl/crawler.py).

Escapes first: a file outside the corpus (holding a private marker) must never be read, through
symbolic links (a directory's ``index.html``, a file, a directory, relative or absolute), dot
segments plain or encoded, encoded slashes, other schemes, or a race that swaps a checked name
for a link. FIFOs and devices are refused without being opened. Then hostile URLs: each is
recorded as unfetchable with a stable reason (asserted by prefix, like an error code), and the
crawler keeps crawling -- in later rounds, and when it redoes a round written ahead with one.

Tests of ``Corpus.fetch`` need no Spark; tests that land pages use the session's ``spark``.
"""

from __future__ import annotations

import errno
import os
import signal
import socket
import stat
import uuid
from contextlib import contextmanager

import pytest
from conftest import FLOWS

import cbp
from cbp.cli import main
from cbp.errors import UsageError
from cbp_crawl import fetch as crawler_mod
from cbp_crawl.crawler import REASONS, Corpus, Crawler

CRAWL = FLOWS / "crawl_queue.yaml"
HOST = "h"
GOOD = "<!DOCTYPE html><html><body>an inside page</body></html>"


class Hung(BaseException):
    """A fetch blocked (a BaseException, so that no ``except Exception`` in the crawler can hide it)."""


@contextmanager
def no_hang(seconds: float = 5.0):
    """Fail with :class:`Hung` if the block takes longer than ``seconds`` (a FIFO opened blocking would)."""

    def boom(*_):
        raise Hung(f"blocked for more than {seconds} s")

    old = signal.signal(signal.SIGALRM, boom)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def hostile_corpus(base) -> tuple[str, str]:
    """A corpus ``<base>/C`` (host ``h``) with inside pages and links, and links out to a secret.

    The secret lives in ``<base>/private/`` (mode 0600 file, 0700 directory), holds a random
    marker, and looks like HTML, so only containment keeps it out. Returns ``(root, marker)``.
    """
    base = str(base)
    marker = f"SECRET-{uuid.uuid4().hex}"
    private = os.path.join(base, "private")
    os.makedirs(os.path.join(private, "sub"), mode=0o700)
    for name in ("secret.html", "index.html", "sub/index.html"):
        fd = os.open(os.path.join(private, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(f"<!DOCTYPE html><html><body>{marker}</body></html>")
    root = os.path.join(base, "C")
    for d in ("a/b", "d", "e", "racy"):
        os.makedirs(os.path.join(root, d))
    for name in ("index.html", "ok.html", "a/page.html", "a/b/deep.html", "e/index.html", "racy/page.html"):
        with open(os.path.join(root, name), "w") as fh:
            fh.write(GOOD)
    links = {
        "d/index.html": os.path.join(private, "secret.html"),  # the reported bug: a directory's index.html
        "out_file.html": os.path.join(private, "secret.html"),
        "out_dir": private,
        "a/up.html": "../../private/secret.html",  # relative, climbing out
        "a/b/up_dir": "../../../private",
        "comeback.html": "../C/ok.html",  # climbs above the root and comes back: refused too
        "dev_zero.html": "/dev/zero",
        "dev_null.html": "/dev/null",
        "in_file.html": "a/page.html",  # inside links keep working (Debian doc packages use them)
        "in_dir": "a/b",
        "a/b/in_up.html": "../page.html",
        "abs_in.html": os.path.join(os.path.realpath(root), "ok.html"),
        "loop.html": "loop.html",
    }
    for name, target in links.items():
        os.symlink(target, os.path.join(root, name))
    os.mkfifo(os.path.join(root, "fifo.html"))
    os.makedirs(os.path.join(root, "fifo_dir"))
    os.mkfifo(os.path.join(root, "fifo_dir", "index.html"))
    return root, marker


@pytest.fixture
def corpus(tmp_path):
    root, marker = hostile_corpus(tmp_path)
    return Corpus(root, HOST), marker


def refused(c: Corpus, url: str, prefix: str):
    """Fetch ``url`` (guarded against hanging); it must be refused with a reason starting with ``prefix``."""
    with no_hang():
        f = c.fetch(url)
    assert f.html is None and f.path is None, (url, f.path)
    assert f.reason is not None and f.reason.startswith(prefix), (url, f.reason)
    assert f.reason.startswith(REASONS), f.reason
    return f


def fetched(c: Corpus, url: str):
    with no_hang():
        f = c.fetch(url)
    assert f.reason is None and f.html == GOOD, (url, f.reason)
    assert f.path is not None and os.path.realpath(f.path).startswith(c.root + os.sep) and os.path.isfile(f.path)
    return f


def crawl_home(spark, tmp_path, c: Corpus, max_pages: int = 50):
    p = cbp.load(CRAWL, home=str(tmp_path / "home"), spark=spark)
    return p, Crawler(p, [c], max_pages=max_pages)


def fake_queue(monkeypatch, crawler: Crawler) -> list[list[dict]]:
    """Replace the pipeline's crawl_queue by a list of epochs the test appends to (no Spark run needed)."""
    epochs: list[list[dict]] = []
    monkeypatch.setattr(
        crawler, "new_queue_records", lambda cursor: ([r for e in epochs[cursor:] for r in e], len(epochs))
    )
    return epochs


def landed_html(p) -> dict[str, str]:
    return {r["url"]: r["html"] for r in p.output("pages")}


# ---------------------------------------------------------------- escapes through symbolic links
def test_symlinked_index_html_pointing_outside_is_never_landed(spark, tmp_path, corpus):
    c, marker = corpus
    p, cr = crawl_home(spark, tmp_path, c)
    rep = cr.round(
        seeds=[f"http://{HOST}/d/", f"http://{HOST}/d", f"http://{HOST}/d/index.html", f"http://{HOST}/ok.html"]
    )
    assert rep.landed == [f"http://{HOST}/ok.html"]
    assert rep.failed == {
        u: "outside the corpus" for u in (f"http://{HOST}/d/", f"http://{HOST}/d", f"http://{HOST}/d/index.html")
    }
    pages = landed_html(p)
    assert list(pages) == [f"http://{HOST}/ok.html"]
    assert not any(marker in html for html in pages.values())


def test_cbp_crawl_cli_does_not_land_a_symlinked_index_html(spark, tmp_path, capsys, corpus):
    """The user's reproduction: ``cbp crawl flows/crawl_queue.yaml --corpus C --host h --seed http://h/d/``."""
    c, marker = corpus
    home = str(tmp_path / "home")
    assert (
        main(["crawl", str(CRAWL), "--home", home, "--corpus", c.root, "--host", HOST, "--seed", f"http://{HOST}/d/"])
        == 0
    )
    err = capsys.readouterr().err
    assert f"could not fetch http://{HOST}/d/: outside the corpus" in err
    pages = cbp.load(CRAWL, home=home, spark=spark).output("pages")
    assert not any(marker in r["html"] for r in pages)


def test_symlinked_file_outside_is_refused(corpus):
    c, _ = corpus
    refused(c, f"http://{HOST}/out_file.html", "outside the corpus")


def test_symlinked_directory_outside_is_refused(corpus):
    c, _ = corpus
    for path in ("out_dir/", "out_dir", "out_dir/secret.html", "out_dir/sub/", "a/b/up_dir/secret.html"):
        refused(c, f"http://{HOST}/{path}", "outside the corpus")


def test_relative_symlink_climbing_out_is_refused_even_if_it_comes_back(corpus):
    c, _ = corpus
    refused(c, f"http://{HOST}/a/up.html", "outside the corpus")
    refused(c, f"http://{HOST}/comeback.html", "outside the corpus")


def test_symlinks_inside_the_corpus_keep_working(corpus):
    """Decision: links that stay inside the root are followed (Debian doc packages use them)."""
    c, _ = corpus
    assert fetched(c, f"http://{HOST}/in_file.html").path == os.path.join(c.root, "a", "page.html")
    assert fetched(c, f"http://{HOST}/in_dir/deep.html").path == os.path.join(c.root, "a", "b", "deep.html")
    assert fetched(c, f"http://{HOST}/a/b/in_up.html").path == os.path.join(c.root, "a", "page.html")
    assert fetched(c, f"http://{HOST}/abs_in.html").path == os.path.join(c.root, "ok.html")
    assert fetched(c, f"http://{HOST}/e/").path == os.path.join(c.root, "e", "index.html")


def test_pages_lists_only_regular_files_inside(corpus):
    c, _ = corpus
    assert c.pages() == [
        f"http://{HOST}/{p}"
        for p in ("a/b/deep.html", "a/page.html", "e/index.html", "index.html", "ok.html", "racy/page.html")
    ]


def test_symlink_loop_is_refused(corpus):
    c, _ = corpus
    refused(c, f"http://{HOST}/loop.html", "unreadable: ")


# ---------------------------------------------------------------- escapes through the URL
@pytest.mark.parametrize(
    "path",
    [
        "../private/secret.html",
        "%2e%2e/private/secret.html",
        "%2E%2E/private/secret.html",
        ".%2e/private/secret.html",
        "a/../../private/secret.html",
        "a/%2e%2e/%2e%2e/private/secret.html",
    ],
)
def test_dot_dot_plain_or_encoded_is_refused(corpus, path):
    c, _ = corpus
    f = refused(c, f"http://{HOST}/{path}", "")
    assert f.reason in ("outside the corpus", "not a corpus path: dot segment")


@pytest.mark.parametrize(
    "path",
    ["%2E%2E%2Fprivate%2Fsecret.html", "a%2Fpage.html", "%2e%2e%2f%2e%2e%2fprivate/secret.html", "a%2fb%2Fdeep.html"],
)
def test_encoded_slashes_are_refused(corpus, path):
    c, _ = corpus
    refused(c, f"http://{HOST}/{path}", "not a corpus path: encoded slash")


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "file://h/ok.html",
        "ftp://h/ok.html",
        "javascript:alert(1)",
        "h/ok.html",
        "//h/ok.html",
        "http:///ok.html",
    ],
)
def test_file_urls_and_other_schemes_are_refused(corpus, url):
    c, _ = corpus
    refused(c, url, "not a corpus path: not an http(s) URL")


def test_other_sites_ports_and_user_info_are_refused(corpus):
    c, _ = corpus
    refused(c, "http://other.example/ok.html", "outside the corpus")
    refused(c, f"https://{HOST}/ok.html", "outside the corpus")
    refused(c, f"http://{HOST}:8080/ok.html", "not a corpus path: a port")
    refused(c, f"http://{HOST}:80/ok.html", "not a corpus path: a port")
    refused(c, f"http://user:pw@{HOST}/ok.html", "not a corpus path: user info")
    refused(c, f"http://{HOST}@other.example/ok.html", "not a corpus path: user info")
    fetched(
        c, f"HTTP://{HOST.upper()}/ok.html?q=1#frag"
    )  # scheme and host are case-insensitive; query, fragment ignored


# ---------------------------------------------------------------- FIFOs, devices, sockets
def test_fifo_is_refused_without_hanging(corpus):
    c, _ = corpus
    refused(c, f"http://{HOST}/fifo.html", "not a regular file")
    refused(c, f"http://{HOST}/fifo_dir/", "not a regular file")  # a FIFO as a directory's index.html


def test_symlinks_to_devices_are_refused(corpus):
    c, _ = corpus
    refused(c, f"http://{HOST}/dev_zero.html", "outside the corpus")
    refused(c, f"http://{HOST}/dev_null.html", "outside the corpus")


def test_devices_inside_a_corpus_are_never_opened():
    dev = Corpus("/dev", "dev")
    for name in ("zero", "null", "urandom"):
        assert stat.S_ISCHR(os.lstat(f"/dev/{name}").st_mode)
        refused(dev, f"http://dev/{name}", "not a regular file")


def test_socket_is_refused(corpus):
    c, _ = corpus
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(os.path.join(c.root, "sock.html"))
        refused(c, f"http://{HOST}/sock.html", "not a regular file")


# ---------------------------------------------------------------- hostile URL text
@pytest.mark.parametrize(
    "path,why",
    [
        ("%00", "NUL byte"),
        ("ok.html%00", "NUL byte"),
        ("ok.html%00.txt", "NUL byte"),
        ("ok\x00.html", "NUL byte"),
        ("%zz.html", "bad percent-encoding"),
        ("ok.html%", "bad percent-encoding"),
        ("ok%4.html", "bad percent-encoding"),
        ("x" * 300 + ".html", "name too long"),
        ("%41" * 300, "name too long"),
        ("a/" * 2100 + "ok.html", "too long"),
        ("%ED%A0%80", "not UTF-8"),
        ("%ed%b3%bf.html", "not UTF-8"),
        ("%C0%AE%C0%AE/private/secret.html", "not UTF-8"),
        ("%FF.html", "not UTF-8"),
        ("\ud800.html", "not valid Unicode"),
        ("a\\..\\..\\private\\secret.html", "backslash"),
        ("a%5Cpage.html", "backslash"),
        ("./ok.html", "dot segment"),
        ("a/%2e/page.html", "dot segment"),
    ],
)
def test_hostile_url_paths_get_a_reason_and_never_raise(corpus, path, why):
    c, _ = corpus
    refused(c, f"http://{HOST}/{path}", f"not a corpus path: {why}")


def test_over_long_url_is_refused():
    c = Corpus(os.path.dirname(__file__), HOST)
    refused(c, f"http://{HOST}/" + "x" * 100_000, "not a corpus path: too long")
    refused(c, f"http://{HOST}/" + "a/" * 30_000, "not a corpus path: too long")


@pytest.mark.parametrize(
    "url", [None, 5, b"http://h/ok.html", "", "http://[::1", "http://h\x00/ok.html", "\ud800", "http://\uff0e\uff0e/"]
)
def test_anything_at_all_gets_a_reason(corpus, url):
    c, _ = corpus
    f = c.fetch(url)
    assert f.html is None and f.reason.startswith(REASONS), (url, f.reason)


def test_crawler_fetch_never_raises_either(spark, tmp_path, corpus):
    c, _ = corpus
    _, cr = crawl_home(spark, tmp_path, c)
    for url in (
        None,
        "http://[::1",
        "mailto:x@y",
        f"http://{HOST}/%00",
        f"http://{HOST}:81/ok.html",
        f"http://u@{HOST}/ok.html",
    ):
        assert cr.fetch(url).reason.startswith(REASONS), url
    assert cr.fetch(f"http://{HOST}:81/ok.html").reason == "not a corpus path: a port"
    assert cr.fetch(f"http://{HOST}/ok.html").html == GOOD


# ---------------------------------------------------------------- races: a name swapped between the check and the open
def _swap_after_lstat(monkeypatch, name: str, swap):
    """After the crawler's lstat of ``name`` (the first time), run ``swap()``: the check has passed, the open is
    next."""
    real = crawler_mod._lstat_at
    done = []

    def racing(n, dir_fd):
        st = real(n, dir_fd)
        if n == name and not done:
            done.append(1)
            swap()
        return st

    monkeypatch.setattr(crawler_mod, "_lstat_at", racing)
    return done


def _replace_with_symlink(path: str, target: str) -> None:
    tmp = path + ".swap"
    os.symlink(target, tmp)
    os.replace(tmp, path)


def test_file_swapped_for_a_symlink_after_the_check_is_not_followed(monkeypatch, corpus, tmp_path):
    c, _ = corpus
    page = os.path.join(c.root, "racy", "page.html")
    done = _swap_after_lstat(
        monkeypatch, "page.html", lambda: _replace_with_symlink(page, str(tmp_path / "private" / "secret.html"))
    )
    refused(
        c, f"http://{HOST}/racy/page.html", "outside the corpus"
    )  # O_NOFOLLOW refused the link; looked again, saw it leave
    assert done


def test_directory_swapped_for_a_symlink_after_the_check_is_not_followed(monkeypatch, corpus, tmp_path):
    c, marker = corpus
    (tmp_path / "private" / "page.html").write_text(f"<html>{marker}</html>")  # what the swapped-in link would reach

    def swap():
        os.rename(os.path.join(c.root, "racy"), os.path.join(c.root, "racy.old"))
        os.symlink(str(tmp_path / "private"), os.path.join(c.root, "racy"))

    done = _swap_after_lstat(monkeypatch, "racy", swap)
    refused(c, f"http://{HOST}/racy/page.html", "outside the corpus")  # O_DIRECTORY|O_NOFOLLOW refused it; looked again
    assert done


def test_file_swapped_for_a_fifo_after_the_check_is_refused_without_hanging(monkeypatch, corpus):
    c, _ = corpus
    page = os.path.join(c.root, "racy", "page.html")

    def swap():
        os.unlink(page)
        os.mkfifo(page)

    done = _swap_after_lstat(monkeypatch, "page.html", swap)
    refused(c, f"http://{HOST}/racy/page.html", "not a regular file")  # opened O_NONBLOCK, then fstat said FIFO
    assert done


def test_the_open_itself_refuses_a_symlink_even_if_the_check_is_fooled(monkeypatch, corpus):
    """O_NOFOLLOW at the final component: even an lstat that always says "regular file" cannot make it follow a link."""
    c, _ = corpus
    regular = os.stat(os.path.join(c.root, "ok.html"))
    monkeypatch.setattr(
        crawler_mod,
        "_lstat_at",
        lambda n, dir_fd: regular if n == "out_file.html" else os.stat(n, dir_fd=dir_fd, follow_symlinks=False),
    )
    refused(c, f"http://{HOST}/out_file.html", "unreadable: ")
    dir_fd = os.open(c.root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as e:
            crawler_mod._open_at("out_file.html", crawler_mod._FILE_FLAGS, dir_fd)
        assert e.value.errno == errno.ELOOP
        with pytest.raises(OSError) as e:
            crawler_mod._open_at("out_dir", crawler_mod._DIR_FLAGS, dir_fd)
        assert e.value.errno in (errno.ELOOP, errno.ENOTDIR)
    finally:
        os.close(dir_fd)


def test_directory_moved_out_of_the_corpus_while_opening_is_refused(monkeypatch, corpus, tmp_path):
    """The opened file's real path is checked after the open: a parent moved out meanwhile is caught."""
    c, _ = corpus
    real = crawler_mod._open_at

    def moving(name, flags, dir_fd):
        fd = real(name, flags, dir_fd)
        if name == "page.html":
            os.rename(os.path.join(c.root, "racy"), str(tmp_path / "private" / "racy"))
        return fd

    monkeypatch.setattr(crawler_mod, "_open_at", moving)
    refused(c, f"http://{HOST}/racy/page.html", "outside the corpus")


# ---------------------------------------------------------------- one bad URL never stops the crawler
BAD = [
    f"http://{HOST}/%00",
    f"http://{HOST}/ok.html%00",
    f"http://{HOST}/%zz",
    f"http://{HOST}/%ED%A0%80",
    f"http://{HOST}/" + "y" * 300,
    f"http://{HOST}/%2e%2e/private/secret.html",
    f"http://{HOST}/a%2Fpage.html",
    f"http://{HOST}/fifo.html",
    f"http://{HOST}/d/",
    "file:///etc/passwd",
    f"http://{HOST}:8080/ok.html",
    f"http://u@{HOST}/ok.html",
    "not a url",
    "http://[::1",
    f"http://{HOST}/\ud800",
]


def test_nul_in_a_seed_is_recorded_as_unfetchable(spark, tmp_path, corpus):
    c, _ = corpus
    p, cr = crawl_home(spark, tmp_path, c)
    rep = cr.round(seeds=[f"http://{HOST}/%00", f"http://{HOST}/ok\x00.html", f"http://{HOST}/ok.html"])
    assert rep.failed == {
        f"http://{HOST}/%00": "not a corpus path: NUL byte",
        f"http://{HOST}/ok%00.html": "not a corpus path: NUL byte",
    }
    assert rep.landed == [f"http://{HOST}/ok.html"] and list(landed_html(p)) == rep.landed
    assert cr.state()["doing"] is None
    with pytest.raises(
        UsageError
    ) as e:  # a seed that is not an http(s) URL stays a usage error, before anything is written
        cr.round(seeds=["file:///etc/passwd"])
    assert e.value.code == "bad-seed"
    with pytest.raises(UsageError) as e:
        cr.round(seeds=[f"http://{HOST}/\ud800"])
    assert e.value.code == "bad-seed"
    assert cr.state()["round"] == 1 and cr.state()["doing"] is None


def test_queued_hostile_urls_fail_with_reasons_and_later_rounds_still_land(spark, tmp_path, monkeypatch, corpus):
    c, marker = corpus
    p, cr = crawl_home(spark, tmp_path, c)
    queue = fake_queue(monkeypatch, cr)
    queue.append([{"url": u, "score": 100.0} for u in BAD] + [{"url": f"http://{HOST}/ok.html", "score": 1.0}])
    rep1 = cr.round()
    assert rep1.landed == [f"http://{HOST}/ok.html"] and set(rep1.failed) == set(BAD)
    assert all(why.startswith(REASONS) for why in rep1.failed.values()), rep1.failed
    assert rep1.failed[f"http://{HOST}/%00"] == "not a corpus path: NUL byte"
    queue.append(
        [
            {"url": f"http://{HOST}/a/page.html", "score": 5.0},
            {"url": BAD[0], "score": 9.0},
            {"url": None, "score": 1.0},
            {"url": f"http://{HOST}/%00x", "score": None},
        ]
    )
    rep2 = cr.round()
    assert (
        rep2.round == 2
        and rep2.landed == [f"http://{HOST}/a/page.html"]
        and rep2.failed == {f"http://{HOST}/%00x": "not a corpus path: NUL byte"}
    )
    queue.append([{"url": f"http://{HOST}/a/b/deep.html", "score": 5.0}, {"url": f"http://{HOST}/%2F", "score": 6.0}])
    rep3 = cr.round()
    assert rep3.round == 3 and rep3.landed == [f"http://{HOST}/a/b/deep.html"]
    pages = landed_html(p)
    assert set(pages) == {f"http://{HOST}/ok.html", f"http://{HOST}/a/page.html", f"http://{HOST}/a/b/deep.html"}
    assert not any(marker in h for h in pages.values())
    st = cr.state()
    assert st["round"] == 3 and st["doing"] is None and set(BAD) <= set(st["failed"])


def test_a_round_written_ahead_with_a_bad_pick_is_redone(spark, tmp_path, corpus):
    c, _ = corpus
    p, cr = crawl_home(spark, tmp_path, c)
    cr.round(seeds=[f"http://{HOST}/ok.html"])
    st = cr.state()
    # written ahead by a crawler that then died (before this fix, the redo raised on the first pick, forever)
    st["doing"] = {"round": 2, "cursor": 0, "picks": BAD + [f"http://{HOST}/a/page.html"], "queued": 0, "frontier": {}}
    p.home.write_json("_crawler/state.json", st)
    rep = cr.round()
    assert (
        rep.redone and rep.round == 2 and rep.landed == [f"http://{HOST}/a/page.html"] and set(rep.failed) == set(BAD)
    )
    assert cr.state()["doing"] is None and cr.state()["round"] == 2
    assert set(landed_html(p)) == {f"http://{HOST}/ok.html", f"http://{HOST}/a/page.html"}


def test_a_pick_whose_fetch_raises_fails_alone(spark, tmp_path, monkeypatch, corpus):
    """Belt and braces: should a fetch ever raise, that pick is recorded as failed and the round completes."""
    c, _ = corpus
    p, cr = crawl_home(spark, tmp_path, c)
    real = cr.fetch

    def fetch(url):
        if url.endswith("boom.html"):
            raise RuntimeError("boom")
        return real(url)

    monkeypatch.setattr(cr, "fetch", fetch)
    rep = cr.round(seeds=[f"http://{HOST}/boom.html", f"http://{HOST}/ok.html"])
    assert rep.failed == {f"http://{HOST}/boom.html": "failed: RuntimeError"} and rep.landed == [
        f"http://{HOST}/ok.html"
    ]
    assert cr.state()["doing"] is None
