"""Building a stage epoch's :class:`~cbp.engine.task.plan.TaskPlan`, complete and frozen, in one
function (:func:`build_task_plan`), with the path its tasks take chosen once (:func:`choose_path`):

- the runner: record-wise, per key, per batch of keys (``batch: true``; keyed rows with
  ``row_key``), or columnar (a batch translator whose inputs are routed and ordered by fields,
  direct mode, inner grouping or no state, no multicast bindings, ``CBP_COLUMNAR`` not 0);
- the state partition: none, direct or black-box (the run's mode), keyed or not (``row_key``);
- the route: by the driver (direct mode, an increment of known size up to the small-epoch
  threshold: the pipeline's ``small_epoch_records``, else ``CBP_SMALL_EPOCH_RECORDS``, else
  :data:`~cbp.engine.driver.smallepoch.SMALL_RECORDS`), else Spark's shuffle;
- placed (direct mode on a cluster, ``CBP_PLACEMENT`` not 0) or local;
- on a Spark Connect session (a master ``sc://...``): never placed, never JVM-routed (DataFrame jobs only);
- bulk (:mod:`cbp.engine.driver.bulkjob`): a per-key stage in direct mode (keyed rows too) whose state
  is empty, whose increment is not small (or has at least :data:`BULK_RECORDS` records) and whose
  translator has a Spark SQL build that fits it (a view's GROUP BY or join step: :class:`BulkBuild`),
  ``CBP_BULK_BUILD`` not 0: Spark computes each
  key's state; a GROUP BY's seeds are written by Python per key, a join step's state rows and output
  records by Arrow tasks (:mod:`cbp.engine.task.bulkwrite`).

The settings the tasks need (state cache, index budget, scan fraction, fault) go into the plan
from the driver's :mod:`cbp.settings`: tasks do not read their own environment for them.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING, Any, Protocol

from ... import faults
from ... import settings as cbp_settings
from ...spec import StageSpec
from ...spec.schema import RecordSchema
from ...storage import Home
from ..common.sparkhash import partition_probes
from ..task.bipindex import StateMeta, choose_reads
from ..task.columnar import columnar_fits
from ..task.plan import EnginePath, TaskPlan
from .smallepoch import VIEW_TRANSLATORS, driver_run, small_records
from .taskmemory import budgets, capped

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["Tuning", "BulkBuild", "bulk_build_of", "choose_path", "build_task_plan", "BULK_RECORDS", "bulk_sized"]

#: A first build's epoch of at least this many records builds in bulk even when it is small (the
#: driver's route, per key in Python, costs about 100 microseconds a record; a bulk build's Spark jobs
#: a few seconds): Q18's customer-orders join (165,000 records) ran per key for 23 s at SF 0.1.
BULK_RECORDS = 20_000


def bulk_sized(small: bool, new_records: int | None) -> bool:
    """Whether an epoch of ``new_records`` records (``small``: the driver would route it) is large enough
    for a bulk build: not small, or at least :data:`BULK_RECORDS` records.

        >>> [bulk_sized(True, n) for n in (100, BULK_RECORDS - 1, BULK_RECORDS)], bulk_sized(False, None)
        ([False, False, True], True)
    """
    return not small or (new_records or 0) >= BULK_RECORDS


class BulkBuild(Protocol):
    """A translator's Spark SQL build of a stage epoch over empty state (its ``bulk_build`` attribute):
    :meth:`fits` says whether it covers the stage, :meth:`seed` gives one row per key (the key's whole
    state, computed by Spark), the stage that writes them (its translator and RouteBy) and their schema."""

    def fits(self, stage: StageSpec) -> bool: ...

    def seed(
        self, spark: SparkSession, stage: StageSpec, frames: list[DataFrame]
    ) -> tuple[DataFrame, StageSpec, RecordSchema]: ...


def bulk_build_of(stage: StageSpec) -> BulkBuild | None:
    """The stage's translator's :class:`BulkBuild` if it has one that fits the stage."""
    build: Any = getattr(stage.translator, "bulk_build", None)
    return build if build is not None and build.fits(stage) else None


class Tuning(Protocol):
    """The pipeline's tuning a plan takes (:class:`cbp.controller.live.Tuning`)."""

    @property
    def max_state_files(self) -> int: ...
    @property
    def state_row_group(self) -> int: ...
    @property
    def state_cache_mb(self) -> float | None: ...
    @property
    def state_scan_fraction(self) -> float | None: ...
    @property
    def small_epoch_records(self) -> int | None: ...
    @property
    def state_index_mb(self) -> float | None: ...


def choose_path(
    stage: StageSpec,
    mode: str,
    *,
    master: str,
    new_records: int | None = None,
    small_limit: int | None = None,
    bindings: bool = False,
    env: cbp_settings.Settings | None = None,
    state_empty: bool = False,
    timed: bool = False,
    faulted: bool = False,
) -> EnginePath:
    """The path of a stage epoch (see the module). ``master``: the Spark master's URL;
    ``new_records``: the records of its increments (None: not known); ``small_limit``: the
    pipeline's small-epoch threshold; ``bindings``: it reads multicast bindings; ``state_empty``: the
    stage's state table has no files (a first build); ``timed``: the epoch has a time limit; ``faulted``: a
    fault is injected (``CBP_FAULT``).

        >>> from cbp.settings import Settings
        >>> from types import SimpleNamespace as NS
        >>> st = NS(record_wise=False, batch=False, row_key=(), state_schema=object(), grouping="inner", inputs=[],
        ...         translator_path="cbp.views.run:translate")
        >>> str(choose_path(st, "direct", master="local[2]", new_records=10, env=Settings()))
        'per-key/direct/driver/local'
        >>> str(choose_path(st, "direct", master="spark://h:7077", new_records=None, env=Settings()))
        'per-key/direct/shuffle/placed'
        >>> choose_path(st, "direct", master="sc://h:15002", new_records=None, env=Settings()).connect
        True
        >>> [choose_path(st, "direct", master="local[2]", timed=t, env=Settings()).driver_run for t in (False, True)]
        [50000, None]
    """
    env = cbp_settings.current() if env is None else env
    keyed = bool(stage.row_key)
    if stage.state_schema is None:
        partition = "none"
    else:
        partition = ("keyed-" if keyed else "") + ("direct" if mode == "direct" else "blackbox")
    if stage.record_wise:
        runner = "record"
    elif not stage.batch:
        runner = "per-key"
    elif keyed:
        runner = "keyed-batch"
    elif columnar_fits(stage, mode, bindings=bindings, allowed=env.columnar):
        runner = "columnar"
    else:
        runner = "batch"
    limit = small_records(small_limit, env)
    small = mode == "direct" and not stage.record_wise and new_records is not None and new_records <= limit
    connect = master.startswith("sc://")  # a Spark Connect session: no preferred locations, no JVM-routed inputs
    placed = mode == "direct" and not stage.record_wise and not master.startswith("local") and env.placement
    bulk = (
        state_empty
        and env.bulk_build
        and runner == "per-key"
        and partition in ("direct", "keyed-direct")
        and bulk_sized(small, new_records)
        and not bindings
        and bulk_build_of(stage) is not None
    )
    # a SQL view's stage runs its routed partitions in this process (no user code; cbp.engine.driver.smallepoch)
    in_driver = (
        master.startswith("local") and not (timed or faulted) and stage.translator_path.startswith(VIEW_TRANSLATORS)
    )
    return EnginePath(
        runner,
        partition,
        "driver" if small else "shuffle",
        placed and not connect,
        env.jvm_routing and not connect,
        connect,
        bulk,
        driver_run=(driver_run(env) or None) if in_driver else None,  # 0: never
    )


def _scan_choices(stage: StageSpec, parts: dict[int, StateMeta], new_records: int, row_group: int) -> dict[int, float]:
    """Per partition, the driver's scan-or-index choice for a direct-mode epoch (:func:`choose_reads`)."""
    return {
        p: choose_reads(new_records, stage.partitions, sum(int(f.get("rows") or 0) for f in m.files), row_group)
        for p, m in parts.items()
    }


def build_task_plan(
    *,
    home: Home,
    stage: StageSpec,
    epoch: int,
    mode: str,
    out_schemas: dict[str, RecordSchema],
    out_incs: dict[str, int],
    out_frames: dict[str, str],
    input_schemas: list[RecordSchema],
    state_rel: str,
    parts: dict[int, StateMeta],
    tuning: Tuning,
    master: str,
    new_records: int = 0,
    records_known: bool = True,
    made_in: dict[str, int] | None = None,
    bindings: list[str] | None = None,
    timeout: float | None = None,
) -> TaskPlan:
    """The plan of one stage epoch's tasks, complete: its path, the tasks' settings, the driver's
    scan-or-index choice per partition, the partition probes and the deadline (``timeout`` s from now).
    ``new_records``: the records of its increments that are known (all of them if ``records_known``)."""
    env = cbp_settings.current()
    bindings = list(bindings or [])
    scan_fraction = tuning.state_scan_fraction
    if scan_fraction is None:
        scan_fraction = env.state_scan_fraction
    by_driver = mode == "direct" and scan_fraction is None  # else the tasks choose, by the fixed fraction
    scan_choice = _scan_choices(stage, parts, new_records, tuning.state_row_group) if by_driver else {}
    path = choose_path(
        stage,
        mode,
        master=master,
        new_records=new_records if records_known else None,
        small_limit=tuning.small_epoch_records,
        bindings=bool(bindings),
        env=env,
        state_empty=not any(m.files for m in parts.values()),
        timed=timeout is not None,
        faulted=faults.current() is not None,
    )
    budget = None if env.task_memory_mb is None else budgets(env.task_memory_mb)  # CBP_TASK_MEMORY_MB
    return TaskPlan(
        home=home,
        stage=stage,
        epoch=epoch,
        mode=mode,
        out_schemas=out_schemas,
        out_incs=out_incs,
        out_frames=out_frames,
        input_schemas=input_schemas,
        state_rel=state_rel,
        path=path,
        parts=parts,
        max_files=tuning.max_state_files,
        row_group=tuning.state_row_group,
        cache_mb=capped(
            tuning.state_cache_mb if tuning.state_cache_mb is not None else env.state_cache_mb,
            None if budget is None else budget.cache_mb,
        ),
        index_mb=capped(
            tuning.state_index_mb if tuning.state_index_mb is not None else env.state_index_mb,
            None if budget is None else budget.index_mb,
        ),
        scan_fraction=scan_fraction,
        scan_choice=scan_choice,
        fault=faults.current(),
        driver_pid=os.getpid(),
        deadline=None if timeout is None else time.time() + timeout,
        timeout=timeout,
        probes=list(partition_probes(stage.partitions)),
        bindings=bindings,
        made_in=dict(made_in or {}),
        new_records=new_records if records_known else None,
    )
