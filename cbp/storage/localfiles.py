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

__all__ = ["replace_file", "create_file"]


def replace_file(path: str, data: bytes) -> None:
    """Write ``path`` (creating its directory), replacing what was there: temp file, fsync, rename."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        _write_synced(tmp, data)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(os.path.dirname(path))


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


def _write_synced(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: str) -> None:
    dfd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
