"""The crawler of the crawl-queue loop (paper 001 §1.1): queue in, pages out.

One *round* reads the ``crawl_queue`` records it has not consumed yet, "fetches" the best of
them (at most ``max_pages``, highest score first) from a local corpus that stands for the web,
and lands the fetched pages as the next increment of ``pages``. URLs it cannot fetch (outside
the corpus, missing, not HTML, not a corpus path at all) are recorded with the reason (a stable
prefix from :data:`REASONS`) and never tried again; no URL, however hostile, makes a round fail.

A corpus is a directory (e.g. an unpacked Debian documentation package) whose files are the
URLs ``http://<host>/<path>``, ``host`` defaulting to the directory's name. Links that leave
the corpus keep their real URLs and are simply unfetchable. Nothing outside the directory is
ever opened, whatever the URL or the symbolic links in the directory (see :class:`Corpus`).

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
import errno
import os
import re
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Optional
from urllib.parse import unquote_to_bytes, urlsplit

from ..errors import UsageError
from .links import normalize_url

if TYPE_CHECKING:
    from ..pipeline import Pipeline

__all__ = ["Corpus", "Crawler", "CrawlRound", "Fetched", "decode_html", "MAX_PAGE_BYTES", "MAX_URL_CHARS", "REASONS"]

MAX_PAGE_BYTES = 8 * 1024 * 1024  # bytes of a file the crawler reads; a bigger page is truncated
MAX_URL_CHARS = 64 * 1024  # a longer URL is "not a corpus path: too long"
NOT_A_PATH = "not a corpus path: "
# Why a URL was not fetched: stable prefixes (what follows a colon says more), like error codes.
REASONS = (
    "outside the corpus",  # another site, or a path (through "..", a symbolic link) leaving the root
    "not found",  # no such file (or a file used as a directory)
    "not a regular file",  # a FIFO, device or socket: refused without being opened
    "not HTML",  # neither an .html/.htm/.xhtml/.shtml name nor starting with <!doctype html / <html
    NOT_A_PATH,  # + why: NUL byte, bad percent-encoding, encoded slash, backslash, dot segment, not UTF-8,
    #              not valid Unicode, name too long, too long, not an http(s) URL, malformed URL, a port,
    #              user info, not a string
    "unreadable: ",  # + the OS's message (permission denied, too many levels of symbolic links, I/O error)
    "failed: ",  # + an exception type: anything else that went wrong for this one URL
)
_NAME_MAX = 255  # bytes of one file name
_PATH_MAX = 4096  # bytes of a path below the root
_MAX_HOPS = 40  # symbolic links followed (and races retried) in one fetch, as the kernel's ELOOP limit
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
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
    """What fetching one URL gave: the page text, or why there is none (see :data:`REASONS`).

    ``path`` is the file that was read (symbolic links resolved, always below the corpus root).
    """

    url: str
    html: Optional[str] = None
    reason: Optional[str] = None
    truncated: bool = False
    path: Optional[str] = None


class _Refused(Exception):
    """Internal: fetching stops here, for this reason."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _reason_of(e: BaseException) -> str:
    """The stable reason for an error of the filesystem or of decoding."""
    if isinstance(e, _Refused):
        return e.reason
    if isinstance(e, OSError):
        if e.errno in (errno.ENOENT, errno.ENOTDIR):
            return "not found"
        if e.errno == errno.ENAMETOOLONG:
            return f"{NOT_A_PATH}name too long"
        return f"unreadable: {e.strerror or type(e).__name__}"
    if isinstance(e, UnicodeError):
        return f"{NOT_A_PATH}not valid Unicode"
    if isinstance(e, ValueError):  # e.g. "embedded null byte"
        return f"{NOT_A_PATH}{e}"
    return f"failed: {type(e).__name__}"


_BAD_PCT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def _split(url: Any) -> tuple[str, str, str]:
    """``(scheme, netloc, path)`` of an http(s) URL; raises :class:`_Refused` for anything else."""
    if not isinstance(url, str):
        raise _Refused(f"{NOT_A_PATH}not a string")
    if len(url) > MAX_URL_CHARS:
        raise _Refused(f"{NOT_A_PATH}too long")
    try:
        parts = urlsplit(url)
        scheme = parts.scheme.lower()
    except ValueError:  # e.g. "http://[::1", or a host that is not a host under NFKC
        raise _Refused(f"{NOT_A_PATH}malformed URL") from None
    if scheme not in ("http", "https") or not parts.netloc:
        raise _Refused(f"{NOT_A_PATH}not an http(s) URL")
    return scheme, parts.netloc, parts.path


def _components(path: str) -> list[str]:
    """The file names a URL path walks through from the corpus root (``[]`` for the root).

    Refuses (:class:`_Refused`) what cannot be a corpus path: dot segments (plain or encoded),
    encoded slashes, backslashes, NUL, bad %-encoding, names that are not UTF-8 (encoded
    surrogates, overlong forms), names over 255 bytes, paths over 4096 bytes. Nothing is
    resolved here: the filesystem is asked only for a list of plain names.
    """
    if "\\" in path:
        raise _Refused(f"{NOT_A_PATH}backslash")
    out: list[str] = []
    total = 0
    for seg in path.split("/"):
        if not seg:
            continue  # "//" is "/", as web servers read it
        if "%" in seg and _BAD_PCT.search(seg):
            raise _Refused(f"{NOT_A_PATH}bad percent-encoding")
        try:
            raw = unquote_to_bytes(seg.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate in the URL itself
            raise _Refused(f"{NOT_A_PATH}not valid Unicode") from None
        if b"\x00" in raw:
            raise _Refused(f"{NOT_A_PATH}NUL byte")
        if b"/" in raw:
            raise _Refused(f"{NOT_A_PATH}encoded slash")
        if b"\\" in raw:
            raise _Refused(f"{NOT_A_PATH}backslash")
        if len(raw) > _NAME_MAX:
            raise _Refused(f"{NOT_A_PATH}name too long")
        total += len(raw) + 1
        if total > _PATH_MAX:
            raise _Refused(f"{NOT_A_PATH}too long")
        try:
            name = raw.decode("utf-8")  # strict: no surrogates (%ED%A0%80), no overlong forms (%C0%AE)
        except UnicodeDecodeError:
            raise _Refused(f"{NOT_A_PATH}not UTF-8") from None
        if name == "..":
            raise _Refused("outside the corpus" if not out else f"{NOT_A_PATH}dot segment")
        if name == ".":
            raise _Refused(f"{NOT_A_PATH}dot segment")
        out.append(name)
    return out


# Hooks for the tests of races: every filesystem call of a fetch goes through these two.
def _lstat_at(name: str, dir_fd: int) -> os.stat_result:
    return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)


def _open_at(name: str, flags: int, dir_fd: int) -> int:
    return os.open(name, flags, dir_fd=dir_fd)


class Corpus:
    """A directory standing for a web site: file ``<root>/<path>`` is URL ``http://<host>/<path>``.

    A URL naming a directory (or ending in ``/``) is its ``index.html``. Only regular HTML files
    are pages. Nothing outside the root is ever opened: the path is walked one name at a time
    from the root, each directory opened with ``O_NOFOLLOW`` relative to the one before, the
    file itself with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO or device is refused, never opened
    blocking), and the opened file's real path is checked to be below the root. Symbolic
    links are followed only while they stay inside the root (resolved against the root, like
    the rest of the path); a link pointing out of it -- absolute or with ``..`` climbing above
    the root -- is "outside the corpus". :meth:`fetch` never raises.

        >>> Corpus("/srv/python3.11-doc").host                          # doctest: +SKIP
        'python3.11-doc'
    """

    def __init__(self, root: str | os.PathLike[str], host: Optional[str] = None, scheme: str = "http") -> None:
        self.root = os.path.realpath(os.fspath(root))
        if not os.path.isdir(self.root):
            raise UsageError(f"corpus directory {self.root} does not exist (unpack a package with: dpkg-deb -x PKG.deb DIR)", code="no-corpus")
        self._below = self.root.rstrip(os.sep) + os.sep  # what the path of anything inside starts with
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
        """URLs of every HTML file of the corpus (regular files inside the root), sorted."""
        out = set()
        for d, _, files in os.walk(self.root):
            for f in files:
                path = os.path.join(d, f)
                if not f.lower().endswith(_HTML_SUFFIXES) or not self._inside(os.path.realpath(path)) or not os.path.isfile(path):
                    continue
                try:
                    out.add(self.url_of(path))
                except (ValueError, AssertionError):  # a name that is not UTF-8 has no URL
                    continue
        return sorted(out)

    def _inside(self, real: str) -> bool:
        return real == self.root or real.startswith(self._below)

    def fetch(self, url: str, max_bytes: int = MAX_PAGE_BYTES) -> Fetched:
        """The page at ``url``, or a :class:`Fetched` with the reason it cannot be fetched.

        Never raises, whatever the string (reasons: :data:`REASONS`). The query and fragment
        are ignored; host and scheme compare case-insensitively; a port or user info is refused.
        """
        try:
            names = self._names(url)
            fd, path = self._open(names)
            try:
                with os.fdopen(fd, "rb", closefd=True) as fh:
                    data = fh.read(max(0, max_bytes) + 1)
            except OSError as e:
                raise _Refused(f"unreadable: {e.strerror or type(e).__name__}") from None
            head = data[:512].lstrip().lower()
            if not path.lower().endswith(_HTML_SUFFIXES) and not head.startswith((b"<!doctype html", b"<html")):
                return Fetched(url, reason="not HTML")
            return Fetched(url, html=decode_html(data[:max_bytes]), truncated=len(data) > max_bytes, path=path)
        except Exception as e:  # noqa: BLE001 -- a URL is recorded as unfetchable, it never stops the crawler
            return Fetched(url, reason=_reason_of(e))

    def _names(self, url: Any) -> list[str]:
        """The names ``url`` walks through below the root; raises :class:`_Refused`."""
        scheme, netloc, path = _split(url)
        if netloc.lower() != self.host or scheme != self.scheme:
            if "@" in netloc:
                raise _Refused(f"{NOT_A_PATH}user info")
            if scheme == self.scheme and netloc.rpartition(":")[0].lower() == self.host:
                raise _Refused(f"{NOT_A_PATH}a port")
            raise _Refused("outside the corpus")
        return _components(path)

    def _open(self, names: list[str]) -> tuple[int, str]:
        """Open the regular file ``names`` lead to from the root, never leaving it: ``(fd, real path)``."""
        todo = list(names)
        if not todo:
            todo = ["index.html"]
        root_fd = os.open(self.root, _DIR_FLAGS)
        fds = [root_fd]  # fds[i]: the directory reached by done[:i]
        done: list[str] = []
        hops = 0
        try:
            while True:
                name = todo.pop(0)
                last = not todo
                try:
                    st = _lstat_at(name, fds[-1])
                except OSError as e:
                    raise _Refused(_reason_of(e)) from None
                if stat.S_ISLNK(st.st_mode):
                    hops += 1
                    if hops > _MAX_HOPS:
                        raise _Refused(f"unreadable: {os.strerror(errno.ELOOP)}")
                    try:
                        target = os.readlink(name, dir_fd=fds[-1])
                    except OSError as e:
                        if e.errno == errno.EINVAL:  # no longer a link: look again
                            todo.insert(0, name)
                            continue
                        raise _Refused(_reason_of(e)) from None
                    todo = self._through_link(target, done) + todo
                    for fd in fds[1:]:
                        os.close(fd)
                    fds, done = [root_fd], []  # walk the resolved path again from the root
                    if not todo:
                        todo = ["index.html"]
                    continue
                flags = _DIR_FLAGS if stat.S_ISDIR(st.st_mode) else _FILE_FLAGS
                if not stat.S_ISDIR(st.st_mode):
                    if not last:
                        raise _Refused("not found")  # a file used as a directory
                    if not stat.S_ISREG(st.st_mode):
                        raise _Refused("not a regular file")  # FIFO, device, socket: never opened
                try:
                    fd = _open_at(name, flags, fds[-1])
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.ENXIO) and hops < _MAX_HOPS:
                        hops += 1  # swapped between lstat and open (e.g. for a symlink): look again
                        todo.insert(0, name)
                        continue
                    raise _Refused(_reason_of(e)) from None
                if stat.S_ISDIR(st.st_mode):
                    fds.append(fd)
                    done.append(name)
                    if last:
                        todo.append("index.html")  # a directory is its index.html, walked like any name
                    continue
                try:
                    fst = os.fstat(fd)
                    if not stat.S_ISREG(fst.st_mode):
                        raise _Refused("not a regular file")
                    path = os.path.join(self.root, *done, name)
                    self._check_opened(fd, fst, path)
                except BaseException:
                    os.close(fd)
                    raise
                return fd, path
        finally:
            for fd in fds:
                os.close(fd)

    def _through_link(self, target: str, done: list[str]) -> list[str]:
        """The names below the root a symbolic link in directory ``done`` points to; outside -> refused."""
        if target.startswith("/"):
            if not self._inside(target):
                raise _Refused("outside the corpus")  # absolute links are read against the real root: this one leaves
            base: list[str] = []
            target = target[len(self._below):]
        else:
            base = list(done)
        for seg in target.split("/"):
            if seg in ("", "."):
                continue
            if seg == "..":
                if not base:
                    raise _Refused("outside the corpus")  # climbs above the root, even if it would come back
                base.pop()
            else:
                base.append(seg)
        return base

    def _check_opened(self, fd: int, fst: os.stat_result, path: str) -> None:
        """The opened file really is below the root now (a directory may have been moved out meanwhile)."""
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            real = ""
        if real.startswith("/"):
            if not self._inside(real):
                raise _Refused("outside the corpus")
            return
        real = os.path.realpath(path)  # no /proc: the path must still resolve inside, to this very file
        st = os.stat(real)
        if not self._inside(real) or (st.st_dev, st.st_ino) != (fst.st_dev, fst.st_ino):
            raise _Refused("outside the corpus")


def _score(value: Any) -> float:
    """A queue record's score as a number (one that is not a number ranks last: -inf)."""
    try:
        score = float(value)
    except (TypeError, ValueError):
        return float("-inf")
    return score if score == score else float("-inf")


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
        """Fetch one URL from the corpus that holds its site; never raises (reasons: :data:`REASONS`)."""
        try:
            scheme, netloc, _ = _split(url)
            host = netloc.lower()
            corpus = self.corpora.get(f"{scheme}://{host}") or next(
                (c for c in self.corpora.values() if c.scheme == scheme and c.host in (host.rpartition("@")[2], host.rpartition(":")[0])), None)
            if corpus is None:
                return Fetched(url, reason="outside the corpus")
            return corpus.fetch(url, self.max_bytes)  # says why a port or user info is refused
        except Exception as e:  # noqa: BLE001 -- one URL never stops the crawler
            return Fetched(url, reason=_reason_of(e))

    def round(self, seeds: Iterable[str] = ()) -> CrawlRound:
        """Run one crawl round (``seeds`` join the frontier first); lands at most one increment."""
        with self._lock():
            st = self.state()
            redone = st["doing"] is not None
            if not redone:
                k = st["round"] + 1
                done = set(st["fetched"]) | set(st["failed"])
                frontier: dict[str, float] = dict(st["frontier"])
                for s in seeds:  # a seed is the user's: a bad one is a usage error, before anything is written
                    try:
                        u = normalize_url(s) if isinstance(s, str) else None
                    except ValueError:  # e.g. a lone surrogate
                        u = None
                    if u is None:
                        raise UsageError(f"seed {s!r} is not an http(s) URL", code="bad-seed")
                    if u not in done:
                        frontier[u] = SEED_SCORE
                records, newest = self.new_queue_records(st["cursor"])
                for r in records:  # a queued URL is never an error: at worst it is fetched and fails with a reason
                    u, score = r.get("url"), _score(r.get("score"))
                    if isinstance(u, str) and u not in done and (u not in frontier or score > frontier[u]):
                        frontier[u] = score
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
                try:
                    f = self.fetch(u)
                except Exception as e:  # noqa: BLE001 -- fetch never raises; if it did, this pick fails, not the round
                    f = Fetched(u, reason=_reason_of(e))
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
                                                "feed": (self.p.feeds(self.pages) if rep.landed else None),
                                                "at": time.strftime("%Y-%m-%dT%H:%M:%S")})
            self._save(st)
            return rep

    def pending(self) -> int:
        """URLs waiting: the frontier plus queue records not consumed yet."""
        st = self.state()
        records, _ = self.new_queue_records(st["cursor"])
        done = set(st["fetched"]) | set(st["failed"])
        return len(set(st["frontier"]) | {r["url"] for r in records if r["url"] not in done})
