"""The frozen objects a pipeline YAML compiles to: :class:`PipelineSpec` with its flows
(:class:`FlowSpec`) and stages (:class:`StageSpec`, :class:`InputSpec`), and the user functions a stage
routes, orders and frames records with (:class:`KeyFunction`, :class:`FrameFunction`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import SpecError
from ..model import ALL
from .schema import RecordSchema

STATE = "state"
BROADCAST = "ALL"  # ``route_by: ALL``: every record of the input goes to every key called in the epoch


def route_to_all(record: dict[str, Any]) -> Any:
    """The RouteBy of ``route_by: ALL``."""
    return ALL


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
