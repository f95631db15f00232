"""What :meth:`cbp.Pipeline.feed` is given, as one Arrow table checked against the flow's schema.

A JSON-lines file, a Parquet file (``*.parquet``), a file open for binary reading (Parquet if
its name ends in ``.parquet``, or, ending in neither that nor ``.jsonl``, if it starts as Parquet
does; else JSON lines), Arrow data (anything pyarrow reads as a stream), or an iterable of dicts.
One bad record rejects the whole increment (:class:`cbp.errors.InputError` ``bad-record`` naming
the file and line or the record number); a file that cannot be read is ``unreadable``.

Reads: the records or file given. Writes: nothing (the landing part lands the table, :mod:`.landing`).

Example (``schema`` a flow's :class:`~cbp.spec.schema.RecordSchema`)::

    as_table(schema, [{"url": "http://a/"}], "urls", None).num_rows  # 1
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Mapping
from typing import Any, BinaryIO

import pyarrow as pa

from ..errors import InputError
from ..gcpolicy import fewer_collections
from ..spec.diff import validate_json_line_signed, validate_signed
from ..spec.feedfiles import (
    Records,
    _arrow_batches,
    _as_arrow,
    _conformed,
    _is_arrow,
    _is_file,
    _is_parquet,
    _json_lines,
    _parquet_batches,
)
from ..spec.schema import RecordError, RecordSchema

__all__ = ["as_table"]


def as_table(schema: RecordSchema, records: Records, flow: str, source: str | None) -> pa.Table:
    """``records`` given to feed flow ``flow`` (``source`` names an open file in errors), validated, as Arrow."""
    if isinstance(records, (str, os.PathLike)) and os.fspath(records).endswith(".parquet"):
        src = os.fspath(records)
        return _conformed(schema, _parquet_batches(src, src), flow, src)
    if _is_file(records):
        return _open_file(schema, records, flow, source)
    if _is_arrow(records):
        return _conformed(schema, _arrow_batches(records, flow), flow, None)
    with fewer_collections():  # a dict per record: see cbp.gcpolicy
        return _validated(schema, records, flow)


def _open_file(schema: RecordSchema, fh: Any, flow: str, source: str | None) -> pa.Table:
    """An open file: Parquet or JSON lines, by its name or (neither name) its first bytes."""
    if isinstance(fh, io.TextIOBase):
        raise InputError(
            f"{source or getattr(fh, 'name', 'the file')}: the file is open in text mode; "
            "open it with 'rb' (nothing was landed)",
            code="unreadable",
        )
    binary: BinaryIO = fh
    name = source or (binary.name if isinstance(getattr(binary, "name", None), str) else "the file")
    if name.endswith(".parquet") or (not name.endswith((".jsonl", ".json")) and _is_parquet(binary, name)):
        return _conformed(schema, _parquet_batches(binary, name), flow, name)
    return _json_file(schema, binary, name, flow)


def _validated(schema: RecordSchema, records: Records, flow: str) -> pa.Table:
    """JSON lines or dicts, validated one record at a time, as Arrow."""
    if isinstance(records, (str, os.PathLike)):
        src = os.fspath(records)
        try:
            fh = open(src, "rb")
        except OSError as e:
            raise InputError(f"{src}: cannot read the file: {e.strerror}", code="unreadable") from None
        with fh:
            return _json_file(schema, fh, src, flow)
    if isinstance(records, (Mapping, bytes)) or not hasattr(records, "__iter__"):
        got = "one dict" if isinstance(records, Mapping) else type(records).__name__
        raise InputError(
            f"flow '{flow}': feed takes a list (or iterable) of records, or a JSON-lines file path; got {got}",
            code="bad-record",
        )

    def checked() -> Iterator[tuple[dict[str, Any], int]]:
        for n, rec in enumerate(records, 1):
            try:
                yield validate_signed(schema, rec)
            except RecordError as e:
                raise InputError(f"record {n}: flow '{flow}': {e}; nothing was landed", code=e.code) from None

    return _as_arrow(schema, checked())


def _json_file(schema: RecordSchema, fh: BinaryIO, src: str, flow: str) -> pa.Table:
    """The records of an open JSON-lines file called ``src``, validated as :func:`_validated` does."""

    def checked() -> Iterator[tuple[dict[str, Any], int]]:
        for n, line in enumerate(_json_lines(fh, src), 1):
            try:
                if isinstance(line, RecordError):
                    raise line
                if line.strip():
                    yield validate_json_line_signed(schema, line)
            except RecordError as e:
                raise InputError(f"{src}:{n}: flow '{flow}': {e}; nothing was landed", code=e.code) from None

    return _as_arrow(schema, checked())
