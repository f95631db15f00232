"""The cbp error hierarchy.

Every error names what the user must look at: the file and line, the stage, the flow,
the epoch or the key. Tests assert the ``code`` attribute, not the wording.

    >>> try:
    ...     raise SpecError("flows/x.yaml", "stage 'count': unknown input flow 'urlz'", code="unknown-flow")
    ... except CbpError as e:
    ...     print(e.code)
    unknown-flow
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "printable",
    "CbpError",
    "SpecError",
    "InputError",
    "UsageError",
    "UserCodeError",
    "RuntimeStateError",
    "BusyError",
]


class CbpError(Exception):
    """Base class of every error cbp raises on purpose."""

    code: str = "cbp-error"

    def __init__(self, message: str, *, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code


class SpecError(CbpError):
    """A mistake in a pipeline YAML file, found before any Spark job starts.

    ``problems`` lists every mistake found in one pass as ``(code, message)`` (each message with the
    file and line); ``code`` is the first one's.
    """

    code = "spec"

    def __init__(
        self, path: str, message: str, *, code: str | None = None, problems: list[tuple[str, str]] | None = None
    ) -> None:
        self.path = path
        super().__init__(f"{path}: {message}", code=code)
        self.problems: list[tuple[str, str]] = problems or [(self.code, str(self))]


class InputError(CbpError):
    """Records fed to an input flow do not fit it; nothing was landed."""

    code = "input"


class UsageError(CbpError):
    """A request names something that does not exist (an epoch not run, a stage without state)."""

    code = "usage"


class UserCodeError(CbpError):
    """A translator, RouteBy, OrderBy, FrameBy or Runnable function raised or broke its contract.

    The epoch it happened in was not committed. Codes: ``user-code``, ``timeout`` (the epoch ran
    out of its time limit), ``worker-died`` (a Python worker exited while running user code), and
    the controller's own. When known: ``stage``, ``epoch``, ``key`` (the grouping key, as the
    translator got it), ``exc_type`` (the exception's class name) and ``location`` (the user's
    ``file:line``); ``None`` otherwise.

        >>> e = UserCodeError("stage 'c' epoch 2 key 'k': ...", stage="c", epoch=2, key="k", exc_type="ValueError")
        >>> e.code, e.stage, e.epoch, e.key, e.exc_type, e.location
        ('user-code', 'c', 2, 'k', 'ValueError', None)
    """

    code = "user-code"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        stage: str | None = None,
        epoch: int | None = None,
        key: Any = None,
        exc_type: str | None = None,
        location: str | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.stage, self.epoch, self.key = stage, epoch, key
        self.exc_type, self.location = exc_type, location


class RuntimeStateError(CbpError):
    """The home directory or Spark is not in the state cbp needs.

    Code ``io`` for a home that cannot be written (read-only, full, unreachable), with ``path``
    and ``errno`` when known, and ``stage``/``epoch`` when it happened in a stage epoch.
    """

    code = "runtime"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        path: str | None = None,
        errno: int | None = None,
        stage: str | None = None,
        epoch: int | None = None,
    ) -> None:
        super().__init__(message, code=code)
        self.path, self.errno, self.stage, self.epoch = path, errno, stage, epoch


class BusyError(CbpError):
    """Another ``cbp run`` holds the home: one runner per home (code ``busy``); or, on an object
    store, this process's lease on the home ran out or was taken over (code ``lease-lost``)."""

    code = "busy"


def printable(text: str) -> str:
    r"""``text`` as one line a terminal shows as it is: control characters (escape sequences, line
    breaks, NUL) and lone surrogates as Python escapes.

        >>> print(printable("stage 'a\x1b[2Jb'\n"))
        stage 'a\x1b[2Jb'\n
    """
    return "".join(
        c if c.isprintable() or c == " " else c.encode("unicode_escape", "backslashreplace").decode("ascii")
        for c in text
    )
