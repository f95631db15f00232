r"""Internal: what a feed is read from (JSON lines, Parquet, Arrow data, pandas) and how its records
become one Arrow table checked against the flow's schema (:meth:`cbp.Pipeline.feed` calls these).

    >>> import io
    >>> list(_json_lines(io.BytesIO(b'{"a": 1}\n{"a": 2}'), "x.jsonl"))
    ['{"a": 1}\n', '{"a": 2}']
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, BinaryIO, Union

import pyarrow as pa

from ..errors import InputError
from .arrowrecords import ArrowRecordError, conform, with_diff
from .schema import RecordError, RecordSchema

__all__ = ["MAX_LINE_BYTES", "Records"]

_CHUNK = 50_000  # records validated per Arrow chunk while feeding
MAX_LINE_BYTES = 64 << 20  # the longest line of a JSON-lines feed (64 MiB); a longer one is refused unread
Records = Union[
    str, "os.PathLike[str]", Iterable[Mapping[str, Any]], pa.Table, pa.RecordBatch, pa.RecordBatchReader, Any
]


def _json_lines(fh: BinaryIO, src: str) -> Iterator[str | RecordError]:
    """The lines of a JSON-lines file as text, or a :class:`RecordError` for a line that is longer
    than :data:`MAX_LINE_BYTES` (not read whole) or not UTF-8; lines end at ``\\n`` only."""
    while True:
        try:
            raw = fh.readline(MAX_LINE_BYTES + 1)
        except OSError as e:
            raise InputError(
                f"{src}: cannot read the file: {e.strerror or e}; nothing was landed", code="unreadable"
            ) from None
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            limit = f"{MAX_LINE_BYTES >> 20} MiB" if MAX_LINE_BYTES % (1 << 20) == 0 else f"{MAX_LINE_BYTES:,} bytes"
            yield RecordError(None, f"the line is longer than {limit}, the most cbp reads as one record")
            return
        try:
            yield raw.decode("utf-8")
        except UnicodeDecodeError as e:
            yield RecordError(None, f"not UTF-8 text ({e.reason} at byte {e.start + 1} of the line)")
            return


def _is_arrow(records: Any) -> bool:
    """Whether ``records`` are Arrow data (or a DataFrame that exports them), not dicts."""
    if (
        isinstance(records, (list, tuple))
        and records
        and all(isinstance(r, (pa.Table, pa.RecordBatch)) for r in records)
    ):
        return True  # e.g. table.to_batches()
    return (
        isinstance(records, (pa.Table, pa.RecordBatch, pa.RecordBatchReader))
        or hasattr(records, "__arrow_c_stream__")
        or (type(records).__module__.startswith("pandas") and type(records).__name__ == "DataFrame")
    )


def _arrow_batches(records: Any, flow: str) -> Iterator[pa.RecordBatch]:
    """The record batches of an Arrow source; a DataFrame Arrow cannot read is a ``bad-record`` error."""
    if isinstance(records, pa.RecordBatch):
        yield records
        return
    if isinstance(records, (list, tuple)):  # of tables and batches (_is_arrow)
        for r in records:
            yield from _arrow_batches(r, flow)
        return
    if isinstance(records, pa.Table):
        yield from records.to_batches(_CHUNK)
        return
    try:
        if isinstance(records, pa.RecordBatchReader):
            reader = records
        elif type(records).__module__.startswith("pandas"):  # its index is not a field (pandas' own export may add it)
            reader = pa.Table.from_pandas(records, preserve_index=False).to_reader(_CHUNK)
        else:
            reader = pa.RecordBatchReader.from_stream(records)
        yield from reader
    except (pa.ArrowException, ValueError, TypeError) as e:  # e.g. a pandas column of mixed Python types
        raise InputError(
            f"flow '{flow}': the {type(records).__name__} cannot be read as Arrow columns: {e}; nothing was landed",
            code="bad-record",
        ) from None


def _parquet_batches(src: str | BinaryIO, name: str) -> Iterator[pa.RecordBatch]:
    """The record batches of a Parquet file (a path or an open binary file called ``name``); a file
    that is not one (or cannot be read) is ``unreadable``."""
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(src) as f:
            yield from f.iter_batches(batch_size=_CHUNK)
    except (OSError, pa.ArrowException, ValueError) as e:
        raise InputError(
            f"{name}: cannot read the file as Parquet: {e}; nothing was landed", code="unreadable"
        ) from None


def _as_arrow(schema: RecordSchema, records: Iterable[tuple[dict[str, Any], int]]) -> pa.Table:
    """Validated records with their multiplicities as Arrow (a last column ``_diff``), converted
    in chunks (a big file stays compact)."""
    chunks: list[pa.Table] = []
    valid: list[dict[str, Any]] = []
    diffs: list[int] = []
    for rec, diff in records:
        valid.append(rec)
        diffs.append(diff)
        if len(valid) >= _CHUNK:
            chunks.append(schema.to_arrow(valid, diffs=diffs))
            valid.clear()
            diffs.clear()
    chunks.append(schema.to_arrow(valid, diffs=diffs))
    return pa.concat_tables(chunks)


def _is_file(records: Any) -> bool:
    """Whether ``records`` is an open file (read as JSON lines or Parquet), not an iterable of dicts."""
    return isinstance(records, io.IOBase) or (
        hasattr(records, "read") and hasattr(records, "readline") and hasattr(records, "seek")
    )


def _is_parquet(fh: BinaryIO, name: str) -> bool:
    """Whether the open file ``fh`` starts as a Parquet file does (``PAR1``); back at its start after."""
    try:
        start = fh.tell()
        magic = fh.read(4)
        fh.seek(start)
    except (OSError, ValueError) as e:
        raise InputError(
            f"{name}: cannot read the file: {getattr(e, 'strerror', None) or e}; nothing was landed", code="unreadable"
        ) from None
    return magic == b"PAR1"


def _conformed(schema: RecordSchema, batches: Iterator[pa.RecordBatch], flow: str, src: str | None) -> pa.Table:
    """Arrow batches checked and converted to the flow's stored form (:func:`cbp.spec.arrowrecords.conform`)."""
    chunks = [with_diff(schema.arrow.empty_table())]
    seen = 0
    for b in batches:
        try:
            chunks.append(with_diff(conform(schema, b, signed=True)))
        except ArrowRecordError as e:
            where = f"{src}: record {seen + e.row + 1}" if src else f"record {seen + e.row + 1}"
            raise InputError(f"{where}: flow '{flow}': {e}; nothing was landed", code=e.code) from None
        seen += b.num_rows
    return pa.concat_tables(chunks)
