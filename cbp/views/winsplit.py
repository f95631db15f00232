"""Window functions over a GROUP BY, and windows of several PARTITION BYs in one SELECT: each rewritten, before
a view is compiled, as a derived table (an internal view ``<v>__from<i>``, :mod:`cbp.views.hoist`) that the
windows read, as ``SELECT DISTINCT ... GROUP BY`` is (:func:`cbp.views.select.distinct_over_groups`).

- ``SELECT k, sum(x) AS s, rank() OVER (PARTITION BY g ORDER BY sum(x)) AS r FROM t GROUP BY k, g``: Spark
  evaluates the windows after the GROUP BY and HAVING, over the groups' rows. The grouped query becomes the
  derived table (each GROUP BY expression by its column's name, or ``cbp_g<i>``; each aggregate outside a
  window's own function ``cbp_a<j>``; WHERE and HAVING kept there); the windows read its columns.
- ``SELECT id, rank() OVER (PARTITION BY a ORDER BY x) AS ra, rank() OVER (PARTITION BY b ORDER BY x) AS rb
  FROM t``: the windows of the first PARTITION BY (``cbp_w<j>``) and every column the rest reads (by its name,
  or ``cbp_c<i>`` when two tables' columns share it) become the derived table, the others read it; three
  partitionings nest twice. One window stage per partitioning, each keyed by its PARTITION BY.

An ``ORDER BY ... LIMIT`` stays on the outer query. A window function in ``WHERE`` stays refused (Spark
refuses it too), as does a ``*`` beside windows of several partitionings.

    >>> sql = "SELECT k, sum(x) AS s, rank() OVER (PARTITION BY g ORDER BY sum(x)) AS r FROM t GROUP BY k, g"
    >>> outer = windows_apart(_parse(sql))
    >>> outer.sql("spark")[:77]
    'SELECT k AS k, cbp_a0 AS s, RANK() OVER (PARTITION BY g ORDER BY cbp_a0) AS r'
    >>> outer.args["from_"].sql("spark")
    'FROM (SELECT k AS k, g AS g, SUM(x) AS cbp_a0 FROM t GROUP BY k, g) AS cbp_grouped'
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

from .query import AGGREGATES, _parse  # noqa: F401 (_parse: the doctest's)

__all__ = ["windows_apart"]

_MOVED = ("order", "limit", "offset", "with_")  # what stays on the outer query


def windows_apart(tree: exp.Expr) -> exp.Expr:
    """``tree`` with each SELECT that has window functions and a GROUP BY (or an aggregate), or windows of
    several PARTITION BYs, rewritten as windows over a derived table (see the module)."""
    for node in reversed(list(tree.find_all(exp.Select))):  # the innermost first: a rewrite copies what it nests
        if not _windows(node):
            continue
        new = _over_groups(node) if _grouped(node) else node
        while len(_partitionings(new)) > 1 and not any(isinstance(e, exp.Star) for e in new.expressions):
            new = _first_apart(new)
        if new is node:
            continue
        if node is tree:
            tree = new
        else:
            node.replace(new)
    return tree


def _windows(select: exp.Select) -> list[exp.Window]:
    """The window functions of a SELECT's columns (not those of a subquery in them)."""
    return [w for e in select.expressions for w in e.find_all(exp.Window) if _select_of(w) is select]


def _select_of(n: exp.Expr) -> exp.Expr | None:
    p = n.parent
    while p is not None and not isinstance(p, exp.Select):
        p = p.parent
    return p


def _group_aggregate(n: exp.Expr) -> bool:
    """An aggregate over a group: not a window's own function (``sum(x) OVER (...)``'s ``sum``)."""
    if not isinstance(n, AGGREGATES):
        return False
    child, p = n, n.parent
    while isinstance(p, (exp.IgnoreNulls, exp.RespectNulls)):  # sum(x) IGNORE NULLS OVER (...): the window's own
        child, p = p, p.parent
    return not (isinstance(p, exp.Window) and child.arg_key == "this")


def _grouped(select: exp.Select) -> bool:
    if select.args.get("group") is not None:
        return True
    return any(_group_aggregate(n) and _select_of(n) is select for e in select.expressions for n in e.walk())


def _partitionings(select: exp.Select) -> list[str]:
    """The distinct PARTITION BYs of a SELECT's windows (their SQL), in order."""
    seen: dict[str, None] = {}
    for w in _windows(select):
        seen.setdefault(_partition_of(w), None)
    return list(seen)


def _partition_of(w: exp.Window) -> str:
    return ", ".join(p.sql("spark") for p in w.args.get("partition_by") or [])


def _unqualified(n: exp.Expr) -> str:
    c = n.copy()
    for col in c.find_all(exp.Column):
        col.set("table", None)
    return c.sql("spark").lower()


def _outer(node: exp.Select, cols: list[exp.Expr], lift: Callable[[exp.Expr], exp.Expr], alias: str) -> exp.Select:
    """The outer query over ``node`` turned into derived table ``alias`` (its columns ``cols``): the SELECT list,
    ORDER BY, LIMIT ... of ``node`` with ``lift`` applied, each column named as it was."""
    inner = node.copy()
    for part in _MOVED:
        inner.set(part, None)
    inner.set("expressions", cols)
    outs = []
    for e in node.expressions:
        body = e.this if isinstance(e, exp.Alias) else e
        name = e.alias if isinstance(e, exp.Alias) else (e.name if isinstance(e, exp.Column) else "")
        lifted = body.copy().transform(lift)
        outs.append(exp.alias_(lifted, name) if name else lifted)
    outer = exp.Select(expressions=outs)
    outer.set("from_", exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias)))))
    named = {o.alias_or_name.lower() for o in outs}

    def by_name(n: exp.Expr) -> exp.Expr:  # an ORDER BY term naming an output column reads it
        return n if isinstance(n, exp.Column) and not n.table and n.name.lower() in named else lift(n)

    for part in _MOVED:
        value = node.args.get(part)
        if value is not None:
            outer.set(part, value.copy().transform(by_name) if part == "order" else value.copy())
    return outer


def _over_groups(node: exp.Select) -> exp.Select:
    """Windows over a grouped SELECT: the grouping a derived table of its keys and aggregates."""
    group = node.args.get("group")
    keys = list(group.expressions) if group is not None else []
    exact = dict(zip((k.sql("spark").lower() for k in keys), _names(keys, "cbp_g")))
    loose: dict[str, str | None] = {}
    for k, name in zip(keys, exact.values()):
        u = _unqualified(k)
        loose[u] = None if u in loose else name  # two keys alike but for their tables: only exactly
    cols: list[exp.Expr] = [exp.alias_(k.copy(), name) for k, name in zip(keys, exact.values())]
    aggs: dict[str, str] = {}

    def lift(n: exp.Expr) -> exp.Expr:
        if isinstance(n, (exp.Literal, exp.Star, exp.Window, exp.Ordered, exp.Order, exp.Identifier)):
            return n
        if _group_aggregate(n):
            key = n.sql("spark").lower()
            if key not in aggs:
                aggs[key] = f"cbp_a{len(aggs)}"
                cols.append(exp.alias_(n.copy(), aggs[key]))
            return exp.column(aggs[key])
        name = exact.get(n.sql("spark").lower()) or loose.get(_unqualified(n))
        return exp.column(name) if name else n

    return _outer(node, cols, lift, "cbp_grouped")


def _names(items: list[exp.Expr], prefix: str) -> list[str]:
    """The derived table's names of ``items``: a column's own name where no other item has it (``explain`` shows
    ``PARTITION BY `cust```), else ``<prefix><i>``."""
    own = [c.name.lower() if isinstance(c, exp.Column) else "" for c in items]
    return [
        items[i].name if own[i] and own.count(own[i]) == 1 and not own[i].startswith("cbp_") else f"{prefix}{i}"
        for i in range(len(items))
    ]


def _first_apart(node: exp.Select) -> exp.Select:
    """Windows of several PARTITION BYs: those of the first, and the columns the rest read, a derived table."""
    first = _partitionings(node)[0]
    cols: list[exp.Expr] = []
    wins: dict[int, str] = {}
    for w in _windows(node):
        if _partition_of(w) == first and id(w) not in wins:
            wins[id(w)] = f"cbp_w{len(wins)}"
            cols.append(exp.alias_(w.copy(), wins[id(w)]))
    read: dict[str, exp.Column] = {}
    for e in node.expressions:
        for c in e.find_all(exp.Column):
            read.setdefault(c.sql("spark").lower(), c)
    names = dict(zip(read, _names(list(read.values()), "cbp_c")))
    cols += [exp.alias_(c.copy(), names[key]) for key, c in read.items()]

    def lift(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Window) and _partition_of(n) == first:
            return exp.column(_same_window(n, node, wins) or "")
        if isinstance(n, exp.Column):
            name = names.get(n.sql("spark").lower())
            return exp.column(name) if name else n
        return n

    return _outer(node, cols, lift, "cbp_parted")


def _same_window(copy: exp.Window, node: exp.Select, wins: dict[int, str]) -> str | None:
    """The name of the window of ``node`` that ``copy`` (a copy of it, made by :func:`_outer`) is."""
    text = copy.sql("spark")
    return next((wins[id(w)] for w in _windows(node) if id(w) in wins and w.sql("spark") == text), None)
