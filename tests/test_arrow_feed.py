"""Feeding Arrow data (a pyarrow Table, record batches, a Parquet file, a pandas DataFrame): it lands
exactly what feeding the same rows as dicts lands, and every table the dict path refuses is refused
too (code ``bad-record``, the same record number and field), with nothing landed."""

from __future__ import annotations

import json
import random

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import cbp
from cbp.cli import main
from cbp.errors import InputError

YAML = """
pipeline: arrowfeed
flows:
  a: {external: true, schema: {k: string, n: int, s: "string?", f: "float?", b: "bool?", j: "json?",
      xs: "list<float?>?", ys: "list<string>?"}}
  out: {schema: {k: string}}
stages:
  st:
    translator: mod:noop
    inputs: [{flow: a, route_by: k}]
    outputs: [out]
"""
ODD = ['q"1', "b\\2", "t\t3", "é", "\u2028", "", "nul\x00", "😀", "字" * 40]


@pytest.fixture()
def pipe(tmp_path):
    (tmp_path / "mod.py").write_text("def noop(key, state, a, out):\n    pass\n")
    (tmp_path / "p.yaml").write_text(YAML)
    return lambda name="home": cbp.load(tmp_path / "p.yaml", home=str(tmp_path / name))


def _rows(rng: random.Random, n: int) -> list[dict]:
    return [
        {
            "k": rng.choice(ODD) + str(i % 7),
            "n": rng.randint(-(2**63), 2**63 - 1),
            "s": rng.choice([None, *ODD]),
            "f": rng.choice([None, 0.1, -2.5e300, 1e-310, 3.0, -0.0]),
            "b": rng.choice([None, True, False]),
            "j": rng.choice([None, {"x": [1, {"y": "é"}], "a": None}, [1.5, "s", True], "text", 7, {}]),
            "xs": rng.choice([None, [], [1.0, None, -3.25]]),
            "ys": rng.choice([None, [], ["a", "é\t"]]),
        }
        for i in range(n)
    ]


def _canon(recs):
    return sorted(json.dumps(r, sort_keys=True) for r in recs)


def test_an_arrow_table_lands_what_its_rows_as_dicts_land(pipe, tmp_path):
    rng = random.Random(1)
    rows = _rows(rng, 300)
    # json values given as Arrow: scalars, lists and structs of the same values
    table = pa.table(
        {
            "k": pa.array([r["k"] for r in rows]).cast(pa.large_string()),
            "n": pa.array([r["n"] for r in rows], pa.int64()),
            "s": pa.array([r["s"] for r in rows]).dictionary_encode(),
            "f": pa.array([r["f"] for r in rows], pa.float64()),
            "b": pa.array([r["b"] for r in rows], pa.bool_()),
            "xs": pa.array([r["xs"] for r in rows], pa.large_list(pa.float64())),
            "ys": pa.array([r["ys"] for r in rows], pa.list_(pa.string())),
        }
    )
    dicts, arrow = pipe("dicts"), pipe("arrow")
    dicts.feed("a", [{k: v for k, v in r.items() if k != "j"} for r in rows])
    arrow.feed("a", table)
    assert _canon(arrow.output("a")) == _canon(dicts.output("a"))
    assert len(arrow.output("a")) == 300
    # json fields: a column of any Arrow type whose Python values are JSON, stored as a dict feed stores them
    js = [{"k": "x", "n": 1, "j": {"b": [1, 2], "a": "é"}}, {"k": "y", "n": 2, "j": None}]
    d2, a2 = pipe("d2"), pipe("a2")
    d2.feed("a", js)
    a2.feed("a", pa.Table.from_pylist(js))
    assert _canon(a2.output("a")) == _canon(d2.output("a"))


def test_parquet_files_batches_and_dataframes_land_the_same(pipe, tmp_path):
    rng = random.Random(2)
    rows = [{"k": rng.choice(ODD), "n": i, "f": i / 4, "xs": [float(i)]} for i in range(120_000)]  # more than one chunk
    table = pa.Table.from_pylist(rows)
    pq.write_table(table, tmp_path / "inc.parquet", row_group_size=7_000)
    want = _canon(r | {"s": None, "b": None, "j": None, "ys": None} for r in rows)
    df = pd.DataFrame(rows).iloc[::-1]  # an index that is not 0..n-1: not a field
    ints = table.set_column(1, "n", table.column("n").cast(pa.int32())).set_column(
        2, "f", table.column("f").cast(pa.float32()).cast(pa.float64())
    )
    for name, src in [
        ("parquet", str(tmp_path / "inc.parquet")),
        ("batches", pa.RecordBatchReader.from_batches(table.schema, table.to_batches(5_000))),
        ("batch", table.to_batches()[0]),
        ("pandas", df),
        ("narrow-types", ints),
    ]:
        p = pipe(name)
        landed = p.feed("a", src)
        got = p.output("a")
        if name == "batch":
            assert landed.records == table.to_batches()[0].num_rows
            continue
        assert landed.records == len(rows), name
        assert _canon(got) == want, name


BAD = [  # (what, table, field at fault, 1-based record number)
    ("unknown column", pa.table({"k": ["a"], "n": [1], "zz": [1]}), "zz", 1),
    ("missing required", pa.table({"k": ["a", "b"]}), "n", 1),
    ("null in required", pa.table({"k": ["a", None, "c"], "n": [1, 2, 3]}), "k", 2),
    ("string for int", pa.table({"k": ["a"], "n": ["1"]}), "n", 1),
    ("float for int", pa.table({"k": ["a", "b"], "n": [1.0, 2.0]}), "n", 1),
    ("bool for int", pa.table({"k": ["a"], "n": [True]}), "n", 1),
    ("uint64 too large", pa.table({"k": ["a", "b", "c"], "n": pa.array([1, 2, 2**63], pa.uint64())}), "n", 3),
    ("NaN float", pa.table({"k": ["a", "b"], "n": [1, 2], "f": [0.5, float("nan")]}), "f", 2),
    ("infinite float", pa.table({"k": ["a", "b"], "n": [1, 2], "f": [float("-inf"), 1.0]}), "f", 1),
    ("int for string", pa.table({"k": [1], "n": [1]}), "k", 1),
    ("binary for string", pa.table({"k": pa.array([b"a"]), "n": [1]}), "k", 1),
    ("not UTF-8", pa.table({"k": pa.array([b"ok", b"\xff"], pa.binary()).view(pa.string()), "n": [1, 2]}), "k", 2),
    (
        "lone surrogate as UTF-8",
        pa.table({"k": pa.array([b"ok", b"ok", b"\xed\xa0\x80"], pa.binary()).view(pa.string()), "n": [1, 2, 3]}),
        "k",
        3,
    ),
    ("null list item", pa.table({"k": ["a", "b"], "n": [1, 2], "ys": [["x"], ["y", None]]}), "ys", 2),
    ("NaN list item", pa.table({"k": ["a", "b"], "n": [1, 2], "xs": [[1.0], [float("nan")]]}), "xs", 2),
    ("scalar for list", pa.table({"k": ["a"], "n": [1], "xs": [1.0]}), "xs", 1),
    ("list for scalar", pa.table({"k": [["a"]], "n": [1]}), "k", 1),
    ("timestamp for json", pa.table({"k": ["a"], "n": [1], "j": pa.array([0], pa.timestamp("s"))}), "j", 1),
    ("bytes in json", pa.table({"k": ["a", "b"], "n": [1, 2], "j": pa.array([None, b"x"])}), "j", 2),
    ("NaN in json", pa.table({"k": ["a", "b"], "n": [1, 2], "j": pa.array([[1.0], [float("nan")]])}), "j", 2),
    ("earliest bad row wins", pa.table({"k": ["a", "b", None], "n": pa.array([1, None, 3])}), "n", 2),
    (
        "duplicate column",
        pa.Table.from_arrays([pa.array(["a"]), pa.array([1]), pa.array([2])], names=["k", "n", "n"]),
        "n",
        1,
    ),
]


@pytest.mark.parametrize("what,table,field,row", BAD, ids=[b[0] for b in BAD])
def test_a_bad_table_is_refused_naming_record_and_field_and_lands_nothing(pipe, what, table, field, row):
    p = pipe()
    p.feed("a", [{"k": "kept", "n": 0}])
    with pytest.raises(InputError) as e:
        p.feed("a", table)
    assert e.value.code == "bad-record"
    assert f"record {row}:" in str(e.value) and f"field '{field}'" in str(e.value)
    assert p.feeds("a") == 1 and p.output("a") == [
        {"k": "kept", "n": 0, "s": None, "f": None, "b": None, "j": None, "xs": None, "ys": None}
    ]
    if what not in (
        "duplicate column",
        "lone surrogate as UTF-8",
        "not UTF-8",
        "binary for string",
        "timestamp for json",
    ):
        with pytest.raises(InputError) as d:  # the dict path refuses the same rows, naming the same record
            p.feed("a", table.to_pylist())
        assert d.value.code == "bad-record" and f"record {row}:" in str(d.value)


def test_a_bad_row_far_into_a_big_table_is_named_by_its_number(pipe):
    n = 130_001
    ks = ["k"] * n
    ks[-1] = None
    with pytest.raises(InputError) as e:
        pipe().feed("a", pa.table({"k": ks, "n": list(range(n))}).combine_chunks())
    assert e.value.code == "bad-record" and f"record {n}:" in str(e.value)


def test_a_file_that_is_not_parquet_is_unreadable(pipe, tmp_path):
    p = pipe()
    (tmp_path / "junk.parquet").write_bytes(b"PAR1" + b"\xff" * 64 + b"PAR1")
    (tmp_path / "text.parquet").write_text('{"k": "a", "n": 1}\n')
    for name in ("junk.parquet", "text.parquet", "missing.parquet"):
        with pytest.raises(InputError) as e:
            p.feed("a", str(tmp_path / name))
        assert e.value.code == "unreadable"
    assert p.feeds("a") == 0


def test_an_open_file_lands_what_its_path_lands_and_errors_name_its_source(pipe, tmp_path):
    import io

    rows = [{"k": k, "n": i} for i, k in enumerate(ODD)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "inc.parquet")
    (tmp_path / "inc.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    want = _canon(r | {"s": None, "f": None, "b": None, "j": None, "xs": None, "ys": None} for r in rows)
    for i, (name, source) in enumerate(
        [("inc.parquet", None), ("inc.jsonl", None), ("inc.parquet", "dropped"), ("inc.jsonl", "dropped")]
    ):
        p = pipe(f"h{i}")
        with open(tmp_path / name, "rb") as fh:  # a Parquet file is told by its name, or by its first bytes
            assert p.feed("a", fh, source=source).records == len(rows)
        assert _canon(p.output("a")) == want, (name, source)
    p = pipe("bad")
    for fh, source, code, where in [
        (io.BytesIO(b'{"k": "a", "n": 1}\n{"k": 5, "n": 1}\n'), "inbox/x.jsonl", "bad-record", "inbox/x.jsonl:2:"),
        (io.BytesIO(b"PAR1 not really"), "inbox/y.bin", "unreadable", "inbox/y.bin:"),
        (io.BytesIO(b"{}"), "inbox/z.parquet", "unreadable", "inbox/z.parquet:"),
        (open(tmp_path / "inc.jsonl", encoding="utf-8"), None, "unreadable", "inc.jsonl"),
    ]:
        with pytest.raises(InputError) as e:
            p.feed("a", fh, source=source)
        assert e.value.code == code and where in str(e.value), str(e.value)
        fh.close()
    assert p.feeds("a") == 0


def test_a_dataframe_arrow_cannot_read_is_a_bad_record(pipe):
    with pytest.raises(InputError) as e:
        pipe().feed("a", pd.DataFrame({"k": ["a", 3], "n": [1, 2]}))
    assert e.value.code == "bad-record"


def test_cli_feeds_a_parquet_file(pipe, tmp_path, capsys):
    pq.write_table(pa.table({"k": ["a", "b"], "n": [1, 2]}), tmp_path / "inc.parquet")
    pq.write_table(pa.table({"k": ["a"], "n": ["x"]}), tmp_path / "bad.parquet")
    home = str(tmp_path / "cli")
    assert main(["feed", str(tmp_path / "p.yaml"), "a", str(tmp_path / "inc.parquet"), "--home", home]) == 0
    assert "2 record(s)" in capsys.readouterr().out
    assert (
        main(["feed", str(tmp_path / "p.yaml"), "a", str(tmp_path / "bad.parquet"), "--home", home]) == 3
    )  # bad input records
    err = capsys.readouterr().err
    assert "record 1:" in err and "field 'n'" in err and "Traceback" not in err
    assert len(pipe("cli").output("a")) == 2


_ARROW_TYPES = [
    pa.string(),
    pa.large_string(),
    pa.int64(),
    pa.int8(),
    pa.uint64(),
    pa.float64(),
    pa.float32(),
    pa.bool_(),
    pa.binary(),
    pa.list_(pa.float64()),
    pa.list_(pa.string()),
    pa.large_list(pa.int64()),
    pa.null(),
    pa.struct([("x", pa.int64())]),
    pa.timestamp("ms"),
    pa.dictionary(pa.int8(), pa.string()),
]
_VALUES = [
    None,
    "",
    "é",
    "\x00",
    "😀",
    0,
    -1,
    2**63 - 1,
    2**63,
    2**64 - 1,
    0.5,
    -0.0,
    float("nan"),
    float("inf"),
    True,
    False,
    b"\xff",
    [],
    [None],
    [1.5],
    ["s"],
    {"x": 3},
]


def _column(rng: random.Random, t: pa.DataType, n: int) -> pa.Array | None:
    """A column of type ``t`` from random values that fit it (None if none do)."""
    vals = []
    for _ in range(n):
        for _ in range(20):
            v = rng.choice(_VALUES)
            try:
                pa.array([v], t)
            except (pa.ArrowException, ValueError, TypeError, OverflowError):
                continue
            vals.append(v)
            break
        else:
            return None
    try:
        return pa.array(vals, t)
    except (pa.ArrowException, ValueError, TypeError, OverflowError):
        return None


def test_random_tables_fare_as_their_rows_as_dicts(pipe):
    """Hostile columns of any type: either both paths land the same records or both refuse them
    (code bad-record, the same record), never a traceback."""
    rng = random.Random(7)
    fields = ["k", "n", "s", "f", "b", "j", "xs", "ys", "zz"]
    checked = refused = 0
    for trial in range(150):
        n = rng.randint(1, 4)
        cols = {"k": pa.array(["a"] * n), "n": pa.array(range(n), pa.int64())} if rng.random() < 0.6 else {}
        for name in rng.sample(fields, rng.randint(1, 4)):
            col = _column(rng, rng.choice(_ARROW_TYPES), n)
            if col is not None:
                cols[name] = col
        if not cols:
            continue
        table = pa.table(cols)
        outcome = {}
        try:
            rows = table.to_pylist()
        except (OverflowError, ValueError):  # e.g. a timestamp outside Python's range: only Arrow can feed it
            rows = None
        for way, src in (("arrow", table), ("dicts", rows)):
            if src is None:
                continue
            p = pipe(f"{way}-{trial}")
            try:
                p.feed("a", src)
                outcome[way] = ("ok", _canon(p.output("a")))
            except InputError as e:
                assert e.code == "bad-record", (way, cols, e)
                outcome[way] = ("refused", str(e).split(":")[0])
                assert p.feeds("a") == 0
        if rows is not None:
            assert outcome["arrow"] == outcome["dicts"], (table.schema, rows)
        checked += 1
        refused += outcome["arrow"][0] == "refused"
    assert checked > 100 and 0 < refused < checked
