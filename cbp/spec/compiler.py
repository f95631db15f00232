"""A pipeline YAML's validated keys compiled into a :class:`~cbp.spec.objects.PipelineSpec`: names,
the flows each stage reads and writes, producers, framing, flows and stages (:mod:`.stages`); every
mistake that does not follow from another is reported together (:mod:`.problems`)."""

from __future__ import annotations

from ..model import EMITTER_NAMES, EMITTER_PRIVATE
from .context import _NAME, Context
from .objects import STATE, FlowSpec, FrameFunction, PipelineSpec, StageSpec
from .problems import Problems
from .raw import RawFlow, RawStage
from .resolve import is_import_path
from .schema import RecordSchema
from .sources import flow_source, source_fields
from .stages import compile_stage
from .typedvalues import is_typed


class Compiler(Context):
    """Compiles the pipeline (:meth:`compile`) with the checks of its :class:`Context`."""

    def compile(self) -> PipelineSpec:
        """The pipeline; every mistake that does not follow from an earlier one is reported together."""
        raw, problems = self.raw, Problems(self.path)
        self._names(problems)
        with problems.check():
            self.check_params(raw.params, ("params",), "the pipeline")
        schemas: dict[str, RecordSchema] = {}
        for fname, f in raw.flows.items():
            with problems.check():
                fields = f.fields if f.fields is not None else source_fields(fname, f, self.fail, self.base)
                schemas[fname] = self.schema(fields, ("flows", fname, "schema"), f"flow '{fname}'")
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
                    stages[n] = compile_stage(self, n, s, schemas)
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

    def _stage_flows(self, sname: str, s: RawStage, producers: dict[str, str], consumers: dict[str, list[str]]) -> None:
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
                    f"stage '{sname}': 'state' is written through out.state; declare it under 'state:', not as an "
                    f"output",
                    "reserved-name",
                )
            if (out in EMITTER_NAMES or out in EMITTER_PRIVATE) and not s.batch:
                raise self.fail(
                    where + ("outputs",),
                    f"stage '{sname}': out.{out} is the translator's {out}, so an output flow "
                    f"cannot be named '{out}' ({', '.join(sorted(EMITTER_NAMES))} and out's private names are taken); "
                    f"rename the flow",
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
                    f"stage '{sname}' writes flow '{out}', which is an external input (external: true); an external "
                    f"flow is fed from outside only",
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
                f"flow '{fname}' is read by stage '{consumers[fname][0]}' but no stage produces it; mark it 'external: "
                f"true' if it is fed from outside",
                "no-producer",
            )
        raise self.fail(
            ("flows", fname),
            f"flow '{fname}' is neither external nor written by any stage; list it under a stage's 'outputs', mark it "
            f"'external: true', or remove it",
            "no-producer",
        )

    def _flow(
        self,
        n: str,
        f: RawFlow,
        schema: RecordSchema,
        producers: dict[str, str],
        consumers: dict[str, list[str]],
        frames: dict[str, FrameFunction],
    ) -> FlowSpec:
        migrate = (
            None
            if f.migrate is None
            else self.resolve(f.migrate, ("flows", n, "migrate"), f"flow '{n}' migrate", (1, "migrate(old_record)"))
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
                        f"flow '{inp.flow}' is framed by '{prev[1] or 'prior (default)'}' in stage '{prev[0]}' but by "
                        f"'{inp.frame_by or 'prior (default)'}' in stage '{sname}'; framing belongs to the flow, give "
                        f"every reader the same frame_by",
                        "frame-mismatch",
                    )
                declared[inp.flow] = (sname, inp.frame_by)
                if inp.frame_by is None:
                    continue
                if is_import_path(inp.frame_by):
                    frames[inp.flow] = FrameFunction(
                        inp.frame_by,
                        fn=self.resolve(
                            inp.frame_by, where, f"stage '{sname}' frame_by", (2, "frame_by(record, state)")
                        ),
                    )
                elif inp.frame_by in schemas[inp.flow].fields:
                    ft = schemas[inp.flow].fields[inp.frame_by]
                    if is_typed(ft.scalar):  # framing keys are stored as JSON, which has no date, decimal ...
                        raise self.fail(
                            where,
                            f"stage '{sname}': frame_by '{inp.frame_by}' is of type '{ft}'; a framing field is a "
                            "string, int, float, bool, json or list; frame by an import path 'module:function' "
                            "that returns, e.g., the value's ISO text",
                            "bad-frame-by",
                        )
                    frames[inp.flow] = FrameFunction(inp.frame_by, field=inp.frame_by)
                else:
                    raise self.fail(
                        where,
                        f"stage '{sname}': frame_by '{inp.frame_by}' is not a field of flow '{inp.flow}' (fields: "
                        f"{', '.join(schemas[inp.flow].fields)}) nor an import path",
                        "unknown-field",
                    )
        return frames


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
