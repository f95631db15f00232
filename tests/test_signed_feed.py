"""Feeds carry signed records: ``_diff`` (a nonzero int64, +1 when absent) on every path a feed
takes (dicts, JSON lines, Arrow, pandas, Parquet), checked (code ``bad-diff``, nothing landed),
stored in the flow's table, and read back; ``_diff`` in a schema is ``reserved-name``."""

from __future__ import annotations

import json

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import cbp
from cbp.errors import InputError, SpecError

YAML = """
pipeline: signedfeed
flows:
  urls: {external: true, schema: {url: string, n: "int?"}}
  out: {schema: {url: string}}
stages:
  st:
    translator: mod:noop
    signed: true
    inputs: [{flow: urls, route_by: url}]
    outputs: [out]
"""


@pytest.fixture()
def pipe(tmp_path):
    (tmp_path / "mod.py").write_text("def noop(key, state, urls, out):\n    pass\n")
    (tmp_path / "p.yaml").write_text(YAML)
    return cbp.load(tmp_path / "p.yaml", home=str(tmp_path / "home"))


def _stored(p, flow="urls"):
    t = p.home.read_table(f"flows/{flow}")
    return sorted((r["url"], r["_diff"]) for r in t.select(["url", "_diff"]).to_pylist())


def test_dicts_and_json_lines_carry_diff(pipe, tmp_path):
    pipe.feed("urls", [{"url": "a"}, {"url": "b", "_diff": -1}, {"url": "c", "_diff": 3}])
    f = tmp_path / "x.jsonl"
    f.write_text('{"url": "d", "_diff": -2}\n{"url": "e"}\n')
    pipe.feed("urls", str(f))
    assert _stored(pipe) == [("a", 1), ("b", -1), ("c", 3), ("d", -2), ("e", 1)]
    assert pipe.output("urls", epoch=1) == [
        {"url": "a", "n": None},
        {"url": "b", "n": None, "_diff": -1},
        {"url": "c", "n": None, "_diff": 3},
    ]


def test_arrow_pandas_and_parquet_carry_diff(pipe, tmp_path):
    pipe.feed("urls", pa.table({"url": ["a", "b"], "_diff": pa.array([-1, 2], pa.int32())}))
    pipe.feed("urls", pd.DataFrame({"_diff": [-5], "url": ["c"]}))
    pq.write_table(pa.table({"url": ["d"], "n": [1], "_diff": [-1]}), tmp_path / "f.parquet")
    pipe.feed("urls", str(tmp_path / "f.parquet"))
    pipe.feed("urls", pa.table({"url": ["e"]}))
    assert _stored(pipe) == [("a", -1), ("b", 2), ("c", -5), ("d", -1), ("e", 1)]


BAD = [0, 1.0, -1.5, True, False, "1", None, 2**63, -(2**63) - 1, 10**5000, [1], {"x": 1}]


@pytest.mark.parametrize("diff", BAD, ids=[type(d).__name__ + str(i) for i, d in enumerate(BAD)])
def test_bad_diff_in_dicts_lands_nothing(pipe, diff):
    with pytest.raises(InputError) as e:
        pipe.feed("urls", [{"url": "a"}, {"url": "b", "_diff": diff}])
    assert e.value.code == "bad-diff"
    assert "record 2" in str(e.value) and "'urls'" in str(e.value)
    assert pipe.output("urls") == []


@pytest.mark.parametrize("text", ["0", "1.0", "1e3", "true", '"1"', "null", str(2**63), "-" + "9" * 30, "[]"])
def test_bad_diff_in_json_lines_names_the_line(pipe, tmp_path, text):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"url": "a"}\n{"url": "b", "_diff": ' + text + "}\n")
    with pytest.raises(InputError) as e:
        pipe.feed("urls", str(f))
    assert e.value.code == "bad-diff"
    assert f"{f}:2" in str(e.value)
    assert pipe.output("urls") == []


@pytest.mark.parametrize(
    "col",
    [
        pa.array([1, 0]),
        pa.array([1.0, -1.0]),
        pa.array([True, False]),
        pa.array([1, None]),
        pa.array(["1", "-1"]),
        pa.array([1, 2**64 - 1], pa.uint64()),
        pa.array([1, 0], pa.int8()).dictionary_encode(),
    ],
)
def test_bad_diff_in_arrow_lands_nothing(pipe, col):
    with pytest.raises(InputError) as e:
        pipe.feed("urls", pa.table({"url": ["a", "b"], "_diff": col}))
    assert e.value.code == "bad-diff"
    assert "record" in str(e.value) and "'urls'" in str(e.value)
    assert pipe.output("urls") == []


def test_pandas_with_a_missing_diff_is_a_float_column_and_refused(pipe):
    with pytest.raises(InputError) as e:
        pipe.feed("urls", pd.DataFrame({"url": ["a", "b"], "_diff": [1, None]}))
    assert e.value.code == "bad-diff"


@pytest.mark.parametrize("where", ["flow", "state", "input"])
def test_diff_in_a_schema_is_a_reserved_name(tmp_path, where):
    y = {
        "flow": YAML.replace('{url: string, n: "int?"}', "{url: string, _diff: int}"),
        "state": YAML.replace(
            "    outputs: [out]", "    outputs: [out]\n    state: {schema: {url: string, _diff: int}}"
        ),
        "input": YAML.replace("route_by: url}", "route_by: url, schema: {url: string, _diff: int}}"),
    }[where]
    (tmp_path / "mod.py").write_text("def noop(key, state, urls, out):\n    pass\n")
    (tmp_path / "p.yaml").write_text(y)
    with pytest.raises(SpecError) as e:
        cbp.load(tmp_path / "p.yaml", home=str(tmp_path / "home"))
    assert e.value.code == "reserved-name"


def test_a_table_without_the_diff_column_reads_as_plus_one(pipe, tmp_path):
    """An increment file written by a cbp before signed records has no ``_diff``: +1."""
    pipe.feed("urls", [{"url": "a"}])
    t = pipe.home.read_table("flows/urls")
    assert t.column("_diff").to_pylist() == [1]
    # rewrite the file without the column, as an older cbp wrote it
    files = list((tmp_path / "home" / "flows" / "urls").rglob("*.parquet"))
    assert len(files) == 1
    old = pq.read_table(files[0])
    pq.write_table(old.drop_columns(["_diff"]), files[0])
    assert pipe.output("urls") == [{"url": "a", "n": None}]


def _canon(recs):
    return sorted(json.dumps(r, sort_keys=True) for r in recs)


def test_consolidated_output_as_of_each_feed_matches_pandas(pipe):
    import random

    rng = random.Random(4)
    feeds, have = [], {}
    for _ in range(6):
        feed = []
        for _ in range(rng.randint(5, 30)):
            u, n = f"u{rng.randint(0, 9)}", rng.choice([None, 1, 2])
            d = rng.choice([1, 1, 3])
            if have.get((u, n), 0) > 0 and rng.random() < 0.4:
                d = -rng.randint(1, have[(u, n)])
            have[(u, n)] = have.get((u, n), 0) + d
            feed.append({"url": u, "n": n, "_diff": d})
        feeds.append(feed)
        pipe.feed("urls", feed)
    for upto in range(1, 7):
        df = pd.DataFrame([r for f in feeds[:upto] for r in f])
        df["n"] = df["n"].astype(object)
        sums = df.fillna({"n": -1}).groupby(["url", "n"])["_diff"].sum()
        want = []
        for (u, n), d in sums.items():
            if d:
                want.append({"url": u, "n": None if n == -1 else int(n), **({"_diff": int(d)} if d != 1 else {})})
        assert _canon(pipe.output("urls", epoch=upto, consolidated=True)) == _canon(want)
    assert _canon(pipe.output("urls", consolidated=True)) == _canon(pipe.output("urls", epoch=6, consolidated=True))


def test_a_retraction_of_what_is_not_there_is_refused_by_consolidated_output(pipe, capsys, tmp_path):
    from cbp.cli import main

    pipe.feed("urls", [{"url": "a"}, {"url": "b"}])
    pipe.feed("urls", [{"url": "a", "_diff": -1}, {"url": "b", "_diff": -1}])
    assert pipe.output("urls", consolidated=True) == []
    pipe.feed("urls", [{"url": "b", "_diff": -1}, {"url": "c"}])
    assert pipe.output("urls", epoch=2, consolidated=True) == []  # as of feed 2 all is well
    with pytest.raises(InputError) as e:
        pipe.output("urls", consolidated=True)
    assert e.value.code == "negative-multiplicity"
    assert "'urls'" in str(e.value) and '"b"' in str(e.value) and "feed 3" in str(e.value)
    assert main(["output", str(tmp_path / "p.yaml"), "--home", str(tmp_path / "home"), "urls", "--consolidated"]) != 0
    assert "negative-multiplicity" in capsys.readouterr().err
    assert (
        main(
            [
                "output",
                str(tmp_path / "p.yaml"),
                "--home",
                str(tmp_path / "home"),
                "urls",
                "--consolidated",
                "--epoch",
                "1",
            ]
        )
        == 0
    )
    assert _canon(json.loads(x) for x in capsys.readouterr().out.splitlines()) == _canon(
        [{"url": "a", "n": None}, {"url": "b", "n": None}]
    )
