"""Refusing, before a stage epoch runs, a record other than +1 on an input that is not signed.

A stage receives retractions (``_diff`` < 0) and records standing for several copies (``_diff`` > 1)
only on an input it declares ``signed: true`` (:mod:`cbp.spec.signing`). Feeds of external flows
are checked as they land; this checks what an epoch reads, which covers the flows stages write
(and increments landed before a stage's ``signed`` was taken away). It runs on the driver before
any Spark job of the epoch, for every path alike (per-key, batch and columnar, direct and black
box, small epochs and record-wise stages): per input file, the ``_diff`` statistics of its row
groups in the Parquet footer (a min and a max, no data read); only a row group whose statistics
are missing or other than 1 has its ``_diff`` column read. A refused record fails the epoch with
:class:`cbp.errors.UserCodeError` code ``retraction-refused``; nothing of it is committed.

On a signed input the other way round: records equal but for ``_diff`` are one record, whose
``_diff`` is the sum of theirs, dropped at 0 (DBSP's Z-set rule, :mod:`cbp.engine.task.signed`). A task
consolidates what it reads; an epoch whose input holds a record in one file and its retraction in
another (a Delta source's insert and delete synced in two epochs, a ``cbp feed`` of a retraction
after a failed epoch) would evaluate the record in one task before the other saw the retraction. So
where a record is evaluated before the reduce side's consolidation (a record-wise stage, a view's
RouteBy: its key expressions and WHERE, :class:`cbp.views.run.RouteKey`), an input whose files hold
a retraction is read consolidated across them (:func:`consolidates_across`, :func:`zset_frame`): a
record whose insert and retraction are both pending is never evaluated, so deleting a row that failed
an epoch unblocks it, as a Spark user expects. A Spark job does so only in its second try, after a record
failed (:func:`cbp.engine.driver.job.run_stage_epoch`): a job that succeeds pays nothing for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import UserCodeError
from ...spec.diff import DIFF
from ...spec.signing import REFUSED, first_unsigned, refusal
from ...storage import objectstore
from ..task.signed import consolidate_table

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from ..task.plan import TaskPlan

__all__ = ["refuse_unsigned_inputs", "consolidates_across", "zset_frame", "merged_signed"]


def refuse_unsigned_inputs(plan: TaskPlan, input_files: dict[int, list[str]]) -> None:
    """Raise ``retraction-refused`` for the first record of an unsigned input of ``plan``'s stage
    (:class:`cbp.engine.task.plan.TaskPlan`) whose ``_diff`` is not +1, in ``input_files``."""
    for i, files in input_files.items():
        inp = plan.stage.inputs[i]
        if inp.signed:
            continue
        for uri in files:
            found = _first_in_file(uri)
            if found is None:
                continue
            rec, diff = found
            rec = plan.input_schemas[i].from_storage(rec)
            rec.pop(DIFF, None)
            message = refusal(inp.flow, plan.stage.name, "a record", rec, diff, "Nothing of this epoch was committed.")
            raise UserCodeError(f"{plan.where()}: {message}", code=REFUSED, stage=plan.stage.name, epoch=plan.epoch)


def _all_plus_one(stats: Any, rows: int) -> bool:
    """Whether a row group's ``_diff`` statistics show every value +1 or null."""
    if stats is None:
        return False
    if stats.has_null_count and stats.null_count == rows:
        return True
    return bool(stats.has_min_max and stats.min == 1 and stats.max == 1)


def _first_in_file(uri: str) -> tuple[dict[str, Any], int] | None:
    """The first record of a file whose ``_diff`` is not +1 (without ``_diff``) and that ``_diff``, or None."""
    fs, path = objectstore.filesystem(uri)
    with fs.open_input_file(path) as fh:
        pf = pq.ParquetFile(fh)
        names = pf.schema_arrow.names
        if DIFF not in names:  # written by a cbp before signed records: every record +1
            return None
        col = pf.schema_arrow.get_field_index(DIFF)
        for g in range(pf.metadata.num_row_groups):
            meta = pf.metadata.row_group(g)
            if _all_plus_one(meta.column(col).statistics, meta.num_rows):
                continue
            i = first_unsigned(pf.read_row_group(g, columns=[DIFF]).column(DIFF))
            if i is not None:
                rec = pf.read_row_group(g).slice(i, 1).to_pylist()[0]
                return rec, int(rec[DIFF])
    return None


def consolidates_across(plan: TaskPlan, i: int, files: list[str]) -> bool:
    """Whether input ``i``'s records are read consolidated across ``files`` (:func:`zset_frame`): the
    stage evaluates them one by one before the reduce side (record-wise, or routed by a view's RouteBy),
    the input is signed, it spans more than one file or row group, and one of them holds a retraction."""
    inp = plan.stage.inputs[i]
    if not inp.signed or not files:
        return False
    if not plan.stage.record_wise and not getattr(getattr(inp.route_by, "fn", None), "driver_safe", False):
        return False  # a user's RouteBy: the reduce side consolidates per key, as ever
    groups = 0
    found = False
    for uri in files:
        fs, path = objectstore.filesystem(uri)
        with fs.open_input_file(path) as fh:
            meta = pq.ParquetFile(fh).metadata
            groups += meta.num_row_groups
            found = found or _may_retract(meta)
    return found and groups > 1


def _may_retract(meta: Any) -> bool:
    """Whether a file's footer leaves room for a negative ``_diff`` (a row group without its statistics too)."""
    names = meta.schema.to_arrow_schema().names
    if DIFF not in names:  # written by a cbp before signed records: every record +1
        return False
    col = names.index(DIFF)
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        stats = group.column(col).statistics
        if stats is not None and stats.has_null_count and stats.null_count == group.num_rows:
            continue  # all null: +1
        if stats is None or not stats.has_min_max or stats.min < 0:
            return True
    return False


def zset_frame(df: DataFrame) -> DataFrame:
    """``df``'s records consolidated by identity with Spark SQL: one per distinct record (every column but
    ``_diff``), its ``_diff`` the sum of theirs (a null one, of a file an older cbp wrote, is +1), zeros dropped;
    the columns in ``df``'s order."""
    from pyspark.sql import functions as F

    cols = [F.col(f"`{c}`") for c in df.columns if c != DIFF]
    diff = F.sum(F.coalesce(F.col(DIFF), F.lit(1))).cast("bigint").alias(DIFF)
    summed = df.groupBy(*cols).agg(diff).where(F.col(DIFF) != 0)
    return summed.select(*[F.col(f"`{c}`") for c in df.columns])


def merged_signed(plan: TaskPlan, remote: list[tuple[int, int, pa.Table]]) -> list[tuple[int, int, pa.Table]]:
    """A small epoch's records to route (input, the epoch whose bindings deliver its multicasts, records: one per
    file, :func:`cbp.engine.driver.smallepoch.driver_routed`) with each input that :func:`consolidates_across`
    would consolidate as one table, consolidated by identity: +r in one file and -r in another are never routed."""
    out: list[tuple[int, int, pa.Table]] = []
    merged: dict[int, tuple[int, list[pa.Table]]] = {}
    for i, made, t in remote:
        inp = plan.stage.inputs[i]
        evaluated = plan.stage.record_wise or getattr(getattr(inp.route_by, "fn", None), "driver_safe", False)
        if inp.signed and evaluated:  # a view's RouteBy multicasts nothing: which epoch's bindings does not matter
            merged.setdefault(i, (made, []))[1].append(t)
        else:
            out.append((i, made, t))
    for i, (made, tables) in merged.items():
        out.append((i, made, consolidate_table(pa.concat_tables(tables))))
    return out
