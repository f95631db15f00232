"""The home: where a pipeline's increments, state, index and controller records live.

Everything goes through pyarrow's filesystem abstraction and delta-rs, so a home can be a local
directory or an object-store URI (``s3://bucket/pipelines/crawl``), configured from the environment
(:mod:`cbp.storage.objectstore`). Which file is where is :mod:`cbp.storage.layout`'s business.
Locks are ``flock`` on a local home and leases on S3 (:mod:`cbp.storage.lease`).

    >>> h = Home("/tmp/cbp-doc-home")
    >>> h.uri("flows", "urls")
    '/tmp/cbp-doc-home/flows/urls'
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow.fs as pafs

from ..errors import BusyError, RuntimeStateError
from . import localfiles, objectstore
from .deltalog import TableHead
from .flock import LOCKS, LOCKS_GUARD, ProcessLock, lock_file, open_lock_file
from .layout import INC, LAYOUT, PART, SRC
from .lease import Lease, LeaseRecord, S3Objects
from .location import check_location, local_file_uri, refuse_mistyped_url
from .tables import DeltaTables

__all__ = ["Home", "INC", "PART", "SRC"]

_CONTROLLER = LAYOUT.CONTROLLER
_INTENTIONS = LAYOUT.INTENTIONS
_PENDING = LAYOUT.PENDING
_RUNNER = LAYOUT.RUNNER


@contextmanager
def _as_os_error() -> Iterator[None]:
    """A failed request through boto3 as the ``OSError`` pyarrow's filesystem would have raised,
    so that callers treat a file operation's failure the same on every store."""
    try:
        yield
    except RuntimeStateError as e:
        raise OSError(errno.EIO, str(e)) from e


class Home(DeltaTables):
    """A pipeline's home: a local path or a URI understood by pyarrow and delta-rs. Picklable."""

    def __init__(self, location: str | os.PathLike[str]) -> None:
        refuse_mistyped_url(os.fspath(location))  # 's3:/b' would be a local directory named so
        loc = local_file_uri(os.fspath(location))
        if "://" not in loc:
            loc = os.path.abspath(loc)
        self.location = check_location(loc).rstrip("/")
        self._fs: pafs.FileSystem | None = None
        self._root = ""
        #: The object-store settings a pickled Home brought (None: this process's, see objectstore.settings).
        self._store: objectstore.ObjectStoreSettings | None = None
        #: The tables this process commits to, by relative path (see :class:`cbp.storage.deltalog.TableHead`):
        #: loaded once, then kept up to date by the commits themselves.
        self._heads: dict[str, TableHead] = {}
        self._tables_lock = threading.Lock()
        self._signed_tables: set[str] = set()
        self._runner_lease: Lease | None = None  # held by runner_lock on S3 (see fence)
        self._follower_thread: int | None = None  # the thread that holds follower_lock through this object
        self._s3: S3Objects | None = None

    def __getstate__(self) -> dict[str, Any]:
        """The location, and on S3 the object-store settings the tasks build the filesystem from
        (the driver's: a task plan carries them, an executor's environment need not have them)."""
        store = self._store if self._store is not None else objectstore.ObjectStoreSettings.for_home(self.location)
        return {"location": self.location, "store": store}

    def __setstate__(self, st: dict[str, Any]) -> None:
        self.__init__(st["location"])  # type: ignore[misc]
        self._store = st.get("store")

    def __repr__(self) -> str:
        return f"Home({self.location!r})"

    @property
    def fs(self) -> pafs.FileSystem:
        """The home's pyarrow filesystem (S3 settings from the environment; after unpickling, the
        settings of the process that pickled it)."""
        if self._fs is None:
            self._fs, self._root = objectstore.filesystem(self.location, user=self, store=self._store)
        return self._fs

    @property
    def storage_options(self) -> dict[str, str] | None:
        """delta-rs ``storage_options`` for the home's tables (None on a local home)."""
        return objectstore.storage_options(self.location, self._store)

    def is_object_store(self) -> bool:
        """Whether the home is on an object store (no local path, leases instead of flock)."""
        return objectstore.is_object_store(self.location)

    def path(self, *parts: str) -> str:
        """A path inside the home, for :attr:`fs`."""
        _ = self.fs
        return "/".join([self._root.rstrip("/"), *parts])

    def uri(self, *parts: str) -> str:
        """A URI inside the home, for delta-rs and Spark."""
        return "/".join([self.location, *parts])

    # ----------------------------------------------------------- plain files
    def write_bytes(self, rel: str, data: bytes, durable: bool = True) -> None:
        """Replace a file atomically: on a local home durably (temp file, fsync, rename; not synced if
        not ``durable``); on an object store with one PUT (atomic by itself; a store without rename
        gains nothing from a temp file)."""
        local = self.local_dir()
        if local is not None:
            localfiles.replace_file(os.path.join(local, rel), data, durable)
            return
        path = self.path(rel)
        if self.is_object_store():
            with self.fs.open_output_stream(path) as out:
                out.write(data)
            return
        self.make_parent(path)
        tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        self.fs.move(tmp, path)

    def create_file(self, rel: str, data: bytes) -> bool:
        """Create a file with ``data`` unless it exists (then False), atomically: a reader sees all of
        it or nothing. On a local disk a synced temp file hard-linked to its name; on S3 one PUT with
        ``If-None-Match``. Delta commits are made this way (:mod:`cbp.storage.tables`)."""
        local = self.local_dir()
        if local is None:
            objects = self._objects
            if objects is None:
                raise RuntimeStateError(f"cannot create {self.uri(rel)}: this store has no atomic create", code="io")
            with _as_os_error():
                return bool(objects.create(rel, data))
        return localfiles.create_file(os.path.join(local, rel), data)

    def make_parent(self, path: str) -> None:
        """Create the directory that will hold ``path`` (an :attr:`fs` path). Nothing on an object
        store, which has no directories: pyarrow would write a marker object per level."""
        if not self.is_object_store():
            self.fs.create_dir(path.rsplit("/", 1)[0], recursive=True)

    @property
    def _objects(self) -> S3Objects | None:
        """On S3, the home's objects through boto3: one request to read, look up or delete a file,
        where pyarrow takes two (a HEAD before a read; a listing after a missing HEAD; a directory
        marker written after a delete)."""
        if self._s3 is None and objectstore.is_s3(self.location):
            self._s3 = S3Objects(self.location, self._store)
        return self._s3

    def read_bytes(self, rel: str) -> bytes:
        """A file's bytes (``FileNotFoundError`` if it is not there)."""
        objects = self._objects
        if objects is not None:
            with _as_os_error():
                data = objects.read(rel)
            if data is None:
                raise FileNotFoundError(self.uri(rel))
            return data
        with self.fs.open_input_stream(self.path(rel)) as f:
            read: bytes = f.read()
            return read

    def exists(self, rel: str) -> bool:
        """Whether a file is there."""
        local = self.local_dir()
        if local is not None:
            return os.path.exists(os.path.join(local, rel))
        objects = self._objects
        if objects is not None:
            with _as_os_error():
                return objects.exists(rel)
        return bool(self.fs.get_file_info(self.path(rel)).type != pafs.FileType.NotFound)

    def list_dir(self, rel: str) -> list[str]:
        sel = pafs.FileSelector(self.path(rel), allow_not_found=True)
        return sorted(i.base_name for i in self.fs.get_file_info(sel))

    def delete_file(self, rel: str) -> None:
        """Delete a file; nothing if it is not there."""
        objects = self._objects
        if objects is not None:
            with _as_os_error():
                objects.delete(rel)
            return
        try:
            self.fs.delete_file(self.path(rel))
        except FileNotFoundError:
            pass

    # ----------------------------------------------------------- mutual exclusion
    def local_dir(self) -> str | None:
        """The home as a local directory path, or None when it is not on the local filesystem."""
        if "://" not in self.location:
            return self.location
        if self.location.startswith("file://"):
            return self.path()
        return None

    @contextmanager
    def lock(self, waiting: Callable[[], None] | None = None) -> Iterator[None]:
        """Hold the home's mutation lock: one feed or one stage epoch at a time, across processes.

        Every change to the controller snapshot happens under it, after re-reading the newest
        snapshot, so a feed that lands while ``cbp run`` works is never overwritten. On a local
        home it is an ``flock`` on ``<home>/_cbp/lock`` (released by the OS if the process dies);
        on S3 the lease ``mutation`` (:mod:`cbp.storage.lease`; a dead holder's lease expires).
        Re-entrant within a process. ``waiting`` is called once if another process holds it.
        """
        local = self.local_dir()
        path = os.path.join(local, LAYOUT.LOCK) if local is not None else self.uri(LAYOUT.LOCK)
        with LOCKS_GUARD:
            entry = LOCKS.setdefault(path, ProcessLock())
        with entry.mutex:
            if entry.depth == 0:
                if local is None:
                    lease = Lease(self.lease_store("the home's mutation lock"), "mutation", self.holder_info())
                    lease.acquire((lambda _rec: waiting()) if waiting is not None else None)
                    entry.lease = lease
                else:
                    entry.fd = lock_file(path, self.location, waiting)
            entry.depth += 1
            try:
                yield
            finally:
                entry.depth -= 1
                if entry.depth == 0:
                    if entry.lease is not None:
                        lease, entry.lease = entry.lease, None
                        lease.release()
                    else:
                        fcntl.flock(entry.fd, fcntl.LOCK_UN)
                        os.close(entry.fd)
                        entry.fd = -1

    def fence(self, what: str) -> None:
        """Refuse (:class:`BusyError` code ``lease-lost``) to make a change durable if this process's
        hold on the home may have passed to another: on S3, when the mutation lease it holds (or
        its runner lease) was taken over, or has less than half the time left that its renewals
        always leave it (``(ttl - renew) / 2``: a third of the ttl by default), as after a stall
        longer than the renewals allow. A local home's flocks cannot be lost: nothing to check.
        Called before the point of no return of every change (:mod:`cbp.controller.journal`)."""
        local = self.local_dir()
        if local is not None:
            return
        entry = LOCKS.get(self.uri(LAYOUT.LOCK))
        for lease in (entry.lease if entry is not None else None, self._runner_lease):
            if lease is not None and (lease.lost or lease.remaining() < (lease.ttl - lease.renew_every) / 2):
                raise BusyError(
                    f"{what}: this process's {lease.name} lease on {self.location} "
                    f"{'was taken over by another process' if lease.lost else 'has run out'} (was it stalled for "
                    f"longer than the lease's {lease.ttl:g} s, CBP_LEASE_TTL?); another process may be changing the "
                    "home, so nothing of this was committed. Run again",
                    code="lease-lost",
                )

    @contextmanager
    def runner_lock(self, command: str, took_over: Callable[[dict[str, Any]], None] | None = None) -> Iterator[None]:
        """Be the one runner of this home for the block, or raise :class:`BusyError` at once.

        On a local home this is an ``flock`` on ``<home>/_cbp/runner.lock``, which the OS releases
        when the holder dies however it dies; on S3 the lease ``runner``, which expires when its
        holder stops renewing it. ``_cbp/runner.json`` says who holds it. Finding that file with
        the lock free means a runner was killed: ``took_over`` gets what it said. Not re-entrant,
        except in the thread that holds :meth:`follower_lock` through this object.
        """
        if (
            self._follower_thread == threading.get_ident()
        ):  # a follower's runs (follower_lock): it is the runner already
            yield
            return
        me = {**self.holder_info(), "command": command}
        with self._runner_hold(me) as expired:
            stale = self.runner_info() or (expired.info if expired is not None else None)
            if stale is not None and took_over is not None:
                took_over(stale)
            try:
                self.write_bytes(_RUNNER, json.dumps(me).encode(), durable=False)  # who runs: a power cut may lose it
            except OSError as e:
                raise RuntimeStateError(
                    f"cannot write {self.uri(_RUNNER)}: {e.strerror}; is the home read-only or full?", code="io"
                ) from e
            try:
                yield
            finally:
                self.delete_file(_RUNNER)

    @contextmanager
    def follower_lock(self, command: str, took_over: Callable[[dict[str, Any]], None] | None = None) -> Iterator[None]:
        """:meth:`runner_lock` for a follower (:mod:`cbp.follow`): held across its runs, whose own
        :meth:`runner_lock` (in this thread, through this object) it covers; ``busy`` as runner_lock."""
        with self.runner_lock(command, took_over):
            self._follower_thread = threading.get_ident()
            try:
                yield
            finally:
                self._follower_thread = None

    @contextmanager
    def _runner_hold(self, me: dict[str, Any]) -> Iterator[LeaseRecord | None]:
        """Hold the runner flock (yields None) or lease (yields the expired record it took over, if any)."""
        local = self.local_dir()
        if local is None:
            lease = Lease(self.lease_store("cbp run's one-runner lock"), "runner", me)
            ok, rec = lease.try_acquire()
            if not ok:
                raise self._busy(rec.info if rec is not None else {})
            self._runner_lease = lease
            try:
                yield rec
            finally:
                self._runner_lease = None
                lease.release()
            return
        path = os.path.join(local, LAYOUT.RUNNER_LOCK)
        fd = open_lock_file(path, self.location)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise self._busy(self.runner_info() or {}) from None
        try:
            yield None
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _busy(self, holder: dict[str, Any]) -> BusyError:
        since = (
            time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder["started"]))
            if "started" in holder
            else "an unknown time"
        )
        return BusyError(
            f"another cbp run is already working on {self.location} (pid {holder.get('pid', '?')} on host "
            f"{holder.get('host', '?')}, since {since}: {holder.get('command', '?')}); only one runner per home. "
            "Wait for it to finish (feeds may land meanwhile: it will run them), or stop it first",
            code="busy",
        )

    @staticmethod
    def holder_info() -> dict[str, Any]:
        """This process, as a lock holder: pid, host, start time."""
        return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}

    def lease_store(self, part: str) -> S3Objects:
        """Where the home's leases live (S3 only; code ``unsupported-store`` elsewhere), for ``part``'s
        error message."""
        if not objectstore.is_s3(self.location):
            raise RuntimeStateError(
                f"{part}: {self.location} is on an object store cbp has no leases for; "
                "use an s3:// (or S3-compatible) home, or a local one",
                code="unsupported-store",
                path=self.location,
            )
        return S3Objects(self.location, self._store)

    def runner_info(self) -> dict[str, Any] | None:
        """Who holds (or, if the lock is free, last held and was killed holding) the runner lock."""
        try:
            info: dict[str, Any] = json.loads(self.read_bytes(_RUNNER))
            return info
        except (FileNotFoundError, ValueError):
            return None

    def runner_active(self) -> bool:
        """Whether some process holds the runner lock (or lease) now."""
        local = self.local_dir()
        if local is None:
            if not objectstore.is_s3(self.location):
                return False
            rec = Lease(S3Objects(self.location, self._store), "runner").current()
            return rec is not None and rec.live()
        path = os.path.join(local, LAYOUT.RUNNER_LOCK)
        if not os.path.exists(path):
            return False
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)
        return False

    # ----------------------------------------------------------- write-ahead records
    def read_json(self, rel: str) -> dict[str, Any] | None:
        """A JSON file of the home, or None if it does not exist (files are replaced atomically)."""
        try:
            value: dict[str, Any] = json.loads(self.read_bytes(rel))
            return value
        except FileNotFoundError:
            return None

    def write_json(self, rel: str, value: dict[str, Any]) -> None:
        """Write a JSON file atomically (temp file, then rename)."""
        self.write_bytes(rel, json.dumps(value, sort_keys=True).encode())

    def pending(self) -> dict[str, Any] | None:
        """The change being committed when the last writer stopped, if it did not finish."""
        return self.read_json(_PENDING)

    def write_pending(self, record: dict[str, Any]) -> None:
        self.write_json(_PENDING, record)

    def clear_pending(self) -> None:
        self.delete_file(_PENDING)

    def intentions(self) -> dict[str, dict[str, Any]]:
        """Stage -> the write-ahead intention of its last epoch that has not been committed or dropped."""
        out = {}
        for name in self.list_dir(_INTENTIONS):
            if name.endswith(".json"):
                rec = self.read_json(f"{_INTENTIONS}/{name}")
                if rec is not None:
                    out[rec["stage"]] = rec
        return out

    def write_intention(self, stage: str, record: dict[str, Any]) -> None:
        self.write_json(LAYOUT.intention(stage), record)

    def clear_intention(self, stage: str) -> None:
        self.delete_file(LAYOUT.intention(stage))

    # ----------------------------------------------------------- controller snapshots
    def controller_seq(self) -> int | None:
        """The ``seq`` of the newest controller snapshot, from its file's name (snapshots are written
        whole, then renamed into place), without reading it; None for a new home or a name cbp does not
        write."""
        names = [n for n in self.list_dir(_CONTROLLER) if n.endswith(".json")]
        if not names or not names[-1][: -len(".json")].isdigit():
            return None
        return int(names[-1][: -len(".json")])

    def read_controller(self) -> dict[str, Any] | None:
        """The newest complete controller snapshot, or None for a new home."""
        for name in reversed(self.list_dir(_CONTROLLER)):
            if not name.endswith(".json"):
                continue
            try:
                doc = json.loads(self.read_bytes(f"{_CONTROLLER}/{name}"))
            except (ValueError, OSError):
                continue  # a torn write: the previous snapshot is the truth
            if not (
                isinstance(doc, dict) and isinstance(doc.get("flows"), dict) and isinstance(doc.get("stages"), dict)
            ):
                raise RuntimeStateError(
                    f"the controller snapshot {self.uri(f'{_CONTROLLER}/{name}')} is damaged (JSON, but not a "
                    "snapshot cbp writes); restore the home from a backup",
                    code="damaged-home",
                )
            return doc
        return None

    def copy_controller(self, seq: int, rel: str, snapshot: dict[str, Any]) -> None:
        """Keep controller snapshot ``seq`` (``snapshot``, as written) also at ``rel``: on a local home
        a hard link to the durable snapshot file (one directory sync, no second write), else a copy."""
        local = self.local_dir()
        if local is None or not localfiles.link_file(
            os.path.join(local, LAYOUT.snapshot(seq)), os.path.join(local, rel)
        ):
            self.write_json(rel, snapshot)

    def write_controller(self, snapshot: dict[str, Any], keep: int = 20) -> None:
        """Write snapshot ``seq`` (atomically: temp file, then rename) and prune old ones (every
        tenth snapshot: a listing of the folder is a request on an object store)."""
        seq = int(snapshot["seq"])
        self.write_bytes(LAYOUT.snapshot(seq), json.dumps(snapshot, sort_keys=True).encode())
        if seq % 10:
            return
        names = [n for n in self.list_dir(_CONTROLLER) if n.endswith(".json")]
        for n in names[:-keep]:
            self.delete_file(f"{_CONTROLLER}/{n}")
