"""URLCount (paper §2.1) against a from-scratch pandas computation after every epoch, in both modes."""

from __future__ import annotations

import random

import pandas as pd
import pytest
from conftest import FLOWS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cbp.testing import Increment, replay

YAML = FLOWS / "url_count.yaml"


def random_increments(seed: int, n: int = 12) -> list[list[dict]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        size = rng.choice([0, 1, 5, 30, 80])
        out.append([{"url": f"http://site{rng.randint(0, 6)}.example/p{rng.randint(0, 50)}?q=é"} for _ in range(size)])
    return out


def check_against_pandas(result, increments):
    seen = pd.DataFrame({"url": pd.Series([], dtype=str)})
    for step, inc in zip(result.steps, increments):
        seen = pd.concat([seen, pd.DataFrame(inc, columns=["url"])], ignore_index=True)
        counts = seen.groupby("url").size()
        expected_state = sorted(({"url": u, "count": int(c)} for u, c in counts.items()), key=lambda r: r["url"])
        assert sorted(step.state["url_count"], key=lambda r: r["url"]) == expected_state
        changed = sorted({r["url"] for r in inc})
        expected_out = [{"url": u, "count": int(counts[u])} for u in changed]
        assert sorted(step.outputs.get("counts", []), key=lambda r: r["url"]) == expected_out
        assert len(step.epochs) == (1 if inc else 0)


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
def test_url_count_matches_pandas(spark, tmp_path, mode):
    increments = random_increments(seed=11)
    result = replay(
        YAML, [Increment("urls", inc) for inc in increments], home=str(tmp_path / "home"), mode=mode, max_state_files=3
    )  # small, so direct mode compacts along the way
    check_against_pandas(result, increments)


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
def test_home_given_as_uri(spark, tmp_path, mode):
    """A home given as a URI (here file://) goes through the filesystem abstraction, not os.path."""
    increments = random_increments(seed=3, n=4)
    result = replay(YAML, [Increment("urls", inc) for inc in increments], home=(tmp_path / "home").as_uri(), mode=mode)
    check_against_pandas(result, increments)
    assert (tmp_path / "home" / "stages" / "url_count" / "state" / "_delta_log").is_dir()


def test_mode_switch_keeps_results(spark, tmp_path):
    """State written in one mode is read correctly by the other (direct -> black-box -> direct)."""
    increments = random_increments(seed=5, n=9)
    home = str(tmp_path / "home")
    import cbp

    seen: list[dict] = []
    for i, inc in enumerate(increments):
        mode = ["direct", "blackbox", "direct"][i // 3]
        p = cbp.load(YAML, home=home, mode=mode)
        p.feed("urls", inc)
        p.run()
        seen.extend(inc)
        counts = pd.DataFrame(seen, columns=["url"]).groupby("url").size()
        assert {r["url"]: r["count"] for r in p.state("url_count")} == {u: int(c) for u, c in counts.items()}


urls = st.lists(st.sampled_from([f"http://h{i % 4}/x{i}" for i in range(25)]), max_size=40)


@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
@given(st.lists(urls, min_size=10, max_size=10))
def test_url_count_property(spark, tmp_path_factory, incs):
    increments = [[{"url": u} for u in inc] for inc in incs]
    result = replay(
        YAML, [Increment("urls", inc) for inc in increments], home=str(tmp_path_factory.mktemp("h")), max_state_files=2
    )
    check_against_pandas(result, increments)
