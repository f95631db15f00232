"""A view's SELECTs read: sources and joins resolved (:mod:`cbp.views.joins`), columns renamed to row
field names, GROUP BY, HAVING and SELECT DISTINCT read; each refusal naming its line and column.

    >>> q = read_query("v", "SELECT url, n + 1 AS m FROM hits WHERE n > 0", {"hits": {"url": "string", "n": "int"}})
    >>> [b.sources[0].flow for b in q]
    ['hits']
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from sqlglot import exp

from .joins import read_joins
from .query import AGGREGATES, Select, _check_nodes, _flatten, _parse, _source, _view_refusal
from .windows import allowed, outside_windows

__all__ = ["read_query", "read_tree", "distinct_over_groups"]


def read_query(name: str, sql: str, flows: Mapping[str, Mapping[str, str]]) -> list[Select]:
    """The SELECTs of view ``name`` (several with UNION ALL), checked against ``flows`` (flow ->
    field -> type string); :class:`ViewError` on the first thing wrong."""
    return read_tree(_parse(sql), sql, flows)


def read_tree(tree: exp.Expr, sql: str, flows: Mapping[str, Mapping[str, str]]) -> list[Select]:
    """:func:`read_query` of a parsed (and rewritten, :mod:`cbp.views.hoist`) tree of ``sql``."""
    _check_nodes(tree, sql, lambda n: allowed(n, tree, sql))  # window functions, ORDER BY ... LIMIT
    branches: list[exp.Expr] = []
    _flatten(tree, branches, sql)
    return [_select(b, sql, flows, i > 0) for i, b in enumerate(branches)]


def _select(tree: exp.Expr, sql: str, flows: Mapping[str, Mapping[str, str]], later: bool = False) -> Select:
    """One SELECT: sources resolved, its columns renamed, the join condition split into keys (``later``:
    a set operation's branch after the first, whose columns the first names: one may be unnamed)."""
    assert isinstance(tree, exp.Select)
    frm = tree.args.get("from_") or tree.args.get("from")
    if frm is None:
        raise _view_refusal("view-unsupported", "a SELECT without FROM", tree, sql)
    q = Select(tree, [_source(frm.this, sql, flows)])
    rename = read_joins(q, sql, flows)
    q.columns = _columns(q, sql, rename, later)
    group = tree.args.get("group")
    aggregated = any(isinstance(n, AGGREGATES) and outside_windows(n) for _, e in q.columns for n in e.walk())
    if tree.args.get("distinct") is not None:
        if group is not None or aggregated:  # (rewritten before: distinct_over_groups)
            raise _view_refusal(
                "view-unsupported", "SELECT DISTINCT with GROUP BY or aggregates", None, sql, "DISTINCT"
            )
        q.groups = [e for _, e in q.columns]  # SELECT DISTINCT cols: GROUP BY cols
    if group is not None:
        q.groups = [rename(g) for g in group.expressions]
    elif q.groups is None and aggregated:
        q.groups = []  # an aggregate without GROUP BY: one group, its row there even over no input
    if tree.args.get("having") is not None:
        if q.groups is None or (group is None and q.groups):
            raise _view_refusal("view-unsupported", "HAVING without GROUP BY", tree.args["having"], sql, "HAVING")
        q.having = rename(tree.args["having"].this)
    return q


def _columns(
    q: Select, sql: str, rename: Callable[[exp.Expr], exp.Expr], later: bool = False
) -> list[tuple[str, exp.Expr]]:
    """The output columns: ``*`` expanded, each named (its alias, or the column's name; in a later
    branch of a set operation, an unnamed one ``cbp__c<i>``)."""
    out: list[tuple[str, exp.Expr]] = []
    for e in q.tree.expressions:
        if isinstance(e, exp.Star):
            out += [(f, exp.column(s.prefix + f, quoted=True)) for s in q.sources for f in s.types]
            continue
        if isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
            s = next((s for s in q.sources if s.alias.lower() == e.table.lower()), None)
            if s is None:
                raise _view_refusal("view-unknown", f"no table named '{e.table}' in the FROM clause", e, sql)
            out += [(f, exp.column(s.prefix + f, quoted=True)) for f in s.types]
            continue
        name = e.alias if isinstance(e, exp.Alias) else (e.name if isinstance(e, exp.Column) else "")
        name = name or (f"cbp__c{len(out)}" if later else "")
        if not name:
            raise _view_refusal(
                "view-unsupported", f"an unnamed column '{e.sql(dialect='spark')}': name it with AS", e, sql
            )
        out.append((name, rename(e.this if isinstance(e, exp.Alias) else e)))
    seen: set[str] = set()
    for name, e in out:
        if name.lower() in seen or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]{0,99}", name):
            raise _view_refusal(
                "view-unsupported", f"output column name '{name}' (twice, or not an identifier)", e, sql
            )
        seen.add(name.lower())
    return out


def _grouped(select: exp.Select) -> bool:
    """A SELECT with GROUP BY or an aggregate outside a window function."""
    if select.args.get("group") is not None:
        return True
    return any(isinstance(n, AGGREGATES) and outside_windows(n) for e in select.expressions for n in e.walk())


def distinct_over_groups(tree: exp.Expr) -> exp.Expr:
    """``tree`` with each ``SELECT DISTINCT ... GROUP BY ...`` (or DISTINCT over an aggregate or a window) written
    ``SELECT DISTINCT * FROM (SELECT ... GROUP BY ...) AS cbp_grouped``: the grouped query a derived
    table (an internal view ``v__from<i>``, :mod:`cbp.views.hoist`), the DISTINCT a GROUP BY of its
    rows (per distinct row its count); a top ``ORDER BY ... LIMIT`` stays outside, on the distinct rows.

    >>> distinct_over_groups(_parse("SELECT DISTINCT g, count(*) AS n FROM t GROUP BY g, h")).sql("spark")
    'SELECT DISTINCT * FROM (SELECT g, COUNT(*) AS n FROM t GROUP BY g, h) AS cbp_grouped'
    """
    for node in list(tree.find_all(exp.Select)):
        if node.args.get("distinct") is None or node.args["distinct"].args.get("on"):
            continue
        if not _grouped(node) and not any(isinstance(n, exp.Window) for e in node.expressions for n in e.walk()):
            continue
        inner = node.copy()
        inner.set("distinct", None)
        moved = {part: inner.args.get(part) for part in ("order", "limit", "offset", "with_")}
        for part in moved:
            inner.set(part, None)
        alias = exp.TableAlias(this=exp.to_identifier("cbp_grouped"))
        outer = exp.Select(expressions=[exp.Star()], distinct=exp.Distinct())
        outer.set("from_", exp.From(this=exp.Subquery(this=inner, alias=alias)))
        for part, value in moved.items():
            if value is not None:
                outer.set(part, value)
        if node is tree:
            tree = outer
        else:
            node.replace(outer)
    return tree
