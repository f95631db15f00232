"""One strict loader for pipeline YAML files in ``flows/``.

:func:`load_spec` reads a file into frozen, validated objects and reports every mistake with
the file, the line, the stage or flow, and what is wrong, before any Spark job starts.

    >>> spec = load_spec("flows/url_count.yaml")
    >>> spec.stages["url_count"].inputs[0].flow
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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import ValidationError

from ..errors import SpecError
from ..model import ALL, EMITTER_NAMES, EMITTER_PRIVATE, runnable_all, runnable_any
from .fielddefs import field_definition
from .loader import load_yaml
from .messages import pydantic_messages
from .problems import Problems, combined
from .raw import MAX_TIMEOUT
from .raw import RawFlow as _RawFlow
from .raw import RawInput as _RawInput
from .raw import RawPipeline as _RawPipeline
from .raw import RawStage as _RawStage
from .raw import RawState as _RawState
from .resolve import is_import_path, resolve_callable
from .rowkey import row_key_fields
from .schema import DIFF, FieldType, RecordSchema, parse_type
from .sources import flow_source

__all__ = [
    "MAX_TIMEOUT",
    "load_spec",
    "load_yaml",
    "PipelineSpec",
    "StageSpec",
    "FlowSpec",
    "InputSpec",
    "KeyFunction",
    "FrameFunction",
]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}\Z")  # at most 100 characters: names become file and directory names
STATE = "state"
BROADCAST = "ALL"  # ``route_by: ALL``: every record of the input goes to every key called in the epoch


def route_to_all(record: dict[str, Any]) -> Any:
    """The RouteBy of ``route_by: ALL``."""
    return ALL


# ---------------------------------------------------------------- resolved objects
@dataclass(frozen=True)
class KeyFunction:
    """A RouteBy or OrderBy: a record field, or a user function of the record.

    As RouteBy, a function may return a list (or set) of keys to send the record to several groups.
    """

    text: str
    field: str | None = None
    fn: Callable[[dict[str, Any]], Any] | None = None

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
    field: str | None = None
    fn: Callable[[dict[str, Any], Any], tuple[Any, Any]] | None = None

    def __call__(self, record: dict[str, Any], state: Any) -> tuple[Any, Any]:
        if self.field is not None:
            return record[self.field], state
        return self.fn(record, state)  # type: ignore[misc]


@dataclass(frozen=True)
class FlowSpec:
    name: str
    schema: RecordSchema
    external: bool
    producer: str | None
    consumers: tuple[str, ...]
    frame_by: FrameFunction | None = None
    source: str | None = None  # the Delta table 'cbp sync' lands on this flow
    key: tuple[str, ...] = ()  # a keyed flow's key fields (cbp.controller.keyed)
    sequence_by: str | None = None
    delete_when: str | None = None
    migrate: Callable[..., Any] | None = None  # YAML 'migrate': old stored record -> new record or None (cbp upgrade)
    migrate_path: str | None = None


@dataclass(frozen=True)
class InputSpec:
    flow: str
    route_by: KeyFunction | None
    order_by: KeyFunction | None
    signed: bool = False  # the translator sums this input's _diff (YAML 'signed', per input or per stage)


@dataclass(frozen=True)
class StageSpec:
    name: str
    translator: Callable[..., Any]
    translator_path: str
    inputs: tuple[InputSpec, ...]
    outputs: tuple[str, ...]
    state_schema: RecordSchema | None
    grouping: str
    partitions: int
    runnable: Callable[..., Any]
    runnable_name: str
    params: dict[str, Any]
    timeout: float | None = None  # seconds an epoch of this stage may take (YAML 'timeout')
    batch: bool = False  # the translator is vectorised (YAML 'batch: true')
    migrate: Callable[..., Any] | None = None  # YAML 'migrate': old state row -> new row or None (cbp upgrade)
    migrate_path: str | None = None
    backfill: bool = False  # YAML 'backfill: true'
    row_key: tuple[
        str, ...
    ] = ()  # keyed rows: the state fields that name a row of a key (YAML 'state: {row_key: ...}')
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
            raise SpecError(
                self.path, f"unknown stage '{name}'; the pipeline has: {', '.join(self.stages)}", code="unknown-stage"
            )
        return self.stages[name]

    def flow(self, name: str) -> FlowSpec:
        if name not in self.flows:
            raise SpecError(
                self.path, f"unknown flow '{name}'; the pipeline has: {', '.join(self.flows)}", code="unknown-flow"
            )
        return self.flows[name]


# ---------------------------------------------------------------- loader
def load_spec(path: str | os.PathLike[str], text: str | None = None) -> PipelineSpec:
    """Read, validate and resolve a pipeline YAML file (or ``text`` as if it were that file); raise :class:`SpecError` on any mistake."""
    path = os.fspath(path)
    data, lines = load_yaml(path, text)
    if not isinstance(data, dict):
        raise SpecError(
            path, "line 1: the file must be a mapping with 'pipeline', 'flows' and 'stages'", code="invalid-spec"
        )
    try:
        raw = _RawPipeline.model_validate(data)
    except ValidationError as e:
        errors = [SpecError(path, m, code="invalid-spec") for m in pydantic_messages(e, lines)]
        raise combined(path, errors) from None
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
        """The pipeline; every mistake that does not follow from an earlier one is reported together."""
        raw, problems = self.raw, Problems(self.path)
        self._names(problems)
        with problems.check():
            self._check_params(raw.params, ("params",), "the pipeline")
        schemas: dict[str, RecordSchema] = {}
        for fname, f in raw.flows.items():
            with problems.check():
                schemas[fname] = self._schema(f.fields, ("flows", fname, "schema"), f"flow '{fname}'")
        producers, consumers, bad = self._structure(problems)
        if not bad:  # a stage refused above may be the producer a flow lacks
            for fname in raw.flows:
                with problems.check():
                    self._producer(fname, producers, consumers)
        frames: dict[str, FrameFunction] = {}
        if not bad and set(schemas) == set(raw.flows):
            with problems.check():
                frames = self._frames(schemas, consumers)
        stages: dict[str, StageSpec] = {}
        for n, s in raw.stages.items():
            if n not in bad and all(i.flow in schemas for i in s.inputs):
                with problems.check():
                    stages[n] = self._stage(n, s, schemas)
        flows: dict[str, FlowSpec] = {}
        for n, f in raw.flows.items():
            if n in schemas:
                with problems.check():
                    flows[n] = self._flow(n, f, schemas[n], producers, consumers, frames)
        problems.raise_any()
        return PipelineSpec(raw.pipeline, self.path, raw.mode, flows, stages, _stage_order(stages, flows))

    def _names(self, problems: Problems) -> None:
        """The pipeline's, flows' and stages' names, and that there are stages."""
        raw = self.raw
        if not _NAME.match(raw.pipeline):
            with problems.check():
                raise self.fail(
                    ("pipeline",),
                    f"pipeline name '{raw.pipeline:.120}' must be a plain identifier of at most 100 characters",
                    "bad-name",
                )
        for kind, names in (("flow", raw.flows), ("stage", raw.stages)):
            for n in names:
                if not _NAME.match(n):
                    with problems.check():
                        raise self.fail(
                            (kind + "s", n),
                            f"{kind} name '{n:.120}' must be a plain identifier (letters, digits, _; at most 100)",
                            "bad-name",
                        )
        with problems.check():
            if STATE in raw.flows:
                raise self.fail(
                    ("flows", STATE),
                    "'state' is reserved for each stage's state flow; rename the flow",
                    "reserved-name",
                )
        with problems.check():
            if not raw.stages:
                raise self.fail(("stages",), "the pipeline has no stages", "no-stages")

    def _structure(self, problems: Problems) -> tuple[dict[str, str], dict[str, list[str]], set[str]]:
        """Each stage's inputs and outputs: (producer of each flow, readers of each flow, the stages refused)."""
        producers: dict[str, str] = {}
        consumers: dict[str, list[str]] = {f: [] for f in self.raw.flows}
        bad: set[str] = set()
        for sname, s in self.raw.stages.items():
            with problems.check():
                bad.add(sname)
                self._stage_flows(sname, s, producers, consumers)
                bad.discard(sname)
        return producers, consumers, bad

    def _stage_flows(
        self, sname: str, s: _RawStage, producers: dict[str, str], consumers: dict[str, list[str]]
    ) -> None:
        raw, where = self.raw, ("stages", sname)
        if not s.inputs:
            raise self.fail(where, f"stage '{sname}' has no input flow; every stage reads at least one", "no-input")
        seen: set[str] = set()
        for inp in s.inputs:
            if inp.flow == STATE:
                raise self.fail(
                    where + ("inputs",),
                    f"stage '{sname}': the state flow is read implicitly; declare it under 'state:', not as an input",
                    "reserved-name",
                )
            if inp.flow not in raw.flows:
                raise self.fail(
                    where + ("inputs",),
                    f"stage '{sname}': unknown input flow '{inp.flow}' (declared flows: {', '.join(raw.flows)})",
                    "unknown-flow",
                )
            if inp.flow in seen:
                raise self.fail(
                    where + ("inputs",), f"stage '{sname}': input flow '{inp.flow}' is listed twice", "duplicate-input"
                )
            seen.add(inp.flow)
            consumers[inp.flow].append(sname)
        for out in s.outputs:
            if out == STATE:
                raise self.fail(
                    where + ("outputs",),
                    f"stage '{sname}': 'state' is written through out.state; declare it under 'state:', not as an output",
                    "reserved-name",
                )
            if (out in EMITTER_NAMES or out in EMITTER_PRIVATE) and not s.batch:
                raise self.fail(
                    where + ("outputs",),
                    f"stage '{sname}': out.{out} is the translator's {out}, so an output flow "
                    f"cannot be named '{out}' ({', '.join(sorted(EMITTER_NAMES))} and out's private names are taken); rename the flow",
                    "reserved-name",
                )
            if out not in raw.flows:
                raise self.fail(
                    where + ("outputs",),
                    f"stage '{sname}': unknown output flow '{out}' (declared flows: {', '.join(raw.flows)})",
                    "unknown-flow",
                )
            if raw.flows[out].external:
                raise self.fail(
                    where + ("outputs",),
                    f"stage '{sname}' writes flow '{out}', which is an external input (external: true); an external flow is fed from outside only",
                    "external-produced",
                )
            if out in producers:
                raise self.fail(
                    where + ("outputs",),
                    f"flow '{out}' has two producers, stages '{producers[out]}' and '{sname}'; give each its own flow",
                    "two-producers",
                )
            producers[out] = sname

    def _producer(self, fname: str, producers: dict[str, str], consumers: dict[str, list[str]]) -> None:
        """A flow that is not external has a producer."""
        if self.raw.flows[fname].external or fname in producers:
            return
        if consumers[fname]:
            raise self.fail(
                ("flows", fname),
                f"flow '{fname}' is read by stage '{consumers[fname][0]}' but no stage produces it; mark it 'external: true' if it is fed from outside",
                "no-producer",
            )
        raise self.fail(
            ("flows", fname),
            f"flow '{fname}' is neither external nor written by any stage; list it under a stage's 'outputs', mark it 'external: true', or remove it",
            "no-producer",
        )

    def _flow(
        self,
        n: str,
        f: _RawFlow,
        schema: RecordSchema,
        producers: dict[str, str],
        consumers: dict[str, list[str]],
        frames: dict[str, FrameFunction],
    ) -> FlowSpec:
        migrate = (
            None
            if f.migrate is None
            else self._callable(f.migrate, ("flows", n, "migrate"), f"flow '{n}' migrate", (1, "migrate(old_record)"))
        )
        return FlowSpec(
            n,
            schema,
            f.external,
            producers.get(n),
            tuple(consumers[n]),
            frames.get(n),
            **flow_source(n, f, schema, n in frames, self.fail, self.base),
            migrate=migrate,
            migrate_path=f.migrate,
        )

    def _schema(self, fields: dict[str, Any], where: tuple[str, ...], what: str) -> RecordSchema:
        if not fields:
            raise self.fail(where, f"{what}: the schema has no fields", "empty-schema")
        out: dict[str, FieldType] = {}
        defaults: dict[str, Any] = {}
        for name, t in fields.items():
            if name == DIFF:
                raise self.fail(
                    where,
                    f"{what}: field name '{DIFF}' is reserved: it is every record's multiplicity (+1 when absent, "
                    "-1 a retraction); cbp adds it, a schema does not declare it",
                    "reserved-name",
                )
            if not _NAME.match(str(name)) or str(name).startswith("_"):
                raise self.fail(
                    where, f"{what}: field name '{name}' must be an identifier not starting with '_'", "bad-name"
                )
            try:
                out[name], has, value = field_definition(name, t)
            except ValueError as e:
                raise self.fail(where, f"{what}: field '{name}': {e}", "bad-type") from None
            if has:
                defaults[name] = value
        return RecordSchema(out, defaults)

    def _key_function(
        self, text: str | None, schema: RecordSchema, where: tuple[str, ...], what: str
    ) -> KeyFunction | None:
        if text is None:
            return None
        if is_import_path(text):
            return KeyFunction(text, fn=self._callable(text, where, what))
        if text not in schema.fields:
            raise self.fail(
                where,
                f"{what}: '{text}' is not a field of the flow (fields: {', '.join(schema.fields)}) nor an import path 'module:function'",
                "unknown-field",
            )
        return KeyFunction(text, field=text)

    def _callable(
        self, text: str, where: tuple[str, ...], what: str, call: tuple[int, str] = (1, _KEY_CALL)
    ) -> Callable[..., Any]:
        """Import ``module:function`` and check it can be called as cbp will call it.

        ``call`` is (number of positional arguments, how the call looks); a translator also gets ``out=``.
        """
        try:
            fn = resolve_callable(text, self.base)
        except ValueError as e:
            raise self.fail(where, f"{what}: {e}", "bad-import") from None
        nargs, shape = call
        if shape != _KEY_CALL and (
            inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn) or inspect.iscoroutinefunction(fn)
        ):
            raise self.fail(
                where,
                f"{what} '{text}' is a generator or async function; cbp calls it as {shape} and uses what it "
                + ("writes with out.<flow>.write(...)" if shape.startswith("translate") else "returns"),
                "bad-signature",
            )
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
        declared: dict[str, tuple[str, str | None]] = {}
        for sname, s in self.raw.stages.items():
            for inp in s.inputs:
                where = ("stages", sname, "inputs")
                prev = declared.get(inp.flow)
                if prev is not None and prev[1] != inp.frame_by:
                    raise self.fail(
                        where,
                        f"flow '{inp.flow}' is framed by '{prev[1] or 'prior (default)'}' in stage '{prev[0]}' but by '{inp.frame_by or 'prior (default)'}' in stage '{sname}'; framing belongs to the flow, give every reader the same frame_by",
                        "frame-mismatch",
                    )
                declared[inp.flow] = (sname, inp.frame_by)
                if inp.frame_by is None:
                    continue
                if is_import_path(inp.frame_by):
                    frames[inp.flow] = FrameFunction(
                        inp.frame_by,
                        fn=self._callable(
                            inp.frame_by, where, f"stage '{sname}' frame_by", (2, "frame_by(record, state)")
                        ),
                    )
                elif inp.frame_by in schemas[inp.flow].fields:
                    frames[inp.flow] = FrameFunction(inp.frame_by, field=inp.frame_by)
                else:
                    raise self.fail(
                        where,
                        f"stage '{sname}': frame_by '{inp.frame_by}' is not a field of flow '{inp.flow}' (fields: {', '.join(schemas[inp.flow].fields)}) nor an import path",
                        "unknown-field",
                    )
        return frames

    def _stage(self, name: str, s: _RawStage, schemas: dict[str, RecordSchema]) -> StageSpec:
        where = ("stages", name)
        inputs = []
        for inp in s.inputs:
            schema = schemas[inp.flow]
            what = f"stage '{name}' input '{inp.flow}'"
            if inp.fields is not None:
                self._check_consumer_fields(name, inp.flow, inp.fields, schema, where + ("inputs",))
            route = (
                KeyFunction(BROADCAST, fn=route_to_all)
                if inp.route_by == BROADCAST
                else self._key_function(inp.route_by, schema, where + ("inputs",), what + " route_by")
            )
            order = self._key_function(inp.order_by, schema, where + ("inputs",), what + " order_by")
            if order is not None and order.field is not None:
                ft = schema.fields[order.field]
                if ft.is_list or ft.scalar == "json":
                    raise self.fail(
                        where + ("inputs",),
                        f"{what} order_by: field '{order.field}' is of type '{ft}'; a field orders by its value only if it is a string, int, float or bool (nulls last); order by an import path 'module:function' instead",
                        "bad-order-by",
                    )
            if s.state is not None and route is None:
                raise self.fail(
                    where + ("inputs",),
                    f"{what}: a stage with state must group its inputs; give route_by (a field or module:function), the default RouteByRcd gives every record its own group",
                    "route-required",
                )
            inputs.append(InputSpec(inp.flow, route, order, s.signed if inp.signed is None else inp.signed))
        if (
            inputs
            and all(i.route_by is not None and i.route_by.text == BROADCAST for i in inputs)
            and (s.state is None or s.state.grouping == "inner")
        ):
            raise self.fail(
                where + ("inputs",),
                f"stage '{name}': every input is routed to ALL, which reaches only keys called by other input, so no key would ever be called; route one input by key, or make the state grouping outer",
                "broadcast-nowhere",
            )
        state_schema = self._schema(s.state.fields, where + ("state",), f"stage '{name}' state") if s.state else None
        if s.batch and s.state is None and all(i.route_by is None for i in inputs):
            raise self.fail(
                where + ("batch",),
                f"stage '{name}': a batch translator is called with groups of keys, but this stage has no keys (no state and no route_by: a record-wise stage); give its inputs a route_by or drop 'batch'",
                "batch-needs-keys",
            )
        flows = ", ".join(i.flow for i in s.inputs)
        translator = self._callable(
            s.translator,
            where + ("translator",),
            f"stage '{name}' translator",
            (2 + len(s.inputs), f"translate(key, state, {flows}, out=...)"),
        )
        if s.runnable in ("all", "any"):
            runnable = runnable_all if s.runnable == "all" else runnable_any
        else:
            runnable = self._callable(
                s.runnable, where + ("runnable",), f"stage '{name}' runnable", (2, "runnable(frames, state)")
            )
        self._check_params(s.params, where + ("params",), f"stage '{name}'")
        params = {**self.raw.params, **s.params}
        migrate = None
        if s.migrate is not None:
            if s.state is None:
                raise self.fail(
                    where + ("migrate",),
                    f"stage '{name}': 'migrate' turns old state rows into new ones; the stage has no state",
                    "migrate-without-state",
                )
            migrate = self._callable(
                s.migrate, where + ("migrate",), f"stage '{name}' migrate", (1, "migrate(old_row)")
            )
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
            params,
            s.timeout,
            s.batch,
            migrate,
            s.migrate,
            s.backfill,
            row_key_fields(self, s, inputs, state_schema, where) if s.state is not None else (),
            s.signed,
        )

    def _check_params(self, params: dict[str, Any], where: tuple[str, ...], what: str) -> None:
        """Params reach translators as JSON-like values: what JSON cannot hold as it is, is refused (``bad-params``)."""
        try:
            if json.loads(json.dumps(params, allow_nan=False)) != params:
                raise ValueError("a mapping key that is not a string")
        except (TypeError, ValueError) as e:
            raise self.fail(
                where,
                f"{what}: params must be plain YAML values: strings, finite numbers, "
                f"booleans, null, lists and mappings with string keys ({e})",
                "bad-params",
            ) from None

    def _check_consumer_fields(
        self, stage: str, flow: str, fields: dict[str, str], schema: RecordSchema, where: tuple[str, ...]
    ) -> None:
        producer = next((n for n, s in self.raw.stages.items() if flow in s.outputs), None)
        source = f"stage '{producer}' produces" if producer else "the flow declares"
        for fname, t in fields.items():
            if fname == DIFF:
                raise self.fail(
                    where,
                    f"stage '{stage}' input '{flow}': field name '{DIFF}' is reserved (every record carries it)",
                    "reserved-name",
                )
            try:
                want = parse_type(t)
            except ValueError as e:
                raise self.fail(where, f"stage '{stage}' input '{flow}': field '{fname}': {e}", "bad-type") from None
            have = schema.fields.get(fname)
            if have is None:
                raise self.fail(
                    where,
                    f"stage '{stage}' reads field '{fname}' of flow '{flow}', which {source} without it (fields: {', '.join(schema.fields)})",
                    "unknown-field",
                )
            if not want.accepts(have):
                raise self.fail(
                    where,
                    f"type mismatch on flow '{flow}' field '{fname}': stage '{stage}' reads it as {want} but {source} {have}",
                    "type-mismatch",
                )


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
