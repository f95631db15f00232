"""Bad input never lands and never changes state; every error names the file/line/stage/flow/epoch/key."""

from __future__ import annotations

import json

import pytest

import cbp
from cbp import InputError, UserCodeError
from cbp.cli import main
from conftest import FLOWS, WORD_COUNT, WORD_COUNT_MODULE

URLS = FLOWS / "url_count.yaml"


def snapshot(p):
    return p.state("url_count"), p.output("counts"), p.status()


@pytest.fixture
def fed(spark, tmp_path):
    p = cbp.load(URLS, home=str(tmp_path / "home"))
    p.feed("urls", [{"url": "a"}, {"url": "b"}, {"url": "a"}])
    p.run()
    return p


@pytest.mark.parametrize(
    "lines,words",
    [
        (['{"url": "x"}', '{"url": "y"'], [":2:", "malformed JSON"]),
        (['{"url": "x"}', "{}"], [":2:", "field 'url'", "missing"]),
        (['{"url": 5}'], [":1:", "field 'url'", "string"]),
        (['{"url": "x", "extra": 1}'], [":1:", "field 'extra'", "unknown field"]),
        (['["not", "an", "object"]'], [":1:", "JSON object"]),
        (['{"url": "x"}', '{"url": "x", "url": "y"}'], [":2:", "field 'url'", "twice"]),
    ],
)
def test_bad_records_reject_the_whole_file(fed, tmp_path, lines, words):
    before = snapshot(fed)
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as e:
        fed.feed("urls", path)
    msg = str(e.value)
    assert str(path) in msg and "flow 'urls'" in msg and "nothing was landed" in msg
    for w in words:
        assert w in msg, msg
    assert snapshot(fed) == before
    assert fed.run() == []


def test_non_utf8_file(fed, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"url": "\xff\xfe"}\n')
    with pytest.raises(InputError, match="not UTF-8"):
        fed.feed("urls", path)


def test_cli_exit_codes_and_messages(fed, tmp_path, capsys):
    home = fed.home.location
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"url": "ok"}\n{"url": 3}\n')
    assert main(["feed", str(URLS), "urls", str(bad), "--home", home]) == 3
    err = capsys.readouterr().err
    assert f"{bad}:2" in err and "field 'url'" in err
    assert main(["feed", str(URLS), "nope", str(bad), "--home", home]) == 2
    assert "unknown flow 'nope'" in capsys.readouterr().err
    assert main(["feed", str(URLS), "counts", str(bad), "--home", home]) == 3
    assert "only external flows" in capsys.readouterr().err
    assert main(["state", str(URLS), "nope", "--home", home]) == 2
    assert "unknown stage 'nope'" in capsys.readouterr().err
    assert main(["output", str(URLS), "nope", "--home", home]) == 2
    assert main(["state", str(URLS), "url_count", "--home", home, "--epoch", "7"]) == 2
    assert "has not run epoch 7" in capsys.readouterr().err
    assert main(["state", str(URLS), "url_count", "--home", home]) == 0
    out = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert out == [{"url": "a", "count": 2}, {"url": "b", "count": 1}]
    assert main(["feed", str(URLS), "urls", "--home", home]) == 2  # no file and no --close
    assert "give FILE.jsonl" in capsys.readouterr().err
    assert main(["output", str(URLS), "urls", "--epoch", "2", "--home", home]) == 2  # one feed so far
    assert "external flow 'urls' has had 1 feed(s)" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["run", str(URLS), "--max-epochs", "0", "--home", home])
    assert e.value.code == 2 and "must be 1 or more" in capsys.readouterr().err
    assert main(["status", str(URLS), "--home", str(tmp_path / "typo")]) == 0
    assert "nothing has been fed or run in" in capsys.readouterr().err


FAILING = """
pipeline: boom
flows:
  words: {external: true, schema: {w: string}}
  counts: {schema: {w: string, n: int}}
stages:
  count:
    translator: MOD:count
    partitions: 2
    inputs: [{flow: words, route_by: w}]
    state: {schema: {w: string, n: int}}
    outputs: [counts]
"""
FAILING_MODULE = """
def count(key, state, words, out):
    prev = next(state, None)
    n = sum(1 for _ in words) + (prev["n"] if prev else 0)
    if key == "poison":
        raise ValueError("cannot count poison")
    if key == "badtype":
        out.counts.write({"w": key, "n": "many"})
    out.state.write({"w": key, "n": n})
    out.counts.write({"w": key, "n": n})
"""


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
@pytest.mark.parametrize("bad,words", [
    ("poison", ["translator", "raised ValueError: cannot count poison", "key 'poison'"]),
    ("badtype", ["does not fit its schema", "'counts'", "field 'n'", "key 'badtype'"]),
])
def test_failing_translator_commits_nothing(spark, make_pipeline, tmp_path, mode, bad, words):
    path = make_pipeline(FAILING, FAILING_MODULE)
    p = cbp.load(path, home=str(tmp_path / "h"), mode=mode)
    p.feed("words", [{"w": "x"}, {"w": "y"}])
    p.run()
    before = (p.state("count"), p.output("counts"))
    p.feed("words", [{"w": "x"}, {"w": bad}, {"w": "z"}])
    with pytest.raises(UserCodeError) as e:
        p.run()
    msg = str(e.value)
    assert "stage 'count' epoch 2" in msg and "nothing of this epoch was committed" in msg
    for w in words:
        assert w in msg, msg
    again = cbp.load(path, home=str(tmp_path / "h"), mode=mode)  # a new process sees the same
    assert (again.state("count"), again.output("counts")) == before
    assert again.status()["stages"]["count"]["epochs"] == 1
    assert again.status()["stages"]["count"]["connectors"]["words"]["pending"] == 1  # still waiting


def test_failing_runnable_is_named(spark, make_pipeline, tmp_path):
    path = make_pipeline(FAILING.replace("    outputs: [counts]", "    outputs: [counts]\n    runnable: MOD:run"),
                         FAILING_MODULE + "\ndef run(frames, state):\n    return {'nope'}, set(), state\n")
    p = cbp.load(path, home=str(tmp_path / "h"))
    p.feed("words", [{"w": "x"}])
    with pytest.raises(UserCodeError, match="stage 'count' runnable .*'nope'"):
        p.run()


def test_runnable_and_frame_states_must_be_storable(spark, make_pipeline, tmp_path):
    """A runnable state or framing key that JSON cannot hold is refused before anything runs or lands."""
    path = make_pipeline(FAILING.replace("    outputs: [counts]", "    outputs: [counts]\n    runnable: MOD:run"),
                         FAILING_MODULE + "\ndef run(frames, state):\n    return {'words'}, {'words'}, {'seen': {1, 2}}\n")
    p = cbp.load(path, home=str(tmp_path / "h"))
    p.feed("words", [{"w": "x"}])
    with pytest.raises(UserCodeError, match="stage 'count' runnable 'mod_.*:run' returned a state that cannot be stored as JSON") as e:
        p.run()
    assert e.value.code == "not-storable"
    assert p.status()["stages"]["count"]["epochs"] == 0 and p.state("count") == []

    framed = make_pipeline(FAILING.replace("route_by: w}", "route_by: w, frame_by: MOD:frame}"),
                           FAILING_MODULE + "\ndef frame(rec, state):\n    return {rec['w']}, state\n")
    p = cbp.load(framed, home=str(tmp_path / "h2"))
    with pytest.raises(UserCodeError, match="flow 'words': frame_by .* returned a framing key .*'w': 'x'.* cannot be stored as JSON"):
        p.feed("words", [{"w": "x"}])
    assert p.status()["stages"]["count"]["connectors"]["words"]["pending"] == 0
    assert p.output("words") == []


def test_missing_java_is_explained(monkeypatch):
    import shutil

    from cbp import RuntimeStateError
    from cbp.sparksession import get_spark

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(RuntimeStateError) as e:
        get_spark()
    assert e.value.code == "no-java" and "apt-get install" in str(e.value)




@pytest.mark.parametrize("change, message", [
    (("partitions: 2", "partitions: 3"), "stage 'count' no longer fits its state stored in .*: partitions changed from 2 to 3"),
    (("state: {schema: {w: string, n: int}}", "state: {schema: {w: string, n: float}}"), "field 'n' changed from int to float"),
    (("state: {schema: {w: string, n: int}}", 'state: {schema: {w: string, n: int, x: "int?"}}'), "field 'x' added"),
    (("schema: {w: string}}", 'schema: {w: string, v: "int?"}}'), "flow 'words' no longer fits its increments.*field 'v' added"),
    (("inputs: [{flow: words, route_by: w}]", "inputs: [{flow: words, route_by: w, frame_by: w}]"), "flow 'words'.*frame_by added"),
])
def test_yaml_that_no_longer_fits_the_home(spark, make_pipeline, tmp_path, change, message):
    """Changing partitions, a schema or framing once data is stored is refused by name; the old YAML still works."""
    home = str(tmp_path / "h")
    good = make_pipeline(WORD_COUNT, WORD_COUNT_MODULE)
    p = cbp.load(good, home=home)
    p.feed("words", [{"w": "a"}, {"w": "b"}])
    p.run()
    changed = make_pipeline(WORD_COUNT.replace(*change), WORD_COUNT_MODULE)
    with pytest.raises(cbp.SpecError, match=message) as e:
        cbp.load(changed, home=home)
    assert e.value.code == "home-mismatch" and str(changed) in str(e.value)
    p = cbp.load(good, home=home)
    p.feed("words", [{"w": "a"}])
    p.run()
    assert {r["w"]: r["n"] for r in p.state("count")} == {"a": 2, "b": 1}
