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

import os
from typing import Any, Callable, Iterable, Mapping, Optional, Union

import pyarrow as pa

from .controller import Controller, EpochReport
from .errors import InputError
from .schema import RecordError
from .spec import PipelineSpec, load_spec
from .storage import Home

__all__ = ["Pipeline", "load", "default_home"]

_CHUNK = 50_000  # records validated per Arrow chunk while feeding
Records = Union[str, "os.PathLike[str]", Iterable[Mapping[str, Any]]]


def default_home(spec: PipelineSpec) -> str:
    """``state/<pipeline name>`` under the current directory."""
    return os.path.join("state", spec.name)


class Pipeline:
    """A pipeline YAML bound to a home directory.

    ``tuning`` goes to the controller: ``max_state_files`` (files per state partition before it
    is compacted, default 8), ``state_row_group`` (rows per row group of state files, 8192),
    ``state_cache_mb`` (decoded state files a Spark Python worker keeps, default
    ``CBP_STATE_CACHE_MB`` or 2048; 0 disables), ``backpressure`` (4).
    """

    def __init__(self, path: str | os.PathLike[str], home: Optional[str] = None, *, mode: Optional[str] = None,
                 spark: Any = None, **tuning: Any) -> None:
        self.spec = load_spec(path)
        self.home = Home(home or default_home(self.spec))
        self.controller = Controller(self.spec, self.home, mode=mode, spark=spark, **tuning)

    def feed(self, flow: str, records: Records, *, close: bool = False, feed_id: Optional[str] = None) -> list[int]:
        """Land one increment on external input flow ``flow``: a JSON-lines file or an iterable of dicts.

        Every record is checked against the flow's schema first; one bad record rejects the
        whole increment (:class:`cbp.errors.InputError` naming the line and field) and nothing lands.
        ``feed_id`` makes the feed idempotent: a second feed with the same id lands nothing.
        """
        fl = self.spec.flow(flow)
        if not fl.external:
            raise InputError(f"flow '{flow}' is produced by stage '{fl.producer}'; only external flows (external: true) can be fed", code="not-external")
        chunks: list[pa.Table] = []  # validated records go to Arrow in chunks: a big file stays compact in memory
        valid: list[dict[str, Any]] = []

        def keep(rec: dict[str, Any]) -> None:
            valid.append(rec)
            if len(valid) >= _CHUNK:
                chunks.append(fl.schema.to_arrow(valid))
                valid.clear()

        if isinstance(records, (str, os.PathLike)):
            src = os.fspath(records)
            try:
                fh = open(src, encoding="utf-8")
            except OSError as e:
                raise InputError(f"{src}: cannot read the file: {e.strerror}", code="unreadable") from None
            with fh:
                try:
                    for n, line in enumerate(fh, 1):
                        if line.strip():
                            try:
                                keep(fl.schema.validate_json_line(line))
                            except RecordError as e:
                                raise InputError(f"{src}:{n}: flow '{flow}': {e}; nothing was landed", code="bad-record") from None
                except UnicodeDecodeError as e:
                    raise InputError(f"{src}: not UTF-8 text ({e.reason} at byte {e.start}); nothing was landed", code="bad-record") from None
        else:
            if isinstance(records, Mapping):
                raise InputError(f"flow '{flow}': feed takes a list (or iterable) of records, or a JSON-lines file path; got one dict", code="bad-record")
            for n, rec in enumerate(records, 1):
                try:
                    keep(fl.schema.validate(rec))
                except RecordError as e:
                    raise InputError(f"record {n}: flow '{flow}': {e}; nothing was landed", code="bad-record") from None
        chunks.append(fl.schema.to_arrow(valid))
        return self.controller.feed(flow, pa.concat_tables(chunks), close=close, feed_id=feed_id)

    def close(self, flow: str) -> list[int]:
        """Mark the open increment of a framed input flow complete (a punctuation)."""
        return self.controller.feed(flow, [], close=True)

    def run(self, max_epochs: Optional[int] = None, on_epoch: Optional[Callable[[EpochReport], None]] = None,
            on_start: Optional[Callable[[str, int], None]] = None, command: str = "cbp.Pipeline.run()") -> list[EpochReport]:
        """Run stage epochs until no stage is runnable (or ``max_epochs``); one report per epoch.

        First finishes what a killed run left (a pending commit, an interrupted epoch). Raises
        :class:`cbp.errors.BusyError` if another runner works on the same home.
        """
        return self.controller.run(max_epochs, on_epoch=on_epoch, on_start=on_start, command=command)

    def state(self, stage: str, epoch: Optional[int] = None) -> list[dict[str, Any]]:
        """The stage's state records after its ``epoch`` (default: latest)."""
        return self.controller.state_records(stage, epoch)

    def output(self, flow: str, epoch: Optional[int] = None) -> list[dict[str, Any]]:
        """The flow's records (only those its producer wrote in ``epoch`` when given)."""
        return self.controller.output_records(flow, epoch)

    def status(self) -> dict[str, Any]:
        """Stages, epochs run, pending increments per connector, the runner, and anything interrupted."""
        return self.controller.status()


def load(path: str | os.PathLike[str], home: Optional[str] = None, *, mode: Optional[str] = None, spark: Any = None) -> Pipeline:
    """Load a pipeline YAML (validated) bound to ``home`` (default ``state/<pipeline>``)."""
    return Pipeline(path, home, mode=mode, spark=spark)
