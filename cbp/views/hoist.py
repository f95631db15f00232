"""A view's SQL tree rewritten before it is read (:mod:`cbp.views.select`): each subquery that is
more than ``SELECT ... FROM one flow [WHERE ...]`` hoisted into an internal view of its own, and
``JOIN ... USING (k)`` written as ``ON a.k = b.k``.

- A **derived table** (``FROM (SELECT ...) AS t [(a, b)]``) becomes internal view ``<v>__from<i>``
  (its columns renamed by the alias list), read by the outer query as a flow named so.
- ``x [NOT] IN (SELECT ...)`` whose subquery joins, groups, holds a subquery of its own or is a set
  operation (``UNION``, ...) becomes ``x [NOT] IN (SELECT c FROM <v>__in<i>)`` (it must not read the
  outer query's columns).
- ``[NOT] EXISTS (SELECT ... FROM a JOIN b ... WHERE ...)``: its conditions that read no outer
  column, with its joins, become view ``<v>__in<i>`` of the columns the other (correlated)
  conditions read; the EXISTS keeps those conditions over that view.
- ``a JOIN b USING (k)`` is ``a JOIN b ON a.k = b.k`` with Spark's output columns: ``k`` once (the
  left side's, the right's in a RIGHT JOIN, ``coalesce`` of both in a FULL JOIN), ``*`` expanded to
  ``k`` first, then the left's other columns, then the right's.

Scalar subqueries (in ``WHERE``, ``SELECT``, ``HAVING`` and an inner join's ``ON``) are hoisted by
:mod:`cbp.views.scalar`; ``WITH`` and set operations were rewritten before (:mod:`cbp.views.ctes`,
:mod:`cbp.views.setops`). Each internal view is compiled by the same compiler (``compile``) into
stages whose names start with the view's, so ``cbp explain`` shows them with it; listings of views
do not.

    >>> import sqlglot
    >>> tree = sqlglot.parse_one("SELECT k, y FROM a JOIN b USING (k)", read="spark")
    >>> _ = hoist(tree, "", "v", {"a": {"k": "int", "x": "int"}, "b": {"k": "int", "y": "int"}}, None)
    >>> tree.sql()
    'SELECT a.k AS k, y FROM a JOIN b ON a.k = b.k'
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from sqlglot import exp

from .query import _view_refusal
from .scalar import aggregate_scalars, having_scalars, on_scalars, scalar_subqueries

__all__ = ["hoist"]

Flows = Mapping[str, Mapping[str, str]]
#: Compiles internal view ``name`` (a SELECT or UNION tree) over ``flows``; returns its field types.
Compile = Callable[[str, exp.Expr, Flows], dict[str, str]]


def _selects(tree: exp.Expr) -> list[exp.Select]:
    """The SELECTs of a view's tree (the branches of a UNION ALL)."""
    if isinstance(tree, exp.Union):
        return _selects(tree.this) + _selects(tree.expression)
    return [tree] if isinstance(tree, exp.Select) else []


def hoist(tree: exp.Expr, sql: str, view: str, flows: Flows, compile: Compile | None) -> dict[str, dict[str, str]]:
    """Rewrite ``tree`` (view ``view``'s SQL parsed) in place; return the internal views' flows
    (name -> field -> type) it now reads, each compiled with ``compile``."""
    made: dict[str, dict[str, str]] = {}
    for s in _selects(tree):
        having_scalars(s, sql)
        aggregate_scalars(s, sql)
        on_scalars(s, sql)
        every = {**flows, **made}
        made |= _derived(s, sql, view, every, compile, made)
        _using(s, sql, {**flows, **made})
        made |= _conditions(s, sql, view, {**flows, **made}, compile, made)
        if compile is not None:
            every = {**flows, **made}
            _not_in_nulls(s, every)
            made |= scalar_subqueries(s, sql, view, every, compile, functools.partial(_foreign, flows=every))
    return made


def _first_start(node: exp.Expr) -> dict[str, Any]:
    """The position meta of ``node``'s first placed part (so a message about the table points at it)."""
    return next((dict(n.meta) for n in node.walk() if "start" in n.meta), {})


def _table(name: str, alias: str, at: exp.Expr) -> exp.Table:
    table = exp.Table(this=exp.to_identifier(name), alias=exp.TableAlias(this=exp.to_identifier(alias)))
    table.this.meta.update(_first_start(at))
    return table


def _rename_columns(inner: exp.Expr, names: list[exp.Expr], sql: str) -> None:
    """A derived table's alias list (``AS t (a, b)``) as the names of its first SELECT's columns."""
    first = _selects(inner)[0]
    cols = first.expressions
    if len(cols) != len(names) or any(isinstance(c, exp.Star) or c.find(exp.Star) for c in cols):
        raise _view_refusal(
            "view-unsupported", f"a column list of {len(names)} names for {len(cols)} columns (or *)", first, sql
        )
    first.set(
        "expressions", [exp.alias_(c.this if isinstance(c, exp.Alias) else c, n.name) for c, n in zip(cols, names)]
    )


def _derived(
    s: exp.Select, sql: str, view: str, flows: Flows, compile: Compile | None, made: dict[str, Any]
) -> dict[str, dict[str, str]]:
    """Each subquery in ``s``'s FROM and JOINs compiled as view ``<view>__from<i>`` and read as a flow."""
    out: dict[str, dict[str, str]] = {}
    frm = s.args.get("from_") or s.args.get("from")
    places = ([frm] if frm is not None else []) + list(s.args.get("joins") or [])
    for place in places:
        node = place.this
        if not isinstance(node, exp.Subquery) or compile is None:
            continue
        name = _fresh(f"{view}__from", {**flows, **made, **out})
        alias = node.args.get("alias")
        if alias is not None and alias.args.get("columns"):
            _rename_columns(node.this, alias.args["columns"], sql)
        out[name] = compile(name, node.this, {**flows, **out})
        node.replace(_table(name, alias.name if alias is not None and alias.name else name, node))
    return out


def _fresh(prefix: str, taken: Mapping[str, Any]) -> str:
    i = 1
    while f"{prefix}{i}" in taken:
        i += 1
    return f"{prefix}{i}"


def _sources(s: exp.Select, flows: Flows) -> list[tuple[str, dict[str, str], str]]:
    """``(alias, fields, join kind)`` of each table in ``s``'s FROM and JOINs, in order."""
    out = []
    frm = s.args.get("from_") or s.args.get("from")
    joins = list(s.args.get("joins") or [])
    for place in ([frm] if frm is not None else []) + joins:
        t = place.this
        if isinstance(t, exp.Table):
            fields = dict(flows.get(t.name) or next((f for n, f in flows.items() if n.lower() == t.name.lower()), {}))
            kind = "from" if place is frm else f"{place.args.get('side') or ''} {place.args.get('kind') or ''}"
            out.append((t.alias_or_name, fields, kind.strip().upper()))
    return out


def _using(s: exp.Select, sql: str, flows: Flows) -> None:
    """``JOIN b USING (k, ...)`` as ``ON a.k = b.k AND ...``; the unqualified ``k`` and ``*`` as Spark's."""
    joins = list(s.args.get("joins") or [])
    if not any(j.args.get("using") for j in joins):
        return
    srcs = _sources(s, flows)
    if len(srcs) != len(joins) + 1:
        return  # a source that is not a flow: its own refusal comes when the SELECT is read
    merged: dict[str, exp.Expr] = {}  # a USING column's lower name -> what the unqualified name reads
    out: list[tuple[str, exp.Expr]] = [(f, exp.column(f, table=srcs[0][0])) for f in srcs[0][1]]
    for i, j in enumerate(joins, 1):
        alias, fields, kind = srcs[i]
        keys = [k.name for k in j.args.get("using") or []]
        lowered = {k.lower() for k in keys}
        conds = [_using_key(k, srcs[:i], (alias, fields), merged, j, sql) for k in keys]
        if keys:
            on = j.args.get("on")
            j.set("using", None)
            j.set("on", exp.and_(*conds, *([on] if on is not None else [])))
        for k, c in zip(keys, conds, strict=True):
            left, right = c.this, c.expression
            side = "RIGHT" if "RIGHT" in kind else "FULL" if "FULL" in kind else ""
            merged[k.lower()] = right if side == "RIGHT" else exp.func("coalesce", left, right) if side else left
        if "SEMI" in kind or "ANTI" in kind:
            continue
        mine: list[tuple[str, exp.Expr]] = [(f, exp.column(f, table=alias)) for f in fields if f.lower() not in lowered]
        out = [(k, merged[k.lower()]) for k in keys] + [c for c in out if c[0].lower() not in lowered] + mine
    _read_merged(s, merged, out)


def _using_key(
    k: str,
    left: list[tuple[str, dict[str, str], str]],
    right: tuple[str, dict[str, str]],
    merged: Mapping[str, exp.Expr],
    j: exp.Join,
    sql: str,
) -> exp.EQ:
    have = [a for a, fields, _ in left if k.lower() in {f.lower() for f in fields}]
    if k.lower() not in {f.lower() for f in right[1]} or (len(have) != 1 and k.lower() not in merged):
        raise _view_refusal(
            "view-unknown", f"USING column '{k}' is not in exactly one table on each side of the join", j, sql, "USING"
        )
    lhs = merged[k.lower()].copy() if k.lower() in merged else exp.column(k, table=have[0])
    return exp.EQ(this=lhs, expression=exp.column(k, table=right[0]))


def _read_merged(s: exp.Select, merged: Mapping[str, exp.Expr], out: list[tuple[str, exp.Expr]]) -> None:
    """An unqualified USING column of ``s`` (not of its subqueries) reads the merged column; ``*`` is
    Spark's columns of a USING join."""
    for col in list(s.find_all(exp.Column)):
        if not col.table and col.name.lower() in merged and col.find_ancestor(exp.Select) is s:
            new = merged[col.name.lower()].copy()
            for n in new.find_all(exp.Column):
                n.this.meta.update(col.this.meta)
            col.replace(exp.alias_(new, col.name) if col.parent is s else new)  # SELECT k: named k
    if any(isinstance(e, exp.Star) for e in s.expressions):
        star = [exp.alias_(e.copy(), n) for n, e in out]
        s.set("expressions", [x for e in s.expressions for x in (star if isinstance(e, exp.Star) else [e])])


def _complex(sub: exp.Select) -> bool:
    """More than ``SELECT ... FROM one flow [WHERE ...]``: joins, GROUP BY, HAVING, DISTINCT, a
    derived table or a subquery of its own."""
    if any(sub.args.get(k) for k in ("joins", "group", "having", "distinct")):
        return True
    return any(n is not sub for n in sub.find_all(exp.Select, exp.Subquery))


def _conditions(
    s: exp.Select, sql: str, view: str, flows: Flows, compile: Compile | None, made: dict[str, Any]
) -> dict[str, dict[str, str]]:
    """Each ``[NOT] IN`` / ``[NOT] EXISTS`` subquery of ``s``'s WHERE that is :func:`_complex`, hoisted."""
    out: dict[str, dict[str, str]] = {}
    where = s.args.get("where")
    if where is None or compile is None:
        return out
    conds = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    for c in conds:
        pred = c.this if isinstance(c, exp.Not) else c
        if isinstance(pred, exp.Exists) and isinstance(pred.this, exp.Select):
            sub = pred.this
        elif isinstance(pred, exp.In) and isinstance(pred.args.get("query"), exp.Subquery):
            sub = pred.args["query"].this
        else:
            continue
        if isinstance(sub, exp.SetOperation) and isinstance(pred, exp.In):  # IN (SELECT ... UNION ...)
            name = _fresh(f"{view}__in", {**flows, **made, **out})
            out[name] = compile(name, sub.copy(), {**flows, **out})
            col = exp.column(next(iter(out[name])), table=name)
            pred.args["query"].set("this", exp.select(col).from_(_table(name, name, sub)))
            continue
        if not isinstance(sub, exp.Select) or not _complex(sub):
            continue
        name = _fresh(f"{view}__in", {**flows, **made, **out})
        inner, outer = _split(sub, flows)
        if isinstance(pred, exp.In):
            if outer:
                raise _view_refusal(
                    "view-unsupported",
                    "a correlated IN (SELECT ...) that joins, groups or holds a subquery (write EXISTS)",
                    outer[0],
                    sql,
                )
            out[name] = compile(name, sub.copy(), {**flows, **out})
            col = exp.column(next(iter(out[name])), table=name)
            new = exp.select(col).from_(_table(name, name, sub))
            if _not_null_kept(sub):  # x NOT IN (SELECT col ... WHERE col IS NOT NULL) stays NULL-free
                new = new.where(exp.Not(this=exp.Is(this=col.copy(), expression=exp.Null())))
            pred.args["query"].set("this", new)
        else:
            out[name] = _hoist_exists(pred, sub, name, inner, outer, sql, compile, {**flows, **out})
    return out


def _not_null_kept(sub: exp.Select) -> bool:
    """``sub``'s WHERE has ``col IS NOT NULL`` of the one column it selects."""
    col = sub.expressions[0].this if isinstance(sub.expressions[0], exp.Alias) else sub.expressions[0]
    where = sub.args.get("where")
    conds = (list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]) if where else []
    return any(isinstance(c, exp.Not) and isinstance(c.this, exp.Is) and c.this.this.sql() == col.sql() for c in conds)


def _foreign(sub: exp.Select, flows: Flows) -> Callable[[exp.Expr], list[exp.Column]]:
    """The outer query's columns an expression of ``sub`` reads (a column is the subquery's when its
    table, or its name, is one of the subquery's)."""
    srcs = _sources(sub, flows)
    aliases = {a.lower() for a, _, _ in srcs} | {
        t.name.lower() for t in sub.find_all(exp.Table) if t.find_ancestor(exp.Select) is sub
    }
    names = {f.lower() for _, fields, _ in srcs for f in fields}

    def foreign(e: exp.Expr) -> list[exp.Column]:
        return [
            col
            for col in e.find_all(exp.Column)
            if col.find_ancestor(exp.Select) is sub
            and ((col.table and col.table.lower() not in aliases) or (not col.table and col.name.lower() not in names))
        ]

    return foreign


def _split(sub: exp.Select, flows: Flows) -> tuple[list[exp.Expr], list[exp.Column]]:
    """``sub``'s WHERE conditions that read none of the outer query's columns, and the outer columns
    the others read; an outer column read elsewhere in ``sub`` (its SELECT list, HAVING) too."""
    foreign = _foreign(sub, flows)
    where = sub.args.get("where")
    conds = (list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]) if where else []
    inner: list[exp.Expr] = []
    outer: list[exp.Column] = []
    for c in conds:
        cols = foreign(c)
        if cols:
            outer += cols
        else:
            inner.append(c)
    for k in ("expressions", "having", "group"):
        for e in sub.args.get(k) or [] if k == "expressions" else [sub.args.get(k)]:
            outer += foreign(e) if e is not None else []
    return inner, outer


def _hoist_exists(
    pred: exp.Exists,
    sub: exp.Select,
    name: str,
    inner: list[exp.Expr],
    outer: list[exp.Column],
    sql: str,
    compile: Compile,
    flows: Flows,
) -> dict[str, str]:
    """``EXISTS (SELECT ... WHERE own AND correlated)`` as ``EXISTS (SELECT * FROM name WHERE
    correlated)``, view ``name`` being ``SELECT <the columns the correlated conditions read> ... WHERE own``."""
    if not outer or sub.args.get("group") or sub.args.get("having"):
        raise _view_refusal(
            "view-unsupported",
            "EXISTS over a subquery that groups, or is not correlated (WHERE s.col = t.col)",
            sub,
            sql,
            "EXISTS",
        )
    outer_ids = {id(c) for c in outer}
    where = sub.args["where"].this
    conds = list(where.flatten()) if isinstance(where, exp.And) else [where]
    correlated = [c for c in conds if not any(c is i for i in inner)]
    reads: dict[str, exp.Column] = {}
    for c in correlated:
        for col in c.find_all(exp.Column):
            if id(col) not in outer_ids and col.find_ancestor(exp.Select) is sub:
                reads.setdefault(col.sql().lower(), col)
    hoisted = sub.copy()
    hoisted.set("expressions", [exp.alias_(col.copy(), f"c{i}") for i, col in enumerate(reads.values())])
    hoisted.set("where", exp.Where(this=exp.and_(*inner)) if inner else None)
    types = compile(name, hoisted, flows)
    new_conds = []
    for c in correlated:
        c = c.copy()
        for col in list(c.find_all(exp.Column)):
            key = col.sql().lower()
            if key in reads and not any(col.sql() == o.sql() for o in outer):
                new = exp.column(f"c{list(reads).index(key)}", table=name)
                new.this.meta.update(col.this.meta)
                col.replace(new)
        new_conds.append(c)
    pred.set("this", exp.select("*").from_(_table(name, name, sub)).where(exp.and_(*new_conds)))
    return types


def _not_in_nulls(s: exp.Select, flows: Flows) -> None:
    """``x NOT IN (SELECT col FROM t WHERE w)`` over values that may be NULL, with SQL's three-valued
    logic (true iff no value equals ``x`` and, unless the subquery is empty, ``x`` is not NULL and
    the subquery holds no NULL), rewritten as ``NOT EXISTS (SELECT * FROM t WHERE w AND col = x)
    AND ((SELECT count(*) FROM t WHERE w) = 0 OR (x IS NOT NULL AND (SELECT count(*) FROM t WHERE w
    AND col IS NULL) = 0))``: an anti join and two one-row counts (:mod:`cbp.views.scalar`). When
    both ``x IS NOT NULL`` and ``col IS NOT NULL`` are written it is the anti join alone."""
    where = s.args.get("where")
    if where is None:
        return
    conds = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    for c in conds:
        pred = c.this if isinstance(c, exp.Not) else None
        if not (isinstance(pred, exp.In) and isinstance(pred.args.get("query"), exp.Subquery)):
            continue
        sub = pred.args["query"].this
        if not isinstance(sub, exp.Select) or _complex(sub) or len(sub.expressions) != 1 or _split(sub, flows)[1]:
            continue  # (joins.py refuses what this does not rewrite, with its reason)
        x, col = pred.this, sub.expressions[0].this if isinstance(sub.expressions[0], exp.Alias) else sub.expressions[0]
        if _not_null_kept(sub) and any(_is_not_null(d, x) for d in conds):
            continue
        c.replace(_three_valued(sub, _qualified(x, s, flows), _qualified(col, sub, flows)))


def _qualified(e: exp.Expr, s: exp.Select, flows: Flows) -> exp.Expr:
    """``e`` (of ``s``) with each unqualified column named by the table of ``s`` that has it, so it
    means the same inside a subquery (whose own columns would shadow it)."""
    e = e.copy()
    for col in list(e.find_all(exp.Column)):
        owner = [a for a, fields, _ in _sources(s, flows) if col.name.lower() in {f.lower() for f in fields}]
        if not col.table and len(owner) == 1:
            col.set("table", exp.to_identifier(owner[0]))
    return e


def _counted(sub: exp.Select, *more: exp.Expr) -> exp.Subquery:
    """``(SELECT count(*) FROM ... WHERE <sub's conditions> AND more)``."""
    own = [sub.args["where"].this] if sub.args.get("where") is not None else []
    q = sub.copy()
    q.set("expressions", [exp.Count(this=exp.Star())])
    q.set("where", exp.Where(this=exp.and_(*[o.copy() for o in own], *more)) if own or more else None)
    return exp.Subquery(this=q)


def _three_valued(sub: exp.Select, x: exp.Expr, col: exp.Expr) -> exp.Expr:
    """``x NOT IN (sub)`` as an anti join (NOT EXISTS) and the two counts of :func:`_not_in_nulls`."""
    zero = exp.Literal.number(0)
    match = _counted(sub, exp.EQ(this=col.copy(), expression=x.copy())).this
    match.set("expressions", [exp.Star()])
    empty = exp.EQ(this=_counted(sub), expression=zero.copy())
    no_null = exp.EQ(this=_counted(sub, exp.Is(this=col.copy(), expression=exp.Null())), expression=zero.copy())
    not_null = exp.Not(this=exp.Is(this=x.copy(), expression=exp.Null()))
    nulls = exp.Paren(this=exp.or_(empty, exp.Paren(this=exp.and_(not_null, no_null))))
    return exp.and_(exp.Not(this=exp.Exists(this=match)), nulls)


def _is_not_null(c: exp.Expr, x: exp.Expr) -> bool:
    return isinstance(c, exp.Not) and isinstance(c.this, exp.Is) and c.this.this.sql() == x.sql()
