"""Small epochs routed by the driver (``cbp.engine.driver.smallepoch``): Spark's hashes computed exactly,
the same state and outputs as the shuffle path, the shuffle path wherever the driver must not
route, and failures reported as from any task."""

from __future__ import annotations

import json
import os
import random

import pytest
from conftest import FLOWS

import cbp
from cbp.engine.common.sparkhash import partition_of, partition_probes, spark_hash, spark_xxhash64
from cbp.engine.driver.session import is_connect
from cbp.errors import UserCodeError
from cbp.testing import Increment, replay

ALPHABET = ["a", "Z", "0", " ", "é", "字", "😀", "/", "?", "\x00", "\x7f", "ÿ", "\u2028", '"', "\\", "\n"]


def test_spark_hashes_computed_in_the_driver_equal_sparks(spark):
    rng = random.Random(3)
    keys = ["", "a", "ab", "abc", "abcd", "abcde", "x" * 257, "字" * 100] + [
        "".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 40))) for _ in range(3000)
    ]
    keys += [json.dumps(rng.randint(-(10**12), 10**12)) for _ in range(300)] + [
        json.dumps(f"u{rng.random()}") for _ in range(300)
    ]
    rows = (
        spark.createDataFrame([(k,) for k in keys], "k string")
        .selectExpr("k", "hash(k) as h", "xxhash64(k) as x", "pmod(hash(k), 3) as p3", "pmod(hash(k), 64) as p64")
        .collect()
    )
    want = {r["k"]: (r["h"], r["x"], r["p3"], r["p64"]) for r in rows}
    got = zip(
        keys,
        spark_hash(keys).tolist(),
        spark_xxhash64(keys).tolist(),
        partition_of(keys, 3).tolist(),
        partition_of(keys, 64).tolist(),
    )
    wrong = [(k, want[k], rest) for k, *rest in got if want[k] != tuple(rest)]
    assert wrong == []


def test_partition_probes_land_where_sparks_repartition_puts_them(spark):
    from pyspark.sql.functions import spark_partition_id

    for n in (1, 2, 3, 4, 7, 16, 64):
        probes = list(partition_probes(n))
        rows = (
            spark.createDataFrame([(s,) for s in probes], "s string")
            .repartition(n, "s")
            .select("s", spark_partition_id().alias("p"))
            .collect()
        )
        assert sorted((r["s"], r["p"]) for r in rows) == sorted(zip(probes, range(n))), n


def _canon(recs):
    return sorted(json.dumps(r, sort_keys=True) for r in recs)


def _both(monkeypatch, run):
    """``run(name)`` with the small-epoch path (default threshold) and without it (0)."""
    out = {}
    for name, limit in (("small", None), ("shuffle", "0")):
        if limit is None:
            monkeypatch.delenv("CBP_SMALL_EPOCH_RECORDS", raising=False)
        else:
            monkeypatch.setenv("CBP_SMALL_EPOCH_RECORDS", limit)
        out[name] = run(name)
    monkeypatch.delenv("CBP_SMALL_EPOCH_RECORDS", raising=False)
    return out


@pytest.mark.parametrize("yaml", ["url_count.yaml", "url_count_vec.yaml"])
def test_small_epochs_equal_the_shuffle_path(spark, tmp_path, monkeypatch, yaml):
    rng = random.Random(5)
    pool = [f"http://h{rng.randint(0, 9)}/p{rng.randint(0, 40)}" for _ in range(60)] + ["http://é/字"]
    escaped = [
        'http://q/"x"',
        "http://t/\t",
    ]  # strings JSON must escape: the batch is routed by a Spark job (no shuffle)
    incs = [
        Increment(
            "urls", [{"url": rng.choice(pool + escaped if j in (2, 4) else pool)} for _ in range(rng.randint(40, 120))]
        )
        for j in range(6)
    ]
    runs = _both(monkeypatch, lambda name: replay(FLOWS / yaml, incs, home=str(tmp_path / name), spark=spark))
    for a, b in zip(runs["small"].steps, runs["shuffle"].steps):
        assert _canon(a.outputs["counts"]) == _canon(b.outputs["counts"])
        assert _canon(a.state["url_count"]) == _canon(b.state["url_count"])
    shuffled = [[e.report.shuffle_records for e in s.epochs] for s in runs["small"].steps]
    assert all(x[0] == 0 for x in shuffled)
    assert all(e.report.shuffle_records > 0 for s in runs["shuffle"].steps for e in s.epochs)
    counts = {r["url"]: r["count"] for r in runs["small"].final_state("url_count")}
    want: dict[str, int] = {}
    for inc in incs:
        for r in inc.records:
            want[r["url"]] = want.get(r["url"], 0) + 1
    assert counts == want


HALVES = """
pipeline: halves
flows:
  nums: {external: true, schema: {k: KEYTYPE, v: int, hour: int}}
  carry: {schema: {k: KEYTYPE, v: int}}
  totals: {schema: {k: KEYTYPE, total: int}}
stages:
  sum:
    translator: MOD:step
    partitions: 3
    runnable: any
    inputs:
      - {flow: nums, route_by: k, frame_by: hour, order_by: v}
      - {flow: carry, route_by: k}
    state: {schema: {k: KEYTYPE, total: int}, grouping: GROUPING}
    outputs: [carry, totals]
"""
HALVES_MODULE = """
def step(key, state, nums, carry, out):
    prev = next(state, None)
    total = prev["total"] if prev else 0
    for r in list(nums) + list(carry):
        total += r["v"]
        if r["v"] > 1:
            out.carry.write({"k": key, "v": r["v"] // 2})
    if total > 100:
        return
    out.state.write({"k": key, "total": total})
    out.totals.write({"k": key, "total": total})
"""


@pytest.mark.parametrize("keytype,grouping", [("string", "inner"), ("int", "outer")])
def test_small_epochs_with_framing_a_loopback_flow_and_outer_grouping(
    spark, tmp_path, make_pipeline, monkeypatch, keytype, grouping
):
    rng = random.Random(9)
    pool = ["a", "b", "é", "", "k4", "k5"] if keytype == "string" else [-3, 0, 7, 2**40, 12]
    incs = [  # three hours (the first three of the four this took): each frame ~6 epochs of halves travelling back
        Increment(
            "nums",
            [{"k": rng.choice(pool), "v": rng.randint(0, 40), "hour": h} for _ in range(rng.randint(1, 12))],
            close=h == 3,
        )
        for h in range(1, 4)
    ]
    path = make_pipeline(HALVES.replace("KEYTYPE", keytype).replace("GROUPING", grouping), HALVES_MODULE)
    runs = _both(monkeypatch, lambda name: replay(path, incs, home=str(tmp_path / name), spark=spark))
    for a, b in zip(runs["small"].steps, runs["shuffle"].steps):
        assert [e.report.epoch for e in a.epochs] == [e.report.epoch for e in b.epochs]
        for flow in ("carry", "totals"):
            assert _canon(a.outputs.get(flow, [])) == _canon(b.outputs.get(flow, [])), flow
        assert _canon(a.state["sum"]) == _canon(b.state["sum"])
    small = [e.report for s in runs["small"].steps for e in s.epochs]
    assert len(small) > 4 and all(r.shuffle_records == 0 for r in small)


def test_the_shuffle_path_where_the_driver_must_not_route_and_a_routeby_function(spark, tmp_path, make_pipeline):
    """Black-box mode and more records than the threshold take Spark's shuffle; a RouteBy function
    does not (a Spark job of one stage runs it: no shuffle)."""
    urls = [{"url": f"http://h/{i % 7}"} for i in range(50)]
    bb = cbp.load(FLOWS / "url_count.yaml", home=str(tmp_path / "bb"), mode="blackbox", spark=spark)
    bb.feed("urls", urls)
    assert bb.run()[0].shuffle_records > 0
    path = make_pipeline(
        HALVES.replace("KEYTYPE", "string")
        .replace("GROUPING", "inner")
        .replace("route_by: k, frame_by", "route_by: 'MOD:key', frame_by"),
        HALVES_MODULE + "\ndef key(r):\n    return r['k']\n",
    )
    fn = cbp.load(path, home=str(tmp_path / "fn"), spark=spark)
    fn.feed("nums", [{"k": "a", "v": 1, "hour": 1}], close=True)
    assert fn.run()[0].shuffle_records == 0
    big = cbp.Pipeline(FLOWS / "url_count.yaml", str(tmp_path / "big"), spark=spark, small_epoch_records=49)
    big.feed("urls", urls)
    assert big.run()[0].shuffle_records == 50
    big.feed("urls", urls[:49])
    assert big.run()[0].shuffle_records == 0
    long_url = (
        "http://h/" + "x" * 100_000
    )  # hashed by the driver a numpy pass per 4 bytes (a 20 MB URL took 77 s): Spark hashes it
    big.feed("urls", [{"url": long_url}, {"url": "http://h/1"}])
    assert big.run()[0].shuffle_records == 2
    assert {r["url"]: r["count"] for r in big.state("url_count")}[long_url] == 1


def test_a_translator_error_in_a_small_epoch_names_the_key_and_commits_nothing(spark, tmp_path, make_pipeline):
    path = make_pipeline(
        HALVES.replace("KEYTYPE", "string").replace("GROUPING", "inner"),
        HALVES_MODULE.replace(
            "    prev = next(state, None)",
            "    if key == 'boom':\n        raise ValueError('no')\n    prev = next(state, None)",
        ),
    )
    p = cbp.load(path, home=str(tmp_path / "h"), spark=spark)
    p.feed("nums", [{"k": "a", "v": 1, "hour": 1}, {"k": "boom", "v": 2, "hour": 1}], close=True)
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert e.value.code == "user-code" and e.value.key == "boom" and e.value.stage == "sum"
    assert p.state("sum") == []


def test_local_tasks_claim_each_partition_once_and_keep_them_on_their_worker(spark, tmp_path):
    """In local mode the tasks claim the partitions (their worker's own first): every partition runs
    exactly once, each epoch's state equals the from-scratch count, and the driver knows which
    worker ran each partition."""
    from cbp.engine.driver import smallepoch

    p = cbp.load(FLOWS / "url_count.yaml", home=str(tmp_path / "h"), spark=spark)
    rng = random.Random(3)
    pool = [f"http://h{i % 7}/p{i}" for i in range(400)]
    want: dict[str, int] = {}
    for _ in range(4):
        recs = [{"url": rng.choice(pool)} for _ in range(300)]
        for r in recs:
            want[r["url"]] = want.get(r["url"], 0) + 1
        p.feed("urls", recs)
        [r] = p.run()
        assert r.shuffle_records == 0  # routed by the driver
        assert {x["url"]: x["count"] for x in p.state("url_count")} == want
    if not is_connect(spark) and spark.sparkContext.defaultParallelism < 4:  # fewer tasks than partitions: they claim
        assert sorted(smallepoch._LAST_WORKER[(p.home.location, "url_count")]) == [0, 1, 2, 3]


def test_a_retried_task_takes_over_its_failed_attempts_claims(tmp_path):
    from cbp.engine.task.runners import claim, claim_order

    assert claim(str(tmp_path), 2, task=0, pid=100) and not claim(str(tmp_path), 2, task=1, pid=101)
    assert claim(str(tmp_path), 2, task=0, pid=102)  # the retry of task 0, in a new worker
    # a worker that ran every partition keeps its share; the rest go to whoever comes
    order, kept = claim_order(6, 2, me=0, pid=5, last={p: 5 for p in range(6)})
    assert kept == {0, 1, 2} and order[:3] == [0, 1, 2]
    order, kept = claim_order(6, 2, me=1, pid=8, last={p: 5 for p in range(6)})
    assert order[:3] == [3, 5, 4]  # nobody keeps 3-5: this task's share (odd) first


def test_envelopes_a_routeby_function_multiplies_past_the_cap_take_the_shuffle(
    spark, tmp_path, make_pipeline, monkeypatch
):
    """A RouteBy that returns many keys per record: once its job's envelopes pass the cap the epoch
    takes the shuffle instead, with the same result."""
    from cbp.engine.driver import smallepoch

    path = make_pipeline(
        HALVES.replace("KEYTYPE", "string")
        .replace("GROUPING", "inner")
        .replace("route_by: k, frame_by", "route_by: 'MOD:fan', frame_by"),
        HALVES_MODULE + "\ndef fan(r):\n    return [r['k'] + str(i) for i in range(40)]\n",
    )
    recs = [{"k": k, "v": 1, "hour": 1} for k in "abcdefgh"]
    runs = {}
    for name, cap in (("small", smallepoch.SMALL_ENVELOPE_BYTES), ("capped", 4000)):
        monkeypatch.setattr(smallepoch, "SMALL_ENVELOPE_BYTES", cap)
        p = cbp.load(path, home=str(tmp_path / name), spark=spark)
        p.feed("nums", recs, close=True)
        [r] = p.run()
        runs[name] = (r.shuffle_records, _canon(p.state("sum")))
    assert runs["small"][0] == 0 and runs["capped"][0] == 8 * 40
    assert runs["small"][1] == runs["capped"][1] and len(runs["small"][1]) == 8 * 40
    # the stage's next epoch of as many records goes straight to the shuffle: no routing job to throw away
    assert smallepoch._ROUTED_BYTES[(p.home.location, "sum")] * 8 >= 4000
    p.feed("nums", [{"k": k, "v": 1, "hour": 2} for k in "abcdefgh"], close=True)
    [r] = p.run()
    assert r.shuffle_records == 8 * 40


def test_envelope_directories_of_killed_runs_are_swept(tmp_path, monkeypatch):
    """A small epoch's envelopes sit in ``cbp-routed-<pid>-*`` until its job ends; a run killed
    meanwhile left them for good (up to 64 MB each). The next process's first small epoch removes
    those of processes that are gone, and any a day old."""
    import os
    import subprocess
    import tempfile
    import time

    from cbp.engine.driver import smallepoch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(smallepoch, "_SWEPT", [])
    dead = subprocess.Popen(["true"])
    dead.wait()
    for name in (
        f"cbp-routed-{dead.pid}-abc",
        f"cbp-routed-{os.getpid()}-def",
        "cbp-routed-old_name",
        "cbp-routed-new_name",
        "other",
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "0.arrows").write_bytes(b"x")
    day_ago = time.time() - 2 * 86400
    os.utime(tmp_path / "cbp-routed-old_name", (day_ago, day_ago))
    smallepoch._sweep_routed()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        f"cbp-routed-{os.getpid()}-def",
        "cbp-routed-new_name",
        "other",
    ]


def test_a_retried_task_runs_the_partition_its_failed_attempt_claimed(tmp_path, monkeypatch):
    """Local-mode small epochs (cbp.engine.task.runners.claiming_task): task 0's first attempt claimed
    partition 0, which the other task's worker kept from the last epoch, and failed on it (a translator
    raised); task 1 is done, its worker still alive. The retry of task 0 runs partition 0 again (before,
    it skipped it as kept by a running worker, and the epoch failed as 'the tasks returned partitions
    [1] of 2' instead of with the translator's error)."""
    import pyarrow as pa
    import pyspark

    from cbp.engine.task import runners

    work = str(tmp_path)
    for p in range(2):
        with pa.OSFile(os.path.join(work, f"{p}.arrows"), "wb") as f, pa.ipc.new_stream(f, pa.schema([])):
            pass
    (tmp_path / "task-1.pid").write_text("200")  # task 1 ran in worker 200, which is still there
    assert runners.claim(work, 1, task=1, pid=200)  # and ran partition 1
    assert runners.claim(work, 0, task=0, pid=100)  # task 0's failed attempt had claimed partition 0
    ran: list[int] = []

    def task(plan, batches, p):
        ran.append(p)
        return iter(())

    class Context:
        @staticmethod
        def partitionId() -> int:
            return 0

    monkeypatch.setattr(pyspark.TaskContext, "get", staticmethod(lambda: Context()))
    last = {0: 200, 1: 200}  # worker 200 ran both partitions last epoch: it keeps its share, partition 0
    list(runners.claiming_task(None, task, work, 2, 2, last, iter([0])))  # the retry, in a new worker
    assert ran == [0]


def test_a_views_small_epoch_runs_in_the_driver_up_to_its_bound(spark, tmp_path, make_pipeline, monkeypatch):
    """A SQL view's small epoch runs in the driver up to ``CBP_DRIVER_RUN_RECORDS`` envelopes (``0``:
    never, a Spark job instead): both give the view a from-scratch sum gives, retractions included."""
    from cbp.engine.driver import smallepoch

    path = make_pipeline(
        "pipeline: bound\nflows:\n  t: {external: true, schema: {g: string, v: int}}\n"
        "views:\n  s: SELECT g, sum(v) AS total, count(*) AS n FROM t GROUP BY g\n"
    )
    ran: list[int] = []
    inner = smallepoch._run_in_driver

    def spy(plan, parts, task):
        ran.append(sum(t.num_rows for t in parts))
        return inner(plan, parts, task)

    monkeypatch.setattr(smallepoch, "_run_in_driver", spy)
    rng = random.Random(5)
    batch = [{"g": f"g{rng.randrange(9)}", "v": rng.randrange(-50, 50)} for _ in range(200)]
    gone = [{**r, "_diff": -1} for r in batch[:70]]
    want: dict[str, list[int]] = {}
    for r in batch + gone:
        w = want.setdefault(r["g"], [0, 0])
        w[0] += r["v"] * r.get("_diff", 1)
        w[1] += r.get("_diff", 1)
    got = {}
    for bound in ("", "0"):
        monkeypatch.setenv("CBP_DRIVER_RUN_RECORDS", bound)
        del ran[:]
        p = cbp.load(path, home=str(tmp_path / f"h{bound}"), spark=spark)
        for recs in (batch, gone):
            p.feed("t", recs)
            p.run()
        got[bound] = {r["g"]: [r["total"], r["n"]] for r in p.output("s", consolidated=True)}
        if not is_connect(spark):
            assert (len(ran) > 0) == (bound == ""), ran  # the bound "0": every epoch a Spark job
    assert got[""] == got["0"] == {g: w for g, w in want.items() if w[1]}


def test_a_small_epoch_with_a_routeby_function_is_one_spark_job(spark, tmp_path, make_pipeline, monkeypatch, request):
    """A RouteBy function's records that fit one routing task are routed by the task that then runs the
    partitions (``cbp.engine.driver.routeandrun``): one Spark job an epoch, where a routing job and a run job
    were two (``ROUTE_AND_RUN = 0``). Jobs counted by Spark's status tracker (classic: a job group of this
    thread) or the queries the client sends (Connect: ``ExecutePlan``, one job each here); the counts equal
    those of a from-scratch sum, retractions included."""
    from collections import Counter

    from cbp.engine.driver import smallepoch

    yaml = (FLOWS / "url_count.yaml").read_text()
    yaml = yaml.replace("route_by: url", "route_by: 'MOD:url_of'").replace("url_count:count_urls", "MOD:count_urls")
    path = make_pipeline(yaml, (FLOWS / "url_count.py").read_text() + "\n\ndef url_of(r):\n    return r['url']\n")
    rng = random.Random(3)
    feeds = [[{"url": f"u{rng.randint(0, 9)}"} for _ in range(40)], [{"url": "u1", "_diff": -1}, {"url": "v"}]]
    jobs = _job_counter(spark, monkeypatch, request)
    p = cbp.load(path, home=str(tmp_path / "one"), spark=spark)
    per_epoch = []
    for feed in feeds:
        p.feed("urls", feed)
        before = jobs()
        [r] = p.run()
        per_epoch.append((jobs() - before, r.shuffle_records))
    want = Counter()
    for feed in feeds:
        for rec in feed:
            want[rec["url"]] += rec.get("_diff", 1)
    assert {r["url"]: r["count"] for r in p.state("url_count")} == {u: n for u, n in want.items() if n}
    assert per_epoch == [(1, 0), (1, 0)]  # one job each, no shuffle
    monkeypatch.setattr(smallepoch, "ROUTE_AND_RUN", 0)  # the routing job, then the run job
    two = cbp.load(path, home=str(tmp_path / "two"), spark=spark)
    two.feed("urls", feeds[0])
    before = jobs()
    two.run()
    assert jobs() - before == 2


def _job_counter(spark, monkeypatch, request):
    """A function giving how many Spark jobs this thread has started since the call."""
    if is_connect(spark):  # no status tracker: the client's queries (a small epoch's job is one query)
        sent = []
        stub = spark.client._stub
        execute = stub.ExecutePlan

        def counted(*a, **k):
            sent.append(1)
            return execute(*a, **k)

        monkeypatch.setattr(stub, "ExecutePlan", counted)
        return lambda: len(sent)
    sc = spark.sparkContext
    group = f"counted-{os.getpid()}-{random.random()}"
    sc.setJobGroup(group, "jobs counted by a test")
    request.addfinalizer(lambda: sc.setLocalProperty("spark.jobGroup.id", None))  # type: ignore[arg-type]
    return lambda: len(sc.statusTracker().getJobIdsForGroup(group))
