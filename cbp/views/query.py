"""A view's SQL parsed and checked: parsed with sqlglot (Spark dialect), every construct outside this
slice refused (``view-unsupported``), every table and column resolved against the pipeline's flows
(``view-unknown``), each refusal naming the line and column in the SQL; :mod:`cbp.views.select`
reads each SELECT with it.

    >>> tables_of("SELECT o.id FROM orders o JOIN custs c ON o.cust = c.cust")
    ['orders', 'custs']
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.dialects.spark import Spark
from sqlglot.parsers.spark import SparkParser

from .datefns import folded_intervals
from .exprs import SCALAR_NODES, ViewError, construct_name
from .morefns import NAMED  # (pmod(): a function sqlglot leaves anonymous)
from .vtypes import is_typed_view_type

__all__ = [
    "ViewError",
    "Source",
    "Select",
    "tables_of",
    "AGGREGATES",
    "position",
    "placed",
    "defining_cte",
    "used_fields",
    "read_after",
    "names_of",
]


def _value_fn(cls: type[exp.Expr]) -> Callable[[list[exp.Expr]], exp.Expr]:
    """``first_value(x, ignoreNulls)`` / ``last_value(...)`` as Spark reads them: ``true`` is ``IGNORE
    NULLS``, ``false`` ``RESPECT NULLS`` (sqlglot's Spark parser refuses ``false``: its second argument
    is left over)."""

    def build(args: list[exp.Expr]) -> exp.Expr:
        if len(args) == 2 and isinstance(args[1], exp.Boolean):
            wrap = exp.IgnoreNulls if args[1].this else exp.RespectNulls
            return wrap(this=cls(this=args[0]))  # (not a function: its arguments are not counted again)
        return cls(this=args[0] if args else None)  # another second argument: refused, as Spark refuses it

    return build


class _CbpSpark(Spark):
    """Spark's dialect, with :func:`_value_fn`."""

    class Parser(SparkParser):
        FUNCTIONS = {
            **SparkParser.FUNCTIONS,
            "FIRST_VALUE": _value_fn(exp.FirstValue),
            "LAST_VALUE": _value_fn(exp.LastValue),
        }


_DIALECT = _CbpSpark
AGGREGATES: tuple[type[exp.Expr], ...] = (exp.Count, exp.Sum, exp.Avg, exp.Min, exp.Max)
_STRUCTURE = frozenset(
    {exp.Select, exp.From, exp.Table, exp.TableAlias, exp.Identifier, exp.Join, exp.Where, exp.Group, exp.Having}
    | {exp.Alias, exp.Star, exp.Union, exp.DataType, exp.Subquery, exp.Exists, exp.IntervalSpan, *AGGREGATES}
)
_KEYWORDS = {
    "SET": r"UNION|INTERSECT|EXCEPT",
    "DISTINCT": "DISTINCT",
    "ORDER BY": r"ORDER\s+BY",
    "LIMIT": "LIMIT",
    "OFFSET": "OFFSET",
}


@dataclass
class Source:
    """A flow read by a SELECT: its name in the query (alias), the flow, and its field types."""

    alias: str
    flow: str
    types: dict[str, str]  # field -> scalar type (int, float, string, bool, date, timestamp, decimal(P,S), binary)
    prefix: str = ""  # the prefix of its columns' names in a joined row ("l__", "r__")


@dataclass
class Select:
    """One SELECT of a view: its sources, and its clauses with columns renamed to row field names."""

    tree: exp.Select
    sources: list[Source]
    columns: list[tuple[str, exp.Expr]] = field(default_factory=list)  # output name -> expression
    where: exp.Expr | None = None
    steps: list[Any] = field(default_factory=list)  # the joins, a chain of cbp.views.joins.Step
    groups: list[exp.Expr] | None = None  # None: no GROUP BY
    having: exp.Expr | None = None

    @property
    def types(self) -> dict[str, str | None]:
        """Field name -> type of the rows this SELECT reads (a joined row's fields are prefixed)."""
        return {s.prefix + f: t for s in self.sources for f, t in s.types.items()}


def used_fields(q: Select) -> set[str]:
    """The row fields (a joined row's prefixed) that SELECT ``q`` reads anywhere: its columns, WHERE,
    GROUP BY, HAVING, and each join step's keys and conditions.

    >>> from cbp.views.select import read_query
    >>> q = read_query("v", "SELECT a.x FROM a JOIN b ON a.k = b.k", {"a": {"k": "int", "x": "int", "y": "int"},
    ...                                                            "b": {"k": "int", "z": "int"}})[0]
    >>> sorted(used_fields(q))
    ['l__k', 'l__x', 'r__k']
    """
    return read_after(q)[0]


def read_after(q: Select) -> list[set[str]]:
    """Per join step ``i`` (1-based), the row fields read after it: by the steps after it (their keys
    and conditions) and by the SELECT's columns, WHERE, GROUP BY and HAVING; item 0: every field read.

    >>> from cbp.views.select import read_query
    >>> q = read_query("v", "SELECT a.x FROM a JOIN b ON a.k = b.k", {"a": {"k": "int", "x": "int"},
    ...                                                            "b": {"k": "int"}})[0]
    >>> [sorted(s) for s in read_after(q)]
    [['l__k', 'l__x', 'r__k'], ['l__x']]
    """
    out = [names_of(*(e for _, e in q.columns), q.where, q.having, *(q.groups or []))]
    for st in reversed(q.steps):
        keys = [k for pair in st.keys for k in pair]
        out.append(out[-1] | names_of(*keys, *st.match, *st.filter, st.right_where, st.left_where))
    return out[::-1]


def names_of(*exprs: exp.Expr | None) -> set[str]:
    """The names of the columns that ``exprs`` read."""
    return {c.name for e in exprs if e is not None for c in e.find_all(exp.Column)}


def position(node: exp.Expr | None, sql: str, keyword: str | None = None) -> tuple[int, int]:
    """The line and column of ``node`` in ``sql`` (of its first part that sqlglot placed)."""
    for n in [node] + (list(node.walk()) if node is not None else []):
        if n is not None and "start" in n.meta:
            start = int(n.meta["start"])
            return sql.count("\n", 0, start) + 1, start - (sql.rfind("\n", 0, start) + 1) + 1
    if keyword is not None:
        m = re.search(r"\b" + _KEYWORDS.get(keyword, re.escape(keyword)) + r"\b", sql, re.IGNORECASE)
        if m is not None:
            return sql.count("\n", 0, m.start()) + 1, m.start() - (sql.rfind("\n", 0, m.start()) + 1) + 1
    return 1, 1


def _view_refusal(code: str, message: str, node: exp.Expr | None, sql: str, keyword: str | None = None) -> ViewError:
    return ViewError(code, message, *position(node, sql, keyword))


def _parse(sql: str) -> exp.Expr:
    logging.getLogger("sqlglot").setLevel(logging.ERROR)
    try:
        _check_interval_signs(sql)
        trees = [t for t in sqlglot.parse(sql, read=_DIALECT) if t is not None]
    except sqlglot.errors.ParseError as e:
        first = e.errors[0] if e.errors else {}
        what = re.sub(r"<Token token_type: [^,]*, text: ([^,]*),[^>]*>", r"'\1'", str(first.get("description") or e))
        raise ViewError(
            "view-syntax", f"not valid SQL: {what}", int(first.get("line") or 1), int(first.get("col") or 1)
        ) from None
    except sqlglot.errors.TokenError as e:
        raise ViewError("view-syntax", f"not valid SQL: {str(e).splitlines()[0]}") from None
    except RecursionError:
        raise ViewError(
            "view-unsupported", f"SQL nested deeper than {MAX_DEPTH} levels (write IN (...) for long ORs)"
        ) from None
    if len(trees) != 1:
        raise ViewError("view-syntax", f"a view is one SELECT statement, got {len(trees)} statements")
    _check_tokens(sql)
    _check_depth(trees[0], sql)
    return folded_intervals(trees[0])  # INTERVAL 1 DAY 2 HOURS: one interval, DAY TO HOUR


MAX_DEPTH = 400
"""The deepest expression a view compiles (a chain of 400 ``OR``s or ``+``s): the compiler and the
compiled rows recurse once per level, within Python's recursion limit."""

_T = sqlglot.tokens.TokenType
_NO_COMMA_BEFORE = {_T.SELECT, _T.L_PAREN, _T.COMMA, _T.DISTINCT, _T.GROUP_BY, _T.ORDER_BY, _T.PARTITION_BY}
_NO_COMMA_AFTER = {_T.R_PAREN, _T.SEMICOLON, _T.FROM, _T.GROUP_BY, _T.ORDER_BY, _T.HAVING, _T.WHERE}


def _check_tokens(sql: str) -> None:
    """Refuse what Spark's parser refuses and sqlglot reads past (``view-syntax``): a stray comma (leading,
    doubled or trailing: ``SELECT a,, b``, ``GROUP BY a,``, ``FROM t,``), an empty ``SELECT`` list or ``IN ()``.

    >>> _check_tokens("SELECT a, b FROM t WHERE a IN (1, 2)")
    >>> _check_tokens("SELECT a, FROM t")
    Traceback (most recent call last):
    cbp.views.viewerror.ViewError: not valid SQL: a comma before FROM (a column named from needs backticks)
    """
    tokens = sqlglot.tokenize(sql, read=_DIALECT)
    for i, t in enumerate(tokens):
        before = tokens[i - 1].token_type if i else None
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        what = None
        if t.token_type == _T.COMMA and (before is None or before in _NO_COMMA_BEFORE):
            what = "two commas in a row" if before == _T.COMMA else "a comma with nothing before it"
        elif t.token_type == _T.COMMA and (after is None or after.token_type in _NO_COMMA_AFTER):
            what = "a comma at the end" if after is None else f"a comma before {after.text.upper()}"
            what += " (a column named from needs backticks)" if after and after.token_type == _T.FROM else ""
        elif t.token_type == _T.SELECT and after is not None and after.token_type == _T.FROM:
            what = "an empty SELECT list (a column named from needs backticks)"
        elif t.token_type == _T.L_PAREN and before == _T.IN and after is not None and after.token_type == _T.R_PAREN:
            what = "IN () with no values"
        if what is not None:
            line = sql.count("\n", 0, t.start) + 1
            raise ViewError(
                "view-syntax", f"not valid SQL: {what}", line, t.start - (sql.rfind("\n", 0, t.start) + 1) + 1
            )


_UNIT = re.compile(r"(YEAR|MONTH|WEEK|DAY|HOUR|MINUTE|SECOND|MILLISECOND|MICROSECOND)S?", re.IGNORECASE)
_VALUE = {_T.NUMBER, _T.STRING}


def _check_interval_signs(sql: str) -> None:
    """Refuse (``view-unsupported``) a signed part after the first of an ``INTERVAL`` of several units
    (``INTERVAL 1 DAY -2 HOURS``): Spark reads it as part of the interval (22 hours), sqlglot as a
    subtraction (``(d + INTERVAL 1 DAY) - 2 AS HOURS``), a silently other query.

    >>> _check_interval_signs("SELECT d + INTERVAL 1 DAY 2 HOURS, d - INTERVAL -1 DAY - 2 FROM t")
    >>> _check_interval_signs("SELECT d + INTERVAL 1 DAY -2 HOURS FROM t")
    Traceback (most recent call last):
    cbp.views.viewerror.ViewError: INTERVAL ... -2 HOURS: a signed part after the first ...
    """
    tokens = sqlglot.tokenize(sql, read=_DIALECT)
    for i, t in enumerate(tokens):
        if t.token_type != _T.INTERVAL:
            continue
        j, first = i + 1, True
        while j + 1 < len(tokens):
            signed = tokens[j].token_type in (_T.DASH, _T.PLUS)
            value, unit = tokens[j + signed], tokens[j + signed + 1] if j + signed + 1 < len(tokens) else None
            if value.token_type not in _VALUE or unit is None or not _UNIT.fullmatch(unit.text):
                break
            if signed and not first:
                line = sql.count("\n", 0, tokens[j].start) + 1
                raise ViewError(
                    "view-unsupported",
                    f"INTERVAL ... {tokens[j].text}{value.text} {unit.text}: a signed part after the first (Spark "
                    "reads it as part of the interval, sqlglot as a subtraction): write the interval as one text, "
                    "such as INTERVAL '0 22' DAY TO HOUR",
                    line,
                    tokens[j].start - (sql.rfind("\n", 0, tokens[j].start) + 1) + 1,
                )
            j, first = j + signed + 2, False


def _check_depth(tree: exp.Expr, sql: str) -> None:
    """Refuse (``view-unsupported``) an expression nested deeper than :data:`MAX_DEPTH`, at its place."""
    stack: list[tuple[exp.Expr, int]] = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            message = f"an expression nested deeper than {MAX_DEPTH} levels (write IN (...) for a long chain of ORs)"
            raise _view_refusal("view-unsupported", message, node, sql)
        stack.extend((child, depth + 1) for child in node.iter_expressions())


def tables_of(sql: str) -> list[str]:
    """The table names a view's SQL reads (an unparsable SQL: none; its error comes with the view)."""
    try:
        tree = _parse(sql)
    except ViewError:
        return []
    return [t.name for t in tree.find_all(exp.Table) if defining_cte(t) is None]


def defining_cte(table: exp.Table) -> exp.CTE | None:
    """The CTE ``table`` reads: the one of its name in the nearest enclosing ``WITH`` (in a CTE's body,
    only the CTEs before it); None: it reads a flow.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one("WITH a AS (SELECT * FROM a) SELECT * FROM a", read="spark")
    >>> [defining_cte(t) is not None for t in tree.find_all(exp.Table)]
    [True, False]
    """
    if table.args.get("db") is not None:
        return None
    name = table.name.lower()
    child: exp.Expr = table
    node = table.parent
    while node is not None:
        if isinstance(node, exp.With):  # from a CTE's body: the CTEs before it
            before = node.expressions[: next(i for i, c in enumerate(node.expressions) if c is child)]
            hit = [c for c in before if c.alias_or_name.lower() == name]
            if hit:
                return hit[-1]
        else:
            w = node.args.get("with_") or node.args.get("with")
            if isinstance(w, exp.With) and w is not child:
                hit = [c for c in w.expressions if c.alias_or_name.lower() == name]
                if hit:
                    return hit[-1]
        child, node = node, node.parent
    return None


def _check_nodes(tree: exp.Expr, sql: str, allowed: Callable[[exp.Expr], bool] | None = None) -> None:
    """Every node of the tree is one this slice compiles (``allowed``: a node checked elsewhere, such as a
    window function's, :func:`cbp.views.windows.allowed`)."""
    if not isinstance(tree, (exp.Select, exp.Union)):
        raise _view_refusal("view-unsupported", f"a view is a SELECT, not {construct_name(tree)}", tree, sql)
    for node in tree.walk():
        t = type(node)
        if allowed is not None and allowed(node):
            continue
        if t in (exp.Select, exp.Union) and node is not tree and not _in_union_or_condition(node):
            raise _view_refusal("view-unsupported", "a subquery is not supported yet", node, sql)
        if t is exp.Distinct and isinstance(node.parent, (exp.Select, *AGGREGATES)):
            continue  # SELECT DISTINCT, count(DISTINCT col) (the plan refuses it in other aggregates)
        if t not in SCALAR_NODES and t not in _STRUCTURE and not (t is exp.Anonymous and node.name.lower() in NAMED):
            what = construct_name(node)
            raise _view_refusal(
                "view-unsupported", f"{what} is not supported in a view yet", node, sql, what.split(" (")[0]
            )
        if (
            t is exp.Select
            and isinstance(node.args.get("distinct"), exp.Distinct)
            and node.args["distinct"].args.get("on")
        ):
            raise _view_refusal("view-unsupported", "SELECT DISTINCT ON", None, sql, "DISTINCT")
        if isinstance(node, AGGREGATES) and (
            not isinstance(node.parent, (exp.Select, exp.Alias, *SCALAR_NODES))
            or any(isinstance(a, AGGREGATES) for a in node.walk() if a is not node)
        ):
            raise _view_refusal("view-unsupported", f"{construct_name(node)} here (nested or in a clause)", node, sql)


def _in_union_or_condition(node: exp.Expr) -> bool:
    """A SELECT that is a branch of a UNION, or the subquery of EXISTS or IN (SELECT ...)."""
    parent = node.parent
    if isinstance(parent, (exp.Union, exp.Exists)):
        return True
    return isinstance(parent, exp.Subquery) and isinstance(parent.parent, exp.In) and type(node) is exp.Select


def _flatten(tree: exp.Expr, out: list[exp.Expr], sql: str) -> None:
    if isinstance(tree, exp.Union):
        if tree.args.get("distinct"):
            raise _view_refusal(
                "view-unsupported", "UNION (distinct) is not supported yet; UNION ALL is", tree, sql, "UNION"
            )
        if type(tree) is not exp.Union:
            raise _view_refusal("view-unsupported", f"{type(tree).__name__.upper()} is not supported yet", tree, sql)
        _flatten(tree.this, out, sql)
        _flatten(tree.expression, out, sql)
    else:
        out.append(tree)


def _source(table: exp.Table, sql: str, flows: Mapping[str, Mapping[str, str]]) -> Source:
    if not isinstance(table, exp.Table) or table.args.get("db") is not None:
        raise _view_refusal(
            "view-unknown", f"{table.sql(dialect='spark')} is not a flow; the flows are {', '.join(flows)}", table, sql
        )
    by_lower = {f.lower(): f for f in flows}
    flow = table.name if table.name in flows else by_lower.get(table.name.lower())
    if flow is None:
        raise _view_refusal(
            "view-unknown", f"no flow or view named '{table.name}'; there are: {', '.join(flows)}", table, sql
        )
    types: dict[str, str] = {}
    for f, t in flows[flow].items():
        types[f] = t
    return Source(table.alias_or_name, flow, types)


def _renamer(q: Select, sql: str) -> Callable[[exp.Expr], exp.Expr]:
    """A function renaming the columns of an expression to the row's field names (``l__x`` in a join)."""

    def resolve(col: exp.Column) -> exp.Expr:
        table = col.table.lower()
        hits = []
        for s in q.sources:
            if table and table not in (s.alias.lower(), s.flow.lower()):
                continue
            hits += [(s, f) for f in s.types if f.lower() == col.name.lower()]
        if len(hits) != 1:
            have = ", ".join(f"{s.alias}.{f}" for s in q.sources for f in s.types)
            what = "ambiguous" if hits else "unknown"
            raise _view_refusal(
                "view-unknown", f"{what} column '{col.sql(dialect='spark')}'; the columns are {have}", col, sql
            )
        s, f = hits[0]
        if not is_typed_view_type(s.types[f]):
            raise _view_refusal(
                "view-unsupported",
                f"column '{f}' of type {s.types[f]} (a view uses int, float, string, bool, date, timestamp, "
                "decimal(P,S), binary)",
                col,
                sql,
            )
        renamed = exp.column(s.prefix + f, quoted=True)
        renamed.meta.update(col.this.meta)  # where the column is in the SQL, for messages
        return renamed

    def rename(e: exp.Expr) -> exp.Expr:
        return e.transform(lambda n: resolve(n) if isinstance(n, exp.Column) else n)

    return rename


def placed(e: ViewError, sql: str) -> ViewError:
    """``e`` with the line and column of its node in ``sql``."""
    what = str(e)
    return _view_refusal(
        e.code,
        f"{what} is not supported in a view yet" if e.code == "view-unsupported" else what,
        e.node,
        sql,
        what.split(" (")[0],
    )
