"""The crawler of the crawl-queue loop (paper 001 §1.1): queue in, pages out.

One *round* reads the ``crawl_queue`` records it has not consumed yet, "fetches" the best of
them (at most ``max_pages``, highest score first) from a local corpus that stands for the web,
and lands the fetched pages as the next increment of ``pages``. URLs it cannot fetch (outside
the corpus, missing, not HTML) are recorded with the reason and never tried again.

A corpus is a directory (e.g. an unpacked Debian documentation package) whose files are the
URLs ``http://<host>/<path>``, ``host`` defaulting to the directory's name. Links that leave
the corpus keep their real URLs and are simply unfetchable.

    >>> import cbp
    >>> p = cbp.load("flows/crawl_queue.yaml", home="state/crawl")                   # doctest: +SKIP
    >>> c = Crawler(p, [Corpus("bench/data/python3.11-doc")], max_pages=100)          # doctest: +SKIP
    >>> c.round(seeds=["http://python3.11-doc/usr/share/doc/python3.11/html/index.html"]).line()  # doctest: +SKIP
    'crawl round 1: 0 new in queue, fetched 1 of 1 (0 failed); 0 left in the frontier'
    >>> p.run()                                                                       # doctest: +SKIP

The crawler's position (rounds done, queue epochs consumed, frontier, fetched and failed URLs,
and a log of the rounds: which queue epochs each one had read, what it landed as which feed) is
``<home>/_crawler/state.json``. A round first records what it will fetch, then lands the
pages with the feed id ``crawl:<round>``: a round killed half way is redone identically by the
next call and lands once.
"""

from __future__ import annotations

import codecs
import os
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional
from urllib.parse import unquote, urlsplit

from .errors import UsageError
from .weblinks import normalize_url

if TYPE_CHECKING:
    from .pipeline import Pipeline

__all__ = ["Corpus", "Crawler", "CrawlRound", "decode_html", "MAX_PAGE_BYTES"]

MAX_PAGE_BYTES = 8 * 1024 * 1024  # bytes of a file the crawler reads; a bigger page is truncated
_STATE = "_crawler/state.json"
SEED_SCORE = 1e300  # seeds are fetched before any queued URL
_HTML_SUFFIXES = (".html", ".htm", ".xhtml", ".shtml")
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)


def decode_html(data: bytes) -> str:
    """Bytes of a page -> text, as a browser would guess: BOM, else UTF-8, else the ``<meta charset>``, else windows-1252.

    Never raises; undecodable bytes become U+FFFD.

        >>> decode_html(b"caf\\xc3\\xa9"), decode_html(b'<meta charset="latin-1">caf\\xe9')[-4:]
        ('café', 'café')
        >>> decode_html(b"caf\\xe9 \\x81") == "café \\ufffd"
        True
    """
    for bom, enc in ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")):
        if data.startswith(bom):
            return data[len(bom):].decode(enc, errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    enc = "cp1252"
    m = _META_CHARSET.search(data[:4096])
    if m:
        try:
            enc = codecs.lookup(m.group(1).decode("ascii")).name
        except LookupError:
            pass
    if enc.startswith("utf-16") or enc == "utf-8":  # a page that lies about its encoding
        return data.decode("utf-8", errors="replace")
    return data.decode(enc, errors="replace")


@dataclass(frozen=True)
class Fetched:
    """What fetching one URL gave: the page text, or why there is none."""

    url: str
    html: Optional[str] = None
    reason: Optional[str] = None
    truncated: bool = False


class Corpus:
    """A directory standing for a web site: file ``<root>/<path>`` is URL ``http://<host>/<path>``.

    A URL naming a directory (or ending in ``/``) is its ``index.html``. Only HTML files are
    pages; paths leaving the directory (``..``, symbolic links pointing out) are not found.

        >>> Corpus("/srv/python3.11-doc").host                          # doctest: +SKIP
        'python3.11-doc'
    """

    def __init__(self, root: str | os.PathLike[str], host: Optional[str] = None, scheme: str = "http") -> None:
        self.root = os.path.realpath(os.fspath(root))
        if not os.path.isdir(self.root):
            raise UsageError(f"corpus directory {self.root} does not exist (unpack a package with: dpkg-deb -x PKG.deb DIR)", code="no-corpus")
        self.host = (host or os.path.basename(self.root)).lower()
        self.scheme = scheme
        self.site = f"{scheme}://{self.host}"

    def url_of(self, path: str | os.PathLike[str]) -> str:
        """The URL of a file below the root."""
        rel = os.path.relpath(os.path.realpath(os.fspath(path)), self.root).replace(os.sep, "/")
        url = normalize_url(f"{self.site}/{rel}")
        assert url is not None
        return url

    def pages(self) -> list[str]:
        """URLs of every HTML file of the corpus, sorted."""
        out = []
        for d, _, files in os.walk(self.root):
            out += [self.url_of(os.path.join(d, f)) for f in files if f.lower().endswith(_HTML_SUFFIXES)]
        return sorted(out)

    def fetch(self, url: str, max_bytes: int = MAX_PAGE_BYTES) -> Fetched:
        """The page at ``url``, or a :class:`Fetched` with the reason it cannot be fetched."""
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" != self.site:
            return Fetched(url, reason="outside the corpus")
        rel = unquote(parts.path).lstrip("/")
        path = os.path.realpath(os.path.join(self.root, rel))
        if path != self.root and not path.startswith(self.root + os.sep):
            return Fetched(url, reason="outside the corpus")
        if os.path.isdir(path):
            path = os.path.join(path, "index.html")
        if not os.path.isfile(path):
            return Fetched(url, reason="not found")
        try:
            with open(path, "rb") as fh:
                data = fh.read(max_bytes + 1)
        except OSError as e:
            return Fetched(url, reason=f"unreadable: {e.strerror}")
        head = data[:512].lstrip().lower()
        if not path.lower().endswith(_HTML_SUFFIXES) and not head.startswith((b"<!doctype html", b"<html")):
            return Fetched(url, reason="not HTML")
        return Fetched(url, html=decode_html(data[:max_bytes]), truncated=len(data) > max_bytes)


@dataclass
class CrawlRound:
    """One round: what was new in the queue, what was fetched and landed, what failed."""

    round: int
    queued: int = 0
    picked: list[str] = field(default_factory=list)
    landed: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    truncated: list[str] = field(default_factory=list)
    frontier: int = 0
    increments: list[int] = field(default_factory=list)
    redone: bool = False

    def line(self) -> str:
        """One line for a log."""
        extra = f", {len(self.truncated)} truncated" if self.truncated else ""
        again = " (redone after an interruption)" if self.redone else ""
        return (f"crawl round {self.round}{again}: {self.queued} new in queue, fetched {len(self.landed)} of {len(self.picked)} "
                f"({len(self.failed)} failed{extra}); {self.frontier} left in the frontier")


class Crawler:
    """Runs crawl rounds for a crawl-queue pipeline (see the module docstring).

    ``queue`` is the flow the crawler reads (URL and score records), ``pages`` the external flow
    it lands pages on; ``max_pages`` caps the pages fetched per round.
    """

    def __init__(self, pipeline: "Pipeline", corpora: Iterable[Corpus], *, max_pages: int = 1000, queue: str = "crawl_queue",
                 pages: str = "pages", max_bytes: int = MAX_PAGE_BYTES) -> None:
        self.p = pipeline
        self.corpora = {c.site: c for c in corpora}
        if max_pages < 1:
            raise UsageError(f"max_pages must be at least 1, got {max_pages}", code="bad-option")
        self.max_pages = max_pages
        self.max_bytes = max_bytes
        spec = pipeline.spec
        for name, want, role in ((queue, ("url", "score"), "queue"), (pages, ("url", "html"), "pages")):
            if name not in spec.flows:
                raise UsageError(f"{spec.name}: the crawler's {role} flow '{name}' is not a flow of the pipeline ({', '.join(spec.flows)})", code="unknown-flow")
            missing = [f for f in want if f not in spec.flows[name].schema.fields]
            if missing:
                raise UsageError(f"{spec.name}: flow '{name}' lacks the field(s) {', '.join(missing)} the crawler's {role} flow needs", code="bad-flow")
        if spec.flows[pages].producer is not None:
            raise UsageError(f"{spec.name}: flow '{pages}' is produced by stage '{spec.flows[pages].producer}'; the crawler lands on an external flow", code="bad-flow")
        if spec.flows[queue].producer is None:
            raise UsageError(f"{spec.name}: flow '{queue}' is external; the crawler reads a flow a stage produces", code="bad-flow")
        self.queue, self.pages = queue, pages
        self.producer = spec.flows[queue].producer

    # ------------------------------------------------------------------ state
    def state(self) -> dict[str, Any]:
        """The crawler's position: rounds, queue epochs consumed, frontier, fetched and failed URLs."""
        st = self.p.home.read_json(_STATE)
        return st or {"round": 0, "cursor": 0, "frontier": {}, "fetched": [], "failed": {}, "doing": None, "rounds": []}

    def _save(self, st: dict[str, Any]) -> None:
        self.p.home.write_json(_STATE, st)

    @contextmanager
    def _lock(self) -> Iterator[None]:
        local = self.p.home.local_dir()
        if local is None:
            yield
            return
        import fcntl

        os.makedirs(os.path.join(local, "_crawler"), exist_ok=True)
        fd = os.open(os.path.join(local, "_crawler", "lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(f"another crawler is working on {self.p.home.location}; run one crawler per home", code="busy") from None
            yield
        finally:
            os.close(fd)

    # ------------------------------------------------------------------ a round
    def new_queue_records(self, cursor: int) -> tuple[list[dict[str, Any]], int]:
        """Queue records of the producer's epochs after ``cursor``, and the newest epoch."""
        newest = int(self.p.status()["stages"][self.producer]["epochs"])
        out: list[dict[str, Any]] = []
        for e in range(cursor + 1, newest + 1):
            out += self.p.output(self.queue, epoch=e)
        return out, newest

    def fetch(self, url: str) -> Fetched:
        """Fetch one URL from the corpus that holds its site."""
        corpus = self.corpora.get(f"{urlsplit(url).scheme}://{urlsplit(url).netloc}")
        if corpus is None:
            return Fetched(url, reason="outside the corpus")
        return corpus.fetch(url, self.max_bytes)

    def round(self, seeds: Iterable[str] = ()) -> CrawlRound:
        """Run one crawl round (``seeds`` join the frontier first); lands at most one increment."""
        with self._lock():
            st = self.state()
            redone = st["doing"] is not None
            if not redone:
                k = st["round"] + 1
                done = set(st["fetched"]) | set(st["failed"])
                frontier: dict[str, float] = dict(st["frontier"])
                for s in seeds:
                    u = normalize_url(s)
                    if u is None:
                        raise UsageError(f"seed '{s}' is not an http(s) URL", code="bad-seed")
                    if u not in done:
                        frontier[u] = SEED_SCORE
                records, newest = self.new_queue_records(st["cursor"])
                for r in records:
                    u = r["url"]
                    if u not in done and r["score"] > frontier.get(u, float("-inf")):
                        frontier[u] = float(r["score"])
                picks = sorted(frontier, key=lambda u: (-frontier[u], u))[: self.max_pages]
                for u in picks:
                    del frontier[u]
                st["doing"] = {"round": k, "cursor": newest, "picks": picks, "queued": len(records),
                               "frontier": frontier}
                self._save(st)  # write-ahead: a killed round is redone with exactly these picks
            doing = st["doing"]
            rep = CrawlRound(doing["round"], queued=doing["queued"], picked=list(doing["picks"]), redone=redone)
            pages = []
            for u in doing["picks"]:
                f = self.fetch(u)
                if f.html is None:
                    rep.failed[u] = f.reason or "failed"
                else:
                    pages.append({"url": u, "html": f.html})
                    rep.landed.append(u)
                    if f.truncated:
                        rep.truncated.append(u)
            if pages:
                rep.increments = self.p.feed(self.pages, pages, feed_id=f"crawl:{doing['round']}")
            st["round"] = doing["round"]
            st["cursor"] = doing["cursor"]
            st["frontier"] = doing["frontier"]
            st["fetched"] = st["fetched"] + rep.landed
            st["failed"] = {**st["failed"], **rep.failed}
            st["doing"] = None
            rep.frontier = len(st["frontier"])
            st.setdefault("rounds", []).append({"round": rep.round, "cursor": doing["cursor"], "queued": rep.queued, "picked": len(rep.picked),
                                                "landed": len(rep.landed), "failed": len(rep.failed), "frontier": rep.frontier,
                                                "feed": (self.p.controller.st["flows"][self.pages]["feeds"] if rep.landed else None),
                                                "at": time.strftime("%Y-%m-%dT%H:%M:%S")})
            self._save(st)
            return rep

    def pending(self) -> int:
        """URLs waiting: the frontier plus queue records not consumed yet."""
        st = self.state()
        records, _ = self.new_queue_records(st["cursor"])
        done = set(st["fetched"]) | set(st["failed"])
        return len(set(st["frontier"]) | {r["url"] for r in records if r["url"] not in done})
