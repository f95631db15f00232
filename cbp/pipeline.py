"""The Python API: load a pipeline, feed increments, run epochs, read state and outputs.

Example::

    import cbp
    p = cbp.load("flows/url_count.yaml", home="/tmp/cbp-demo")
    p.feed("urls", [{"url": "http://a/"}, {"url": "http://a/"}])
    # [1]
    [r.line() for r in p.run()]
    p.output("counts")
    # [{'url': 'http://a/', 'count': 2}]
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .controller import EpochRecord, EpochReport, Landed, Parts, SyncReport
from .controller.codehash import evolution_status, unfed_waits
from .controller.feedinput import as_table
from .controller.live import check_tuning
from .controller.plan import Plan
from .controller.rewind import RewindReport
from .engine.driver.progress import Poller, Progress
from .errors import InputError
from .spec import PipelineSpec, load_spec
from .spec.feedfiles import MAX_LINE_BYTES, Records
from .storage import Home
from .views.mode import pipeline_ansi

if TYPE_CHECKING:
    from .follow import FollowSummary

__all__ = ["Pipeline", "load", "default_home", "project_dir", "MAX_LINE_BYTES"]

_LOG = logging.getLogger("cbp")


def project_dir(yaml_path: str | os.PathLike[str]) -> str:
    """The project a pipeline YAML belongs to: the directory holding its ``flows/`` directory when
    the YAML lies in one (``proj/flows/x.yaml`` -> ``proj``), else the YAML's own directory.

        >>> project_dir("/srv/proj/flows/url_count.yaml"), project_dir("/tmp/x/p.yaml")
        ('/srv/proj', '/tmp/x')
    """
    d = os.path.dirname(os.path.abspath(os.fspath(yaml_path)))
    return os.path.dirname(d) if os.path.basename(d) == "flows" else d


def default_home(spec: PipelineSpec) -> str:
    """``<project>/state/<pipeline name>`` (see :func:`project_dir`), wherever the command runs from.

    Homes used to be ``state/<pipeline name>`` under the working directory: when the project's home
    does not exist yet but that one does, a warning (logger ``cbp``) names both; pass ``home=`` to
    keep using the old one.
    """
    home = os.path.join(project_dir(spec.path), "state", spec.name)
    old = os.path.abspath(os.path.join("state", spec.name))
    if old != home and not os.path.exists(os.path.join(home, "_cbp")) and os.path.exists(os.path.join(old, "_cbp")):
        _LOG.warning(
            "the home of pipeline '%s' is %s (beside its project's flows/); there is none yet, but there is "
            "one under the working directory, %s: pass --home %s (home= in Python) to use that one",
            spec.name,
            home,
            old,
            old,
        )
    return home


class Pipeline:
    """A pipeline YAML bound to a home directory.

    ``tuning`` goes to the controller: ``max_state_files`` (files per state partition before it
    is compacted, default 8), ``state_row_group`` (rows per row group of state files, 1024),
    ``state_cache_mb`` (decoded state files a Spark Python worker keeps, default
    ``CBP_STATE_CACHE_MB`` or 2048; 0 disables), ``state_scan_fraction`` (fraction of a state
    file's row groups above which a task reads it whole, :data:`cbp.engine.task.bipindex.SCAN_FRACTION`;
    0 always scans, above 1 never), ``state_index_mb`` (partition index a Spark Python worker keeps:
    pages read and the newest epochs' entries, default ``CBP_STATE_INDEX_MB`` or 1024,
    :mod:`cbp.engine.task.indexpages`), ``small_epoch_records`` (new records of an epoch up to which
    the driver routes them itself and the epoch runs without a shuffle,
    :data:`cbp.engine.driver.smallepoch.SMALL_RECORDS`; 0 turns that off), ``backpressure`` (4).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        home: str | None = None,
        *,
        mode: str | None = None,
        spark: Any = None,
        **tuning: Any,
    ) -> None:
        check_tuning(tuning)
        self.spec = load_spec(path, ansi=pipeline_ansi(spark))  # its views' SQL semantics: the session's
        self.home = Home(home or default_home(self.spec))
        self.parts = Parts(self.spec, self.home, mode=mode, spark=spark, **tuning)

    def feed(
        self,
        flow: str,
        records: Records,
        *,
        close: bool = False,
        feed_id: str | None = None,
        source: str | None = None,
        force: bool = False,
    ) -> Landed:
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
        ``feed_id`` makes the feed idempotent: a second feed with the same id lands nothing. A feed
        with an id whose records equal a pending feed landed without one is refused (code
        ``duplicate-feed``: most likely a retry) unless ``force``.
        Returns the increment ids, as a list whose ``feed`` is the number ``output(flow, epoch=N)``
        takes (every feed gets one, an empty feed too).

        Example::

            p.feed("urls", pyarrow.table({"url": ["http://a/", "http://b/"]}))
            # [2]
        """
        fl = self.spec.flow(flow)
        if feed_id is not None and not isinstance(feed_id, str):
            raise InputError(
                f"flow '{flow}': feed_id must be a string, not {type(feed_id).__name__}; nothing was landed",
                code="bad-feed-id",
            )
        if not fl.external:
            raise InputError(
                f"flow '{flow}' is produced by stage '{fl.producer}'; only external flows (external: true) can be fed",
                code="not-external",
            )
        if fl.source is not None:
            raise InputError(
                f"flow '{flow}' is fed from source table {fl.source} by 'cbp sync' (Pipeline.sync()) only; nothing "
                "was landed",
                code="source-flow",
            )
        table = as_table(fl.schema, records, flow, source)
        return self.parts.landing.feed(flow, table, close=close, feed_id=feed_id, force=force)

    def close(self, flow: str) -> Landed:
        """Mark the open increment of a framed input flow complete (a punctuation)."""
        return self.parts.landing.feed(flow, [], close=True)

    def run(
        self,
        max_epochs: int | None = None,
        on_epoch: Callable[[EpochReport], None] | None = None,
        on_start: Callable[[str, int], None] | None = None,
        command: str = "cbp.Pipeline.run()",
        epoch_timeout: float | None = None,
        upgrade: bool = False,
        progress: Callable[[Progress], None] | None = None,
        sync: bool = True,
    ) -> list[EpochReport]:
        """Run stage epochs until no stage is runnable (or ``max_epochs``); one report per epoch.
        Source flows are synced first (:meth:`sync`) unless ``sync=False``.

        First finishes what a killed run left (a pending commit, an interrupted epoch). Raises
        :class:`cbp.errors.BusyError` if another runner works on the same home. An epoch that
        takes longer than ``epoch_timeout`` seconds (or its stage's YAML ``timeout``) is cancelled:
        :class:`cbp.errors.UserCodeError` with code ``timeout``, nothing of it committed.
        A YAML that changed stored data since the home recorded it is :class:`cbp.errors.UsageError`
        ``pipeline-changed`` (see :meth:`plan`), unless ``upgrade`` applies the plan first (:meth:`upgrade`).
        Each epoch is logged (logger ``cbp``: its start at DEBUG, its report line at INFO);
        ``progress`` is called about twice a second while an epoch runs, with a
        :class:`cbp.engine.driver.progress.Progress` (Spark's tasks done of all, records read so far).

        Example::

            import logging; logging.basicConfig(level=logging.INFO)
            p.run(progress=lambda g: print(g.stage, g.tasks_done, g.tasks_total))
        """
        poller = Poller(progress) if progress is not None else None

        def started(stage: str, epoch: int) -> None:
            _LOG.debug("running %s epoch %d", stage, epoch)
            if poller is not None:
                poller.epoch(stage, epoch)
            if on_start is not None:
                on_start(stage, epoch)

        def ended(rep: EpochReport) -> None:
            if poller is not None:
                poller.idle()
            _LOG.info("%s", rep.line())
            if on_epoch is not None:
                on_epoch(rep)

        if upgrade:
            self.upgrade()
        if sync:
            for r in self.sync():
                if r.versions:
                    self.parts.notice(r.line())
        with poller if poller is not None else contextlib.nullcontext():
            reports = self.parts.scheduler.run(max_epochs, ended, started, command, epoch_timeout)
        for warning in unfed_waits(self.parts.live.spec, self.parts.live.st):
            self.parts.notice(f"warning: {warning}")
        return reports

    def plan(self, *, restore_archived: Iterable[str] = (), discard_archived: Iterable[str] = ()) -> Plan:
        """What the YAML changes against the pipeline the home recorded: one :class:`cbp.controller.plan.Change`
        per difference, each ``applies``, ``migrates`` or ``refused`` (nothing is changed).

        Example::

            print("\\n".join(p.plan().lines()))
            # migrates  stage 'count': state rewritten (one pass): partitions 4 -> 8
        """
        return self.parts.upgrade.plan(tuple(restore_archived), tuple(discard_archived))

    def upgrade(
        self,
        *,
        restore_archived: Iterable[str] = (),
        discard_archived: Iterable[str] = (),
        command: str = "cbp.Pipeline.upgrade()",
    ) -> Plan:
        """Apply :meth:`plan` to the home as one durable change (a kill leaves the old pipeline or
        the new one). A plan with a refused change raises :class:`cbp.errors.UsageError` ``plan-refused``.
        ``restore_archived``: stages added back from their archive (with every increment they missed);
        ``discard_archived``: stages added back empty.

        Example::

            p.upgrade(restore_archived=["total"])
        """
        return self.parts.upgrade.upgrade(tuple(restore_archived), tuple(discard_archived), command)

    def rewind(
        self, to_epoch: int, stage: str | None = None, *, command: str = "cbp.Pipeline.rewind()"
    ) -> RewindReport:
        """Put state, outputs and the controller back as they were right after ``stage``'s epoch
        ``to_epoch`` (0: before any stage epoch; ``stage`` may be left out in a one-stage pipeline),
        keeping every feed since pending: the next :meth:`run` recomputes them with today's code.
        One durable change; the undone epochs stay readable (:meth:`undone_output`). See
        docs/howto/rewind.md.

        Example::

            p.rewind(2, stage="count").line()
            # "rewound to after stage 'count' epoch 2: undone count epochs 3-4; pending now: 'words' 2 increment(s)"
        """
        return self.parts.rewind.rewind(to_epoch, stage, command=command)

    def undone_output(self, flow: str, epoch: int, rewind_seq: int | None = None) -> list[dict[str, Any]]:
        """The records ``flow``'s producer wrote in ``epoch`` before a rewind undid that epoch
        (the latest such rewind, or the one committed as change ``rewind_seq``; see :meth:`history`)."""
        return self.parts.rewind.undone_output(flow, epoch, rewind_seq)

    def unfeed(self, flow: str, feed: int) -> dict[str, Any]:
        """Withdraw feed ``feed`` (its number, as :meth:`feed` returned it) of external flow ``flow``
        while no stage has read it; refused with code ``feed-read`` once one has (then :meth:`rewind`).

        Example::

            p.unfeed("words", 3)
            # {'flow': 'words', 'feed': 3, 'increments': [3], 'records': 2}
        """
        return self.parts.feeds.unfeed(flow, feed)

    def set_retention(self, epochs: int | None = None, days: float | None = None, compact_files: int = 32) -> Any:
        """Record how far back the home keeps history and table logs: the last ``epochs`` epochs of each
        stage or those of the last ``days`` days, whichever keeps more (default 30 days); trimmed as
        epochs commit. A flow nobody reads is compacted once ``compact_files`` of its files fell out of
        the retention (0: never). See :mod:`cbp.controller.retention` and docs/howto/retention.md."""
        from .controller.retention import set_retention

        return set_retention(self.home, epochs, days, compact_files)

    def history(self) -> list[dict[str, Any]]:
        """Every run (which feeds each of its stage epochs read, what each wrote) and every rewind,
        oldest first: what ``cbp history`` prints.

        Example::

            [e["kind"] for e in p.history()]
            # ['run', 'run', 'rewind', 'run']
        """
        return self.parts.runs.history()

    def sync(self, flows: list[str] | None = None, *, reland: list[str] | None = None) -> list[SyncReport]:
        """Land what the Delta tables of source flows (``source: {delta: URI}``) gained since the
        last version landed: the first time the table as of its current version, then each later
        version's change data feed as one feed with signed records. Exactly once per version, even
        if a sync is killed; a version that cannot be read (no change data feed, vacuumed, a schema
        that no longer fits) is an :class:`~cbp.errors.InputError` naming the table and version
        (codes in :mod:`cbp.controller.sources`), nothing of it landed. One report per flow.
        A first sync of a table without a change data feed warns (``source-no-cdf``, in the report's
        ``warnings`` and logger ``cbp``).

        ``reland`` (flow names): instead, land each flow's table as it is now as signed changes
        against what the flow holds (retractions of what is gone, what is new, nothing for what
        is unchanged), as one feed standing at the table's current version; later syncs read the
        change data feed from there (after a table written without one).

        Example::

            [r.line() for r in p.sync()]
            # ["orders: landed versions 3..5 of /data/orders (412 changed records, feeds 2..4)"]
        """
        if isinstance(reland, str):
            reland = [reland]
        return self.parts.sources.sync(flows, reland)

    def follow(
        self,
        min_interval: float = 0.0,
        stop: Any = None,
        *,
        poll: float | None = None,
        sources: Sequence[Any] = (),
        on_epoch: Callable[[EpochReport], None] | None = None,
        command: str = "cbp.Pipeline.follow()",
        **options: Any,
    ) -> FollowSummary:
        """Keep running: an epoch round whenever an increment lands (a feed by any process, what
        ``sources`` land, a Delta source's new version), at least ``min_interval`` seconds apart,
        until ``stop`` (a :class:`threading.Event`, or a function returning True) says so; then
        returns after the epoch in flight (:class:`cbp.follow.FollowSummary`). Holds the runner
        lock throughout (:class:`cbp.errors.BusyError` if another runner has it). See :mod:`cbp.follow`.

        Example::

            stop = threading.Event()
            threading.Thread(target=p.follow, kwargs={"stop": stop}).start()
        """
        from .follow import Follower

        return Follower(
            self,
            min_interval=min_interval,
            stop=stop,
            poll=poll,
            sources=sources,
            on_epoch=on_epoch,
            command=command,
            **options,
        ).run()

    def epochs(self, stage: str) -> int:
        """How many epochs ``stage`` has committed."""
        return self.parts.reads.epochs(stage)

    def feeds(self, flow: str) -> int:
        """How many feeds external flow ``flow`` has had (the N of its newest ``output(flow, epoch=N)``)."""
        return self.parts.reads.feeds(flow)

    def epoch_record(self, stage: str, epoch: int) -> EpochRecord:
        """What a committed stage epoch read and wrote (increment ids per flow, records per output)."""
        with self.parts.reading():
            return self.parts.reads.epoch_record(stage, epoch)

    @property
    def is_new(self) -> bool:
        """True while nothing has been fed or run in the home."""
        return self.parts.reads.is_new()

    def idle_reasons(self) -> dict[str, str]:
        """Why each stage that is not runnable now is not (stage -> reason); runnable stages are left out."""
        return self.parts.scheduler.idle_reasons()

    def state(self, stage: str, epoch: int | None = None) -> list[dict[str, Any]]:
        """The stage's state records after its ``epoch`` (default: latest)."""
        with self.parts.reading():
            return self.parts.reads.state(stage, epoch)

    def output(self, flow: str, epoch: int | None = None, consolidated: bool = False) -> list[dict[str, Any]]:
        """The flow's records (only those its producer wrote in ``epoch`` when given), each with its
        ``_diff`` where that is not +1. ``consolidated``: the flow's contents as of ``epoch`` (default:
        all of it), every record once with the sum of its multiplicities (``_diff`` where not 1),
        zeros dropped; a negative sum is :class:`cbp.errors.InputError` code ``negative-multiplicity``.

        Example::

            p.output("urls", consolidated=True)
            # [{'url': 'http://b/'}, {'url': 'http://c/', '_diff': 2}]
        """
        with self.parts.reading():
            if consolidated:
                return self.parts.reads.consolidated_records(flow, epoch)
            return self.parts.reads.output_records(flow, epoch)

    def status(self) -> dict[str, Any]:
        """Stages, epochs run, pending increments per connector, the runner, and anything interrupted."""
        with self.parts.reading():
            out = self.parts.reads.status()
            out.update(evolution_status(self.parts.live.spec, self.parts.live.st, self.parts.evolution.plan))
        return out

    def sql(
        self,
        query: str,
        epoch: None | int | str | Mapping[str, int] = None,
        *,
        session: Callable[[], Any] | None = None,
    ) -> Any:
        """Run a read-only Spark SQL query (Spark's Delta connector) over views named after the
        stateful stages (their state) and the flows (their records); a Spark DataFrame.

        ``epoch`` (``N``, ``{stage: N}`` or ``"stage=N"``): pinned stages show their state after
        that epoch (Delta time travel) and the flows they produce what that epoch wrote. Needs
        the jars of ``bash scripts/setup`` (else code ``no-delta-jars``); a bad query is code ``bad-sql``.
        ``FROM view VERSION AS OF N`` reads one view at epoch N. The statement is checked before
        Spark starts (:mod:`cbp.sqlcheck`); ``session`` gives the SparkSession then (default: the pipeline's).

        Example::

            p.sql("SELECT url, count FROM url_count ORDER BY count DESC LIMIT 3").show()
        """
        from .sql import prepare, run_sql

        with self.parts.reading():
            checked = prepare(self.parts, query, epoch)
            spark = session() if session is not None else self.parts.spark.get()
            return run_sql(self.parts, spark, query, epoch, checked)

    def state_df(self, stage: str, epoch: int | None = None) -> Any:
        """The stage's state records after ``epoch`` (default: latest) as a Spark DataFrame (``state`` in Spark).

        Example::

            p.state_df("url_count").where("count > 1").count()
            # 4
        """
        from .sql import state_df

        with self.parts.reading():
            return state_df(self.parts, self.parts.spark.get(), stage, epoch)

    def flow_df(self, flow: str, epoch: int | None = None) -> Any:
        """The flow's records (those its producer wrote in ``epoch`` when given) as a Spark DataFrame
        (``output`` in Spark).

        Example::

            p.flow_df("counts", epoch=1).count()
            # 3
        """
        from .sql import flow_df

        with self.parts.reading():
            return flow_df(self.parts, self.parts.spark.get(), flow, epoch)


def load(
    path: str | os.PathLike[str], home: str | None = None, *, mode: str | None = None, spark: Any = None
) -> Pipeline:
    """Load a pipeline YAML (validated) bound to ``home`` (default ``state/<pipeline>``)."""
    return Pipeline(path, home, mode=mode, spark=spark)
