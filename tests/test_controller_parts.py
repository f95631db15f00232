"""The controller's parts share one live spec and snapshot (issue 37, item 7): when the snapshot is
swapped (another Pipeline object moved the home on) or the spec is (a changed home read as it was
recorded), every part sees the new one; a Pipeline calls the parts with no layer of forwards
between (issue 47, item 2). The layout rules (no mixins, modules that say what they read and
write) are in test_code_layout.py."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from cbp.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[1]


def _parts(p):
    return {name: part for name, part in vars(p.parts).items() if hasattr(part, "live")}


def _forwarders():
    spec = importlib.util.spec_from_file_location("forwarders", ROOT / "scripts" / "forwarders.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up
    spec.loader.exec_module(mod)
    return mod


def test_parts_see_the_snapshot_another_writer_committed(tmp_path):
    home = str(tmp_path / "home")
    p = Pipeline(ROOT / "flows" / "url_count.yaml", home)
    q = Pipeline(ROOT / "flows" / "url_count.yaml", home)
    live = p.parts.live
    parts = _parts(p)
    assert {"journal", "landing", "epochs", "scheduler", "reads", "rewind", "upgrade"} <= set(parts)
    assert all(part.live is live for part in parts.values())
    before = live.st
    q.feed("urls", [{"url": "http://a/"}, {"url": "http://b/"}])  # another Pipeline object commits a feed
    assert p.status()["stages"]["url_count"]["connectors"]["urls"] == {"pending": 1, "complete": 1, "records": 2}
    assert live.st is not before and all(part.live.st is live.st for part in parts.values())
    assert p.feed("urls", [{"url": "http://c/"}]) == [2]  # lands on the snapshot q committed, not on a stale one
    q.parts.journal.refresh()
    assert p.parts.scheduler.frames("url_count") == q.parts.scheduler.frames("url_count") == {"urls": [1, 2]}


def test_notes_reach_every_part(tmp_path):
    p = Pipeline(ROOT / "flows" / "url_count.yaml", str(tmp_path / "home"))
    heard: list[str] = []
    p.parts.notice.listener = heard.append
    p.feed("urls", [{"url": "http://a/"}])
    p.feed("urls", [{"url": "http://a/"}])  # a duplicate feed: the feeds part tells the listener
    assert any("duplicate-feed" in m for m in heard)
    assert p.parts.notice.listened


def test_one_layer_between_users_and_the_parts():
    """Pipeline calls the parts themselves (issue 47, item 2): the composition of the parts
    forwards nothing, and no Pipeline member forwards under another name."""
    fwd = _forwarders()
    assert not [m for m in fwd.members(str(ROOT / "cbp" / "controller" / "__init__.py"), "Parts") if m.target]
    assert not [m.name for m in fwd.members(str(ROOT / "cbp" / "pipeline.py"), "Pipeline") if m.renames]
    assert not hasattr(__import__("cbp.controller", fromlist=["x"]), "Controller")
