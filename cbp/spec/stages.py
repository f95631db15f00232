"""A stage of a pipeline YAML compiled: its inputs (routed, ordered, signed), state schema, translator,
runnable, params and migrate function, each checked against the flows it reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..model import runnable_all, runnable_any
from .context import Context
from .objects import BROADCAST, InputSpec, KeyFunction, StageSpec, route_to_all
from .raw import RawInput, RawStage
from .rowkey import row_key_fields
from .schema import DIFF, RecordSchema, parse_type


def compile_stage(c: Context, name: str, s: RawStage, schemas: dict[str, RecordSchema]) -> StageSpec:
    """Stage ``name`` compiled and checked, its input flows' ``schemas`` known."""
    where = ("stages", name)
    inputs = _inputs(c, name, s, schemas)
    state_schema = c.schema(s.state.fields, where + ("state",), f"stage '{name}' state") if s.state else None
    if s.batch and s.state is None and all(i.route_by is None for i in inputs):
        raise c.fail(
            where + ("batch",),
            f"stage '{name}': a batch translator is called with groups of keys, but this stage has no keys (no "
            f"state and no route_by: a record-wise stage); give its inputs a route_by or drop 'batch'",
            "batch-needs-keys",
        )
    translator, runnable, migrate = _functions(c, name, s)
    return StageSpec(
        name,
        translator,
        s.translator,
        tuple(inputs),
        tuple(s.outputs),
        state_schema,
        s.state.grouping if s.state else "inner",
        s.partitions,
        runnable,
        s.runnable,
        {**c.raw.params, **s.params},
        s.timeout,
        s.batch,
        migrate,
        s.migrate,
        s.backfill,
        row_key_fields(c, s, inputs, state_schema, where) if s.state is not None else (),
        s.signed,
    )


def _inputs(c: Context, name: str, s: RawStage, schemas: dict[str, RecordSchema]) -> list[InputSpec]:
    """The stage's inputs, each routed, ordered and signed; not every one routed to ALL."""
    inputs = [_input(c, name, s, inp, schemas[inp.flow]) for inp in s.inputs]
    if (
        inputs
        and all(i.route_by is not None and i.route_by.text == BROADCAST for i in inputs)
        and (s.state is None or s.state.grouping == "inner")
    ):
        raise c.fail(
            ("stages", name, "inputs"),
            f"stage '{name}': every input is routed to ALL, which reaches only keys called by other input, so no "
            f"key would ever be called; route one input by key, or make the state grouping outer",
            "broadcast-nowhere",
        )
    return inputs


def _input(c: Context, name: str, s: RawStage, inp: RawInput, schema: RecordSchema) -> InputSpec:
    """One input of stage ``name`` reading a flow of ``schema``."""
    where = ("stages", name, "inputs")
    what = f"stage '{name}' input '{inp.flow}'"
    if inp.fields is not None:
        _check_consumer_fields(c, name, inp.flow, inp.fields, schema, where)
    route = (
        KeyFunction(BROADCAST, fn=route_to_all)
        if inp.route_by == BROADCAST
        else c.key_function(inp.route_by, schema, where, what + " route_by")
    )
    order = c.key_function(inp.order_by, schema, where, what + " order_by")
    if order is not None and order.field is not None:
        ft = schema.fields[order.field]
        if ft.is_list or ft.scalar == "json":
            raise c.fail(
                where,
                f"{what} order_by: field '{order.field}' is of type '{ft}'; a field orders by its value only "
                f"if it is a string, int, float or bool (nulls last); order by an import path "
                f"'module:function' instead",
                "bad-order-by",
            )
    if s.state is not None and route is None:
        raise c.fail(
            where,
            f"{what}: a stage with state must group its inputs; give route_by (a field or module:function), "
            f"the default RouteByRcd gives every record its own group",
            "route-required",
        )
    return InputSpec(inp.flow, route, order, s.signed if inp.signed is None else inp.signed)


def _functions(
    c: Context, name: str, s: RawStage
) -> tuple[Callable[..., Any], Callable[..., Any], Callable[..., Any] | None]:
    """The stage's translator, runnable and migrate function (None: none), imported and checked; and its
    params."""
    where = ("stages", name)
    flows = ", ".join(i.flow for i in s.inputs)
    translator = c.resolve(
        s.translator,
        where + ("translator",),
        f"stage '{name}' translator",
        (2 + len(s.inputs), f"translate(key, state, {flows}, out=...)"),
    )
    runnable: Callable[..., Any]
    if s.runnable in ("all", "any"):
        runnable = runnable_all if s.runnable == "all" else runnable_any
    else:
        runnable = c.resolve(
            s.runnable, where + ("runnable",), f"stage '{name}' runnable", (2, "runnable(frames, state)")
        )
    c.check_params(s.params, where + ("params",), f"stage '{name}'")
    migrate = None
    if s.migrate is not None:
        if s.state is None:
            raise c.fail(
                where + ("migrate",),
                f"stage '{name}': 'migrate' turns old state rows into new ones; the stage has no state",
                "migrate-without-state",
            )
        migrate = c.resolve(s.migrate, where + ("migrate",), f"stage '{name}' migrate", (1, "migrate(old_row)"))
    return translator, runnable, migrate


def _check_consumer_fields(
    c: Context, stage: str, flow: str, fields: dict[str, str], schema: RecordSchema, where: tuple[str, ...]
) -> None:
    producer = next((n for n, s in c.raw.stages.items() if flow in s.outputs), None)
    source = f"stage '{producer}' produces" if producer else "the flow declares"
    for fname, t in fields.items():
        if fname == DIFF:
            raise c.fail(
                where,
                f"stage '{stage}' input '{flow}': field name '{DIFF}' is reserved (every record carries it)",
                "reserved-name",
            )
        try:
            want = parse_type(t)
        except ValueError as e:
            raise c.fail(where, f"stage '{stage}' input '{flow}': field '{fname}': {e}", "bad-type") from None
        have = schema.fields.get(fname)
        if have is None:
            raise c.fail(
                where,
                f"stage '{stage}' reads field '{fname}' of flow '{flow}', which {source} without it (fields: "
                f"{', '.join(schema.fields)})",
                "unknown-field",
            )
        if not want.accepts(have):
            raise c.fail(
                where,
                f"type mismatch on flow '{flow}' field '{fname}': stage '{stage}' reads it as {want} but {source} "
                f"{have}",
                "type-mismatch",
            )
