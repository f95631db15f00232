"""A user's replay test prints no DeprecationWarning raised from cbp's own code (pyproject's
filterwarnings ignores them globally, so the test turns them back on)."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path

from conftest import FLOWS

import cbp
from cbp.testing import Increment, replay

CBP_DIR = str(Path(cbp.__file__).resolve().parent)


def test_replay_emits_no_deprecation_warning_from_cbp(spark, tmp_path):
    incs = [Increment("urls", [{"url": f"http://h/p{i % 3}"} for i in range(n)]) for n in (4, 7)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run = replay(FLOWS / "url_count.yaml", incs, home=str(tmp_path / "h"), spark=spark)
    expected = Counter(r["url"] for inc in incs for r in inc.records)
    assert {r["url"]: r["count"] for r in run.final_state("url_count")} == expected
    ours = [
        w
        for w in caught
        if issubclass(w.category, DeprecationWarning) and str(Path(w.filename).resolve()).startswith(CBP_DIR)
    ]
    assert not ours, [f"{w.filename}:{w.lineno}: {w.message}" for w in ours]
