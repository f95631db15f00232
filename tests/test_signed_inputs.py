"""Retractions go only where they are handled: a record whose ``_diff`` is not +1 bound for a stage
input that is not ``signed: true`` is refused (code ``retraction-refused``), at feed time for an
external flow (nothing of the feed lands) and at the epoch for a flow a stage writes (nothing of
the epoch is committed), on every engine path; ``cbp validate`` warns about unsigned readers of
flows that are signed by nature."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

import cbp
from cbp.errors import InputError, UserCodeError
from cbp.spec import load_spec
from cbp.spec.signing import unsigned_readers

COUNTER = """
pipeline: signing
flows:
  words: {external: true, schema: {w: string}KEYED}
  counts: {schema: {w: string, n: int}}
stages:
  count:
    translator: MOD:count
    partitions: 2
    inputs: [{flow: words, route_by: wINPUT}]
    state: {schema: {w: string, n: int}}
    outputs: [counts]STAGE
"""
MODULE = """
def count(key, state, words, out):
    prev = next(state, None)
    n = sum(r["_diff"] for r in words) + (prev["n"] if prev else 0)
    if n:
        out.state.write({"w": key, "n": n})
    out.counts.write({"w": key, "n": n})
"""


def counter(make_pipeline, *, stage: str = "", inp: str = "", keyed: bool = False, module_name: str | None = None):
    text = COUNTER.replace("STAGE", stage).replace("INPUT", inp).replace("KEYED", ", key: [w]" if keyed else "")
    return make_pipeline(text, MODULE, module_name)


@pytest.mark.parametrize(
    "feed",
    [
        [{"w": "a"}, {"w": "a", "_diff": -1}],  # +r and -r would cancel: refused all the same
        [{"w": "b"}, {"w": "a", "_diff": 3}],  # copies
    ],
)
def test_feed_to_unsigned_stage_is_refused_and_lands_nothing(spark, make_pipeline, tmp_path, feed):
    p = cbp.Pipeline(counter(make_pipeline), str(tmp_path / "home"), spark=spark)
    p.feed("words", [{"w": "a"}])
    with pytest.raises(InputError) as e:
        p.feed("words", feed)
    assert e.value.code == "retraction-refused"
    text = str(e.value)
    assert "'words'" in text and "'count'" in text and "record 2" in text and "signed: true" in text and "_diff" in text
    assert p.feeds("words") == 1
    p.run()
    assert p.state("count") == [{"w": "a", "n": 1}]


def test_arrow_and_file_feeds_are_refused(spark, make_pipeline, tmp_path):
    p = cbp.Pipeline(counter(make_pipeline), str(tmp_path / "home"), spark=spark)
    with pytest.raises(InputError) as e:
        p.feed("words", pa.table({"w": ["x", "y"], "_diff": pa.array([1, -1], pa.int64())}))
    assert e.value.code == "retraction-refused"
    f = tmp_path / "f.jsonl"
    f.write_text(json.dumps({"w": "x"}) + "\n" + json.dumps({"w": "x", "_diff": -1}) + "\n")
    with pytest.raises(InputError) as e:
        p.feed("words", str(f))
    assert e.value.code == "retraction-refused" and "record 2" in str(e.value)
    assert p.feeds("words") == 0


def test_keyed_flow_update_is_a_retraction_refused_by_an_unsigned_stage(spark, make_pipeline, tmp_path):
    p = cbp.Pipeline(counter(make_pipeline, keyed=True), str(tmp_path / "home"), spark=spark)
    p.feed("words", [{"w": "a"}])  # an insert: +1 only
    with pytest.raises(InputError) as e:
        p.feed("words", [{"w": "a", "_diff": -1}])  # a delete: -1 of the row
    assert e.value.code == "retraction-refused" and "keyed" in str(e.value)
    assert p.feeds("words") == 1
    p.run()
    assert p.state("count") == [{"w": "a", "n": 1}]


@pytest.mark.parametrize(
    "stage,inp,refused",
    [
        ("\n    signed: true", "", False),
        ("", ", signed: true", False),
        ("\n    signed: true", ", signed: false", True),  # the input's own 'signed' wins
    ],
)
def test_signed_stage_or_input_takes_retractions(spark, make_pipeline, tmp_path, stage, inp, refused):
    p = cbp.Pipeline(counter(make_pipeline, stage=stage, inp=inp), str(tmp_path / "home"), spark=spark)
    p.feed("words", [{"w": "a"}, {"w": "a"}, {"w": "b"}])
    p.run()
    if refused:
        with pytest.raises(InputError) as e:
            p.feed("words", [{"w": "a", "_diff": -1}])
        assert e.value.code == "retraction-refused"
        return
    p.feed("words", [{"w": "a", "_diff": -1}, {"w": "b", "_diff": -1}])
    p.run()
    assert p.state("count") == [{"w": "a", "n": 1}]


# ------------------------------------------------------------------ at the epoch: flows stages write
CHAIN = """
pipeline: chain
flows:
  ins: {external: true, schema: {w: string}}
  mid: {schema: {w: string}}
  counts: {schema: {w: string, n: int}}
stages:
  relay:
    translator: MOD:relay
    signed: true
    inputs: [{flow: ins, route_by: w}]
    state: {schema: {w: string}}
    outputs: [mid]
  count:
    translator: MOD:COUNTFN
    partitions: 2BATCH
    inputs: [{flow: mid, route_by: w}]
    state: {schema: {w: string, n: int}}
    outputs: [counts]
"""
CHAIN_RECORDWISE = """
pipeline: chain
flows:
  ins: {external: true, schema: {w: string}}
  mid: {schema: {w: string}}
  echo: {schema: {w: string}}
stages:
  relay:
    translator: MOD:relay
    signed: true
    inputs: [{flow: ins, route_by: w}]
    state: {schema: {w: string}}
    outputs: [mid]
  copy:
    translator: MOD:copy
    inputs: [mid]
    outputs: [echo]
"""
CHAIN_MODULE = """
import pyarrow as pa
import pyarrow.compute as pc

def relay(key, state, ins, out):
    for r in ins:  # passes each record on with its multiplicity
        out.mid.write({"w": r["w"], "_diff": r["_diff"]})

def count(key, state, mid, out):
    prev = next(state, None)
    n = sum(r["_diff"] for r in mid) + (prev["n"] if prev else 0)
    if n:
        out.state.write({"w": key, "n": n})
    out.counts.write({"w": key, "n": n})

def count_batch(keys, state, mid, out):
    total = [0] * len(keys)
    for pos, d in zip(mid["_pos"].to_pylist(), mid["_diff"].to_pylist()):
        total[pos] += d
    if state is not None:
        for pos, n in zip(state["_pos"].to_pylist(), state["n"].to_pylist()):
            total[pos] += n
    new = pa.table({"_key": keys, "w": keys, "n": pa.array(total, pa.int64())})
    return {"state": new, "counts": new.drop_columns(["_key"])}

def copy(key, state, mid, out):
    for r in mid:
        out.echo.write({"w": r["w"]})
"""


@pytest.mark.parametrize("path", ["small", "shuffle", "blackbox", "batch", "columnar", "recordwise"])
def test_epoch_refuses_a_retraction_on_an_unsigned_input(spark, make_pipeline, tmp_path, monkeypatch, path):
    if path not in ("small", "columnar"):
        monkeypatch.setenv("CBP_SMALL_EPOCH_RECORDS", "0")
    if path == "batch":
        monkeypatch.setenv("CBP_COLUMNAR", "0")
    batch = path in ("batch", "columnar")
    text = CHAIN_RECORDWISE if path == "recordwise" else CHAIN.replace("COUNTFN", "count_batch" if batch else "count")
    yaml = make_pipeline(text.replace("BATCH", "\n    batch: true" if batch else ""), CHAIN_MODULE)
    p = cbp.Pipeline(yaml, str(tmp_path / "home"), mode="blackbox" if path == "blackbox" else None, spark=spark)
    p.feed("ins", [{"w": "a"}, {"w": "a"}, {"w": "b"}])
    p.run()
    reader = "copy" if path == "recordwise" else "count"
    before = p.state(reader) if reader == "count" else p.output("echo", consolidated=True)
    p.feed("ins", [{"w": "a", "_diff": -1}])  # the relay is signed: it takes the retraction and passes it on
    with pytest.raises(UserCodeError) as e:
        p.run()
    assert e.value.code == "retraction-refused" and e.value.stage == reader
    text = str(e.value)
    assert "'mid'" in text and f"'{reader}'" in text and '"w": "a"' in text and "signed: true" in text
    after = p.state(reader) if reader == "count" else p.output("echo", consolidated=True)
    assert after == before  # nothing of the refused epoch was committed


def test_validate_warns_about_unsigned_readers_of_signed_flows(make_pipeline):
    keyed = load_spec(counter(make_pipeline, keyed=True))
    assert [(w.code, w.stage) for w in unsigned_readers(keyed)] == [("unsigned-reader", "count")]
    assert unsigned_readers(load_spec(counter(make_pipeline, keyed=True, stage="\n    signed: true"))) == []
    assert unsigned_readers(load_spec(counter(make_pipeline))) == []  # a plain external flow: refused when fed, if ever
    chain = load_spec(make_pipeline(CHAIN.replace("COUNTFN", "count").replace("BATCH", ""), CHAIN_MODULE))
    # 'mid' is written by signed stage 'relay'
    assert [(w.code, w.stage) for w in unsigned_readers(chain)] == [("unsigned-reader", "count")]


# ------------------------------------------------------------------ an existing home: plan, upgrade
def test_adding_and_removing_signed_applies_without_a_rebuild(spark, make_pipeline, tmp_path):
    home = str(tmp_path / "home")
    name = f"signing_{tmp_path.name}".replace("-", "_")  # one translator path: only 'signed' changes
    p = cbp.Pipeline(counter(make_pipeline, module_name=name), home, spark=spark)
    p.feed("words", [{"w": "a"}, {"w": "a"}, {"w": "b"}])
    p.run()
    signed = cbp.Pipeline(counter(make_pipeline, stage="\n    signed: true", module_name=name), home, spark=spark)
    plan = signed.plan()
    assert not plan.needs_upgrade
    assert [(c.verdict, c.what) for c in plan.changes] == [("applies", "stage 'count'")]
    assert "now takes retractions" in plan.changes[0].detail
    signed.feed("words", [{"w": "a", "_diff": -1}])
    signed.run()
    assert sorted(signed.state("count"), key=lambda r: r["w"]) == [{"w": "a", "n": 1}, {"w": "b", "n": 1}]
    signed.upgrade()  # records the YAML; nothing stored is rewritten
    unsigned = cbp.Pipeline(counter(make_pipeline, module_name=name), home, spark=spark)
    plan = unsigned.plan()
    assert not plan.needs_upgrade and "no longer takes retractions" in plan.changes[0].detail
    with pytest.raises(InputError) as e:
        unsigned.feed("words", [{"w": "b", "_diff": -1}])
    assert e.value.code == "retraction-refused"


def test_cli_validate_warns_unsigned_reader(make_pipeline, capsys):
    from cbp.cli import main

    assert main(["validate", str(counter(make_pipeline, keyed=True))]) == 0
    err = capsys.readouterr().err
    assert "warning [unsigned-reader]" in err and "'count'" in err and "signed: true" in err


def test_delta_source_delete_is_refused_by_an_unsigned_stage(spark, make_pipeline, tmp_path):
    from deltalake import DeltaTable, write_deltalake

    uri = str(tmp_path / "src")
    cdf = {"delta.enableChangeDataFeed": "true"}
    write_deltalake(uri, pa.table({"w": ["a", "b"]}), configuration=cdf)
    text = COUNTER.replace("STAGE", "").replace("INPUT", "").replace("KEYED", f", source: {{delta: '{uri}'}}")
    p = cbp.Pipeline(make_pipeline(text, MODULE), str(tmp_path / "home"), spark=spark)
    p.sync()  # the first version: every row +1
    DeltaTable(uri).delete("w = 'a'")
    with pytest.raises(InputError) as e:
        p.sync()
    assert e.value.code == "retraction-refused" and "'count'" in str(e.value)
    assert p.feeds("words") == 1  # the delete's version did not land
    with pytest.raises(InputError):
        p.run()  # a run syncs first: still refused
    p.run(sync=False)
    assert sorted(r["w"] for r in p.state("count")) == ["a", "b"]


def test_cli_feed_of_a_retraction_to_an_unsigned_stage_exits_3(make_pipeline, tmp_path, capsys):
    from cbp.cli import main

    f = tmp_path / "back.jsonl"
    f.write_text('{"w": "home", "_diff": -1}\n')
    yaml = str(counter(make_pipeline))
    assert main(["feed", yaml, "words", str(f), "--home", str(tmp_path / "home")]) == 3
    err = capsys.readouterr().err
    assert "error [retraction-refused]" in err and "'count'" in err and "signed: true" in err
