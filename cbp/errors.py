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

__all__ = [
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
    """A mistake in a pipeline YAML file, found before any Spark job starts."""

    code = "spec"

    def __init__(self, path: str, message: str, *, code: str | None = None) -> None:
        self.path = path
        super().__init__(f"{path}: {message}", code=code)


class InputError(CbpError):
    """Records fed to an input flow do not fit it; nothing was landed."""

    code = "input"


class UsageError(CbpError):
    """A request names something that does not exist (an epoch not run, a stage without state)."""

    code = "usage"


class UserCodeError(CbpError):
    """A translator, RouteBy, OrderBy, FrameBy or Runnable function raised or broke its contract.

    The epoch it happened in was not committed.
    """

    code = "user-code"


class RuntimeStateError(CbpError):
    """The home directory or Spark is not in the state cbp needs."""

    code = "runtime"


class BusyError(CbpError):
    """Another ``cbp run`` holds the home: one runner per home."""

    code = "busy"
