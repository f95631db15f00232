"""The settings of cbp's Airflow DAGs (``dags/cbp.yaml``): where flows, homes, inboxes and markers are,
which Spark master runs the epochs, and time limits.

Homes may be on an object store (``homes: s3://bucket/path``) when the file also names a local
directory (``inbox:``, or ``markers:``): the inbox files and the triggers' announcement markers
stay on the Airflow machine's disk while the pipelines' state is on S3. Without one, such a
configuration is refused with code ``needs-local-home``.

    >>> cfg = load_config("dags/cbp.yaml")                      # doctest: +SKIP
    >>> cfg.home(spec), cfg.markers_dir(spec)                   # doctest: +SKIP
    ('s3://cbp/homes/crawl_queue', '/srv/inbox/.cbp-markers/crawl_queue')
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from typing import Any, Optional

import yaml

from ..errors import RuntimeStateError
from ..spec import PipelineSpec

__all__ = ["DagConfig", "CrawlerConfig", "load_config", "is_remote", "env_file_vars", "RUN_TIMEOUT_MINUTES", "CRAWL_TIMEOUT_MINUTES"]

RUN_TIMEOUT_MINUTES = 120.0  # a run task (cbp run until quiescent) that takes longer is killed, with its Spark JVM
CRAWL_TIMEOUT_MINUTES = 30.0  # a crawl round that takes longer is stopped
MARKERS_IN_INBOX = ".cbp-markers"  # default markers directory of object-store homes: <inbox>/.cbp-markers/<pipeline>
KNOWN = {"flows", "homes", "inbox", "markers", "crawlers", "poke_interval", "spark_master", "env_file",
         "run_timeout_minutes", "crawl_timeout_minutes", "epoch_timeout_seconds"}


def is_remote(location: str) -> bool:
    """Whether a home is on an object store (a URI other than ``file://``)."""
    return "://" in location and not location.startswith("file://")


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
    """Where the YAML files, homes, inboxes and markers are (see ``dags/cbp.yaml``)."""

    flows: str
    homes: str
    inbox: str
    crawlers: dict[str, CrawlerConfig] = field(default_factory=dict)
    poke_interval: float = 5.0
    spark_master: Optional[str] = None
    run_timeout_minutes: float = RUN_TIMEOUT_MINUTES
    crawl_timeout_minutes: float = CRAWL_TIMEOUT_MINUTES
    epoch_timeout_seconds: Optional[float] = None  # passed on as ``cbp run --epoch-timeout`` when set
    markers: Optional[str] = None  # local directory of the announcement markers (default: beside the home, or in the inbox)
    env_file: Optional[str] = None  # a shell file (e.g. state/cluster/env.sh) whose variables the tasks run with

    def home(self, spec: PipelineSpec) -> str:
        if is_remote(self.homes):
            return f"{self.homes.rstrip('/')}/{spec.name}"
        return os.path.join(self.homes, spec.name)

    def inbox_dir(self, spec: PipelineSpec, flow: str) -> str:
        return os.path.join(self.inbox, spec.name, flow)

    def markers_dir(self, spec: PipelineSpec) -> str:
        """The local directory of a pipeline's announcement markers: ``<home>/_airflow`` for a local
        home (as before), ``<markers>/<pipeline>`` otherwise."""
        if self.markers is not None:
            return os.path.join(self.markers, spec.name)
        if is_remote(self.homes):
            return os.path.join(self.inbox, MARKERS_IN_INBOX, spec.name)
        return os.path.join(self.home(spec), "_airflow")

    def task_env(self) -> dict[str, str]:
        """The variables the tasks add to their environment: ``env_file``'s, then ``CBP_SPARK_MASTER``."""
        env = env_file_vars(self.env_file) if self.env_file else {}
        if self.spark_master:
            env["CBP_SPARK_MASTER"] = self.spark_master
        return env


def env_file_vars(path: str) -> dict[str, str]:
    """The variables a shell file sets or changes (``bash`` sources it in an empty environment plus PATH and HOME)."""
    base = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    r = subprocess.run(["bash", "-c", 'set -a; source "$1" >/dev/null && env -0', "cbp-env", path], env=base,
                       capture_output=True, timeout=60)
    if r.returncode != 0:
        raise RuntimeStateError(f"env_file {path}: sourcing it failed: {r.stderr.decode(errors='replace')[-500:]}", code="env-file", path=path)
    out = dict(item.split("=", 1) for item in r.stdout.decode(errors="replace").split("\0") if "=" in item)
    return {k: v for k, v in out.items() if base.get(k) != v and k not in ("_", "SHLVL", "PWD", "OLDPWD")}


def _crawlers(raw: dict[str, Any], path: str, p: Any) -> dict[str, CrawlerConfig]:
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
    return crawlers


def _positive(raw: dict[str, Any], path: str, key: str, default: Optional[float]) -> Optional[float]:
    v = raw.get(key, default)
    if v is None and default is None:
        return None
    try:
        n = float(v)
    except (TypeError, ValueError):
        n = float("nan")
    if not 0 < n < float("inf"):
        raise ValueError(f"{path}: {key} must be a positive number, got {v!r}")
    return n


def _check_local_dirs(raw: dict[str, Any], path: str) -> None:
    """An object-store ``homes`` needs a local ``inbox`` or ``markers`` directory (code ``needs-local-home``)."""
    homes = str(raw.get("homes", ""))
    if not is_remote(homes):
        return
    local = [k for k in ("inbox", "markers") if raw.get(k) is not None]
    if not local:
        raise RuntimeStateError(f"{path}: homes: {homes} is on an object store, but the Airflow DAGs keep their inboxes and "
                                "announcement markers in local files: also give 'inbox:' (or 'markers:'), a local directory",
                                code="needs-local-home", path=homes)
    for k in local:
        if is_remote(str(raw[k])):
            raise RuntimeStateError(f"{path}: {k}: {raw[k]} must be a local directory (homes may be on an object store, "
                                    f"the {k} may not)", code="needs-local-home", path=str(raw[k]))


def load_config(path: str) -> DagConfig:
    """Read ``dags/cbp.yaml``; relative paths are relative to the file."""
    with open(path) as fh:
        raw = yaml.safe_load(fh) or {}
    base = os.path.dirname(os.path.abspath(path))

    def p(x: str) -> str:
        return os.path.normpath(os.path.join(base, os.path.expanduser(str(x))))

    unknown = set(raw) - KNOWN
    if unknown:
        raise ValueError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(KNOWN))}")
    _check_local_dirs(raw, path)
    homes = str(raw.get("homes", "../state"))
    return DagConfig(flows=p(raw.get("flows", "../flows")), homes=homes if is_remote(homes) else p(homes),
                     inbox=p(raw.get("inbox", "../state/inbox")), crawlers=_crawlers(raw, path, p),
                     poke_interval=float(raw.get("poke_interval", 5.0)), spark_master=raw.get("spark_master"),
                     run_timeout_minutes=_positive(raw, path, "run_timeout_minutes", RUN_TIMEOUT_MINUTES),  # type: ignore[arg-type]
                     crawl_timeout_minutes=_positive(raw, path, "crawl_timeout_minutes", CRAWL_TIMEOUT_MINUTES),  # type: ignore[arg-type]
                     epoch_timeout_seconds=_positive(raw, path, "epoch_timeout_seconds", None),
                     markers=p(raw["markers"]) if raw.get("markers") is not None else None,
                     env_file=p(raw["env_file"]) if raw.get("env_file") is not None else None)
