"""Repartitioning a stage's state on an s3:// home (moto, tests/moto_s3.py) equals a fresh local run."""

from __future__ import annotations

import uuid

from moto_s3 import BUCKET, s3_server  # noqa: F401  (the module's S3 server fixture, named s3)
from test_evolution import COUNT, FEEDS, MODULE, _key

import cbp


def test_repartition_on_s3_equals_a_fresh_local_run(spark, s3, make_pipeline, tmp_path):
    old = make_pipeline(COUNT, MODULE)
    new = make_pipeline(COUNT.replace("partitions: 2", "partitions: 3"), MODULE)
    home = f"s3://{BUCKET}/homes/{uuid.uuid4().hex[:10]}"
    p = cbp.load(old, home=home)
    for recs in FEEDS[:2]:
        p.feed("words", recs)
        p.run()
    p = cbp.load(new, home=home)
    assert [c.kind for c in p.plan().changes if c.data] == ["state-rewrite"]
    p.upgrade()
    p.feed("words", FEEDS[2])
    p.run()
    f = cbp.load(new, home=str(tmp_path / "fresh"))
    for recs in (FEEDS[0] + FEEDS[1], FEEDS[2]):
        f.feed("words", recs)
        f.run()
    assert sorted(map(_key, p.state("count"))) == sorted(map(_key, f.state("count")))
    parts = {
        int(x["partition"])
        for x in p.home.table_files("stages/count/state", p.parts.live.st.stages["count"].state_version)
    }
    assert parts <= {0, 1, 2} and 2 in parts  # the state lies in three partitions now
