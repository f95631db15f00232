"""``CBP_TASK_MEMORY_MB`` (issue 49): a task budget below what the input holds bounds the tasks' caches
and the small epochs' envelopes, and the epochs still give URLCount as pandas computes it from scratch."""

from __future__ import annotations

import pandas as pd
from conftest import FLOWS

import cbp
from cbp.engine.driver import job, smallepoch, taskmemory


def test_a_task_under_a_low_memory_budget_gives_the_right_result(spark, tmp_path, monkeypatch):
    """1 MB of task memory, 3 MB of input in one epoch: the epoch takes the shuffle (its envelopes outgrow a
    quarter of the budget), the plans' state cache and index budgets are the budget's shares; a small epoch
    with retractions follows, routed by the driver. Both states equal pandas' counts of all the feeds."""
    monkeypatch.setenv("CBP_TASK_MEMORY_MB", "1")
    plans = []
    run = job.run_stage_epoch

    def spy(spark, plan, *args, **kwargs):  # noqa: ANN001, ANN202 - the job's own signature
        plans.append(plan)
        return run(spark, plan, *args, **kwargs)

    monkeypatch.setattr(job, "run_stage_epoch", spy)
    import cbp.controller.epoch as epoch_mod

    monkeypatch.setattr(epoch_mod, "run_stage_epoch", spy)
    routed = []
    route = job.driver_routed

    def routes(*args):  # noqa: ANN002, ANN202
        out = route(*args)
        routed.append(out is not None)
        return out

    monkeypatch.setattr(job, "driver_routed", routes)
    pad = "a-fairly-long-path/" * 24  # few records of ~480 bytes: the bytes matter here, not the rows

    def url(i: int) -> str:
        return f"https://example.org/{pad}{i}"

    feeds = [
        [{"url": url(i % 4_000)} for i in range(7_000)],
        [{"url": url(i), "_diff": -1} for i in range(0, 300, 3)] + [{"url": "https://example.org/new"}],
    ]
    assert sum(len(r["url"]) for r in feeds[0]) > 3 << 20  # more than the budget, three times
    p = cbp.load(FLOWS / "url_count.yaml", home=str(tmp_path / "home"), spark=spark)
    states = []
    for feed in feeds:
        p.feed("urls", feed)
        p.run()
        states.append({r["url"]: r["count"] for r in p.state("url_count")})
    assert smallepoch.envelope_cap() == 1 << 18 and taskmemory.spark_conf()
    assert routed == [False, True]  # the first epoch's envelopes outgrew the budget: the shuffle took them
    assert {(pl.cache_mb, pl.index_mb) for pl in plans} == {(0.5, 0.125)}
    for i in range(len(feeds)):
        df = pd.DataFrame([{"url": r["url"], "d": r.get("_diff", 1)} for f in feeds[: i + 1] for r in f])
        sums = df.groupby("url")["d"].sum()
        assert states[i] == {u: int(n) for u, n in sums.items() if n}, i


def test_records_of_a_routeby_function_outgrowing_the_budget_take_the_shuffle(
    spark, tmp_path, monkeypatch, make_pipeline
):
    """A RouteBy function's records go to a one-stage routing job (on Connect each of its tasks holds them
    all: they travel with its function): with more than a quarter of a 1 MB budget the epoch takes the
    shuffle (streamed, sorted batches) without that job; a small epoch after it runs the job (its records
    few enough for one task: the job that routes them and runs the partitions). Both states
    equal pandas' counts."""
    monkeypatch.setenv("CBP_TASK_MEMORY_MB", "1")
    calls = []
    route = smallepoch.route_on_executors

    def routing(spark, plan, work):  # noqa: ANN001, ANN202 - the job's own signature
        calls.append(sum(t.num_rows for _, _, t in work))
        return route(spark, plan, work)

    monkeypatch.setattr(smallepoch, "route_on_executors", routing)
    fused = smallepoch.route_and_run_job  # few records: one job routes them and runs the partitions

    def route_and_run(spark, plan, work, *rest):  # noqa: ANN001, ANN002, ANN202 - the job's own signature
        calls.append(work.count)
        return fused(spark, plan, work, *rest)

    monkeypatch.setattr(smallepoch, "route_and_run_job", route_and_run)
    yaml = (FLOWS / "url_count.yaml").read_text()
    yaml = yaml.replace("route_by: url", "route_by: 'MOD:url_of'").replace("url_count:count_urls", "MOD:count_urls")
    path = make_pipeline(yaml, (FLOWS / "url_count.py").read_text() + "\n\ndef url_of(r):\n    return r['url']\n")
    pad = "a-fairly-long-path/" * 24
    feeds = [
        [{"url": f"https://example.org/{pad}{i % 900}"} for i in range(1_500)],  # ~700 kB of records
        [{"url": f"https://example.org/{pad}{i}", "_diff": -1} for i in range(0, 30, 3)] + [{"url": "new"}],
    ]
    p = cbp.load(path, home=str(tmp_path / "home"), spark=spark)
    for i, feed in enumerate(feeds):
        p.feed("urls", feed)
        reports = p.run()
        assert (reports[0].shuffle_records > 0) == (i == 0), i
        df = pd.DataFrame([{"url": r["url"], "d": r.get("_diff", 1)} for f in feeds[: i + 1] for r in f])
        sums = df.groupby("url")["d"].sum()
        assert {r["url"]: r["count"] for r in p.state("url_count")} == {u: int(n) for u, n in sums.items() if n}, i
    assert calls == [11]  # the first epoch's records were never sent to a routing job
