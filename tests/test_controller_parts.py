"""The controller's parts share one live spec and snapshot (issue 37, item 7): when the snapshot is
swapped (another Pipeline object moved the home on) or the spec is (a changed home read as it was
recorded), every part sees the new one. The layout rules (no mixins, modules that say what they
read and write) are in test_code_layout.py."""

from __future__ import annotations

from pathlib import Path

from cbp.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[1]


def _parts(ctl):
    return {name: part for name, part in vars(ctl).items() if name.startswith("_") and hasattr(part, "live")}


def test_parts_see_the_snapshot_another_writer_committed(tmp_path):
    home = str(tmp_path / "home")
    p = Pipeline(ROOT / "flows" / "url_count.yaml", home)
    q = Pipeline(ROOT / "flows" / "url_count.yaml", home)
    ctl = p.controller
    parts = _parts(ctl)
    assert {"_journal", "_landing", "_epochs", "_scheduler", "_reads", "_rewind", "_upgrade"} <= set(parts)
    assert all(part.live is ctl.live for part in parts.values())
    before = ctl.st
    q.feed("urls", [{"url": "http://a/"}, {"url": "http://b/"}])  # another Pipeline object commits a feed
    assert p.status()["stages"]["url_count"]["connectors"]["urls"] == {"pending": 1, "complete": 1, "records": 2}
    assert ctl.st is not before and all(part.live.st is ctl.st for part in parts.values())
    assert p.feed("urls", [{"url": "http://c/"}]) == [2]  # lands on the snapshot q committed, not on a stale one
    q.controller.refresh()
    assert p.controller.frames("url_count") == q.controller.frames("url_count") == {"urls": [1, 2]}


def test_notes_reach_every_part_through_the_facade(tmp_path):
    p = Pipeline(ROOT / "flows" / "url_count.yaml", str(tmp_path / "home"))
    heard: list[str] = []
    p.controller.notify = heard.append
    p.feed("urls", [{"url": "http://a/"}])
    p.feed("urls", [{"url": "http://a/"}])  # a duplicate feed: the feeds part tells the listener
    assert any("duplicate-feed" in m for m in heard)
    assert p.controller.notify.listened
