"""String functions of a view's expressions with Spark's semantics: ``substring`` and ``LIKE`` /
``NOT LIKE`` / ``ILIKE`` (``%`` any run of characters, ``_`` one character, ``\\`` or the ``ESCAPE``
character before ``%``, ``_`` or itself a literal one; NULL in, NULL out).

    >>> like("a_b%", r"a\\_b\\%")
    True
    >>> like(None, "a%") is None
    True
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

__all__ = ["like", "substring", "like_value", "like_operands", "LIKE_NODES"]

#: The sqlglot nodes of ``LIKE`` (``negate`` for ``NOT LIKE``), ``ILIKE`` and their ``ESCAPE '!'``.
LIKE_NODES = frozenset({exp.Like, exp.ILike, exp.Escape})


def substring(s: Any, pos: Any, length: Any) -> Any:
    """Spark's substring: 1-based ``pos`` (0 as 1, negative from the end), ``length`` characters.

    >>> substring("hello", -3, 2)
    'll'
    """
    if s is None or pos is None:
        return None
    start = pos - 1 if pos > 0 else (len(s) + pos if pos < 0 else 0)
    end = len(s) if length is None else start + length
    start = max(start, 0)
    return s[start:end] if start < end else ""


@functools.lru_cache(maxsize=1024)
def _pattern(pattern: str, escape: str, ci: bool) -> re.Pattern[str]:
    """A LIKE pattern as a regular expression (Spark refuses an escape before another character or
    at the end: so does this, with ValueError)."""
    out, i = [], 0
    while i < len(pattern):
        c = pattern[i]
        if c == escape:
            if i + 1 == len(pattern) or pattern[i + 1] not in ("%", "_", escape):
                raise ValueError(f"the escape character is not allowed to precede {pattern[i + 1 : i + 2]!r}")
            out.append(re.escape(pattern[i + 1]))
            i += 2
            continue
        out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
        i += 1
    return re.compile("".join(out), re.DOTALL | (re.IGNORECASE if ci else 0))


def like(s: Any, pattern: Any, escape: str = "\\", ci: bool = False) -> Any:
    """``s LIKE pattern`` (``ci``: ``ILIKE``); None if either is None.

    >>> like("Hello", "h%", ci=True), like("Hello", "h%")
    (True, False)
    """
    if s is None or pattern is None:
        return None
    if ci:
        s, pattern = s.lower(), pattern.lower()
    return _pattern(pattern, escape, ci).fullmatch(s) is not None


def like_value(node: exp.Expr, row: Mapping[str, Any], ev: Callable[[exp.Expr, Mapping[str, Any]], Any]) -> Any:
    """The value of a LIKE, NOT LIKE or ILIKE node (with or without ``ESCAPE``) on ``row``."""
    escape = "\\"
    if isinstance(node, exp.Escape):
        escape = str(ev(node.expression, row))
        node = node.this
    v = like(ev(node.this, row), ev(node.expression, row), escape, isinstance(node, exp.ILike))
    return (not v if v is not None else None) if node.args.get("negate") else v


def like_operands(node: exp.Expr) -> list[exp.Expr]:
    """The string operands of a LIKE node: the value, the pattern (and the escape character)."""
    if isinstance(node, exp.Escape):
        return [*like_operands(node.this), node.expression]
    return [node.this, node.expression]
