"""What ``cbp sql`` refuses before Spark starts, and ``VERSION AS OF`` on its views.

The statement is parsed in Python with sqlglot (Spark dialect), so a syntax error, a statement
that would change something, and a name that is no view are refused at once (Spark's JVM takes
seconds to start). Spark's own parser and :func:`cbp.sql._check_read_only` still look at every
statement that gets through: this check only refuses earlier, it lets nothing more through.

``FROM view VERSION AS OF N`` reads a view as ``--epoch`` does for epoch N: a stage's state
after its epoch N, a flow's records written by its producer's epoch N (an external flow: its Nth
feed). The statement is then rewritten to read a view registered for that epoch.

    >>> check(["url_count", "urls"], "SELECT * FROM url_count VERSION AS OF 2 c").travel
    {('url_count', 2): 'url_count@2'}
    >>> try:
    ...     check(["url_count"], "SELECT * FROM nope")
    ... except UsageError as e:
    ...     print(e.code)
    sql-unknown-view
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from .errors import UsageError

__all__ = ["Checked", "check", "travel_name"]

#: Statements that change tables, views, settings or the cache (sqlglot's expression classes).
_WRITES = (
    "Insert",
    "Create",
    "Drop",
    "Delete",
    "Update",
    "Merge",
    "Set",
    "Alter",
    "Cache",
    "Uncache",
    "Use",
    "Command",
    "TruncateTable",
    "Analyze",
    "LoadData",
    "Refresh",
    "Grant",
    "Revoke",
    "Transaction",
    "Commit",
    "Rollback",
    "Pragma",
    "Copy",
    "Export",
)
#: Statements sqlglot keeps as raw commands that are read-only; Spark's own check decides on them.
_READ_COMMANDS = ("EXPLAIN", "SHOW", "DESCRIBE", "DESC")


@dataclass
class Checked:
    """A statement that passed: ``query`` as Spark gets it (rewritten only for time travel) and
    ``travel``: (view, epoch) -> the name of the view registered for that epoch."""

    query: str
    travel: dict[tuple[str, int], str] = field(default_factory=dict)


def travel_name(view: str, epoch: int) -> str:
    """The name of the view of ``view`` at ``epoch`` (``@`` is in no stage or flow name).

    >>> travel_name("counts", 3)
    'counts@3'
    """
    return f"{view}@{epoch}"


def check(view_names: Iterable[str], query: str) -> Checked:
    """Parse ``query`` and refuse it (a :class:`UsageError`) if it is not one read-only query over
    ``view_names`` and its own common table expressions. Codes: ``bad-sql`` (a syntax error, with
    line and column; several statements), ``sql-not-query``, ``sql-not-allowed`` (a table by path
    or catalog), ``sql-unknown-view`` (the message lists the views), ``sql-time-travel``
    (``TIMESTAMP AS OF``, or a version that is not a whole number)."""
    import sqlglot
    from sqlglot import exp

    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # "falling back to parsing as a Command" is no news
    views = {v.lower(): v for v in view_names}
    try:
        statements = [s for s in sqlglot.parse(query, read="spark") if s is not None]
    except sqlglot.errors.ParseError as e:
        _refuse_unparsed(query)  # a write sqlglot cannot parse (INSERT OVERWRITE DIRECTORY ...) is still a write
        raise _syntax_error(e) from None
    except sqlglot.errors.TokenError as e:
        raise UsageError(f"the SQL query does not parse: {str(e).splitlines()[0]}", code="bad-sql") from None
    if len(statements) != 1:
        raise UsageError(f"cbp sql runs one statement, got {len(statements)}", code="bad-sql")
    tree = statements[0]
    if isinstance(tree, exp.Command) and str(tree.this).upper() in _READ_COMMANDS:
        return Checked(query)  # EXPLAIN/SHOW ...: left to Spark's parser and cbp.sql._check_read_only
    for node in tree.walk():
        if type(node).__name__ in _WRITES:
            raise UsageError(
                f"cbp sql runs queries only (SELECT, WITH, VALUES, EXPLAIN, DESCRIBE, SHOW); this "
                f"statement contains {type(node).__name__.upper()}, which would change tables or settings",
                code="sql-not-query",
            )
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    travel: dict[tuple[str, int], str] = {}
    for table in list(tree.find_all(exp.Table)):
        if not isinstance(table.this, exp.Identifier):
            continue  # a table function: cbp.sql._check_read_only decides
        if table.args.get("db") is not None or table.args.get("catalog") is not None:
            raise UsageError(
                f"cbp sql reads the pipeline's views only: {table.sql(dialect='spark')} is a table by "
                "path or catalog; name a view (a stage or a flow)",
                code="sql-not-allowed",
            )
        name = table.name.lower()
        if name in ctes and table.args.get("version") is None:
            continue
        if name not in views:
            raise UsageError(
                f"no view named {table.name!r}; the views are {', '.join(sorted(views.values()))} "
                "(each stateful stage's state, each flow's records)",
                code="sql-unknown-view",
            )
        if table.args.get("version") is not None:
            epoch = _travel_epoch(table, views[name])
            new = travel.setdefault((views[name], epoch), travel_name(views[name], epoch))
            table.set("version", None)
            table.set("this", exp.to_identifier(new, quoted=True))
    return Checked(tree.sql(dialect="spark") if travel else query, travel)


#: Keywords (sqlglot's token types) that only a statement that writes has.
_WRITE_WORDS = frozenset(
    {"INSERT", "OVERWRITE", "CREATE", "DROP", "DELETE", "MERGE", "UPDATE", "ALTER", "TRUNCATE", "CACHE", "UNCACHE"}
)


def _refuse_unparsed(query: str) -> None:
    """For a statement sqlglot cannot parse: ``sql-not-query`` if it has a keyword only writes
    have, ``sql-not-allowed`` for ``IDENTIFIER(...)`` in a form sqlglot does not know (over an
    expression, called); else nothing (a syntax error)."""
    from sqlglot.dialects.spark import Spark

    try:
        tokens = Spark().tokenize(query)
    except Exception:  # not even tokens: a syntax error
        return
    found = sorted({t.token_type.name for t in tokens} & _WRITE_WORDS)
    if found:
        raise UsageError(
            f"cbp sql runs queries only (SELECT, WITH, VALUES, EXPLAIN, DESCRIBE, SHOW); this statement "
            f"has {', '.join(found)}, which would change tables or files",
            code="sql-not-query",
        )
    if any(a.text.upper() == "IDENTIFIER" and b.token_type.name == "L_PAREN" for a, b in zip(tokens, tokens[1:])):
        raise UsageError(
            "cbp sql reads the pipeline's views only: IDENTIFIER() over an expression; write the name itself",
            code="sql-not-allowed",
        )


def _travel_epoch(table: object, view: str) -> int:
    """The epoch of ``view VERSION AS OF N``; ``sql-time-travel`` for a timestamp or another version."""
    from sqlglot import exp

    version = table.args["version"]  # type: ignore[attr-defined]
    kind, value = str(version.this).upper(), version.expression
    if kind != "VERSION" or str(version.args.get("kind", "")).upper() != "AS OF":
        raise UsageError(
            f"{view} {kind} {version.args.get('kind', '')}: cbp's views travel by epoch only: "
            f"write '{view} VERSION AS OF N' (the epoch) or use --epoch N",
            code="sql-time-travel",
        )
    if not (isinstance(value, exp.Literal) and not value.is_string and str(value.this).isdigit()):
        raise UsageError(
            f"{view} VERSION AS OF {value.sql(dialect='spark')}: give an epoch number (as --epoch N)",
            code="sql-time-travel",
        )
    return int(value.this)


def _syntax_error(e: object) -> UsageError:
    """``bad-sql`` for sqlglot's parse error, naming line and column."""
    errors = getattr(e, "errors", None) or [{}]
    first = errors[0]
    where = f"line {first.get('line')}, column {first.get('col')}" if first.get("line") else "somewhere"
    what = str(first.get("description") or str(e).splitlines()[0])
    near = str(first.get("highlight") or "").strip()
    near_text = f" (near {near!r})" if near else ""
    return UsageError(f"the SQL query does not parse at {where}{near_text}: {what}", code="bad-sql")
