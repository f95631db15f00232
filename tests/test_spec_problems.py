"""A pipeline YAML's independent mistakes are reported together, in one pass: each with the file,
its line, the stage or flow and its code; the error's ``code`` is the first one's."""

from __future__ import annotations

import pytest

from cbp import SpecError, load_spec
from cbp.cli import main

MODULE = """
def t(key, state, *inputs, out):
    pass
"""

THREE = """
pipeline: p
flows:
  a: {external: true, schema: {url: string, blob: bytes}}
  b: {external: true, schema: {url: string}}
  c: {schema: {url: string}}
  d: {schema: {url: string}}
stages:
  s1:
    translator: nomodule_here:t
    inputs: [{flow: b, route_by: url}]
    outputs: [c]
  s2:
    translator: MOD:t
    inputs: [{flow: b, route_by: missing}]
    outputs: [d]
"""


def _lines(text: str, *needles: str) -> list[int]:
    rows = text.splitlines()
    return [next(i for i, r in enumerate(rows, 1) if n in r) for n in needles]


def test_three_independent_mistakes_are_three_problems(make_pipeline, capsys):
    path = make_pipeline(THREE, MODULE)
    text = path.read_text()
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert [c for c, _ in e.value.problems] == ["bad-type", "bad-import", "unknown-field"]
    assert e.value.code == "bad-type"
    lines = _lines(text, "schema: {url: string, blob: bytes}", "translator: nomodule_here", "route_by: missing")
    for (code, message), line, who in zip(e.value.problems, lines, ("flow 'a'", "stage 's1'", "stage 's2'")):
        assert message.startswith(f"{path}: line {line}: ") and who in message, (code, message)
        assert f"[{code}]" in str(e.value)
    assert str(e.value).startswith(e.value.problems[0][1])  # the first problem, as when it was the only one
    assert main(["validate", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert [ln.split("]")[0] for ln in err] == [f"cbp validate: error [{c}" for c, _ in e.value.problems]


def test_a_dependent_mistake_is_not_reported_twice(make_pipeline):
    """A stage reading an unknown flow is one problem: its route_by etc. are not checked against a missing schema,
    and no flow is reported as lacking the producer that stage might have been."""
    text = THREE.replace("{flow: b, route_by: url}", "{flow: nosuch, route_by: url}")
    text = text.replace("blob: bytes", "blob: string")
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline(text, MODULE))
    assert [c for c, _ in e.value.problems] == ["unknown-flow", "unknown-field"]


def test_every_validation_error_is_reported(make_pipeline):
    text = """
    pipeline: p
    flows:
      a: {external: true, schema: {url: string}, colour: red}
    stages:
      s1:
        inputs: [a]
        partitions: "4"
      s2:
        translator: MOD:t
        inputs: [a]
        sideways: true
    """
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline(text, MODULE))
    problems = e.value.problems
    assert e.value.code == "invalid-spec" and {c for c, _ in problems} == {"invalid-spec"}
    assert len(problems) == 4, problems
    joined = " ".join(m for _, m in problems)
    for what in ("flow 'a' colour", "stage 's1' translator", "stage 's1' partitions", "stage 's2' sideways"):
        assert what in joined, what


def test_one_mistake_is_reported_as_before(make_pipeline):
    text = THREE.replace("blob: bytes", "blob: string").replace("nomodule_here:t", "MOD:t")
    text = text.replace("route_by: missing", "route_by: url")
    text = text.replace("outputs: [d]", "outputs: [c]")
    with pytest.raises(SpecError) as e:
        load_spec(make_pipeline(text, MODULE))
    assert e.value.code == "two-producers" and len(e.value.problems) == 1
    assert "more problem" not in str(e.value)
