"""Landing the files dropped in a pipeline's inbox (internal: the ``land_inbox`` task of
:mod:`cbp.airflow.dagfactory` and the watcher of :mod:`cbp.airflow.triggers`).

``<inbox>/<pipeline>/<flow>/`` is a sandbox that people and programs nobody controls write to.
Nothing in it is followed out of it:

- the flow's directory and its ``landed/`` and ``rejected/`` directories are opened without
  following symbolic links, and every file below is reached relative to those descriptors. A
  flow directory that is a link, or a ``landed``/``rejected`` that is not a directory, is
  ``bad-inbox``: that flow lands nothing (its files wait) and the other flows land as usual;
- a file is opened once, without following links, and checked to be a regular file; its feed id
  (:func:`inbox_feed_id`) and the records landed come from that one open file, so a file swapped
  after it was hashed cannot land in its place;
- error files are created exclusively (``O_EXCL``), never through a link planted under their name;
- a file removed while it is being landed is skipped (or, once landed, left where it went).

    >>> shown_name("a\\nb.jsonl")
    'a\\\\nb.jsonl'
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import sys
import time
from collections.abc import Sequence
from typing import Any, BinaryIO

__all__ = [
    "INBOX_SUFFIXES",
    "INBOX_SETTLE_SECONDS",
    "REJECTED",
    "LANDED",
    "settled",
    "inbox_files",
    "shown_name",
    "inbox_feed_id",
    "InboxDir",
    "land_inbox",
    "announce_landed",
    "read_announced",
    "write_announced",
]

INBOX_SUFFIXES = (".jsonl", ".parquet")  # what the inbox lands: JSON lines or Parquet (cbp.Pipeline.feed)
TEMP_SUFFIXES = (
    ".tmp",
    ".part",
    ".crdownload",
    "._COPYING_",
    ".filepart",
)  # files being written (browsers, hadoop fs -put, WinSCP)
INBOX_SETTLE_SECONDS = 5.0  # an inbox file modified more recently may still be being written: it waits
REJECTED = "rejected"  # beside landed/: files that could not be landed, each with <name>.error.txt
LANDED = "landed"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _NOFOLLOW


class BadInbox(Exception):
    """A directory of the inbox is not one (a symbolic link, a file): code ``bad-inbox``."""


def _open_dir(name: str, dir_fd: int | None = None) -> int:
    try:
        fd = os.open(name, _DIR, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise BadInbox(
                f"{name} is not a directory (a symbolic link or a file; the inbox's directories must be real ones)"
            ) from None
        raise
    if not stat.S_ISDIR(os.fstat(fd).st_mode):  # a system without O_DIRECTORY
        os.close(fd)
        raise BadInbox(f"{name} is not a directory")
    return fd


def settled(st: os.stat_result, settle: float, now: float | None = None) -> bool:
    """Whether a file was last modified at least ``settle`` seconds ago (its writer is done)."""
    return (time.time() if now is None else now) - st.st_mtime >= settle


def _waiting(fd: int, settle: float) -> list[str]:
    names = []
    now = time.time()
    for f in os.listdir(fd):
        if f.endswith(INBOX_SUFFIXES) and not f.startswith((".", "_")) and not f.endswith(TEMP_SUFFIXES):
            try:
                st = os.stat(f, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)) and settled(st, settle, now):
                names.append(f)
    return sorted(names)


def inbox_files(inbox: str | None, settle: float = INBOX_SETTLE_SECONDS) -> list[str]:
    """The ``*.jsonl`` and ``*.parquet`` files waiting in an inbox directory, oldest name first: regular files, and
    symbolic links (which the DAG rejects); not directories, FIFOs or devices. Not the files still
    being written: hidden or temporary names (``.x.jsonl``, ``_x.jsonl``, ``x.jsonl.part``) and files
    modified less than ``settle`` seconds ago. None in a directory that is a symbolic link."""
    if not inbox:
        return []
    try:
        fd = _open_dir(inbox)
    except (OSError, BadInbox):
        return []
    try:
        return _waiting(fd, settle)
    finally:
        os.close(fd)


def shown_name(name: str) -> str:
    """A file name as one line of printable text (undecodable bytes and control characters as escapes)."""
    from ..errors import printable

    return printable(os.fsencode(name).decode("utf-8", "backslashreplace"))


def inbox_feed_id(fh: BinaryIO, name: str) -> str:
    """``inbox:<name>:<size>:<sha256 prefix>`` of the open file ``fh`` (read from its start, and left
    there): the same file lands once however often it is retried, and another file dropped later
    under the same name and size is landed too."""
    h = hashlib.sha256()
    size = 0
    fh.seek(0)
    while chunk := fh.read(1 << 20):
        h.update(chunk)
        size += len(chunk)
    fh.seek(0)
    return f"inbox:{name}:{size}:{h.hexdigest()[:16]}"


class InboxDir:
    """One flow's inbox directory, opened without following links, and (:meth:`prepare`) its
    ``landed/`` and ``rejected/`` directories; :class:`BadInbox` if any of them is not a directory."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = _open_dir(path)
        self._subs: dict[str, int] = {}

    def prepare(self) -> None:
        """Open ``landed/`` and ``rejected/`` where they exist, before anything is landed."""
        for sub in (LANDED, REJECTED):
            if _exists(sub, self.fd):
                self._sub(sub)

    def _sub(self, sub: str) -> int:
        """The descriptor of ``landed/`` or ``rejected/``, made at first use."""
        if sub not in self._subs:
            try:
                os.mkdir(sub, 0o777, dir_fd=self.fd)
            except FileExistsError:
                pass
            self._subs[sub] = _open_dir(sub, dir_fd=self.fd)
        return self._subs[sub]

    def close(self) -> None:
        for fd in [*self._subs.values(), self.fd]:
            os.close(fd)
        self._subs.clear()

    def __enter__(self) -> InboxDir:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def waiting(self, settle: float) -> list[str]:
        return _waiting(self.fd, settle)

    def open(self, name: str) -> tuple[BinaryIO, tuple[int, int]]:
        """``name`` open for reading, and its identity (device, inode): ``OSError`` ``ELOOP`` for a
        link, ``ValueError`` for anything but a regular file."""
        return _open_regular(name, self.fd)

    def _free_name(self, sub: str, name: str, *beside: str) -> str:
        """``name``, or ``<stem>.<n>.<suffix>`` with the first ``n`` for which nothing in ``sub`` has that
        name (nor that name with any of the suffixes ``beside``)."""
        target, n = name, 0
        while any(_exists(target + b, self._sub(sub)) for b in ("", *beside)):
            n += 1
            stem, dot, suffix = name.rpartition(".")
            target = f"{stem}.{n}.{suffix}" if dot else f"{name}.{n}"
        return target

    def _still(self, name: str, ident: tuple[int, int] | None) -> bool:
        """Whether ``name`` is still the file that was read (not removed, nor replaced by a rename)."""
        try:
            st = os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return ident is None or (st.st_dev, st.st_ino) == ident

    def reject(self, name: str, code: str, message: str, ident: tuple[int, int] | None = None) -> str | None:
        """Move ``name`` to ``rejected/`` (never over an earlier rejected file) with the error beside
        it; None if the file went away, or another took its name, meanwhile (that one waits for the next run)."""
        try:
            rej = self._sub(REJECTED)
            target = self._free_name(REJECTED, name, ".error.txt", ".error.txt.tmp")
            err, tmp = f"{target}.error.txt", f"{target}.error.txt.tmp"
            _write_new(tmp, rej, f"{code}: {message}\n")  # the error first: a crash leaves the file in the inbox
            os.replace(tmp, err, src_dir_fd=rej, dst_dir_fd=rej)
            if self._still(name, ident):
                try:
                    os.replace(name, target, src_dir_fd=self.fd, dst_dir_fd=rej)
                    return target
                except FileNotFoundError:
                    pass
            os.unlink(err, dir_fd=rej)
            return None
        except OSError as e:
            raise BadInbox(f"cannot move {name} to {REJECTED}/: {e.strerror or e}") from None

    def keep(self, name: str, feed_id: str, ident: tuple[int, int] | None = None) -> str | None:
        """Move the landed ``name`` to ``landed/``: over an earlier file of that name only if it is the
        same file (a retried task), beside it otherwise (``<stem>.<n>.<suffix>``); None if it went
        away, or another took its name, meanwhile (that one waits for the next run)."""
        try:
            done = self._sub(LANDED)
            target = name
            if _exists(name, done):
                try:
                    fh, _ = _open_regular(name, done)
                    with fh:
                        same = inbox_feed_id(fh, name) == feed_id
                except (OSError, ValueError):
                    same = False
                target = name if same else self._free_name(LANDED, name)
            if not self._still(name, ident):
                return None
            try:
                os.replace(name, target, src_dir_fd=self.fd, dst_dir_fd=done)
            except FileNotFoundError:
                return None
            return target
        except OSError as e:
            raise BadInbox(f"cannot move {name} to {LANDED}/: {e.strerror or e}") from None


def _open_regular(name: str, dir_fd: int) -> tuple[BinaryIO, tuple[int, int]]:
    fd = os.open(name, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0), dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("not a regular file")
        return os.fdopen(fd, "rb"), (st.st_dev, st.st_ino)
    except BaseException:
        os.close(fd)
        raise


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _write_new(name: str, dir_fd: int | None, text: str) -> None:
    """Write ``text`` to a new file ``name`` (one left by a crash, or planted, is removed first, never followed)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW
    try:
        fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    except FileExistsError:
        os.unlink(name, dir_fd=dir_fd)
        fd = os.open(name, flags, 0o644, dir_fd=dir_fd)
    with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace") as fh:
        fh.write(text)


# ---------------------------------------------------------------------------- what the watcher announced
def _announced_path(home: str, flow: str, markers: str | None = None) -> str:
    if markers is None:
        if "://" in home and not home.startswith("file://"):
            raise ValueError(f"the announcement markers of {home} need a local directory (markers=...)")
        markers = os.path.join(home, "_airflow")
    return os.path.join(markers, "announced", f"{flow}.json")


def read_announced(home: str, flow: str, markers: str | None = None) -> dict[str, Any]:
    """``{"feeds": n, "inbox": [names]}`` announced so far (nothing, if the marker is missing or not of that shape)."""
    try:
        fd = os.open(_announced_path(home, flow, markers), os.O_RDONLY | _NOFOLLOW)
        with os.fdopen(fd, encoding="utf-8") as fh:
            seen = json.load(fh)
    except (OSError, ValueError):
        seen = None
    ok = (
        isinstance(seen, dict)
        and type(seen.get("feeds")) is int
        and seen["feeds"] >= 0
        and isinstance(seen.get("inbox"), list)
        and all(isinstance(f, str) for f in seen["inbox"])
    )
    return seen if ok else {"feeds": 0, "inbox": []}


def write_announced(home: str, flow: str, seen: dict[str, Any], markers: str | None = None) -> None:
    path = _announced_path(home, flow, markers)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    _write_new(tmp, None, json.dumps(seen))
    os.replace(tmp, path)


def announce_landed(
    home: str, flow: str, files: list[str], feeds: int, rejected: Sequence[str] = (), markers: str | None = None
) -> None:
    """Record that announced inbox ``files`` were landed as ``feeds`` feeds (and that ``rejected``
    files left the inbox without a feed), so they are not announced again, and a file dropped later
    under the same name is."""
    seen = read_announced(home, flow, markers)
    done = [f for f in files if f in seen["inbox"]]
    gone = [f for f in rejected if f in seen["inbox"]]
    if done or gone:
        seen["inbox"] = [f for f in seen["inbox"] if f not in done and f not in gone]
        seen["feeds"] += min(feeds, len(done))
        write_announced(home, flow, seen, markers)


# ---------------------------------------------------------------------------- the land_inbox task
def land_inbox(
    yaml_path: str,
    home: str,
    inbox: str,
    flows: list[str],
    markers: str | None = None,
    settle: float = INBOX_SETTLE_SECONDS,
) -> dict[str, dict[str, Any]]:
    """Land every ``<inbox>/<flow>/*.jsonl`` and ``*.parquet`` once and move it to ``landed/`` (beside an earlier
    file of that name, as ``<stem>.<n>.<suffix>``); a file that cannot be landed goes to ``rejected/`` with
    ``<file>.error.txt`` (``<code>: <message>``) and the next file is landed all the same. Files still
    being written are left for a later run: hidden and temporary names, and files modified less than
    ``settle`` seconds ago (:func:`inbox_files`).

    ``markers`` is the local directory of the announcement markers (default ``<home>/_airflow``).
    Returns ``{"landed": {flow: [files]}, "rejected": {flow: {file: "code: message"}}}``, and
    ``"bad_inbox": {flow: message}`` for flows whose directory cannot be used safely (module
    docstring). Errors that are not the file's fault (the home is busy, full or read-only) are
    raised: the task fails and is retried, and nothing is rejected for them.
    """
    landed: dict[str, list[str]] = {}
    rejected: dict[str, dict[str, str]] = {}
    bad: dict[str, str] = {}
    lander = _Lander(yaml_path, home)
    for flow in flows:
        d = os.path.join(inbox, flow)
        if not os.path.lexists(d):
            continue
        done: list[str] = []
        refused: list[str] = []
        try:
            with InboxDir(d) as box:
                lander.land(box, flow, settle, landed, rejected, done, refused)
        except BadInbox as e:
            bad[flow] = (
                f"bad-inbox: {shown_name(d)}: {shown_name(str(e))}; nothing more of flow '{flow}' is landed until it is"
            )
            print(
                f"cbp: inbox of flow '{flow}' not landed: [bad-inbox] {shown_name(d)}: {shown_name(str(e))}",
                file=sys.stderr,
            )
        finally:  # also when a later file failed: the watcher announced these already, they are not news any more
            if done or refused:
                announce_landed(home, flow, done, len(done), rejected=refused, markers=markers)
    out: dict[str, dict[str, Any]] = {"landed": landed, "rejected": rejected}
    if bad:
        out["bad_inbox"] = bad
    return out


class _Lander:
    """Feeds one inbox file after another; the pipeline is loaded at the first file."""

    def __init__(self, yaml_path: str, home: str) -> None:
        self.yaml_path, self.home = yaml_path, home
        self.pipe: Any = None

    def land(
        self,
        box: InboxDir,
        flow: str,
        settle: float,
        landed: dict[str, list[str]],
        rejected: dict[str, dict[str, str]],
        done: list[str],
        refused: list[str],
    ) -> None:
        """Land the files waiting in ``box``; the names landed go to ``done``, those rejected to ``refused``."""
        names = box.waiting(settle)
        if names:
            box.prepare()
        for name in names:
            src = os.path.join(box.path, name)
            why, fed, ident = self._feed(box, flow, name, src)
            if why == ("gone", ""):
                continue  # taken away meanwhile (by another attempt of this task)
            if why is not None:
                target = box.reject(name, *why, ident=ident)
                if target is None:
                    continue
                refused.append(name)
                rejected.setdefault(flow, {})[shown_name(target)] = f"{why[0]}: {why[1]}"
                print(
                    f"cbp: rejected {shown_name(src)} -> {shown_name(os.path.join(box.path, REJECTED, target))}: "
                    f"[{why[0]}] {shown_name(why[1])}",
                    file=sys.stderr,
                )
                continue
            target = box.keep(name, fed, ident)
            done.append(name)
            landed.setdefault(flow, []).append(name)
            kept = f"kept as {LANDED}/{shown_name(target)}" if target else "removed or replaced in the inbox meanwhile"
            print(f"cbp: landed {shown_name(src)} on flow '{flow}' ({kept})")

    def _feed(
        self, box: InboxDir, flow: str, name: str, src: str
    ) -> tuple[tuple[str, str] | None, str, tuple[int, int] | None]:
        """Land ``name``: (None, its feed id, the identity of the file read), or (why it was not: code
        and message, "", the identity if it was opened)."""
        from ..errors import CbpError, InputError
        from ..pipeline import Pipeline
        from ..spec.resolve import safe_str

        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            return ("bad-name", "the file name is not UTF-8"), "", None
        try:
            fh, ident = box.open(name)
        except FileNotFoundError:
            return ("gone", ""), "", None
        except OSError as e:
            if e.errno == errno.ELOOP:
                return (
                    ("not-a-regular-file", "a symbolic link (inbox files are landed only as regular files)"),
                    "",
                    None,
                )
            return ("unreadable", f"cannot read the file: {e.strerror or e}"), "", None
        except ValueError as e:
            return ("unreadable", f"cannot read the file: {e}"), "", None
        with fh:
            try:
                feed_id = inbox_feed_id(fh, name)
            except OSError as e:
                return ("unreadable", f"cannot read the file: {e.strerror or e}"), "", ident
            self.pipe = self.pipe or Pipeline(self.yaml_path, self.home)
            try:
                self.pipe.feed(flow, fh, feed_id=feed_id, source=src)
            except InputError as e:
                return (e.code, str(e)), "", ident
            except CbpError:
                raise  # busy, full or read-only home, ...: not the file's fault
            except (RecursionError, ValueError, TypeError, OverflowError, UnicodeError) as e:  # data nobody foresaw
                return ("bad-record", f"{src}: {type(e).__name__}: {safe_str(e)}; nothing was landed"), "", ident
        return None, feed_id, ident
