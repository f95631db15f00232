"""A view's set operations with distinct results, ``UNION``, ``INTERSECT [DISTINCT]`` and ``EXCEPT
[DISTINCT]``, rewritten (before hoisting, :mod:`cbp.views.hoist`) as a GROUP BY of the whole row over
a ``UNION ALL`` of the branches, DBSP's distinct over a union: per distinct row the stage keeps the
count of each side's records, retractions included.

- ``a UNION b [UNION c ...]``: internal view ``<v>__set<i>``, ``a UNION ALL b ...`` (a record-wise
  stage), and the view ``SELECT DISTINCT * FROM <v>__set<i>`` (a GROUP BY stage).
- ``a INTERSECT b`` / ``a EXCEPT b``: ``<v>__set<i>`` is ``SELECT *, 1 AS cbp__l, 0 AS cbp__r FROM a
  UNION ALL SELECT *, 0, 1 FROM b``; the view groups its columns ``HAVING sum(cbp__l) > 0 AND
  sum(cbp__r) > 0`` (``= 0`` for EXCEPT): a row leaves EXCEPT's result when it arrives on the right
  and comes back when it leaves.

As in Spark, the first branch names the columns, the branches' types are widened when they differ
only by numeric width (another difference is ``view-unsupported``), and NULLs are equal (a GROUP BY
key). ``INTERSECT ALL`` and ``EXCEPT ALL`` group the same way and write each row with its
multiplicity as its ``_diff`` (column ``cbp__w``: ``min(a, b)``, ``a - b``, kept while positive). A
branch with window functions or its own ``ORDER BY ... LIMIT`` becomes a derived table first.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one("SELECT k FROM a EXCEPT SELECT k FROM b", read="spark")
    >>> tree, made = set_operations(tree, "", "v", {}, lambda n, t, f: {"k": "int", "cbp__l": "int", "cbp__r": "int"})
    >>> tree.sql()
    'SELECT "k" FROM v__set1 AS v__set1 GROUP BY "k" HAVING SUM("cbp__l") > 0 AND SUM("cbp__r") = 0'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sqlglot import exp

__all__ = ["set_operations", "WEIGHT"]

Flows = Mapping[str, Mapping[str, str]]
Compile = Callable[[str, exp.Expr, Flows], dict[str, str]]
_MARKS = ("cbp__l", "cbp__r")
#: The column of a GROUP BY that is its rows' multiplicity, not written (:func:`cbp.views.run.group`).
WEIGHT = "cbp__w"


def set_operations(
    tree: exp.Expr, sql: str, view: str, flows: Flows, compile: Compile | None
) -> tuple[exp.Expr, dict[str, dict[str, str]]]:
    """``tree`` with its set operations other than ``UNION ALL`` rewritten (the root may be replaced);
    the internal views' flows it now reads."""
    if not isinstance(tree, exp.SetOperation) or compile is None:
        return tree, {}
    if not (_distinct_on_spine(tree) or any(_needs_view(b) for b in _branches(tree))):
        return tree, {}
    for b in _branches(tree)[1:]:  # a later branch's names are the first's: one may be unnamed
        if isinstance(b, exp.Select):
            b.set("expressions", [_named(e, i) for i, e in enumerate(b.expressions)])
    made: dict[str, dict[str, str]] = {}
    top = {k: tree.args.get(k) for k in ("order", "limit", "offset")}  # ORDER BY ... LIMIT [OFFSET] of the query
    new = _rewrite(tree, sql, view, flows, compile, made)
    for k, v in top.items():
        if v is not None and new is not tree:
            new.set(k, v)
    return new, made


def _rewrite(node: exp.Expr, sql: str, view: str, flows: Flows, compile: Compile, made: dict) -> exp.Expr:
    """``node``, a branch of a set operation, as a SELECT or a ``UNION ALL`` of SELECTs."""
    if isinstance(node, exp.Subquery) and not node.alias:
        return _rewrite(node.this, sql, view, flows, compile, made)
    if not isinstance(node, exp.SetOperation):
        return _own_view(node)
    distinct = bool(node.args.get("distinct"))
    if type(node) is exp.Union and not distinct:
        left = _rewrite(node.this, sql, view, flows, compile, made)
        right = _rewrite(node.expression, sql, view, flows, compile, made)
        return exp.Union(this=_detached(left), expression=_detached(right), distinct=False)
    if type(node) is exp.Union:
        branches = [_rewrite(b, sql, view, flows, compile, made) for b in _union_branches(node)]
        name = _fresh(f"{view}__set", {**flows, **made})  # after the branches' own
        made[name] = compile(name, _union_all([_detached(b) for b in branches]), {**flows, **made})
        return exp.select("*").from_(_table(name)).distinct()
    left = _marked(_rewrite(node.this, sql, view, flows, compile, made), (1, 0))
    right = _marked(_rewrite(node.expression, sql, view, flows, compile, made), (0, 1))
    name = _fresh(f"{view}__set", {**flows, **made})
    made[name] = compile(name, _union_all([left, right]), {**flows, **made})
    cols = [exp.column(f, quoted=True) for f in made[name] if f not in _MARKS]
    query = exp.select(*cols).from_(_table(name)).group_by(*[c.copy() for c in cols])
    return query.having(_kept(type(node) is exp.Intersect)) if distinct else _multiplicity(query, node)


def _kept(intersect: bool) -> exp.Expr:
    """The rows of a distinct INTERSECT (on both sides) or EXCEPT (on the left, not the right)."""
    l_sum, r_sum = (exp.Sum(this=exp.column(m, quoted=True)) for m in _MARKS)
    zero = exp.Literal.number(0)
    kept = exp.GT(this=r_sum, expression=zero) if intersect else exp.EQ(this=r_sum, expression=zero)
    return exp.and_(exp.GT(this=l_sum, expression=zero.copy()), kept)


def _multiplicity(query: exp.Select, node: exp.Expr) -> exp.Select:
    """``query`` with column ``cbp__w``, each row's multiplicity (``INTERSECT ALL``: the smaller side's
    count; ``EXCEPT ALL``: the left's less the right's), kept while it is positive."""
    left, right = (exp.Sum(this=exp.column(m, quoted=True)) for m in _MARKS)
    if type(node) is exp.Intersect:
        w: exp.Expr = exp.If(this=exp.LT(this=left, expression=right), true=left.copy(), false=right.copy())
    else:
        w = exp.Sub(this=left, expression=right)
    return query.select(exp.alias_(w, WEIGHT)).having(exp.GT(this=w.copy(), expression=exp.Literal.number(0)))


def _branches(node: exp.Expr) -> list[exp.Expr]:
    """The SELECTs of a tree of set operations (parenthesized ones included)."""
    if isinstance(node, exp.Subquery) and not node.alias:
        return _branches(node.this)
    if isinstance(node, exp.SetOperation):
        return _branches(node.this) + _branches(node.expression)
    return [node]


def _named(e: exp.Expr, i: int) -> exp.Expr:
    if isinstance(e, (exp.Alias, exp.Column, exp.Star)):
        return e
    return exp.alias_(e, f"cbp__c{i}")


def _needs_view(branch: exp.Expr) -> bool:
    """A SELECT with ``ORDER BY ... LIMIT`` or window functions (of its own, not its subqueries')."""
    if not isinstance(branch, exp.Select):
        return False
    windowed = any(w.find_ancestor(exp.Select) is branch for w in branch.find_all(exp.Window))
    return branch.args.get("limit") is not None or windowed


def _own_view(branch: exp.Expr) -> exp.Expr:
    """A branch with ``ORDER BY ... LIMIT`` or window functions as ``SELECT * FROM (branch) AS
    cbp__b``: a derived table, compiled as internal view ``<v>__from<i>`` (:mod:`cbp.views.hoist`)."""
    if not _needs_view(branch):
        return branch
    alias = exp.TableAlias(this=exp.to_identifier("cbp__b"))
    return exp.select("*").from_(exp.Subquery(this=_detached(branch), alias=alias))


def _distinct_on_spine(node: exp.Expr) -> bool:
    """A set operation other than UNION ALL among ``node``'s set operations (not its subqueries')."""
    if isinstance(node, exp.Subquery) and not node.alias:
        return _distinct_on_spine(node.this)
    if not isinstance(node, exp.SetOperation):
        return False
    if type(node) is not exp.Union or node.args.get("distinct"):
        return True
    return _distinct_on_spine(node.this) or _distinct_on_spine(node.expression)


def _union_branches(node: exp.Expr) -> list[exp.Expr]:
    """The branches of a chain of UNIONs (a distinct over a distinct is one distinct)."""
    if isinstance(node, exp.Subquery) and not node.alias and type(node.this) is exp.Union:
        node = node.this
    if type(node) is exp.Union:
        return _union_branches(node.this) + _union_branches(node.expression)
    return [node]


def _detached(node: exp.Expr) -> exp.Expr:
    return node.pop() if node.parent is not None else node


def _union_all(branches: list[exp.Expr]) -> exp.Expr:
    tree = branches[0]
    for b in branches[1:]:
        tree = exp.Union(this=tree, expression=b, distinct=False)
    return tree


def _marked(node: exp.Expr, marks: tuple[int, int]) -> exp.Expr:
    """``node`` (a SELECT or a UNION ALL of SELECTs) with the columns ``cbp__l``, ``cbp__r`` added to
    each SELECT: the side its rows come from."""
    node = _detached(node)
    selects = [node] if isinstance(node, exp.Select) else list(node.find_all(exp.Select))
    for s in selects:
        if isinstance(s.parent, (exp.Union, type(None))) or s is node:
            extra = [exp.alias_(exp.Literal.number(m), n) for m, n in zip(marks, _MARKS)]
            s.set("expressions", [*s.expressions, *extra])
    return node


def _table(name: str) -> exp.Table:
    return exp.Table(this=exp.to_identifier(name), alias=exp.TableAlias(this=exp.to_identifier(name)))


def _fresh(prefix: str, taken: Mapping[str, object]) -> str:
    i = 1
    while f"{prefix}{i}" in taken:
        i += 1
    return f"{prefix}{i}"
