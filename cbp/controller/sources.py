"""Syncing source flows: what a Delta table gained since the last version landed (``cbp sync``).

A flow declared ``source: {delta: URI}`` is fed by :meth:`Sources.sync` only. The first sync
lands the table as of its current version (every row +1); each later version lands its change
data feed as one feed (``insert``/``update_postimage`` +1, ``delete``/``update_preimage`` -1).
Each feed's id is ``delta:<URI>@<version>`` and the version landed last is read from the flow's
newest feed, under the home's lock, so a sync killed anywhere lands every version exactly once:
the next sync starts after the version whose feed was committed (:mod:`.journal`).

Errors (nothing of the version lands; the versions before it have landed):
``source-missing`` (no table, or a version that is gone), ``source-no-cdf`` (no change data feed),
``source-cdf-missing`` (a version's change data was vacuumed), ``source-schema`` (the table's
columns no longer fit the flow), ``source-changed`` (the flow was synced from another table),
``source-version`` (the table's newest version is older than one already landed: it was
re-created).

Reads: ``live.spec`` and ``live.st`` (source flows, their feed counts), the flows' feed history
entries (the version landed last), the source tables. Writes: each version as one feed, through
:meth:`.landing.Landing.feed` (under the journal's lock, taken again here so that reading the
version landed last and landing the next are one step).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute  # noqa: F401  (pa.compute)

from .. import faults
from ..errors import InputError
from ..spec.arrowrecords import ArrowRecordError, conform
from ..storage.deltasource import CDF_PROPERTY, DIFF, SourceTable
from .history import History
from .journal import Journal
from .landing import Landing
from .live import Live

__all__ = ["Sources", "SyncReport", "feed_id_of", "parse_feed_id", "signed_difference"]

_PREFIX = "delta:"
_RELAND = "~reland"  # a re-land's feed id: delta:<URI>@<version>~reland<feed number>
_LOG = logging.getLogger("cbp")


def feed_id_of(uri: str, version: int) -> str:
    """The feed id of ``version`` of source table ``uri``.

    >>> feed_id_of("s3://b/t", 7)
    'delta:s3://b/t@7'
    """
    return f"{_PREFIX}{uri}@{version}"


def parse_feed_id(feed_id: Any) -> tuple[str, int] | None:
    """``(uri, version)`` of a source feed id, None for any other id.

    >>> parse_feed_id("delta:/data/t@12"), parse_feed_id("upload-3")
    (('/data/t', 12), None)
    """
    if not isinstance(feed_id, str) or not feed_id.startswith(_PREFIX) or "@" not in feed_id:
        return None
    uri, _, version = feed_id[len(_PREFIX) :].rpartition("@")
    version = version.split(_RELAND, 1)[0]  # a re-land stands at the version it read
    return (uri, int(version)) if version.isdigit() else None


def signed_difference(was: list[dict[str, Any]], now: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[int]]:
    """What turns the records ``was`` (consolidated: ``_diff`` where not 1) into ``now`` (each +1):
    the records to retract (-1 each, first) and to add (+1 each); an unchanged record is left out.

        >>> signed_difference([{"k": 1}, {"k": 2, "_diff": 2}], [{"k": 2}, {"k": 3}])
        ([{'k': 1}, {'k': 2}, {'k': 3}], [-1, -1, 1])
    """
    counts: dict[str, list[Any]] = {}  # record identity -> [record, multiplicity now - as landed]
    for sign, recs in ((-1, was), (1, now)):
        for rec in recs:
            body = {k: v for k, v in rec.items() if k != DIFF}
            k = json.dumps(body, separators=(",", ":"), ensure_ascii=False, sort_keys=True, default=repr)
            counts.setdefault(k, [body, 0])[1] += sign * int(rec.get(DIFF, 1))
    gone = [(r, -1) for r, n in counts.values() if n < 0 for _ in range(-n)]
    came = [(r, 1) for r, n in counts.values() if n > 0 for _ in range(n)]
    return [r for r, _ in gone + came], [d for _, d in gone + came]


@dataclass
class SyncReport:
    """What a sync landed on one source flow: the table versions (in order) and their feed numbers."""

    flow: str
    uri: str
    versions: list[int]
    feeds: list[int]
    records: int
    relanded: bool = False  # a re-land (Sources.reland): the table's snapshot as signed changes against what was landed
    warnings: list[str] = field(default_factory=list)

    def line(self) -> str:
        if self.relanded:
            if not self.feeds:
                return f"{self.flow}: re-landed nothing: what was landed is version {self.versions[0]} of {self.uri}"
            return (
                f"{self.flow}: re-landed version {self.versions[0]} of {self.uri} ({self.records} changed records "
                f"against what was landed, feed {self.feeds[0]})"
            )
        if not self.versions:
            return f"{self.flow}: {self.uri} has no new version"
        span = (
            f"version {self.versions[0]}"
            if len(self.versions) == 1
            else f"versions {self.versions[0]}..{self.versions[-1]}"
        )
        feeds = f"feeds {self.feeds[0]}..{self.feeds[-1]}"
        return f"{self.flow}: landed {span} of {self.uri} ({self.records} changed records, {feeds})"


class Sources:
    """Syncs source flows: lands each new version of their Delta tables as one feed."""

    def __init__(
        self,
        live: Live,
        journal: Journal,
        history: History,
        landing: Landing,
        contents: Callable[[str], list[dict[str, Any]]] | None = None,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.live, self.journal, self.history, self.landing = live, journal, history, landing
        self.contents = contents  # a flow's consolidated records as landed (Reads.consolidated_records)
        self.notify = notify

    def source_flows(self) -> list[str]:
        """The flows fed from a Delta table."""
        return [n for n, f in self.live.spec.flows.items() if f.source is not None]

    def landed_version(self, flow: str) -> int | None:
        """The newest version of ``flow``'s source table landed, None before the first sync."""
        fl = self.live.spec.flows[flow]
        n = self.live.st.flows[flow].feeds
        while n > 0:
            entry = self.history.feed(self.live.st, flow, n)
            got = parse_feed_id(entry.id) if entry else None
            if got is not None:
                if got[0] != fl.source:
                    raise InputError(
                        f"flow '{flow}': its records came from source table {got[0]} (up to version {got[1]}), "
                        f"but its source is now {fl.source}; a flow follows one table: land the new one in a new "
                        "home, or under a flow of its own",
                        code="source-changed",
                    )
                return got[1]
            n -= 1
        return None

    def sync(self, flows: list[str] | None = None, reland: list[str] | None = None) -> list[SyncReport]:
        """Land every version the source tables of ``flows`` (default: all source flows) gained;
        ``reland``: flows re-landed from their table's current snapshot instead (:meth:`reland`)."""
        if reland:
            for f in reland:
                self._source_flow(f)  # not-source before anything lands
            return [self.reland(f) for f in reland]
        return [self._sync_flow(f) for f in (flows if flows is not None else self.source_flows())]

    def _source_flow(self, flow: str) -> Any:
        fl = self.live.spec.flow(flow)
        if fl.source is None:
            raise InputError(
                f"flow '{flow}' has no 'source'; only flows declared with source: {{delta: URI}} are synced",
                code="not-source",
            )
        return fl

    def _warn(self, report: SyncReport, message: str) -> None:
        report.warnings.append(message)
        if self.notify is not None and getattr(self.notify, "listened", True):  # cbp sync / cbp run: on stderr
            self.notify(f"warning: {message}")
        else:
            _LOG.warning("%s", message)

    def _no_cdf_warning(self, flow: str, uri: str, version: int, what: str) -> str:
        return (
            f"[source-no-cdf] flow '{flow}': source table {uri} has no change data feed ({CDF_PROPERTY}); "
            f"{what} version {version} as it is, but no later version can be synced without it. Enable it "
            f"(ALTER TABLE ... SET TBLPROPERTIES ({CDF_PROPERTY} = true)) before the table changes; if it "
            "changed meanwhile, re-land the flow once after enabling it: " + reland_command(self.live.spec.path, flow)
        )

    def reland(self, flow: str) -> SyncReport:
        """Land the table's current snapshot as signed changes against what ``flow`` holds (retract
        what is gone, add what is new, nothing for what is unchanged) as one feed that stands at the
        table's current version: later syncs read its change data feed from there."""
        fl = self._source_flow(flow)
        assert self.contents is not None, "Sources(contents=...) reads what the flow holds"
        table = SourceTable(fl.source)
        report = SyncReport(flow, fl.source, [], [], 0, relanded=True)
        with self.journal.locked():
            last = self.landed_version(flow)
            version = table.version()
            now = self._conformed(flow, table.rows(version, list(fl.schema.fields)), version)
            recs, diffs = signed_difference(self.contents(flow), [fl.schema.from_storage(r) for r in now.to_pylist()])
            report.versions.append(version)
            if recs or last != version:
                data = fl.schema.to_arrow(recs, diffs=diffs)
                feed_id = f"{feed_id_of(fl.source, version)}{_RELAND}{self.live.st.flows[flow].feeds + 1}"
                landed = self.landing.feed(flow, data, feed_id=feed_id)
                report.feeds.append(landed.feed)
                report.records = len(recs)
        if not table.cdf_enabled(version):
            self._warn(report, self._no_cdf_warning(flow, fl.source, version, "re-landed"))
        return report

    def _sync_flow(self, flow: str) -> SyncReport:
        fl = self._source_flow(flow)
        table = SourceTable(fl.source)
        report = SyncReport(flow, fl.source, [], [], 0)
        newest = table.version()
        while True:
            with self.journal.locked():
                last = self.landed_version(flow)
                if last is not None and last > newest:
                    newest = table.version()
                    if last > newest:
                        raise InputError(
                            f"source table {fl.source}: its newest version is {newest}, but flow '{flow}' already "
                            "landed "
                            f"version {last}; the table was re-created. Land it in a new home",
                            code="source-version",
                        )
                if last is not None and last >= newest:
                    return report
                version = newest if last is None else last + 1
                data = self._source_data(flow, table, version, first=last is None)
                faults.point("sync:read")
                landed = self.landing.feed(flow, data, feed_id=feed_id_of(fl.source, version))
            faults.point("sync:landed")
            report.versions.append(version)
            report.feeds.append(landed.feed)
            report.records += data.num_rows
            if last is None:
                if not table.cdf_enabled(version):
                    self._warn(report, self._no_cdf_warning(flow, fl.source, version, "landed"))
                return report

    def _source_data(self, flow: str, table: SourceTable, version: int, *, first: bool) -> pa.Table:
        """Version ``version`` of the table as records of ``flow`` with ``_diff``: all its rows, or its changes."""
        fl = self.live.spec.flows[flow]
        fields = list(fl.schema.fields)
        if first:
            raw = table.rows(version, fields)
            diff = pa.array(np.ones(raw.num_rows, np.int64))  # not a Python list: 6 million rows at SF 1
        else:
            table.check_cdf(version, reland=reland_command(self.live.spec.path, flow))
            raw = table.changes(version, fields)
            diff = raw.column(DIFF)
            raw = raw.drop_columns([DIFF])
        data = self._conformed(flow, raw, version).append_column(DIFF, diff)
        if fl.key and not first:  # events of a keyed flow: within a version, what went away before what came
            data = data.take(pa.compute.sort_indices(data, [(DIFF, "ascending")]))
        return data

    def _conformed(self, flow: str, raw: pa.Table, version: int) -> pa.Table:
        """Rows read from version ``version`` of the flow's table in the flow's stored form (``source-schema``)."""
        fl = self.live.spec.flows[flow]
        try:
            return conform(fl.schema, raw)
        except ArrowRecordError as e:
            raise InputError(
                f"source table {fl.source} version {version}: record {e.row + 1}: flow '{flow}': {e}. The table's "
                "schema no longer fits the flow: change the flow's schema (cbp plan / cbp upgrade) or the table; "
                "nothing was landed",
                code="source-schema",
            ) from None


def reland_command(yaml_path: str, flow: str) -> str:
    """The command that re-lands ``flow`` from its table's current snapshot."""
    return f"cbp sync {yaml_path} --reland {flow} (Pipeline.sync(reland=['{flow}']))"
