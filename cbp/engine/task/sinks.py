"""Files a task writes, in chunks: a Parquet file grows row group by row group, so a task never
holds more than one chunk of the records it writes.

Every file gets a new unique name (a retried task writes new files; the failed attempt's stay
unreferenced), and :meth:`ParquetSink.close` returns its future Delta add action.
"""

from __future__ import annotations

import functools
import time
import uuid
from collections.abc import Callable
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from ...storage import Home

__all__ = ["ParquetSink", "RecordSink", "column_codecs", "io_path"]


def io_path(e: OSError) -> str | None:
    """The path a failed write was writing, when a sink or the error knows it."""
    found = getattr(e, "cbp_path", None) or e.filename
    return None if found is None else str(found)


#: Columns whose values are unique in a file by construction (a key's text and hash): never
#: dictionary-encoded (a dictionary of unique values only costs time and bytes).
UNIQUE_COLUMNS = frozenset({"_key", "_h"})


#: Values :func:`dictionary_columns` looks at per column (counting a whole table's distinct
#: values cost 5 ms a column on every small state file).
SAMPLE = 4096


def dictionary_columns(table: pa.Table) -> list[str]:
    """The columns worth a dictionary in files whose first rows are ``table``: not those of
    :data:`UNIQUE_COLUMNS`, nor those at least half of whose first :data:`SAMPLE` values are
    distinct (in a table of 1,000 rows or more). Unique strings such as URLs write about 2x
    faster and 25% smaller plain.

        >>> import pyarrow as pa
        >>> n = range(2000)
        >>> t = pa.table({"_key": [str(i) for i in n], "url": [f"u{i}" for i in n], "n": [i % 3 for i in n]})
        >>> dictionary_columns(t)
        ['n']
    """
    import pyarrow.compute as pc

    keep = []
    for name, col in zip(table.column_names, table.columns):
        if name in UNIQUE_COLUMNS:
            continue
        if len(col) >= 1000 and not pa.types.is_boolean(col.type) and not pa.types.is_nested(col.type):
            first = col.slice(0, SAMPLE)
            if pc.count_distinct(first).as_py() * 2 >= len(first):
                continue
        keep.append(name)
    return keep


#: Codecs whose dictionary pages Spark's Parquet reader cannot always decode: a filter pushed down to
#: a dictionary-encoded column (Parquet's dictionary filter) fails with aircompressor's
#: ``MalformedInputException`` on pyarrow's LZ4_RAW dictionary pages of more than about 1,500 values
#: (Spark 4.2; ``tests/test_delta_spark.py``). Their data pages read.
DICTIONARY_UNSAFE = frozenset({"lz4", "lz4_raw"})


def column_codecs(schema: pa.Schema, dictionary: list[str], codec: str) -> str | dict[str, str]:
    """The ``compression`` argument of a file with ``schema`` whose ``dictionary`` columns are
    dictionary-encoded: ``codec``, but zstd for those columns when ``codec`` is one of
    :data:`DICTIONARY_UNSAFE` (so that Spark reads the file with any filter).

        >>> import pyarrow as pa
        >>> column_codecs(pa.schema([("k", pa.string()), ("n", pa.int64())]), ["n"], "lz4")
        {'k': 'lz4', 'n': 'zstd'}
        >>> column_codecs(pa.schema([("n", pa.int64())]), ["n"], "zstd")
        'zstd'
    """
    if codec.lower() not in DICTIONARY_UNSAFE or not dictionary:
        return codec
    chosen = set(dictionary)
    return {path: "zstd" if path in chosen else codec for path in _leaf_paths(schema)}


@functools.lru_cache(maxsize=64)
def _leaf_paths(schema: pa.Schema) -> tuple[str, ...]:
    """The Parquet column paths of ``schema`` (a nested field's leaves as ``s.q``, ``l.list.element``),
    which a per-column ``compression`` must name: a column it leaves out is written uncompressed."""
    buf = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), buf)
    parquet_schema = pq.ParquetFile(pa.BufferReader(buf.getvalue())).schema
    return tuple(parquet_schema.column(i).path for i in range(len(parquet_schema)))


class ParquetSink:
    """One new data file in ``rel_dir`` (relative to the home), opened at the first rows written."""

    def __init__(
        self,
        home: Home,
        rel_dir: str,
        prefix: str,
        schema: pa.Schema,
        partition: int,
        row_group: int = 65536,
        compression: str = "zstd",
        dictionary: bool = True,
    ) -> None:
        self.home, self.rel_dir, self.prefix, self.schema = home, rel_dir, prefix, schema
        self.partition, self.row_group, self.compression = partition, row_group, compression
        self.dictionary = dictionary  # False: no column dictionary-encoded (state files, bipindex.STATE_DICTIONARY)
        self.rows = 0
        self.rel: str | None = None
        self._writer: pq.ParquetWriter | None = None
        self._out: Any = None

    def write(self, table: pa.Table) -> None:
        """Append rows (each call adds row groups of at most ``row_group`` rows)."""
        if table.num_rows == 0:
            return
        try:
            if self._writer is None:
                self.rel = f"{self.rel_dir}/{self.prefix}-{uuid.uuid4().hex[:12]}.parquet"
                path = self.home.path(self.rel)
                self.home.make_parent(path)
                self._out = self.home.fs.open_output_stream(path)
                dictionary = dictionary_columns(table) if self.dictionary else []
                self._writer = pq.ParquetWriter(
                    self._out,
                    self.schema,
                    compression=column_codecs(self.schema, dictionary, self.compression),
                    use_dictionary=dictionary,
                )
            self._writer.write_table(table, row_group_size=self.row_group)
        except OSError as e:
            e.cbp_path = self.home.path(self.rel or self.rel_dir)  # type: ignore[attr-defined]
            raise
        self.rows += table.num_rows

    def close(self) -> dict[str, Any] | None:
        """Finish the file; its add action (``rel`` relative to the home), or ``None`` if nothing was written."""
        if self._writer is None:
            return None
        path = self.home.path(self.rel)  # type: ignore[arg-type]
        try:
            self._writer.close()
            self._writer = None
            size = self._out.tell()  # the bytes written: no look at the file afterwards (a request on S3)
            self._out.close()
            self._out = None
        except OSError as e:
            e.cbp_path = path  # type: ignore[attr-defined]
            raise
        return {
            "rel": self.rel,
            "size": size,
            "mtime": int(time.time() * 1000),
            "rows": self.rows,
            "partition": self.partition,
        }

    def abort(self) -> None:
        """Close an unfinished file (it stays unreferenced: a failed task leaves nothing visible)."""
        for closing in (self._writer, self._out):
            if closing is not None:
                try:
                    closing.close()
                except OSError:
                    pass
        self._writer = self._out = None


class TableSink(Protocol):
    """Where a :class:`RecordSink` appends: a :class:`ParquetSink`, or a framed one (:mod:`.framing`)."""

    def write(self, table: pa.Table) -> None: ...

    def close(self) -> dict[str, Any] | list[dict[str, Any]] | None: ...

    def abort(self) -> None: ...


class RecordSink:
    """Records buffered ``chunk`` at a time, converted to Arrow by ``to_table`` and appended to a sink."""

    def __init__(self, sink: TableSink, to_table: Callable[..., pa.Table], chunk: int) -> None:
        self.sink, self.to_table, self.chunk = sink, to_table, max(1, chunk)
        self.count = 0
        self._buf: list[dict[str, Any]] = []

    def add(self, record: dict[str, Any]) -> None:
        self._buf.append(record)
        self.count += 1
        if len(self._buf) >= self.chunk:
            self.flush()

    def add_table(self, table: pa.Table) -> None:
        """Append records already in Arrow form (the sink's schema)."""
        self.flush()
        self.sink.write(table)
        self.count += table.num_rows

    def flush(self) -> None:
        if self._buf:
            table = self.to_table(self._buf)
            self._buf = []
            self.sink.write(table)

    def close(self) -> dict[str, Any] | list[dict[str, Any]] | None:
        self.flush()
        return self.sink.close()
