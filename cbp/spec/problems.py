"""Internal: the mistakes of one pipeline YAML file, collected in one pass and raised as one :class:`SpecError`.

The compiler runs each check that does not depend on a failed one inside :meth:`Problems.check`;
a :class:`SpecError` raised there is kept and the next check runs. :meth:`Problems.raise_any` then
raises one error listing them all, with the first one's code (and the first alone as it was).

    >>> p = Problems("x.yaml")
    >>> for code in ("bad-name", "unknown-flow"):
    ...     with p.check():
    ...         raise SpecError("x.yaml", f"line 3: it is wrong ({code})", code=code)
    >>> try:
    ...     p.raise_any()
    ... except SpecError as e:
    ...     print(e.code, [c for c, _ in e.problems])
    bad-name ['bad-name', 'unknown-flow']
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ..errors import SpecError

__all__ = ["Problems", "combined"]


class Problems:
    """The SpecErrors found so far in the file at ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.errors: list[SpecError] = []

    @contextmanager
    def check(self) -> Iterator[None]:
        """Run a check; a SpecError it raises is kept, not raised."""
        try:
            yield
        except SpecError as e:
            self.errors.append(e)

    def raise_any(self) -> None:
        """Raise the problems found as one SpecError (nothing if there are none)."""
        if self.errors:
            raise combined(self.path, self.errors)


def combined(path: str, errors: list[SpecError]) -> SpecError:
    """One SpecError for ``errors``: the first itself if it is alone; else one whose message is the
    first's followed by the others (each with its code), and whose ``problems`` holds every
    ``(code, message)``."""
    if len(errors) == 1:
        return errors[0]
    problems = [p for e in errors for p in e.problems]
    first, *rest = [f"{message.removeprefix(path + ': ')} [{code}]" for code, message in problems]
    text = f"{first}; and {len(rest)} more problem{'s' if len(rest) > 1 else ''}: {'; '.join(rest)}"
    return SpecError(path, text, code=problems[0][0], problems=problems)
