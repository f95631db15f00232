"""Incremental SQL views (issue 48, first slice): a pipeline's ``views:`` compiled to translate stages.

A view is a Spark SQL ``SELECT`` over the pipeline's flows (and other views); it becomes a flow of
its name whose consolidated contents always equal the query over its inputs' consolidated
contents. :func:`expand_views` adds the flows and stages a pipeline's views compile to
(:mod:`cbp.views.plan`) to its raw YAML; :func:`route_views` gives the compiled spec's generated
stages their routing. See ``docs/howto/sql-views.md``.

    >>> from cbp.spec import load_spec
    >>> spec = load_spec("flows/url_count.yaml")  # no views: nothing generated
    >>> sorted(spec.stages)
    ['url_count']
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import SpecError

__all__ = ["expand_views", "route_views"]


def _order(views: dict[str, str], problems: list[SpecError], refuse: Any) -> list[str]:
    """The views in dependency order (a view after the views it reads)."""
    from .query import tables_of

    reads = {v: [t for t in tables_of(sql) if t in views] for v, sql in views.items()}
    order: list[str] = []
    state: dict[str, int] = {}

    def visit(v: str, path: list[str]) -> None:
        if state.get(v) == 2:
            return
        if state.get(v) == 1:
            raise refuse(v, "view-unsupported", f"views that read each other ({' -> '.join(path + [v])}): recursion")
        state[v] = 1
        for t in reads[v]:
            visit(t, path + [v])
        state[v] = 2
        order.append(v)

    for v in views:
        visit(v, [])
    return order


def expand_views(
    path: str, raw: Any, lines: dict[tuple[str, ...], int], files: dict[str, Any] | None = None
) -> tuple[Any, dict[str, Any]]:
    """``raw`` (a :class:`cbp.spec.raw.RawPipeline`) with the flows and stages of its views added, and
    the routes of the generated stages; a view that cannot be compiled is a :class:`SpecError`
    (``view-syntax``, ``view-unknown``, ``view-unsupported``) naming the YAML line and the SQL's line
    and column. ``files`` are the views of the ``sql:`` files (:class:`~cbp.views.sqlfiles.SqlView`
    by name): their errors name the file's line and column.

    Example: ``views: {big: SELECT id FROM orders WHERE amount > 10}`` adds flow ``big`` (schema
    ``{id: int?}``) and a record-wise stage ``big`` (translator ``cbp.views.run:linear``) writing it.
    """
    from ..spec.raw import RawFlow, RawStage
    from .exprs import ViewError
    from .plan import Generated

    files = files or {}

    def _spec_refusal(view: str, code: str, message: str, line: int | None = None, col: int | None = None) -> SpecError:
        if view in files:  # a view of a .sql file: the file's line and column
            fl, fc = files[view].place(line, col)
            return SpecError(files[view].file, f"line {fl}, column {fc}: view '{view}': {message}", code=code)
        where = f"line {lines[('views', view)]}: " if ("views", view) in lines else ""
        at = f", SQL line {line}, column {col}" if line is not None else ""
        return SpecError(path, f"{where}view '{view}'{at}: {message}", code=code)

    views: dict[str, str] = {**raw.views, **{n: v.sql for n, v in files.items()}}
    taken = set(raw.flows) | set(raw.stages)
    for v in views:
        if v in taken or "__" in v:
            raise _spec_refusal(
                v, "bad-name", f"the name '{v}' is a flow or stage of the pipeline, or has '__' (kept for views' own)"
            )
    from ..spec.context import Context
    from ..spec.sources import source_fields

    ctx = Context(path, raw, lines)  # a Delta source without schema: has its table's columns
    flows = {
        n: _types(f.fields if f.fields is not None else source_fields(n, f, ctx.fail, ctx.base))
        for n, f in raw.flows.items()
    }
    gen = Generated()
    for v in _order(views, [], _spec_refusal):
        try:
            gen.add_view(v, views[v], flows)
        except ViewError as e:
            raise _spec_refusal(v, e.code, e.message, e.line, e.col) from None
        flows.update({n: {f: t.rstrip("?") for f, t in fs.items()} for n, fs in gen.flows.items()})
    for stage, view in gen.view_of.items():
        if ("views", view) in lines:
            lines[("stages", stage)] = lines[("flows", stage)] = lines[("views", view)]
    new_flows = {
        n: RawFlow.model_validate({"schema": fs, "description": f"view '{gen.view_of[n]}'"})
        for n, fs in gen.flows.items()
    }
    new_stages = {n: RawStage.model_validate(s) for n, s in gen.stages.items()}
    update = {"flows": {**raw.flows, **new_flows}, "stages": {**raw.stages, **new_stages}, "views": views}
    return raw.model_copy(update=update), gen.routes


def _types(fields: dict[str, Any]) -> dict[str, str]:
    """A raw schema's fields as types a view reads: the scalar type of a plain field, or the whole
    type string (a list, json: a view refuses to use them)."""
    from ..spec.typedvalues import canonical
    from .vtypes import is_typed_view_type

    out = {}
    for name, t in fields.items():
        text = str(t["type"] if isinstance(t, dict) else t).strip()
        scalar = text.rstrip("?").strip()
        if scalar.startswith("decimal"):
            try:
                scalar = canonical(scalar.replace(" ", "")) or scalar
            except ValueError:  # out of bounds: the schema's own check says so
                pass
        out[name] = scalar if is_typed_view_type(scalar) else text
    return out


def route_views(spec: Any, routes: dict[str, Any]) -> Any:
    """``spec`` with each generated stage's inputs routed by its :class:`~cbp.views.run.RouteKey`.

    Example: stage ``by_cust`` of ``SELECT cust, count(*) AS n FROM orders GROUP BY cust`` routes
    ``{"cust": "c1", ...}`` to key ``'["c1"]'`` (the JSON text of the group's values).
    """
    if not routes:
        return spec
    from ..spec.objects import KeyFunction
    from . import groupbulk, joinbulk

    groupbulk.attach()  # a GROUP BY's first build by Spark SQL (cbp.views.bulk, cbp.views.groupbulk)
    joinbulk.attach()  # an inner join's (cbp.views.joinbulk)

    stages = dict(spec.stages)
    for name, keys in routes.items():
        if name not in stages or not keys:
            continue
        st = stages[name]
        inputs = tuple(
            dataclasses.replace(i, route_by=KeyFunction(k.text, fn=k)) for i, k in zip(st.inputs, keys, strict=True)
        )
        stages[name] = dataclasses.replace(st, inputs=inputs)
    return dataclasses.replace(spec, stages=stages)
