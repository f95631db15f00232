"""A home written by an earlier release (tests/fixtures/home-v1, see tests/fixtures/old_home.py)
still works: status, state, output, then more feeds and runs, with the same results as a fresh
home that got the same feeds and runs from this release."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fixtures.old_home import replay

FIXTURE = Path(__file__).parent / "fixtures" / "home-v1"
MORE = [
    ("url_count", "feed", {"flow": "urls", "records": [{"url": "e"}, {"url": "b"}]}),
    (
        "url_count",
        "feed",
        {"flow": "urls", "records": [{"url": "b"}, {"url": "c"}], "feed_id": "day2"},
    ),  # a retry: lands nothing
    ("url_count", "run", {}),
    (
        "url_count",
        "feed",
        {"flow": "urls", "records": [{"url": "a", "_diff": -1}, {"url": "d"}]},
    ),  # a retraction on an old home's table
    ("url_count", "run", {}),
    ("set_diff", "feed", {"flow": "crawl_b", "records": [{"url": "u6", "hour": 4}, {"url": "u7", "hour": 5}]}),
    ("set_diff", "run", {}),
]


def _view(p) -> dict:
    st = p.status()
    view = {
        "epochs": {s: v["epochs"] for s, v in st["stages"].items()},
        "pending": {s: v["connectors"] for s, v in st["stages"].items()},
        "state": {s: p.state(s) for s in p.spec.stages if p.spec.stages[s].state_schema is not None},
    }
    for flow, fl in p.spec.flows.items():
        view[f"flow:{flow}"] = p.output(flow)
        if fl.producer is not None:
            n = view["epochs"][fl.producer]
            view[f"by-epoch:{flow}"] = [p.output(flow, epoch=e) for e in range(1, n + 1)]
    for s, spec in p.spec.stages.items():
        if spec.state_schema is not None:
            view[f"state-after:{s}"] = [p.state(s, epoch=e) for e in range(1, view["epochs"][s] + 1)]
    return view


@pytest.fixture
def homes(spark, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(FIXTURE, old)
    return replay(str(old), spark, steps=[]), replay(str(tmp_path / "fresh"), spark)


def test_old_home_reads_like_a_fresh_one(homes):
    old, fresh = homes
    for name in fresh:
        assert _view(old[name]) == _view(fresh[name]), name
    assert old["url_count"].state("url_count") == [
        {"url": "a", "count": 2},
        {"url": "b", "count": 2},
        {"url": "c", "count": 1},
    ]


def test_old_home_goes_on_like_a_fresh_one(homes, spark, tmp_path):
    old, fresh = homes
    for name, action, args in MORE:
        for pipes in (old, fresh):
            p = pipes[name]
            if action == "feed":
                p.feed(args["flow"], args["records"], feed_id=args.get("feed_id"))
            else:
                p.run()
    for name in fresh:
        assert _view(old[name]) == _view(fresh[name]), name
    assert {r["url"]: r["count"] for r in old["url_count"].state("url_count")} == {
        "a": 2,
        "b": 3,
        "c": 1,
        "d": 2,
        "e": 1,
    }
