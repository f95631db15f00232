"""Each SQL view's Delta table of current rows (:mod:`cbp.storage.viewtable`), kept equal to the view
by the changes that change the view.

A view's flow changes in three kinds of change, and each carries the view table's commit, made once
by the journal like its others (an application transaction at the change's number: after a kill,
the next run finishes the pending change and skips the commits already made):

- an epoch of the view's stage (:meth:`ViewTables.epoch_commits`): the epoch's signed records
  rewrite the buckets they touch; on a home an older cbp wrote (no table yet) the table is made
  from the view's consolidated contents before the epoch plus the epoch's records;
- ``cbp rewind`` (:meth:`ViewTables.rewind_commits`): the table is rewritten to the view's
  contents after the rewind;
- ``cbp upgrade`` rebuilding a view whose SQL changed (:meth:`ViewTables.cleared`): the table is
  emptied with the flow (a retraction of all it held); the rebuilt stage's epochs fill both.

A table someone else changed (``OPTIMIZE`` is harmless; a ``DELETE`` makes a retracted row missing)
is rebuilt from the view's contents at the next epoch. An ``OPTIMIZE`` (or any writer's commit
removing files) between an epoch's planning and its commit, or between a kill and the recovery,
removes files the planned commit removes: the journal then asks :meth:`ViewTables.recommit` for the
commit again, planned on the table as it is (same transaction id: still made once).

Reads: the spec, the snapshot, the view flows' increments (rebuilds), the view tables' heads.
Writes: the view tables' new data files (committed by the journal with the change).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ..engine.common.protocol import TaskResult
from ..errors import RuntimeStateError
from ..spec import PipelineSpec
from ..storage import LAYOUT, Home
from ..storage.viewtable import Diverged, ViewCommit, apply_delta, rebuild
from .backfill import Survey, consolidate, is_synthetic, survey
from .change import Commit
from .history import History
from .live import Live
from .migrate import schema_hex
from .snapshot import Snapshot

__all__ = ["ViewTables", "view_flows"]

_DIFF = "_diff"
_VIEWS_RUN = "cbp.views.run:"  # the translators a SQL view's stages run


def view_flows(spec: PipelineSpec) -> dict[str, str]:
    """The pipeline's SQL views: flow -> the stage that writes it (the flows and stages generated
    inside a view, ``v__j1``, are not views).

    Example::

        view_flows(parts.live.spec)  # {'big_orders': 'big_orders', 'by_region': 'by_region'}
    """
    out = {}
    for f, fl in spec.flows.items():
        st = spec.stages.get(fl.producer or "")
        if st is not None and "__" not in f and str(st.translator_path or "").startswith(_VIEWS_RUN):
            out[f] = st.name
    return out


class ViewTables:
    """Plans the view tables' commits of the changes that change views (see the module docstring)."""

    def __init__(self, home: Home, live: Live, history: History) -> None:
        self.home, self.live, self.history = home, live, history

    def schema(self, view: str) -> pa.Schema:
        """The view table's columns: the view's (as its flow stores them), no ``_diff``."""
        return pa.schema(list(self.live.spec.flows[view].schema.arrow))

    def epoch_commits(
        self, stage: str, results: Iterable[TaskResult], app: tuple[str, int]
    ) -> tuple[list[Commit], list[str]]:
        """The view tables' commits of an epoch of ``stage`` (those of the views it writes), and the
        files written for them."""
        commits: list[Commit] = []
        written: list[str] = []
        views = view_flows(self.live.spec)
        results = list(results)
        for flow in self.live.spec.stages[stage].outputs:
            if views.get(flow) != stage:
                continue
            adds = [a for r in results for a in r.outputs.get(flow, [])]
            vc = self._epoch_commit(flow, self._records(flow, adds), f"c{app[1]}")
            if vc is None:
                continue
            rel = LAYOUT.view_table(flow)
            commits.append(Commit(rel, "", tuple(vc.adds), tuple(vc.removes), *app, overwrite=vc.overwrite))
            written += vc.written
        return commits, written

    def _records(self, flow: str, adds: list[dict[str, Any]]) -> pa.Table:
        """The signed records of an epoch's files of ``flow`` (the view's columns and ``_diff``)."""
        schema = self.schema(flow).append(pa.field(_DIFF, pa.int64()))
        parts = []
        for a in adds:
            t = pq.read_table(self.home.path(LAYOUT.flow(flow), a["path"]), filesystem=self.home.fs)
            if _DIFF not in t.column_names:
                t = t.append_column(_DIFF, pa.array([1] * t.num_rows, pa.int64()))
            parts.append(t.select(schema.names).cast(schema))
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def _epoch_commit(self, flow: str, delta: pa.Table, tag: str) -> ViewCommit | None:
        """The view table's commit for an epoch's ``delta``: its buckets rewritten, or (no table yet, or
        one someone changed) the whole table made from the contents before the epoch and ``delta``."""
        rel, schema = LAYOUT.view_table(flow), self.schema(flow)
        head = self.home.head_files(rel)
        if head is not None and head[0] > 0:
            if not delta.num_rows:
                return None
            try:
                return apply_delta(self.home, rel, schema, head[1], delta, tag)
            except Diverged:
                pass  # rebuilt below
        else:
            self.home.ensure_table(rel, schema, "")
        both = pa.concat_tables([self.contents(flow, self.live.st), delta])
        return rebuild(self.home, rel, schema, both, tag)

    def recommit(self, record: dict[str, Any], c: Commit, snap: dict[str, Any]) -> Commit:
        """View table commit ``c`` of pending change ``record`` planned again on the table's files now
        (another writer removed some that ``c`` removes): the epoch's records (the files the
        change adds to the view's flow) applied to them, or, if they lack a row it retracts, the
        view's contents in ``snap`` (the snapshot the change makes, its flow commits made)."""
        flow = c.table[len(LAYOUT.view_table("")) :]
        rel, schema, tag = c.table, self.schema(flow), f"c{c.version}"
        head = self.home.head_files(rel)
        flow_adds = [a for x in record["commits"] if x["table"] == LAYOUT.flow(flow) for a in x["adds"]]
        try:
            if head is None or not flow_adds:
                raise Diverged(flow)
            vc = apply_delta(self.home, rel, schema, head[1], self._records(flow, flow_adds), tag)
        except Diverged:
            vc = rebuild(self.home, rel, schema, self.contents(flow, Snapshot.from_json(snap)), tag)
        return Commit(rel, "", tuple(vc.adds), tuple(vc.removes), c.app, c.version, overwrite=vc.overwrite)

    def contents(self, flow: str, snap: Snapshot) -> pa.Table:
        """The view's consolidated contents in snapshot ``snap`` (its columns and ``_diff``)."""
        return self._consolidated(survey(self.home, self.history, snap, flow))

    def _consolidated(self, sv: Survey) -> pa.Table:
        try:
            if sv.missing:
                raise ValueError("missing", sv.missing[0])
            got = consolidate(self.home, self.live.spec, sv)
        except ValueError as e:
            raise RuntimeStateError(
                f"cannot write the table of view '{sv.flow}' ({self.home.uri(LAYOUT.view_table(sv.flow))}): its "
                f"flow's contents cannot be read: {e.args}",
                code="damaged-home",
            ) from None
        schema = self.schema(sv.flow).append(pa.field(_DIFF, pa.int64()))
        return pa.Table.from_pylist([{**r, _DIFF: d} for r, d in zip(got.rows, got.diffs)], schema=schema)

    def rewind_commits(
        self, new: Snapshot, target: Snapshot, undone: Iterable[str], gone: Mapping[str, Iterable[int]], seq: int
    ) -> list[Commit]:
        """A rewind's commits (``cbp:rewind`` at ``seq``) rewriting the tables of the views whose stages
        it rewinds (``undone``) to the views' contents in ``new``, the snapshot after it: the flow's
        increments at its version in ``target`` (the files the rewind restores) and those collected
        before, but not those of the epochs it undoes (``gone``)."""
        commits = []
        stages = set(undone)
        for flow, stage in view_flows(self.live.spec).items():
            rel = LAYOUT.view_table(flow)
            if stage not in stages or self.home.head_files(rel) is None or flow not in new.flows:
                continue
            version = target.flows[flow].version if flow in target.flows else None
            sv = self._rewound(flow, new, version, set(gone.get(flow, ())))
            vc = rebuild(self.home, rel, self.schema(flow), self._consolidated(sv), f"r{seq}")
            commits.append(Commit(rel, "", tuple(vc.adds), (), "cbp:rewind", seq, overwrite=True))
        return commits

    def _rewound(self, flow: str, new: Snapshot, version: int | None, skip: set[int]) -> Survey:
        """The increments a rewind leaves ``flow`` (in ``new``): its live ones at ``version`` and those
        collected before, but not those of epochs it undoes (``skip``)."""
        sv = Survey(flow)
        if version is None:
            return sv
        for i, m in new.flows[flow].incs.items():
            if not is_synthetic(m.producer):
                sv.by_version.setdefault(version, []).append(i)
        for i, e in self.history.collected_entries(new, flow).items():
            if i not in skip and not is_synthetic(e.producer):
                sv.by_version.setdefault(version if e.version is None else e.version, []).append(i)
        return sv

    def cleared(self, flow: str, app: tuple[str, int]) -> list[Commit]:
        """The commit emptying view ``flow``'s table (if it has one), for an upgrade rebuilding the view."""
        rel = LAYOUT.view_table(flow)
        if flow not in view_flows(self.live.spec) or self.home.head_files(rel) is None:
            return []
        return [Commit(rel, "", (), (), *app, overwrite=True, schema=schema_hex(self.schema(flow)))]
