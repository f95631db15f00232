"""The functions the driver ships to the executors around the task entry points of
:mod:`.translate`: a placed epoch's task (:mod:`cbp.engine.driver.locality`), reading a home's
files on an object store (:mod:`cbp.engine.driver.remote_read`), and the tasks of a small epoch
(:mod:`cbp.engine.driver.smallepoch`): routing slices of records, running the partitions the
driver routed, and in local mode claiming them (:func:`claim`)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pyarrow as pa
import pyarrow.parquet as pq

from ...storage import objectstore
from .plan import GroupedTask, TaskPlan
from .translate import route_batches, time_limit

__all__ = [
    "placed_task",
    "read_files",
    "routing_task",
    "routed_task",
    "claiming_task",
    "claim",
    "claimant",
    "claim_order",
]


def placed_task(
    plan: TaskPlan, schema: pa.Schema, task: GroupedTask, rows: Iterator[tuple[bytes, list[bytes]]]
) -> Iterator[bytes]:
    """The task of a placed epoch (:func:`cbp.engine.driver.locality.placed_epoch`): Arrow batches
    in, ``task``'s result batches out (IPC bytes)."""
    for _, blobs in rows:
        batches = (pa.ipc.read_record_batch(pa.py_buffer(b), schema) for b in blobs)
        for rb in task(plan, batches):
            yield rb.serialize().to_pybytes()


def read_files(
    schema: pa.Schema, store: objectstore.ObjectStoreSettings | None, batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Worker side of :func:`cbp.engine.driver.remote_read.read_parquet`: stream each named file's
    row groups, cast to ``schema``; ``store``: the driver's object-store settings (None: this process's)."""
    for batch in batches:
        for uri in batch.column(0).to_pylist():
            fs, path = objectstore.filesystem(uri, store=store)
            with fs.open_input_file(path) as fh:
                pf = pq.ParquetFile(fh)
                have = set(pf.schema_arrow.names)
                cols = [f.name for f in schema if f.name in have]
                for rb in pf.iter_batches(batch_size=20000, columns=cols):
                    arrays = [
                        rb.column(f.name).cast(f.type) if f.name in have else pa.nulls(rb.num_rows, f.type)
                        for f in schema
                    ]
                    yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def routing_task(plan: TaskPlan, cap: int, items: Iterator[tuple[int, int, bytes]]) -> Iterator[bytes]:
    """Worker side of :func:`cbp.engine.driver.smallepoch.route_on_executors`: the envelopes of each
    slice of records, as :func:`cbp.engine.task.translate.route_batches` makes them on the normal
    path's map side; an empty message once they pass ``cap`` bytes."""
    size = 0
    with time_limit(plan):
        for i, made, data in items:
            for b in route_batches(plan, i, made, pa.ipc.open_stream(pa.py_buffer(data))):
                size += b.nbytes
                if size > cap:
                    yield b""
                    return
                yield b.serialize().to_pybytes()


def routed_task(plan: TaskPlan, task: GroupedTask, items: Iterator[list[tuple[int, bytes]]]) -> Iterator[bytes]:
    """Worker side: for each partition given to this task, its envelopes (one Arrow IPC stream)
    in, the grouped task's result out."""
    for group in items:
        for p, data in group:
            for rb in task(plan, iter(pa.ipc.open_stream(pa.py_buffer(data))), p):
                yield rb.serialize().to_pybytes()


def claiming_task(
    plan: TaskPlan,
    task: GroupedTask,
    work: str,
    n: int,
    tasks: int,
    last: dict[int, int],
    items: Iterator[int],
    envelopes: dict[int, bytes] | None = None,
) -> Iterator[bytes]:
    """Worker side of a small epoch in local mode (:mod:`cbp.engine.driver.smallepoch`). The task says
    which worker runs it, claims the partitions this worker ran last (up to its share of all), then
    the others (its share first), except those kept by a worker that runs another of the job's
    tasks (or starts one within :data:`KEEPER_WAIT`): that task claims them first thing (and if it
    fails, Spark's retry runs in a new worker and takes them). A retried task first runs again what
    its failed attempt claimed, kept or not.
    Partition ``p``'s envelopes are ``envelopes[p]`` (Arrow IPC) if given, else the file ``work/p.arrows``."""
    from pyspark import TaskContext

    me = TaskContext.get().partitionId()  # type: ignore[union-attr]
    pid = os.getpid()
    with open(os.path.join(work, f"task-{me}.pid"), "w") as f:
        f.write(str(pid))
    order, kept = claim_order(n, tasks, me, pid, last)
    for p in order:
        retried = claimant(work, p)[0] == me  # an earlier attempt of this task claimed it: this one runs it
        if not retried and p in kept and last[p] != pid and _keeper_runs(work, tasks, me, last[p], p):
            continue
        if not claim(work, p, me, pid):
            continue
        if envelopes is not None:
            for rb in task(plan, iter(pa.ipc.open_stream(pa.py_buffer(envelopes[p]))), p):
                yield rb.serialize().to_pybytes()
            continue
        with pa.memory_map(os.path.join(work, f"{p}.arrows")) as source:
            for rb in task(plan, iter(pa.ipc.open_stream(source)), p):
                yield rb.serialize().to_pybytes()


def claim(work: str, p: int, task: int, pid: int) -> bool:
    """Claim partition ``p`` for task ``task`` (run by worker ``pid``): True if no other task had
    it. A claim by an earlier attempt of the same task (which Spark retries only once it failed)
    passes to this one.

        >>> import tempfile
        >>> d = tempfile.mkdtemp()
        >>> claim(d, 0, task=0, pid=10), claim(d, 0, task=1, pid=11), claim(d, 0, task=0, pid=12)
        (True, False, True)
    """
    path = os.path.join(work, f"{p}.claim")
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        if claimant(work, p)[0] != task:
            return False
        fd = os.open(path, os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, f"{task} {pid}".encode())
    finally:
        os.close(fd)
    return True


def claimant(work: str, p: int) -> tuple[int | None, int | None]:
    """The task and worker pid that claimed partition ``p`` (None, None if unknown)."""
    try:
        with open(os.path.join(work, f"{p}.claim"), "rb") as f:
            task, pid = f.read().split()
        return int(task), int(pid)
    except (OSError, ValueError):
        return None, None


def claim_order(n: int, tasks: int, me: int, pid: int, last: dict[int, int]) -> tuple[list[int], set[int]]:
    """The order in which task ``me`` (worker ``pid``) tries the ``n`` partitions, and the partitions
    each worker keeps: of those it ran last (``last``: partition -> pid), at most its share of all.

        >>> claim_order(4, 2, me=1, pid=7, last={0: 7, 1: 7, 2: 7, 3: 9})   # 7 keeps 0 and 1, 9 keeps 3
        ([0, 1, 2, 3], {0, 1, 3})
        >>> claim_order(4, 2, me=1, pid=9, last={0: 7, 1: 7, 2: 7, 3: 9})   # its own, then 2 (kept by nobody)
        ([3, 2, 1, 0], {0, 1, 3})
    """
    quota = -(-n // tasks)
    kept = {p for w in set(last.values()) for p in sorted(q for q in range(n) if last.get(q) == w)[:quota]}
    mine = [p for p in range(n) if p in kept and last[p] == pid]
    rest = sorted((p for p in range(n) if p not in mine), key=lambda p: (p in kept, p % tasks != me, p))
    return mine + rest, kept


#: Seconds a task that has run its own partitions waits for the worker that keeps another partition to start
#: one of the job's tasks (the job's tasks start at once, but not at the same instant: a task that took such a
#: partition at once took it from the worker that caches its state).
KEEPER_WAIT = 0.2


def _keeper_runs(work: str, tasks: int, me: int, keeper: int, p: int) -> bool:
    """Whether worker ``keeper`` (which ran partition ``p`` last) runs another task of the job, or ``p`` is
    claimed, within :data:`KEEPER_WAIT` seconds; at once False if that worker is gone."""
    deadline = time.monotonic() + KEEPER_WAIT
    while True:
        if keeper in _running(work, tasks, me) or claimant(work, p)[0] is not None:
            return True
        if time.monotonic() >= deadline or not _alive(keeper):
            return False
        time.sleep(0.01)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process: alive
        return True
    return True


def _running(work: str, tasks: int, me: int) -> set[int]:
    """The workers (pids) that run the job's other tasks, as far as they have said so yet."""
    pids = set()
    for t in range(tasks):
        if t != me:
            try:
                with open(os.path.join(work, f"task-{t}.pid")) as f:
                    pids.add(int(f.read()))
            except (OSError, ValueError):
                pass
    return pids
