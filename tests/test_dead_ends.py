"""Dead ends said out loud: stages that can never run are warned about by 'cbp validate', and a
'cbp run' that runs nothing says why, per stage."""

from __future__ import annotations

import cbp
from cbp.cli import main
from cbp.spec.deadends import dead_ends

SELF_LOOP = """
pipeline: loopy
flows:
  seeds: {external: true, schema: {k: string}}
  again: {schema: {k: string}}
stages:
  walk:
    translator: MOD:walk
    inputs: [{flow: seeds, route_by: k}, {flow: again, route_by: k}]
    state: {schema: {k: string}}
    outputs: [again]
    RUNNABLE
"""
CYCLE = """
pipeline: closed
flows:
  seeds: {external: true, schema: {k: string}}
  ping: {schema: {k: string}}
  pong: {schema: {k: string}}
  done: {schema: {k: string}}
stages:
  a:
    translator: MOD:fwd
    inputs: [pong]
    outputs: [ping]
    runnable: any
  b:
    translator: MOD:fwd
    inputs: [ping]
    outputs: [pong]
    runnable: any
  c:
    translator: MOD:fwd
    inputs: [seeds, pong]
    outputs: [done]
"""
MODULE = """
def walk(key, state, seeds, again, out):
    for r in seeds:
        out.state.write(r)

def fwd(key, state, *inputs, out):
    pass
"""


def test_runnable_all_on_own_loopback_is_a_dead_end(make_pipeline, capsys):
    path = make_pipeline(SELF_LOOP.replace("RUNNABLE", ""), MODULE)
    ends = dead_ends(cbp.load_spec(path))
    assert [(d.stage, d.code) for d in ends] == [("walk", "self-loop-all")]
    assert "'again'" in ends[0].message and str(path) in ends[0].message
    assert main(["validate", str(path)]) == 0  # a warning, not an error
    assert "warning [self-loop-all]" in capsys.readouterr().err
    assert dead_ends(cbp.load_spec(make_pipeline(SELF_LOOP.replace("RUNNABLE", "runnable: any"), MODULE))) == []


def test_cycle_without_external_input_is_a_dead_end(make_pipeline, capsys):
    path = make_pipeline(CYCLE, MODULE)
    ends = {d.stage: d.code for d in dead_ends(cbp.load_spec(path))}
    assert ends == {"a": "unreached-cycle", "b": "unreached-cycle", "c": "waits-on-dead-stage"}
    assert main(["validate", str(path)]) == 0
    err = capsys.readouterr().err
    assert err.count("warning [unreached-cycle]") == 2 and "warning [waits-on-dead-stage]" in err


def test_shipped_pipelines_have_no_dead_ends():
    from conftest import FLOWS

    for path in sorted(FLOWS.glob("*.yaml")):
        assert dead_ends(cbp.load_spec(path)) == [], path


def test_run_that_runs_nothing_says_why(spark, make_pipeline, tmp_path, capsys):
    path = make_pipeline(SELF_LOOP.replace("RUNNABLE", ""), MODULE)
    home = str(tmp_path / "h")
    (tmp_path / "s.jsonl").write_text('{"k": "x"}\n')
    assert main(["run", str(path), "--home", home, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "0 stage epoch(s)" in out and "stage 'walk' did not run: " in out and "can never run" in out
    p = cbp.load(path, home=home, spark=spark)
    p.feed("seeds", str(tmp_path / "s.jsonl"))
    assert p.run() == []
    assert "can never run" in p.idle_reasons()["walk"]


def test_idle_reasons_name_what_a_stage_waits_for(spark, tmp_path):
    from conftest import FLOWS

    p = cbp.load(FLOWS / "set_diff.yaml", home=str(tmp_path / "h"), spark=spark)
    assert set(p.idle_reasons()) == set(p.spec.stages)
    assert all(r.startswith("no new input") for r in p.idle_reasons().values())
    p.feed("crawl_a", [{"url": "u", "hour": 1}])
    assert p.run() == []
    why = p.idle_reasons()["set_diff"]
    assert "crawl_a" in why and ("no complete increment" in why or "says not runnable" in why), why
