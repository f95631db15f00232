"""A view's joins read into a chain of two-input join steps (:class:`Step`), each keyed by its equalities.

The steps: n-way inner equi-joins (``JOIN`` with ``ON``, or comma joins with the equalities in
``WHERE``, ordered so that each next flow has an equality with those joined before it),
``LEFT``/``RIGHT``/``FULL OUTER`` equi-joins, ``LEFT SEMI``/``LEFT ANTI JOIN``, and the
``[NOT] IN``/``[NOT] EXISTS`` subqueries of a ``WHERE`` correlated on equality (semi and anti
joins; ``NOT IN`` only when neither side can be NULL). A join without an equality is refused
(``view-unsupported``) with its line and column.

    >>> from cbp.views.select import read_query
    >>> q = read_query("v", "SELECT a.x FROM a, b, c WHERE a.x = b.x AND b.y = c.y",
    ...                {"a": {"x": "int"}, "b": {"x": "int", "y": "int"}, "c": {"y": "int"}})[0]
    >>> [(s.kind, s.source.flow) for s in q.steps]
    [('inner', 'b'), ('inner', 'c')]
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from sqlglot import exp

from .query import Select, Source, _renamer, _source, _view_refusal
from .scalar import CONSTANT_KEY

__all__ = ["Step", "read_joins", "PRESERVED"]

#: The sides a step keeps when they have no match (padded with NULLs, or kept as they are: semi, anti).
PRESERVED: dict[str, tuple[int, ...]] = {"inner": (), "left": (0,), "right": (1,), "full": (0, 1)}
PRESERVED |= {"semi": (0,), "anti": (0,)}
_SUBQUERY = "a subquery other than [NOT] EXISTS (...) or expr IN (SELECT ...) as a condition ANDed in WHERE"


@dataclass
class Step:
    """One two-input join of a view's chain: the rows so far (left) with ``source`` (right)."""

    kind: str  # inner, left, right, full, semi, anti
    source: Source  # the right input
    node: exp.Expr  # where the step is in the SQL
    keys: list[tuple[exp.Expr, exp.Expr]] = field(default_factory=list)  # (left key, right key)
    match: list[exp.Expr] = field(default_factory=list)  # other conditions of a match (outer, semi, anti)
    filter: list[exp.Expr] = field(default_factory=list)  # conditions on the step's output rows
    right_where: exp.Expr | None = None  # conditions on the right input before the join (its routing)
    left_where: exp.Expr | None = None  # conditions on the left input before the join (the first step's)


def _conjuncts(e: exp.Expr | None) -> list[exp.Expr]:
    if e is None:
        return []
    return list(e.flatten()) if isinstance(e, exp.And) else [e]


def _is_subquery(c: exp.Expr) -> bool:
    inner = c.this if isinstance(c, exp.Not) else c
    return isinstance(inner, exp.Exists) or (isinstance(inner, exp.In) and inner.args.get("query") is not None)


def _owners(e: exp.Expr, prefixes: Mapping[str, int]) -> set[int]:
    """The sources (by index) whose columns ``e`` reads (a renamed column's prefix names its source)."""
    out = set()
    for c in e.find_all(exp.Column):
        hits = [(len(p), i) for p, i in prefixes.items() if c.name.startswith(p)]
        out.add(max(hits)[1])
    return out


def _key_pair(
    cond: exp.Expr, right: int, left: set[int], prefixes: Mapping[str, int]
) -> tuple[exp.Expr, exp.Expr] | None:
    """``(left key, right key)`` if ``cond`` equates an expression of source ``right`` alone with one
    of sources in ``left`` alone."""
    if not isinstance(cond, exp.EQ):
        return None
    a, b = _owners(cond.this, prefixes), _owners(cond.expression, prefixes)
    if a == {right} and cond.expression.meta.get(CONSTANT_KEY):  # a scalar subquery's one row: every row's key
        return cond.expression, cond.this
    if a == {right} and b and b <= left:
        return cond.expression, cond.this
    if b == {right} and a and a <= left:
        return cond.this, cond.expression
    return None


def _kind(join: exp.Join, sql: str) -> str:
    kind, side = (join.args.get("kind") or "").upper(), (join.args.get("side") or "").upper()
    if join.args.get("using"):
        raise _view_refusal("view-unsupported", "JOIN ... USING (write ON a.k = b.k)", join, sql, "USING")
    if not side and kind in ("", "INNER", "CROSS"):
        return "inner"
    if side in ("LEFT", "RIGHT", "FULL") and kind in ("", "OUTER"):
        return side.lower()
    if side == "LEFT" and kind in ("SEMI", "ANTI"):
        return kind.lower()
    what = f"{side} {kind} JOIN".strip()
    raise _view_refusal("view-unsupported", f"{what} is not supported", join, sql, side or kind or None)


def _no_equality(node: exp.Expr, sql: str) -> Exception:
    return _view_refusal(
        "view-unsupported", "a join without an equality of its two sides (a non-equi join, or a cross join)", node, sql
    )


def read_joins(q: Select, sql: str, flows: Mapping[str, Mapping[str, str]]) -> Callable[[exp.Expr], exp.Expr]:
    """Set ``q.sources``, ``q.steps`` and (without joins) ``q.where`` from the FROM, JOINs and WHERE of
    ``q.tree``; return the renamer of the view's columns to row field names."""
    tree = q.tree
    where = tree.args["where"].this if tree.args.get("where") is not None else None
    conjuncts = _conjuncts(where)
    subqueries = [c for c in conjuncts if _is_subquery(c)]
    _only_in_where(tree, subqueries, sql)
    joins = tree.args.get("joins") or []
    kinds = [_kind(j, sql) for j in joins]
    bound_joins = [j for j, k in zip(joins, kinds, strict=True) if k not in ("semi", "anti")]
    q.sources += [_source(j.this, sql, flows) for j in bound_joins]
    aliases = [src.alias.lower() for src in q.sources]
    if len(set(aliases)) < len(aliases):
        raise _view_refusal("view-unsupported", "a flow joined twice under one name (give each its own)", tree, sql)
    if len(q.sources) == 2:
        q.sources[0].prefix, q.sources[1].prefix = "l__", "r__"
    elif len(q.sources) > 2:
        for i, s in enumerate(q.sources):
            s.prefix = f"t{i}__"
    rename = _renamer(q, sql)
    plain = [rename(c) for c in conjuncts if not _is_subquery(c)]
    if not joins and not subqueries:
        q.where = exp.and_(*plain) if plain else None
        return rename
    prefixes = {s.prefix: i for i, s in enumerate(q.sources)}
    if not joins:  # only subqueries: WHERE's other conditions on the first one's output
        pass
    elif all(k == "inner" for k in kinds):
        pool = [rename(c) for j in joins for c in _conjuncts(j.args.get("on"))] + plain
        _inner_chain(q, bound_joins, pool, prefixes, sql)
    else:
        _ordered_chain(q, joins, kinds, plain, prefixes, sql, flows, rename)
    for c in subqueries:
        q.steps.append(_subquery(q, c, len(q.steps) + 1, sql, flows, rename, plain))
    if not joins:
        q.steps[0].filter += plain
    _push_down(q, prefixes)
    return rename


def _pushable(q: Select, src: int) -> int | None:
    """The step whose input source ``src`` is (0: the first step's left), if a condition on ``src``
    alone may filter that input before the join: ``src`` is never NULL-padded by a step of the
    chain (it enters by an inner or right join, and no later step is a right or full join)."""
    if src == 0:
        at, later = 0, q.steps
    else:
        at = next((i for i, st in enumerate(q.steps) if st.source is q.sources[src]), -1)
        if at < 0 or q.steps[at].kind not in ("inner", "right"):
            return None
        later = q.steps[at + 1 :]
    return at if all(st.kind not in ("right", "full") for st in later) else None


def _push_down(q: Select, prefixes: Mapping[str, int]) -> None:
    """Each condition on the output of a step that reads one source's columns alone, moved to that
    source's input before the join where it may be (:func:`_pushable`), so the join keeps only the
    rows that pass: a WHERE on the NULL-padded side of an outer join stays after the padding."""
    for st in q.steps:
        for c in list(st.filter):
            owners = _owners(c, prefixes)
            if len(owners) > 1:  # it stays; an OR whose every branch has conditions on one source gives that source's
                for src in owners:
                    at, implied = _pushable(q, src), _implied(c, src, prefixes)
                    if at is not None and implied is not None:
                        _filter_input(q, at, src, implied)
                continue
            at = _pushable(q, next(iter(owners))) if owners else None
            if at is None:
                continue
            st.filter.remove(c)
            _filter_input(q, at, next(iter(owners)), c)


def _filter_input(q: Select, at: int, src: int, c: exp.Expr) -> None:
    """Condition ``c`` on source ``src`` alone filters its input to step ``at``."""
    target = q.steps[at]
    if src == 0:
        target.left_where = c if target.left_where is None else exp.and_(target.left_where, c)
    else:
        target.right_where = c if target.right_where is None else exp.and_(target.right_where, c)


def _implied(c: exp.Expr, src: int, prefixes: Mapping[str, int]) -> exp.Expr | None:
    """For ``c`` an OR of branches that each have conditions on source ``src`` alone (TPC-H Q19: each
    branch's lineitem and part conditions), the OR of those conditions: a row of ``src`` for which it
    is not true makes every branch, so ``c``, not true (false or NULL), so it may filter ``src``'s
    input before an inner join while ``c`` stays after it (as Spark derives it). Else None.

        >>> from sqlglot import parse_one
        >>> c = parse_one("(l__a = 1 AND r__b = 2) OR (l__a = 3 AND l__c = 4 AND r__b = 5)")
        >>> _implied(c, 0, {"l__": 0, "r__": 1}).sql()
        'l__a = 1 OR (l__a = 3 AND l__c = 4)'
        >>> _implied(parse_one("l__a = 1 OR r__b = 2"), 0, {"l__": 0, "r__": 1}) is None
        True
    """
    c = c.unnest()
    if not isinstance(c, exp.Or):
        return None
    parts = []
    for branch in c.flatten():
        mine = [x.copy() for x in _conjuncts(branch.unnest()) if _owners(x, prefixes) == {src}]
        if not mine:
            return None
        parts.append(exp.and_(*mine) if len(mine) > 1 else mine[0])
    return exp.or_(*parts)


def _only_in_where(tree: exp.Select, subqueries: list[exp.Expr], sql: str) -> None:
    """A subquery is a conjunct of WHERE (its own SELECT with no subquery of its own)."""
    allowed = {id(s) for c in subqueries for s in c.find_all(exp.Exists, exp.Subquery)}
    for node in tree.find_all(exp.Exists, exp.Subquery):
        if id(node) not in allowed:
            raise _view_refusal("view-unsupported", _SUBQUERY, node, sql, "SELECT")
    for c in subqueries:
        sub = c.find(exp.Select)
        assert sub is not None
        nested = next(sub.find_all(exp.Exists, exp.Subquery), None)
        if nested is not None:
            raise _view_refusal("view-unsupported", "a subquery inside a subquery", nested, sql)


def _place(q: Select, conds: list[exp.Expr], prefixes: Mapping[str, int], order: list[int]) -> None:
    """Each condition on the output of the first step after which every source it reads is joined."""
    for c in conds:
        need = _owners(c, prefixes)
        bound = {order[0]}
        for st, src in zip(q.steps, order[1:], strict=False):
            if st.kind not in ("semi", "anti"):
                bound.add(src)
            if need <= bound:
                st.filter.append(c)
                break
        else:
            q.steps[-1].filter.append(c)


def _inner_chain(q: Select, joins: list[exp.Join], pool: list[exp.Expr], prefixes: Mapping[str, int], sql: str) -> None:
    """Inner joins: each next source is the first (in FROM order) that some equality links to the
    sources joined so far; every equality between it and them is the step's key."""
    bound, order, left = {0}, [0], list(range(1, len(q.sources)))
    while left:
        pick = next((j for j in left if any(_key_pair(c, j, bound, prefixes) for c in pool)), None)
        if pick is None:
            raise _no_equality(joins[left[0] - 1], sql)
        step = Step("inner", q.sources[pick], joins[pick - 1])
        for c in list(pool):
            pair = _key_pair(c, pick, bound, prefixes)
            if pair is not None:
                step.keys.append(pair)
                pool.remove(c)
        q.steps.append(step)
        bound.add(pick)
        order.append(pick)
        left.remove(pick)
    _place(q, pool, prefixes, order)


def _ordered_chain(
    q: Select,
    joins: list[exp.Join],
    kinds: list[str],
    plain: list[exp.Expr],
    prefixes: Mapping[str, int],
    sql: str,
    flows: Mapping[str, Mapping[str, str]],
    rename: Callable[[exp.Expr], exp.Expr],
) -> None:
    """Joins with an outer, semi or anti join among them: in FROM order, each keyed by its own ON;
    WHERE applies to the last step's output (after the NULL-padded rows exist)."""
    bound, src = {0}, 1
    for i, (j, kind) in enumerate(zip(joins, kinds, strict=True), 1):
        if kind in ("semi", "anti"):
            right = _source(j.this, sql, flows)
            right.prefix = f"s{i}__"
            both = {**prefixes, right.prefix: -i}
            idx, r = -i, _sub_renamer(q, right, sql, rename)
        else:
            right, both, idx, r = q.sources[src], dict(prefixes), src, rename
        step = Step(kind, right, j)
        for c in _conjuncts(j.args.get("on")):
            c = r(c)
            if not _owners(c, both) <= bound | {idx}:
                raise _view_refusal("view-unsupported", "ON reading a flow joined later", c, sql)
            pair = _key_pair(c, idx, bound, both)
            if pair is not None:
                step.keys.append(pair)
            elif kind == "inner":
                step.filter.append(c)
            else:
                step.match.append(c)
        if not step.keys:
            raise _no_equality(j, sql)
        if kind not in ("semi", "anti"):
            bound.add(src)
            src += 1
        q.steps.append(step)
    q.steps[-1].filter += plain


def _sub_renamer(
    q: Select, sub: Source, sql: str, outer: Callable[[exp.Expr], exp.Expr]
) -> Callable[[exp.Expr], exp.Expr]:
    """A subquery's renamer: a column of its own source first (SQL's scoping), else the view's."""
    inner = _renamer(Select(q.tree, [sub]), sql)
    names = {f.lower() for f in sub.types}

    def one(col: exp.Column) -> exp.Expr:
        t = col.table.lower()
        mine = t in (sub.alias.lower(), sub.flow.lower()) if t else col.name.lower() in names
        return inner(col) if mine else outer(col)

    return lambda e: e.transform(lambda n: one(n) if isinstance(n, exp.Column) else n)


def _not_null(conds: list[exp.Expr], e: exp.Expr) -> bool:
    """One of ``conds`` is ``e IS NOT NULL``."""
    text = e.sql()
    return any(
        isinstance(c, exp.Not)
        and isinstance(c.this, exp.Is)
        and isinstance(c.this.expression, exp.Null)
        and c.this.this.sql() == text
        for c in conds
    )


def _not_in(step: Step, own: list[exp.Expr], outer_where: list[exp.Expr], node: exp.Expr, sql: str) -> None:
    """``x NOT IN (SELECT col ...)`` is an anti join only when neither side can be NULL (else SQL's
    three-valued logic: a NULL in the subquery makes it true for no row at all, a condition over the
    whole subquery that a keyed stage cannot see)."""
    x, col = step.keys[0]
    if not (_not_null(outer_where, x) and _not_null(own, col)):
        raise _view_refusal(
            "view-unsupported",
            "NOT IN (SELECT ...) over values that may be NULL (a NULL in the subquery makes it true for no row, "
            "SQL's three-valued logic, a condition over the whole subquery a keyed stage cannot see): write "
            "NOT EXISTS (SELECT ... WHERE s.col = x), or WHERE x IS NOT NULL AND x NOT IN (SELECT col ... "
            "WHERE col IS NOT NULL)",
            node,
            sql,
            "NOT",
        )


def _subquery(
    q: Select,
    c: exp.Expr,
    i: int,
    sql: str,
    flows: Mapping[str, Mapping[str, str]],
    outer: Callable[..., exp.Expr],
    outer_where: list[exp.Expr],
) -> Step:
    """``[NOT] EXISTS (SELECT ... FROM t WHERE ...)`` or ``x [NOT] IN (SELECT col FROM t WHERE ...)``:
    a semi (anti) join keyed by the correlation's equalities; the subquery's own conditions filter
    ``t`` before the join, its other correlated conditions are part of a match."""
    negated = isinstance(c, exp.Not)
    pred = c.this if negated else c
    sub = pred.this if isinstance(pred, exp.Exists) else pred.args["query"].this
    if not isinstance(sub, exp.Select) or any(sub.args.get(k) for k in ("joins", "group", "having", "limit", "order")):
        raise _view_refusal("view-unsupported", "a subquery other than SELECT ... FROM one flow [WHERE ...]", sub, sql)
    frm = sub.args.get("from_") or sub.args.get("from")
    if frm is None:
        raise _view_refusal("view-unsupported", "a subquery without FROM", sub, sql)
    right = _source(frm.this, sql, flows)
    right.prefix = f"s{i}__"
    rename = _sub_renamer(q, right, sql, outer)
    prefixes = {s.prefix: n for n, s in enumerate(q.sources)} | {right.prefix: -1}
    bound = set(range(len(q.sources)))
    step = Step("anti" if negated else "semi", right, c)
    own: list[exp.Expr] = []
    if isinstance(pred, exp.In):
        if len(sub.expressions) != 1 or isinstance(sub.expressions[0], exp.Star):
            raise _view_refusal("view-unsupported", "IN (SELECT ...) of other than one column", sub, sql)
        col = sub.expressions[0]
        col = rename(col.this if isinstance(col, exp.Alias) else col)
        if _owners(col, prefixes) != {-1}:
            raise _view_refusal("view-unsupported", "IN (SELECT ...) of other than the subquery's column", col, sql)
        step.keys.append((outer(pred.this), col))
    where = sub.args["where"].this if sub.args.get("where") is not None else None
    for cond in _conjuncts(where):
        cond = rename(cond)
        pair = _key_pair(cond, -1, bound, prefixes)
        if pair is not None:
            step.keys.append(pair)
        elif _owners(cond, prefixes) <= {-1}:
            own.append(cond)
        else:
            step.match.append(cond)
    if not step.keys:
        raise _view_refusal(
            "view-unsupported", "EXISTS not correlated on an equality (WHERE s.col = t.col)", pred, sql, "EXISTS"
        )
    if negated and isinstance(pred, exp.In):
        _not_in(step, own, outer_where, c, sql)
    step.right_where = exp.and_(*own) if own else None
    return step
