"""Regular expressions of a view's expressions: ``rlike`` / ``regexp_like`` / ``regexp``,
``regexp_extract(s, p [, group])`` and ``regexp_replace(s, p, r)``, with Java's regular expressions
(Spark's) translated to Python's ``re`` when the pattern (a string literal) is compiled, and refused
(``view-unsupported``, naming the construct) where ``re`` would match differently: ``\\p{...}``
classes, ``\\Q...\\E``, ``\\b``, ``\\Z``, ``\\v``, ``\\h``, named groups, class unions and
intersections (``[a[b]]``, ``&&``), inline flags other than a leading ``(?i)``/``(?s)``, ``(?m)``.

Java's ``\\w``, ``\\d``, ``\\s`` and ``(?i)`` are ASCII (``re.ASCII``); its ``.`` stops at any line
terminator (``\\r``, ``\\u0085``, ``\\u2028``, ``\\u2029`` too) and its ``$`` matches before a final
one: both translated. A replacement's ``$n`` is group ``n`` (a group that did not match: nothing),
``\\x`` the character ``x``.

    >>> java_regex(r"^(a+)\\d.$").pattern
    '^(a+)\\\\d[^\\\\n\\\\r\\\\u0085\\\\u2028\\\\u2029](?=(?:\\\\r\\\\n|[\\\\n\\\\r\\\\u0085\\\\u2028\\\\u2029])?\\\\Z)'
    >>> replacement(r"<$1\\$>", 1)
    ['<', 1, '$>']
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from .viewerror import ViewError

__all__ = ["TYPES", "VALUES", "java_regex", "replacement"]

_Infer = Callable[[exp.Expr, Mapping[str, str | None]], Any]
_Ev = Callable[[exp.Expr, Mapping[str, Any]], Any]
_TERMINATORS = r"\n\r\u0085\u2028\u2029"
_DOT = f"[^{_TERMINATORS}]"
_END = rf"(?=(?:\r\n|[{_TERMINATORS}])?\Z)"
#: Escapes (after ``\``) that mean the same in Java and Python.
_SAME = set("tnrfa.\\[](){}*+?|^$-/dDsSwWA&'\"!#%,:;<=>@`~_ ") | set("123456789")
#: Escapes refused, with the reason.
_REFUSED = {
    "p": "\\p{...} classes", "P": "\\P{...} classes", "Q": "\\Q...\\E quoting", "E": "\\Q...\\E quoting",
    "b": "\\b (Java's word boundary is not ASCII-only, Python's here is)", "B": "\\B",
    "Z": "\\Z (Java: before a final line terminator)", "v": "\\v (Java: any vertical whitespace)",
    "h": "\\h", "H": "\\H", "R": "\\R", "X": "\\X", "G": "\\G", "k": "named groups", "c": "\\c",
    "e": "\\e", "0": "octal escapes", "x": None, "u": None, "z": None, "U": "\\U", "N": "\\N",
}  # fmt: skip


def _refuse(what: str) -> ViewError:
    return ViewError("view-unsupported", f"a regular expression with {what} (Java's and Python's differ)")


def _escape(p: str, i: int, in_class: bool) -> tuple[str, int]:
    """The Python of the escape at ``p[i]`` (a backslash) and the index after it."""
    if i + 1 >= len(p):
        raise _refuse("a trailing backslash")
    c = p[i + 1]
    if c == "x" and p[i + 2 : i + 3] == "{":
        raise _refuse("\\x{...}")
    if c in ("x", "u"):
        n = 2 if c == "x" else 4
        digits = p[i + 2 : i + 2 + n]
        if len(digits) != n or any(d not in "0123456789abcdefABCDEF" for d in digits):
            raise _refuse(f"a malformed \\{c} escape")
        return p[i : i + 2 + n], i + 2 + n
    if c == "z":
        return "\\Z", i + 2
    if c.isdigit() and not in_class and c != "0":
        if p[i + 2 : i + 3].isdigit():
            raise _refuse("a back-reference of two digits")
        return p[i : i + 2], i + 2
    if c in _REFUSED or (c.isascii() and c.isalnum() and c not in _SAME):
        raise _refuse(_REFUSED.get(c) or f"\\{c}")
    return ("\\" + c) if c.isascii() else re.escape(c), i + 2


def _klass(p: str, i: int) -> tuple[str, int]:
    """A character class ``[...]`` at ``p[i]``: its Python and the index after it."""
    out, j = ["["], i + 1
    if p[j : j + 1] == "^":
        out.append("^")
        j += 1
    if p[j : j + 1] == "]":
        raise _refuse("a ']' first in a class")
    while j < len(p) and p[j] != "]":
        if p[j] == "[" or p.startswith("&&", j):
            raise _refuse("a class union or intersection ([a[b]], &&)")
        if p[j] == "\\":
            text, j = _escape(p, j, True)
            out.append(text)
            continue
        out.append("\\" + p[j] if p[j] in "|&~" else p[j])  # (doubled in Python: set operations)
        j += 1
    if j >= len(p):
        raise _refuse("an unclosed class")
    return "".join(out) + "]", j + 1


def _flags(p: str) -> tuple[int, int]:
    """Leading inline flags ``(?i)``, ``(?s)``, ``(?is)``: their ``re`` flags and the index after them."""
    m = re.match(r"\(\?([a-zA-Z]+)\)", p)
    if m is None:
        return 0, 0
    if set(m[1]) - {"i", "s"}:
        raise _refuse(f"the inline flags (?{m[1]}) (a leading (?i), (?s) are translated)")
    return (re.IGNORECASE if "i" in m[1] else 0) | (re.DOTALL if "s" in m[1] else 0), m.end()


@functools.lru_cache(maxsize=512)
def java_regex(p: str) -> re.Pattern[str]:
    """Java regular expression ``p`` as a compiled Python one (:class:`ViewError` where they differ)."""
    flags, i = _flags(p)
    out: list[str] = []
    while i < len(p):
        c = p[i]
        if c == "\\":
            text, i = _escape(p, i, False)
            out.append(text)
            continue
        if c == "[":
            text, i = _klass(p, i)
            out.append(text)
            continue
        if c == "(" and p.startswith("(?", i):
            if not any(p.startswith(g, i) for g in ("(?:", "(?=", "(?!", "(?<=", "(?<!", "(?>")):
                raise _refuse("a group (?...) other than (?:, (?=, (?!, (?<=, (?<!, (?> (named groups, inline flags)")
        elif c == "{" and re.match(r"\{,", p[i:]):
            raise _refuse("{,n} (Java refuses it)")
        out.append(_DOT if c == "." and not flags & re.DOTALL else _END if c == "$" else c)
        i += 1
    try:
        return re.compile("".join(out), flags | re.ASCII)
    except re.error as e:
        raise _refuse(f"a pattern Python cannot compile ({e})") from None


def replacement(r: str, groups: int) -> list[str | int]:
    """A Java replacement string: literal text and group numbers (``$n``; ``\\x`` is ``x``)."""
    out: list[str | int] = []
    i = 0
    while i < len(r):
        c = r[i]
        if c == "\\":
            if i + 1 >= len(r):
                raise _refuse("a replacement ending in a backslash (Spark fails the query)")
            out.append(r[i + 1])
            i += 2
        elif c == "$":
            m = re.match(r"\d", r[i + 1 :])
            if m is None:
                raise _refuse("a replacement with '$' not before a group number (${name}: named groups)")
            n, j = int(r[i + 1]), i + 2
            while j < len(r) and r[j].isdigit() and n * 10 + int(r[j]) <= groups:
                n, j = n * 10 + int(r[j]), j + 1
            if n > groups:
                raise _refuse(f"a replacement naming group {n} of {groups} (Spark fails the query)")
            out.append(n)
            i = j
        else:
            out.append(c)
            i += 1
    merged: list[str | int] = []
    for part in out:
        if isinstance(part, str) and merged and isinstance(merged[-1], str):
            merged[-1] += part
        else:
            merged.append(part)
    return merged


def _pattern(node: exp.Expr) -> re.Pattern[str]:
    """The node's pattern (a string literal), translated once per node."""
    got = node.meta.get("cbp_regex")
    if got is None:
        lit = node.args.get("expression")
        if not (isinstance(lit, exp.Literal) and lit.is_string):
            raise ViewError("view-unsupported", f"{_name(node)}() of a pattern that is not a string literal", node=node)
        try:
            got = node.meta["cbp_regex"] = java_regex(lit.this)
        except ViewError as e:
            raise ViewError(e.code, e.message, node=node) from None
    return got


def _name(node: exp.Expr) -> str:
    names: dict[type[exp.Expr], str] = {exp.RegexpLike: "rlike", exp.RegexpExtract: "regexp_extract"}
    return names.get(type(node), "regexp_replace")


def _group(node: exp.Expr) -> int:
    g = node.args.get("group")
    if g is None:
        return 1
    if not (isinstance(g, exp.Literal) and not g.is_string and str(g.this).isdigit()):
        raise ViewError("view-unsupported", "regexp_extract() of a group that is not an int literal", node=node)
    return int(g.this)


def _strings(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None], *args: exp.Expr | None) -> None:
    for a in args:
        t = infer(a, types) if a is not None else None
        if t not in ("string", None):
            raise ViewError("view-unsupported", f"{_name(node)}() of a {t} (it takes strings)", node=node)


def _like_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    if node.args.get("flag") is not None:
        raise ViewError("view-unsupported", "rlike() with flags", node=node)
    _pattern(node)
    _strings(node, infer, types, node.this)
    return "bool"


def _extract_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    if _group(node) > _pattern(node).groups:
        raise ViewError(
            "view-unsupported",
            f"regexp_extract() of group {_group(node)} of a pattern with {_pattern(node).groups} groups (Spark "
            "fails the query)",
            node=node,
        )
    _strings(node, infer, types, node.this)
    return "string"


def _replace_parts(node: exp.Expr) -> list[str | int]:
    got = node.meta.get("cbp_replacement")
    if got is None:
        r = node.args.get("replacement")
        if not (isinstance(r, exp.Literal) and r.is_string):
            raise ViewError(
                "view-unsupported", "regexp_replace() of a replacement that is not a string literal", node=node
            )
        try:
            got = node.meta["cbp_replacement"] = replacement(r.this, _pattern(node).groups)
        except ViewError as e:
            raise ViewError(e.code, e.message, node=node) from None
    return got


def _replace_type(node: exp.Expr, infer: _Infer, types: Mapping[str, str | None]) -> str:
    if any(node.args.get(k) is not None for k in ("position", "occurrence", "modifiers")):
        raise ViewError("view-unsupported", "regexp_replace() with a position (not yet)", node=node)
    _replace_parts(node)
    _strings(node, infer, types, node.this)
    return "string"


def _like_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    s = ev(node.this, row)
    return None if s is None else _pattern(node).search(s) is not None


def _extract_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    s = ev(node.this, row)
    if s is None:
        return None
    m = _pattern(node).search(s)
    return "" if m is None else m.group(_group(node)) or ""


def _replace_value(node: exp.Expr, row: Mapping[str, Any], ev: _Ev) -> Any:
    s = ev(node.this, row)
    if s is None:
        return None
    parts = _replace_parts(node)
    return _pattern(node).sub(lambda m: "".join(p if isinstance(p, str) else m.group(p) or "" for p in parts), s)


#: The type of each regular expression function node (its pattern translated and checked).
TYPES: dict[type[exp.Expr], Callable[[exp.Expr, _Infer, Mapping[str, str | None]], str]] = {
    exp.RegexpLike: _like_type,
    exp.RegexpExtract: _extract_type,
    exp.RegexpReplace: _replace_type,
}
#: The value of each regular expression function node on a row.
VALUES: dict[type[exp.Expr], Callable[[exp.Expr, Mapping[str, Any], _Ev], Any]] = {
    exp.RegexpLike: _like_value,
    exp.RegexpExtract: _extract_value,
    exp.RegexpReplace: _replace_value,
}
