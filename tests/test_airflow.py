"""The Airflow 3 DAGs (dags/cbp_dags.py, cbp.airflow.dagfactory), run in-process with ``dag.test()``.

The crawl loop of paper 001 §1.1: the crawler DAG lands a round of pages (asset event on
``pages``), the pipeline DAG runs the epochs and publishes ``crawl_queue``, and so on, for
several rounds on a generated site; after each round the queue equals the from-scratch queue.
There is no scheduler or triggerer in-process, so the test plays their part: it checks each
asset event a DAG run emits and what the ``AssetWatcher``'s trigger would announce, and starts
the DAG that the event schedules.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
from conftest import AIRFLOW_HOME, FLOWS
from crawl_site import HOST, make_site
from test_crawl_queue import _check_round

pytest.importorskip("airflow", reason="needs apache-airflow (pip install -e '.[airflow]')")


#: The pipelines whose DAGs the tests run: the flows directory of the configuration holds only these
#: (copies of flows/'s), since ``dag.test()`` parses the DAGs file, and so every pipeline of the
#: configuration, on each call (twice per crawl round); that every flow gets its DAG is checked on a
#: configuration of all of flows/.
RUN = ("crawl_queue", "url_count")


def _config(base: Path, flows: Path, seed: str) -> str:
    return f"""
flows: {flows}
homes: {base}/state
inbox: {base}/inbox
poke_interval: 1
crawlers:
  crawl_queue:
    corpus: {base / HOST}
    seed: {seed}
    max_pages: 12
"""


@pytest.fixture(scope="module")
def airflow_env(tmp_path_factory):
    """A migrated SQLite metadata DB in the session's AIRFLOW_HOME and a cbp.yaml for a generated site."""
    base = tmp_path_factory.mktemp("af")
    seed = make_site(str(base))
    flows = base / "flows"
    flows.mkdir()
    for name in RUN:
        for ext in (".yaml", ".py"):
            shutil.copy(FLOWS / f"{name}{ext}", flows)
    with open(os.environ["CBP_DAGS_CONFIG"], "w") as fh:
        fh.write(_config(base, flows, seed))
    every = base / "every.yaml"
    every.write_text(_config(base, FLOWS, seed))
    from airflow.utils import db  # what `airflow db migrate` runs, here: Airflow is imported already

    db.upgradedb()
    assert os.environ["AIRFLOW_HOME"] == AIRFLOW_HOME
    from cbp.airflow.dagfactory import make_dags

    dags = make_dags(os.environ["CBP_DAGS_CONFIG"])
    return {"base": base, "seed": seed, "flows": flows, "dags": dags, "every": make_dags(str(every))}


def _events(uri: str) -> list[dict]:
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as s:
        rows = s.execute(
            select(AssetEvent.extra)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .where(AssetModel.uri == uri)
            .order_by(AssetEvent.id)
        ).all()
    return [r[0] for r in rows]


def _states(dr) -> dict[str, str]:
    return {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}


def test_dags_are_built_for_every_flow_and_the_crawler(airflow_env):
    dags = airflow_env["every"]
    names = {os.path.splitext(f)[0] for f in os.listdir(FLOWS) if f.endswith(".yaml")}
    assert {d for d in dags if not d.endswith("_crawler")} == {f"cbp_{n}" for n in names}
    d = dags["cbp_crawl_queue"]
    assert set(d.task_dict) == {"land_inbox", "run", "publish_crawl_queue", "publish_epochs"}
    uris = {a.uri for a in d.timetable.asset_condition.objects}
    home = airflow_env["base"] / "state" / "crawl_queue"
    assert uris == {f"file://{home}/flows/pages"}
    assert dags["cbp_crawl_queue_crawler"].task_dict["crawl_round"].outlets[0].uri == f"file://{home}/flows/pages"


def test_crawl_loop_through_the_dags_equals_from_scratch_each_round(airflow_env):
    import cbp
    from cbp.airflow.triggers import IncrementLanded

    dags = airflow_env["dags"]
    home = str(airflow_env["base"] / "state" / "crawl_queue")
    crawler, pipeline = dags["cbp_crawl_queue_crawler"], dags["cbp_crawl_queue"]
    watcher = IncrementLanded(home, "pages")
    pages_uri, queue_uri = f"file://{home}/flows/pages", f"file://{home}/flows/crawl_queue"
    ever: dict[str, float] = {}
    rounds = 0
    for rounds in range(1, 4):
        dr = crawler.test()
        assert str(dr.state) == "success" and _states(dr)["crawl_round"] == "success"
        assert _events(pages_uri)[-1]["round"] == rounds  # the crawl task's asset event schedules the pipeline DAG
        assert watcher.check()["new_feeds"] == 1  # and the watcher sees the feed (outside Airflow it starts the DAG)
        p = cbp.load(airflow_env["flows"] / "crawl_queue.yaml", home=home)
        before = p.status()["stages"]["threshold"]["epochs"]
        n_queue_events = len(_events(queue_uri))
        dr = pipeline.test()
        states = _states(dr)
        assert str(dr.state) == "success" and states["run"] == "success", states
        crawled = p.output("pages")
        _check_round(p, ever, crawled, before)
        wrote = p.status()["stages"]["threshold"]["epochs"] > before
        assert len(_events(queue_uri)) == n_queue_events + wrote  # crawl_queue published iff the run wrote to it
        assert states["publish_crawl_queue"] == ("success" if wrote else "skipped")
    assert rounds == 3 and len({x["url"] for x in crawled}) > 20
    # a re-triggered run with nothing new does nothing and publishes nothing
    n_events = (len(_events(queue_uri)), len(_events(f"file://{home}/_cbp/epochs")))
    dr = pipeline.test()
    assert _states(dr)["publish_epochs"] == "skipped" and _states(dr)["publish_crawl_queue"] == "skipped"
    assert (len(_events(queue_uri)), len(_events(f"file://{home}/_cbp/epochs"))) == n_events
    assert watcher.check() is None


def test_inbox_files_and_cbp_feed_lead_to_a_run(airflow_env):
    import cbp
    from cbp.airflow.triggers import IncrementLanded

    dags = airflow_env["dags"]
    home = str(airflow_env["base"] / "state" / "url_count")
    inbox = airflow_env["base"] / "inbox" / "url_count" / "urls"
    inbox.mkdir(parents=True)
    watcher = IncrementLanded(home, "urls", inbox=str(inbox))
    assert watcher.check() is None
    (inbox / "batch-0.jsonl").write_text(
        '{"url": "http://c/"}\n{"url": \n'
    )  # a bad file does not block the one behind it
    (inbox / "batch-1.jsonl").write_text(
        "".join(json.dumps({"url": u}) + "\n" for u in ["http://a/", "http://b/", "http://a/"])
    )
    assert watcher.check() is None  # just written: maybe still being written, not announced before inbox_settle_seconds
    for f in inbox.iterdir():
        os.utime(f, (time.time() - 60, time.time() - 60))  # as if written a minute ago
    ev = watcher.check()
    assert ev["inbox_files"] == ["batch-0.jsonl", "batch-1.jsonl"]
    assert watcher.check() is None  # announced once
    dr = dags["cbp_url_count"].test()
    assert str(dr.state) == "success" and _states(dr)["land_inbox"] == "success"
    assert sorted(os.listdir(inbox)) == ["landed", "rejected"] and os.listdir(inbox / "landed") == ["batch-1.jsonl"]
    assert sorted(os.listdir(inbox / "rejected")) == ["batch-0.jsonl", "batch-0.jsonl.error.txt"]
    assert (inbox / "rejected" / "batch-0.jsonl.error.txt").read_text().startswith("bad-record: ")
    assert watcher.check() is None  # the rejected file is not announced again
    p = cbp.load(airflow_env["flows"] / "url_count.yaml", home=home)
    assert {r["url"]: r["count"] for r in p.state("url_count")} == {"http://a/": 2, "http://b/": 1}
    assert _events(f"file://{home}/flows/counts")[-1] == {"records": 2}
    # an increment landed with `cbp feed`, outside Airflow: the watcher announces it
    f = airflow_env["base"] / "more.jsonl"
    f.write_text(json.dumps({"url": "http://b/"}) + "\n")
    from cbp.cli import main  # the command's own code, in this process: a feed starts no Spark

    yaml = str(airflow_env["flows"] / "url_count.yaml")
    assert main(["feed", yaml, "--home", home, "urls", str(f), "--id", "more"]) == 0
    assert watcher.check()["new_feeds"] == 1
    dr = dags["cbp_url_count"].test()
    assert str(dr.state) == "success"
    assert {r["url"]: r["count"] for r in p.state("url_count")} == {"http://a/": 2, "http://b/": 2}
