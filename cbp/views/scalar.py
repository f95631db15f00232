"""Scalar subqueries of a view's ``WHERE`` (``x > (SELECT avg(y) FROM t ...)``), hoisted into
internal views by :mod:`cbp.views.hoist` and LEFT-joined to the outer query.

- **Uncorrelated**, over an aggregate without ``GROUP BY`` (TPC-H Q15, Q22): internal view
  ``<v>__sq<i>`` of one row, ``SELECT 0 AS k0, <expr> AS c0 FROM ... WHERE ...``, LEFT-joined on
  that constant key, so an empty view gives NULL as SQL does.
- **Correlated on equalities** (``WHERE t.k = outer.k AND ...``, Q2, Q17, Q20): decorrelated into
  ``SELECT t.k AS k0, ..., <expr> AS c0 FROM ... WHERE <its own conditions> GROUP BY t.k, ...``,
  LEFT-joined on ``k0 = outer.k``; a key without rows reads ``c0`` NULL, and a bare ``count`` reads
  ``coalesce(c0, 0)`` (the "count bug": a missing group's count is 0).

The subquery is replaced by the view's ``c0``. Refused (``view-unsupported``, at the subquery): a
scalar subquery without an aggregate, or with ``GROUP BY``/``HAVING`` (it may return more than one
row, which fails the query at run time in Spark), a correlation other than an equality of the
subquery's columns with the outer query's, an outer column read outside its ``WHERE``.

    >>> import sqlglot
    >>> s = sqlglot.parse_one("SELECT id FROM t WHERE x > (SELECT avg(y) FROM u)", read="spark")
    >>> made = scalar_subqueries(s, "", "v", {"t": {"id": "int", "x": "int"}, "u": {"y": "int"}},
    ...                          lambda n, tree, f: {"k0": "int", "c0": "float"})
    >>> s.sql()
    'SELECT id FROM t LEFT JOIN v__sq1 AS v__sq1 ON v__sq1.k0 = 0 WHERE x > v__sq1.c0'
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from .query import AGGREGATES, _view_refusal

__all__ = ["scalar_subqueries", "having_scalars", "on_scalars", "aggregate_scalars", "CONSTANT_KEY"]

#: The meta flag of the literal an uncorrelated scalar subquery's view is joined on (its key).
CONSTANT_KEY = "cbp_constant_key"
Flows = Mapping[str, Mapping[str, str]]


def _scalars(s: exp.Select) -> list[exp.Subquery]:
    """The scalar subqueries of ``s``'s WHERE and SELECT list (not those of IN, EXISTS, a nested SELECT)."""
    where = s.args.get("where")
    places = [where] if where is not None else []
    return [
        q
        for place in [*places, *s.expressions]
        for q in place.find_all(exp.Subquery)
        if isinstance(q.this, exp.Select)
        and q.find_ancestor(exp.Select) is s
        and not (isinstance(q.parent, exp.In) and q.parent.args.get("query") is q)
    ]


def _in_select_list(q: exp.Subquery, s: exp.Select, sql: str) -> bool:
    """``q`` is in ``s``'s SELECT list, outside aggregates: then its value is one more GROUP BY term of a
    grouped ``s`` (one value per group: uncorrelated, or correlated on grouped columns); refused as an
    unnamed column."""
    if q.find_ancestor(exp.Where) is not None or q.find_ancestor(*AGGREGATES) is not None:
        return False
    if q.parent is s:
        raise _view_refusal("view-unsupported", "an unnamed scalar subquery in SELECT: name it with AS", q, sql)
    return bool(s.args.get("group"))  # (an aggregate without GROUP BY: a derived table, aggregate_scalars)


def scalar_subqueries(
    s: exp.Select,
    sql: str,
    view: str,
    flows: Flows,
    compile: Callable[[str, exp.Expr, Flows], dict[str, str]],
    foreign: Callable[[exp.Select], Callable[[exp.Expr], list[exp.Column]]] | None = None,
) -> dict[str, dict[str, str]]:
    """Hoist each scalar subquery of ``s``'s WHERE (in place); the internal views' flows."""
    out: dict[str, dict[str, str]] = {}
    for q in _scalars(s):
        sub = q.this
        name = _fresh(f"{view}__sq", {**flows, **out})
        value = _value(sub, sql)
        pairs, own = _correlation(sub, sql, foreign(sub) if foreign else (lambda e: []))
        hoisted = sub.copy()
        keys = [exp.alias_(inner.copy(), f"k{i}") for i, (inner, _) in enumerate(pairs)]
        if not pairs:
            keys = [exp.alias_(exp.Literal.number(0), "k0")]
        hoisted.set("expressions", [*keys, exp.alias_(value.copy(), "c0")])
        hoisted.set("where", exp.Where(this=exp.and_(*own)) if own else None)
        if pairs:
            hoisted.set("group", exp.Group(expressions=[inner.copy() for inner, _ in pairs]))
        out[name] = compile(name, hoisted, {**flows, **out})
        on = [exp.EQ(this=exp.column(f"k{i}", table=name), expression=o.copy()) for i, (_, o) in enumerate(pairs)]
        if not pairs:
            zero = exp.Literal.number(0)
            zero.meta[CONSTANT_KEY] = True
            on = [exp.EQ(this=exp.column("k0", table=name), expression=zero)]
        table = exp.Table(this=exp.to_identifier(name), alias=exp.TableAlias(this=exp.to_identifier(name)))
        s.set("joins", [*(s.args.get("joins") or []), exp.Join(this=table, side="LEFT", on=exp.and_(*on))])
        c0 = exp.column("c0", table=name)
        c0.this.meta.update(next((dict(n.meta) for n in q.walk() if "start" in n.meta), {}))
        grouped = _in_select_list(q, s, sql)
        if pairs and q.find_ancestor(exp.Where) is None and (grouped or q.find_ancestor(*AGGREGATES)):
            raise _view_refusal(
                "view-unsupported",
                "a correlated scalar subquery in the SELECT of a GROUP BY (Spark refuses it too)",
                q,
                sql,
            )
        bare_count = isinstance(value, exp.Count)  # a key with no rows: count 0, not NULL
        q.replace(exp.func("coalesce", c0, exp.Literal.number(0)) if bare_count else c0)
        if grouped:
            s.set("group", exp.Group(expressions=[*s.args["group"].expressions, c0.copy()]))
    return out


def on_scalars(s: exp.Select, sql: str) -> None:
    """The conditions with a scalar subquery in an inner join's ``ON`` moved to ``s``'s WHERE (the same
    rows, then hoisted as WHERE's are); in an outer join's ``ON`` (where they decide the NULL-padded
    rows) they are refused."""
    moved: list[exp.Expr] = []
    for j in s.args.get("joins") or []:
        on = j.args.get("on")
        if on is None or not any(isinstance(q.this, exp.Select) for q in on.find_all(exp.Subquery)):
            continue
        if j.args.get("side") or (j.args.get("kind") or "INNER").upper() not in ("INNER", ""):
            raise _view_refusal(
                "view-unsupported",
                "a scalar subquery in the ON of an outer, semi or anti join",
                on.find(exp.Subquery),
                sql,
            )
        conds = list(on.flatten()) if isinstance(on, exp.And) else [on]
        keep = [c for c in conds if not c.find(exp.Subquery)]
        moved += [c for c in conds if c.find(exp.Subquery)]
        j.set("on", exp.and_(*keep) if keep else None)
    if moved:
        where = s.args.get("where")
        s.set("where", exp.Where(this=exp.and_(*([where.this] if where is not None else []), *moved)))


def aggregate_scalars(s: exp.Select, sql: str) -> None:
    """An aggregate without GROUP BY with a scalar subquery in its SELECT list (``SELECT sum(x) AS t,
    (SELECT max(y) FROM u) AS m FROM t``) rewritten in place as ``SELECT cbp__g.h0 AS t, (SELECT ...)
    AS m FROM (SELECT sum(x) AS h0 FROM t ...) AS cbp__g``: the aggregate's one row (there over no
    input too) is a derived table the subquery's view is then LEFT-joined to."""
    if s.args.get("group") is not None or s.args.get("having") is not None:
        return
    subs = [q for e in s.expressions for q in e.find_all(exp.Subquery) if isinstance(q.this, exp.Select)]
    outside = [q for q in subs if q.find_ancestor(*AGGREGATES) is None and q.find_ancestor(exp.Select) is s]
    aggs = [n for e in s.expressions for n in e.find_all(*AGGREGATES) if n.find_ancestor(exp.Subquery) is None]
    if not outside or not aggs:
        return
    for q in outside:
        own = {t.alias_or_name.lower() for t in q.find_all(exp.Table)}
        if any(c.table and c.table.lower() not in own for c in q.find_all(exp.Column)):
            raise _view_refusal(
                "view-unsupported",
                "a correlated scalar subquery in the SELECT of an aggregate (Spark refuses it too)",
                q,
                sql,
            )
    hidden: dict[str, exp.Expr] = {}

    def lift(n: exp.Expr) -> exp.Expr:
        if isinstance(n, AGGREGATES) and n.find_ancestor(exp.Subquery) is None:
            hidden.setdefault(n.sql(), n.copy())
            return exp.column(f"h{list(hidden).index(n.sql())}", table="cbp__g")
        return n

    outer = [e.copy().transform(lift) for e in s.expressions]
    inner = s.copy()
    inner.set("expressions", [exp.alias_(e, f"h{i}") for i, e in enumerate(hidden.values())])
    for k in list(s.args):
        s.set(k, None)
    s.set("expressions", outer)
    s.set("from_", exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("cbp__g")))))


def having_scalars(s: exp.Select, sql: str) -> None:
    """A HAVING with a scalar subquery (TPC-H Q11: ``HAVING sum(v) > (SELECT sum(v) * 0.0001 ...)``)
    rewritten in place as a WHERE over a derived table: ``SELECT <its columns> FROM (SELECT <its
    columns>, <the aggregates those conditions read> AS h<i> ... HAVING <the other conditions>) AS
    <v>__g WHERE <the conditions, over h<i>>``, which :mod:`cbp.views.hoist` then compiles."""
    having = s.args.get("having")
    if having is None or not any(isinstance(q.this, exp.Select) for q in having.find_all(exp.Subquery)):
        return
    conds = list(having.this.flatten()) if isinstance(having.this, exp.And) else [having.this]
    scalar = [c for c in conds if c.find(exp.Subquery)]
    names = []
    for e in s.expressions:
        name = e.alias if isinstance(e, exp.Alias) else e.name if isinstance(e, exp.Column) else ""
        if not name:
            raise _view_refusal("view-unsupported", "a column without a name (AS) beside HAVING (SELECT ...)", e, sql)
        names.append(name)
    hidden: dict[str, exp.Expr] = {}

    def lift(n: exp.Expr) -> exp.Expr:
        inside = n.find_ancestor(exp.Subquery) is not None
        if not inside and (
            isinstance(n, AGGREGATES) or (isinstance(n, exp.Column) and not n.find_ancestor(*AGGREGATES))
        ):
            key = n.sql()
            hidden.setdefault(key, n.copy())
            return exp.column(f"h{list(hidden).index(key)}", table="cbp__g")
        return n

    where = [c.copy().transform(lift) for c in scalar]
    inner = s.copy()
    inner.set("expressions", [*s.expressions, *(exp.alias_(e, f"h{i}") for i, e in enumerate(hidden.values()))])
    rest = [c for c in conds if not any(c is x for x in scalar)]
    inner.set("having", exp.Having(this=exp.and_(*rest)) if rest else None)
    for k in list(s.args):
        s.set(k, None)
    s.set("expressions", [exp.column(n, table="cbp__g") for n in names])
    s.set("from_", exp.From(this=exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier("cbp__g")))))
    s.set("where", exp.Where(this=exp.and_(*where)))


def _fresh(prefix: str, taken: Mapping[str, Any]) -> str:
    i = 1
    while f"{prefix}{i}" in taken:
        i += 1
    return f"{prefix}{i}"


def _value(sub: exp.Select, sql: str) -> exp.Expr:
    """The one expression a scalar subquery selects: over an aggregate, without GROUP BY or HAVING."""
    cols = sub.expressions
    if len(cols) != 1 or isinstance(cols[0], exp.Star):
        raise _view_refusal("view-unsupported", "a scalar subquery of other than one column", sub, sql)
    value = cols[0].this if isinstance(cols[0], exp.Alias) else cols[0]
    if sub.args.get("group") or sub.args.get("having") or not any(isinstance(n, AGGREGATES) for n in value.walk()):
        raise _view_refusal(
            "view-unsupported",
            "a scalar subquery that may return more than one row (one without an aggregate, or with GROUP BY "
            "or HAVING; Spark fails the query at run time when it does)",
            sub,
            sql,
        )
    return value


def _correlation(
    sub: exp.Select, sql: str, foreign: Callable[[exp.Expr], list[exp.Column]]
) -> tuple[list[tuple[exp.Expr, exp.Expr]], list[exp.Expr]]:
    """``([(the subquery's expression, the outer query's)], the subquery's own conditions)``."""
    for e in sub.expressions:
        if foreign(e):
            raise _view_refusal("view-unsupported", "a scalar subquery selecting an outer column", foreign(e)[0], sql)
    where = sub.args.get("where")
    conds = (list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]) if where else []
    pairs: list[tuple[exp.Expr, exp.Expr]] = []
    own: list[exp.Expr] = []
    for c in conds:
        if not foreign(c):
            own.append(c)
            continue
        sides = (c.this, c.expression) if isinstance(c, exp.EQ) else None
        pair = None
        if sides is not None:
            for inner, outer in (sides, sides[::-1]):
                n_outer = len(list(outer.find_all(exp.Column)))
                if inner.find(exp.Column) is not None and not foreign(inner) and len(foreign(outer)) == n_outer > 0:
                    pair = (inner, outer)
        if pair is None:
            raise _view_refusal(
                "view-unsupported",
                "a scalar subquery correlated on other than an equality of its columns with the outer query's",
                c,
                sql,
            )
        pairs.append(pair)
    return pairs, own
