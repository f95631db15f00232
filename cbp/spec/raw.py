"""The raw shape of a pipeline YAML file (pydantic models), each key with its meaning.

The loader (:mod:`cbp.spec`) validates a file against :class:`RawPipeline` and compiles it; the YAML
reference page (``docs/hooks.py``) is generated from these models and their ``description``\\ s.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .sources import RawSource

__all__ = ["MAX_TIMEOUT", "RawPipeline", "RawFlow", "RawStage", "RawInput", "RawState", "RawField", "RawSource"]

#: The longest time limit of a stage epoch, in seconds (a week): YAML ``timeout:`` and ``cbp run --epoch-timeout``.
MAX_TIMEOUT = 7 * 24 * 3600

_SCHEMA = (
    "field name -> type: a type string (`int`, `string?`, `list<float>`, see *field*) or the long form "
    "`{type: T, default: V}`"
)
_SIGNED = "the translator sums `_diff`; records other than +1 (retractions) reach this {what} only if true"
_MIGRATE = (
    "`module:function` that `cbp upgrade` calls with each stored {what} (a dict in the old schema) when the "
    "schema changes in a way cbp cannot make itself; returns the new {thing} or `None` (dropped). See "
    "[Changing a pipeline](../howto/changing-a-pipeline.md)"
)
_FREE = "free text"


class _Strict(BaseModel):  # strict: no bool for an int, no number for a string, no "4" for 4
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True, strict=True)


class RawField(_Strict):
    """A schema field in its long form, ``{type: T, default: V}`` (checked by :mod:`cbp.spec.fielddefs`)."""

    type: str = Field(description="the field's type, as in the short form `name: T`")
    default: Any = Field(
        default=None,
        description="the value stored rows written before the field existed get when "
        "`cbp upgrade` adds it; must fit the type (`null` only for a nullable one); without it, "
        "an added field must be nullable",
    )


class RawInput(_Strict):
    flow: str = Field(description="the input flow's name")
    route_by: str | None = Field(
        default=None,
        description="a field name, `module:function` giving a record's key "
        "(the translate call it goes to), or `ALL` (every key called in the epoch)",
    )
    order_by: str | None = Field(
        default=None, description="a field name or `module:function` ordering a key's records of this flow"
    )
    frame_by: str | None = Field(
        default=None,
        description="`module:function` grouping records into frames (increments become complete when a frame closes)",
    )
    fields: dict[str, str] | None = Field(
        default=None, alias="schema", description="a schema the stage expects of this input (a subset of the flow's)"
    )
    signed: bool | None = Field(
        default=None, description=_SIGNED.format(what="input") + " (unset: the stage's `signed`)"
    )


class RawState(_Strict):
    fields: dict[str, str | dict[str, Any]] = Field(
        alias="schema", description="the state record's fields (the key field included): " + _SCHEMA
    )
    grouping: Literal["inner", "outer"] = Field(
        default="inner",
        description="`inner` (only keys with new input are "
        "read and called) or `outer` (every stored key is called each epoch)",
    )
    row_key: str | list[str] | None = Field(
        default=None,
        description="a field or list of fields of the state schema: a key's state is then a set of rows "
        "by row key, read and written row by row (see [Keyed state](../howto/keyed-state.md))",
    )


class RawFlow(_Strict):
    fields: dict[str, str | dict[str, Any]] | None = Field(
        default=None,
        alias="schema",
        description=_SCHEMA + "; records are checked against it. Required, except for a flow with a `source:`: "
        "left out, it is the Delta table's own (read when the pipeline is loaded)",
    )
    external: bool = Field(
        default=False, description="`true` for an input you feed (`cbp feed`); otherwise a stage must produce it"
    )
    description: str | None = Field(default=None, description=_FREE)
    source: RawSource | None = Field(
        default=None,
        description="`{delta: URI}`: a Delta table (local path, `file:` "
        "or `s3://` URI, with change data feed) whose changes `cbp sync` lands on this "
        "external flow (see [Delta sources](../howto/delta-sources.md))",
    )
    key: list[str] | None = Field(
        default=None,
        description="the fields identifying a row: the flow is keyed, each "
        "record fed an upsert (or a delete with `_diff: -1`) of its key's current row",
    )
    sequence_by: str | None = Field(
        default=None,
        description="on a keyed flow, a field ordering a key's events: the greatest value wins (default: feed order)",
    )
    delete_when: str | None = Field(
        default=None, description="on a keyed flow, a `bool` field: a record with it true deletes its key's row"
    )
    migrate: str | None = Field(
        default=None, description=_MIGRATE.format(what="record of the flow's live increments", thing="record")
    )


class RawStage(_Strict):
    translator: str = Field(description="`module:function`, the module looked up beside the YAML first")
    inputs: list[RawInput] = Field(
        default=[],
        description="the flows the stage reads, each a name or a mapping with "
        "its RouteBy/OrderBy/FrameBy (see *input*)",
    )
    state: RawState | None = Field(
        default=None, description="the stage's state: its schema and grouping (see *state*); none for a stateless stage"
    )
    outputs: list[str] = Field(default=[], description="the flows the stage writes (`out.<flow>.write(...)`)")
    partitions: int = Field(
        default=4,
        ge=1,
        le=100_000,
        description="the stage's number of state partitions (the "
        "parallelism of its epochs); `cbp upgrade` repartitions",
    )
    runnable: str = Field(
        default="all",
        description="when the stage may run: `all` (every input has an increment), `any`, or `module:function`",
    )
    params: dict[str, Any] = Field(
        default={}, description="any mapping, handed to the translator as `out.params` (over the pipeline's `params`)"
    )
    description: str | None = Field(default=None, description=_FREE)
    timeout: float | None = Field(
        default=None,
        gt=0,
        le=MAX_TIMEOUT,
        description="seconds an epoch of this stage may take; a longer one is cancelled (`timeout`, exit 4)",
    )
    batch: bool = Field(
        default=False,
        description="a vectorised translator, called per batch of keys with Arrow "
        "tables (see [Vectorised translate](../guide/batch.md))",
    )
    migrate: str | None = Field(default=None, description=_MIGRATE.format(what="state row", thing="row"))
    backfill: bool = Field(
        default=False,
        description="a stage added (or re-added) by `cbp upgrade` "
        "first reads its input flows' whole consolidated contents (collected increments included, "
        "as `cbp plan` counts them), instead of starting from the next increments",
    )
    signed: bool = Field(
        default=False, description=_SIGNED.format(what="stage") + "; default false (an input's own `signed` wins)"
    )

    @field_validator("inputs", mode="before")
    @classmethod
    def _short_inputs(cls, v: Any) -> Any:
        return [{"flow": x} if isinstance(x, str) else x for x in v] if isinstance(v, list) else v


class RawPipeline(_Strict):
    pipeline: str = Field(description="the pipeline's name: its default home is `state/<name>` in the project")
    mode: Literal["direct", "blackbox"] = Field(
        default="direct",
        description="`direct` (state partition-pinned and "
        "indexed) or `blackbox` (state re-read and re-shuffled every epoch: "
        "the paper's baseline)",
    )
    description: str | None = Field(default=None, description=_FREE)
    params: dict[str, Any] = Field(
        default={},
        description="a mapping every stage's `out.params` starts from; a "
        "stage's own `params` override its keys for that stage",
    )
    flows: dict[str, RawFlow] = Field(description="the flows, by name (see *flow*)")
    stages: dict[str, RawStage] = Field(default={}, description="the stages, by name (see *stage*)")
    views: dict[str, str] = Field(
        default={},
        description="SQL views, by name: a Spark SQL `SELECT` over the pipeline's flows and other views, "
        "maintained incrementally as a flow of that name by stages cbp generates (see "
        "[SQL views](../howto/sql-views.md))",
    )
    sql: list[str] = Field(
        default=[],
        description="SQL files (paths relative to the YAML, inside its directory) of `CREATE [OR REFRESH] "
        "MATERIALIZED VIEW name AS SELECT ...;` statements (Spark Declarative Pipelines' form): each a view "
        "as under `views:`",
    )
