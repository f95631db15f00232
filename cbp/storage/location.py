"""Where a home may be: the locations cbp accepts (a local directory, a ``file:`` URI naming one,
``s3://BUCKET[/PREFIX]``), checked before anything is written (``bad-home``)."""

from __future__ import annotations

import os
import re

from ..errors import UsageError
from . import objectstore

__all__ = ["check_location", "local_file_uri", "refuse_mistyped_url"]


def check_location(loc: str) -> str:
    """A home's location as given, if cbp can keep a home there: a local path, a ``file://``
    URI, or ``s3://BUCKET[/PREFIX]`` (``s3a://`` too). Refused (``bad-home``): other schemes
    (no store cbp was tested with; some retry for minutes), an ``s3://`` URI without a bucket, and
    ``%``, ``\\`` or control characters in the path (delta-rs reads a table's path as a URL: it
    would percent-decode ``%41`` and open another directory's tables).

        >>> check_location("state/x"), check_location("s3://b/homes/x")
        ('state/x', 's3://b/homes/x')
    """
    scheme, sep, rest = loc.partition("://")
    if not sep:
        refuse_mistyped_url(loc)
    if sep:
        if scheme.lower() not in (*objectstore.S3_SCHEMES, "file"):
            raise UsageError(
                f"--home {loc!r}: cbp keeps homes on a local disk or on S3 (s3://BUCKET/PREFIX), not {scheme}://",
                code="bad-home",
            )
        if scheme.lower() != "file" and (not rest or rest.startswith("/")):
            raise UsageError(f"--home {loc!r}: name a bucket (s3://BUCKET/PREFIX)", code="bad-home")
    local = loc[len("file://") :] if loc.lower().startswith("file://") else (None if sep else loc)
    if local is not None and "\0" in local:
        raise UsageError(
            f"--home {loc!r}: a home's path may not contain a NUL; choose another directory", code="bad-home"
        )
    if local is not None and local.startswith("//"):  # POSIX leaves '//x' to the system; URLs read it as a host
        raise UsageError(f"--home {loc!r}: a path starting with '//'; give it with one '/'", code="bad-home")
    if local is not None and os.path.realpath(local) == os.path.realpath(os.sep):  # a link to / too
        raise UsageError(f"--home {loc!r} is the root directory; give a directory of its own", code="bad-home")
    if local is not None:
        up = local
        while up and not os.path.lexists(up) and os.path.dirname(up) != up:
            up = os.path.dirname(up)  # the nearest part of the path that exists must be a directory
        if up and os.path.exists(up) and not os.path.isdir(up):
            raise UsageError(
                f"--home {loc!r}: {up} is a file, not a directory; a home is a directory cbp creates", code="bad-home"
            )
    bad = sorted({c for c in loc if c in "%\\" or ord(c) < 32 or ord(c) == 127})
    if bad:
        raise UsageError(
            f"--home {loc!r}: a home's path may not contain {', '.join(repr(c) for c in bad)} "
            "(Delta tables are opened by URL: '%' would be decoded); choose another directory",
            code="bad-home",
        )
    return loc


#: ``scheme:`` at the start of a location: a URL, not a path (``file:`` is read by :func:`local_file_uri`).
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
#: A store's name followed by ``//`` or ``:/``-less text: ``s3//b``, ``s3:b`` (a colon or slashes missing).
_MISSING_COLON = re.compile(r"(s3a?|file)//", re.IGNORECASE)


def refuse_mistyped_url(loc: str) -> None:
    """``bad-home`` for a location that looks like a mistyped URL (``s3:/b``, ``s3:b``, ``s3//b``,
    ``gs:b``), which would otherwise be a local directory named so; ``file:/x`` is a path.

        >>> try:
        ...     refuse_mistyped_url("s3:/b/x")
        ... except UsageError as e:
        ...     print(e.code, str(e).split(": ")[1])
        bad-home did you mean s3://b/x? (a local directory
        >>> refuse_mistyped_url("./s3:/b/x"), refuse_mistyped_url("file:/tmp/x")
        (None, None)
    """
    if "://" in loc:
        return  # a URL: check_location decides on it
    m = _SCHEME.match(loc)
    if m and m.group(1).lower() != "file":
        scheme, rest = m.group(1).lower(), loc[m.end() :].lstrip("/")
        guess = (
            f"did you mean {scheme}://{rest}?"
            if scheme in objectstore.S3_SCHEMES
            else f"cbp keeps homes on a local disk or on S3 (s3://BUCKET/PREFIX), not {scheme}:"
        )
        raise UsageError(
            f"--home {loc!r} looks like a mistyped URL: {guess} (a local directory: ./{loc})", code="bad-home"
        )
    m = _MISSING_COLON.match(loc)
    if m:
        url = f"{m.group(1).lower()}://{loc[m.end() :]}"
        raise UsageError(
            f"--home {loc!r} looks like a mistyped URL: did you mean {url}? (a local directory: ./{loc})",
            code="bad-home",
        )


def local_file_uri(loc: str) -> str:
    """A ``file:`` URI as the local path it names (``file:///x``, ``file://localhost/x`` and
    ``file:/x`` are ``/x``); any other location as it is. A ``file:`` URI naming another host or a
    relative path is ``bad-home``.

        >>> local_file_uri("file://localhost/tmp/h"), local_file_uri("file:/tmp/h"), local_file_uri("s3://b/h")
        ('/tmp/h', '/tmp/h', 's3://b/h')
    """
    if loc[:5].lower() != "file:":
        return loc
    rest = loc[5:]
    if rest.startswith("//"):
        host, _, path = rest[2:].partition("/")
        if host.lower() not in ("", "localhost"):
            raise UsageError(
                f"--home {loc!r}: a file: URI of another host ({host}); give a local path or file:///PATH",
                code="bad-home",
            )
        return "/" + path
    if rest.startswith("/"):
        return rest
    raise UsageError(
        f"--home {loc!r}: a file: URI names an absolute path (file:///PATH); give that, or a plain path",
        code="bad-home",
    )
