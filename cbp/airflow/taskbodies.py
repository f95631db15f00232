"""What the tasks of cbp's DAGs run, as plain functions that tests call without Airflow: ``cbp run``
in its own process group (:func:`run_pipeline`), one crawl round (:func:`crawl_round`), and the
``run`` task of a followed pipeline (:func:`follow_pipeline`). :mod:`cbp.airflow.dagfactory` builds
the DAGs around them."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..spec import PipelineSpec
from .config import CrawlerConfig, DagConfig
from .processes import ProcessGroup

__all__ = ["task_environ", "run_pipeline", "crawl_round", "follow_pipeline"]


@contextmanager
def task_environ(extra: dict[str, str]) -> Iterator[None]:
    """``os.environ`` with ``extra`` for the block (a task that reads an object-store home in-process)."""
    saved = {k: os.environ.get(k) for k in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _outputs(spec: PipelineSpec) -> list[str]:
    return [f for f, fl in spec.flows.items() if fl.producer is not None and not fl.consumers]


def run_pipeline(
    yaml_path: str,
    home: str,
    spark_master: str | None = None,
    *,
    epoch_timeout: float | None = None,
    timeout: float | None = None,
    grace: float = 10.0,
    started: Callable[[ProcessGroup], None] | None = None,
    env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``cbp run`` in a subprocess in its own process group; returns the epochs run and the new
    increments per output flow.

    ``epoch_timeout`` (seconds) is passed on as ``cbp run --epoch-timeout``. ``timeout`` (seconds)
    bounds the whole run: the process group is killed and :class:`TimeoutError` raised. It is
    killed as well when an exception interrupts the wait (Airflow's ``execution_timeout`` raises
    one in the task) or when ``started``'s group is killed (an operator's ``on_kill``). ``env`` (e.g. a
    cluster's env.sh, :meth:`DagConfig.task_env`) is added to the environment of ``cbp run`` and of
    this function's own reads of the home; ``spark_master`` goes to ``cbp run`` as ``CBP_SPARK_MASTER``.
    """
    extra = {**(env or {}), **({"CBP_SPARK_MASTER": spark_master} if spark_master else {})}
    with task_environ(extra):
        return _run_pipeline(yaml_path, home, extra, epoch_timeout, timeout, grace, started)


def _run_pipeline(
    yaml_path: str,
    home: str,
    extra: dict[str, str],
    epoch_timeout: float | None,
    timeout: float | None,
    grace: float,
    started: Callable[[ProcessGroup], None] | None,
) -> dict[str, Any]:
    from ..pipeline import Pipeline

    pipe = Pipeline(yaml_path, home)
    before = {s: pipe.epochs(s) for s in pipe.spec.stages}
    env = {**os.environ, **extra}
    cmd = [sys.executable, "-m", "cbp.cli", "run", yaml_path, "--home", home]
    if epoch_timeout is not None:
        cmd += ["--epoch-timeout", f"{epoch_timeout:g}"]
    group = ProcessGroup(cmd, env, grace=grace)
    if started is not None:
        started(group)
    code, out, err = group.run(timeout)
    sys.stdout.write(out)
    sys.stderr.write(err[-20000:])
    if code != 0:
        last = (err.strip().splitlines() or ["(no message)"])[-1]
        what = "was killed" if group.killed else f"failed with exit code {code}"
        raise RuntimeError(f"cbp run {yaml_path} --home {home} {what}: {last}")
    epochs = 0
    new: dict[str, int] = {f: 0 for f in _outputs(pipe.spec)}
    for s in pipe.spec.stages:
        for e in range(before.get(s, 0) + 1, pipe.epochs(s) + 1):
            epochs += 1
            for f, n in pipe.epoch_record(s, e).records.items():
                if f in new:
                    new[f] += n
    return {"epochs": epochs, "records": new}


def crawl_round(yaml_path: str, home: str, cfg: CrawlerConfig, env: dict[str, str] | None = None) -> dict[str, Any]:
    """One crawl round (with ``env`` added to the environment); returns what it fetched and landed."""
    with task_environ(env or {}):
        return _crawl_round(yaml_path, home, cfg)


def _crawl_round(yaml_path: str, home: str, cfg: CrawlerConfig) -> dict[str, Any]:
    from .config import crawl_app

    return dict(crawl_app().crawl_round(yaml_path, home, cfg))


def follow_pipeline(yaml_path: str, home: str, cfg: DagConfig, spec: PipelineSpec) -> dict[str, Any]:
    """The ``run`` task of a pipeline in ``follow:``: make sure a follower runs (it lands the inbox
    and runs every increment itself); nothing ran in the task, so nothing is published."""
    from .follower import ensure_follower

    inbox = os.path.join(cfg.inbox, spec.name)
    got = ensure_follower(
        yaml_path, home, markers=cfg.markers_dir(spec), inbox=inbox, settle=cfg.inbox_settle_seconds, env=cfg.task_env()
    )
    print(
        f"cbp: pipeline {spec.name} is followed by pid {got['follower']}" + (" (started now)" if got["started"] else "")
    )
    return {"epochs": 0, "records": {f: 0 for f in _outputs(spec)}, **got}
