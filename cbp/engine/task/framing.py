"""Framing by a field, column-wise: runs of consecutive records with one framing key, and the
files of a framed stage output written run by run where its records are written (in the task).

A flow framed by a field (``frame_by: day``) cuts its records into increments at every change of
that field's value (paper 001 §3.2). :func:`frame_runs` finds those changes with Arrow compute
instead of one Python call per record; :class:`FramedSink` writes a task's output of such a
flow as one file per run, so the driver only joins runs across tasks and never reads the records
again (:meth:`cbp.controller.landing.Landing.land_runs`).

    >>> import pyarrow as pa
    >>> frame_runs(pa.chunked_array([["a", "a", "b", None, None, "a"]]))
    [('a', 0, 2), ('b', 2, 1), (None, 3, 2), ('a', 5, 1)]
    >>> frame_runs(pa.chunked_array([['1', '1.0', '{"x": 2}']]), json_text=True)  # equal JSON values join
    [(1, 0, 2), ({'x': 2}, 2, 1)]
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ...storage import SRC, Home
from .sinks import ParquetSink

__all__ = ["frame_runs", "FramedSink", "FRAME_KEY"]

#: The add-action field that carries a run's framing key (JSON text) from a task to the driver.
FRAME_KEY = "frame"


def _starts(col: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Rows (from 1) whose value differs from the row before (two nulls are equal)."""
    n = len(col)
    if n < 2:
        return np.empty(0, dtype=np.int64)
    if pa.types.is_nested(col.type):  # lists: no column-wise comparison in Arrow compute
        values = col.to_pylist()
        return np.array([i for i in range(1, n) if values[i] != values[i - 1]], dtype=np.int64)
    a, b = col.slice(0, n - 1), col.slice(1)
    differs = pc.not_equal(a, b)
    if col.null_count:
        differs = pc.if_else(pc.is_valid(differs), differs, pc.xor(pc.is_null(a), pc.is_null(b)))
    mask = (
        differs.to_numpy(zero_copy_only=False)
        if isinstance(differs, pa.Array)
        else np.concatenate([c.to_numpy(zero_copy_only=False) for c in differs.chunks] or [np.empty(0, dtype=bool)])
    )
    return np.flatnonzero(mask) + 1


def frame_runs(col: pa.ChunkedArray | pa.Array, *, json_text: bool = False) -> list[tuple[Any, int, int]]:
    """Runs of consecutive equal values of ``col``: ``(value, first row, rows)``, in order.

    Values compare as Python compares them (a ``json`` field's text is decoded: ``1`` and ``1.0``
    are one run, as are two nulls), so the runs are those of ``frame_by`` called record by record;
    a NaN is never equal to anything, as in Python.
    """
    n = len(col)
    if n == 0:
        return []
    bounds = [0, *_starts(col).tolist(), n]
    runs: list[tuple[Any, int, int]] = []
    for s, e in zip(bounds, bounds[1:]):
        v = col[s].as_py()
        if json_text and v is not None:
            v = json.loads(v)
        if runs and runs[-1][0] == v:
            runs[-1] = (runs[-1][0], runs[-1][1], runs[-1][2] + e - s)
        else:
            runs.append((v, s, e - s))
    return runs


class FramedSink:
    """A task's output of a flow framed by ``field``: one file per run of equal framing keys.

    ``write`` takes tables of the flow's fields (as stored), in output order, and adds the
    producing epoch as the ``_src`` column; :meth:`close` returns the files' add actions in run
    order, each with its run's framing key as JSON text under :data:`FRAME_KEY`. Runs that the
    driver finds equal across the ends of two tasks' outputs become one increment.
    """

    def __init__(
        self,
        home: Home,
        rel_dir: str,
        prefix: str,
        schema: pa.Schema,
        field: str,
        *,
        json_text: bool,
        epoch: int,
        partition: int,
        row_group: int = 65536,
    ) -> None:
        self.home, self.rel_dir, self.prefix = home, rel_dir, prefix
        self.schema = pa.schema([pa.field(SRC, pa.int64())] + list(schema))
        self.field, self.json_text, self.epoch, self.partition, self.row_group = (
            field,
            json_text,
            epoch,
            partition,
            row_group,
        )
        self._done: list[dict[str, Any]] = []
        self._sink: ParquetSink | None = None
        self._key: Any = None

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        table = table.select(self.schema.names[1:])
        table = table.add_column(0, self.schema.field(0), pa.array(np.full(table.num_rows, self.epoch, dtype=np.int64)))
        for key, first, rows in frame_runs(table.column(self.field), json_text=self.json_text):
            if self._sink is None or not self._key == key:  # NaN: a run of its own, as record by record
                self._finish()
                self._sink = ParquetSink(
                    self.home, self.rel_dir, self.prefix, self.schema, self.partition, self.row_group
                )
                self._key = key
            self._sink.write(table.slice(first, rows))

    def _finish(self) -> None:
        if self._sink is not None:
            add = self._sink.close()
            if add is not None:
                add[FRAME_KEY] = json.dumps(self._key, separators=(",", ":"))
                self._done.append(add)
            self._sink = None

    def close(self) -> list[dict[str, Any]]:
        """Finish the last file; every run's add action (``rel`` relative to the home), in order."""
        self._finish()
        return self._done

    def abort(self) -> None:
        """Close an unfinished file (the epoch's files are deleted when it is abandoned)."""
        if self._sink is not None:
            self._sink.abort()
            self._sink = None
