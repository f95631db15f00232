"""SetDiff (paper §2.2): framing by hour, a custom Runnable, two outputs; checked against pandas after every epoch."""

from __future__ import annotations

import random

import pandas as pd
import pytest
from conftest import FLOWS

from cbp.testing import Increment, replay

YAML = FLOWS / "set_diff.yaml"


def crawl(rng: random.Random, hours: int, skip: float) -> list[dict]:
    recs = []
    for h in range(1, hours + 1):
        if h < hours and rng.random() < skip:
            continue  # this crawler found nothing in hour h
        for _ in range(rng.randint(1, 12)):
            recs.append({"url": f"http://x/{rng.randint(0, 40)}", "hour": h})
    return recs


def chunk(rng: random.Random, recs: list[dict]) -> list[list[dict]]:
    out, i = [], 0
    while i < len(recs):
        n = rng.randint(1, 15)
        out.append(recs[i : i + n])
        i += n
    return out


def expected_by_hour(a: list[dict], b: list[dict]):
    """From scratch: hours ascending; a URL new in hour h goes to only_a / only_b if one crawler alone saw it."""
    da, db = pd.DataFrame(a), pd.DataFrame(b)
    seen: set[str] = set()
    result = []
    for h in sorted(set(da["hour"]) | set(db["hour"])):
        ua, ub = set(da[da.hour == h].url), set(db[db.hour == h].url)
        new = (ua | ub) - seen
        result.append((h, sorted(new & (ua - ub)), sorted(new & (ub - ua)), sorted(seen | ua | ub)))
        seen |= ua | ub
    return result


@pytest.mark.parametrize("mode,seed", [("direct", 1), ("blackbox", 2), ("direct", 3)])
def test_set_diff_matches_pandas(spark, tmp_path, monkeypatch, mode, seed):
    if seed == 3:
        monkeypatch.setattr(
            "cbp.spec.feedfiles._CHUNK", 3
        )  # feeds validated in many small Arrow chunks, frames across them
    rng = random.Random(seed)
    a, b = crawl(rng, 8, 0.3), crawl(rng, 8, 0.3)
    feeds = [("crawl_a", c) for c in chunk(rng, a)] + [("crawl_b", c) for c in chunk(rng, b)]
    # interleave the two crawlers' feeds, keeping each crawler's own order
    qa, qb = [f for f in feeds if f[0] == "crawl_a"], [f for f in feeds if f[0] == "crawl_b"]
    order = []
    while qa or qb:
        q = qa if (qa and (not qb or rng.random() < 0.5)) else qb
        order.append(q.pop(0))
    incs = [Increment(flow, recs) for flow, recs in order]
    incs += [Increment("crawl_a", [], close=True), Increment("crawl_b", [], close=True)]
    assert len(incs) >= 10
    result = replay(YAML, incs, home=str(tmp_path / "h"), mode=mode, state_per_epoch=True)

    epochs = [e for s in result.steps for e in s.epochs]
    expected = expected_by_hour(a, b)
    assert len(epochs) == len(expected)  # one epoch per hour, in hour order
    for cap, (hour, only_a, only_b, seen) in zip(epochs, expected):
        assert sorted(r["url"] for r in cap.outputs["only_a"]) == only_a, f"hour {hour}"
        assert sorted(r["url"] for r in cap.outputs["only_b"]) == only_b, f"hour {hour}"
        assert all(r["hour"] == hour for r in cap.outputs["only_a"] + cap.outputs["only_b"])
        assert sorted(r["url"] for r in cap.state) == seen


def test_open_frame_waits_for_a_later_hour_or_close(spark, tmp_path):
    import cbp

    p = cbp.load(YAML, home=str(tmp_path / "h"))
    p.feed("crawl_a", [{"url": "u1", "hour": 1}])
    p.feed("crawl_b", [{"url": "u2", "hour": 1}])
    assert p.run() == []  # hour 1 is still open on both flows
    p.feed("crawl_a", [{"url": "u3", "hour": 2}])  # completes crawl_a's hour 1
    assert p.run() == []  # crawl_b's hour 1 is still open
    p.close("crawl_b")
    reps = p.run()
    assert [r.epoch for r in reps] == [1]
    assert p.output("only_a") == [{"url": "u1", "hour": 1}]
    assert p.output("only_b") == [{"url": "u2", "hour": 1}]
    st = p.status()["stages"]["set_diff"]["connectors"]
    assert st["crawl_a"] == {"pending": 1, "complete": 0, "records": 1}
