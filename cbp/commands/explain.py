"""``cbp explain FLOW.yaml VIEW [--home H] [--json]``: the stages a SQL view compiled to.

For each generated stage: its name, the operator it implements, the flows it reads with each
input's key (its RouteBy) and what its state holds; with ``--home``, the rows and bytes of the
stage's state table's current files, read from the Delta log with delta-rs (no Spark starts); for a
stage the view shares with other views (:mod:`cbp.views.sharing`), those views (``shared_with``).

    $ cbp explain flows/sql_views.yaml by_region --home state/sql_views
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from typing import Any

from ..errors import UsageError

__all__ = ["NAME", "add_parser", "run", "explain"]

NAME = "explain"
_RUN = "cbp.views.run:"


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(NAME, help="the stages a SQL view compiled to: operators, keys, state (rows, bytes)")
    p.add_argument("flow_yaml", metavar="FLOW.yaml", help="the pipeline file")
    p.add_argument("view", metavar="VIEW", help="a view of the pipeline (`views:` or a `sql:` file)")
    p.add_argument("--home", help="also show each stage's state size in this home (read without Spark)")
    p.add_argument("--json", action="store_true", help="print the explanation as JSON")


def _views(spec: Any, flow_yaml: str | None = None) -> dict[str, list[str]]:
    """The pipeline's views, each with its generated stages in run order (``v__j1``, ``v__join``, ``v__u1``,
    ``v``), the stages it shares with other views included (:func:`cbp.views.sharing.view_stages`; without
    ``flow_yaml``, a view's stages shared into another view's own are not known: its reads)."""
    from ..views.sharing import view_stages

    stages = {
        name: st for name, st in spec.stages.items() if st.translator_path.startswith(_RUN) and "cbp_view" in st.params
    }
    return view_stages(stages, list(spec.order), None if flow_yaml is None else _reads(flow_yaml))


def _reads(flow_yaml: str) -> dict[str, list[str]]:
    """The flows each view's SQL names (``views:`` and the ``sql:`` files' views)."""
    from ..spec import load_yaml
    from ..views.query import tables_of
    from ..views.sqlfiles import read_sql_files

    data, _ = load_yaml(flow_yaml)
    views = dict(data.get("views") or {})
    files = read_sql_files(flow_yaml, list(data.get("sql") or []), views)
    return {v: tables_of(sql) for v, sql in {**views, **{n: f.sql for n, f in files.items()}}.items()}


def _aggregate(fn: str, arg: str | list[str] | None) -> str:
    """An aggregate as the view's SQL wrote it: its argument with the user's column names (not a joined
    row's ``l__amount``), ``sum(DISTINCT x)`` for ``sum_distinct``."""
    if fn == "count_star":
        return "count(*)"
    text = ", ".join(_unprefixed(a) for a in ([arg] if isinstance(arg, str) else arg or []))
    return f"{fn[: -len('_distinct')]}(DISTINCT {text})" if fn.endswith("_distinct") else f"{fn}({text})"


def _operator(plan: dict[str, Any], keys: list[str]) -> str:
    """What a generated stage computes, from its plan (``params.cbp_view``)."""
    if plan["kind"] in ("window", "topk"):
        from ..views.windows import describe

        return describe(plan, keys)
    if plan["kind"] == "linear":
        branches = plan["branches"]
        if len(branches) > 1:
            return f"UNION ALL of {len(branches)} SELECTs (record-wise)"
        where = branches[0].get("where")
        return "projection" + (f" and filter WHERE {where}" if where else "") + " (record-wise)"
    if plan["kind"] == "join":
        match = f" AND {_unprefixed(plan['match'])}" if plan.get("match") else ""
        cond = f" with filter {_unprefixed(plan['filter'])}" if plan.get("filter") else ""
        return f"{_JOINS[plan.get('how', 'inner')]} ON ({keys[0]}) = ({keys[1]}){match}{cond}"
    aggs = [_aggregate(fn, arg) for fn, arg, _ in plan["aggs"]]
    what = f"GROUP BY ({keys[0]}) with {', '.join(aggs)}" if aggs else f"DISTINCT ({keys[0]})"
    having = plan.get("having")
    if having:  # its aggregates and groups as the SQL wrote them
        for i, a in reversed(list(enumerate(aggs))):
            having = having.replace(f"`a__{i}`", a)
        for j, g in reversed(list(enumerate(keys[0].split(", ")))):
            having = having.replace(f"`g__{j}`", g)
    return what + (f" HAVING {having}" if having else "")


_JOINS = {"inner": "inner equi-join", "left": "LEFT OUTER equi-join", "right": "RIGHT OUTER equi-join"}
_JOINS |= {"full": "FULL OUTER equi-join", "semi": "semi-join (IN, EXISTS)", "anti": "anti-join (NOT EXISTS)"}


def _holds(plan: dict[str, Any]) -> str:
    """What a generated stage's state holds, in words."""
    if plan["kind"] in ("window", "topk"):
        from ..views.windows import holds

        return holds(plan)
    if plan["kind"] == "linear":
        return "nothing (stateless)"
    if plan["kind"] == "join":
        rows = "both inputs' rows by join key: per row its side (s), the row (r, JSON) and its multiplicity (n)"
        if plan.get("how", "inner") == "inner":
            return rows + "; at a key of many rows, each side's directory (s 2, 3: its rows while few, d)"
        if plan.get("match"):
            return rows + "; per row of a kept side the count of the other side's rows matching it (m)"
        return rows + "; a kept row's matches are the other side's count at the key"
    from ..views.run import MULTISET

    parts = ["per group (k: the group's values, JSON) its row count (n)"]
    for i, (fn, arg, _) in enumerate(plan["aggs"]):
        kept = {
            "count_star": f"the count (c{i})",
            "count": f"the count of non-NULL values (c{i})",
            "count_distinct": f"the multiset of values (m{i})"
            + (": the distinct tuples with no NULL member, each with its count" if isinstance(arg, list) else ""),
        }.get(
            fn,
            f"the count of non-NULL values (c{i}) and "
            + (f"their multiset (m{i})" if fn in MULTISET else f"their sum (s{i})")
            + (": each distinct value with its count" if fn.endswith("_distinct") else ""),
        )
        parts.append(f"{_aggregate(fn, arg)}: {kept}")
    return "; ".join(parts)


def _size(home: Any, stage: str) -> dict[str, int | None]:
    """Rows and bytes of the current files of ``stage``'s state table (zeros before its first epoch):
    a key's superseded rows count until an epoch rewrites their file."""
    import pyarrow as pa
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    from ..storage.layout import LAYOUT

    try:
        dt = DeltaTable(home.uri(LAYOUT.state(stage)), storage_options=home.storage_options)
    except TableNotFoundError:
        return {"rows": 0, "bytes": 0, "files": 0}
    acts = pa.table(dt.get_add_actions(flatten=True)).to_pylist()
    counts = [a.get("num_records") for a in acts]
    rows = None if any(c is None for c in counts) else sum(int(c) for c in counts)
    return {"rows": rows, "bytes": sum(int(a["size_bytes"]) for a in acts), "files": len(acts)}


def _unprefixed(e: str) -> str:
    """A key expression as the view's SQL names its columns (a joined row's ``l__x`` or ``t2__x`` is ``x``)."""
    return re.sub(r"`(?:[lr]|[ts][0-9]+)__", "`", e)


def _stage(spec: Any, name: str, home: Any, shared: list[str]) -> dict[str, Any]:
    st = spec.stages[name]
    plan = st.params["cbp_view"]
    routes = [getattr(i.route_by, "fn", None) for i in st.inputs]
    keys = [", ".join(_unprefixed(e) for e in r.exprs) if r is not None else "" for r in routes]
    inputs = [
        {"flow": i.flow, "key": _unprefixed(i.route_by.text) if i.route_by is not None else "none: record by record"}
        for i in st.inputs
    ]
    state: dict[str, Any] | None = None
    if st.state_schema is not None:
        state = {"holds": _holds(plan), "schema": {k: str(t) for k, t in st.state_schema.fields.items()}}
        if home is not None:
            state |= _size(home, name)
    return {
        "stage": name,
        "operator": _operator(plan, keys),
        "inputs": inputs,
        "outputs": list(st.outputs),
        "partitions": st.partitions,
        "state": state,
        "shared_with": shared,  # the other views this stage serves (cbp.views.sharing); its state is held once
    }


def explain(flow_yaml: str, view: str, home: str | None = None) -> dict[str, Any]:
    """The stages view ``view`` of the pipeline at ``flow_yaml`` compiled to, as a JSON-able dict;
    with ``home``, each stateful stage's state rows and bytes. An unknown view is ``unknown-view``.

    Example: ``explain("flows/sql_views.yaml", "by_region")["stages"][0]["operator"]`` is
    ``'inner equi-join ON (...) = (...)'`` (stage ``by_region__join``).
    """
    from ..spec import load_spec
    from ..storage.home import Home
    from ..storage.layout import LAYOUT
    from ..views.sharing import shared_with

    spec = load_spec(flow_yaml)
    views = _views(spec, flow_yaml)
    if view not in views:
        raise UsageError(
            f"no SQL view named '{view}' in {flow_yaml}; the views are: {', '.join(sorted(views)) or 'none'}",
            code="unknown-view",
        )
    h = Home(home) if home else None
    stages = [_stage(spec, s, h, shared_with(views, view, s)) for s in views[view]]
    reads = sorted({i["flow"] for s in stages for i in s["inputs"]} - set(views[view]))
    rel = LAYOUT.view_table(view)
    table = h.uri(rel) if h is not None and h.exists(LAYOUT.delta_commit(rel, 0)) else None
    return {
        "pipeline": spec.name,
        "view": view,
        "reads": reads,
        "home": h.location if h else None,
        "stages": stages,
        "table": table,  # the Delta table of the view's rows (cbp.storage.viewtable), once it exists
    }


def _print(ex: dict[str, Any]) -> None:
    print(f"view '{ex['view']}' of pipeline '{ex['pipeline']}' reads {', '.join(ex['reads'])}")
    if ex.get("table"):
        print(f"  its rows as a Delta table: {ex['table']}")
    for s in ex["stages"]:
        print(f"  stage {s['stage']} ({s['partitions']} partitions) -> {', '.join(s['outputs'])}")
        print(f"    operator: {s['operator']}")
        if s["shared_with"]:
            print(f"    shared with: {', '.join(s['shared_with'])} (one stage, its state held once)")
        for i in s["inputs"]:
            print(f"    <- {i['flow']}  key: {i['key']}")
        st = s["state"]
        if st is None:
            print("    state: none (stateless)")
            continue
        print(f"    state: {st['holds']}")
        print(f"    state schema: {', '.join(f'{k}: {t}' for k, t in st['schema'].items())}")
        if "rows" in st:
            rows = "unknown" if st["rows"] is None else st["rows"]
            print(f"    state size: {rows} rows, {st['bytes']} bytes in {st['files']} current files")


def run(args: argparse.Namespace) -> int:
    ex = explain(args.flow_yaml, args.view, args.home)
    stateful = [s["state"] for s in ex["stages"] if s["state"] is not None]
    if args.home and stateful and not any(st["files"] for st in stateful):
        print(f"cbp {NAME}: note: no state in {ex['home']} yet; has the pipeline run there?", file=sys.stderr)
    if args.json:
        print(json.dumps(ex, indent=2))
    else:
        _print(ex)
    return 0
