"""Which Spark Connect session a cbp process opens: by default one session per user and server, shared
by every cbp command, so that a long-lived server does not pile up Python daemons.

A Connect server starts one Python daemon (with its workers and their state caches) per session that
runs Python, and keeps it after the session ends; every ``cbp --remote ...`` command is a new process,
so a new session each would leave a daemon each behind. cbp instead names a session: a URL without
``session_id`` gets the id this user last used for that server (kept in
``$XDG_CACHE_HOME/cbp/connect-sessions.json``, or beside ``CBP_JVM_CACHE``), made on first use. When the
server closed that session (released, or idle longer than its timeout), cbp takes a new id once and
keeps that one. A URL that names ``session_id`` itself is used as it is, and ``CBP_CONNECT_SESSION=process``
gives the process a session of its own (pyspark's default), released when the process exits.

    >>> with_session("sc://h:15002", "s1")
    'sc://h:15002/;session_id=s1'
    >>> with_session("sc://h:15002/;token=t", "s1")
    'sc://h:15002/;token=t;session_id=s1'
    >>> names_session("sc://h:1/;session_id=x"), names_session("sc://h:1")
    (True, False)
"""

from __future__ import annotations

import json
import os
import tempfile
import uuid

from ... import settings

__all__ = ["with_session", "names_session", "shared_url", "renewed_url", "sessions_file"]


def names_session(url: str) -> bool:
    """Whether a ``sc://`` URL names its session (``;session_id=``)."""
    return ";session_id=" in url or url.rstrip("/").endswith("session_id")


def with_session(url: str, sid: str) -> str:
    """``url`` with ``;session_id=sid`` added (after its other parameters)."""
    base = url if "/;" in url else url.rstrip("/") + "/"
    return f"{base};session_id={sid}"


def sessions_file() -> str:
    """Where the shared session ids are kept: beside the driver JVM's class archives
    (``CBP_JVM_CACHE``'s parent), else ``$XDG_CACHE_HOME/cbp``."""
    jvm = settings.current().jvm_cache
    if jvm:
        base = os.path.dirname(os.path.abspath(jvm))
    else:
        base = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "cbp")
    return os.path.join(base, "connect-sessions.json")


def _load() -> dict[str, str]:
    try:
        with open(sessions_file(), encoding="utf-8") as f:
            found = json.load(f)
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, dict) else {}
    except (OSError, ValueError):
        return {}


def _save(ids: dict[str, str]) -> None:
    path = sessions_file()
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".connect-sessions-")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(ids, f, indent=1, sort_keys=True)
        os.replace(tmp, path)
    except OSError:  # a read-only home directory: the process keeps its id, the next one makes another
        pass


def shared_url(url: str) -> str:
    """The URL cbp opens for ``url``: as given if it names a session or ``CBP_CONNECT_SESSION=process``,
    else with this user's shared session id for that server (made and kept on first use)."""
    if names_session(url) or settings.current().connect_session == "process":
        return url
    ids = _load()
    if url not in ids:
        ids[url] = str(uuid.uuid4())
        _save(ids)
    return with_session(url, ids[url])


def renewed_url(url: str) -> str:
    """A new shared session id for ``url`` (the server closed the last one), kept for the next commands."""
    ids = _load()
    ids[url] = str(uuid.uuid4())
    _save(ids)
    return with_session(url, ids[url])
