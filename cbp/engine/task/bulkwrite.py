"""The tasks of a bulk build that writes its own files (a view's join step, :mod:`cbp.views.joinbulk`,
or GROUP BY, :mod:`cbp.views.groupbulk`: :func:`write_rows`;
run by :func:`cbp.engine.driver.bulkjob.written`): a state partition's rows, computed by Spark, written
as Arrow batches into one state file and its index (:func:`write_state`), and output records written
as one file of the epoch's output increment (:func:`write_output`); each yields its result as a
grouped epoch's task does (:func:`cbp.engine.common.protocol.result_batch`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

if TYPE_CHECKING:
    from .plan import TaskPlan

__all__ = ["write_state", "write_output", "write_rows"]


def _table(batches: Iterator[pa.RecordBatch]) -> pa.Table | None:
    got = [b for b in batches if b.num_rows]  # every batch read: a task that leaves input unread loses its worker
    return pa.Table.from_batches(got) if got else None


def write_state(plan: TaskPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Task of state partition ``q`` (its rows, all of partition ``q``, in Spark partition ``q``): one
    state file and its index; its result."""
    from pyspark import TaskContext

    from ..common.protocol import TaskResult, result_batch
    from .partindex import PartitionIndex
    from .statepart import StateWriter

    start = time.perf_counter()
    t = _table(batches)
    if t is None:
        return
    ctx = TaskContext.get()
    qs = pc.unique(t["_q"]).to_pylist()
    if len(qs) != 1 or (ctx is not None and qs[0] != ctx.partitionId()):
        raise RuntimeError(f"cbp bulk join: a task got rows of state partitions {sorted(qs)}")
    q = int(qs[0])
    order = [(c, "ascending") for c in ("_h", "_key", "_rk") if c in t.column_names]  # _rk: keyed rows only
    t = t.take(pc.sort_indices(t, sort_keys=order))
    w = StateWriter(plan, q, prefix=f"e{plan.epoch:08d}", keep=False)
    meta = {
        "_epoch": pa.array(np.full(t.num_rows, plan.epoch, np.int64)),
        "_alive": pa.array(np.ones(t.num_rows, bool)),
    }
    cols = [meta[f.name] if f.name in meta else t[f.name].cast(f.type) for f in w.schema]
    w.write_table(pa.table(cols, schema=w.schema))
    add, h, g = w.close()
    assert add is not None
    index_rel = f"stages/{plan.stage.name}/index/_part={q}/e{plan.epoch:08d}-{uuid.uuid4().hex[:12]}.parquet"
    PartitionIndex(h, np.zeros(h.size, np.int32), g, [add["path"]]).save(plan.home, index_rel)
    keys = len(pc.unique(t["_key"]))
    stats = {"in": t.num_rows, "state_read": 0, "state_written": keys, "live_keys": keys, "files": 1}
    stats["seconds"] = {"bulk": time.perf_counter() - start}  # "in": the state rows (each side's distinct rows)
    yield result_batch(TaskResult(part=q, index=index_rel, state_adds=[add], stats=stats))


def write_output(plan: TaskPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Task of some joined rows: written as one file of the epoch's output increment; its result."""
    from pyspark import TaskContext

    from ...storage import LAYOUT
    from ..common.protocol import TaskResult, result_batch
    from .sinks import ParquetSink

    flow = plan.stage.outputs[0]
    schema = plan.out_schemas[flow].signed().arrow
    ctx = TaskContext.get()
    part = ctx.partitionId() if ctx is not None else 0
    prefix = LAYOUT.output_prefix(plan.stage.name, plan.epoch) + f"-b{part:05d}"
    sink = ParquetSink(plan.home, LAYOUT.increment_dir(flow, plan.out_incs[flow]), prefix, schema, plan.out_incs[flow])
    for b in batches:
        if b.num_rows:
            t = pa.Table.from_batches([b])
            sink.write(pa.table([t[f.name].cast(f.type) for f in schema], schema=schema))
    add = sink.close()
    if add is None:
        return
    add["path"] = add.pop("rel")[len(LAYOUT.flow(flow)) + 1 :]
    yield result_batch(
        TaskResult(
            part=part,
            outputs={flow: [add]},
            stats={"in": 0, "state_read": 0, "state_written": 0, "out": {flow: add["rows"]}},
        )
    )


def write_rows(plan: TaskPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Task of state partition ``q`` of a GROUP BY (:func:`cbp.views.groupbulk.group_rows`: a row per group):
    the state rows of those marked ``_st`` (:func:`write_state`) and the view rows of those marked ``_out``
    (:func:`write_output`, the view's column ``c`` in ``o__c``); their results."""
    t = _table(batches)
    if t is None:
        return
    state = t.filter(t["_st"])
    if state.num_rows:
        yield from write_state(plan, iter(state.to_batches()))
    shown = t.filter(t["_out"])
    if shown.num_rows:
        cols = [c for c in t.column_names if c.startswith("o__")]
        view = shown.select(cols).rename_columns([c[3:] for c in cols])
        view = view.append_column("_diff", pa.array(np.ones(view.num_rows, np.int64)))
        yield from write_output(plan, iter(view.to_batches()))
