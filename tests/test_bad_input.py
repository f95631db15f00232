"""Bad input never lands and never changes state; every error names the file/line/stage/flow/epoch/key."""

from __future__ import annotations

import json

import pytest
from conftest import FLOWS, WORD_COUNT, WORD_COUNT_MODULE
from opcount import counting_calls

import cbp
from cbp import InputError, UserCodeError
from cbp.cli import main

URLS = FLOWS / "url_count.yaml"
#: Calls a refused feed may make (bounded work counted, not timed): every hostile line and record
#: here is refused within it; a 10,000-deep record walked whole, or a 64 MiB line read a byte at a
#: time, would make millions.
BOUNDED = 300_000


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
    assert "give FILE" in capsys.readouterr().err
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
    if key == "interrupt":
        raise KeyboardInterrupt()
    if key == "cancelled":
        import asyncio
        raise asyncio.CancelledError()
    out.state.write({"w": key, "n": n})
    out.counts.write({"w": key, "n": n})
"""


@pytest.mark.parametrize("mode", ["direct", "blackbox"])
@pytest.mark.parametrize(
    "bad,words",
    [
        ("poison", ["translator", "raised ValueError: cannot count poison", "key 'poison'"]),
        ("badtype", ["does not fit its schema", "'counts'", "field 'n'", "key 'badtype'"]),
        ("interrupt", ["translator", "raised KeyboardInterrupt", "key 'interrupt'"]),
        ("cancelled", ["translator", "raised CancelledError", "key 'cancelled'"]),
    ],
)
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
    path = make_pipeline(
        FAILING.replace("    outputs: [counts]", "    outputs: [counts]\n    runnable: MOD:run"),
        FAILING_MODULE + "\ndef run(frames, state):\n    return {'nope'}, set(), state\n",
    )
    p = cbp.load(path, home=str(tmp_path / "h"))
    p.feed("words", [{"w": "x"}])
    with pytest.raises(UserCodeError, match="stage 'count' runnable .*'nope'"):
        p.run()


def test_runnable_and_frame_states_must_be_storable(spark, make_pipeline, tmp_path):
    """A runnable state or framing key that JSON cannot hold is refused before anything runs or lands."""
    path = make_pipeline(
        FAILING.replace("    outputs: [counts]", "    outputs: [counts]\n    runnable: MOD:run"),
        FAILING_MODULE + "\ndef run(frames, state):\n    return {'words'}, {'words'}, {'seen': {1, 2}}\n",
    )
    p = cbp.load(path, home=str(tmp_path / "h"))
    p.feed("words", [{"w": "x"}])
    with pytest.raises(
        UserCodeError, match="stage 'count' runnable 'mod_.*:run' returned a state that cannot be stored as JSON"
    ) as e:
        p.run()
    assert e.value.code == "not-storable"
    assert p.status()["stages"]["count"]["epochs"] == 0 and p.state("count") == []

    framed = make_pipeline(
        FAILING.replace("route_by: w}", "route_by: w, frame_by: MOD:frame}"),
        FAILING_MODULE + "\ndef frame(rec, state):\n    return {rec['w']}, state\n",
    )
    p = cbp.load(framed, home=str(tmp_path / "h2"))
    with pytest.raises(
        UserCodeError, match="flow 'words': frame_by .* gave a framing key .*'w': 'x'.* cannot be stored as JSON"
    ):
        p.feed("words", [{"w": "x"}])
    assert p.status()["stages"]["count"]["connectors"]["words"]["pending"] == 0
    assert p.output("words") == []

    # too long to keep in every snapshot: a function's key or a field's value
    big = make_pipeline(
        FAILING.replace("route_by: w}", "route_by: w, frame_by: MOD:frame}"),
        FAILING_MODULE + "\ndef frame(rec, state):\n    return rec['w'] * 2, state\n",
    )
    field = make_pipeline(FAILING.replace("route_by: w}", "route_by: w, frame_by: w}"), FAILING_MODULE)
    for i, yaml in enumerate((big, field)):
        p = cbp.load(yaml, home=str(tmp_path / f"h3{i}"))
        with pytest.raises(UserCodeError, match="framing key .* characters as JSON") as e:
            p.feed("words", [{"w": "x" * (1 << 20)}])
        assert e.value.code == "not-storable" and p.output("words") == []
        p.feed("words", [{"w": "x" * 1000}])  # a long key, but no longer than a snapshot keeps


DRIVER_SIDE = """
class Odd(BaseException):
    pass


class Unprintable(Exception):
    def __str__(self):
        raise ValueError("no message either")


def boom(how):
    if how == "exit":
        raise SystemExit(0)
    if how == "odd":
        raise Odd("not an Exception")
    raise Unprintable()


def run(frames, state):
    boom(open(__file__ + ".how").read())


def frame(rec, state):
    boom(open(__file__ + ".how").read())
"""


@pytest.mark.parametrize("how", ["exit", "odd", "unprintable"])
def test_driver_side_user_code_that_exits_or_raises_oddly_is_a_user_code_error(make_pipeline, tmp_path, capsys, how):
    """A runnable or frame_by runs in the driver: ``SystemExit(0)`` there made ``cbp feed``/``run``
    exit 0 with nothing landed; a ``BaseException`` subclass or an exception that cannot print
    itself ended in a traceback."""
    from cbp.cli import main

    path = make_pipeline(
        FAILING.replace("    outputs: [counts]", "    outputs: [counts]\n    runnable: MOD:run"),
        FAILING_MODULE + DRIVER_SIDE,
    )
    framed = make_pipeline(
        FAILING.replace("route_by: w}", "route_by: w, frame_by: MOD:frame}"), FAILING_MODULE + DRIVER_SIDE
    )
    for yaml in (path, framed):
        for mod in yaml.parent.glob("mod_*.py"):
            mod.with_name(mod.name + ".how").write_text(how)
    day = tmp_path / "day.jsonl"
    day.write_text('{"w": "x"}\n')
    home, home2 = str(tmp_path / "h"), str(tmp_path / "h2")
    assert main(["feed", str(path), "words", str(day), "--home", home]) == 0
    assert main(["status", str(path), "--home", home]) == 0  # status reports what the runnable raised
    out = capsys.readouterr().out
    assert (
        "runnable error: " in out and {"exit": "SystemExit", "odd": "Odd", "unprintable": "Unprintable"}[how] in out
    ), out
    for argv in (["run", str(path), "--home", home], ["feed", str(framed), "words", str(day), "--home", home2]):
        assert main(argv) == 4, argv
        err = capsys.readouterr().err
        assert "error [user-code]" in err and err.count("\n") == 1 and "Traceback" not in err, err
        assert {"exit": "SystemExit", "odd": "Odd", "unprintable": "Unprintable"}[how] in err, err
    assert cbp.load(path, home=home).status()["stages"]["count"]["epochs"] == 0
    assert cbp.load(framed, home=home2).output("words") == []


@pytest.mark.classic(reason="the classic driver's no-java error: a Connect session (CBP_REMOTE) needs no Java")
def test_missing_java_is_explained(monkeypatch):
    import shutil

    from cbp import RuntimeStateError
    from cbp.engine.driver.session import get_spark

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(RuntimeStateError) as e:
        get_spark()
    assert e.value.code == "no-java" and "apt-get install" in str(e.value)


@pytest.mark.parametrize(
    "change, message",
    [
        (("partitions: 2", "partitions: 3"), "stage 'count': state rewritten .*partitions 2 -> 3"),
        (("state: {schema: {w: string, n: int}}", "state: {schema: {w: string, n: float}}"), "field 'n' int -> float"),
        (
            ("state: {schema: {w: string, n: int}}", 'state: {schema: {w: string, n: int, x: "int?"}}'),
            "field 'x' added",
        ),
        (("schema: {w: string}}", 'schema: {w: string, v: "int?"}}'), "flow 'words': field 'v' added"),
        (
            ("inputs: [{flow: words, route_by: w}]", "inputs: [{flow: words, route_by: w, frame_by: w}]"),
            "flow 'words': frame_by added",
        ),
    ],
)
def test_yaml_that_no_longer_fits_the_home(spark, make_pipeline, tmp_path, change, message):
    """Changing partitions, a schema or framing once data is stored waits for 'cbp upgrade' (pipeline-changed,
    the plan in the message); reads still work; the old YAML still runs."""
    home = str(tmp_path / "h")
    good = make_pipeline(WORD_COUNT, WORD_COUNT_MODULE)
    p = cbp.load(good, home=home)
    p.feed("words", [{"w": "a"}, {"w": "b"}])
    p.run()
    changed = make_pipeline(WORD_COUNT.replace(*change), WORD_COUNT_MODULE)
    q = cbp.load(changed, home=home)
    with pytest.raises(cbp.UsageError, match=message) as e:
        q.run()
    assert e.value.code == "pipeline-changed" and str(changed) in str(e.value)
    assert {r["w"]: r["n"] for r in q.state("count")} == {"a": 1, "b": 1}
    p = cbp.load(good, home=home)
    p.feed("words", [{"w": "a"}])
    p.run()
    assert {r["w"]: r["n"] for r in p.state("count")} == {"a": 2, "b": 1}


# ---------------------------------------------------------------- hostile JSON lines and records (no Spark needed:
# feeds land through delta-rs)
ALL_TYPES = """
pipeline: types
flows:
  recs: {external: true, schema: {s: string, i: "int?", f: "float?", b: "bool?", j: "json?", l: "list<string?>?",
      n: "list<float>?"}}
stages:
  keep:
    translator: MOD:keep
    inputs: [recs]
"""
ALL_TYPES_MODULE = """
def keep(key, state, recs, out):
    pass
"""


def _nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


def _deep_list(depth: int) -> list:
    top = node = []
    for _ in range(depth - 1):
        node.append([])
        node = node[0]
    return top


@pytest.fixture
def landed(tmp_path, make_pipeline):
    """A home with one feed landed on each of two pipelines: url_count ('urls') and every field type ('recs')."""
    urls = cbp.load(URLS, home=str(tmp_path / "urls"))
    urls.feed("urls", [{"url": "a"}])
    types = cbp.load(make_pipeline(ALL_TYPES, ALL_TYPES_MODULE), home=str(tmp_path / "types"))
    types.feed("recs", [{"s": "x", "j": {"k": [1, "two", None]}, "l": ["a", None], "n": [1, 2.5]}])
    return {"urls": urls, "recs": types}


def _unchanged(p, flow):
    return p.output(flow), p.status()


HOSTILE_LINES = [  # flow, line, what the message says
    ("urls", _nested(5000), "nested deeper than 128 levels"),
    ("urls", '{"url": ' + _nested(5000) + "}", "nested deeper than 128 levels"),
    (
        "urls",
        '{"url": "' + "[" * 5000 + '"}' + ", " + _nested(200),
        "nested deeper than 128 levels",
    ),  # brackets in a string do not count, these do
    ("urls", '{"url": "\\ud800"}', "lone surrogate \\ud800"),
    ("urls", '{"url": "ok \\udfff"}', "lone surrogate \\udfff"),
    ("urls", '{"url": "\\ud83d\\ud83d"}', "lone surrogate \\ud83d"),
    ("urls", '{"url": "x", "\\ud800": 1}', "valid string"),  # a field name that is not Unicode
    ("urls", '{"url": 1' + "0" * 5000 + "}", "malformed JSON: Exceeds the limit"),
    ("urls", '{"url": "x"} {"url": "y"}', "malformed JSON: Extra data"),
    ("urls", '\ufeff{"url": "x"}', "malformed JSON"),
    ("urls", '{"url": Infinity}', "Infinity is not a JSON number"),
    ("recs", '{"s": "x", "j": ' + _nested(128) + "}", "JSON nested deeper than 128 levels"),
    ("recs", '{"s": "x", "j": {"\\udc00": 1}}', "field 'j': text holds a lone surrogate \\udc00"),
    ("recs", '{"s": "x", "j": ["a", {"b": "\\ud800"}]}', "field 'j': text[1][b] holds a lone surrogate"),
    ("recs", '{"s": "x", "l": ["a", "\\ud800"]}', "field 'l': text[1] holds a lone surrogate"),
    ("recs", '{"s": "x", "j": 1e999}', "field 'j': inf is not a JSON number"),
    ("recs", '{"s": "x", "f": -1e999}', "field 'f'"),
    ("recs", '{"s": "x", "i": 9223372036854775808}', "field 'i'"),
    ("recs", '{"s": "x", "b": 1}', "field 'b'"),
    ("recs", '{"s": "x", "n": [1, [2]]}', "field 'n'"),
]


@pytest.mark.parametrize(
    "flow,line,words", HOSTILE_LINES, ids=[f"{i}-{f}" for i, (f, _, _) in enumerate(HOSTILE_LINES)]
)
def test_hostile_json_lines_are_refused_fast_naming_file_line_and_flow(landed, tmp_path, capsys, flow, line, words):
    p = landed[flow]
    before = _unchanged(p, flow)
    path = tmp_path / "in.jsonl"
    good = '{"url": "fine"}' if flow == "urls" else '{"s": "fine"}'
    path.write_text(good + "\n" + line + "\n" + good + "\n", encoding="utf-8", errors="surrogatepass")
    with counting_calls() as calls, pytest.raises(InputError) as e:
        p.feed(flow, path)
    assert calls.n < BOUNDED, calls.n  # bounded work, counted in calls
    msg = str(e.value)
    assert e.value.code == "bad-record"
    assert msg.startswith(f"{path}:2: flow '{flow}': ") and "nothing was landed" in msg, msg
    assert words in msg, msg
    assert _unchanged(p, flow) == before
    assert main(["feed", str(p.spec.path), flow, str(path), "--home", p.home.location]) == 3
    err = capsys.readouterr().err
    assert f"{path}:2: flow '{flow}': " in err and "Traceback" not in err
    assert _unchanged(p, flow) == before


HOSTILE_RECORDS = [  # flow, record, what the message says
    ("urls", {"url": "\ud800"}, "field 'url': text holds a lone surrogate \\ud800"),
    ("urls", {"url": "fine", "\udc00": 1}, "valid string"),
    ("urls", {"url": _deep_list(10_000)}, "field 'url': Input should be a valid string"),
    ("urls", {"url": "x", "extra": _deep_list(10_000)}, "field 'extra': unknown field"),
    ("recs", {"s": "x", "j": _deep_list(10_000)}, "field 'j': nested deeper than 128 levels"),
    ("recs", {"s": "x", "j": {"a": _deep_list(127)}}, "field 'j': nested deeper than 128 levels"),
    ("recs", {"s": "x", "j": {"k": "\udfff"}}, "field 'j': text[k] holds a lone surrogate"),
    ("recs", {"s": "x", "j": {1: "a"}}, "field 'j': object key 1 is not a string"),
    ("recs", {"s": "x", "j": {"a": {1, 2}}}, "field 'j': set value[a] is not JSON"),
    ("recs", {"s": "x", "j": [float("nan")]}, "field 'j': nan[0] is not a JSON number"),
    ("recs", {"s": "x", "j": 10**5000}, "field 'j': an integer of more than 4,000 digits"),
    ("recs", {"s": "x", "j": b"bytes"}, "field 'j': bytes value is not JSON"),
    ("recs", {"s": "x", "l": ["ok", "\ud800"]}, "field 'l': text[1] holds a lone surrogate"),
    ("recs", {"s": "x", "f": float("inf")}, "field 'f'"),
    ("recs", {"s": "x", "i": True}, "field 'i'"),
]


@pytest.mark.parametrize(
    "flow,record,words", HOSTILE_RECORDS, ids=[f"{i}-{f}" for i, (f, _, _) in enumerate(HOSTILE_RECORDS)]
)
def test_hostile_records_through_the_python_api(landed, flow, record, words):
    p = landed[flow]
    before = _unchanged(p, flow)
    good = {"url": "fine"} if flow == "urls" else {"s": "fine"}
    with counting_calls() as calls, pytest.raises(InputError) as e:
        p.feed(flow, [good, record, good])
    assert calls.n < BOUNDED, calls.n
    assert e.value.code == "bad-record"
    assert str(e.value).startswith(f"record 2: flow '{flow}': ") and words in str(e.value), str(e.value)
    assert _unchanged(p, flow) == before


@pytest.mark.parametrize("what", [5, None, 1.5, {"url": "a"}, b"bytes"])
def test_feeding_something_that_is_not_records_is_refused(landed, what):
    p = landed["urls"]
    before = _unchanged(p, "urls")
    with pytest.raises(InputError) as e:
        p.feed("urls", what)
    assert e.value.code == "bad-record" and "flow 'urls'" in str(e.value)
    assert _unchanged(p, "urls") == before


def test_records_at_the_limits_land_and_read_back(landed):
    """What validation accepts, Arrow, Parquet and JSON hold: deep-but-allowed JSON, astral characters,
    ints in float fields (stored as the float they stand for)."""
    p = landed["recs"]
    rec = {
        "s": "\U0001f600 \u2028 \x00",
        "i": -(2**63),
        "f": 2**63 - 1,
        "b": False,
        "j": {"a": _deep_list(126), "\U0001f600": 1.5},
        "l": [],
        "n": [2**53 + 1, -0.0],
    }
    got = p.feed("recs", [rec])
    assert got.records == 1
    back = p.output("recs", epoch=got.feed)
    assert back == [{**rec, "f": float(2**63 - 1), "n": [float(2**53 + 1), -0.0]}]
    line = json.dumps({"s": "\ud83d\ude00", "j": json.loads(_nested(126, "[]"))})  # an escaped pair is one character
    path = p.home.location + ".jsonl"
    with open(path, "w") as fh:
        fh.write(line + "\n")
    got = p.feed("recs", path)
    assert p.output("recs", epoch=got.feed)[0]["s"] == "\U0001f600"


def test_over_long_lines_are_refused_without_reading_them_whole(landed, tmp_path, monkeypatch):
    import cbp.pipeline

    p = landed["urls"]
    before = _unchanged(p, "urls")
    assert cbp.pipeline.MAX_LINE_BYTES == 64 << 20
    with counting_calls() as calls, pytest.raises(InputError) as e:  # an endless line: read up to the limit
        p.feed("urls", "/dev/zero")
    assert calls.n < BOUNDED, calls.n
    assert e.value.code == "bad-record" and "/dev/zero:1: flow 'urls': the line is longer than 64 MiB" in str(e.value)
    monkeypatch.setattr("cbp.spec.feedfiles.MAX_LINE_BYTES", 100)  # where the JSON-lines reader reads it
    exact = '{"url": "' + "x" * (100 - 11) + '"}'
    assert len(exact) == 100
    path = tmp_path / "long.jsonl"
    path.write_text(exact + "\n" + exact + "x\n")
    with pytest.raises(InputError) as e:
        p.feed("urls", path)
    assert e.value.code == "bad-record" and f"{path}:2: flow 'urls': the line is longer than 100 bytes" in str(e.value)
    assert _unchanged(p, "urls") == before
    path.write_text(exact + "\n" + exact)  # exactly the limit, with or without the newline
    assert p.feed("urls", path).records == 2


def test_non_utf8_names_the_line(landed, tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"url": "ok"}\n{"url": "\xed\xa0\x80"}\n')  # an encoded surrogate is not UTF-8 either
    with pytest.raises(InputError) as e:
        landed["urls"].feed("urls", path)
    assert e.value.code == "bad-record" and f"{path}:2: flow 'urls': not UTF-8 text" in str(e.value)


# ---------------------------------------------------------------- feed numbers: what 'feed' prints is what 'output
# --epoch' takes
def test_empty_feed_takes_a_number_and_the_numbers_agree_cli(tmp_path, capsys):
    home = str(tmp_path / "h")
    files = {"a": '{"url": "a"}\n', "empty": "", "blank": "\n  \n", "b": '{"url": "b"}\n{"url": "c"}\n'}
    for name, text in files.items():
        (tmp_path / f"{name}.jsonl").write_text(text)
    printed = []
    for name in files:
        assert main(["feed", str(URLS), "urls", str(tmp_path / f"{name}.jsonl"), "--home", home]) == 0
        printed.append(capsys.readouterr().out.strip())
    assert printed == [
        "landed on 'urls' as feed 1 (output --epoch 1): 1 record(s), increment(s) 1",
        "landed on 'urls' as feed 2 (output --epoch 2): 0 record(s), no increment",
        "landed on 'urls' as feed 3 (output --epoch 3): 0 record(s), no increment",
        "landed on 'urls' as feed 4 (output --epoch 4): 2 record(s), increment(s) 4",
    ]
    for epoch, want in [(1, ["a"]), (2, []), (3, []), (4, ["b", "c"])]:
        assert main(["output", str(URLS), "urls", "--epoch", str(epoch), "--home", home]) == 0
        assert [json.loads(x)["url"] for x in capsys.readouterr().out.splitlines()] == want
    # the pending feed 4 again, now with an id: most likely a retry, refused (nothing lands, no number taken)
    assert main(["feed", str(URLS), "urls", str(tmp_path / "b.jsonl"), "--home", home, "--id", "k"]) == 3
    assert "error [duplicate-feed]" in capsys.readouterr().err
    assert main(["feed", str(URLS), "urls", str(tmp_path / "b.jsonl"), "--home", home, "--id", "k", "--force"]) == 0
    assert "as feed 5 (output --epoch 5): 2 record(s), increment(s) 5" in capsys.readouterr().out
    assert main(["feed", str(URLS), "urls", str(tmp_path / "b.jsonl"), "--home", home, "--id", "k"]) == 0
    assert (
        "as feed 5 (output --epoch 5): already landed (--id k), nothing new, increment(s) 5" in capsys.readouterr().out
    )
    assert main(["status", str(URLS), "--home", home, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stages"]["url_count"]["connectors"]["urls"] == {
        "pending": 3,
        "complete": 3,
        "records": 5,
    }


def test_empty_feed_takes_a_number_and_the_numbers_agree_api(tmp_path):
    p = cbp.load(URLS, home=str(tmp_path / "h"))
    first = p.feed("urls", [{"url": "a"}])
    empty = p.feed("urls", [])
    nothing = p.feed("urls", tmp_path / "none.jsonl") if (tmp_path / "none.jsonl").write_text("") == 0 else None
    later = p.feed("urls", [{"url": "b"}])
    assert (first, first.feed, empty, empty.feed, nothing, nothing.feed, later, later.feed) == (
        [1],
        1,
        [],
        2,
        [],
        3,
        [4],
        4,
    )
    assert [p.output("urls", epoch=n) for n in (1, 2, 3, 4)] == [[{"url": "a"}], [], [], [{"url": "b"}]]
    framed = cbp.load(FLOWS / "set_diff.yaml", home=str(tmp_path / "f"))
    one = framed.feed("crawl_a", [{"url": "u1", "hour": 1}])
    none = framed.feed("crawl_a", [])
    two = framed.feed("crawl_a", [{"url": "u2", "hour": 1}, {"url": "u3", "hour": 2}])
    assert (one.feed, none.feed, two.feed) == (1, 2, 3)
    assert framed.output("crawl_a", epoch=3) == [{"url": "u2", "hour": 1}, {"url": "u3", "hour": 2}]
    assert framed.output("crawl_a", epoch=2) == []


def test_a_runnable_state_nested_too_deeply_is_not_storable(spark, make_pipeline, tmp_path):
    deep = (
        "\ndef run(frames, state):\n    v = []\n    for _ in range(100000):\n        v = [v]\n"
        "    return {'words'}, {'words'}, v\n"
    )
    p = cbp.load(
        make_pipeline(
            FAILING.replace("    outputs: [counts]", "    outputs: [counts]\n    runnable: MOD:run"),
            FAILING_MODULE + deep,
        ),
        home=str(tmp_path / "h"),
    )
    p.feed("words", [{"w": "x"}])
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert e.value.code == "not-storable" and "stage 'count'" in str(e.value)
    assert p.status()["stages"]["count"]["epochs"] == 0 and p.state("count") == []


@pytest.mark.parametrize(
    "tuning",
    [
        {"bogus": 1},
        {"max_state_files": "8"},
        {"max_state_files": 0},
        {"state_row_group": 0},
        {"backpressure": -1},
        {"small_epoch_records": -1},
        {"state_scan_fraction": float("nan")},
        {"state_cache_mb": True},
        {"notify": 5},
    ],
)
def test_bad_tuning_is_refused_before_anything_runs(tmp_path, tuning):
    from cbp.errors import UsageError

    with pytest.raises(UsageError) as e:
        cbp.Pipeline(URLS, home=str(tmp_path / "h"), **tuning)
    assert e.value.code == "bad-tuning" and next(iter(tuning)) in str(e.value)
    assert not (tmp_path / "h").exists()


def test_numpy_numbers_are_good_tuning(tmp_path):
    import numpy as np

    p = cbp.Pipeline(URLS, home=str(tmp_path / "h"), max_state_files=np.int64(3), state_scan_fraction=np.float32(0.5))
    assert p.parts.tuning.max_state_files == 3


def test_a_feed_id_that_is_not_a_string_is_refused(landed):
    p = landed["urls"]
    before = _unchanged(p, "urls")
    with pytest.raises(InputError) as e:
        p.feed("urls", [{"url": "b"}], feed_id=5)
    assert e.value.code == "bad-feed-id"
    assert _unchanged(p, "urls") == before


def test_a_list_of_record_batches_is_fed_as_arrow(landed):
    import pyarrow as pa

    p = landed["urls"]
    t = pa.table({"url": ["x", "y", "z"]})
    p.feed("urls", t.to_batches(max_chunksize=2) + [pa.table({"url": ["w"]})])
    assert sorted(r["url"] for r in p.output("urls")) == ["a", "w", "x", "y", "z"]
