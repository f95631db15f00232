"""Fetching a URL from a corpus directory that stands for the web, never outside it.

A corpus is a directory (e.g. an unpacked Debian documentation package) whose files are the
URLs ``http://<host>/<path>``. The path is walked from the root one name at a time, each opened
relative to its parent with ``O_NOFOLLOW`` (a directory's ``index.html`` too); symbolic links are
followed only while they stay inside; FIFOs, devices and sockets are never opened. No URL makes
:meth:`Corpus.fetch` raise: one that cannot be fetched gets a reason from :data:`REASONS`.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlsplit

from cbp import UsageError

from .decode import decode_html
from .links import normalize_url

__all__ = ["Corpus", "Fetched", "decode_html", "is_host_name", "MAX_PAGE_BYTES", "MAX_URL_CHARS", "REASONS"]

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
_MAX_REREADS = 4  # reads of a file that changes while it is read, before giving up for this round
_MAX_HOPS = 40  # symbolic links followed (and races retried) in one fetch, as the kernel's ELOOP limit
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_NAME_SAFE = "/!$&'()*+,;=:@[]^|~"  # kept as they are in a file's URL (a WHATWG URL path keeps them); others %-encoded
_HTML_SUFFIXES = (".html", ".htm", ".xhtml", ".shtml")


@dataclass(frozen=True)
class Fetched:
    """What fetching one URL gave: the page text, or why there is none (see :data:`REASONS`).
    ``url`` is where the page is (the URL asked for, or a directory's with its trailing ``/``).

    ``path`` is the file that was read (symbolic links resolved, always below the corpus root).
    """

    url: str
    html: str | None = None
    reason: str | None = None
    truncated: bool = False
    path: str | None = None
    #: the file's ``(mtime_ns, size, inode)`` when it was read: its Last-Modified (see :meth:`Corpus.fetch`)
    stamp: tuple[int, int, int] | None = None
    #: SHA-256 (hex) of the bytes read: what decides whether a page changed
    digest: str | None = None
    #: a conditional fetch whose file has the stamp given: nothing was read (an HTTP 304)
    not_modified: bool = False


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


#: A host name a corpus can stand for (the URLs of its pages are http://HOST/PATH).
def is_host_name(host: str, scheme: str = "http") -> bool:
    """Whether ``host`` can name a corpus: a lower-case host name that URLs keep as it is (not one
    a URL parser reads as a number, such as ``2024`` or ``0x7f``).

        >>> is_host_name("python3.11-doc"), is_host_name("2024"), is_host_name("a b")
        (True, False, False)
    """
    return bool(_HOST.match(host)) and normalize_url(f"{scheme}://{host}/") == f"{scheme}://{host}/"


_HOST = re.compile(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*\Z")
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

    Example::

        Corpus("/srv/python3.11-doc").host
        # 'python3.11-doc'
    """

    def __init__(self, root: str | os.PathLike[str], host: str | None = None, scheme: str = "http") -> None:
        given = os.fspath(root)
        try:
            self.root = os.path.realpath(given) if given.strip() else ""
        except (ValueError, OSError):  # a NUL in the name
            self.root = ""
        if not self.root or not os.path.isdir(self.root):
            what = "is not a directory" if self.root and os.path.exists(self.root) else "does not exist"
            raise UsageError(
                f"corpus directory {given!r} {what} (unpack a package with: dpkg-deb -x PKG.deb DIR)", code="no-corpus"
            )
        self._below = self.root.rstrip(os.sep) + os.sep  # what the path of anything inside starts with
        self.host = (host or os.path.basename(self.root)).lower()
        if not is_host_name(self.host, scheme):
            raise UsageError(
                f"corpus {self.root}: {self.host!r} is not a host name URLs keep as it is "
                "(letters, digits, '-' and '.', not all digits); give one with --host NAME",
                code="bad-host",
            )
        self.scheme = scheme
        self.site = f"{scheme}://{self.host}"

    def url_of(self, path: str | os.PathLike[str]) -> str:
        """The URL of a file below the root (its names %-encoded where a URL path needs it).

        >>> c = Corpus(os.path.dirname(__file__), host="h")
        >>> c.url_of(os.path.join(c.root, "100% a?b#c (é).html"))
        'http://h/100%25%20a%3Fb%23c%20(%C3%A9).html'
        """
        rel = os.path.relpath(os.path.realpath(os.fspath(path)), self.root).replace(os.sep, "/")
        url = normalize_url(
            f"{self.site}/{quote(rel, safe=_NAME_SAFE)}"
        )  # a name with "?", "#" or "%" is still that file
        assert url is not None
        return url

    def pages(self) -> list[str]:
        """URLs of every HTML file of the corpus (regular files inside the root), sorted."""
        out = set()
        for d, _, files in os.walk(self.root):
            for f in files:
                path = os.path.join(d, f)
                if (
                    not f.lower().endswith(_HTML_SUFFIXES)
                    or not self._inside(os.path.realpath(path))
                    or not os.path.isfile(path)
                ):
                    continue
                try:
                    out.add(self.url_of(path))
                except (ValueError, AssertionError):  # a name that is not UTF-8 has no URL
                    continue
        return sorted(out)

    def _inside(self, real: str) -> bool:
        return real == self.root or real.startswith(self._below)

    def fetch(self, url: str, max_bytes: int = MAX_PAGE_BYTES, unless: tuple[int, int, int] | None = None) -> Fetched:
        """The page at ``url``, or a :class:`Fetched` with the reason it cannot be fetched. A
        directory named without its trailing ``/`` is fetched at the URL with it (``Fetched.url``),
        as a web server would redirect there.

        Never raises, whatever the string (reasons: :data:`REASONS`). The query and fragment
        are ignored; host and scheme compare case-insensitively; a port or user info is refused.

        A conditional fetch: ``unless`` is the ``stamp`` of an earlier fetch (the file's
        modification time plays Last-Modified); when the file still has it, nothing is read and
        the result is ``not_modified``. A page is read through one descriptor, and its size,
        modification time and inode are compared before and after the read (and with what the
        path names then): a file rewritten or replaced meanwhile is read again, never landed
        half-read (after :data:`_MAX_REREADS` tries: "unreadable: changing while read").
        """
        try:
            names, upath = self._names(url)
            for _ in range(_MAX_REREADS):
                got = self._read(names, max_bytes, unless)
                if got is not None:
                    break
            else:
                raise _Refused("unreadable: changing while read")
            if isinstance(got, tuple) and len(got) == 2:
                return Fetched(url, not_modified=True, path=got[0], stamp=got[1])
            data, path, in_dir, stamp = got
            head = data[:512].lstrip().lower()
            if not path.lower().endswith(_HTML_SUFFIXES) and not head.startswith((b"<!doctype html", b"<html")):
                return Fetched(url, reason="not HTML")
            if in_dir and not upath.endswith(
                "/"
            ):  # a web server redirects http://h/dir to http://h/dir/ (its links resolve there)
                url = normalize_url(f"{self.site}{upath}/") or url
            return Fetched(
                url,
                html=decode_html(data[:max_bytes], len(data) > max_bytes),
                truncated=len(data) > max_bytes,
                path=path,
                stamp=stamp,
                digest=hashlib.sha256(data[:max_bytes]).hexdigest(),
            )
        except Exception as e:  # noqa: BLE001 -- a URL is recorded as unfetchable, it never stops the crawler
            return Fetched(url, reason=_reason_of(e))

    def _read(self, names: list[str], max_bytes: int, unless: tuple[int, int, int] | None) -> Any:
        """One try: ``(path, stamp)`` when not modified, ``(data, path, in_dir, stamp)`` when read whole
        and unchanged meanwhile, None when the file changed while it was read (try again)."""
        fd, path, in_dir = self._open(names)
        try:
            with os.fdopen(
                fd, "rb", closefd=True
            ) as fh:  # read() allocates what it is asked for: ask no more than the file has
                before = os.fstat(fd)
                stamp = (before.st_mtime_ns, before.st_size, before.st_ino)
                if unless is not None and tuple(unless) == stamp:
                    return path, stamp
                data = fh.read(min(max(0, max_bytes), before.st_size) + 1)
                after = os.fstat(fd)
        except OSError as e:
            raise _Refused(f"unreadable: {e.strerror or type(e).__name__}") from None
        if (after.st_mtime_ns, after.st_size, after.st_ino) != stamp or (
            len(data) <= max_bytes and len(data) != before.st_size
        ):
            return None  # written to while read
        try:
            now = os.stat(path, follow_symlinks=False)  # the name points to another file now: that one is the page
            if now.st_ino != before.st_ino and stat.S_ISREG(now.st_mode):
                return None
        except OSError:
            pass  # removed after the read: what was read is the page as it was
        return data, path, in_dir, stamp

    def _names(self, url: Any) -> tuple[list[str], str]:
        """The names ``url`` walks through below the root, and its path; raises :class:`_Refused`."""
        scheme, netloc, path = _split(url)
        if netloc.lower() != self.host or scheme != self.scheme:
            if "@" in netloc:
                raise _Refused(f"{NOT_A_PATH}user info")
            if scheme == self.scheme and netloc.rpartition(":")[0].lower() == self.host:
                raise _Refused(f"{NOT_A_PATH}a port")
            raise _Refused("outside the corpus")
        return _components(path), path

    def _open(self, names: list[str]) -> tuple[int, str, bool]:
        """Open the regular file ``names`` lead to from the root, never leaving it: ``(fd, real
        path, whether the names led to a directory whose index.html it is)``."""
        todo = list(names)
        in_dir = not todo
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
                        todo, in_dir = ["index.html"], True
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
                        in_dir = True
                    continue
                return fd, self._opened_file(fd, os.path.join(self.root, *done, name)), in_dir
        finally:
            for fd in fds:
                os.close(fd)

    def _opened_file(self, fd: int, path: str) -> str:
        """``path``, the file just opened as ``fd``, once checked to be a regular file inside the root
        (else ``fd`` is closed and the fetch refused)."""
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode):
                raise _Refused("not a regular file")
            self._check_opened(fd, fst, path)
        except BaseException:
            os.close(fd)
            raise
        return path

    def _through_link(self, target: str, done: list[str]) -> list[str]:
        """The names below the root a symbolic link in directory ``done`` points to; outside -> refused."""
        if target.startswith("/"):
            if not self._inside(target):
                raise _Refused("outside the corpus")  # absolute links are read against the real root: this one leaves
            base: list[str] = []
            target = target[len(self._below) :]
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
