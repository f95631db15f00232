"""Apache Airflow 3 DAGs for cbp pipelines: epochs run as increments land (data-aware scheduling).

:func:`pipeline_dag` turns a ``flows/*.yaml`` into a DAG ``cbp_<pipeline>``:

- **schedule**: one Airflow Asset per external input flow (``file://<home>/flows/<flow>``), any
  of which starts a run. Each asset has an ``AssetWatcher`` (:class:`cbp.triggers.IncrementLanded`),
  so an increment landed outside Airflow (``cbp feed``, the Python API, a file dropped in the
  inbox) starts a run too; a task that lands an increment also emits the asset event itself.
- **land_inbox**: lands ``<inbox>/<flow>/*.jsonl`` files (each once: feed id = file name and
  size) and moves them to ``<inbox>/<flow>/landed/``.
- **run**: ``cbp run`` until quiescent (a subprocess: one Spark driver per run, killed with the task).
  A run with nothing new does nothing.
- **publish_<flow>**: one per output flow that no stage reads, with that flow's Asset as outlet;
  it emits the asset event only if the run wrote records to the flow (skipped otherwise), and
  **publish_epochs** emits ``file://<home>/_cbp/epochs`` when any epoch ran.

:func:`crawler_dag` makes ``cbp_<pipeline>_crawler``: scheduled on the ``crawl_queue`` asset
(and the pipeline's epochs asset, so the frontier left by a capped round is not stranded), it
runs one crawl round (:class:`cbp.crawler.Crawler`) and emits the ``pages`` asset event if it
landed pages. The two DAGs are the continuous loop of paper 001 §1.1.

    >>> dags = make_dags("dags/cbp.yaml")                       # doctest: +SKIP
    >>> sorted(dags)                                            # doctest: +SKIP
    ['cbp_crawl_queue', 'cbp_crawl_queue_crawler', 'cbp_url_count', ...]
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml

from .spec import PipelineSpec, load_spec

__all__ = ["DagConfig", "CrawlerConfig", "load_config", "make_dags", "pipeline_dag", "crawler_dag", "flow_asset", "epochs_asset"]

DEFAULT_ARGS = {"retries": 2}


@dataclass(frozen=True)
class CrawlerConfig:
    """A crawler DAG: corpus directories standing for the web, seed URLs, pages per round."""

    corpus: list[str]
    seed: list[str]
    max_pages: int = 1000
    hosts: list[str] = field(default_factory=list)
    queue: str = "crawl_queue"
    pages: str = "pages"


@dataclass(frozen=True)
class DagConfig:
    """Where the YAML files, homes and inboxes are (see ``dags/cbp.yaml``)."""

    flows: str
    homes: str
    inbox: str
    crawlers: dict[str, CrawlerConfig] = field(default_factory=dict)
    poke_interval: float = 5.0
    spark_master: Optional[str] = None

    def home(self, spec: PipelineSpec) -> str:
        return os.path.join(self.homes, spec.name)

    def inbox_dir(self, spec: PipelineSpec, flow: str) -> str:
        return os.path.join(self.inbox, spec.name, flow)


def load_config(path: str) -> DagConfig:
    """Read ``dags/cbp.yaml``; relative paths are relative to the file."""
    with open(path) as fh:
        raw = yaml.safe_load(fh) or {}
    base = os.path.dirname(os.path.abspath(path))

    def p(x: str) -> str:
        return os.path.normpath(os.path.join(base, os.path.expanduser(str(x))))

    known = {"flows", "homes", "inbox", "crawlers", "poke_interval", "spark_master"}
    unknown = set(raw) - known
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    crawlers = {}
    for name, c in (raw.get("crawlers") or {}).items():
        try:
            crawlers[name] = CrawlerConfig(
                corpus=[p(d) for d in (c["corpus"] if isinstance(c["corpus"], list) else [c["corpus"]])],
                seed=c["seed"] if isinstance(c["seed"], list) else [c["seed"]],
                max_pages=int(c.get("max_pages", 1000)), hosts=list(c.get("hosts", [])),
                queue=c.get("queue", "crawl_queue"), pages=c.get("pages", "pages"))
        except (KeyError, TypeError) as e:
            raise ValueError(f"{path}: crawler '{name}' needs corpus and seed ({e})") from None
    return DagConfig(flows=p(raw.get("flows", "../flows")), homes=p(raw.get("homes", "../state")), inbox=p(raw.get("inbox", "../state/inbox")),
                     crawlers=crawlers, poke_interval=float(raw.get("poke_interval", 5.0)), spark_master=raw.get("spark_master"))


# ---------------------------------------------------------------------------- assets
def flow_asset(home: str, spec: PipelineSpec, flow: str, watch: bool = False, inbox: Optional[str] = None, poke_interval: float = 5.0) -> Any:
    """The Airflow Asset of a flow's Delta table, ``file://<home>/flows/<flow>`` (with its watcher if ``watch``)."""
    from airflow.sdk import Asset, AssetWatcher

    from .triggers import IncrementLanded

    watchers = []
    if watch:
        watchers = [AssetWatcher(name=f"cbp_{spec.name}_{flow}_landed",
                                 trigger=IncrementLanded(home=home, flow=flow, inbox=inbox, poke_interval=poke_interval))]
    return Asset(name=f"cbp.{spec.name}.{flow}", uri=f"file://{os.path.abspath(home)}/flows/{flow}", group="cbp", watchers=watchers)


def epochs_asset(home: str, spec: PipelineSpec) -> Any:
    """An Asset updated whenever the pipeline ran at least one stage epoch."""
    from airflow.sdk import Asset

    return Asset(name=f"cbp.{spec.name}._epochs", uri=f"file://{os.path.abspath(home)}/_cbp/epochs", group="cbp")


def _outputs(spec: PipelineSpec) -> list[str]:
    return [f for f, fl in spec.flows.items() if fl.producer is not None and not fl.consumers]


# ---------------------------------------------------------------------------- task bodies (plain functions, testable)
def land_inbox(yaml_path: str, home: str, inbox: str, flows: list[str]) -> dict[str, list[str]]:
    """Land every ``<inbox>/<flow>/*.jsonl`` once, then move it to ``landed/``; returns the files per flow."""
    from .pipeline import Pipeline
    from .triggers import announce_landed, inbox_files

    landed: dict[str, list[str]] = {}
    pipe: Optional[Pipeline] = None
    for flow in flows:
        d = os.path.join(inbox, flow)
        for name in inbox_files(d):
            src = os.path.join(d, name)
            pipe = pipe or Pipeline(yaml_path, home)
            pipe.feed(flow, src, feed_id=f"inbox:{name}:{os.path.getsize(src)}")
            os.makedirs(os.path.join(d, "landed"), exist_ok=True)
            shutil.move(src, os.path.join(d, "landed", name))
            landed.setdefault(flow, []).append(name)
        if flow in landed:  # the watcher announced these files already: their feeds are not news
            announce_landed(home, flow, landed[flow], len(landed[flow]))
    return landed


def run_pipeline(yaml_path: str, home: str, spark_master: Optional[str] = None) -> dict[str, Any]:
    """``cbp run`` in a subprocess; returns the epochs run and the new increments per output flow."""
    from .pipeline import Pipeline

    pipe = Pipeline(yaml_path, home)
    before = {s: st["epoch"] for s, st in pipe.controller.st["stages"].items()}
    env = dict(os.environ)
    if spark_master:
        env["CBP_SPARK_MASTER"] = spark_master
    proc = subprocess.run([sys.executable, "-m", "cbp.cli", "run", yaml_path, "--home", home], capture_output=True, text=True, env=env)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr[-20000:])
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise RuntimeError(f"cbp run {yaml_path} --home {home} failed with exit code {proc.returncode}: {last}")
    pipe.controller.refresh()
    st = pipe.controller.st
    epochs = 0
    new: dict[str, int] = {f: 0 for f in _outputs(pipe.spec)}
    for s, sst in st["stages"].items():
        for e in range(before.get(s, 0) + 1, sst["epoch"] + 1):
            epochs += 1
            for f, incs in sst["history"][str(e)]["outputs"].items():
                if f in new:
                    new[f] += sum(int(st["flows"][f]["incs"][str(i)]["records"]) for i in incs)
    return {"epochs": epochs, "records": new}


def crawl_round(yaml_path: str, home: str, cfg: CrawlerConfig) -> dict[str, Any]:
    """One crawl round; returns what it fetched and landed."""
    from .crawler import Corpus, Crawler
    from .pipeline import Pipeline

    pipe = Pipeline(yaml_path, home)
    hosts = cfg.hosts + [None] * (len(cfg.corpus) - len(cfg.hosts))
    crawler = Crawler(pipe, [Corpus(d, h) for d, h in zip(cfg.corpus, hosts)], max_pages=cfg.max_pages, queue=cfg.queue, pages=cfg.pages)
    rep = crawler.round(seeds=cfg.seed if crawler.state()["round"] == 0 else ())
    print(rep.line())
    for url, reason in sorted(rep.failed.items()):
        print(f"  could not fetch {url}: {reason}")
    return {"round": rep.round, "landed": len(rep.landed), "failed": len(rep.failed), "frontier": rep.frontier, "increments": rep.increments}


# ---------------------------------------------------------------------------- DAGs
def pipeline_dag(yaml_path: str, cfg: DagConfig) -> Any:
    """The DAG ``cbp_<pipeline>`` for one pipeline YAML (see the module docstring)."""
    from airflow.sdk import DAG, AssetAny, task
    from airflow.sdk.exceptions import AirflowSkipException

    spec = load_spec(yaml_path)
    home = cfg.home(spec)
    inputs = list(spec.external_flows)
    watched = [flow_asset(home, spec, f, watch=True, inbox=cfg.inbox_dir(spec, f), poke_interval=cfg.poke_interval) for f in inputs]
    yaml_path = os.path.abspath(yaml_path)
    with DAG(dag_id=f"cbp_{spec.name}", schedule=AssetAny(*watched) if watched else None, catchup=False, max_active_runs=1,
             default_args=DEFAULT_ARGS, tags=["cbp"], doc_md=f"cbp pipeline `{spec.name}` ({yaml_path}), home `{home}`") as dag:

        @task(task_id="land_inbox")
        def _land() -> dict[str, list[str]]:
            return land_inbox(yaml_path, home, os.path.join(cfg.inbox, spec.name), inputs)

        @task(task_id="run")
        def _run() -> dict[str, Any]:
            return run_pipeline(yaml_path, home, cfg.spark_master)

        ran = _run()
        _land() >> ran
        for flow in _outputs(spec):

            @task(task_id=f"publish_{flow}", outlets=[flow_asset(home, spec, flow)])
            def _publish(result: dict[str, Any], flow: str = flow, **context: Any) -> int:
                n = int(result["records"].get(flow, 0))
                if n == 0:
                    raise AirflowSkipException(f"the run wrote nothing to '{flow}'")
                context["outlet_events"][flow_asset(home, spec, flow)].extra = {"records": n}
                return n

            _publish(ran)

        @task(task_id="publish_epochs", outlets=[epochs_asset(home, spec)])
        def _epochs(result: dict[str, Any]) -> int:
            if not result["epochs"]:
                raise AirflowSkipException("no stage epoch ran: nothing new")
            return int(result["epochs"])

        _epochs(ran)
    return dag


def crawler_dag(yaml_path: str, cfg: DagConfig, crawler: CrawlerConfig) -> Any:
    """The DAG ``cbp_<pipeline>_crawler``: one crawl round per new queue records (see the module docstring)."""
    from airflow.sdk import DAG, AssetAny, task
    from airflow.sdk.exceptions import AirflowSkipException

    spec = load_spec(yaml_path)
    home = cfg.home(spec)
    yaml_path = os.path.abspath(yaml_path)
    pages = flow_asset(home, spec, crawler.pages)
    with DAG(dag_id=f"cbp_{spec.name}_crawler", schedule=AssetAny(flow_asset(home, spec, crawler.queue), epochs_asset(home, spec)),
             catchup=False, max_active_runs=1, default_args=DEFAULT_ARGS, tags=["cbp", "crawler"],
             doc_md=f"crawler of `{spec.name}`: corpus {', '.join(crawler.corpus)}, {crawler.max_pages} pages per round") as dag:

        @task(task_id="crawl_round", outlets=[pages])
        def _crawl(**context: Any) -> dict[str, Any]:
            rep = crawl_round(yaml_path, home, crawler)
            if not rep["landed"]:
                raise AirflowSkipException(f"nothing to crawl (round {rep['round']}, {rep['failed']} failed)")
            context["outlet_events"][pages].extra = {"round": rep["round"], "pages": rep["landed"]}
            return rep

        _crawl()
    return dag


def make_dags(config_path: str) -> dict[str, Any]:
    """Every DAG of the configuration: one per ``flows/*.yaml``, one per configured crawler."""
    cfg = load_config(config_path)
    dags: dict[str, Any] = {}
    for path in sorted(glob.glob(os.path.join(cfg.flows, "*.yaml"))):
        spec = load_spec(path)
        d = pipeline_dag(path, cfg)
        dags[d.dag_id] = d
        if spec.name in cfg.crawlers:
            c = crawler_dag(path, cfg, cfg.crawlers[spec.name])
            dags[c.dag_id] = c
    missing = set(cfg.crawlers) - {load_spec(p).name for p in glob.glob(os.path.join(cfg.flows, "*.yaml"))}
    if missing:
        raise ValueError(f"crawlers configured for unknown pipeline(s): {', '.join(sorted(missing))} (no such YAML in {cfg.flows})")
    return dags
