"""The tasks that rewrite a stage's whole state in one pass (``cbp upgrade``): a new schema, a new partition count.

One Spark job: a task per old state partition reads that partition's newest live rows, turns
each into a row of the new schema (fields added with their default or null, fields dropped,
types widened, or the stage's ``migrate`` function), and sends each row to its new partition
``pmod(hash(key), P')`` (:func:`cbp.engine.common.sparkhash.partition_of`, the partition every epoch
routes the key to); a task per new partition sorts its rows by key hash and writes one state file
and its index (:class:`cbp.engine.task.partindex.PartitionIndex`), as a compaction would. Keyed rows
(:mod:`cbp.engine.task.keyedstate`) get the row key and row hash of the new ``row_key`` (a new
row_key, or a migrate, may change them); without one, the key's hash. Nothing is
committed here: the driver runs the job (:func:`cbp.engine.driver.restate.rewrite_state`) and the
controller commits the files (:mod:`cbp.controller.migrate`).

    >>> import pyarrow as pa
    >>> from cbp.spec.schema import RecordSchema
    >>> old = RecordSchema.parse({"k": "string", "n": "int"})
    >>> new = RecordSchema({**RecordSchema.parse({"k": "string", "n": "float"}).fields})
    >>> h = spark_xxhash64(['"a"'])
    >>> rows = pa.table({"_key": ['"a"'], "_h": h, "_epoch": [3], "_alive": [True], "k": ["a"], "n": [2]})
    >>> convert(rows, Job(None, "", old, new, None, 2, 5, "u1", 8192, "s"))[0].drop_columns(["_h"]).to_pylist()
    [{'_key': '"a"', '_epoch': 5, '_alive': True, 'k': 'a', 'n': 2.0}]
    >>> keyed = convert(rows, Job(None, "", old, new, None, 2, 5, "u1", 8192, "s", row_key=("k",)))[0]  # keyed rows
    >>> keyed["_rk"].to_pylist(), keyed["_h"].to_pylist() == row_hashes(rows["_h"][0].as_py(), ['"a"']).tolist()
    (['"a"'], True)
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...spec.schema import RecordError, RecordSchema
from ..common.sparkhash import partition_of, spark_xxhash64
from .bipindex import STATE_META, latest_rows, read_partition_rows
from .keyedstate import RK, rk_text, row_hashes
from .partindex import PartitionIndex
from .statepart import StateWriter

__all__ = ["Job", "convert", "convert_part", "write_part", "convert_parts", "write_parts", "SPLIT_DDL", "WRITTEN_DDL"]

_ERROR = b"\x00err:"  # a shuffled value that carries a failure, not rows
#: The rows between the DataFrame job's two steps (:mod:`cbp.engine.driver.restate`): new partition,
#: its probe, an Arrow IPC blob of its rows; then what each new partition's task reports, pickled.
_SPLIT = pa.schema([("q", pa.int32()), ("probe", pa.string()), ("data", pa.binary())])
_WRITTEN = pa.schema([("q", pa.int32()), ("result", pa.binary())])
SPLIT_DDL, WRITTEN_DDL = "q int, probe string, data binary", "q int, result binary"


@dataclass
class Job:
    """What the tasks of one state rewrite need (pickled to the executors)."""

    home: Any  # Home
    state_rel: str
    old: RecordSchema
    new: RecordSchema
    migrate: Callable[[dict[str, Any]], Any] | None
    partitions: int
    epoch: int  # the stage's current epoch: the rewritten rows' _epoch
    tag: str  # in the new files' names
    row_group: int
    stage: str
    row_key: tuple[
        str, ...
    ] = ()  # the new state's row key (keyed rows: cbp.engine.task.keyedstate); () for whole-key state


@dataclass
class _WriterPlan:
    """What :class:`StateWriter` reads of a stage epoch's plan."""

    home: Any
    state_rel: str
    row_group: int
    epoch: int
    stage: Any
    mode: str = "direct"
    cache_mb: float | None = None


@dataclass
class _Stage:
    name: str
    state_schema: RecordSchema
    row_key: tuple[str, ...] = ()  # keyed rows: the writer adds the _rk column


def convert(rows: pa.Table, job: Job) -> tuple[pa.Table, list[str]]:
    """Live state rows of the old schema as rows of the new one (state columns first, ``_rk`` for
    keyed rows); the failures."""
    meta = {
        "_key": rows["_key"],
        "_h": rows["_h"],
        "_epoch": pa.array(np.full(rows.num_rows, job.epoch, np.int64)),
        "_alive": rows["_alive"],
    }
    t, errors = _migrated(rows, job, meta) if job.migrate is not None else (_cast(rows, job, meta), [])
    return (t, errors) if errors else _rekeyed(t, job, RK in rows.column_names)


def _cast(rows: pa.Table, job: Job, meta: dict[str, Any]) -> pa.Table:
    """Rows of the old schema in the new one: fields added with their default or null, dropped, widened."""
    cols = []
    for name, ft in job.new.fields.items():
        if name in rows.column_names:
            cols.append(rows[name].cast(ft.arrow))
        elif name in job.new.defaults:
            value = job.new.to_storage({name: job.new.defaults[name]})[name]
            cols.append(pa.array([value] * rows.num_rows, ft.arrow))
        else:
            cols.append(pa.nulls(rows.num_rows, ft.arrow))
    return pa.table(list(meta.values()) + cols, schema=pa.schema(list(STATE_META) + list(job.new.arrow)))


def _rekeyed(t: pa.Table, job: Job, was_keyed: bool) -> tuple[pa.Table, list[str]]:
    """Converted rows with the new state's ``_h`` (and ``_rk``): the key's hash for whole-key state
    (recomputed only for rows that were keyed); for keyed rows each row's row key and row hash,
    computed afresh (the row key, its fields or a migrate may have changed) over the top 32 bits
    of the key's hash, which any stored ``_h`` of the key carries. Two rows of one key with one row
    key are a failure, not a silent loss."""
    if not job.row_key:
        return (
            t.set_column(1, "_h", pa.array(spark_xxhash64(t["_key"].to_pylist()), pa.int64())) if was_keyed else t
        ), []
    keys = t["_key"].to_pylist()
    recs = t.select(list(job.row_key)).to_pylist()
    texts = [rk_text(job.row_key, r) for r in recs]
    seen: set[tuple[str, str]] = set()
    errors: list[str] = []
    for k, rk in zip(keys, texts):
        if (k, rk) in seen and len(errors) < 5:
            errors.append(
                f"stage '{job.stage}' key {k}: two stored rows would have row key {rk} ({', '.join(job.row_key)}); "
                "a key's rows need distinct row keys: give the stage a migrate that makes them distinct, "
                "or another row_key"
            )
        seen.add((k, rk))
    if errors:
        return t, errors
    h = pa.array(
        (t["_h"].to_numpy() >> 32 << 32) + row_hashes(0, texts), pa.int64()
    )  # keyedstate.row_hashes per key, vectorised
    t = t.set_column(1, "_h", h)
    return t.add_column(len(STATE_META), pa.field(RK, pa.string()), pa.array(texts, pa.string())), []


def _migrated(rows: pa.Table, job: Job, meta: dict[str, Any]) -> tuple[pa.Table, list[str]]:
    """Rows through the stage's ``migrate`` function: an old record in, a new record or None out."""
    keep, out, errors = [], [], []
    olds = rows.select([f for f in job.old.fields if f in rows.column_names]).to_pylist()
    keys = rows["_key"].to_pylist()
    for i, (key, rec) in enumerate(zip(keys, olds)):
        try:
            new = job.migrate(job.old.from_storage(dict(rec)))  # type: ignore[misc]
            if new is None:
                continue
            out.append(job.new.to_storage(job.new.validate(new)))
            keep.append(i)
        except RecordError as e:
            errors.append(
                f"stage '{job.stage}' key {key}: migrate returned a record that does not fit the new state schema: {e}"
            )
        except Exception as e:  # noqa: BLE001 - the user's function
            errors.append(f"stage '{job.stage}' key {key}: migrate raised {type(e).__name__}: {e}")
        if len(errors) >= 5:
            break
    idx = pa.array(keep, pa.int64())
    data = pa.Table.from_pylist(out, schema=job.new.arrow)
    t = pa.table(
        [v.take(idx) if k != "_epoch" else pa.array(np.full(len(keep), job.epoch, np.int64)) for k, v in meta.items()]
        + data.columns,
        schema=pa.schema(list(STATE_META) + list(job.new.arrow)),
    )
    return t, errors


def _ipc(t: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()  # type: ignore[no-any-return]


def convert_part(job: Job, item: tuple[int, list[dict[str, Any]]]) -> Iterator[tuple[int, bytes]]:
    """Task of an old partition: its newest live rows, converted, split by new partition."""
    _, files = item
    rows = latest_rows(read_partition_rows(job.home, job.state_rel, files))
    if rows.num_rows == 0:
        return
    t, errors = convert(rows, job)
    if errors:
        yield 0, _ERROR + "\n".join(errors).encode()
        return
    q = partition_of(t["_key"].to_pylist(), job.partitions)
    for p in np.unique(q):
        yield int(p), _ipc(t.filter(pa.array(q == p)))


def write_part(job: Job, q: int, items: Iterator[tuple[int, bytes]]) -> Iterator[tuple[int, Any]]:
    """Task of a new partition: its rows sorted by key hash, one state file and its index."""
    tables, errors = [], []
    for _, data in items:
        if data.startswith(_ERROR):
            errors.append(data[len(_ERROR) :].decode())
        else:
            tables.append(pa.ipc.open_stream(data).read_all())
    if errors:
        yield q, {"errors": errors}
        return
    if not tables:
        return
    rows = pa.concat_tables(tables)
    order = [("_h", "ascending"), ("_key", "ascending")] + ([(RK, "ascending")] if job.row_key else [])
    rows = rows.take(pc.sort_indices(rows, sort_keys=order))
    plan = _WriterPlan(job.home, job.state_rel, job.row_group, job.epoch, _Stage(job.stage, job.new, job.row_key))
    w = StateWriter(plan, q, prefix=f"e{job.epoch:08d}-{job.tag}", keep=False)  # type: ignore[arg-type]
    w.write_table(rows)
    add, h, g = w.close()
    if add is None:
        return
    index_rel = f"stages/{job.stage}/index/_part={q}/e{job.epoch:08d}-{job.tag}-{uuid.uuid4().hex[:12]}.parquet"
    PartitionIndex(h, np.zeros(h.size, np.int32), g, [add["path"]]).save(job.home, index_rel)
    yield q, {"add": add, "index": index_rel, "rows": int(rows.num_rows)}


def convert_parts(
    job: Job, items: list[tuple[int, list[dict[str, Any]]]], probes: tuple[str, ...], batches: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """Task of the old partitions whose numbers come in ``batches`` (``spark.range``): their rows,
    converted, one row per new partition (its number, probe and IPC blob)."""
    for batch in batches:  # every batch read: a task that leaves input unread loses its Python worker
        for i in batch.column(0).to_pylist():
            qs, blobs = [], []
            for q, data in convert_part(job, items[i]):
                qs.append(q)
                blobs.append(data)
            if qs:
                yield pa.RecordBatch.from_arrays(
                    [pa.array(qs, pa.int32()), pa.array([probes[q] for q in qs], pa.string()), pa.array(blobs)],
                    schema=_SPLIT,
                )


def write_parts(job: Job, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Task of one new partition: its blobs in (all of one partition ``q``, placed in Spark partition
    ``q``), its state file and index written (:func:`write_part`), the pickled result out."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    mine = ctx.partitionId() if ctx is not None else None
    rows: list[tuple[int, bytes]] = []
    for batch in batches:
        rows.extend(zip(batch.column("q").to_pylist(), batch.column("data").to_pylist()))
    if not rows:
        return
    qs = {q for q, _ in rows}
    if len(qs) != 1 or (mine is not None and qs != {mine}):  # a probe placed wrong: write nothing
        result = {"errors": [f"state rewrite: Spark partition {mine} got rows of new partitions {sorted(qs)}"]}
        yield _reported(min(qs), result)
        return
    for q, result in write_part(job, qs.pop(), iter(rows)):
        yield _reported(q, result)


def _reported(q: int, result: dict[str, Any]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array([q], pa.int32()), pa.array([pickle.dumps(result)], pa.binary())], schema=_WRITTEN
    )
