"""A pipeline's ``sql:`` files, the convention of Spark Declarative Pipelines: each file's
``CREATE [OR REFRESH] MATERIALIZED VIEW name AS SELECT ...;`` statements read as views.

A path is relative to the YAML and must stay inside the YAML's directory tree (symlinks resolved);
the statements are split with sqlglot's tokenizer (comments allowed), and each view keeps where its
``SELECT`` starts in its file, so an error inside it names the file's line and column.

    >>> found = views_of_text("q.sql", "-- hits\\nCREATE MATERIALIZED VIEW big AS\\n  SELECT id FROM hits;")
    >>> found["big"].sql, found["big"].line, found["big"].col
    ('SELECT id FROM hits', 3, 3)
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import sqlglot
from sqlglot.tokens import Token, TokenType

from ..errors import SpecError

__all__ = ["SqlView", "read_sql_files", "views_of_text"]

_MAX_BYTES = 1 << 20  # a file of SQL views is small


@dataclass(frozen=True)
class SqlView:
    """A view read from a .sql file: its SELECT, the file (as the YAML names it) and where the
    SELECT starts in the file (1-based line and column)."""

    sql: str
    file: str
    line: int
    col: int

    def place(self, line: int | None, col: int | None) -> tuple[int, int]:
        """A line and column in the view's SQL as a line and column in the file.

        >>> SqlView("SELECT id\\nFROM t", "q.sql", 4, 10).place(2, 6)
        (5, 6)
        """
        if line is None:
            return self.line, self.col
        return self.line + line - 1, (self.col + (col or 1) - 1) if line == 1 else (col or 1)


def _where(text: str, offset: int) -> tuple[int, int]:
    return text.count("\n", 0, offset) + 1, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _statements(file: str, text: str) -> list[list[Token]]:
    """The file's statements, each its tokens (comments dropped), split at ``;``."""
    try:
        tokens = sqlglot.tokenize(text, read="spark")
    except sqlglot.errors.TokenError as e:
        raise SpecError(file, f"not valid SQL: {str(e).splitlines()[0]}", code="view-syntax") from None
    out: list[list[Token]] = [[]]
    for t in tokens:
        if t.token_type == TokenType.SEMICOLON:
            out.append([])
        else:
            out[-1].append(t)
    return [s for s in out if s]


def _view_name(s: list[Token]) -> tuple[str, int] | None:
    """``(name, index of the first token after AS)`` if ``s`` is ``CREATE [OR REFRESH] MATERIALIZED
    VIEW name AS ...``, else None."""
    words = [t.text.upper() for t in s]
    i = 3 if words[:3] == ["CREATE", "OR", "REFRESH"] else 1 if words[:1] == ["CREATE"] else 0
    if not i or words[i : i + 2] != ["MATERIALIZED", "VIEW"] or len(s) < i + 5:
        return None
    name, as_ = s[i + 2], s[i + 3]
    if name.token_type not in (TokenType.VAR, TokenType.IDENTIFIER) or as_.token_type != TokenType.ALIAS:
        return None
    return name.text, i + 4


def views_of_text(file: str, text: str) -> dict[str, SqlView]:
    """The views the SQL ``text`` of ``file`` creates, by name; a statement that creates no
    materialized view is a :class:`SpecError` (``sql-file-statement``) naming its line and column,
    a view created twice in the file ``duplicate-view``."""
    found: dict[str, SqlView] = {}
    for s in _statements(file, text):
        line, col = _where(text, s[0].start)
        head = _view_name(s)
        if head is None:
            what = " ".join(t.text for t in s[:4])
            mv = "MATERIALIZED VIEW" in " ".join(t.text.upper() for t in s[:5])
            why = "a qualified name or options before AS are not read" if mv else "it is not a view"
            raise SpecError(
                file,
                f"line {line}, column {col}: '{what} ...': {why}; a SQL file of the pipeline holds "
                "'CREATE [OR REFRESH] MATERIALIZED VIEW name AS SELECT ...;' statements only",
                code="sql-file-statement",
            )
        name, first = head
        if name in found:
            raise SpecError(
                file, f"line {line}, column {col}: view '{name}' is created twice in the file", code="duplicate-view"
            )
        start, end = s[first].start, s[-1].end + 1
        found[name] = SqlView(text[start:end], file, *_where(text, start))
    return found


def _inside(base: str, entry: str, yaml_path: str) -> str:
    """The real path of ``entry`` (relative to ``base``); a :class:`SpecError` if it leaves ``base``
    (``sql-file-outside``) or is no readable file (``sql-file-missing``)."""
    real = os.path.realpath(os.path.join(base, entry))
    if os.path.isabs(entry) or os.path.commonpath([base, real]) != base:
        raise SpecError(
            yaml_path,
            f"sql: '{entry}' is outside the YAML's directory {base} (a path or symlink out of it): "
            "a pipeline reads SQL files beside its YAML only",
            code="sql-file-outside",
        )
    if not os.path.isfile(real):
        raise SpecError(yaml_path, f"sql: '{entry}': no such file beside the YAML", code="sql-file-missing")
    return real


def read_sql_files(yaml_path: str, entries: list[str], views: dict[str, str]) -> dict[str, SqlView]:
    """The views of the ``sql:`` files of the YAML at ``yaml_path``, by name; ``views`` are the
    YAML's own (a name in both, or in two files, is ``duplicate-view``).

    Example: with ``flows/p.yaml`` holding ``sql: [shop.sql]``, ``read_sql_files("flows/p.yaml",
    ["shop.sql"], {})`` reads ``flows/shop.sql``; ``["../x.sql"]`` is ``sql-file-outside``.
    """
    base = os.path.realpath(os.path.dirname(os.path.abspath(yaml_path)))
    out: dict[str, SqlView] = {}
    for entry in entries:
        real = _inside(base, entry, yaml_path)
        try:
            with open(real, "rb") as fh:
                data = fh.read(_MAX_BYTES + 1)
            text = data.decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise SpecError(yaml_path, f"sql: '{entry}' cannot be read: {e}", code="unreadable") from None
        if len(data) > _MAX_BYTES:
            raise SpecError(yaml_path, f"sql: '{entry}' is longer than 1 MiB", code="unreadable")
        shown = os.path.join(os.path.dirname(yaml_path), entry)
        for name, v in views_of_text(shown, text).items():
            before = "the YAML's views:" if name in views else out[name].file if name in out else None
            if before is not None:
                raise SpecError(
                    shown,
                    f"line {v.line}: view '{name}' is defined twice (also in {before})",
                    code="duplicate-view",
                )
            out[name] = v
    return out
