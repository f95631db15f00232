"""Apache Airflow 3 DAGs for cbp pipelines: epochs run as increments land (data-aware scheduling).

:func:`pipeline_dag` turns a ``flows/*.yaml`` into a DAG ``cbp_<pipeline>``:

- **schedule**: one Airflow Asset per external input flow (``file://<home>/flows/<flow>``, or
  ``s3://.../flows/<flow>`` for a home on S3; settings in :mod:`cbp.airflow.config`), any of which
  starts a run. Each asset has an ``AssetWatcher`` (:class:`cbp.airflow.triggers.IncrementLanded`),
  so an increment landed outside Airflow (``cbp feed``, the Python API, a file dropped in the
  inbox) starts a run too; a task that lands an increment also emits the asset event itself.
- **land_inbox**: lands ``<inbox>/<flow>/*.jsonl`` and ``*.parquet`` files (each once: feed id =
  file name, size and content hash) and moves them to ``<inbox>/<flow>/landed/`` (beside an earlier
  file of the name). Files still being written wait: hidden or temporary names, and files modified
  in the last ``inbox_settle_seconds``. A file that cannot be landed (bad JSON, a record that does
  not fit the flow, not UTF-8, unreadable, a symlink) goes to ``<inbox>/<flow>/rejected/`` with
  ``<name>.error.txt`` beside it (error code and message), and the files behind it are landed all
  the same. Nothing is followed out of the inbox (:mod:`cbp.airflow.inbox`).
- **run**: ``cbp run`` until quiescent (a subprocess in its own process group: one Spark driver per
  run). The task has an ``execution_timeout`` (``run_timeout_minutes``); when it fires, or the task
  is killed, the whole process group (``cbp run`` and its Spark JVM) is killed. A run with nothing
  new does nothing.
  For a pipeline named in ``follow:`` of the configuration, the task instead makes sure that one
  ``cbp run --follow`` process follows the home (:mod:`cbp.airflow.follower`: started detached,
  its pid recorded, never twice) and returns: that warm driver runs every increment as it lands.
- **publish_<flow>**: one per output flow that no stage reads, with that flow's Asset as outlet;
  it emits the asset event only if the run wrote records to the flow (skipped otherwise), and
  **publish_epochs** emits ``file://<home>/_cbp/epochs`` when any epoch ran.

:func:`crawler_dag` makes ``cbp_<pipeline>_crawler``: scheduled on the ``crawl_queue`` asset
(and the pipeline's epochs asset, so the frontier left by a capped round is not stranded), it
runs one crawl round (done by the crawl application, :data:`cbp.airflow.config.CRAWL_APPS`:
:mod:`cbp_crawl.airflow`; ``execution_timeout`` = ``crawl_timeout_minutes``) and emits the
``pages`` asset event if it landed pages. The two DAGs are the continuous loop of paper 001 §1.1.

:func:`make_dags` builds them all. A pipeline that cannot be built (a broken YAML, two YAMLs of one
name, a DAG id taken twice) does not take the others with it: its DAG (:func:`broken_dag`) has one
task that fails, once, with the error's code and message, which is also logged.

Example (Airflow's DAG processor does this through ``dags/cbp_dags.py``)::

    dags = make_dags("dags/cbp.yaml")
    sorted(dags)
    # ['cbp_crawl_queue', 'cbp_crawl_queue_crawler', 'cbp_url_count', ...]
"""

from __future__ import annotations

import glob
import logging
import os
import re
from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any
from urllib.parse import quote

from ..errors import RuntimeStateError
from ..spec import PipelineSpec, load_spec
from .config import (
    BAD_CONFIG,
    CRAWL_TIMEOUT_MINUTES,
    INBOX_SETTLE_SECONDS,
    RUN_TIMEOUT_MINUTES,
    CrawlerConfig,
    DagConfig,
    is_remote,
    load_config,
)
from .inbox import land_inbox
from .processes import ProcessGroup
from .taskbodies import _outputs, crawl_round, follow_pipeline, run_pipeline, task_environ

__all__ = [
    "DagConfig",
    "CrawlerConfig",
    "load_config",
    "make_dags",
    "pipeline_dag",
    "crawler_dag",
    "flow_asset",
    "epochs_asset",
    "land_inbox",
    "run_pipeline",
    "crawl_round",
    "ProcessGroup",
    "home_uri",
    "task_environ",
    "broken_dag",
    "RUN_TIMEOUT_MINUTES",
    "CRAWL_TIMEOUT_MINUTES",
]

DEFAULT_ARGS = {"retries": 2}
_LOG = logging.getLogger(__name__)


# ---------------------------------------------------------------------------- assets
def home_uri(home: str) -> str:
    """The home as a URI: ``file://<absolute path>`` for a local home, the home itself on an object store;
    the path percent-encoded (Airflow would cut an Asset URI at a ``#`` or ``?``)."""
    if is_remote(home):
        scheme, _, rest = home.rstrip("/").partition("://")
        bucket, slash, prefix = rest.partition("/")
        return f"{scheme}://{bucket}{slash}{quote(prefix, safe='/')}"
    return f"file://{quote(os.path.abspath(home), safe='/')}"


def flow_asset(
    home: str,
    spec: PipelineSpec,
    flow: str,
    watch: bool = False,
    inbox: str | None = None,
    poke_interval: float = 5.0,
    markers: str | None = None,
    settle: float = INBOX_SETTLE_SECONDS,
) -> Any:
    """The Airflow Asset of a flow's Delta table, ``<home URI>/flows/<flow>`` (with its watcher if ``watch``)."""
    from airflow.sdk import Asset, AssetWatcher

    from .triggers import IncrementLanded

    watchers = []
    source = spec.flows[flow].source
    if watch and source is not None:  # fed from a Delta table: fire when it gains a version (cbp run syncs first)
        from .sourcetrigger import SourceVersionAdded

        watchers = [
            AssetWatcher(
                name=f"cbp_{spec.name}_{flow}_source",
                trigger=SourceVersionAdded(home, flow, source, poke_interval, markers),
            )
        ]
    elif watch:
        trigger = IncrementLanded(
            home=home, flow=flow, inbox=inbox, poke_interval=poke_interval, markers=markers, settle=settle
        )
        watchers = [AssetWatcher(name=f"cbp_{spec.name}_{flow}_landed", trigger=trigger)]
    return Asset(name=f"cbp.{spec.name}.{flow}", uri=f"{home_uri(home)}/flows/{flow}", group="cbp", watchers=watchers)


def epochs_asset(home: str, spec: PipelineSpec) -> Any:
    """An Asset updated whenever the pipeline ran at least one stage epoch."""
    from airflow.sdk import Asset

    return Asset(name=f"cbp.{spec.name}._epochs", uri=f"{home_uri(home)}/_cbp/epochs", group="cbp")


# ---------------------------------------------------------------------------- DAGs
_RUN_OPERATOR: type | None = None


def run_operator() -> type:
    """The operator of the ``run`` task: :func:`run_pipeline`, whose process group ``on_kill`` kills.

    Airflow calls ``on_kill`` when the task's ``execution_timeout`` fires and when the task is
    terminated (SIGTERM: marked failed, cleared, the worker stopped)."""
    global _RUN_OPERATOR
    if _RUN_OPERATOR is None:
        from airflow.sdk import BaseOperator

        class CbpRunOperator(BaseOperator):
            """``cbp run`` until quiescent (see :func:`cbp.airflow.dagfactory.run_pipeline`)."""

            ui_color = "#e8f4ff"

            def __init__(
                self,
                *,
                yaml_path: str,
                home: str,
                spark_master: str | None = None,
                epoch_timeout: float | None = None,
                env_file: str | None = None,
                **kwargs: Any,
            ) -> None:
                super().__init__(**kwargs)
                self.yaml_path, self.home, self.spark_master, self.epoch_timeout = (
                    yaml_path,
                    home,
                    spark_master,
                    epoch_timeout,
                )
                self.env_file = env_file
                self._group: ProcessGroup | None = None

            def execute(self, context: Any) -> dict[str, Any]:
                return run_pipeline(
                    self.yaml_path,
                    self.home,
                    self.spark_master,
                    epoch_timeout=self.epoch_timeout,
                    started=lambda g: setattr(self, "_group", g),
                    env=self.task_env(),
                )

            def task_env(self) -> dict[str, str]:
                """The variables ``cbp run`` gets besides the task's own: env_file's (sourced now), the master."""
                return DagConfig(
                    flows="", homes="", inbox="", spark_master=self.spark_master, env_file=self.env_file
                ).task_env()

            def on_kill(self) -> None:
                if self._group is not None:
                    self._group.kill()

        CbpRunOperator.__module__, CbpRunOperator.__qualname__ = __name__, "CbpRunOperator"
        _RUN_OPERATOR = CbpRunOperator
    return _RUN_OPERATOR


def pipeline_dag(yaml_path: str, cfg: DagConfig, spec: PipelineSpec | None = None) -> Any:
    """The DAG ``cbp_<pipeline>`` for one pipeline YAML (see the module docstring); ``spec``: the YAML's,
    when the caller has loaded it already."""
    from airflow.sdk import DAG, AssetAny, task

    spec = spec or load_spec(yaml_path)
    home = cfg.home(spec)
    # source flows have no inbox: they are synced
    inputs = [f for f in spec.external_flows if spec.flows[f].source is None]
    markers = cfg.markers_dir(spec)
    watched = [
        flow_asset(
            home,
            spec,
            f,
            watch=True,
            inbox=cfg.inbox_dir(spec, f),
            poke_interval=cfg.poke_interval,
            markers=markers,
            settle=cfg.inbox_settle_seconds,
        )
        for f in spec.external_flows
    ]
    yaml_path = os.path.abspath(yaml_path)
    timeout = timedelta(minutes=cfg.run_timeout_minutes)
    with DAG(
        dag_id=f"cbp_{spec.name}",
        schedule=AssetAny(*watched) if watched else None,
        catchup=False,
        max_active_runs=1,
        default_args={**DEFAULT_ARGS, "execution_timeout": timeout},
        tags=["cbp"],
        doc_md=f"cbp pipeline `{spec.name}` ({yaml_path}), home `{home}`",
    ) as dag:

        @task(task_id="land_inbox")
        def _land() -> dict[str, Any]:
            with task_environ(cfg.task_env()):
                return land_inbox(
                    yaml_path,
                    home,
                    os.path.join(cfg.inbox, spec.name),
                    inputs,
                    markers=markers,
                    settle=cfg.inbox_settle_seconds,
                )

        ran, result = _run_task(yaml_path, home, cfg, spec, timeout)
        _land() >> ran
        _publish_tasks(home, spec, result)
    return dag


def _run_task(yaml_path: str, home: str, cfg: DagConfig, spec: PipelineSpec, timeout: timedelta) -> tuple[Any, Any]:
    """The ``run`` task (in the DAG being built) and its result: a :func:`run_operator`, or for a
    pipeline in ``follow:`` a task that makes sure a follower runs (:mod:`cbp.airflow.follower`)."""
    from airflow.sdk import task

    if spec.name in cfg.follow:

        @task(task_id="run")
        def _follow() -> dict[str, Any]:
            return follow_pipeline(yaml_path, home, cfg, spec)

        ran = _follow()
        return ran, ran
    ran = run_operator()(
        task_id="run",
        yaml_path=yaml_path,
        home=home,
        spark_master=cfg.spark_master,
        epoch_timeout=cfg.epoch_timeout_seconds,
        env_file=cfg.env_file,
        execution_timeout=timeout,
    )
    return ran, ran.output


def _publish_tasks(home: str, spec: PipelineSpec, result: Any) -> None:
    """The ``publish_<flow>`` tasks (one per output flow no stage reads) and ``publish_epochs``, each
    reading the run's ``result`` and skipped if it has nothing to publish."""
    from airflow.sdk import task
    from airflow.sdk.exceptions import AirflowSkipException

    for flow in _outputs(spec):

        @task(task_id=f"publish_{flow}", outlets=[flow_asset(home, spec, flow)])
        def _publish(result: dict[str, Any], flow: str = flow, **context: Any) -> int:
            n = int(result["records"].get(flow, 0))
            if n == 0:
                raise AirflowSkipException(f"the run wrote nothing to '{flow}'")
            context["outlet_events"][flow_asset(home, spec, flow)].extra = {"records": n}
            return n

        _publish(result)

    @task(task_id="publish_epochs", outlets=[epochs_asset(home, spec)])
    def _epochs(result: dict[str, Any]) -> int:
        if not result["epochs"]:
            raise AirflowSkipException("no stage epoch ran: nothing new")
        return int(result["epochs"])

    _epochs(result)


def crawler_dag(yaml_path: str, cfg: DagConfig, crawler: CrawlerConfig, spec: PipelineSpec | None = None) -> Any:
    """The DAG ``cbp_<pipeline>_crawler``: one crawl round per new queue records (see the module docstring)."""
    from airflow.sdk import DAG, AssetAny, task
    from airflow.sdk.exceptions import AirflowSkipException

    spec = spec or load_spec(yaml_path)
    home = cfg.home(spec)
    yaml_path = os.path.abspath(yaml_path)
    pages = flow_asset(home, spec, crawler.pages)
    timeout = timedelta(minutes=cfg.crawl_timeout_minutes)
    from airflow.timetables.assets import AssetOrTimeSchedule
    from airflow.timetables.trigger import DeltaTriggerTimetable

    # new queue records, or every revisit_min seconds: revisits fall due with no queue change
    schedule = AssetOrTimeSchedule(
        timetable=DeltaTriggerTimetable(timedelta(seconds=crawler.revisit_min)),
        # (Airflow's annotation names its serialized assets; the SDK's are what a DAG file gives)
        assets=AssetAny(flow_asset(home, spec, crawler.queue), epochs_asset(home, spec)),  # type: ignore[arg-type]
    )
    with DAG(
        dag_id=f"cbp_{spec.name}_crawler",
        schedule=schedule,
        catchup=False,
        max_active_runs=1,
        default_args={**DEFAULT_ARGS, "execution_timeout": timeout},
        tags=["cbp", "crawler"],
        doc_md=f"crawler of `{spec.name}`: corpus {', '.join(crawler.corpus)}, {crawler.max_pages} pages per round",
    ) as dag:

        @task(task_id="crawl_round", outlets=[pages], execution_timeout=timeout)
        def _crawl(**context: Any) -> dict[str, Any]:
            rep = crawl_round(yaml_path, home, crawler, env=cfg.task_env())
            if not rep["landed"]:
                raise AirflowSkipException(
                    f"nothing landed (round {rep['round']}: {rep['unchanged']} unchanged, {rep['failed']} failed)"
                )
            context["outlet_events"][pages].extra = {"round": rep["round"], "pages": rep["landed"]}
            return rep

        _crawl()
    return dag


# ---------------------------------------------------------------------------- what cannot be built
def broken_dag(dag_id: str, source: str, error: BaseException) -> Any:
    """A DAG whose one task, ``broken``, fails with ``error`` (once, ``@once``): a pipeline that cannot be
    built shows in Airflow, with its error code and message, instead of taking the folder's other DAGs with it."""
    from airflow.sdk import DAG, task

    code = getattr(error, "code", type(error).__name__)
    with DAG(
        dag_id=dag_id,
        schedule="@once",
        catchup=False,
        max_active_runs=1,
        tags=["cbp", "broken"],
        description=f"not built: [{code}] {error}"[:500],
        doc_md=f"`{source}` could not be made a DAG: `[{code}]` {error}",
    ) as dag:

        @task(task_id="broken", retries=0)
        def _broken() -> None:
            raise error

        _broken()
    return dag


def _flow_files(cfg: DagConfig, config_path: str) -> list[str]:
    if not os.path.isdir(cfg.flows):
        raise RuntimeStateError(
            f"{config_path}: flows: {cfg.flows} is not a directory", code=BAD_CONFIG, path=cfg.flows
        )
    return sorted(glob.glob(os.path.join(glob.escape(cfg.flows), "*.yaml")))  # a '[' in the path is no pattern


def _read_flows(
    cfg: DagConfig, config_path: str
) -> tuple[dict[str, tuple[str, PipelineSpec]], dict[str, tuple[str, BaseException]]]:
    """The pipelines of ``flows/`` by name, and the YAML files that cannot be used, by the DAG id each stands for
    (``cbp_<pipeline>``, or ``cbp_<file name>`` for a file that cannot be read)."""
    specs: dict[str, tuple[str, PipelineSpec]] = {}
    broken: dict[str, tuple[str, BaseException]] = {}
    first: dict[str, str] = {}
    for path in _flow_files(cfg, config_path):
        try:
            spec = load_spec(path)
        except Exception as e:  # noqa: BLE001 - whatever it is, it is this file's, shown in its own DAG
            broken.setdefault("cbp_" + re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.basename(path)[:-5]), (path, e))
            continue
        if spec.name in first:  # one DAG id and one default home per pipeline name: neither YAML is run
            specs.pop(spec.name, None)
            broken[f"cbp_{spec.name}"] = (
                path,
                RuntimeStateError(
                    f"{path} and {first[spec.name]} both declare pipeline '{spec.name}'; "
                    f"give each YAML in {cfg.flows} its own name",
                    code="duplicate-pipeline",
                ),
            )
            continue
        first[spec.name] = path
        specs[spec.name] = (path, spec)
    return specs, broken


def _plan(cfg: DagConfig, config_path: str) -> dict[str, list[tuple[str, Callable[[], Any]]]]:
    """Each DAG id and what makes its DAG: a pipeline's, a crawler's, or a broken one's (more than one: a collision)."""
    specs, broken = _read_flows(cfg, config_path)
    plan: dict[str, list[tuple[str, Callable[[], Any]]]] = {}
    for name, (path, spec) in specs.items():  # each YAML loaded once (Airflow parses the DAGs file often)
        plan.setdefault(f"cbp_{name}", []).append((path, partial(pipeline_dag, path, cfg, spec)))
        if name in cfg.crawlers:
            plan.setdefault(f"cbp_{name}_crawler", []).append(
                (
                    f"{config_path}: crawlers: {name}",
                    partial(crawler_dag, path, cfg, cfg.crawlers[name], spec),
                )
            )
    for name in sorted(set(cfg.crawlers) - set(specs)):  # the crawler of a pipeline that is broken or missing
        source, error = broken.get(f"cbp_{name}") or (
            config_path,
            RuntimeStateError(
                f"{config_path}: crawlers: {name}: no pipeline '{name}' in {cfg.flows}", code="unknown-pipeline"
            ),
        )
        broken[f"cbp_{name}_crawler"] = (source, error)
    for dag_id, (source, error) in broken.items():
        while dag_id in plan:  # a good DAG keeps its id
            dag_id += "_broken"
        plan[dag_id] = [(source, partial(_raise, error))]  # make_dags logs it and makes its broken DAG
    return plan


def _raise(error: BaseException) -> Any:
    raise error


def make_dags(config_path: str) -> dict[str, Any]:
    """Every DAG of the configuration: one per ``flows/*.yaml``, one per configured crawler.

    A bad ``cbp.yaml`` raises (Airflow shows the import error). A pipeline YAML that cannot be
    loaded or built, two YAMLs of one pipeline name, a crawler of a missing pipeline, or two DAGs
    of one id (a pipeline ``x_crawler`` and the crawler of ``x``, code ``dag-id-collision``) does
    not: it becomes a DAG whose one task fails with the error (:func:`broken_dag`), logged here,
    and every other DAG is built."""
    cfg = load_config(config_path)
    dags: dict[str, Any] = {}
    for dag_id, makers in sorted(_plan(cfg, config_path).items()):
        source, make = makers[0]
        try:
            if len(makers) > 1:
                raise RuntimeStateError(
                    f"DAG id {dag_id} would be made by {' and by '.join(s for s, _ in makers)}; rename the pipeline",
                    code="dag-id-collision",
                )
            dags[dag_id] = make()
            continue
        except Exception as e:  # noqa: BLE001 - shown in the DAG that stands for it
            error: BaseException = e
        _LOG.error("cbp: %s: not made a DAG: [%s] %s", source, getattr(error, "code", type(error).__name__), error)
        dags[dag_id] = broken_dag(dag_id, source, error)
    return dags
