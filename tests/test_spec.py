"""Every YAML mistake is reported before Spark starts, naming the file, the stage or flow, and what is wrong."""

from __future__ import annotations

import contextlib
import re

import pytest
from conftest import FLOWS
from opcount import counting_calls

from cbp import SpecError, load_spec

GOOD_MODULE = """
def t(key, state, *inputs, out):
    pass
"""

BASE = """
pipeline: p
flows:
  a: {external: true, schema: {url: string, n: int}}
  b: {schema: {url: string, n: int}}
stages:
  s1:
    translator: MOD:t
    inputs: [{flow: a, route_by: url}]
    outputs: [b]
"""


def test_examples_are_valid():
    for name in ("url_count", "set_diff"):
        spec = load_spec(FLOWS / f"{name}.yaml")
        assert spec.name == name


def test_valid_base(make_pipeline):
    spec = load_spec(make_pipeline(BASE, GOOD_MODULE))
    assert spec.stages["s1"].inputs[0].route_by.field == "url"
    assert spec.flows["b"].producer == "s1"


@pytest.mark.parametrize(
    "old,new,code,words",
    [
        (
            "inputs: [{flow: a, route_by: url}]",
            "inputs: [{flow: zz, route_by: url}]",
            "unknown-flow",
            ["stage 's1'", "unknown input flow 'zz'"],
        ),
        ("outputs: [b]", "outputs: [zz]", "unknown-flow", ["stage 's1'", "unknown output flow 'zz'"]),
        ("    translator: MOD:t\n", "", "invalid-spec", ["stage 's1'", "translator", "missing"]),
        (
            "    outputs: [b]",
            "    outputs: [b]\n    colour: red",
            "invalid-spec",
            ["stage 's1'", "colour", "unknown field"],
        ),
        ("route_by: url", "route_by: nope", "unknown-field", ["stage 's1'", "'nope' is not a field"]),
        (
            "translator: MOD:t",
            "translator: no_such_module_xyz:t",
            "bad-import",
            ["stage 's1' translator", "no_such_module_xyz"],
        ),
        ("translator: MOD:t", "translator: MOD:missing", "bad-import", ["no attribute 'missing'"]),
        ("translator: MOD:t", "translator: not-an-import-path", "bad-import", ["module:function"]),
        ("inputs: [{flow: a, route_by: url}]", "inputs: []", "no-input", ["stage 's1' has no input"]),
        ("outputs: [b]", "outputs: [a]", "external-produced", ["flow 'a'", "external"]),
        (
            "{url: string, n: int}}\nstages",
            "{url: string, n: integer}}\nstages",
            "bad-type",
            ["flow 'b'", "unknown type 'integer'"],
        ),
        (
            "partitions" if False else "    outputs: [b]",
            "    outputs: [b]\n    partitions: 0",
            "invalid-spec",
            ["partitions"],
        ),
    ],
)
def test_spec_mistakes(make_pipeline, old, new, code, words):
    assert old in BASE
    path = make_pipeline(BASE.replace(old, new), GOOD_MODULE)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == code, str(e.value)
    msg = str(e.value)
    assert str(path) in msg
    for w in words:
        assert w in msg, msg


def test_line_numbers(make_pipeline):
    path = make_pipeline(BASE.replace("route_by: url", "route_by: nope"), GOOD_MODULE)
    with pytest.raises(SpecError, match=r"line \d+"):
        load_spec(path)


def test_two_producers(make_pipeline):
    text = (
        BASE
        + """
  s2:
    translator: MOD:t
    inputs: [{flow: a, route_by: url}]
    outputs: [b]
"""
    )
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline(text, GOOD_MODULE))
    assert e.value.code == "two-producers"
    assert "flow 'b' has two producers, stages 's1' and 's2'" in str(e.value)


def test_type_mismatch_between_producer_and_consumer(make_pipeline):
    text = (
        BASE
        + """
  s2:
    translator: MOD:t
    inputs: [{flow: b, route_by: url, schema: {n: string}}]
"""
    )
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline(text, GOOD_MODULE))
    assert e.value.code == "type-mismatch"
    assert "stage 's2' reads it as string but stage 's1' produces int" in str(e.value)


def test_consumer_reads_missing_field(make_pipeline):
    text = (
        BASE
        + """
  s2:
    translator: MOD:t
    inputs: [{flow: b, route_by: url, schema: {score: float}}]
"""
    )
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline(text, GOOD_MODULE))
    assert e.value.code == "unknown-field"


def test_compatible_consumer_schema_and_cycles_are_fine(make_pipeline):
    text = (
        BASE.replace("outputs: [b]", "outputs: [b, loop]")
        .replace("  b: {schema", "  loop: {schema: {url: string}}\n  b: {schema")
        .replace(
            "inputs: [{flow: a, route_by: url}]", "inputs: [{flow: a, route_by: url}, {flow: loop, route_by: url}]"
        )
        + """
  s2:
    translator: MOD:t
    inputs: [{flow: b, route_by: url, schema: {n: float}}]
"""
    )
    spec = load_spec(make_pipeline(text, GOOD_MODULE))
    assert spec.order == ("s1", "s2")
    assert spec.flows["loop"].consumers == ("s1",)


def test_read_but_not_produced(make_pipeline):
    text = BASE.replace("  b: {schema", "  c: {schema: {x: int}}\n  b: {schema").replace(
        "inputs: [{flow: a, route_by: url}]", "inputs: [{flow: a, route_by: url}, {flow: c}]"
    )
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline(text, GOOD_MODULE))
    assert e.value.code == "no-producer"


def test_state_requires_route_by(make_pipeline):
    text = BASE.replace("route_by: url}", "}").replace(
        "    outputs: [b]", "    outputs: [b]\n    state: {schema: {n: int}}"
    )
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline(text, GOOD_MODULE))
    assert e.value.code == "route-required"


def test_malformed_yaml(make_pipeline):
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline("pipeline: p\nflows: [\n", GOOD_MODULE))
    assert e.value.code == "yaml"


def test_missing_file(tmp_path):
    with pytest.raises(SpecError) as e:
        load_spec(tmp_path / "nope.yaml")
    assert e.value.code == "unreadable"


def test_frame_by_must_agree(make_pipeline):
    text = (
        BASE.replace("inputs: [{flow: a, route_by: url}]", "inputs: [{flow: a, route_by: url, frame_by: n}]")
        + """
  s2:
    translator: MOD:t
    inputs: [{flow: a, route_by: url}]
"""
    )
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline(text, GOOD_MODULE))
    assert e.value.code == "frame-mismatch"


def test_record_types_at_their_limits():
    """Ints are 64-bit, floats finite (JSON has no NaN), list items may be nullable with list<T?>."""
    from cbp.spec.schema import RecordError, RecordSchema

    s = RecordSchema.parse({"i": "int?", "f": "float", "l": "list<int?>"})
    assert s.validate({"i": 2**63 - 1, "f": 2, "l": [1, None]}) == {"i": 2**63 - 1, "f": 2, "l": [1, None]}
    for bad, field in [
        ({"i": 2**63, "f": 1.0, "l": []}, "i"),
        ({"f": float("nan"), "l": []}, "f"),
        ({"f": float("inf"), "l": []}, "f"),
        ({"f": 1.0, "l": ["x"]}, "l"),
    ]:
        with pytest.raises(RecordError, match=f"field '{field}'"):
            s.validate(bad)
    with pytest.raises(RecordError, match="NaN is not a JSON number"):
        s.validate_json_line('{"f": NaN, "l": []}')
    assert str(RecordSchema.parse({"l": "list<string?>?"}).fields["l"]) == "list<string?>?"


@pytest.mark.parametrize(
    "module, words",
    [
        (
            "def t(key, state, out):\n    pass\n",
            ["stage 's1' translator", "t(key, state, out)", "translate(key, state, a, out=...)"],
        ),
        ("def t(key, state, a, b, out):\n    pass\n", ["missing a required argument: 'b'"]),
        ("def t(key, state, a):\n    pass\n", ["unexpected keyword argument 'out'"]),
        ("def t(key, state, a, out):\n    yield out\n", ["generator", "out.<flow>.write"]),
    ],
)
def test_translator_that_cannot_be_called_as_cbp_calls_it(make_pipeline, module, words):
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline(BASE, module))
    assert e.value.code == "bad-signature" and "line 8" in str(e.value)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_runnable_signature_is_checked(make_pipeline):
    text = BASE.replace("    outputs: [b]", "    outputs: [b]\n    runnable: MOD:run")
    with pytest.raises(
        SpecError, match=r"runnable 'mod_.*:run\(frames\)' cannot be called as runnable\(frames, state\)"
    ):
        load_spec(make_pipeline(text, GOOD_MODULE + "def run(frames):\n    return set(), set(), None\n"))


def test_flow_nobody_writes(make_pipeline):
    text = BASE.replace(
        "  b: {schema: {url: string, n: int}}", "  b: {schema: {url: string, n: int}}\n  c: {schema: {url: string}}"
    )
    with pytest.raises(SpecError, match="flow 'c' is neither external nor written by any stage") as e:
        load_spec(make_pipeline(text, GOOD_MODULE))
    assert e.value.code == "no-producer"


# ------------------------------------------------------------- hostile YAML: bounded work, SpecError with file and line
def _laughs(levels: int = 9) -> str:
    """The "billion laughs": 9 levels of 9 aliases expand to 9**9 strings."""
    out = 'l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for n in range(1, levels):
        out += f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]\n"
    return out


def _deep(n: int) -> str:
    return "[" * n + "]" * n


@pytest.mark.parametrize(
    "name,text,code,line",
    [
        ("recursive-anchor", BASE + "    params: {x: &a [*a]}\n", "yaml-recursive", 11),
        ("recursive-merge", BASE + "    params: &m {<<: *m}\n", "yaml-recursive", 11),
        ("alias-bomb", _laughs() + BASE, "yaml-too-big", 6),
        (
            "alias-bomb-in-params",
            BASE + "    params:\n" + "".join("      " + x + "\n" for x in _laughs().splitlines()),
            "yaml-too-big",
            17,
        ),
        ("deep-flow", BASE + f"    params: {{x: {_deep(5000)}}}\n", "yaml-too-deep", 11),
        (
            "deep-aliases",
            BASE + "    params:\n      a: &a " + _deep(20) + "\n      b: &b [[[[[[[[[[[[*a]]]]]]]]]]]]\n",
            "yaml-too-deep",
            13,
        ),
        (
            "deep-block",
            BASE + "    params:\n" + "".join("  " * (i + 3) + f"k{i}:\n" for i in range(40)),
            "yaml-too-deep",
            41,
        ),
        ("duplicate-top-key", BASE.replace("pipeline: p\n", "pipeline: p\npipeline: q\n"), "duplicate-key", 3),
        (
            "duplicate-stage-key",
            BASE.replace("    outputs: [b]", "    outputs: [b]\n    translator: MOD:t"),
            "duplicate-key",
            11,
        ),
        (
            "duplicate-schema-field",
            BASE.replace("{url: string, n: int}}\nstages", "{url: string, n: int, url: int}}\nstages"),
            "duplicate-key",
            5,
        ),
        ("duplicate-bool-keys", BASE + "    params: {m: {yes: 1, true: 2}}\n", "duplicate-key", 11),
        ("undefined-alias", BASE + "    params: {x: *nope}\n", "yaml", 11),
        ("bad-timestamp", BASE + "    params: {when: 2001-13-01}\n", "yaml", 11),
        ("bad-explicit-int", BASE + "    params: {n: !!int abc}\n", "yaml", 11),
        ("bad-explicit-bool", BASE + "    params: {n: !!bool maybe}\n", "yaml", 11),
        ("huge-int", BASE + "    params: {n: " + "9" * 5000 + "}\n", "yaml", 11),
        ("python-tag", BASE + "    params: {n: !!python/object/apply:os.system [echo]}\n", "yaml", 11),
        ("nul-character", BASE + '    params: {n: "a\x00b"}\n', "yaml", 11),
        ("tab-indent", BASE + "    params:\n\t- x\n", "yaml", 12),
        ("two-documents", BASE + "---\npipeline: q\n", "yaml", 11),
        ("unhashable-key", BASE + "    params: {[a]: 1}\n", "yaml", 11),
    ],
)
def test_hostile_yaml_is_refused_fast_with_file_and_line(make_pipeline, capsys, name, text, code, line):
    from cbp.cli import main

    load_spec(make_pipeline(BASE, GOOD_MODULE))  # what a first load imports is not counted below
    path = make_pipeline(text, GOOD_MODULE)
    with counting_calls() as calls, pytest.raises(SpecError) as e:
        load_spec(path)
    # bounded work, counted in calls: each is refused in under 40,000 (an expanded alias bomb or a
    # nesting walked to its end would make millions)
    assert calls.n < 200_000, (name, calls.n)
    assert e.value.code == code, str(e.value)
    assert str(e.value).startswith(f"{path}: line {line}: "), str(e.value)
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: line {line}: " in err and "Traceback" not in err


def test_file_size_and_encoding_are_checked(make_pipeline):
    from cbp.spec.loader import MAX_YAML_BYTES

    big = make_pipeline(BASE + "# " + "x" * MAX_YAML_BYTES + "\n", GOOD_MODULE)
    with pytest.raises(SpecError) as e:
        load_spec(big)
    assert e.value.code == "yaml-too-big" and "line 11: the file is longer than 64 KiB" in str(e.value)
    ok = make_pipeline(BASE + "# " + "x" * (MAX_YAML_BYTES - len(BASE) - 60) + "\n", GOOD_MODULE)
    assert load_spec(ok).name == "p"  # just under the limit is fine
    latin1 = make_pipeline(BASE, GOOD_MODULE)
    latin1.write_bytes(BASE.replace("pipeline: p", "pipeline: p\ndescription: caf\xe9").encode("latin-1"))
    with pytest.raises(SpecError) as e:
        load_spec(latin1)
    assert e.value.code == "yaml" and "line 3: not UTF-8 text" in str(e.value)


@pytest.mark.parametrize(
    "old,new,line,words",
    [
        ("    outputs: [b]", "    outputs: [b]\n    partitions: true", 11, ["partitions", "valid integer"]),
        ("    outputs: [b]", "    outputs: [b]\n    partitions: '4'", 11, ["partitions", "valid integer"]),
        ("    outputs: [b]", "    outputs: [b]\n    partitions: 4.0", 11, ["partitions", "valid integer"]),
        ("{external: true,", "{external: 1,", 4, ["flow 'a' external", "valid boolean"]),
        ("{external: true,", "{external: 'yes',", 4, ["flow 'a' external", "valid boolean"]),
        ("pipeline: p", "pipeline: 12", 2, ["pipeline", "valid string"]),
        ("translator: MOD:t", "translator: 5", 8, ["stage 's1' translator", "valid string"]),
        ("{url: string, n: int}}\nstages", "{url: string, n: 1}}\nstages", 5, ["flow 'b'", "valid string"]),
        ("    outputs: [b]", "    outputs: [b, 1]", 10, ["stage 's1' outputs", "valid string"]),
        ("    outputs: [b]", "    outputs: [b]\n    state: {schema: {n: int}, grouping: 0}", 11, ["grouping"]),
    ],
)
def test_yaml_scalars_are_strictly_typed(make_pipeline, old, new, line, words):
    assert old in BASE
    path = make_pipeline(BASE.replace(old, new), GOOD_MODULE)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "invalid-spec" and f"line {line}: " in str(e.value), str(e.value)
    for w in words:
        assert w in str(e.value), str(e.value)


@pytest.mark.parametrize("params", ["{x: .nan}", "{x: {1: a}}", "{x: 2001-01-01}", "{x: !!binary aGk=}"])
def test_params_must_be_plain_values(make_pipeline, params):
    path = make_pipeline(BASE + f"    params: {params}\n", GOOD_MODULE)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "bad-params" and "line 11" in str(e.value), str(e.value)


def test_anchors_aliases_and_merge_keys_still_work(make_pipeline):
    text = (
        BASE.replace(
            "  a: {external: true, schema: {url: string, n: int}}",
            "  a: {external: true, schema: &rec {url: string, n: int}}",
        ).replace("  b: {schema: {url: string, n: int}}", "  b: {schema: *rec}")
        + "    params: &p {x: 1, y: [1, 2]}\n"
        + "  s2:\n    translator: MOD:t\n    inputs: [b]\n    params: {<<: *p, x: 2}\n"
    )
    spec = load_spec(make_pipeline(text, GOOD_MODULE))
    assert spec.flows["b"].schema == spec.flows["a"].schema
    assert spec.stages["s2"].params == {"x": 2, "y": [1, 2]}


def test_odd_names_are_refused_or_work(make_pipeline):
    """A name with a trailing newline is not an identifier; an identifier pydantic reserves is a fine field name."""
    with pytest.raises(SpecError) as e:
        load_spec(
            make_pipeline(
                BASE.replace("  b: {schema", '  "b\\n": {schema').replace("outputs: [b]", 'outputs: ["b\\n"]'),
                GOOD_MODULE,
            )
        )
    assert e.value.code == "bad-name"
    long = "b" * 101  # names become file names: one that cannot be one is refused here, not by the first epoch
    with pytest.raises(SpecError) as e:
        load_spec(
            make_pipeline(
                BASE.replace("  b: {schema", f"  {long}: {{schema").replace("outputs: [b]", f"outputs: [{long}]"),
                GOOD_MODULE,
            )
        )
    assert e.value.code == "bad-name"
    load_spec(
        make_pipeline(
            BASE.replace("  b: {schema", f"  {long[:100]}: {{schema").replace(
                "outputs: [b]", f"outputs: [{long[:100]}]"
            ),
            GOOD_MODULE,
        )
    )
    spec = load_spec(make_pipeline(BASE.replace("n: int}", "model_config: int}"), GOOD_MODULE))
    assert spec.flows["a"].schema.validate({"url": "u", "model_config": 1}) == {"url": "u", "model_config": 1}


@pytest.mark.parametrize("body", ["raise SystemExit(0)\n", "import sys\nsys.exit(3)\n", "raise RuntimeError('no')\n"])
def test_a_module_that_exits_while_imported_is_a_spec_error(make_pipeline, body):
    """``sys.exit`` at import time must not end ``cbp validate`` silently with exit 0."""
    path = make_pipeline(BASE, body + GOOD_MODULE)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "bad-import" and "line 8: stage 's1' translator" in str(e.value), str(e.value)


@pytest.mark.parametrize(
    "name", ["params", "epoch", "stage", "has_state", "write", "associate", "_writers", "_bind", "__class__"]
)
def test_an_output_flow_named_like_the_emitters_own_attributes_is_refused(make_pipeline, name):
    """out.params is the stage's params: a flow of that name could not be written as out.<flow>."""
    text = BASE.replace("  b: {", f"  {name}: {{").replace("outputs: [b]", f"outputs: [{name}]")
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline(text, GOOD_MODULE))
    assert e.value.code == "reserved-name" and f"'{name}'" in str(e.value)


def test_every_public_name_of_the_emitter_is_reserved():
    from cbp.model import EMITTER_NAMES, EMITTER_PRIVATE, Emitter

    out = Emitter("s", 1, {}, ["f"], True, lambda f, r: None)
    assert {n for n in set(dir(out)) | set(vars(out)) if not n.startswith("_")} - {"f", "state"} == set(EMITTER_NAMES)
    assert {n for n in set(dir(out)) | set(vars(out)) if n.startswith("_")} <= EMITTER_PRIVATE


def test_two_pipelines_with_a_module_of_one_name_each_get_their_own(tmp_path):
    """Translator modules are imported beside their YAML: a second pipeline's ``tr.py`` is not
    answered from the first one's ``sys.modules`` entry, and the YAML's directory is on
    ``sys.path`` only while its modules are imported (a ``wave.py`` there would shadow the
    standard library's for the rest of the process)."""
    import sys

    from cbp.spec import load_spec

    specs = []
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        (d / "trhelp.py").write_text(f"WHO = {name!r}\n")
        (d / "tr.py").write_text("import trhelp\n\ndef count(key, state, urls, out):\n    return trhelp.WHO\n")
        (d / "p.yaml").write_text((FLOWS / "url_count.yaml").read_text().replace("url_count:count_urls", "tr:count"))
        (d / "colorsys.py").write_text("raise RuntimeError('a module beside the YAML shadowed the standard library')\n")
        (d / "lazyhelp.py").write_text(f"WHO = {name!r}\n")
        specs.append(load_spec(str(d / "p.yaml")))
        assert (
            sys.path[-1] == str(d) and str(d) not in sys.path[:-1]
        )  # last: found by a later import, shadowing nothing
    assert [s.stages["url_count"].translator(None, None, None, None) for s in specs] == ["a", "b"]
    sys.modules.pop("colorsys", None)
    import colorsys  # the standard library's

    assert colorsys.__file__.startswith(sys.base_prefix) or "site-packages" not in colorsys.__file__
    import lazyhelp  # what a translator imports when it is called: still found beside its YAML

    assert lazyhelp.WHO in ("a", "b")
    for name in ("tr", "trhelp", "lazyhelp"):
        sys.modules.pop(name, None)
    for d in ("a", "b"):
        sys.path.remove(str(tmp_path / d))


def _unpickled_elsewhere(fn, tmp_path):
    """What ``fn`` returns when a fresh Python that cannot import the user's modules (a worker) unpickles it."""
    import subprocess
    import sys

    from pyspark import cloudpickle

    blob = tmp_path / "fn.pickle"
    blob.write_bytes(cloudpickle.dumps(fn))
    code = f"import pickle; print(pickle.loads(open({str(blob)!r}, 'rb').read())(None, None, None, None))"
    root = str(FLOWS.parent)
    r = subprocess.run(
        [sys.executable, "-c", code], cwd="/", capture_output=True, text=True, timeout=120, env={"PYTHONPATH": root}
    )
    return r.stdout.strip() if r.returncode == 0 else r.stderr.strip().splitlines()[-1]


@contextlib.contextmanager
def _user_path(first, *others, module):
    """``first`` put on ``sys.path`` as a user's script would; after, ``module`` and every directory gone again."""
    import sys

    sys.path.insert(0, str(first))
    try:
        yield
    finally:
        sys.modules.pop(module, None)
        for d in (first, *others):
            while str(d) in sys.path:
                sys.path.remove(str(d))


def test_a_module_of_the_yamls_name_loaded_from_elsewhere_gives_way_to_the_one_beside_it(tmp_path):
    """The user's process imported a module of the name the YAML names from another directory (no pipeline's):
    the pipeline gets the one beside its YAML, and a worker that cannot import either runs it (shipped by
    value). Before, the loaded module answered, pickled by reference: ModuleNotFoundError on the worker."""

    from cbp.spec import load_spec

    other, mine = tmp_path / "other", tmp_path / "mine"
    for d in (other, mine):
        d.mkdir()
        (d / "shadow_tr_q7.py").write_text(f"def count(key, state, urls, out):\n    return {d.name!r}\n")
    with _user_path(other, mine, module="shadow_tr_q7"):
        import shadow_tr_q7  # the user's own, from elsewhere

        assert shadow_tr_q7.count(None, None, None, None) == "other"
        text = (FLOWS / "url_count.yaml").read_text().replace("url_count:count_urls", "shadow_tr_q7:count")
        (mine / "p.yaml").write_text(text)
        fn = load_spec(str(mine / "p.yaml")).stages["url_count"].translator
        assert fn(None, None, None, None) == "mine"
        assert _unpickled_elsewhere(fn, tmp_path) == "mine"


def test_a_module_from_a_directory_the_process_put_on_sys_path_ships_by_value(tmp_path):
    """A translator module that is neither beside the YAML nor installed (the user's script put its
    directory on ``sys.path``) reaches a worker that cannot import it: it is shipped by value."""

    from cbp.spec import load_spec

    lib, flows = tmp_path / "lib", tmp_path / "flows"
    for d in (lib, flows):
        d.mkdir()
    (lib / "far_tr_q7.py").write_text("def count(key, state, urls, out):\n    return 'far'\n")
    text = (FLOWS / "url_count.yaml").read_text().replace("url_count:count_urls", "far_tr_q7:count")
    (flows / "p.yaml").write_text(text)
    with _user_path(lib, flows, module="far_tr_q7"):
        fn = load_spec(str(flows / "p.yaml")).stages["url_count"].translator
        assert fn(None, None, None, None) == "far"
        assert _unpickled_elsewhere(fn, tmp_path) == "far"


def test_pipeline_params_reach_every_stage_and_a_stages_own_win(make_pipeline):
    text = BASE.replace("stages:\n", "params: {t: 3.0, name: x}\nstages:\n") + (
        "    params: {t: 5.0}\n  s2:\n    translator: MOD:t\n    inputs: [{flow: b, route_by: url}]\n"
    )
    spec = load_spec(make_pipeline(text, GOOD_MODULE))
    assert spec.stages["s1"].params == {"t": 5.0, "name": "x"}
    assert spec.stages["s2"].params == {"t": 3.0, "name": "x"}


def test_pipeline_params_must_be_plain_values(make_pipeline):
    path = make_pipeline(BASE.replace("stages:\n", "params: {x: .nan}\nstages:\n"), GOOD_MODULE)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "bad-params" and "line 6" in str(e.value), str(e.value)


def test_the_crawl_queues_merge_and_threshold_share_one_threshold():
    """merge skips the URLs its site's count cannot move across threshold's threshold: one value, set once."""
    spec = load_spec(FLOWS / "crawl_queue.yaml")
    assert spec.stages["merge"].params["threshold"] == spec.stages["threshold"].params["threshold"] == 3.0
    assert not re.search(r"threshold:\s*[0-9]", (FLOWS / "crawl_queue.yaml").read_text().split("\nstages:")[1]), (
        "set once, in the pipeline's params"
    )
