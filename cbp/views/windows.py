"""Window functions with ``PARTITION BY`` and a view's top ``ORDER BY ... LIMIT k``, compiled to cbp
stages (issue 48); their translators are in :mod:`cbp.views.winrun`.

A view whose SELECT list has window functions (``row_number()``, ``rank()``, ``dense_rank()``,
``ntile``, ``percent_rank``, ``cume_dist``, ``lag``/``lead``, ``first_value``/``last_value``/``nth_value``
(these five with ``IGNORE NULLS`` too), ``count``/``sum``/``avg``/``min``/``max`` ``OVER (PARTITION BY ...
[ORDER BY ...] [frame])``, the frames of :mod:`cbp.views.frames`) becomes one
stage keyed by the partition's values, whose state is the partition's multiset of input rows; a
touched partition is recomputed and only the difference is emitted (Materialize does the same). A
view ending in ``ORDER BY ... LIMIT k`` becomes its query on flow ``v__sort`` and a top-k stage
``v`` over one key holding that relation's multiset; its output is the current top k rows. An
``ORDER BY`` without ``LIMIT`` at the top of a view is accepted and ignored (a view is a multiset).

    >>> sql = "SELECT a FROM t ORDER BY a DESC LIMIT 3 OFFSET 1"
    >>> terms, k, skip = top_of(exp.maybe_parse(sql, dialect="spark"), sql)
    >>> terms[0].sql(), k, skip
    ('a DESC', 3, 1)
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

from sqlglot import exp

from .exprs import ViewError, construct_name, infer
from .frames import constant_int, frame_of, range_problem, typed
from .query import AGGREGATES, Select, position, used_fields
from .run import RouteKey

if TYPE_CHECKING:
    from .plan import Generated

__all__ = ["allowed", "has_window", "outside_windows", "top_of", "compile_window", "compile_topk"]
__all__ += ["describe", "holds", "keep_only"]

_RUN = "cbp.views.run:"  # window and topk: cbp.views.winrun's, exported there
RANKING: dict[type[exp.Expr], str] = {exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank"}
RANKING |= {exp.Ntile: "ntile", exp.PercentRank: "percent_rank", exp.CumeDist: "cume_dist"}
OFFSETS: dict[type[exp.Expr], str] = {exp.Lag: "lag", exp.Lead: "lead"}
_TOP_ARGS = ("order", "limit", "offset")  # a view's top ORDER BY ... LIMIT k [OFFSET n]
VALUES: dict[type[exp.Expr], str] = {exp.FirstValue: "first_value", exp.LastValue: "last_value"}
VALUES |= {exp.NthValue: "nth_value"}
_NULLS = (exp.IgnoreNulls, exp.RespectNulls)  # first_value(x) IGNORE NULLS; its function is their child
_STATE = {"schema": {"r": "string", "n": "int"}, "row_key": ["r"]}


def _plan(kind: str, out: str, **parts: Any) -> dict[str, Any]:
    """A stage's plan with its id (the hash of its contents), as :mod:`cbp.views.plan` makes them."""
    plan = {"kind": kind, "out": out, **parts}
    plan["id"] = hashlib.sha1(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:16]
    return plan


def _refuse(what: str, node: exp.Expr | None, sql: str, keyword: str | None = None) -> ViewError:
    return ViewError("view-unsupported", what, *position(node, sql, keyword))


def _ancestors(node: exp.Expr) -> list[exp.Expr]:
    out, p = [], node.parent
    while p is not None:
        out.append(p)
        p = p.parent
    return out


def allowed(node: exp.Expr, tree: exp.Expr, sql: str) -> bool:
    """True for a node of a window function in the view's SELECT list, or of the view's top ``ORDER BY``
    or ``LIMIT`` (checked here: ``view-unsupported`` naming what is not compiled); False: not one."""
    parent = node.parent
    if isinstance(node, exp.Window):
        _check_window(node, tree, sql)
        return True
    if isinstance(node, (exp.Order, exp.Limit, exp.Offset)) and parent is tree and node.arg_key in _TOP_ARGS:
        return True
    if isinstance(node, exp.Order) and isinstance(parent, exp.Window):
        return True
    if isinstance(node, exp.Ordered) and isinstance(parent, exp.Order):
        return parent.parent is tree or isinstance(parent.parent, exp.Window)
    if isinstance(parent, _NULLS) and isinstance(parent.parent, exp.Window) and node.arg_key == "this":
        return isinstance(node, (*OFFSETS, *VALUES))
    if isinstance(parent, exp.Window) and node.arg_key in ("this", "spec"):
        return isinstance(node, (exp.WindowSpec, *_NULLS, *RANKING, *OFFSETS, *VALUES, *AGGREGATES))
    return False


def function_of(node: exp.Window) -> tuple[exp.Expr, bool]:
    """A window's function and whether it ignores NULLs (``IGNORE NULLS``, or ``first_value(x, true)``)."""
    fn: exp.Expr = node.this
    if isinstance(fn, _NULLS):
        return fn.this, isinstance(fn, exp.IgnoreNulls)
    flag = fn.args.get("from_first") if isinstance(fn, exp.NthValue) else None  # nth_value(x, n, true): sqlglot's
    return fn, isinstance(flag, exp.Boolean) and bool(flag.this)  # name of Spark's ignoreNulls argument


def _check_window(node: exp.Window, tree: exp.Expr, sql: str) -> None:
    """A window this slice compiles: in the top SELECT's list, a supported function, PARTITION BY, a frame."""
    ups = _ancestors(node)
    top = next((i for i, a in enumerate(ups) if isinstance(a, (exp.Select, exp.Union))), None)
    child = ups[top - 1] if top else node  # the SELECT's child the window is in
    if top is None or ups[top] is not tree or child.arg_key != "expressions":
        raise _refuse("a window function outside the SELECT list of the view's own SELECT", node, sql)
    if any(isinstance(a, exp.Window) for a in ups):
        raise _refuse("a window function inside a window function", node, sql)
    fn, ignore = function_of(node)
    if not isinstance(fn, (*RANKING, *OFFSETS, *VALUES, *AGGREGATES)):
        what = construct_name(fn)
        raise _refuse(
            f"{what} as a window function (supported: row_number, rank, dense_rank, ntile, percent_rank, "
            "cume_dist, lag, lead, first_value, last_value, nth_value, count, sum, avg, min, max)",
            fn,
            sql,
        )
    if isinstance(node.this, _NULLS) and not isinstance(fn, (*OFFSETS, *VALUES)):
        raise _refuse(f"IGNORE NULLS or RESPECT NULLS on {construct_name(fn)} (Spark refuses it too)", fn, sql)
    if isinstance(fn, AGGREGATES) and isinstance(fn.this, exp.Distinct):
        raise _refuse(
            "DISTINCT in a window function (Spark refuses it too: DISTINCT_WINDOW_FUNCTION_UNSUPPORTED)", fn, sql
        )
    if not node.args.get("partition_by"):
        raise _refuse(
            f"a window function without PARTITION BY ({construct_name(fn)} OVER the whole view: every change "
            "would recompute it; write ORDER BY ... LIMIT for a top-k of the whole view)",
            fn,
            sql,
        )
    ordered = node.args.get("order") is not None
    if isinstance(fn, (*RANKING, *OFFSETS, *VALUES)) and not ordered:
        raise _refuse(f"{construct_name(fn)} without ORDER BY in its window", fn, sql)
    spec = node.args.get("spec")
    if spec is not None and (isinstance(fn, (*RANKING, *OFFSETS)) or frame_of(spec, ordered) is None):
        raise _refuse(
            f"the window frame {spec.sql(dialect='spark')} (supported: ROWS or RANGE BETWEEN bounds each "
            "UNBOUNDED, CURRENT ROW or a constant n PRECEDING or FOLLOWING: an int for ROWS; for RANGE, a "
            "number, or days or an INTERVAL for a date or timestamp ORDER BY; not on a ranking function or "
            "lag/lead; the lower bound not after the upper; without ORDER BY, only the whole partition)",
            fn,
            sql,
        )


def has_window(q: Select) -> bool:
    """Whether a SELECT's columns have a window function."""
    return any(isinstance(n, exp.Window) for _, e in q.columns for n in e.walk())


def outside_windows(n: exp.Expr) -> bool:
    """Whether ``n`` is not inside a window function (an aggregate in one does not make a GROUP BY)."""
    return not any(isinstance(a, exp.Window) for a in _ancestors(n))


def top_of(tree: exp.Expr, sql: str) -> tuple[list[exp.Ordered], int, int] | None:
    """The ORDER BY terms, the k and the n of the top ``ORDER BY ... LIMIT k [OFFSET n]`` of a view's (or
    internal view's) parsed ``tree`` of ``sql`` (None: no LIMIT; an ORDER BY alone is ignored); ``LIMIT``
    without ``ORDER BY``, ``OFFSET`` without ``LIMIT``, or either not a number, is ``view-unsupported``."""
    limit, offset = tree.args.get("limit"), tree.args.get("offset")
    n = offset.args.get("expression") if offset is not None else exp.Literal.number(0)
    if offset is not None and limit is None:
        raise _refuse("OFFSET without LIMIT (the view would be all but n rows of its query)", None, sql, "OFFSET")
    if not (isinstance(n, exp.Literal) and not n.is_string and str(n.this).isdigit()):
        raise _refuse("OFFSET other than a number of rows", None, sql, "OFFSET")
    if limit is None:
        return None
    order = tree.args.get("order")
    if order is None:
        raise _refuse("LIMIT without ORDER BY (which rows it keeps is arbitrary)", None, sql, "LIMIT")
    k = limit.args.get("expression")
    if not (isinstance(k, exp.Literal) and not k.is_string and str(k.this).isdigit()):
        raise _refuse("LIMIT other than a number of rows", None, sql, "LIMIT")
    return list(order.expressions), int(k.this), int(n.this)


def _order_terms(gen: Generated, terms: list[exp.Ordered], types: dict[str, str | None]) -> list[list[Any]]:
    """``[expression SQL, descending, NULLs first]`` of each ORDER BY term (Spark's default: NULLs first
    ascending, last descending)."""
    out = []
    for o in terms:
        desc = bool(o.args.get("desc"))
        nulls_first = o.args.get("nulls_first")
        gen._type(o.this, types)
        out.append([gen._x(o.this, types), desc, (not desc) if nulls_first is None else bool(nulls_first)])
    return out


def compile_window(gen: Generated, q: Select, flow: str) -> None:
    """A SELECT with window functions: (its joins to flow ``<flow>__join``, then) one stage keyed by the
    PARTITION BY values, its state the partition's rows, writing ``flow``."""
    if q.groups is not None:
        raise _refuse(
            "a window function with GROUP BY, DISTINCT or an aggregate (write the GROUP BY as a view and the "
            "window over it)",
            q.tree,
            gen._sql,
        )
    where: exp.Expr | None = q.where
    source = q.sources[0].flow
    used = used_fields(q)  # a partition's rows are kept with only the fields the view reads
    types: dict[str, str | None] = {f: t for f, t in q.types.items() if f in used}
    if q.steps:  # the joined rows (WHERE applied) on flow <view>__join, then the window
        source, where = f"{flow}__join", None
        gen._chain(q, source, None, {})
        types = {f: t.rstrip("?") for f, t in gen.flows[source].items()}
    gen._type(where, types, boolean=True)
    wins: list[dict[str, Any]] = []
    env: dict[str, str | None] = dict(types)
    partition: list[str] = []

    def replace(n: exp.Expr) -> exp.Expr:
        if not isinstance(n, exp.Window):
            return n
        keys = [gen._x(p, types) or "" for p in n.args["partition_by"]]
        for p in n.args["partition_by"]:
            gen._type(p, types)
        if wins and keys != partition:
            raise _refuse("window functions with different PARTITION BY in one view (one view each)", n, gen._sql)
        partition[:] = keys
        win, t = _window(gen, n, types)
        env[f"w__{len(wins)}"] = t
        wins.append(win)
        return exp.column(f"w__{len(wins) - 1}", quoted=True)

    cols = [(name, e.transform(replace)) for name, e in q.columns]
    fields = {name: f"{gen._type(e, env)}?" for name, e in cols}
    plan = _plan(
        "window",
        flow,
        fields=list(types),
        ftypes=list(types.values()),
        partition=partition,
        wins=wins,
        cols=[[n, gen._x(e, env)] for n, e in cols],
        types={n: t.rstrip("?") for n, t in fields.items()},
    )
    raw = {
        "translator": _RUN + "window",
        "inputs": [{"flow": source, "route_by": _RUN + "unrouted"}],
        "state": _STATE,
        "params": {"cbp_view": plan},
    }
    gen._stage(flow, flow, raw, fields, [RouteKey(partition, gen._x(where, types), "", [], False, list(types))])


def _window(gen: Generated, n: exp.Window, types: dict[str, str | None]) -> tuple[dict[str, Any], str | None]:
    """One window function's plan (``fn``, its argument, ORDER BY terms, frame) and its result type."""
    fn, ignore = function_of(n)
    order = n.args.get("order")
    win: dict[str, Any] = {"order": _order_terms(gen, list(order.expressions), types) if order else []}
    if ignore:
        win["ignore"] = True  # (only when set: the plans of windows without it stay as they were)
    if type(fn) in RANKING:
        name = RANKING[type(fn)]
        if name == "ntile":
            n = fn.this
            if not (isinstance(n, exp.Literal) and str(n.this).isdigit() and int(n.this) > 0):
                raise _refuse("ntile() of other than a positive number of buckets", fn, gen._sql)
            return win | {"fn": name, "buckets": int(n.this)}, "int"
        return win | {"fn": name}, "float" if name in ("percent_rank", "cume_dist") else "int"
    if type(fn) in OFFSETS:
        return _offsets(gen, fn, win, types)
    frame = _frame_checked(gen, n, types)
    if type(fn) in VALUES:
        t = gen._type(fn.this, types)
        win |= {"fn": VALUES[type(fn)], "arg": gen._x(fn.this, types), "at": t, "frame": frame}
        if isinstance(fn, exp.NthValue):
            nth = constant_int(fn.args.get("offset"))
            flag = fn.args.get("from_first")
            if flag is not None and not isinstance(flag, exp.Boolean):
                raise _refuse("nth_value() whose third argument is not true or false", fn, gen._sql)
            if nth is None or nth < 1:
                raise _refuse(
                    "nth_value() of other than a positive constant int n (Spark refuses it too)", fn, gen._sql
                )
            win["nth"] = nth
        return win, t
    agg = gen._aggregate(fn, types)
    return win | {"fn": agg[0], "arg": agg[1], "at": agg[3], "frame": frame}, agg[2]


def _frame_checked(gen: Generated, n: exp.Window, types: dict[str, str | None]) -> str:
    """A window's frame (:func:`cbp.views.frames.frame_of`), a RANGE frame's offsets checked against the
    type of its ORDER BY."""
    order = n.args.get("order")
    terms = list(order.expressions) if order is not None else []
    frame = frame_of(n.args.get("spec"), bool(terms))
    assert frame is not None  # (checked when the SQL was read: _check_window)
    order_type = infer(terms[0].this, types) if terms else None
    problem = range_problem(frame, len(terms), order_type)
    if problem:
        raise _refuse(problem, n.this, gen._sql)
    return typed(frame, order_type)


def _offsets(gen: Generated, fn: exp.Expr, win: dict[str, Any], types: dict[str, str | None]) -> tuple[dict, Any]:
    """``lag``/``lead``: the plan of one (its offset a constant int) and its type."""
    offset, default = fn.args.get("offset"), fn.args.get("default")
    steps = 1 if offset is None else constant_int(offset)
    if steps is None:
        raise _refuse(f"{construct_name(fn)} with an offset other than a constant int", fn, gen._sql)
    t = gen._type(fn.this, types)
    if default is not None and infer(default, types) not in (None, t):  # cast to the value's type, as Spark's
        to = {"int": "BIGINT", "float": "DOUBLE", "bool": "BOOLEAN"}.get(str(t), str(t).upper())  # implicit cast
        default = exp.Cast(this=default.copy(), to=exp.DataType.build(to, dialect="spark"))
        gen._type(default, types)  # (one Spark refuses, a date to a number, is refused)
    parts = {"arg": gen._x(fn.this, types), "offset": steps}
    return win | {"fn": OFFSETS[type(fn)], "default": gen._x(default, types), "at": t} | parts, t


def compile_topk(gen: Generated, view: str, inner: str, terms: list[exp.Ordered], k: int, skip: int = 0) -> None:
    """``ORDER BY ... LIMIT k [OFFSET skip]`` over flow ``inner`` (the view's query): one stage of one key
    whose state is the relation's multiset, writing the current top ``k`` rows after the first ``skip``
    to flow ``view`` (its plan's ``limit`` is ``k + skip``, its ``offset`` ``skip`` when there is one)."""
    fields = dict(gen.flows[inner])
    names = list(fields)
    types: dict[str, str | None] = {n: t.rstrip("?") for n, t in fields.items()}

    def to_output(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Column):
            hit = next((f for f in names if f.lower() == n.name.lower()), None)
            if hit is None:
                raise ViewError(
                    "view-unknown",
                    f"ORDER BY column '{n.sql(dialect='spark')}' is not a column of the view; they are "
                    + ", ".join(names),
                    *position(n, gen._sql),
                )
            return exp.column(hit, quoted=True)
        return n

    ordered = []
    for o in terms:
        c = o.copy()
        e = c.this
        if isinstance(e, exp.Literal) and not e.is_string and str(e.this).isdigit():  # ORDER BY 2: the 2nd column
            e = exp.column(names[min(max(int(e.this), 1), len(names)) - 1], quoted=True)
        c.set("this", e.transform(to_output))
        ordered.append(c)
    order = _order_terms(gen, ordered, types)
    plan = _plan("topk", view, fields=names, ftypes=list(types.values()), order=order, limit=k + skip)
    if skip:
        plan["offset"] = skip
    raw = {
        "translator": _RUN + "topk",
        "inputs": [{"flow": inner, "route_by": _RUN + "unrouted"}],
        "state": _STATE,
        "params": {"cbp_view": plan},
    }
    gen._stage(view, view, raw, fields, [RouteKey([], None, "", [], False)])


def keep_only(gen: Generated, stage: str, where: exp.Expr) -> None:
    """Window stage ``stage`` writes only its rows where ``where`` (over its output columns) is true: the
    top-k per group of a derived table ``(SELECT ..., row_number() OVER (...) AS rn ...) WHERE rn <= k``
    read by nothing else, so a row's rank moving below ``k`` writes nothing (a derived table's stage
    with the reading query's ``WHERE``; its reader still applies it).

    Example: ``keep_only(gen, "v__d1", parse_expr("rn <= 3"))``.
    """
    raw = gen.stages[stage]
    plan = {k: v for k, v in raw["params"]["cbp_view"].items() if k != "id"}
    if plan["kind"] != "window":
        raise ValueError(f"stage {stage} is not a window stage")
    types: dict[str, str | None] = dict(plan["types"])
    gen._type(where, types, boolean=True)
    raw["params"] = raw["params"] | {"cbp_view": _plan(**plan, keep=gen._x(where, types))}


def describe(plan: dict[str, Any], keys: list[str]) -> str:
    """What a window or top-k stage computes, for ``cbp explain``."""
    if plan["kind"] == "topk":
        order = ", ".join(f"{e}{' DESC' if d else ''}" for e, d, _ in plan["order"])
        skip = plan.get("offset", 0)
        first = f"rows {skip + 1} to {plan['limit']}" if skip else f"top {plan['limit']} rows"
        return f"{first} ORDER BY {order} (ORDER BY ... LIMIT over the whole view: one key)"
    fns = []
    for w in plan["wins"]:
        arg = "*" if w["fn"] == "count_star" else w.get("arg") or ""
        nulls = " IGNORE NULLS" if w.get("ignore") else ""
        fns.append(f"{w['fn'].replace('count_star', 'count')}({arg}){nulls}")
    keep = f", rows kept WHERE {plan['keep']}" if plan.get("keep") else ""
    return f"window functions {', '.join(fns)} OVER (PARTITION BY {keys[0]}){keep}"


def holds(plan: dict[str, Any]) -> str:
    """What a window or top-k stage's state holds, for ``cbp explain``."""
    what = "the whole view's rows (before the LIMIT)" if plan["kind"] == "topk" else "each partition's input rows"
    return f"{what}: per distinct row (r, JSON) its multiplicity (n); a touched key is recomputed from them"
