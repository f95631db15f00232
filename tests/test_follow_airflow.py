"""The Airflow hand-off to a follower (``follow:`` in dags/cbp.yaml, cbp.airflow.follower), with the
DAG run in-process by ``dag.test()`` as in tests/test_airflow.py: the ``run`` task starts one
detached ``cbp run --follow`` (pid recorded, not started twice), which runs what lands. The
follower is stopped by the module's fixture, pass or fail."""

from __future__ import annotations

import json
import os
import time

import pytest

import cbp
from cbp.errors import CbpError

pytest.importorskip("airflow", reason="needs apache-airflow (pip install -e '.[airflow]')")

NAME = "follow_words"
YAML = f"""
pipeline: {NAME}
flows:
  words: {{external: true, schema: {{w: string}}}}
stages:
  count:
    translator: {NAME}:count
    partitions: 2
    inputs: [{{flow: words, route_by: w}}]
    state: {{schema: {{w: string, n: int}}}}
"""
MODULE = """
def count(key, state, words, out):
    prev = next(state, None)
    out.state.write({"w": key, "n": sum(1 for _ in words) + (prev["n"] if prev else 0)})
"""


def _until(cond, timeout: float = 300.0, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """A pipeline handed to a follower, its DAG, and the follower stopped at the end."""
    from cbp.airflow.follower import stop_follower

    base = tmp_path_factory.mktemp("afollow")
    flows = base / "flows"
    flows.mkdir()
    (flows / f"{NAME}.yaml").write_text(YAML)
    (flows / f"{NAME}.py").write_text(MODULE)
    with open(os.environ["CBP_DAGS_CONFIG"], "w") as fh:  # dags/cbp_dags.py reads it when dag.test() serializes the DAG
        fh.write(
            f"flows: {flows}\nhomes: {base}/state\ninbox: {base}/inbox\ninbox_settle_seconds: 0\nfollow: [{NAME}]\n"
        )
    from airflow.utils import db  # what `airflow db migrate` runs, here: Airflow is imported already

    db.upgradedb()
    from cbp.airflow.dagfactory import make_dags

    home = base / "state" / NAME
    markers = str(home / "_airflow")
    try:
        yield {
            "base": base,
            "yaml": flows / f"{NAME}.yaml",
            "home": str(home),
            "markers": markers,
            "dag": make_dags(os.environ["CBP_DAGS_CONFIG"])[f"cbp_{NAME}"],
        }
    finally:
        stop_follower(markers)


def _counts(env) -> dict:
    return {r["w"]: r["n"] for r in cbp.load(env["yaml"], home=env["home"]).state("count")}


def test_the_run_task_hands_the_pipeline_to_one_follower(env):
    from cbp.airflow.follower import follower_record, follower_running
    from cbp.storage import Home

    cbp.load(env["yaml"], home=env["home"]).feed("words", [{"w": "a"}, {"w": "b"}])
    dr = env["dag"].test()
    states = {ti.task_id: str(ti.state) for ti in dr.get_task_instances()}
    assert str(dr.state) == "success" and states["run"] == "success" and states["publish_epochs"] == "skipped"
    pid = follower_running(env["markers"])
    assert pid is not None and follower_record(env["markers"])["pid"] == pid
    assert Home(env["home"]).runner_info()["pid"] == pid  # the follower holds the runner lock
    _until(lambda: _counts(env) == {"a": 1, "b": 1}, what="the follower to run the feed")
    # a second DAG run finds it running: not started twice
    dr = env["dag"].test()
    assert str(dr.state) == "success" and follower_running(env["markers"]) == pid
    # the follower lands the inbox itself (and feeds by any process)
    inbox = env["base"] / "inbox" / NAME / "words"
    inbox.mkdir(parents=True, exist_ok=True)
    (inbox / "x.jsonl").write_text("".join(json.dumps({"w": w}) + "\n" for w in ["a", "c"]))
    _until(lambda: _counts(env) == {"a": 2, "b": 1, "c": 1}, what="the follower to land and run the inbox file")
    cbp.load(env["yaml"], home=env["home"]).feed("words", [{"w": "c"}])
    _until(lambda: _counts(env) == {"a": 2, "b": 1, "c": 2}, what="the follower to run a feed")
    assert follower_running(env["markers"]) == pid


def test_a_follower_that_cannot_start_fails_the_task_with_its_reason(tmp_path):
    from cbp.airflow.follower import ensure_follower, follower_running, stop_follower

    flows = tmp_path / "flows"
    flows.mkdir()
    (flows / f"{NAME}.yaml").write_text(YAML)
    (flows / f"{NAME}.py").write_text(MODULE)
    home, markers = str(tmp_path / "home"), str(tmp_path / "markers")
    p = cbp.load(flows / f"{NAME}.yaml", home=home)
    try:
        with p.home.runner_lock("a cbp run holding the home"):  # the new follower exits busy before its Spark starts
            with pytest.raises(CbpError) as e:
                ensure_follower(
                    str(flows / f"{NAME}.yaml"),
                    home,
                    markers=markers,
                    env={"PYTHONPATH": os.environ.get("PYTHONPATH", "")},
                )
        assert e.value.code == "follower-failed" and "[busy]" in str(e.value)
        assert follower_running(markers) is None
    finally:
        stop_follower(markers)  # whatever happened, no follower is left running


def test_follow_setting(tmp_path):
    from cbp.airflow.config import load_config

    cfg = tmp_path / "cbp.yaml"
    cfg.write_text("follow: [a, b]\n")
    assert load_config(str(cfg)).follow == ["a", "b"]
    cfg.write_text("follow: [1]\n")
    with pytest.raises(CbpError) as e:
        load_config(str(cfg))
    assert e.value.code == "bad-config"
