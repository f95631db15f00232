"""Nothing in an inbox leads cbp out of it (``cbp.airflow.inbox``).

Whoever can drop files in ``<inbox>/<pipeline>/<flow>/`` can also plant symbolic links and files
under the names cbp uses there (``landed``, ``rejected``, an error file being written). None of
them makes cbp read, write or move anything outside the inbox, and none ends in a traceback: the
flow is ``bad-inbox`` (its files wait, the other flows land), and a file swapped or removed while
it is landed lands as it was hashed, or not at all.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import WORD_COUNT

pytest.importorskip("airflow", reason="needs apache-airflow (pip install -e '.[airflow]')")

TRIVIAL = "def count(key, state, words, out):\n    pass\n"
WORDS = [{"w": "x"}, {"w": "y"}]


def _jsonl(f: Path, recs=WORDS) -> Path:
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return f


@pytest.fixture
def box(tmp_path, make_pipeline):
    """(yaml, home, inbox, the flow's inbox directory, a directory outside the inbox with a precious file)."""
    yaml = str(make_pipeline(WORD_COUNT, TRIVIAL))
    inbox = tmp_path / "inbox"
    d = inbox / "words"
    d.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious.txt").write_text("PRECIOUS\n")
    _jsonl(outside / "secret.jsonl", [{"w": "secret"}])
    return yaml, str(tmp_path / "home"), inbox, d, outside


def _fed(yaml: str, home: str) -> list[str]:
    import cbp

    if not os.path.isdir(home):
        return []
    return sorted(r["w"] for r in cbp.load(yaml, home=home).output("words"))


def _untouched(outside: Path) -> None:
    assert sorted(os.listdir(outside)) == ["precious.txt", "secret.jsonl"]
    assert (outside / "precious.txt").read_text() == "PRECIOUS\n"


def test_a_link_planted_where_the_error_file_is_written_is_removed_not_followed(box):
    from cbp.airflow.inbox import land_inbox

    yaml, home, inbox, d, outside = box
    (d / "rejected").mkdir()
    os.symlink(outside / "precious.txt", d / "rejected" / "bad.jsonl.error.txt.tmp")
    (d / "bad.jsonl").write_text("not json\n")
    res = land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert res["rejected"]["words"]["bad.1.jsonl"].startswith(
        "bad-record: "
    )  # beside what was planted, which is left alone
    _untouched(outside)
    assert sorted(os.listdir(d / "rejected")) == ["bad.1.jsonl", "bad.1.jsonl.error.txt", "bad.jsonl.error.txt.tmp"]
    assert (d / "rejected" / "bad.1.jsonl.error.txt").read_text().startswith("bad-record: ")
    os.unlink(d / "rejected" / "bad.jsonl.error.txt.tmp")
    (d / "rejected" / "bad.jsonl.error.txt").mkdir()  # a directory where an error file would go
    (d / "bad.jsonl").write_text("not json either\n")
    res = land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert list(res["rejected"]["words"]) == ["bad.2.jsonl"] and "bad_inbox" not in res


@pytest.mark.parametrize("where", ["flow", "landed", "rejected", "landed-file"])
def test_an_inbox_directory_that_is_a_link_or_a_file_lands_nothing_of_its_flow(box, where, capsys):
    from cbp.airflow.inbox import land_inbox

    yaml, home, inbox, d, outside = box
    if where == "flow":
        os.rmdir(d)
        os.symlink(outside, d)  # the flow's directory itself: a link to outside the inbox
    elif where == "landed-file":
        (d / "landed").write_text("a stray file under the name landed files go to\n")
        _jsonl(d / "a.jsonl")
    else:
        os.symlink(outside, d / where)
        _jsonl(d / "a.jsonl")
        (d / "bad.jsonl").write_text("not json\n")
    res = land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert res["landed"] == {} and res["rejected"] == {}
    assert res["bad_inbox"]["words"].startswith("bad-inbox: ")
    assert "[bad-inbox]" in capsys.readouterr().err
    _untouched(outside)
    assert _fed(yaml, home) == []
    if where != "flow":
        assert "a.jsonl" in os.listdir(d)  # it waits for the directory to be fixed
        if where == "landed-file":
            os.unlink(d / "landed")
        else:
            os.unlink(d / where)
        res = land_inbox(yaml, home, str(inbox), ["words"], settle=0)
        assert res["landed"] == {"words": ["a.jsonl"]} and "bad_inbox" not in res
        assert _fed(yaml, home) == ["x", "y"]


def test_the_other_flows_land_beside_a_bad_inbox_directory(tmp_path, make_pipeline):
    import cbp
    from cbp.airflow.inbox import land_inbox

    two = WORD_COUNT.replace(
        "  words: {external: true, schema: {w: string}}",
        "  words: {external: true, schema: {w: string}}\n  more: {external: true, schema: {w: string}}",
    )
    two = two.replace(
        "inputs: [{flow: words, route_by: w}]", "inputs: [{flow: words, route_by: w}, {flow: more, route_by: w}]"
    )
    yaml = str(make_pipeline(two, "def count(key, state, words, more, out):\n    pass\n"))
    inbox, home = tmp_path / "inbox", str(tmp_path / "home")
    for flow in ("words", "more"):
        (inbox / flow).mkdir(parents=True)
        _jsonl(inbox / flow / "a.jsonl")
    os.symlink(tmp_path, inbox / "words" / "landed")
    res = land_inbox(
        yaml, home, str(inbox), ["nope", "words", "more"], settle=0
    )  # a flow without a directory: nothing to do
    assert list(res["bad_inbox"]) == ["words"] and res["landed"] == {"more": ["a.jsonl"]}
    assert len(cbp.load(yaml, home=home).output("more")) == 2 and cbp.load(yaml, home=home).output("words") == []


def test_a_file_renamed_over_one_being_landed_waits_for_the_next_run(box, monkeypatch):
    """A producer that publishes by rename may replace ``a.jsonl`` while cbp lands the old one: the
    old one's records land, and the new file is not moved to ``landed/`` unread."""
    import cbp
    from cbp.airflow import inbox as inbox_mod

    yaml, home, inbox, d, outside = box
    _jsonl(d / "a.jsonl", [{"w": "old"}])
    real = cbp.Pipeline.feed

    def feed_then_replace(self, *a, **k):
        out = real(self, *a, **k)
        _jsonl(d / ".new", [{"w": "new"}])
        os.replace(d / ".new", d / "a.jsonl")
        return out

    monkeypatch.setattr(cbp.Pipeline, "feed", feed_then_replace)
    res = inbox_mod.land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert res["landed"] == {"words": ["a.jsonl"]} and os.listdir(d / "landed") == []
    monkeypatch.undo()
    res = inbox_mod.land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert res["landed"] == {"words": ["a.jsonl"]} and os.listdir(d / "landed") == ["a.jsonl"]
    assert _fed(yaml, home) == ["new", "old"]


def test_a_file_swapped_after_it_was_hashed_lands_as_it_was_hashed(box, monkeypatch):
    from cbp.airflow import inbox as inbox_mod

    yaml, home, inbox, d, outside = box
    _jsonl(d / "a.jsonl")
    real = inbox_mod.inbox_feed_id

    def swap(fh, name):
        fid = real(fh, name)
        os.unlink(d / name)
        os.symlink(outside / "secret.jsonl", d / name)  # the dropper's swap, right after the hash
        return fid

    monkeypatch.setattr(inbox_mod, "inbox_feed_id", swap)
    res = inbox_mod.land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert res["landed"] == {"words": ["a.jsonl"]}
    assert _fed(yaml, home) == ["x", "y"]  # what was hashed, never the secret
    _untouched(outside)


def test_a_file_removed_while_it_is_landed_lands_once_or_not_at_all(box, monkeypatch):
    from cbp.airflow import inbox as inbox_mod

    yaml, home, inbox, d, outside = box
    _jsonl(d / "a.jsonl")
    (d / "b.jsonl").write_text("not json\n")
    real = inbox_mod.inbox_feed_id

    def remove(fh, name):
        fid = real(fh, name)
        os.unlink(d / name)  # gone between its hash and its move
        return fid

    monkeypatch.setattr(inbox_mod, "inbox_feed_id", remove)
    res = inbox_mod.land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert res["landed"] == {"words": ["a.jsonl"]}  # read through the open file: landed, and nothing left to move
    assert res["rejected"] == {}  # b is gone: nothing to reject, no error file without its file
    assert os.listdir(d / "rejected") == [] and os.listdir(d / "landed") == []
    assert _fed(yaml, home) == ["x", "y"]


def test_announcement_markers_of_any_shape_and_planted_links_are_survived(tmp_path):
    from cbp.airflow.inbox import read_announced, write_announced

    home = tmp_path / "home"
    marker = home / "_airflow" / "announced" / "words.json"
    marker.parent.mkdir(parents=True)
    for bad in [
        "[]",
        '{"feeds": "x", "inbox": []}',
        '{"feeds": 0}',
        '{"feeds": 0, "inbox": 5}',
        '{"feeds": 1e400, "inbox": []}',
        '{"feeds": -1, "inbox": []}',
        '{"feeds": 0, "inbox": [1]}',
        "not json",
    ]:
        marker.write_text(bad)
        assert read_announced(str(home), "words") == {"feeds": 0, "inbox": []}, bad
    victim = tmp_path / "victim.txt"
    victim.write_text("PRECIOUS\n")
    os.symlink(victim, f"{marker}.tmp-{os.getpid()}")
    write_announced(str(home), "words", {"feeds": 2, "inbox": ["a.jsonl"]})
    assert victim.read_text() == "PRECIOUS\n"
    assert read_announced(str(home), "words") == {"feeds": 2, "inbox": ["a.jsonl"]}


def test_a_file_name_with_a_line_break_is_logged_on_one_line(box, capsys):
    from cbp.airflow.inbox import land_inbox, shown_name

    yaml, home, inbox, d, outside = box
    _jsonl(d / "a\nb.jsonl")
    res = land_inbox(yaml, home, str(inbox), ["words"], settle=0)
    assert res["landed"] == {"words": ["a\nb.jsonl"]}
    out = capsys.readouterr().out
    assert len(out.strip().splitlines()) == 1 and "a\\nb.jsonl" in out
    assert shown_name("x\x1b[31m\u2028y") == "x\\x1b[31m\\u2028y"
