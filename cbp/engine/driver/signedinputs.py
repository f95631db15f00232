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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from ...errors import UserCodeError
from ...spec.diff import DIFF
from ...spec.signing import REFUSED, first_unsigned, refusal
from ...storage import objectstore

if TYPE_CHECKING:
    from ..task.plan import TaskPlan

__all__ = ["refuse_unsigned_inputs"]


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
