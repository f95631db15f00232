"""A small epoch's envelopes as Spark's shuffle hands them over, and a small epoch's one job that routes its
records with a RouteBy function and runs its partitions (:mod:`cbp.engine.driver.smallepoch`).

:func:`partitioned` deals envelopes to their partitions (by the hash of a copy's probe ``_r``, else of the
key text, as ``repartition(P, ...)`` does) and sorts each partition as the shuffle path's
``sortWithinPartitions`` does (by ``_h``, Spark's ``xxhash64`` of the key, then key and flow). The driver
calls it on the envelopes it routed; :func:`route_and_run`, the one task of a job, on the envelopes it
routed itself: the records of a RouteBy function (user code, which never runs in the driver), each run
once, as the routing job's one task would have run them, then every partition one after the other. That
saves the routing job of an epoch whose records fit one routing task: one Spark job an epoch, not two
(counted in ``tests/test_smallepoch.py``).

A task that finds the envelopes past ``cap`` bytes, or a key longer than :data:`SMALL_KEY_BYTES`, runs
no partition and yields one empty message: the driver then takes the shuffle path, as it does when the
routing job says so.

    >>> import pyarrow as pa
    >>> from types import SimpleNamespace
    >>> plan = SimpleNamespace(stage=SimpleNamespace(partitions=2))
    >>> flows, probes = pa.array([0, 0, 1, 0], pa.int32()), pa.nulls(4, pa.string())
    >>> env = pa.table({"_key": ['"d"', '"a"', '"d"', '"b"'], "_flow": flows, "_r": probes})
    >>> [t.column("_key").to_pylist() for t in partitioned(plan, env)]
    [['"b"', '"a"'], ['"d"', '"d"']]
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..common.sparkhash import partition_of, spark_xxhash64
from .arrowtasks import blobs
from .routing import COPY, COPY_HASH
from .translate import route_batches, time_limit

if TYPE_CHECKING:
    from .plan import GroupedTask, TaskPlan

__all__ = ["SMALL_KEY_BYTES", "routed_schema", "partitioned", "route_and_run", "route_and_run_batches"]

#: Longest key text (UTF-8 bytes) hashed here; an epoch with a longer one takes the shuffle (Spark hashes
#: it in the JVM; here it would cost a numpy pass per 4 bytes: a 20 MB URL took 77 s).
SMALL_KEY_BYTES = 4096


def routed_schema(plan: TaskPlan) -> pa.Schema:
    """The envelopes a grouped task gets, as the shuffle hands them over (``_r`` dropped, ``_h`` added)."""
    env = plan.envelope_schema()
    return pa.schema([f for f in env if f.name != "_r"] + [pa.field("_h", pa.int64())])


def partitioned(plan: TaskPlan, env: pa.Table) -> list[pa.Table] | None:
    """Each partition's envelopes as Spark's job would give them: partitioned by the hash of ``_r``
    (a copy's probe) or else the key text, ``_h`` added, sorted by ``_h``, key and flow; None when a
    key is longer than :data:`SMALL_KEY_BYTES`."""
    n = plan.stage.partitions
    if not env.num_rows:
        return [routed_schema(plan).empty_table() for _ in range(n)]
    key_col = env.column("_key").combine_chunks()
    copy = pc.starts_with(key_col, COPY).to_numpy(zero_copy_only=False)
    keys = key_col.filter(pa.array(~copy))
    if len(keys) and pc.max(pc.binary_length(keys)).as_py() > SMALL_KEY_BYTES:
        return None
    h = np.full(len(key_col), COPY_HASH, np.int64)
    h[~copy] = spark_xxhash64(keys.to_pylist())
    part = partition_of(pc.coalesce(env.column("_r").combine_chunks(), key_col), n)
    table = env.drop_columns(["_r"]).append_column("_h", pa.array(h, pa.int64()))
    out = []
    for p in range(n):
        rows = table.filter(pa.array(part == p))
        order = pc.sort_indices(
            rows, sort_keys=[("_h", "ascending"), ("_key", "ascending"), ("_flow", "ascending")]
        )  # stable, as Spark's is for these
        out.append(rows.take(order).combine_chunks())
    return out


def _routed(plan: TaskPlan, cap: int, have: pa.Table, work: list[tuple[int, int, bytes]]) -> pa.Table | None:
    """``have`` (the envelopes the driver routed) and those of ``work``'s records ``(input, the epoch whose
    bindings deliver its multicasts, Arrow IPC)``, routed here under the epoch's time limit; None past ``cap``."""
    batches = have.to_batches()
    size = have.nbytes
    with time_limit(plan):
        for i, made, data in work:
            for b in route_batches(plan, i, made, pa.ipc.open_stream(pa.py_buffer(data))):
                size += b.nbytes
                if size > cap:
                    return None
                batches.append(b)
    return pa.Table.from_batches(batches, schema=plan.envelope_schema())


def route_and_run(
    plan: TaskPlan, task: GroupedTask, cap: int, chunk: int, items: Iterator[tuple[bytes, list[tuple[int, int, bytes]]]]
) -> Iterator[bytes]:
    """The one task of a small epoch's job (module docstring): for each item ``(the driver's envelopes as
    Arrow IPC, the records to route)`` (one), ``task``'s result batches of every partition, in partition
    order (IPC bytes); one empty message, and no partition run, when the envelopes pass ``cap`` bytes or a
    key is too long to hash here. ``chunk``: envelopes per batch a partition's task gets, as from the shuffle."""
    for have, work in list(items):
        env = _routed(plan, cap, pa.ipc.open_stream(pa.py_buffer(have)).read_all(), work)
        parts = None if env is None else partitioned(plan, env)
        if parts is None:
            yield b""
            return
        routed = routed_schema(plan)
        for p, t in enumerate(parts):
            for rb in task(plan, iter(t.cast(routed).to_batches(max_chunksize=chunk)), p):
                yield rb.serialize().to_pybytes()


def route_and_run_batches(
    plan: TaskPlan,
    task: GroupedTask,
    cap: int,
    chunk: int,
    item: tuple[bytes, list[tuple[int, int, bytes]]],
    batches: Iterator[pa.RecordBatch],
) -> Iterator[pa.RecordBatch]:
    """:func:`route_and_run` as the ``mapInArrow`` function of ``spark.range(0, 1, 1, 1)`` (a Spark Connect
    session: no RDD), ``item`` sent with the function; its input read to the end first."""
    for _ in batches:  # a task that leaves input unread loses its Python worker on Connect
        pass
    yield from blobs(route_and_run(plan, task, cap, chunk, iter([item])))
