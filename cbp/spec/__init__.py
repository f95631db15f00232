"""One strict loader for pipeline YAML files in ``flows/``.

:func:`load_spec` reads a file into frozen, validated objects and reports every mistake with
the file, the line, the stage or flow, and what is wrong, before any Spark job starts.

    >>> spec = load_spec("flows/url_count.yaml")            # doctest: +SKIP
    >>> spec.stages["url_count"].inputs[0].flow             # doctest: +SKIP
    'urls'

A file looks like::

    pipeline: url_count
    mode: direct                 # or blackbox (paper 001 §4.4, the baseline)
    params: {}                   # every stage's params start from these (a stage's own win)
    flows:
      urls:   {external: true, schema: {url: string}}
      counts: {schema: {url: string, count: int}}
    stages:
      url_count:
        translator: url_count:count_urls    # module beside the YAML, or installed
        batch: false                        # true: a vectorised translator (Arrow tables per batch of keys)
        partitions: 4
        inputs:
          - {flow: urls, route_by: url}     # a field name, module:function, or ALL (broadcast)
        state: {schema: {url: string, count: int}, grouping: inner}
        outputs: [counts]
        runnable: all                       # all | any | module:function
        params: {}
"""

from __future__ import annotations

import inspect
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..errors import SpecError
from ..model import ALL, EMITTER_NAMES, EMITTER_PRIVATE, runnable_all, runnable_any
from .resolve import is_import_path, resolve_callable
from .loader import load_yaml
from .messages import pydantic_message
from .fielddefs import field_definition
from .schema import DIFF, FieldType, RecordSchema, parse_type
from .sources import RawSource, flow_source
from .rowkey import row_key_fields

__all__ = ["MAX_TIMEOUT", "load_spec", "load_yaml", "PipelineSpec", "StageSpec", "FlowSpec", "InputSpec", "KeyFunction", "FrameFunction"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}\Z")  # at most 100 characters: names become file and directory names
STATE = "state"
#: The longest time limit of a stage epoch, in seconds (a week): YAML ``timeout:`` and ``cbp run --epoch-timeout``.
MAX_TIMEOUT = 7 * 24 * 3600
BROADCAST = "ALL"  # ``route_by: ALL``: every record of the input goes to every key called in the epoch


def route_to_all(record: dict[str, Any]) -> Any:
    """The RouteBy of ``route_by: ALL``."""
    return ALL


# ---------------------------------------------------------------- raw YAML shape (pydantic)
class _Strict(BaseModel):  # strict: no bool for an int, no number for a string, no "4" for 4
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


class _RawInput(_Strict):
    flow: str
    route_by: Optional[str] = None
    order_by: Optional[str] = None
    frame_by: Optional[str] = None
    fields: Optional[dict[str, str]] = Field(default=None, alias="schema")
    signed: Optional[bool] = None  # the translator sums this input's _diff (None: the stage's 'signed')


class _RawState(_Strict):
    fields: dict[str, Union[str, dict[str, Any]]] = Field(alias="schema")  # type string, or {type: T, default: V} (cbp.spec.fielddefs)
    grouping: Literal["inner", "outer"] = "inner"
    row_key: Optional[Union[str, list[str]]] = None  # keyed rows (cbp.engine.task.keyedstate): a key's state is a map row key -> row


class _RawFlow(_Strict):
    fields: dict[str, Union[str, dict[str, Any]]] = Field(alias="schema")
    external: bool = False
    description: Optional[str] = None
    source: Optional[RawSource] = None  # a Delta table that 'cbp sync' lands (cbp.spec.sources)
    key: Optional[list[str]] = None  # a keyed flow: upserts per key (AUTO CDC)
    sequence_by: Optional[str] = None
    delete_when: Optional[str] = None
    migrate: Optional[str] = None  # module:function turning an old stored record into a new one (or None) on 'cbp upgrade'


class _RawStage(_Strict):
    translator: str
    inputs: list[_RawInput] = []
    state: Optional[_RawState] = None
    outputs: list[str] = []
    partitions: int = Field(default=4, ge=1, le=100_000)
    runnable: str = "all"
    params: dict[str, Any] = {}
    description: Optional[str] = None
    timeout: Optional[float] = Field(default=None, gt=0, le=MAX_TIMEOUT)  # seconds per epoch of this stage
    batch: bool = False  # a vectorised translator: called per batch of keys with Arrow tables (cbp.engine.task.batch)
    migrate: Optional[str] = None  # module:function turning an old state row into a new one (or None) on 'cbp upgrade'
    backfill: bool = False  # a stage added by 'cbp upgrade' first reads its inputs' whole contents
    signed: bool = False  # the translator sums _diff: records other than +1 (retractions) may reach it

    @field_validator("inputs", mode="before")
    @classmethod
    def _short_inputs(cls, v: Any) -> Any:
        return [{"flow": x} if isinstance(x, str) else x for x in v] if isinstance(v, list) else v


class _RawPipeline(_Strict):
    pipeline: str
    mode: Literal["direct", "blackbox"] = "direct"
    description: Optional[str] = None
    params: dict[str, Any] = {}  # shared by every stage: a stage's params are these, updated by its own
    flows: dict[str, _RawFlow]
    stages: dict[str, _RawStage]


# ---------------------------------------------------------------- resolved objects
@dataclass(frozen=True)
class KeyFunction:
    """A RouteBy or OrderBy: a record field, or a user function of the record.

    As RouteBy, a function may return a list (or set) of keys to send the record to several groups.
    """

    text: str
    field: Optional[str] = None
    fn: Optional[Callable[[dict[str, Any]], Any]] = None

    def __call__(self, record: dict[str, Any]) -> Any:
        return record[self.field] if self.field is not None else self.fn(record)  # type: ignore[misc]

    def sort_key(self, schema: RecordSchema) -> Callable[[dict[str, Any]], Any]:
        """As an OrderBy of records of ``schema``: a nullable field sorts its nulls last (as Arrow
        sorts a batch translator's tables).

            >>> s = RecordSchema.parse({"v": "int?"})
            >>> sorted([{"v": None}, {"v": 2}, {"v": 1}], key=KeyFunction("v", field="v").sort_key(s))
            [{'v': 1}, {'v': 2}, {'v': None}]
        """
        f = self.field
        if f is None or not schema.fields[f].nullable:
            return self
        return lambda r: (r[f] is None, r[f])


@dataclass(frozen=True)
class FrameFunction:
    """A FrameBy: ``(record, state) -> (framing key, state)``; a field name frames by that field."""

    text: str
    field: Optional[str] = None
    fn: Optional[Callable[[dict[str, Any], Any], tuple[Any, Any]]] = None

    def __call__(self, record: dict[str, Any], state: Any) -> tuple[Any, Any]:
        if self.field is not None:
            return record[self.field], state
        return self.fn(record, state)  # type: ignore[misc]


@dataclass(frozen=True)
class FlowSpec:
    name: str
    schema: RecordSchema
    external: bool
    producer: Optional[str]
    consumers: tuple[str, ...]
    frame_by: Optional[FrameFunction] = None
    source: Optional[str] = None  # the Delta table 'cbp sync' lands on this flow
    key: tuple[str, ...] = ()  # a keyed flow's key fields (cbp.controller.keyed)
    sequence_by: Optional[str] = None
    delete_when: Optional[str] = None
    migrate: Optional[Callable[..., Any]] = None  # YAML 'migrate': old stored record -> new record or None (cbp upgrade)
    migrate_path: Optional[str] = None


@dataclass(frozen=True)
class InputSpec:
    flow: str
    route_by: Optional[KeyFunction]
    order_by: Optional[KeyFunction]
    signed: bool = False  # the translator sums this input's _diff (YAML 'signed', per input or per stage)


@dataclass(frozen=True)
class StageSpec:
    name: str
    translator: Callable[..., Any]
    translator_path: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    state_schema: Optional[RecordSchema]
    grouping: str
    partitions: int
    runnable: Callable[..., Any]
    runnable_name: str
    params: dict[str, Any]
    timeout: Optional[float] = None  # seconds an epoch of this stage may take (YAML 'timeout')
    batch: bool = False  # the translator is vectorised (YAML 'batch: true')
    migrate: Optional[Callable[..., Any]] = None  # YAML 'migrate': old state row -> new row or None (cbp upgrade)
    migrate_path: Optional[str] = None
    backfill: bool = False  # YAML 'backfill: true'
    row_key: tuple[str, ...] = ()  # keyed rows: the state fields that name a row of a key (YAML 'state: {row_key: ...}')
    signed: bool = False  # YAML 'signed: true': the translator sums _diff (each input may say otherwise)

    @property
    def input_flows(self) -> list[str]:
        return [i.flow for i in self.inputs]

    @property
    def record_wise(self) -> bool:
        """No state and every input RouteByRcd: runs map-only, without a shuffle."""
        return self.state_schema is None and all(i.route_by is None for i in self.inputs)


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    path: str
    mode: str
    flows: dict[str, FlowSpec]
    stages: dict[str, StageSpec]
    order: tuple[str, ...] = field(default=())

    @property
    def external_flows(self) -> list[str]:
        return [f.name for f in self.flows.values() if f.external]

    def stage(self, name: str) -> StageSpec:
        if name not in self.stages:
            raise SpecError(self.path, f"unknown stage '{name}'; the pipeline has: {', '.join(self.stages)}", code="unknown-stage")
        return self.stages[name]

    def flow(self, name: str) -> FlowSpec:
        if name not in self.flows:
            raise SpecError(self.path, f"unknown flow '{name}'; the pipeline has: {', '.join(self.flows)}", code="unknown-flow")
        return self.flows[name]


# ---------------------------------------------------------------- loader
def load_spec(path: str | os.PathLike[str], text: Optional[str] = None) -> PipelineSpec:
    """Read, validate and resolve a pipeline YAML file (or ``text`` as if it were that file); raise :class:`SpecError` on any mistake."""
    path = os.fspath(path)
    data, lines = load_yaml(path, text)
    if not isinstance(data, dict):
        raise SpecError(path, "line 1: the file must be a mapping with 'pipeline', 'flows' and 'stages'", code="invalid-spec")
    try:
        raw = _RawPipeline.model_validate(data)
    except ValidationError as e:
        raise SpecError(path, pydantic_message(e, lines), code="invalid-spec") from None
    return _Compiler(path, raw, lines).compile()


_KEY_CALL = "f(record)"  # how route_by / order_by functions are called


class _Compiler:
    def __init__(self, path: str, raw: _RawPipeline, lines: dict[tuple[str, ...], int]) -> None:
        self.path, self.raw, self.lines = path, raw, lines
        self.base = os.path.dirname(os.path.abspath(path))

    def fail(self, where: tuple[str, ...], message: str, code: str) -> SpecError:
        line = None
        for n in range(len(where), -1, -1):
            line = self.lines.get(where[:n])
            if line is not None:
                break
        return SpecError(self.path, (f"line {line}: " if line else "") + message, code=code)

    def compile(self) -> PipelineSpec:
        raw = self.raw
        if not _NAME.match(raw.pipeline):
            raise self.fail(("pipeline",), f"pipeline name '{raw.pipeline:.120}' must be a plain identifier of at most 100 characters", "bad-name")
        for kind, names in (("flow", raw.flows), ("stage", raw.stages)):
            for n in names:
                if not _NAME.match(n):
                    raise self.fail((kind + "s", n), f"{kind} name '{n:.120}' must be a plain identifier (letters, digits, _; at most 100)", "bad-name")
        if STATE in raw.flows:
            raise self.fail(("flows", STATE), "'state' is reserved for each stage's state flow; rename the flow", "reserved-name")
        if not raw.stages:
            raise self.fail(("stages",), "the pipeline has no stages", "no-stages")

        self._check_params(raw.params, ("params",), "the pipeline")
        schemas: dict[str, RecordSchema] = {}
        for fname, f in raw.flows.items():
            schemas[fname] = self._schema(f.fields, ("flows", fname, "schema"), f"flow '{fname}'")

        producers: dict[str, str] = {}
        consumers: dict[str, list[str]] = {f: [] for f in raw.flows}
        for sname, s in raw.stages.items():
            where = ("stages", sname)
            if not s.inputs:
                raise self.fail(where, f"stage '{sname}' has no input flow; every stage reads at least one", "no-input")
            seen: set[str] = set()
            for inp in s.inputs:
                if inp.flow == STATE:
                    raise self.fail(where + ("inputs",), f"stage '{sname}': the state flow is read implicitly; declare it under 'state:', not as an input", "reserved-name")
                if inp.flow not in raw.flows:
                    raise self.fail(where + ("inputs",), f"stage '{sname}': unknown input flow '{inp.flow}' (declared flows: {', '.join(raw.flows)})", "unknown-flow")
                if inp.flow in seen:
                    raise self.fail(where + ("inputs",), f"stage '{sname}': input flow '{inp.flow}' is listed twice", "duplicate-input")
                seen.add(inp.flow)
                consumers[inp.flow].append(sname)
            for out in s.outputs:
                if out == STATE:
                    raise self.fail(where + ("outputs",), f"stage '{sname}': 'state' is written through out.state; declare it under 'state:', not as an output", "reserved-name")
                if (out in EMITTER_NAMES or out in EMITTER_PRIVATE) and not s.batch:
                    raise self.fail(where + ("outputs",), f"stage '{sname}': out.{out} is the translator's {out}, so an output flow "
                                    f"cannot be named '{out}' ({', '.join(sorted(EMITTER_NAMES))} and out's private names are taken); rename the flow", "reserved-name")
                if out not in raw.flows:
                    raise self.fail(where + ("outputs",), f"stage '{sname}': unknown output flow '{out}' (declared flows: {', '.join(raw.flows)})", "unknown-flow")
                if raw.flows[out].external:
                    raise self.fail(where + ("outputs",), f"stage '{sname}' writes flow '{out}', which is an external input (external: true); an external flow is fed from outside only", "external-produced")
                if out in producers:
                    raise self.fail(where + ("outputs",), f"flow '{out}' has two producers, stages '{producers[out]}' and '{sname}'; give each its own flow", "two-producers")
                producers[out] = sname
        for fname, f in raw.flows.items():
            if not f.external and fname not in producers and consumers[fname]:
                raise self.fail(("flows", fname), f"flow '{fname}' is read by stage '{consumers[fname][0]}' but no stage produces it; mark it 'external: true' if it is fed from outside", "no-producer")
            if not f.external and fname not in producers:
                raise self.fail(("flows", fname), f"flow '{fname}' is neither external nor written by any stage; list it under a stage's 'outputs', mark it 'external: true', or remove it", "no-producer")

        frames = self._frames(schemas, consumers)
        stages = {n: self._stage(n, s, schemas) for n, s in raw.stages.items()}
        flows = {n: FlowSpec(n, schemas[n], f.external, producers.get(n), tuple(consumers[n]), frames.get(n), **flow_source(n, f, schemas[n], n in frames, self.fail, self.base),
                             migrate=None if f.migrate is None else self._callable(f.migrate, ("flows", n, "migrate"), f"flow '{n}' migrate", (1, "migrate(old_record)")),
                             migrate_path=f.migrate) for n, f in raw.flows.items()}
        return PipelineSpec(raw.pipeline, self.path, raw.mode, flows, stages, _stage_order(stages, flows))

    def _schema(self, fields: dict[str, Any], where: tuple[str, ...], what: str) -> RecordSchema:
        if not fields:
            raise self.fail(where, f"{what}: the schema has no fields", "empty-schema")
        out: dict[str, FieldType] = {}
        defaults: dict[str, Any] = {}
        for name, t in fields.items():
            if name == DIFF:
                raise self.fail(where, f"{what}: field name '{DIFF}' is reserved: it is every record's multiplicity (+1 when absent, "
                                       "-1 a retraction); cbp adds it, a schema does not declare it", "reserved-name")
            if not _NAME.match(str(name)) or str(name).startswith("_"):
                raise self.fail(where, f"{what}: field name '{name}' must be an identifier not starting with '_'", "bad-name")
            try:
                out[name], has, value = field_definition(name, t)
            except ValueError as e:
                raise self.fail(where, f"{what}: field '{name}': {e}", "bad-type") from None
            if has:
                defaults[name] = value
        return RecordSchema(out, defaults)

    def _key_function(self, text: Optional[str], schema: RecordSchema, where: tuple[str, ...], what: str) -> Optional[KeyFunction]:
        if text is None:
            return None
        if is_import_path(text):
            return KeyFunction(text, fn=self._callable(text, where, what))
        if text not in schema.fields:
            raise self.fail(where, f"{what}: '{text}' is not a field of the flow (fields: {', '.join(schema.fields)}) nor an import path 'module:function'", "unknown-field")
        return KeyFunction(text, field=text)

    def _callable(self, text: str, where: tuple[str, ...], what: str, call: tuple[int, str] = (1, _KEY_CALL)) -> Callable[..., Any]:
        """Import ``module:function`` and check it can be called as cbp will call it.

        ``call`` is (number of positional arguments, how the call looks); a translator also gets ``out=``.
        """
        try:
            fn = resolve_callable(text, self.base)
        except ValueError as e:
            raise self.fail(where, f"{what}: {e}", "bad-import") from None
        nargs, shape = call
        if shape != _KEY_CALL and (inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn) or inspect.iscoroutinefunction(fn)):
            raise self.fail(where, f"{what} '{text}' is a generator or async function; cbp calls it as {shape} and uses what it "
                            + ("writes with out.<flow>.write(...)" if shape.startswith("translate") else "returns"), "bad-signature")
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            return fn  # a builtin or C function: nothing to check
        try:
            if shape.startswith("translate"):
                sig.bind(*range(nargs), out=None)
            else:
                sig.bind(*range(nargs))
        except TypeError as e:
            raise self.fail(where, f"{what} '{text}{sig}' cannot be called as {shape}: {e}", "bad-signature") from None
        return fn

    def _frames(self, schemas: dict[str, RecordSchema], consumers: dict[str, list[str]]) -> dict[str, FrameFunction]:
        frames: dict[str, FrameFunction] = {}
        declared: dict[str, tuple[str, Optional[str]]] = {}
        for sname, s in self.raw.stages.items():
            for inp in s.inputs:
                where = ("stages", sname, "inputs")
                prev = declared.get(inp.flow)
                if prev is not None and prev[1] != inp.frame_by:
                    raise self.fail(where, f"flow '{inp.flow}' is framed by '{prev[1] or 'prior (default)'}' in stage '{prev[0]}' but by '{inp.frame_by or 'prior (default)'}' in stage '{sname}'; framing belongs to the flow, give every reader the same frame_by", "frame-mismatch")
                declared[inp.flow] = (sname, inp.frame_by)
                if inp.frame_by is None:
                    continue
                if is_import_path(inp.frame_by):
                    frames[inp.flow] = FrameFunction(inp.frame_by, fn=self._callable(inp.frame_by, where, f"stage '{sname}' frame_by", (2, "frame_by(record, state)")))
                elif inp.frame_by in schemas[inp.flow].fields:
                    frames[inp.flow] = FrameFunction(inp.frame_by, field=inp.frame_by)
                else:
                    raise self.fail(where, f"stage '{sname}': frame_by '{inp.frame_by}' is not a field of flow '{inp.flow}' (fields: {', '.join(schemas[inp.flow].fields)}) nor an import path", "unknown-field")
        return frames

    def _stage(self, name: str, s: _RawStage, schemas: dict[str, RecordSchema]) -> StageSpec:
        where = ("stages", name)
        inputs = []
        for inp in s.inputs:
            schema = schemas[inp.flow]
            what = f"stage '{name}' input '{inp.flow}'"
            if inp.fields is not None:
                self._check_consumer_fields(name, inp.flow, inp.fields, schema, where + ("inputs",))
            route = KeyFunction(BROADCAST, fn=route_to_all) if inp.route_by == BROADCAST else \
                self._key_function(inp.route_by, schema, where + ("inputs",), what + " route_by")
            order = self._key_function(inp.order_by, schema, where + ("inputs",), what + " order_by")
            if order is not None and order.field is not None:
                ft = schema.fields[order.field]
                if ft.is_list or ft.scalar == "json":
                    raise self.fail(where + ("inputs",), f"{what} order_by: field '{order.field}' is of type '{ft}'; a field orders by its value only if it is a string, int, float or bool (nulls last); order by an import path 'module:function' instead", "bad-order-by")
            if s.state is not None and route is None:
                raise self.fail(where + ("inputs",), f"{what}: a stage with state must group its inputs; give route_by (a field or module:function), the default RouteByRcd gives every record its own group", "route-required")
            inputs.append(InputSpec(inp.flow, route, order, s.signed if inp.signed is None else inp.signed))
        if inputs and all(i.route_by is not None and i.route_by.text == BROADCAST for i in inputs) and (s.state is None or s.state.grouping == "inner"):
            raise self.fail(where + ("inputs",), f"stage '{name}': every input is routed to ALL, which reaches only keys called by other input, so no key would ever be called; route one input by key, or make the state grouping outer", "broadcast-nowhere")
        state_schema = self._schema(s.state.fields, where + ("state",), f"stage '{name}' state") if s.state else None
        if s.batch and s.state is None and all(i.route_by is None for i in inputs):
            raise self.fail(where + ("batch",), f"stage '{name}': a batch translator is called with groups of keys, but this stage has no keys (no state and no route_by: a record-wise stage); give its inputs a route_by or drop 'batch'", "batch-needs-keys")
        flows = ", ".join(i.flow for i in s.inputs)
        translator = self._callable(s.translator, where + ("translator",), f"stage '{name}' translator",
                                    (2 + len(s.inputs), f"translate(key, state, {flows}, out=...)"))
        if s.runnable in ("all", "any"):
            runnable = runnable_all if s.runnable == "all" else runnable_any
        else:
            runnable = self._callable(s.runnable, where + ("runnable",), f"stage '{name}' runnable", (2, "runnable(frames, state)"))
        self._check_params(s.params, where + ("params",), f"stage '{name}'")
        params = {**self.raw.params, **s.params}
        migrate = None
        if s.migrate is not None:
            if s.state is None:
                raise self.fail(where + ("migrate",), f"stage '{name}': 'migrate' turns old state rows into new ones; the stage has no state", "migrate-without-state")
            migrate = self._callable(s.migrate, where + ("migrate",), f"stage '{name}' migrate", (1, "migrate(old_row)"))
        return StageSpec(
            name, translator, s.translator, tuple(inputs), tuple(s.outputs), state_schema,
            s.state.grouping if s.state else "inner", s.partitions, runnable, s.runnable, params, s.timeout, s.batch,
            migrate, s.migrate, s.backfill, row_key_fields(self, s, inputs, state_schema, where) if s.state is not None else (),
            s.signed,
        )

    def _check_params(self, params: dict[str, Any], where: tuple[str, ...], what: str) -> None:
        """Params reach translators as JSON-like values: what JSON cannot hold as it is, is refused (``bad-params``)."""
        try:
            if json.loads(json.dumps(params, allow_nan=False)) != params:
                raise ValueError("a mapping key that is not a string")
        except (TypeError, ValueError) as e:
            raise self.fail(where, f"{what}: params must be plain YAML values: strings, finite numbers, "
                            f"booleans, null, lists and mappings with string keys ({e})", "bad-params") from None

    def _check_consumer_fields(self, stage: str, flow: str, fields: dict[str, str], schema: RecordSchema, where: tuple[str, ...]) -> None:
        producer = next((n for n, s in self.raw.stages.items() if flow in s.outputs), None)
        source = f"stage '{producer}' produces" if producer else "the flow declares"
        for fname, t in fields.items():
            if fname == DIFF:
                raise self.fail(where, f"stage '{stage}' input '{flow}': field name '{DIFF}' is reserved (every record carries it)", "reserved-name")
            try:
                want = parse_type(t)
            except ValueError as e:
                raise self.fail(where, f"stage '{stage}' input '{flow}': field '{fname}': {e}", "bad-type") from None
            have = schema.fields.get(fname)
            if have is None:
                raise self.fail(where, f"stage '{stage}' reads field '{fname}' of flow '{flow}', which {source} without it (fields: {', '.join(schema.fields)})", "unknown-field")
            if not want.accepts(have):
                raise self.fail(where, f"type mismatch on flow '{flow}' field '{fname}': stage '{stage}' reads it as {want} but {source} {have}", "type-mismatch")


def _stage_order(stages: dict[str, StageSpec], flows: dict[str, FlowSpec]) -> tuple[str, ...]:
    """Stages in dataflow order (a topological order ignoring back edges of cycles)."""
    order: list[str] = []
    seen: set[str] = set()

    def visit(name: str, stack: set[str]) -> None:
        if name in seen or name in stack:
            return
        stack.add(name)
        for inp in stages[name].inputs:
            prod = flows[inp.flow].producer
            if prod is not None and prod != name:
                visit(prod, stack)
        stack.discard(name)
        seen.add(name)
        order.append(name)

    for n in stages:
        visit(n, set())
    return tuple(order)
