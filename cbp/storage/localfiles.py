"""Durable, atomic writes of small files on a local disk (controller records, Delta commits).

A reader sees all of a file or none of it, and a file written is still there after a crash: the
bytes are synced before the file gets its name, and the directory after.

    >>> import os, tempfile
    >>> d = tempfile.mkdtemp()
    >>> replace_file(os.path.join(d, "a", "x.json"), b"1"), create_file(os.path.join(d, "a", "x.json"), b"2")
    (None, False)
    >>> open(os.path.join(d, "a", "x.json"), "rb").read()
    b'1'
"""

from __future__ import annotations

import os
import uuid

__all__ = ["replace_file", "create_file", "link_file"]


def replace_file(path: str, data: bytes, durable: bool = True) -> None:
    """Write ``path`` (creating its directory), replacing what was there: temp file, fsync, rename.
    ``durable=False``: still atomic (a reader sees all or nothing), but not synced: a file only a
    power cut may lose without harm (who holds the runner lock, :meth:`cbp.storage.Home.runner_lock`)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        _write_synced(tmp, data, durable)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    if durable:
        _fsync_dir(os.path.dirname(path))


def link_file(src: str, path: str) -> bool:
    """Give the durable file ``src`` the second name ``path`` (a hard link: its bytes are synced
    already, only the directory is), unless ``path`` exists; False if the filesystem has no links
    or ``src`` is gone (the caller writes a copy then)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        os.link(src, path)
    except FileExistsError:
        pass  # made by an earlier attempt at the same change: a whole file (a link is made at once)
    except OSError:
        return False
    _fsync_dir(os.path.dirname(path))
    return True


def create_file(path: str, data: bytes) -> bool:
    """Create ``path`` with ``data`` unless it exists (then False): a synced temp file hard-linked to
    its name, which fails if the name is taken, so two writers never both succeed."""
    tmp = os.path.join(os.path.dirname(path), f"_tmp_{uuid.uuid4().hex}.tmp")
    try:
        _write_synced(tmp, data)
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
    _fsync_dir(os.path.dirname(path))
    return True


def _write_synced(path: str, data: bytes, durable: bool = True) -> None:
    with open(path, "wb") as f:
        f.write(data)
        if durable:
            f.flush()
            os.fsync(f.fileno())


def _fsync_dir(path: str) -> None:
    dfd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
