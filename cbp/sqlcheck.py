"""What ``cbp sql`` refuses before Spark sees the statement, and ``VERSION AS OF`` on its views.

The statement is parsed in Python with sqlglot (Spark dialect), and this is the only check: on a
Spark Connect server ``spark.sql`` runs a command the moment it gets it, and no JVM parser is at
hand on a client. What may run is named, everything else is refused:

- one statement: a query (``SELECT``, ``WITH``, ``VALUES``, set operations), ``DESCRIBE`` a view,
  ``EXPLAIN`` a statement that passes this check, ``SHOW TABLES|VIEWS|FUNCTIONS [LIKE 'p']`` or
  ``SHOW COLUMNS IN view``; anything else, at the top or nested, is ``sql-not-query`` (INSERT,
  CREATE, DROP, ALTER, MERGE, UPDATE, DELETE, SET, RESET, CACHE, ADD JAR, REFRESH, CALL,
  EXECUTE IMMEDIATE, DECLARE ...);
- reading the views only (``sql-not-allowed``): no table by path or catalog (``parquet.`/x```),
  no table function but ``range`` and Spark's generators (not ``read_files``), no function that
  calls Java or reads a file (``reflect``, ``java_method``, ``from_protobuf``), no catalog's
  function (``db.f()``), no ``TRANSFORM ... USING`` (a program), no ``IDENTIFIER(...)``;
- a name that is no view is ``sql-unknown-view``, a syntax error or several statements ``bad-sql``.

``FROM view VERSION AS OF N`` reads a view as ``--epoch`` does for epoch N: a stage's state
after its epoch N, a flow's records written by its producer's epoch N (an external flow: its Nth
feed). The statement is then rewritten to read a view registered for that epoch.

    >>> check(["url_count", "urls"], "SELECT * FROM url_count VERSION AS OF 2 c").travel
    {('url_count', 2): 'url_count@2'}
    >>> try:
    ...     check(["url_count"], "SELECT * FROM parquet.`/etc`")
    ... except UsageError as e:
    ...     print(e.code)
    sql-not-allowed
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

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
#: Table functions a query may call: Spark's generators and ``range`` (none reads a file).
_TABLE_FUNCTIONS = frozenset(
    {
        "range",
        "explode",
        "explode_outer",
        "inline",
        "inline_outer",
        "json_tuple",
        "posexplode",
        "posexplode_outer",
        "stack",
        "variant_explode",
        "variant_explode_outer",
        "sql_keywords",
        "collations",
    }
)
#: Functions that run Java code named in the query, or read a file named in it.
_REFUSED_FUNCTIONS = frozenset({"reflect", "java_method", "try_reflect", "from_protobuf", "to_protobuf"})
#: ``EXPLAIN``'s modes (Spark's grammar): the statement follows.
_EXPLAIN_MODES = frozenset({"EXTENDED", "CODEGEN", "COST", "FORMATTED", "LOGICAL"})
#: What ``SHOW`` may list besides a view's columns: names, nothing from files or a catalog.
_SHOW_LISTS = frozenset({"TABLES", "VIEWS", "FUNCTIONS"})
_QUERY_ONLY = "cbp sql runs queries only (SELECT, WITH, VALUES, EXPLAIN, DESCRIBE, SHOW); this statement"


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
    ``view_names`` and its own common table expressions (see the module for what may run). Codes:
    ``bad-sql`` (a syntax error, with line and column; several statements), ``sql-not-query``,
    ``sql-not-allowed``, ``sql-unknown-view`` (the message lists the views), ``sql-time-travel``
    (``TIMESTAMP AS OF``, or a version that is not a whole number).

        >>> check(["urls"], "EXPLAIN SELECT * FROM urls").query
        'EXPLAIN SELECT * FROM urls'
    """
    views = {v.lower(): v for v in view_names}
    tree = _parse(query)
    from sqlglot import exp

    if isinstance(tree, exp.Command):
        return _command(views, query, tree)
    _refuse_writes(tree)
    _refuse_outside_reads(tree)
    return _resolve_tables(views, query, tree)


def _parse(query: str) -> object:
    """The one statement of ``query`` as sqlglot's tree (``bad-sql``, or ``sql-not-query`` for a
    write sqlglot cannot parse)."""
    import sqlglot

    logging.getLogger("sqlglot").setLevel(logging.ERROR)  # "falling back to parsing as a Command" is no news
    try:
        statements = [s for s in sqlglot.parse(query, read="spark") if s is not None]
    except sqlglot.errors.ParseError as e:
        _refuse_unparsed(query)  # a write sqlglot cannot parse (INSERT OVERWRITE DIRECTORY ...) is still a write
        raise _syntax_error(e) from None
    except sqlglot.errors.TokenError as e:
        raise UsageError(f"the SQL query does not parse: {str(e).splitlines()[0]}", code="bad-sql") from None
    if len(statements) != 1:
        raise UsageError(f"cbp sql runs one statement, got {len(statements)}", code="bad-sql")
    return statements[0]


def _refuse_writes(tree: object) -> None:
    """``sql-not-query`` unless the statement is a query or ``DESCRIBE`` with nothing that writes in it."""
    from sqlglot import exp

    for node in tree.walk():  # type: ignore[attr-defined]
        if type(node).__name__ in _WRITES:
            raise UsageError(
                f"{_QUERY_ONLY} contains {type(node).__name__.upper()}, which would change tables or settings",
                code="sql-not-query",
            )
    if not isinstance(tree, (exp.Query, exp.Values, exp.Describe)):  # RESET, CLEAR CACHE: an expression to sqlglot
        first = str(tree.sql(dialect="spark")).split(None, 1)[0:1] or ["?"]  # type: ignore[attr-defined]
        raise UsageError(f"{_QUERY_ONLY} starts with {first[0]!r}, which is no query", code="sql-not-query")


def _refuse_outside_reads(tree: object) -> None:
    """``sql-not-allowed`` for what reads or runs anything but the views (see the module)."""
    from sqlglot import exp

    if isinstance(tree, exp.Describe) and (str(tree.args.get("kind") or "TABLE").upper() != "TABLE"):
        raise UsageError(
            f"cbp sql reads the pipeline's views only: DESCRIBE {tree.args.get('kind')}; describe a view",
            code="sql-not-allowed",
        )
    for node in tree.walk():  # type: ignore[attr-defined]
        why = _outside_read(node)
        if why:
            raise UsageError(f"cbp sql reads the pipeline's views only: {why}", code="sql-not-allowed")


def _func_name(node: object) -> str:
    """A function call's name as written (lower case; a quoted name keeps its backticks)."""
    from sqlglot import exp

    if isinstance(node, exp.Anonymous) and isinstance(node.this, str):
        return node.this.lower()
    return str(node.sql(dialect="spark")).split("(", 1)[0].strip().lower()  # type: ignore[attr-defined]


def _outside_read(node: object) -> str:
    """Why one node of the statement may not run in ``cbp sql`` ("" if it may)."""
    from sqlglot import exp

    if isinstance(node, exp.QueryTransform):
        return "TRANSFORM ... USING runs a program"
    if isinstance(node, exp.Func) and _func_name(node) == "identifier":
        return "IDENTIFIER(); write the name itself"
    if isinstance(node, (exp.Table, exp.Lateral)) and isinstance(node.this, exp.Func):
        name = _func_name(node.this)
        if name not in _TABLE_FUNCTIONS and name != "identifier":
            return f"table function {name}() may read files; only {', '.join(sorted(_TABLE_FUNCTIONS))} are allowed"
    if isinstance(node, exp.Table) and not isinstance(node.this, (exp.Identifier, exp.Func)):
        return f"{node.sql(dialect='spark')} is no view"
    if isinstance(node, exp.Dot) and isinstance(node.expression, exp.Func):
        return f"function {node.sql(dialect='spark').split('(', 1)[0]}() is a catalog's function"
    if isinstance(node, exp.Func) and _func_name(node) in _REFUSED_FUNCTIONS:
        return f"function {_func_name(node)}() calls Java code or reads a file"
    return ""


def _resolve_tables(views: dict[str, str], query: str, tree: object) -> Checked:
    """The views the statement reads, checked (``sql-not-allowed`` by path or catalog,
    ``sql-unknown-view``), and ``VERSION AS OF`` rewritten to the views of those epochs."""
    from sqlglot import exp

    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}  # type: ignore[attr-defined]
    travel: dict[tuple[str, int], str] = {}
    for table in list(tree.find_all(exp.Table)):  # type: ignore[attr-defined]
        if not isinstance(table.this, exp.Identifier):
            continue  # a table function (checked above)
        if table.args.get("db") is not None or table.args.get("catalog") is not None:
            raise UsageError(
                f"cbp sql reads the pipeline's views only: {table.sql(dialect='spark')} is a table by "
                "path or catalog; name a view (a stage or a flow)",
                code="sql-not-allowed",
            )
        name = table.name.lower()
        if name in ctes and table.args.get("version") is None:
            continue
        _known_view(views, table.name)
        if table.args.get("version") is not None:
            epoch = _travel_epoch(table, views[name])
            new = travel.setdefault((views[name], epoch), travel_name(views[name], epoch))
            table.set("version", None)
            table.set("this", exp.to_identifier(new, quoted=True))
    return Checked(tree.sql(dialect="spark") if travel else query, travel)  # type: ignore[attr-defined]


def _known_view(views: dict[str, str], name: str) -> None:
    """``sql-unknown-view`` (listing the views) unless ``name`` is one."""
    if name.lower() not in views:
        raise UsageError(
            f"no view named {name!r}; the views are {', '.join(sorted(views.values()))} "
            "(each stateful stage's state, each flow's records)",
            code="sql-unknown-view",
        )


def _command(views: dict[str, str], query: str, tree: object) -> Checked:
    """A statement sqlglot keeps as a raw command: ``EXPLAIN`` of a statement this check lets
    through, ``SHOW`` of names or of a view's columns; anything else (ADD JAR, CALL, MSCK,
    EXECUTE IMMEDIATE ...) is ``sql-not-query``."""
    from sqlglot.dialects.spark import Spark

    word = str(tree.this).upper()  # type: ignore[attr-defined]
    rest = str(tree.expression.this) if tree.expression is not None else ""  # type: ignore[attr-defined]
    tokens = Spark().tokenize(rest) if rest.strip() else []
    if word == "EXPLAIN" and tokens:
        skip = 1 if tokens[0].text.upper() in _EXPLAIN_MODES and len(tokens) > 1 else 0
        inner = check(views.values(), rest[tokens[skip].start :])
        if not inner.travel:
            return Checked(query)
        return Checked(f"EXPLAIN {rest[: tokens[skip].start]}{inner.query}", inner.travel)
    if word == "SHOW" and tokens:
        _check_show(views, tokens)
        return Checked(query)
    raise UsageError(f"{_QUERY_ONLY} is {word}, which is no query", code="sql-not-query")


def _check_show(views: dict[str, str], tokens: Sequence[Any]) -> None:
    """``SHOW TABLES|VIEWS|FUNCTIONS [LIKE] ['pattern']`` or ``SHOW COLUMNS IN|FROM view``; else ``sql-not-allowed``."""
    words = [(t.token_type.name, t.text) for t in tokens]
    what = words[0][1].upper()
    if what in _SHOW_LISTS and [k for k, _ in words[1:]] in ([], ["STRING"], ["LIKE", "STRING"]):
        return
    if what == "COLUMNS" and len(words) == 3 and words[1][0] in ("IN", "FROM") and words[2][0] in ("VAR", "IDENTIFIER"):
        _known_view(views, words[2][1])
        return
    raise UsageError(
        f"cbp sql reads the pipeline's views only: SHOW {' '.join(t for _, t in words)}; it shows "
        "TABLES, VIEWS, FUNCTIONS [LIKE 'pattern'] and COLUMNS IN a view",
        code="sql-not-allowed",
    )


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
