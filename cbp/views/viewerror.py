"""The error a view's SQL is refused with (:class:`ViewError`), in a module of its own so that every
module of :mod:`cbp.views` may raise it (:mod:`cbp.views.exprs` re-exports it).

    >>> ViewError("view-unsupported", "rand()", 2, 3).line
    2
"""

from __future__ import annotations

from sqlglot import exp

__all__ = ["ViewError"]


class ViewError(Exception):
    """A view's SQL refused: the error code, the message, and its place (the line and column in the
    SQL, or the node it is at until it is placed); :func:`cbp.views.expand_views` makes it a
    :class:`cbp.errors.SpecError`."""

    def __init__(self, code: str, message: str, line: int = 1, col: int = 1, node: exp.Expr | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.line, self.col, self.node = code, message, line, col, node
