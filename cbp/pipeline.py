"""The Python API: load a pipeline, feed increments, run epochs, read state and outputs.

    >>> import cbp
    >>> p = cbp.load("flows/url_count.yaml", home="/tmp/cbp-demo")          # doctest: +SKIP
    >>> p.feed("urls", [{"url": "http://a/"}, {"url": "http://a/"}])       # doctest: +SKIP
    [1]
    >>> [r.line() for r in p.run()]                                        # doctest: +SKIP
    >>> p.output("counts")                                                 # doctest: +SKIP
    [{'url': 'http://a/', 'count': 2}]
"""

from __future__ import annotations

import io
import numbers
import os
from typing import Any, BinaryIO, Callable, Iterable, Iterator, Mapping, Optional, Union

import pyarrow as pa

from .controller import Controller, EpochRecord, EpochReport, Landed
from .errors import InputError, UsageError
from .gcpolicy import fewer_collections
from .spec.arrowrecords import ArrowRecordError, conform, with_diff
from .spec.diff import validate_json_line_signed, validate_signed
from .spec.schema import RecordError, RecordSchema
from .spec import PipelineSpec, load_spec
from .storage import Home

__all__ = ["Pipeline", "load", "default_home", "MAX_LINE_BYTES"]

_CHUNK = 50_000  # records validated per Arrow chunk while feeding
MAX_LINE_BYTES = 64 << 20  # the longest line of a JSON-lines feed (64 MiB); a longer one is refused unread
Records = Union[str, "os.PathLike[str]", Iterable[Mapping[str, Any]], pa.Table, pa.RecordBatch, pa.RecordBatchReader, Any]


def _json_lines(fh: BinaryIO, src: str) -> Iterator[Union[str, RecordError]]:
    """The lines of a JSON-lines file as text, or a :class:`RecordError` for a line that is longer
    than :data:`MAX_LINE_BYTES` (not read whole) or not UTF-8; lines end at ``\\n`` only."""
    while True:
        try:
            raw = fh.readline(MAX_LINE_BYTES + 1)
        except OSError as e:
            raise InputError(f"{src}: cannot read the file: {e.strerror or e}; nothing was landed", code="unreadable") from None
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


#: The tuning options of :class:`Pipeline`: (type, smallest value, None allowed).
TUNING: dict[str, tuple[type, float, bool]] = {
    "max_state_files": (int, 1, False), "backpressure": (int, 1, False), "state_row_group": (int, 1, False),
    "state_cache_mb": (float, 0, True), "state_scan_fraction": (float, 0, True), "small_epoch_records": (int, 0, True),
}


def _check_tuning(tuning: Mapping[str, Any]) -> None:
    """Refuse an unknown tuning option or a value it cannot take (``bad-tuning``), before anything runs.

        >>> _check_tuning({"max_state_files": 0})
        Traceback (most recent call last):
        cbp.errors.UsageError: tuning option max_state_files=0: give an integer >= 1
    """
    for name, value in tuning.items():
        if name == "notify":
            if value is not None and not callable(value):
                raise UsageError(f"tuning option notify={value!r}: give a function of one message, or None", code="bad-tuning")
            continue
        if name not in TUNING:
            raise UsageError(f"unknown tuning option '{name}' (known: {', '.join([*TUNING, 'notify'])})", code="bad-tuning")
        kind, least, nullable = TUNING[name]
        if value is None and nullable:
            continue
        number = isinstance(value, numbers.Integral) if kind is int else isinstance(value, numbers.Real)  # numpy's too
        if isinstance(value, bool) or not number or not (value >= least) or value != value or value in (float("inf"), float("-inf")):
            raise UsageError(f"tuning option {name}={value!r}: give {'an integer' if kind is int else 'a number'} >= {least:g}"
                             + (" or None" if nullable else ""), code="bad-tuning")


def _is_arrow(records: Any) -> bool:
    """Whether ``records`` are Arrow data (or a DataFrame that exports them), not dicts."""
    if isinstance(records, (list, tuple)) and records and all(isinstance(r, (pa.Table, pa.RecordBatch)) for r in records):
        return True  # e.g. table.to_batches()
    return isinstance(records, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)) or hasattr(records, "__arrow_c_stream__") or (
        type(records).__module__.startswith("pandas") and type(records).__name__ == "DataFrame")


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
        raise InputError(f"flow '{flow}': the {type(records).__name__} cannot be read as Arrow columns: {e}; nothing was landed",
                         code="bad-record") from None


def _parquet_batches(src: Union[str, BinaryIO], name: str) -> Iterator[pa.RecordBatch]:
    """The record batches of a Parquet file (a path or an open binary file called ``name``); a file
    that is not one (or cannot be read) is ``unreadable``."""
    import pyarrow.parquet as pq

    try:
        with pq.ParquetFile(src) as f:
            yield from f.iter_batches(batch_size=_CHUNK)
    except (OSError, pa.ArrowException, ValueError) as e:
        raise InputError(f"{name}: cannot read the file as Parquet: {e}; nothing was landed", code="unreadable") from None


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
    return isinstance(records, io.IOBase) or (hasattr(records, "read") and hasattr(records, "readline") and hasattr(records, "seek"))


def _is_parquet(fh: BinaryIO, name: str) -> bool:
    """Whether the open file ``fh`` starts as a Parquet file does (``PAR1``); back at its start after."""
    try:
        start = fh.tell()
        magic = fh.read(4)
        fh.seek(start)
    except (OSError, ValueError) as e:
        raise InputError(f"{name}: cannot read the file: {getattr(e, 'strerror', None) or e}; nothing was landed", code="unreadable") from None
    return magic == b"PAR1"


def _conformed(schema: RecordSchema, batches: Iterator[pa.RecordBatch], flow: str, src: Optional[str]) -> pa.Table:
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


def default_home(spec: PipelineSpec) -> str:
    """``state/<pipeline name>`` under the current directory."""
    return os.path.join("state", spec.name)


class Pipeline:
    """A pipeline YAML bound to a home directory.

    ``tuning`` goes to the controller: ``max_state_files`` (files per state partition before it
    is compacted, default 8), ``state_row_group`` (rows per row group of state files, 8192),
    ``state_cache_mb`` (decoded state files a Spark Python worker keeps, default
    ``CBP_STATE_CACHE_MB`` or 2048; 0 disables), ``state_scan_fraction`` (fraction of a state
    file's row groups above which a task reads it whole, :data:`cbp.engine.bipindex.SCAN_FRACTION`;
    0 always scans, above 1 never), ``small_epoch_records`` (new records of an epoch up to which
    the driver routes them itself and the epoch runs without a shuffle,
    :data:`cbp.engine.smallepoch.SMALL_RECORDS`; 0 turns that off), ``backpressure`` (4).
    """

    def __init__(self, path: str | os.PathLike[str], home: Optional[str] = None, *, mode: Optional[str] = None,
                 spark: Any = None, **tuning: Any) -> None:
        _check_tuning(tuning)
        self.spec = load_spec(path)
        self.home = Home(home or default_home(self.spec))
        self.controller = Controller(self.spec, self.home, mode=mode, spark=spark, **tuning)

    def feed(self, flow: str, records: Records, *, close: bool = False, feed_id: Optional[str] = None,
             source: Optional[str] = None) -> Landed:
        """Land one increment on external input flow ``flow``: a JSON-lines file, a Parquet file
        (``*.parquet``), a file open for binary reading (``source`` names it in errors; Parquet
        if that name ends in ``.parquet``, or, ending in neither that nor ``.jsonl``, if the file
        starts as Parquet does; else JSON lines), an Arrow table or record batches (anything pyarrow
        reads as a stream: ``pyarrow.Table``, ``RecordBatchReader``, a pandas or polars DataFrame),
        or an iterable of dicts.

        Every record is checked against the flow's schema first; one bad record rejects the
        whole increment (:class:`cbp.errors.InputError` code ``bad-record`` naming the file and
        line or the record number, the flow and the field) and nothing lands. A line longer than
        :data:`MAX_LINE_BYTES`, text that is not UTF-8 or not Unicode (a lone surrogate), and JSON
        nested deeper than :data:`cbp.spec.schema.MAX_DEPTH` are bad records too. Arrow columns
        are checked column by column (:mod:`cbp.spec.arrowrecords`), by the same rules as the
        same records given as dicts. A file that cannot be read is code ``unreadable``.
        ``feed_id`` makes the feed idempotent: a second feed with the same id lands nothing.
        Returns the increment ids, as a list whose ``feed`` is the number ``output(flow, epoch=N)``
        takes (every feed gets one, an empty feed too).

            >>> p.feed("urls", pyarrow.table({"url": ["http://a/", "http://b/"]}))   # doctest: +SKIP
            [2]
        """
        fl = self.spec.flow(flow)
        if feed_id is not None and not isinstance(feed_id, str):
            raise InputError(f"flow '{flow}': feed_id must be a string, not {type(feed_id).__name__}; nothing was landed", code="bad-feed-id")
        if not fl.external:
            raise InputError(f"flow '{flow}' is produced by stage '{fl.producer}'; only external flows (external: true) can be fed", code="not-external")
        if isinstance(records, (str, os.PathLike)) and os.fspath(records).endswith(".parquet"):
            table = _conformed(fl.schema, _parquet_batches(os.fspath(records), os.fspath(records)), flow, os.fspath(records))
        elif _is_file(records):
            if isinstance(records, io.TextIOBase):
                raise InputError(f"{source or records.name}: the file is open in text mode; open it with 'rb' (nothing was landed)", code="unreadable")
            name = source or (records.name if isinstance(getattr(records, "name", None), str) else "the file")
            if name.endswith(".parquet") or (not name.endswith((".jsonl", ".json")) and _is_parquet(records, name)):
                table = _conformed(fl.schema, _parquet_batches(records, name), flow, name)
            else:
                table = self._json_file(fl.schema, records, name, flow)
        elif _is_arrow(records):
            table = _conformed(fl.schema, _arrow_batches(records, flow), flow, None)
        else:
            with fewer_collections():  # a dict per record: see cbp.gcpolicy
                table = self._validated(fl.schema, records, flow)
        return self.controller.feed(flow, table, close=close, feed_id=feed_id)

    @staticmethod
    def _validated(schema: RecordSchema, records: Records, flow: str) -> pa.Table:
        """JSON lines or dicts, validated one record at a time, as Arrow."""
        if isinstance(records, (str, os.PathLike)):
            src = os.fspath(records)
            try:
                fh = open(src, "rb")
            except OSError as e:
                raise InputError(f"{src}: cannot read the file: {e.strerror}", code="unreadable") from None
            with fh:
                return Pipeline._json_file(schema, fh, src, flow)
        if isinstance(records, (Mapping, bytes)) or not hasattr(records, "__iter__"):
            got = "one dict" if isinstance(records, Mapping) else type(records).__name__
            raise InputError(f"flow '{flow}': feed takes a list (or iterable) of records, or a JSON-lines file path; got {got}", code="bad-record")
        def checked() -> Iterator[tuple[dict[str, Any], int]]:
            for n, rec in enumerate(records, 1):
                try:
                    yield validate_signed(schema, rec)
                except RecordError as e:
                    raise InputError(f"record {n}: flow '{flow}': {e}; nothing was landed", code=e.code) from None

        return _as_arrow(schema, checked())

    @staticmethod
    def _json_file(schema: RecordSchema, fh: BinaryIO, src: str, flow: str) -> pa.Table:
        """The records of an open JSON-lines file called ``src``, validated as :meth:`_validated` does."""

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

    def close(self, flow: str) -> Landed:
        """Mark the open increment of a framed input flow complete (a punctuation)."""
        return self.controller.feed(flow, [], close=True)

    def run(self, max_epochs: Optional[int] = None, on_epoch: Optional[Callable[[EpochReport], None]] = None,
            on_start: Optional[Callable[[str, int], None]] = None, command: str = "cbp.Pipeline.run()",
            epoch_timeout: Optional[float] = None) -> list[EpochReport]:
        """Run stage epochs until no stage is runnable (or ``max_epochs``); one report per epoch.

        First finishes what a killed run left (a pending commit, an interrupted epoch). Raises
        :class:`cbp.errors.BusyError` if another runner works on the same home. An epoch that
        takes longer than ``epoch_timeout`` seconds (or its stage's YAML ``timeout``) is cancelled:
        :class:`cbp.errors.UserCodeError` with code ``timeout``, nothing of it committed.
        """
        return self.controller.run(max_epochs, on_epoch=on_epoch, on_start=on_start, command=command, epoch_timeout=epoch_timeout)

    def epochs(self, stage: str) -> int:
        """How many epochs ``stage`` has committed."""
        return self.controller.epochs(stage)

    def feeds(self, flow: str) -> int:
        """How many feeds external flow ``flow`` has had (the N of its newest ``output(flow, epoch=N)``)."""
        return self.controller.feeds(flow)

    def epoch_record(self, stage: str, epoch: int) -> EpochRecord:
        """What a committed stage epoch read and wrote (increment ids per flow, records per output)."""
        return self.controller.epoch_record(stage, epoch)

    @property
    def is_new(self) -> bool:
        """True while nothing has been fed or run in the home."""
        return self.controller.is_new()

    def idle_reasons(self) -> dict[str, str]:
        """Why each stage that is not runnable now is not (stage -> reason); runnable stages are left out."""
        return self.controller.idle_reasons()

    def state(self, stage: str, epoch: Optional[int] = None) -> list[dict[str, Any]]:
        """The stage's state records after its ``epoch`` (default: latest)."""
        return self.controller.state_records(stage, epoch)

    def output(self, flow: str, epoch: Optional[int] = None, consolidated: bool = False) -> list[dict[str, Any]]:
        """The flow's records (only those its producer wrote in ``epoch`` when given), each with its
        ``_diff`` where that is not +1. ``consolidated``: the flow's contents as of ``epoch`` (default:
        all of it), every record once with the sum of its multiplicities (``_diff`` where not 1),
        zeros dropped; a negative sum is :class:`cbp.errors.InputError` code ``negative-multiplicity``.

            >>> p.output("urls", consolidated=True)   # doctest: +SKIP
            [{'url': 'http://b/'}, {'url': 'http://c/', '_diff': 2}]
        """
        if consolidated:
            return self.controller.consolidated_records(flow, epoch)
        return self.controller.output_records(flow, epoch)

    def status(self) -> dict[str, Any]:
        """Stages, epochs run, pending increments per connector, the runner, and anything interrupted."""
        return self.controller.status()

    def sql(self, query: str, epoch: Union[None, int, str, Mapping[str, int]] = None) -> Any:
        """Run a read-only Spark SQL query (Spark's Delta connector) over views named after the
        stateful stages (their state) and the flows (their records); a Spark DataFrame.

        ``epoch`` (``N``, ``{stage: N}`` or ``"stage=N"``): pinned stages show their state after
        that epoch (Delta time travel) and the flows they produce what that epoch wrote. Needs
        the jars of ``bash scripts/setup`` (else code ``no-delta-jars``); a bad query is code ``bad-sql``.

            >>> p.sql("SELECT url, count FROM url_count ORDER BY count DESC LIMIT 3").show()   # doctest: +SKIP
        """
        from .sql import run_sql

        return run_sql(self.controller, self.controller.spark, query, epoch)

    def state_df(self, stage: str, epoch: Optional[int] = None) -> Any:
        """The stage's state records after ``epoch`` (default: latest) as a Spark DataFrame (``state`` in Spark).

            >>> p.state_df("url_count").where("count > 1").count()   # doctest: +SKIP
            4
        """
        from .sql import state_df

        return state_df(self.controller, self.controller.spark, stage, epoch)

    def flow_df(self, flow: str, epoch: Optional[int] = None) -> Any:
        """The flow's records (those its producer wrote in ``epoch`` when given) as a Spark DataFrame
        (``output`` in Spark).

            >>> p.flow_df("counts", epoch=1).count()   # doctest: +SKIP
            3
        """
        from .sql import flow_df

        return flow_df(self.controller, self.controller.spark, flow, epoch)


def load(path: str | os.PathLike[str], home: Optional[str] = None, *, mode: Optional[str] = None, spark: Any = None) -> Pipeline:
    """Load a pipeline YAML (validated) bound to ``home`` (default ``state/<pipeline>``)."""
    return Pipeline(path, home, mode=mode, spark=spark)
