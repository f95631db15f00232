"""The settings of cbp's Airflow DAGs (``dags/cbp.yaml``): where flows, homes, inboxes and markers are,
which Spark master runs the epochs, and time limits.

Homes may be on an object store (``homes: s3://bucket/path``) when the file also names a local
directory (``inbox:``, or ``markers:``): the inbox files and the triggers' announcement markers
stay on the Airflow machine's disk while the pipelines' state is on S3. Without one, such a
configuration is refused with code ``needs-local-home``.

``follow: [names]`` hands those pipelines to a follower (one warm ``cbp run --follow`` process,
:mod:`cbp.airflow.follower`) instead of a ``cbp run`` per DAG run.

The file is read with the bounded YAML reader of pipeline files (no alias bombs; a key given twice
is ``duplicate-key``). Every other bad setting is refused when the file is loaded with code
``bad-config``, the file and the key named: an unknown key (at the top or in a crawler), a
number that is not finite and positive (time limits at most a week, as ``cbp run
--epoch-timeout``), ``max_pages`` that is not a whole number >= 1, a ``homes`` cbp cannot keep a
home in (:func:`cbp.storage.location.check_location`; ``file:`` URIs name local directories).

Example (a configuration with ``homes: s3://cbp/homes`` and ``inbox: /srv/inbox``)::

    cfg = load_config("dags/cbp.yaml")
    cfg.home(spec), cfg.markers_dir(spec)
    # ('s3://cbp/homes/crawl_queue', '/srv/inbox/.cbp-markers/crawl_queue')
"""

from __future__ import annotations

import importlib.metadata
import math
import os
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import RuntimeStateError, UsageError
from ..spec import MAX_TIMEOUT, PipelineSpec, load_yaml
from ..storage.location import check_location, local_file_uri
from .inbox import INBOX_SETTLE_SECONDS

__all__ = [
    "DagConfig",
    "CrawlerConfig",
    "load_config",
    "is_remote",
    "env_file_vars",
    "RUN_TIMEOUT_MINUTES",
    "CRAWL_TIMEOUT_MINUTES",
    "BAD_CONFIG",
    "INBOX_SETTLE_SECONDS",
]

RUN_TIMEOUT_MINUTES = 120.0  # a run task (cbp run until quiescent) that takes longer is killed, with its Spark JVM
CRAWL_TIMEOUT_MINUTES = 30.0  # a crawl round that takes longer is stopped
MARKERS_IN_INBOX = ".cbp-markers"  # default markers directory of object-store homes: <inbox>/.cbp-markers/<pipeline>
KNOWN = {
    "flows",
    "homes",
    "inbox",
    "markers",
    "crawlers",
    "poke_interval",
    "spark_master",
    "env_file",
    "run_timeout_minutes",
    "crawl_timeout_minutes",
    "epoch_timeout_seconds",
    "inbox_settle_seconds",
    "follow",
}
CRAWLER_KEYS = {
    "corpus",
    "seed",
    "max_pages",
    "hosts",
    "queue",
    "pages",
    "revisit_min",
    "revisit_max",
    "gone_after",
    "max_per_host",
}
BAD_CONFIG = "bad-config"  # the code of a bad setting
#: The entry-point group of crawl applications: modules with ``is_host_name(host)``,
#: ``seed_ok(url)`` and ``crawl_round(yaml_path, home, cfg)``. The crawl application's is
#: ``cbp_crawl.airflow`` (declared in pyproject.toml); cbp imports no application.
CRAWL_APPS = "cbp.airflow.crawlers"
MAX_MINUTES = MAX_TIMEOUT / 60  # the time limits are at most a week, as `cbp run --epoch-timeout`


def is_remote(location: str) -> bool:
    """Whether a home is on an object store (a URI other than ``file:``)."""
    return "://" in location and not location.lower().startswith("file:")


@dataclass(frozen=True)
class CrawlerConfig:
    """A crawler DAG: corpus directories standing for the web, seed URLs, pages per round."""

    corpus: list[str]
    seed: list[str]
    max_pages: int = 1000
    hosts: list[str] = field(default_factory=list)
    queue: str = "crawl_queue"
    pages: str = "pages"
    revisit_min: float = (
        3600.0  # seconds: the shortest revisit interval (also how often the crawler DAG runs on its own)
    )
    revisit_max: float = 30 * 86400.0  # seconds: the longest
    gone_after: int = 1
    max_per_host: int | None = None


@dataclass(frozen=True)
class DagConfig:
    """Where the YAML files, homes, inboxes and markers are (see ``dags/cbp.yaml``)."""

    flows: str
    homes: str
    inbox: str
    crawlers: dict[str, CrawlerConfig] = field(default_factory=dict)
    poke_interval: float = 5.0
    spark_master: str | None = None
    run_timeout_minutes: float = RUN_TIMEOUT_MINUTES
    crawl_timeout_minutes: float = CRAWL_TIMEOUT_MINUTES
    epoch_timeout_seconds: float | None = None  # passed on as ``cbp run --epoch-timeout`` when set
    inbox_settle_seconds: float = INBOX_SETTLE_SECONDS  # an inbox file is landed once unchanged (mtime) this long
    markers: str | None = (
        None  # local directory of the announcement markers (default: beside the home, or in the inbox)
    )
    env_file: str | None = None  # a shell file (e.g. state/cluster/env.sh) whose variables the tasks run with
    follow: list[str] = field(
        default_factory=list
    )  # pipelines handed to a follower (cbp.airflow.follower), not a cbp run per increment

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
    r = subprocess.run(
        ["bash", "-c", 'set -a; source "$1" >/dev/null && env -0', "cbp-env", path],
        env=base,
        capture_output=True,
        timeout=60,
    )
    if r.returncode != 0:
        raise RuntimeStateError(
            f"env_file {path}: sourcing it failed: {r.stderr.decode(errors='replace')[-500:]}",
            code="env-file",
            path=path,
        )
    out = dict(item.split("=", 1) for item in r.stdout.decode(errors="replace").split("\0") if "=" in item)
    return {k: v for k, v in out.items() if base.get(k) != v and k not in ("_", "SHLVL", "PWD", "OLDPWD")}


def _bad(path: str, key: str, message: str) -> RuntimeStateError:
    """The error of a bad setting (code ``bad-config``), naming the file and the key."""
    return RuntimeStateError(f"{path}: {key}: {message}", code=BAD_CONFIG, path=path)


def _text(raw: dict[str, Any], path: str, key: str, default: str | None, where: str = "") -> str | None:
    """A non-empty string setting; an empty ``key:`` is unset if the setting is optional (``default`` None), else
    refused."""
    v = raw.get(key)
    if v is None:
        if key in raw and default is not None:
            raise _bad(path, where + key, "is empty; give a value or leave the key out")
        return default
    if not isinstance(v, str) or not v.strip():
        raise _bad(path, where + key, f"must be a non-empty string, got {v!r}")
    return v


def _texts(raw: dict[str, Any], path: str, key: str, where: str, required: bool) -> list[str]:
    """A list of non-empty strings (a single string is a list of one)."""
    v = raw.get(key)
    if v is None:
        if required:
            raise _bad(path, where + key, "is missing or empty")
        return []
    items = v if isinstance(v, list) else [v]
    if (required and not items) or not all(isinstance(x, str) and x.strip() for x in items):
        raise _bad(path, where + key, f"must be a string or a list of non-empty strings, got {v!r}")
    return items


def _set_number(raw: dict[str, Any], path: str, key: str, default: float, most: float) -> float:
    """:func:`_number` of a setting that always has a value (its default when left out)."""
    v = _number(raw, path, key, default, most)
    return default if v is None else v


def _number(
    raw: dict[str, Any], path: str, key: str, default: float | None, most: float, zero: bool = False
) -> float | None:
    """A finite number above 0 (or at least 0 with ``zero``) and at most ``most``; an empty optional one is unset."""
    v = raw.get(key)
    if v is None:
        if key in raw and default is not None:
            raise _bad(path, key, "is empty; give a number or leave the key out")
        return default
    if isinstance(v, str):  # YAML reads 1e9 (no dot) as a string
        try:
            v = float(v)
        except ValueError:
            pass
    ok = (
        isinstance(v, (int, float)) and not isinstance(v, bool) and (v >= 0 if zero else v > 0) and v <= most
    )  # NaN fails both
    if not ok:
        raise _bad(path, key, f"must be a number {'at least 0' if zero else 'above 0'} and at most {most:g}, got {v!r}")
    return float(v)


def crawl_app(path: str = "crawlers") -> Any:
    """The crawl application that does a crawler DAG's rounds (the first of :data:`CRAWL_APPS` by
    name); a configured crawler without one installed is ``bad-config``."""
    apps = sorted(importlib.metadata.entry_points(group=CRAWL_APPS), key=lambda e: e.name)
    if not apps:
        raise _bad(path, "crawlers", f"no crawl application is installed (no entry point of group {CRAWL_APPS})")
    return apps[0].load()


def _seeds(c: dict[str, Any], path: str, where: str, app: Any) -> list[str]:
    seeds = _texts(c, path, "seed", where, required=True)
    for s in seeds:
        if not app.seed_ok(s):  # an http(s) URL the crawl's link rules read
            raise _bad(path, where + "seed", f"{s!r} is not an http(s) URL")
    return seeds


def _crawler(name: str, c: Any, path: str, p: Callable[[str, str], str]) -> CrawlerConfig:
    where = f"crawlers: {name}: "
    if not isinstance(c, dict):
        raise _bad(path, where.rstrip(": "), f"must be a mapping with corpus and seed, got {c!r:.80}")
    unknown = set(map(str, c)) - CRAWLER_KEYS
    if unknown:
        raise _bad(
            path, where + ", ".join(sorted(unknown)), f"unknown key(s); known: {', '.join(sorted(CRAWLER_KEYS))}"
        )
    corpus = [p(where + "corpus", d) for d in _texts(c, path, "corpus", where, required=True)]
    hosts = _texts(c, path, "hosts", where, required=False)
    app = crawl_app(path)
    for h in hosts:
        if not app.is_host_name(h.lower()):
            raise _bad(
                path,
                where + "hosts",
                f"{h!r} is not a host name URLs keep as it is (letters, digits, '-' and '.', not all digits)",
            )
    if len(hosts) > len(corpus):
        raise _bad(
            path,
            where + "hosts",
            f"{len(hosts)} hosts for {len(corpus)} corpus directories (one host per directory, in order)",
        )
    max_pages = c.get("max_pages", 1000)
    if isinstance(max_pages, bool) or not isinstance(max_pages, int) or max_pages < 1:
        raise _bad(path, where + "max_pages", f"must be a whole number of at least 1, got {max_pages!r}")
    whole: dict[str, Any] = {}
    for key, default in (("gone_after", 1), ("max_per_host", None)):
        v = c.get(key, default)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise _bad(path, where + key, f"must be a whole number of at least 1, got {v!r}")
        whole[key] = v
    secs: dict[str, Any] = {}
    for key, fallback in (("revisit_min", 3600.0), ("revisit_max", 30 * 86400.0)):
        t = c.get(key, fallback)
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise _bad(path, where + key, f"must be a finite number of seconds > 0, got {t!r}")
        secs[key] = float(t)
    if secs["revisit_min"] > secs["revisit_max"]:
        raise _bad(
            path, where + "revisit_min", f"{secs['revisit_min']} is more than revisit_max ({secs['revisit_max']})"
        )
    return CrawlerConfig(
        corpus=corpus,
        seed=_seeds(c, path, where, app),
        max_pages=max_pages,
        hosts=hosts,
        queue=_text(c, path, "queue", "crawl_queue", where) or "crawl_queue",
        pages=_text(c, path, "pages", "pages", where) or "pages",
        **secs,
        **whole,
    )


def _crawlers(raw: dict[str, Any], path: str, p: Callable[[str, str], str]) -> dict[str, CrawlerConfig]:
    entries = raw.get("crawlers") or {}
    if not isinstance(entries, dict):
        raise _bad(path, "crawlers", f"must be a mapping of pipeline names to crawler settings, got {entries!r:.80}")
    for name in entries:
        if not isinstance(name, str):
            raise _bad(path, "crawlers", f"{name!r} is not a pipeline name")
    return {name: _crawler(name, c, path, p) for name, c in entries.items()}


def _check_local_dirs(homes: str, raw: dict[str, Any], path: str) -> None:
    """An object-store ``homes`` needs a local ``inbox`` or ``markers`` directory (code ``needs-local-home``)."""
    if not is_remote(homes):
        return
    local = [k for k in ("inbox", "markers") if raw.get(k) is not None]
    if not local:
        raise RuntimeStateError(
            f"{path}: homes: {homes} is on an object store, but the Airflow DAGs keep their inboxes and "
            "announcement markers in local files: also give 'inbox:' (or 'markers:'), a local directory",
            code="needs-local-home",
            path=homes,
        )
    for k in local:
        if is_remote(str(raw[k])):
            raise RuntimeStateError(
                f"{path}: {k}: {raw[k]} must be a local directory (homes may be on an object store, the {k} may not)",
                code="needs-local-home",
                path=str(raw[k]),
            )


def _homes(raw: dict[str, Any], path: str, p: Callable[[str, str], str]) -> str:
    """``homes``: a local directory, a ``file:`` URI or ``s3://BUCKET[/PREFIX]`` (see :func:`check_location`)."""
    loc = _text(raw, path, "homes", "../state") or ""
    loc = loc if is_remote(loc) else p("homes", loc)
    try:
        return check_location(loc)
    except UsageError as e:
        raise _bad(path, "homes", str(e).replace("--home ", "", 1)) from None


def _read(path: str) -> dict[str, Any]:
    """The file's settings: one mapping, read with the bounded YAML reader (no alias bombs, no duplicate keys)."""
    raw, _ = load_yaml(path)
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise RuntimeStateError(
            f"{path}: the file must be a mapping of settings (flows:, homes:, ...), not a {type(raw).__name__}",
            code=BAD_CONFIG,
            path=path,
        )
    unknown = set(map(str, raw)) - KNOWN
    if unknown:
        raise _bad(path, ", ".join(sorted(unknown)), f"unknown key(s); known: {', '.join(sorted(KNOWN))}")
    return raw


def load_config(path: str) -> DagConfig:
    """Read ``dags/cbp.yaml``; relative paths are relative to the file. A bad setting is refused with
    code ``bad-config`` (the file and the key named); YAML it cannot read keeps the reader's code
    (``duplicate-key``, ``yaml-too-big``, ...)."""
    raw = _read(path)
    base = os.path.dirname(os.path.abspath(path))

    def p(key: str, x: str) -> str:
        try:
            x = local_file_uri(x)
        except UsageError as e:
            raise _bad(path, key, str(e).replace("--home ", "", 1)) from None
        if is_remote(x) or "://" in x:
            raise _bad(
                path, key, f"{x!r} is not a local path (this setting needs a directory or file on the Airflow machine)"
            )
        if not x.strip() or any(c in x for c in "\0\n\r"):
            raise _bad(path, key, f"{x!r} is not a path (empty, or a NUL or line break in it)")
        return os.path.normpath(os.path.join(base, os.path.expanduser(x)))

    def opt(key: str) -> str | None:
        v = _text(raw, path, key, None)
        return None if v is None else p(key, v)

    homes = _homes(raw, path, p)
    for key in ("inbox", "markers", "env_file", "spark_master", "flows"):
        _text(raw, path, key, None)
    _check_local_dirs(homes, raw, path)
    return DagConfig(
        flows=p("flows", _text(raw, path, "flows", "../flows") or ""),
        homes=homes,
        inbox=p("inbox", _text(raw, path, "inbox", "../state/inbox") or ""),
        crawlers=_crawlers(raw, path, p),
        poke_interval=_set_number(raw, path, "poke_interval", 5.0, MAX_TIMEOUT),
        spark_master=_text(raw, path, "spark_master", None),
        run_timeout_minutes=_set_number(raw, path, "run_timeout_minutes", RUN_TIMEOUT_MINUTES, MAX_MINUTES),
        crawl_timeout_minutes=_set_number(raw, path, "crawl_timeout_minutes", CRAWL_TIMEOUT_MINUTES, MAX_MINUTES),
        epoch_timeout_seconds=_number(raw, path, "epoch_timeout_seconds", None, MAX_TIMEOUT),
        inbox_settle_seconds=_number(
            raw,
            path,
            "inbox_settle_seconds",
            INBOX_SETTLE_SECONDS,
            MAX_TIMEOUT,  # type: ignore[arg-type]
            zero=True,
        ),
        markers=opt("markers"),
        env_file=opt("env_file"),
        follow=_texts(raw, path, "follow", "", required=False),
    )
