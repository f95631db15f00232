"""The plan of a stage epoch's tasks (:class:`TaskPlan`, pickled to the executors), the path its
tasks take (:class:`EnginePath`) and a task's phase clock: the bottom of
:mod:`cbp.engine.task.translate`, imported by every module that reads a plan.

A plan is frozen: it is built complete, path and settings included, by one function in the driver
(:func:`cbp.engine.driver.taskplan.build_task_plan`), and no field is set after that.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import pyarrow as pa

from ...spec import StageSpec
from ...spec.schema import RecordSchema
from ...storage import Home
from .bipindex import ROW_GROUP, StateMeta
from .routing import elided_fields, envelope_schema

__all__ = ["TaskPlan", "EnginePath", "GroupedTask", "RUNNERS", "PARTITIONS", "ROUTES"]

#: How a task calls the translator (:mod:`cbp.engine.task.translators`): once per record (a
#: record-wise stage), once per key, per batch of keys (keyed rows too), or over Arrow columns.
RUNNERS = ("record", "per-key", "batch", "keyed-batch", "columnar")
#: The task's state partition (:mod:`cbp.engine.task.partition`).
PARTITIONS = ("none", "direct", "blackbox", "keyed-direct", "keyed-blackbox")
#: How the new input reaches the tasks: routed by the driver (a small epoch,
#: :mod:`cbp.engine.driver.smallepoch`) or through Spark's shuffle.
ROUTES = ("driver", "shuffle")


@dataclass(frozen=True)
class EnginePath:
    """The path a stage epoch takes through the engine, chosen once when its plan is built
    (:func:`cbp.engine.driver.taskplan.choose_path`).

    ``route`` ``driver`` is where the driver tries first: it still takes the shuffle when the
    increment's files or envelopes are over its byte limits (:func:`cbp.engine.driver.smallepoch.driver_routed`).
    """

    runner: str = "per-key"
    partition: str = "none"
    route: str = "shuffle"
    placed: bool = False  # partition p runs on the executor that ran it last epoch (a cluster, direct mode)
    jvm_routing: bool = True  # inputs routed by a plain field get their envelopes from Spark SQL
    connect: bool = False  # a Spark Connect session: DataFrame jobs only (cbp.engine.driver.smallepoch)
    #: empty state, inputs computed by the translator's Spark SQL build (cbp.engine.driver.bulkjob)
    bulk: bool = False
    #: envelopes up to which the routed partitions run in the driver process, no Spark job (None: never): a
    #: SQL view's stage in local mode with no time limit or fault to enforce (cbp.engine.driver.smallepoch)
    driver_run: int | None = None

    def __post_init__(self) -> None:
        assert self.runner in RUNNERS and self.partition in PARTITIONS and self.route in ROUTES, self

    def __str__(self) -> str:
        where = f"{self.runner}/{self.partition}/{self.route}/{'placed' if self.placed else 'local'}"
        return where + ("/bulk" if self.bulk else "")


@dataclass(frozen=True)
class TaskPlan:
    """Everything a task of one stage epoch needs (pickled to the executors); frozen."""

    home: Home
    stage: StageSpec
    epoch: int
    mode: str
    out_schemas: dict[str, RecordSchema]
    out_incs: dict[str, int]
    out_frames: dict[str, str]  # output flows framed by a field: that field (cbp.engine.task.framing)
    input_schemas: list[RecordSchema]
    state_rel: str
    path: EnginePath = EnginePath()
    parts: dict[int, StateMeta] = field(default_factory=dict)
    max_files: int = 8
    row_group: int = ROW_GROUP
    #: the worker's state cache budget (cbp.engine.task.bipindex.CACHE_MB when None)
    cache_mb: float | None = None
    #: the worker's partition index budget (cbp.engine.task.indexpages.INDEX_MB when None)
    index_mb: float | None = None
    #: the state scan rule's threshold (cbp.engine.task.bipindex.SCAN_FRACTION when None)
    scan_fraction: float | None = None
    #: per partition: the driver's scan (0) or index (2) choice
    scan_choice: dict[int, float] = field(default_factory=dict)
    fault: str | None = None  # CBP_FAULT of the driver (crash tests, see cbp.faults)
    driver_pid: int = 0
    deadline: float | None = None  # wall-clock time (time.time()) the epoch must end by
    timeout: float | None = None  # the limit that set it, in seconds (for messages)
    write_rows: int = 4096  # output records a task buffers before appending them to its file
    #: per partition, a string Spark hashes into it (cbp.engine.task.routing)
    probes: list[str] = field(default_factory=list)
    #: URIs of the bindings files the epoch reads (named by the epoch that made them)
    bindings: list[str] = field(default_factory=list)
    #: input file URI -> the epoch of this stage that wrote it (loopback flows)
    made_in: dict[str, int] = field(default_factory=dict)
    new_records: int | None = None  # records of the increments the epoch reads (None: not known)

    @property
    def elided(self) -> dict[int, str]:
        """The inputs whose RouteBy field crosses the shuffle as the key only
        (:func:`cbp.engine.task.routing.elided_fields`)."""
        return elided_fields(
            [i.route_by.field if i.route_by is not None else None for i in self.stage.inputs], self.input_schemas
        )

    def envelope_schema(self) -> pa.Schema:
        """The envelopes of this stage epoch (:func:`cbp.engine.task.routing.envelope_schema`)."""
        return envelope_schema(
            self.input_schemas, self.stage.state_schema if self.mode == "blackbox" else None, self.elided
        )

    def where(self, key: Any = None) -> str:
        s = f"stage '{self.stage.name}' epoch {self.epoch}"
        return s if key is None else f"{s} key {key!r}"


class GroupedTask(Protocol):
    """A grouped task's entry point (:func:`cbp.engine.task.translate.grouped_task`): partition
    ``part`` (else the Spark task's) of a stage epoch, its envelopes in, its result batches out."""

    def __call__(
        self, plan: TaskPlan, batches: Iterable[pa.RecordBatch], part: int | None = None
    ) -> Iterator[pa.RecordBatch]: ...


class _Clock:
    """Seconds spent in each phase of a task (reported in the task's stats)."""

    def __init__(self) -> None:
        self.laps: dict[str, float] = {}
        self._t = time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(self.laps.get(name, 0.0) + now - self._t, 4)
        self._t = now
