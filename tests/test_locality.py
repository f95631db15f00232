"""Each epoch records which executor ran each partition and how the state cache served its reads."""

from __future__ import annotations

import json

from conftest import FLOWS

import cbp
from cbp.cli import main
from cbp.engine.driver.locality import task_location
from cbp.engine.task.executor import executor_name

URLS = str(FLOWS / "url_count.yaml")


def test_report_and_status_carry_executors_and_cache_hits(spark, tmp_path, capsys):
    home = str(tmp_path / "home")
    p = cbp.load(URLS, home, spark=spark)
    reports = []
    for feed in [[{"url": f"u{i}"} for i in range(40)]] + [[{"url": f"u{i}"}] for i in range(1, 7)]:
        p.feed("urls", feed)
        reports += p.run()
    assert [r.epoch for r in reports] == list(range(1, 8))
    for r in reports:  # local mode: every partition's task ran in the driver's executor
        assert sorted(r.executors) == [0, 1, 2, 3] and {e.split("@")[0] for e in r.executors.values()} == {"driver"}
    assert reports[0].cache_lookups == 0 and reports[0].cache_hit_rate is None  # no state yet
    # u1..u6 are in epoch 1's files, which the Python worker that wrote each kept in its cache, as does
    # any worker that reads one (local[2] has two workers, each with its own cache): some reads hit
    assert all(r.cache_lookups == 1 for r in reports[1:]) and sum(r.cache_hits for r in reports[1:]) >= 1
    hit = next(r for r in reports[1:] if r.cache_hits)
    assert hit.cache_hit_rate == 1.0 and "cache 100%" in hit.line()
    assert main(["status", URLS, "--home", home, "--json"]) == 0
    last = json.loads(capsys.readouterr().out)["stages"]["url_count"]["last_epoch"]
    assert last["epoch"] == 7 and last["cache_lookups"] == 1 and last["cache_hits"] == reports[-1].cache_hits
    assert last["cache_hit_rate"] == reports[-1].cache_hit_rate and set(last["executors"]) == {"0", "1", "2", "3"}


def test_executor_names():
    assert executor_name().startswith("driver@")  # not under an executor JVM
    assert task_location("3@10.0.0.7") == "executor_10.0.0.7_3" and task_location(executor_name()) is None
