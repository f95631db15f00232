"""The Airflow DAGs with a Spark master and homes on S3 (``dags/cbp.yaml``: ``homes: s3://...``,
``spark_master``, ``env_file``), the inbox and announcement markers staying on the local disk.

DAGs are built with :func:`cbp.airflow.dagfactory.make_dags` and their tasks' callables run
in-process (no scheduler, no metadata database needed); the run task's ``cbp run`` is a
subprocess in local mode against moto's S3 server (fixture ``s3`` of tests/moto_s3.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import FLOWS, ROOT
from moto_s3 import BUCKET, s3_server  # noqa: F401  (the module's S3 server fixture, named s3)

from cbp.errors import CbpError

pytest.importorskip("airflow", reason="needs apache-airflow (pip install -e '.[airflow]')")


def _config(tmp_path: Path, text: str) -> str:
    path = tmp_path / "cbp.yaml"
    path.write_text(f"flows: {FLOWS}\n{text}")
    return str(path)


def test_object_store_homes_need_a_local_inbox_or_markers(tmp_path):
    from cbp.airflow.dagfactory import load_config

    for bad in ("homes: s3://b/h\n", "homes: s3://b/h\ninbox: s3://b/inbox\n", "homes: s3://b/h\nmarkers: s3://b/m\n"):
        with pytest.raises(CbpError) as e:
            load_config(_config(tmp_path, bad))
        assert e.value.code == "needs-local-home", bad
    cfg = load_config(_config(tmp_path, f"homes: s3://b/h/\ninbox: {tmp_path}/inbox\n"))
    assert cfg.homes == "s3://b/h/" and cfg.inbox == f"{tmp_path}/inbox"
    cfg = load_config(_config(tmp_path, f"homes: s3://b/h\nmarkers: {tmp_path}/m\n"))
    assert cfg.markers == f"{tmp_path}/m"
    local = load_config(_config(tmp_path, f"homes: {tmp_path}/state\n"))  # a local home keeps its markers beside it
    assert local.markers is None and local.homes == f"{tmp_path}/state"


def _cluster_config(tmp_path: Path, master: str, endpoint: str = "http://127.0.0.1:1") -> str:
    env_sh = tmp_path / "env.sh"
    env_sh.write_text(
        f"export CBP_SPARK_CONF='spark.cores.max=2'\nexport AWS_ENDPOINT_URL='{endpoint}'\n"
        "export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing AWS_REGION=us-east-1\n"
    )
    return _config(
        tmp_path,
        f"homes: s3://{BUCKET}/homes\ninbox: {tmp_path}/inbox\nspark_master: {master}\nenv_file: {env_sh}\n"
        f"crawlers:\n  crawl_queue: {{corpus: {tmp_path}/site, seed: http://site/index.html}}\n",
    )


def test_dag_of_a_cluster_and_an_s3_home(tmp_path):
    """Parsed DAGs: the run task runs ``cbp run --home s3://...`` with the master as CBP_SPARK_MASTER
    and env.sh's variables; assets are the S3 tables; markers and inbox are local directories."""
    from cbp.airflow.dagfactory import load_config, make_dags

    path = _cluster_config(tmp_path, "spark://127.0.0.1:7077")
    dags = make_dags(path)
    home = f"s3://{BUCKET}/homes/url_count"
    run = dags["cbp_url_count"].task_dict["run"]
    assert run.home == home and run.spark_master == "spark://127.0.0.1:7077"
    env = run.task_env()
    assert env["CBP_SPARK_MASTER"] == "spark://127.0.0.1:7077" and env["CBP_SPARK_CONF"] == "spark.cores.max=2"
    assert env["AWS_ENDPOINT_URL"] == "http://127.0.0.1:1" and "PATH" not in env
    (asset,) = dags["cbp_url_count"].timetable.asset_condition.objects
    assert asset.uri == f"{home}/flows/urls"
    trigger = asset.watchers[0].trigger
    kind, kwargs = trigger.serialize()
    assert kwargs["home"] == home and kwargs["inbox"] == f"{tmp_path}/inbox/url_count/urls"
    assert kwargs["markers"] == load_config(path).markers_dir(_spec("url_count"))
    assert kwargs["markers"].startswith(f"{tmp_path}/inbox/")
    crawl_home = f"s3://{BUCKET}/homes/crawl_queue"
    assert dags["cbp_crawl_queue_crawler"].task_dict["crawl_round"].outlets[0].uri == f"{crawl_home}/flows/pages"


def _spec(name: str):
    from cbp.spec import load_spec

    return load_spec(str(FLOWS / f"{name}.yaml"))


def test_run_task_on_an_s3_home_in_local_mode(s3, tmp_path):
    """The DAG's land_inbox, watcher and run task against moto's S3 (``cbp run`` in local mode):
    the counts are right on S3, the markers are written locally and nothing of Airflow's goes to S3."""
    import cbp
    from cbp.airflow.dagfactory import make_dags
    from cbp.airflow.triggers import IncrementLanded

    path = _cluster_config(tmp_path, "local[2,2]", os.environ["AWS_ENDPOINT_URL"])
    dag = make_dags(path)["cbp_url_count"]
    home = f"s3://{BUCKET}/homes/url_count"
    inbox = tmp_path / "inbox" / "url_count" / "urls"
    inbox.mkdir(parents=True)
    (inbox / "b1.jsonl").write_text(
        "".join(json.dumps({"url": u}) + "\n" for u in ["http://a/", "http://b/", "http://a/"])
    )
    trigger = dag.timetable.asset_condition.objects[0].watchers[0].trigger
    assert isinstance(trigger, IncrementLanded) and trigger.check() is None  # not before inbox_settle_seconds
    os.utime(inbox / "b1.jsonl", (time.time() - 60, time.time() - 60))  # written a minute ago: complete
    assert trigger.check()["inbox_files"] == ["b1.jsonl"]
    landed = dag.task_dict["land_inbox"].python_callable()
    assert landed["landed"] == {"urls": ["b1.jsonl"]}
    result = dag.task_dict["run"].execute(context={})
    assert result == {"epochs": 1, "records": {"counts": 2}}
    p = cbp.load(FLOWS / "url_count.yaml", home=home)
    assert {r["url"]: r["count"] for r in p.state("url_count")} == {"http://a/": 2, "http://b/": 1}
    assert trigger.check() is None  # the landed file is not announced again
    f = tmp_path / "more.jsonl"
    f.write_text(json.dumps({"url": "http://b/"}) + "\n")
    r = subprocess.run(
        [sys.executable, "-m", "cbp.cli", "feed", str(FLOWS / "url_count.yaml"), "--home", home, "urls", str(f)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert trigger.check()["new_feeds"] == 1  # a feed landed outside Airflow is announced, once
    assert trigger.check() is None
    markers = Path(trigger.markers)
    assert (markers / "announced" / "urls.json").exists()
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET, Prefix="homes/url_count/").get("Contents", [])]
    assert keys and not any("/_airflow/" in k for k in keys)
