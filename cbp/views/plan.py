"""A view's checked SELECTs compiled to cbp stages: the flows and translate stages (raw YAML shapes)
the pipeline gets, and the routing of each generated stateful stage's inputs.

A view ``v`` becomes flow ``v`` written by stage ``v``: a record-wise stage (projection, WHERE, UNION
ALL), a chain of join stages (:mod:`cbp.views.joins`; state: both sides' rows by join key, and
for outer, semi and anti joins what a kept row's matches are counted with), or a GROUP BY stage
(state: each group's count and sums, or multisets for MIN, MAX, count(DISTINCT); SELECT DISTINCT is
a GROUP BY). A join of n flows (n - 1 steps, subqueries included) writes flows ``v__j1`` ... before
``v``; a GROUP BY over joins adds stage and flow ``v__join``; a UNION ALL branch that joins or
groups becomes view ``v__u<i>``; a CTE becomes view ``v__cte<i>`` (:mod:`cbp.views.ctes`), the
``UNION ALL`` under a ``UNION``/``INTERSECT``/``EXCEPT`` view ``v__set<i>`` (:mod:`cbp.views.setops`).
Window functions and a top ``ORDER BY ... LIMIT`` (flow ``v__sort``, then the top-k stage ``v``) are
compiled by :mod:`cbp.views.windows`. Every generated translator is signed and sums
``_diff`` (:mod:`cbp.views.run`). An internal stage equal to one generated already is not added: its
readers read that one's flow (:mod:`cbp.views.sharing`).

    >>> g = Generated()
    >>> g.add_view("v", "SELECT url FROM hits WHERE n > 1", {"hits": {"url": "string", "n": "int"}})
    >>> g.stages["v"]["translator"], g.flows["v"]
    ('cbp.views.run:linear', {'url': 'string?'})
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from sqlglot import exp

from .ctes import inline_ctes
from .exprs import ViewError, column_type, infer, with_decimal_types
from .hoist import hoist
from .joins import PRESERVED, Step
from .mode import ansi, recorded
from .query import AGGREGATES, Select, Source, _parse, names_of, placed, position, read_after, used_fields
from .run import MULTISET, RouteKey
from .select import distinct_over_groups, read_tree
from .setops import WEIGHT, set_operations
from .sharing import share_key
from .vtypes import avg_type, family, is_numeric, sum_type, wider
from .windows import compile_topk, compile_window, has_window, top_of
from .winsplit import windows_apart

__all__ = ["Generated"]

_RUN = "cbp.views.run:"
_SQL = "spark"


def _sql(e: exp.Expr | None) -> str | None:
    return None if e is None else e.sql(dialect=_SQL)


def _plan(kind: str, out: str, **parts: Any) -> dict[str, Any]:
    plan = {"kind": kind, "out": out, **parts}
    plan["id"] = hashlib.sha1(json.dumps(plan, sort_keys=True).encode()).hexdigest()[:16]
    return plan


class _Flows(dict[str, dict[str, str]]):
    """Flow -> field -> type; a flow shared away (``alias``: it is another stage's) reads as that one."""

    def __init__(self, alias: dict[str, str]) -> None:
        super().__init__()
        self.alias = alias

    def __missing__(self, flow: str) -> dict[str, str]:
        if flow in self.alias:
            return self[self.alias[flow]]
        raise KeyError(flow)


class Generated:
    """The flows (name -> field -> type), stages (name -> raw stage) and routes (stage -> one
    :class:`RouteKey` per input) the views of a pipeline compile to, added view by view. A stage equal
    to one generated before is not added (``share``: :mod:`cbp.views.sharing`): ``alias`` maps its
    flow to the existing one, ``shared_by`` the existing stage to the other views that read it so."""

    def __init__(self, share: bool | None = None) -> None:
        if share is None:
            from ..settings import current

            share = current().share_state
        self.share = share
        self.alias: dict[str, str] = {}  # a flow shared away -> the flow of the stage it shares
        self.flows: dict[str, dict[str, str]] = _Flows(self.alias)
        self.stages: dict[str, dict[str, Any]] = {}
        self.routes: dict[str, list[RouteKey]] = {}
        self.view_of: dict[str, str] = {}  # generated stage -> the view it serves (the first, if shared)
        self.shared_by: dict[str, list[str]] = {}  # generated stage -> the other views it serves
        self._shared: dict[str, str] = {}  # share key -> the stage generated with it
        self._sql = ""
        self._view = ""

    def real(self, flow: str) -> str:
        """The flow ``flow`` is: itself, or the flow of the stage it shares."""
        while flow in self.alias:
            flow = self.alias[flow]
        return flow

    def add_view(self, name: str, sql: str, flows: Mapping[str, Mapping[str, str]]) -> None:
        """Compile view ``name`` over ``flows`` (flow -> field -> scalar type; earlier views included)."""
        self._sql, self._view = sql, name
        self._compile(name, _parse(sql), flows)

    def _compile(self, name: str, tree: exp.Expr, flows: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
        """Compile view (or internal view, :mod:`cbp.views.hoist`) ``name`` of tree ``tree``; its field types."""
        try:
            tree = distinct_over_groups(tree)  # SELECT DISTINCT ... GROUP BY: a derived table, then DISTINCT
            tree = windows_apart(tree)  # windows over a GROUP BY, or of several PARTITION BYs: derived tables
            made = inline_ctes(tree, self._sql, name, flows, self._compile)  # WITH: views <name>__cte<i>
            tree, sets = set_operations(tree, self._sql, name, {**flows, **made}, self._compile)
            made |= sets
            made |= hoist(tree, self._sql, name, {**flows, **made}, self._compile)
        except ViewError as e:
            raise e if e.node is None else placed(e, self._sql) from None
        selects = read_tree(tree, self._sql, {**flows, **made})
        top = top_of(tree, self._sql)  # ORDER BY ... LIMIT k: the query to flow <name>__sort, then its top k
        target = f"{name}__sort" if top else name
        try:
            if len(selects) == 1:
                self._select(selects[0], target)
            else:
                self._union(selects, target)
            if top:
                compile_topk(self, name, target, *top)
        except ViewError as e:
            if e.node is None:
                raise
            raise placed(e, self._sql) from None
        return {f: t.rstrip("?") for f, t in self.flows[name].items()}

    def _type(self, e: exp.Expr | None, types: Mapping[str, str | None], boolean: bool = False) -> str | None:
        """``e``'s type, with its width (``int32``: :func:`~cbp.views.exprs.column_type`)."""
        if e is None:
            return None
        t = column_type(e, types)
        if boolean and t not in ("bool", None):
            raise ViewError(
                "view-unsupported", f"a condition of type {t} (it must be a boolean)", *position(e, self._sql)
            )
        if not boolean and t is None:
            raise ViewError(
                "view-unsupported", "a column that is always NULL (its type is unknown)", *position(e, self._sql)
            )
        return t

    def _x(self, e: exp.Expr | None, types: Mapping[str, str | None]) -> str | None:
        """``e``'s Spark SQL text, each decimal arithmetic rounded to Spark's result type."""
        return None if e is None else _sql(with_decimal_types(e, types, self._view))

    def _stage(
        self, stage: str, flow: str, raw: dict[str, Any], fields: dict[str, str], routes: list[RouteKey]
    ) -> None:
        raw = {**raw, "inputs": [{**i, "flow": self.real(i["flow"])} for i in raw["inputs"]]}
        # runnable 'any': a join or UNION ALL runs when any of its inputs has an increment
        # backfill: a view added to a home that ran starts from its inputs' whole contents ('cbp upgrade')
        base = {
            "signed": True,
            "runnable": "any",
            "outputs": [flow],
            "backfill": True,
            "description": f"view '{self._view}'",
        }
        made = base | recorded(raw)  # the mode (non-ANSI) in its plan: cbp.views.mode
        key = share_key(made, routes, self._view, self._sql) if self.share else None
        if key is not None and "__" in flow and key in self._shared:  # an internal flow computed already
            shared = self._shared[key]
            self.alias[flow] = shared
            if self._view != self.view_of[shared] and self._view not in self.shared_by.get(shared, []):
                self.shared_by.setdefault(shared, []).append(self._view)
            return
        self.flows[flow] = fields
        self.stages[stage] = made
        self.routes[stage] = routes
        self.view_of[stage] = self._view
        if key is not None:
            self._shared.setdefault(key, stage)

    def _select(self, q: Select, flow: str) -> None:
        if has_window(q):  # window functions: cbp.views.windows
            compile_window(self, q, flow)
            return
        types = q.types
        self._type(q.where, types, boolean=True)
        cols = [(n, e, self._type(e, types)) for n, e in q.columns] if q.groups is None else []
        if not q.steps and q.groups is None:
            branch = {
                "input": 0,
                "where": self._x(q.where, types),
                "cols": [[n, self._x(e, types)] for n, e, _ in cols],
            }
            fields = {n: f"{t}?" for n, _, t in cols}
            self._linear(flow, [q.sources[0].flow], [branch], fields)
        elif q.groups is None:
            self._chain(q, flow, [[n, self._x(e, types)] for n, e, _ in cols], {n: f"{t}?" for n, _, t in cols})
        else:
            source = q.sources[0].flow
            where = q.where
            if q.steps:  # the joined rows (WHERE applied) on flow <view>__join, then grouped
                source = f"{flow}__join"
                self._chain(q, source, None, {})
                where = None
            self._group(q, flow, source, where, types)

    def _linear(self, flow: str, inputs: list[str], branches: list[dict[str, Any]], fields: dict[str, str]) -> None:
        raw = {"translator": _RUN + "linear", "inputs": [{"flow": f} for f in inputs]}
        types = {n: t.rstrip("?") for n, t in fields.items()}
        plan = _plan("linear", flow, branches=branches, types=types)
        self._stage(flow, flow, {**raw, "params": {"cbp_view": plan}}, fields, [])

    def _copy(self, src: Source, flow: str) -> str:
        """Flow ``flow``: a record-wise copy of ``src``'s flow (the other side of a self-join)."""
        cols = [[f, _sql(exp.column(f, quoted=True))] for f in src.types]
        self._linear(
            flow, [src.flow], [{"input": 0, "where": None, "cols": cols}], {f: f"{t}?" for f, t in src.types.items()}
        )
        return flow

    def _keys(self, step: Step, types: Mapping[str, str | None]) -> tuple[list[list[str]], list[str | None]]:
        """A join step's key expressions (left, right) and the cast each key pair's values get."""
        keys: list[list[str]] = [[], []]
        casts: list[str | None] = []
        for left, right in step.keys:
            lt, rt = family(str(self._type(left, types))), family(str(self._type(right, types)))
            if lt != rt and not (is_numeric(lt) and is_numeric(rt)) and {lt, rt} != {"date", "timestamp"}:
                raise ViewError("view-unsupported", f"a join key comparing {lt} with {rt}", *position(left, self._sql))
            casts.append(
                None
                if lt == rt
                else "float"
                if "float" in (lt, rt)
                else "timestamp"
                if lt in ("date", "timestamp")
                else "decimal"
            )
            keys[0].append(self._x(left, types) or "")
            keys[1].append(self._x(right, types) or "")
        return keys, casts

    def _chain(self, q: Select, flow: str, cols: list[list[Any]] | None, fields: dict[str, str]) -> None:
        """The view's joins: one two-input join stage per step, each writing the rows joined so far to
        flow ``<view>__j<i>``, the last writing ``flow`` (``cols``; None: every joined field)."""
        after = read_after(q)  # each input's fields pruned to those the view reads (routing included) ...
        used = after[0]
        first = _pruned(q.sources[0], used)
        base = flow.removesuffix("__join")  # v__join's steps: v__j1, ...; a UNION ALL branch's: v__u1__j1, ...
        bound: dict[str, str | None] = {first.prefix + f: t for f, t in first.types.items()}
        left: tuple[str, str, list[str], list[str | None]] = (
            first.flow,
            first.prefix,
            list(first.types),
            list(first.types.values()),
        )
        for i, step in enumerate(q.steps, 1):
            right = _pruned(step.source, used)
            if self.real(right.flow) == self.real(left[0]):  # a self-join: a stage reads a flow once,
                right = dataclasses.replace(right, flow=self._copy(right, f"{base}__self{i}"))  # so a copy
            env = bound | {right.prefix + f: t for f, t in right.types.items()}
            if step.kind not in ("semi", "anti"):
                bound = env
            last = i == len(q.steps)
            out = flow if last else f"{base}__j{i}"
            match = exp.and_(*step.match) if step.match else None
            cond = exp.and_(*step.filter) if step.filter else None
            for c in (match, cond, step.right_where, step.left_where):
                self._type(c, env, boolean=True)
            bound = {f: t for f, t in bound.items() if f in after[i]}  # ... and what a step's rows keep: what
            keep = after[i] | names_of(match, cond)  # is read after it or by its conditions (not its keys)
            held = [[f for f in left[2] if left[1] + f in keep], [f for f in right.types if right.prefix + f in keep]]
            if cols is None or not last:
                out_cols: list[list[Any]] = [[f, f] for f in bound]
                out_fields = {f: f"{t}?" for f, t in bound.items()}
            else:
                out_cols, out_fields = cols, fields
            keys, casts = self._keys(step, env)
            parts: dict[str, Any] = {}
            if (left[1], right.prefix) != ("l__", "r__"):
                parts["prefixes"] = [left[1], right.prefix]
            if step.kind != "inner":
                parts["how"] = step.kind
            if match is not None:
                parts["match"] = self._x(match, env)
            state = join_state(step.kind, match is not None)
            if "d" in state:
                parts["dirs"] = True  # its translator keeps directories (cbp.views.joinrun)
            plan = _plan(
                "join",
                out,
                fields=held,
                ftypes=[[dict(zip(left[2], left[3]))[f] for f in held[0]], [right.types[f] for f in held[1]]],
                filter=self._x(cond, env),
                cols=out_cols,
                types={n: t.rstrip("?") for n, t in out_fields.items()},
                **parts,
            )
            kept = PRESERVED[step.kind]
            routes = [
                RouteKey(keys[0], self._x(step.left_where, env), left[1], casts, 0 not in kept, left[2]),
                RouteKey(
                    keys[1], self._x(step.right_where, env), right.prefix, casts, 1 not in kept, list(right.types)
                ),
            ]
            raw = {
                "translator": _RUN + "join",
                "inputs": [{"flow": f, "route_by": _RUN + "unrouted"} for f in (left[0], right.flow)],
                "state": {"schema": state, "row_key": ["s", "r"]},
                "params": {"cbp_view": plan},
            }
            self._stage(out, out, raw, out_fields, routes)
            left = (out, "", list(bound), list(bound.values()))

    def _group(self, q: Select, flow: str, source: str, where: exp.Expr | None, types: dict[str, str | None]) -> None:
        groups = q.groups or []
        gsql = [_sql(g) for g in groups]
        env: dict[str, str | None] = {f"g__{j}": self._type(g, types) for j, g in enumerate(groups)}
        aggs: list[list[Any]] = []

        def replace(n: exp.Expr) -> exp.Expr:
            if isinstance(n, AGGREGATES):
                agg = self._aggregate(n, types)
                if agg not in aggs:
                    aggs.append(agg)
                i = aggs.index(agg)
                env[f"a__{i}"] = agg[2]
                return exp.column(f"a__{i}", quoted=True)
            if not isinstance(n, (exp.Literal, exp.Boolean, exp.Null)) and _sql(n) in gsql:
                return exp.column(f"g__{gsql.index(_sql(n))}", quoted=True)
            if isinstance(n, exp.Column):
                raise ViewError(
                    "view-unknown",
                    f"column '{n.name[3:] if n.name[:3] in ('l__', 'r__') else n.name}' is neither grouped "
                    "nor aggregated",
                    *position(n, self._sql),
                )
            return n

        cols = [(name, e.transform(replace)) for name, e in q.columns]
        having = q.having.transform(replace) if q.having is not None else None
        fields = {name: f"{self._type(e, env)}?" for name, e in cols}
        weight = fields.pop(WEIGHT, None) and {"weight": WEIGHT}  # INTERSECT ALL, EXCEPT ALL (cbp.views.setops)
        self._type(having, env, boolean=True)
        plan = _plan(
            "group",
            flow,
            groups=len(groups),
            gtypes=[env[f"g__{j}"] for j in range(len(groups))],
            aggs=[[fn, arg, at] for fn, arg, _, at in aggs],
            cols=[[n, self._x(e, env)] for n, e in cols],
            types={n: t.rstrip("?") for n, t in fields.items()},
            having=self._x(having, env),
            **(weight or {}),
        )
        if not groups:  # one row always: every input record is routed to it, WHERE is applied in the stage
            plan = _plan(**{k: v for k, v in plan.items() if k != "id"}, where=self._x(where, types))
            where = None
        inputs = [{"flow": source, "route_by": _RUN + "unrouted"}]
        raw: dict[str, Any] = {
            "translator": _RUN + "group",
            "inputs": inputs,
            "state": {"schema": _group_state(aggs)},
            "params": {"cbp_view": plan},
        }
        keys = [self._x(g, types) or "" for g in groups]
        have = self.flows[source] if q.steps else q.sources[0].types
        reads = [f for f in have if f in used_fields(q)]  # what the keys, aggregates and WHERE read
        routes = [RouteKey(keys, self._x(where, types), "", [], False, reads)]
        if not groups and q.steps:  # its row from the first epoch although no joined row may ever come:
            flows = [*(s.flow for s in q.sources), *(st.source.flow for st in q.steps)]
            ticks = list(dict.fromkeys(self.real(f) for f in flows))
            inputs += [{"flow": f, "route_by": _RUN + "unrouted"} for f in ticks]  # the joins' inputs,
            routes += [RouteKey([], None, "", [], False, []) for _ in ticks]  # to the one group, unread: reads
            # nothing, so an epoch's tick records are consolidated into one (or none) before routing
        self._stage(flow, flow, raw, fields, routes)

    def _aggregate(self, n: exp.Expr, types: Mapping[str, str | None]) -> list[Any]:
        """``[function, argument SQL, result type, argument type]`` of an aggregate."""
        if isinstance(n, exp.Count) and isinstance(n.this, exp.Star):
            return ["count_star", None, "int", None]
        arg = n.this
        names: dict[type[exp.Expr], str] = {exp.Count: "count", exp.Sum: "sum", exp.Avg: "avg"}
        fn = (names | {exp.Min: "min", exp.Max: "max"})[type(n)]
        if isinstance(arg, exp.Distinct):  # the multiset of the values (min, max: DISTINCT changes nothing)
            for a in arg.expressions:
                self._type(a, types)  # (a NULL is refused: its type is unknown)
            several = [self._x(a, types) or "" for a in arg.expressions]
            if fn == "count" and len(several) > 1:  # the distinct tuples with no NULL member, as Spark
                return ["count_distinct", several, "int", None]
            if len(several) > 1:
                raise ViewError(
                    "view-unsupported", f"{fn.upper()}(DISTINCT of several values)", *position(n, self._sql)
                )
            fn, arg = (fn if fn in ("min", "max") else f"{fn}_distinct"), arg.expressions[0]
        t = infer(arg, types)
        sql = self._x(arg, types)
        if fn in ("count", "count_distinct"):
            return [fn, sql, "int", t]
        if fn in ("min", "max"):
            if t is None or t.startswith(("list", "json")):  # (a bool or binary: Python orders them as Spark)
                raise ViewError("view-unsupported", f"{fn.upper()} of a {t}", *position(n, self._sql))
            return [fn, sql, column_type(arg, types), t]  # min(int32 column) is an int32
        if t is None or not is_numeric(t):
            raise ViewError("view-unsupported", f"{fn.upper()} of a {t} (it takes a number)", *position(n, self._sql))
        return [fn, sql, avg_type(t) if fn.startswith("avg") else sum_type(t), t]

    def _union(self, selects: list[Select], flow: str) -> None:
        """UNION ALL: one record-wise stage; a branch that joins or groups becomes view ``<flow>__u<i>``."""
        inputs: list[str] = []
        branches: list[dict[str, Any]] = []
        shapes: list[list[tuple[str, str | None]]] = []
        for i, q in enumerate(selects):
            if not q.steps and q.groups is None:
                self._type(q.where, q.types, boolean=True)
                cols = [(n, e, infer(e, q.types) if i else self._type(e, q.types)) for n, e in q.columns]
                src, where = q.sources[0].flow, self._x(q.where, q.types)
            else:
                src, where = f"{flow}__u{i}", None
                self._select(q, src)
                cols = [(n, exp.column(n, quoted=True), t[:-1]) for n, t in self.flows[src].items()]
            src = self.real(src)  # two branches may read one flow (a shared stage's)
            if src not in inputs:
                inputs.append(src)
            shapes.append([(n, t) for n, _, t in cols])
            branches.append(
                {"input": inputs.index(src), "where": where, "cols": [[n, self._x(e, q.types)] for n, e, _ in cols]}
            )
        fields: dict[str, str] = {}
        for pos, (name, t) in enumerate(shapes[0]):
            ts = {str(s[pos][1]) for s in shapes if len(s) > pos and s[pos][1] is not None}  # NULL: any type
            numbers = all(is_numeric(x) for x in ts)
            if any(len(s) != len(shapes[0]) for s in shapes) or (len(ts) > 1 and not numbers):
                raise ViewError(
                    "view-unsupported",
                    "a set operation (UNION, INTERSECT, EXCEPT) of SELECTs whose columns differ in number or "
                    f"type (column {pos + 1}, '{name}': {' and '.join(sorted(ts))})",
                    *position(None, self._sql, "SET"),
                )
            common = str(t)
            for x in ts:
                common = wider(common, x)
            fields[name] = common + "?"
        for b in branches:  # the first SELECT names the columns
            b["cols"] = [[shapes[0][j][0], c[1]] for j, c in enumerate(b["cols"])]
        self._linear(flow, inputs, branches, fields)


def _pruned(src: Source, used: set[str]) -> Source:
    """``src`` with only the fields in ``used`` (by their prefixed names): what a join stage keeps of it."""
    return dataclasses.replace(src, types={f: t for f, t in src.types.items() if src.prefix + f in used})


def join_state(kind: str, match: bool) -> dict[str, str]:
    """A join stage's state: per key, side and distinct row its count ``n``; with a match condition
    besides the key, each kept row's count of matches ``m``; an inner join's directories (``d``,
    :mod:`cbp.views.joinrun`; a home an older cbp wrote has none: ``cbp upgrade`` adds the field)."""
    return (
        {"s": "int", "r": "string", "n": "int"}
        | ({"m": "int"} if match else {})
        | ({"d": "string?"} if kind == "inner" else {})
    )


def _group_state(aggs: list[list[Any]]) -> dict[str, str]:
    """A GROUP BY stage's state: per group its row count, and per aggregate the count of its non-NULL
    values and their sum (``s<i>``; a decimal's in non-ANSI mode as its exact text, past 38 digits too)
    or their multiset (``m<i>``: MIN, MAX, the DISTINCT aggregates)."""
    state: dict[str, str] = {"k": "string", "n": "int"}
    for i, (fn, _, t, at) in enumerate(aggs):
        state[f"c{i}"] = "int"
        if fn in MULTISET:
            state[f"m{i}"] = "string"
        elif fn in ("sum", "avg") and at is not None and at.startswith("decimal(") and not ansi():
            state[f"s{i}"] = "string"  # non-ANSI: the exact total as text, past 38 digits too (NULL is shown)
        elif fn in ("sum", "avg") and at is not None and at.startswith("decimal("):
            state[f"s{i}"] = "decimal(38,{})".format(at.split(",")[1].rstrip(")"))
        else:
            state[f"s{i}"] = "float" if t == "float" or fn == "avg" else "int"
    return state
