"""Fuzzing hostile input (targets "yaml-loader", "jsonl-feed-validation", "jsonl-feed-landing",
"record-schemas"; see tests/fuzzing.py for the time box).

- yaml-loader: random and mutated pipeline YAML (anchors, aliases, recursive aliases, alias
  bombs, merge keys, deep nesting, duplicate keys, odd scalars and tags, control characters,
  BOMs, binary junk). ``load_spec`` returns a spec or raises :class:`SpecError`, nothing else, in
  bounded time; every SpecError about the file's content names a line.
- jsonl-feed-validation: random JSON-ish lines and structured hostile records against a schema
  with every field type. Validation raises :class:`RecordError` or returns a record that Arrow,
  Parquet and ``json.dumps(...).encode("utf-8")`` (what ``cbp output`` prints) all hold, and that
  reads back unchanged.
- jsonl-feed-landing: whole feeds of such lines into a temporary home (delta-rs, no Spark): a
  feed either lands exactly its validated records under the number it returns, or raises
  InputError "bad-record" naming file, line and flow, and nothing lands.
- record-schemas: random schema mappings. ``RecordSchema.parse`` raises ``ValueError`` (the
  documented exception) or gives a schema that accepts records built for it.
"""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

import pyarrow.parquet as pq
import yaml
from conftest import FLOWS
from fuzzing import budget, fuzz
from hypothesis import strategies as st
from opcount import counting_calls

import cbp
import cbp.spec
from cbp.errors import InputError, SpecError
from cbp.spec.schema import MAX_DEPTH, RecordError, RecordSchema, parse_type

# ---------------------------------------------------------------- yaml-loader
FUZZ_MODULE = "cbp_fuzz_inputs_mod"
MODULE_TEXT = """
def t(key, state, *inputs, out):
    pass

def route(record):
    return 1

def frame(record, state):
    return 1, state

def run(frames, state):
    return set(), set(), state
"""
BASE = """pipeline: p
mode: direct
flows:
  a: {external: true, schema: {url: string, n: "int?", j: "json?", l: "list<float?>?"}}
  b: {schema: {url: string, n: "int?"}}
stages:
  s1:
    translator: MOD:t
    partitions: 2
    inputs: [{flow: a, route_by: url}]
    state: {schema: {url: string}, grouping: inner}
    outputs: [b]
    params: {x: 1, y: [a, b]}
  s2:
    translator: MOD:t
    inputs: [{flow: b, route_by: MOD:route, frame_by: MOD:frame}]
    runnable: MOD:run
"""
SEEDS = [BASE] + [(FLOWS / f).read_text() for f in ("url_count.yaml", "set_diff.yaml", "crawl_queue.yaml")]
FRAGMENTS = [
    "&a ",
    "*a",
    "&b [*a, *a]",
    "<<: *a",
    "{<<: *a}",
    "[*a]",
    "&a [*a]",
    "&a {x: *a}",
    "? ",
    ": ",
    "- ",
    "[",
    "]",
    "{",
    "}",
    ",",
    "!!int ",
    "!!float ",
    "!!bool ",
    "!!str ",
    "!!null ",
    "!!binary ",
    "!!timestamp ",
    "!!set ",
    "!!omap ",
    "!!pairs ",
    "!!merge ",
    "!!python/name:os.system ",
    "!!python/object/apply:os.system ['true'] ",
    "!local ",
    "!<tag:x> ",
    "%YAML 1.1\n",
    "%TAG ! !x\n",
    "---\n",
    "...\n",
    "yes",
    "no",
    "on",
    "off",
    "~",
    "null",
    ".nan",
    ".inf",
    "-.inf",
    "0x1F",
    "0o17",
    "0b101",
    "1_000",
    "1e999",
    "9" * 5000,
    "2001-12-14t21:59:43.10-05:00",
    "2001-13-01",
    "2001-01-01 25:00:00",
    "'",
    '"',
    '"\\ud800"',
    '"\\x00"',
    "|\n  x\n",
    ">-\n  x\n",
    "#",
    "\t",
    "\x00",
    "\x07",
    "\ufeff",
    "\u2028",
    "\r",
    "\r\n",
    "\ud800",
    "\U0001f600",
    "partitions: true",
    "partitions: '4'",
    "partitions: 4.0",
    "external: 1",
    "external: yes",
    "translator: 5",
    "pipeline: p",
    "pipeline: [p]",
    "stages: {}",
    "flows: []",
    "inputs: [a, a]",
    "inputs: urls",
    "schema: {x: int, x: int}",
    "schema: {_x: int}",
    "schema: {model_config: int}",
    "route_by: os:system",
    "translator: MOD:nope",
    "translator: MOD:t",
    "params: {x: .nan}",
    "params: {1: a}",
    "[" * 200,
    "]" * 200,
    "{a: " * 100,
    "- " * 100,
    "  " * 60 + "k: v",
]


def _laughs(levels: int, width: int) -> str:
    out = "l0: &l0 [" + ", ".join(['"lol"'] * width) + "]\n"
    for n in range(1, levels):
        out += f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * width) + "]\n"
    return out


def _splice(text: str, edits: list[tuple[int, int, str]]) -> str:
    for pos, cut, insert in edits:
        i = pos % (len(text) + 1)
        text = text[:i] + insert + text[i + cut :]
    return text


def _line_edit(text: str, edits: list[tuple[int, str, str]]) -> str:
    lines = text.splitlines(keepends=True) or [""]
    for pos, how, what in edits:
        i = pos % len(lines)
        if how == "dup":
            lines.insert(i, lines[i])
        elif how == "drop" and len(lines) > 1:
            del lines[i]
        elif how == "insert":
            lines.insert(i, lines[i][: len(lines[i]) - len(lines[i].lstrip())] + what + "\n")
        else:
            lines[i] = lines[i].rstrip("\n") + " " + what + "\n"
    return "".join(lines)


plain_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda kids: st.one_of(
        st.lists(kids, max_size=4), st.dictionaries(st.one_of(st.text(max_size=5), st.integers()), kids, max_size=4)
    ),
    max_leaves=20,
)


@st.composite
def _shared(draw: Any) -> str:
    """yaml.dump of structures that share objects: real anchors and aliases, sometimes nested."""
    leaf = draw(plain_values)
    shared = [leaf]
    for _ in range(draw(st.integers(1, 6))):
        shared.append([draw(st.sampled_from(shared)) for _ in range(draw(st.integers(1, 5)))])
    doc = yaml.safe_load(BASE.replace("MOD", FUZZ_MODULE))
    doc["stages"]["s1"]["params"] = {"shared": shared[-1]}
    return yaml.dump(doc, Dumper=yaml.SafeDumper, allow_unicode=draw(st.booleans())).replace(FUZZ_MODULE, "MOD")


yaml_texts = st.one_of(
    st.builds(
        _splice,
        st.sampled_from(SEEDS),
        st.lists(
            st.tuples(
                st.integers(0, 3000), st.integers(0, 5), st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8))
            ),
            max_size=6,
        ),
    ),
    st.builds(
        _line_edit,
        st.sampled_from(SEEDS),
        st.lists(
            st.tuples(
                st.integers(0, 100), st.sampled_from(["dup", "drop", "insert", "append"]), st.sampled_from(FRAGMENTS)
            ),
            max_size=5,
        ),
    ),
    st.builds(
        lambda frags: "".join(frags),
        st.lists(st.sampled_from(FRAGMENTS + ["\n", "\n  ", "x", "a: ", "b"]), max_size=40),
    ),
    st.builds(lambda n, w, seed: _laughs(n, w) + seed, st.integers(1, 12), st.integers(1, 12), st.sampled_from(SEEDS)),
    st.builds(
        lambda d, o, c: o * d + "1" + c * d,
        st.integers(1, 3000),
        st.sampled_from(["[", "{a: ", "- ", "[{x: "]),
        st.sampled_from(["]", "}", "", "}]"]),
    ),
    _shared(),
    st.text(max_size=300),
)
yaml_inputs = st.one_of(
    yaml_texts.map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.binary(max_size=300),
    st.builds(
        lambda t, junk, at: (lambda b: b[:at] + junk + b[at:])(t.encode("utf-8", "surrogatepass")),
        st.sampled_from(SEEDS),
        st.binary(max_size=8),
        st.integers(0, 3000),
    ),
)


def _resolve_only_the_fuzz_module(text: str, base: str) -> Any:
    """Fuzzed YAML must not import arbitrary modules (``antigravity:x`` opens a browser)."""
    mod, sep, attr = text.partition(":")
    if mod != FUZZ_MODULE or not attr:
        raise ValueError(f"import path '{text}': module '{mod}' not found (fuzzing resolves only {FUZZ_MODULE})")
    import importlib

    fn = getattr(importlib.import_module(FUZZ_MODULE), attr, None)
    if not callable(fn):
        raise ValueError(f"import path '{text}': no function '{attr}'")
    return fn


def test_fuzz_yaml_loader():
    with (
        tempfile.TemporaryDirectory(prefix="cbp-fuzz-yaml-") as d,
        mock.patch.object(cbp.spec.context, "resolve_callable", _resolve_only_the_fuzz_module),
    ):
        Path(d, f"{FUZZ_MODULE}.py").write_text(MODULE_TEXT)
        import sys

        sys.path.insert(0, d)
        path = os.path.join(d, "pipeline.yaml")
        try:
            assert cbp.load_spec(_write(path, BASE.replace("MOD", FUZZ_MODULE).encode())).name == "p"

            def check(data: bytes) -> None:
                _write(path, data.replace(b"MOD", FUZZ_MODULE.encode()))
                error: SpecError | None = None
                with counting_calls() as calls:
                    try:
                        spec = cbp.load_spec(path)
                    except SpecError as e:
                        error = e
                if error is not None:
                    assert str(error).startswith(f"{path}: "), str(error)
                    if error.code not in ("unknown-stage", "unknown-flow"):  # they name what is missing, not a line
                        assert str(error).startswith(f"{path}: line "), str(error)
                else:
                    assert spec.name and spec.stages and spec.flows
                assert calls.n < 1_000_000, ("bounded work, counted in calls", calls.n)

            fuzz("yaml-loader", yaml_inputs, check)
        finally:
            sys.path.remove(d)
            sys.modules.pop(FUZZ_MODULE, None)


def _write(path: str, data: bytes) -> str:
    with open(path, "wb") as fh:
        fh.write(data)
    return path


# ---------------------------------------------------------------- jsonl-feed-validation / jsonl-feed-landing
FIELDS = {
    "s": "string",
    "i": "int?",
    "f": "float?",
    "b": "bool?",
    "j": "json?",
    "ls": "list<string?>?",
    "li": "list<int>?",
    "lf": "list<float?>?",
    "lb": "list<bool>?",
}
SCHEMA = RecordSchema.parse(FIELDS)
surrogates = st.integers(0xD800, 0xDFFF).map(chr)
texts = st.one_of(
    st.text(max_size=12),
    st.text(alphabet=st.one_of(st.characters(), surrogates), max_size=8),
    st.sampled_from(["\ud800", "a\udfff", "\ud83d\ude00", "\x00", "\u2028", "\ufeff", "[" * 300, '"', "\\"]),
)
numbers = st.one_of(
    st.integers(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.sampled_from([2**63, -(2**63) - 1, 2**53 + 1, -0.0]),
    st.integers(4200, 5000).map(lambda n: 10**n),
)  # past Python's int <-> text limit (not in sampled_from: it reprs)


class _Odd:
    def __repr__(self) -> str:
        return "<odd>"


def _deep(depth: int, leaf: Any) -> Any:
    for _ in range(depth):
        leaf = [leaf]
    return leaf


hostile_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        numbers,
        texts,
        st.binary(max_size=4),
        st.just(_Odd()),
        st.just(float("nan")),
        st.builds(_deep, st.sampled_from([MAX_DEPTH - 2, MAX_DEPTH - 1, MAX_DEPTH, 5000]), st.none()),
    ),
    lambda kids: st.one_of(
        st.lists(kids, max_size=4),
        st.lists(kids, max_size=3).map(tuple),
        st.sets(st.integers(), max_size=3),
        st.dictionaries(st.one_of(texts, st.integers(), st.none(), st.booleans()), kids, max_size=4),
    ),
    max_leaves=15,
)
records = st.one_of(
    st.fixed_dictionaries({"s": texts}, optional={k: hostile_values for k in FIELDS if k != "s"}),
    st.dictionaries(st.one_of(st.sampled_from(list(FIELDS)), texts), hostile_values, max_size=5),
    hostile_values,
)
json_values = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8)
    ),
    lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=5), kids, max_size=4)),
    max_leaves=15,
)
JSON_FRAGMENTS = [
    '"\\ud800"',
    '"\\udc00x"',
    '"\\ud83d\\ude00"',
    "NaN",
    "Infinity",
    "-Infinity",
    "1e999",
    "1" * 5000,
    "-0",
    "0.0e0",
    "[" * 129,
    "]" * 129,
    "{" * 200,
    '"s": 1, "s": 2',
    "\x00",
    "\ufeff",
    "\\",
    '"',
    ",",
    "}",
    "]",
    "null",
    "true",
    '"j": ' + "[" * 127,
    '"j": ' + "[" * 128,
    "]" * 127,
]


def _mutate(text: str, edits: list[tuple[int, int, str]]) -> str:
    return _splice(text, edits)


good_records = st.fixed_dictionaries(
    {"s": st.text(max_size=8)},
    optional={
        "i": st.integers(-(2**63), 2**63 - 1),
        "j": json_values,
        "ls": st.lists(st.one_of(st.none(), st.text(max_size=4)), max_size=3),
    },
)
lines = st.one_of(
    st.text(max_size=60),
    st.text(alphabet=st.sampled_from('[]{}",:\\ 0123456789.eE+-truefalsnl"sjif'), max_size=80),
    st.builds(
        lambda v, edits: _mutate(json.dumps(v), edits),
        st.one_of(good_records, json_values),
        st.lists(st.tuples(st.integers(0, 200), st.integers(0, 3), st.sampled_from(JSON_FRAGMENTS)), max_size=3),
    ),
    st.builds(
        lambda d, inner: '{"s": "x", "j": ' + "[" * d + inner + "]" * d + "}",
        st.integers(MAX_DEPTH - 3, MAX_DEPTH + 2),
        st.sampled_from(["", "1", "{}", '"[["']),
    ),
    good_records.map(json.dumps),
    good_records.map(lambda r: json.dumps(r, ensure_ascii=False)),
)


def _check_accepted(rec: Any, out: dict[str, Any]) -> None:
    """An accepted record is what the flow stores: Arrow, Parquet and JSON (as cbp output prints it) hold it,
    unchanged."""
    assert list(out) == list(FIELDS)
    table = SCHEMA.to_arrow([out])
    pq.write_table(table, io.BytesIO())
    json.dumps(out, ensure_ascii=False, allow_nan=False).encode("utf-8")
    back = SCHEMA.from_storage(table.to_pylist()[0])
    stored = {
        **out,
        "j": json.loads(json.dumps(out["j"])),
    }  # a json value is stored as JSON text: tuples come back as lists
    assert back == stored, (back, stored)
    for name in ("f", "lf"):  # floats are stored as floats
        v = out[name]
        assert v is None or all(
            x is None or (type(x) is float and math.isfinite(x)) for x in (v if isinstance(v, list) else [v])
        )


def _validate(example: tuple[str, Any]) -> None:
    kind, value = example
    try:
        out = SCHEMA.validate_json_line(value) if kind == "line" else SCHEMA.validate(value)
    except RecordError as e:
        assert str(e)
        str(e).encode("utf-8", "backslashreplace")  # printable on stderr
        return
    _check_accepted(value, out)


def test_fuzz_jsonl_feed_validation(tmp_path):
    home = str(tmp_path / "home")
    yaml_path = tmp_path / "types.yaml"
    yaml_path.write_text(
        "pipeline: types\nflows:\n  recs: {external: true, schema: {"
        + ", ".join(f'{k}: "{v}"' for k, v in FIELDS.items())
        + "}}\nstages:\n  keep:\n    translator: cbp_fuzz_keep:keep\n    inputs: [recs]\n"
    )
    (tmp_path / "cbp_fuzz_keep.py").write_text("def keep(key, state, recs, out):\n    pass\n")
    p = cbp.load(yaml_path, home=home)
    feed_file = tmp_path / "feed.jsonl"

    def land(feed: list[str]) -> None:
        feed_file.write_bytes("\n".join(feed).encode("utf-8", "surrogatepass") + b"\n")
        expected: list[dict[str, Any]] = []
        first_bad = None
        for n, line in enumerate(feed, 1):
            if line.strip():
                try:
                    line.encode("utf-8")  # what is not UTF-8 in the file is refused before parsing
                    expected.append(SCHEMA.validate_json_line(line))
                except (RecordError, UnicodeEncodeError):
                    first_bad = first_bad or n
        before = p.home.read_controller()
        try:
            got = p.feed("recs", feed_file)
        except InputError as e:
            assert first_bad is not None, f"refused a feed of valid lines: {e}"
            assert e.code == "bad-record" and str(e).startswith(f"{feed_file}:{first_bad}: flow 'recs': "), str(e)
            assert p.home.read_controller() == before, "a refused feed landed something"
            return
        assert first_bad is None, f"landed a feed whose line {first_bad} is invalid"
        assert got.records == len(expected) and not got.repeated
        assert p.output("recs", epoch=got.feed) == expected

    one_line = st.one_of(lines, good_records.map(json.dumps)).map(lambda x: x.replace("\n", " ").replace("\r", " "))
    t0 = (
        time.monotonic()
    )  # a landing costs a Delta commit: one batch of whole feeds, then validation for the rest of the box
    fuzz("jsonl-feed-landing", st.lists(one_line, min_size=1, max_size=5), land, seconds=0)
    inputs = st.one_of(st.tuples(st.just("line"), lines), st.tuples(st.just("record"), records))
    fuzz("jsonl-feed-validation", inputs, _validate, seconds=max(0.0, budget() - (time.monotonic() - t0)))


# ---------------------------------------------------------------- record-schemas
TYPE_WORDS = [
    "string",
    "int",
    "float",
    "bool",
    "json",
    "list<string>",
    "list<int?>",
    "list<float>",
    "list<bool?>",
    "list<json>",
    "list<list<int>>",
    "int?",
    "float ?",
    " list< int >? ",
    "string??",
    "",
    "?",
    "list<>",
    "integer",
    "STRING",
    "str",
    "list<string",
    "int?\n",
    "\u0130nt",
]
field_names = st.one_of(
    st.from_regex(r"[A-Za-z][A-Za-z0-9_]{0,8}", fullmatch=True),
    st.sampled_from(
        [
            "_x",
            "_inc",
            "model_config",
            "copy",
            "validate",
            "schema",
            "json",
            "dict",
            "fields",
            "a\n",
            "",
            "1a",
            "a-b",
            "é",
            "ß",
            "\ud800",
        ]
    ),
    st.text(max_size=6),
)
raw_schemas = st.one_of(
    st.dictionaries(field_names, st.one_of(st.sampled_from(TYPE_WORDS), st.text(max_size=10)), max_size=6),
    st.dictionaries(
        st.one_of(field_names, st.integers(), st.none(), st.tuples(st.integers())),
        st.one_of(st.sampled_from(TYPE_WORDS), st.integers(), st.none(), st.lists(st.integers(), max_size=2)),
        max_size=4,
    ),
    st.one_of(st.none(), st.text(max_size=5), st.lists(st.text(max_size=3), max_size=3), st.integers()),
)
_SCALAR_VALUES = {
    "string": st.text(max_size=8),
    "int": st.integers(-(2**63), 2**63 - 1),
    "float": st.one_of(st.floats(allow_nan=False, allow_infinity=False), st.integers(-(2**63), 2**63 - 1)),
    "bool": st.booleans(),
    "json": json_values,
}


def _value_for(ft: Any) -> st.SearchStrategy[Any]:
    v = _SCALAR_VALUES[ft.scalar]
    if ft.is_list:
        v = st.lists(st.one_of(st.none(), v) if ft.items_nullable else v, max_size=4)
    return st.one_of(st.none(), v) if ft.nullable else v


@st.composite
def schema_cases(draw: Any) -> tuple[Any, list[dict[str, Any]]]:
    raw = draw(raw_schemas)
    try:
        schema = RecordSchema.parse(raw)
    except ValueError:
        return raw, []
    rec = st.fixed_dictionaries(
        {n: _value_for(ft) for n, ft in schema.fields.items() if not ft.nullable},
        optional={n: _value_for(ft) for n, ft in schema.fields.items() if ft.nullable},
    )
    return raw, draw(st.lists(rec, max_size=3))


def _schema_check(case: tuple[Any, list[dict[str, Any]]]) -> None:
    raw, recs = case
    try:
        schema = RecordSchema.parse(raw)
    except ValueError as e:
        assert not isinstance(e, RecordError) and str(e)
        return
    assert list(schema.fields) == list(raw) and all(parse_type(t) == schema.fields[n] for n, t in raw.items())
    for rec in recs:
        out = schema.validate(rec)
        want = {n: rec.get(n) for n in schema.fields}
        for n, ft in schema.fields.items():
            if ft.scalar == "float" and want[n] is not None:
                want[n] = [None if x is None else float(x) for x in want[n]] if ft.is_list else float(want[n])
        assert out == want
        table = schema.to_arrow([out])
        pq.write_table(table, io.BytesIO())
        assert schema.from_storage(table.to_pylist()[0]) == out
        assert schema.validate_json_line(json.dumps(rec)) == out


def test_fuzz_record_schemas():
    fuzz("record-schemas", schema_cases(), _schema_check)
