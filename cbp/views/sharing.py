"""Stages shared between views (issue 48, differential dataflow's shared arrangements): a generated
stage equal to one generated already is not added, and its readers read that one's output.

In detail: a generated stage whose output is an internal flow (its name has ``__``: a join step ``v__j1``, the
joined rows ``v__join`` of a GROUP BY, a CTE ``v__cte1``, a UNION ALL branch ``v__u1``, a self-join's
copy) is not added when a stage already generated computes the same thing: the same translator over
the same input flows, routed by the same keys and filters, with the same plan (the same columns kept,
the same aggregates; :func:`share_key`). Its readers read the existing stage's output flow instead,
and the pipeline holds that stage, and its state, once. The stage keeps the name the first view (in
compile order: the YAML's, a view after the views it reads) gave it; a view's own output stage is
never replaced (it is the view), though another view's internal stage may share it.
``CBP_SHARE_STATE=0`` turns sharing off.

    >>> from cbp.views.plan import Generated
    >>> g = Generated()
    >>> t = {"a": {"k": "int", "x": "int"}, "b": {"k": "int", "y": "int"}}
    >>> sql = "SELECT a.k, sum(a.x) AS n FROM a JOIN b ON a.k = b.k GROUP BY a.k"
    >>> g.add_view("v1", sql, t)
    >>> g.add_view("v2", sql.replace("sum(", "max(").replace("AS n", "AS m"), t)
    >>> sorted(g.stages), g.stages["v2"]["inputs"][0]["flow"], g.shared_by
    (['v1', 'v1__join', 'v2'], 'v1__join', {'v1__join': ['v2']})
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["share_key", "view_stages", "shared_with"]

#: Plans that are never shared: a window's stage is changed after it is generated (a top-k filter).
_UNSHARED = ("window", "topk")


def share_key(stage: Mapping[str, Any], routes: list[Any], view: str, sql: str) -> str | None:
    """What a generated stage computes, as text: equal for two stages that may be one (None: never
    shared). Its output's name and the view it serves are left out, and so is the view's name in the
    expressions that carry it for their runtime errors (``cbp_view(e, 'v')``), unless the view's SQL
    has a string literal of that name (then the key keeps it, and only an exact match shares)."""
    params = stage.get("params") or {}
    plan = params.get("cbp_view") or {}
    if plan.get("kind") in _UNSHARED:
        return None
    body = {k: v for k, v in stage.items() if k not in ("outputs", "description")}
    body["params"] = {**params, "cbp_view": {k: v for k, v in plan.items() if k not in ("out", "id")}}
    body["routes"] = [vars(r) for r in routes]
    text = json.dumps(body, sort_keys=True, default=str)
    if re.search(rf"['\"]{re.escape(view)}['\"]", sql):
        return text
    return text.replace(f"'{view}'", "'\\u0000'")


def view_stages(
    stages: Mapping[str, Any], order: list[str], reads: Mapping[str, list[str]] | None
) -> dict[str, list[str]]:
    """Each view's generated stages in run order, shared ones included. ``stages``: the pipeline's
    generated view stages by name (each writes the flow of its name), ``reads``: the flows each view's
    SQL names. A view's stages are its own and, upstream of them, the stages writing an internal flow
    (``__``) or a view its SQL does not name (a stage of this view shared into that view's; ``reads``
    None: internal flows only)."""
    out: dict[str, list[str]] = {}
    for view in (s for s in order if s in stages and "__" not in s):
        seen: set[str] = set()
        todo = [view]
        while todo:
            s = todo.pop()
            if s in seen:
                continue
            seen.add(s)
            for f in (i.flow for i in stages[s].inputs):
                if f in stages and ("__" in f or (reads is not None and f not in reads.get(view, []))):
                    todo.append(f)
        out[view] = [s for s in order if s in seen]
    return out


def shared_with(views: Mapping[str, list[str]], view: str, stage: str) -> list[str]:
    """The other views whose stages include ``stage``."""
    return sorted(v for v, stages in views.items() if v != view and stage in stages)
