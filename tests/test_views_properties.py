"""Property tests (hypothesis) of SQL views: micro-views of each supported operator (filter with a
projection and CASE, UNION ALL, EXCEPT (distinct), join, GROUP BY sum/count/min/max/avg/count(DISTINCT),
DISTINCT, HAVING, a GROUP BY over a join, row_number() and a running sum OVER (PARTITION BY ...)) through
change sequences that insert, delete, move a row to another group (partition), delete a group's
MIN/MAX holder (a partition's top row), empty a group and give one join key many matches; after every epoch
each view's consolidated contents equal a from-scratch computation in Python over the inputs' rows
(multiset equality, floats to 1e-9 relative). One pipeline home per example; few examples. And a
view over a Delta source without ``schema:`` is typed from the table's columns."""

from __future__ import annotations

import math
import tempfile
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import cbp

A = {"k": "int", "g": "string", "v": "int?"}
B = {"k": "int", "w": "string"}
VIEWS = {  # one stage each but jgrp's (a join and a group); few stages: an epoch's cost grows with them
    "proj": "SELECT k, CASE WHEN v > 3 THEN 'hi' WHEN v IS NULL THEN 'n' ELSE 'lo' END AS c, v * 2 AS v2 FROM a "
    "WHERE v IS NULL OR v <> 1",
    "uni": "SELECT k, g FROM a WHERE v > 1 UNION ALL SELECT k, w FROM b",
    "joined": "SELECT a.k, a.v, b.w FROM a JOIN b ON a.k = b.k",
    "grp": "SELECT g, sum(v) AS s, count(*) AS n, count(v) AS nv, min(v) AS lo, max(v) AS hi, avg(v) AS m, "
    "count(DISTINCT v) AS d FROM a GROUP BY g",
    "dist": "SELECT DISTINCT g, v FROM a",
    "hav": "SELECT g, sum(v) AS s FROM a GROUP BY g HAVING count(*) >= 2",
    "jgrp": "SELECT b.w, count(*) AS n, sum(a.v) AS s FROM a JOIN b ON a.k = b.k GROUP BY b.w",
    "win": "SELECT k, g, v, row_number() OVER (PARTITION BY g ORDER BY v DESC NULLS LAST, k) AS rn, "
    "sum(v) OVER (PARTITION BY g ORDER BY k) AS rs FROM a",
    "exc": "SELECT k, v FROM a EXCEPT SELECT k, 1 AS v FROM b",  # a UNION ALL, then a GROUP BY of the row
}
GROUPS = ["g0", "g1", "g2"]
Row = dict[str, Any]


def _yaml() -> str:
    def schema(s: dict[str, str]) -> str:
        return "{" + ", ".join(f"{k}: {t!r}" for k, t in s.items()) + "}"

    flows = "".join(f"  {n}: {{external: true, schema: {schema(s)}}}\n" for n, s in (("a", A), ("b", B)))
    views = "".join(f"  {n}: {sql!r}\n" for n, sql in VIEWS.items())
    return f"pipeline: props\nflows:\n{flows}views:\n{views}"


# ------------------------------------------------------------------ from scratch
def _nonnull(rows: list[Row]) -> list[int]:
    return [r["v"] for r in rows if r["v"] is not None]


def _by_group(a: list[Row], key: Callable[[Row], Any] = lambda r: r["g"]) -> dict[Any, list[Row]]:
    out: dict[Any, list[Row]] = {}
    for r in a:
        out.setdefault(key(r), []).append(r)
    return out


def _agg(rows: list[Row]) -> tuple:
    vs = _nonnull(rows)
    s = sum(vs) if vs else None
    return (s, len(rows), len(vs), min(vs, default=None), max(vs, default=None), s / len(vs) if vs else None)


def _case(v: int | None) -> str:
    return "hi" if v is not None and v > 3 else ("n" if v is None else "lo")


def _windows(a: list[Row]) -> list[tuple]:
    """``win``: per group its rows numbered by v descending (NULLs last) then k, and the running sum of
    v over k (the rows tying on k included: Spark's default frame)."""
    out = []
    for g, rows in _by_group(a).items():
        ranked = sorted(rows, key=lambda r: (r["v"] is None, -(r["v"] or 0), r["k"]))
        for i, r in enumerate(ranked, 1):
            upto = _nonnull([x for x in rows if x["k"] <= r["k"]])
            out.append((r["k"], g, r["v"], i, sum(upto) if upto else None))
    return out


def expected(a: list[Row], b: list[Row]) -> dict[str, list[tuple]]:
    """Each view's rows computed from scratch over the current rows of ``a`` and ``b``."""
    joined = [(x["k"], x["v"], y["w"]) for x in a for y in b if x["k"] == y["k"]]
    by_w = _by_group([{"w": w, "v": v} for _, v, w in joined], lambda r: r["w"])
    return {
        "proj": [(r["k"], _case(r["v"]), None if r["v"] is None else r["v"] * 2) for r in a if r["v"] != 1],
        "uni": [(r["k"], r["g"]) for r in a if r["v"] is not None and r["v"] > 1] + [(r["k"], r["w"]) for r in b],
        "joined": joined,
        "grp": [(g, *_agg(rows), len(set(_nonnull(rows)))) for g, rows in _by_group(a).items()],
        "dist": list({(r["g"], r["v"]) for r in a}),
        "hav": [(g, _agg(rows)[0]) for g, rows in _by_group(a).items() if len(rows) >= 2],
        "jgrp": [(w, len(rows), _agg(rows)[0]) for w, rows in by_w.items()],
        "win": _windows(a),
        "exc": list({(r["k"], r["v"]) for r in a} - {(r["k"], 1) for r in b}),
    }


def _same(got: list[tuple], want: list[tuple]) -> bool:
    if len(got) != len(want):
        return False

    def key(row: tuple) -> tuple:
        return tuple((v is None, round(v, 6) if isinstance(v, float) else v) for v in row)

    for x, y in zip(sorted(got, key=key), sorted(want, key=key)):
        for p, q in zip(x, y):
            if isinstance(p, float) or isinstance(q, float):
                if p is None or q is None or not math.isclose(p, q, rel_tol=1e-9):
                    return False
            elif p != q:
                return False
    return True


def _check(p: cbp.Pipeline, a: list[Row], b: list[Row], step: int) -> None:
    for view, want in expected(a, b).items():
        cols = list(p.spec.flows[view].schema.fields)
        got = []
        for r in p.output(view, consolidated=True):
            assert r.get("_diff", 1) > 0, (view, r)
            got += [tuple(r.get(c) for c in cols)] * r.get("_diff", 1)
        assert _same(got, want), f"step {step}: view {view}:\n cbp  {Counter(got)}\n want {Counter(want)}"


# ------------------------------------------------------------------ change sequences
OPS = st.one_of(
    st.tuples(st.just("insert"), st.sampled_from(GROUPS), st.integers(0, 4), st.none() | st.integers(-2, 6)),
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("move"), st.integers(0, 10_000), st.sampled_from(GROUPS)),
    st.tuples(st.just("del_min"), st.sampled_from(GROUPS)),
    st.tuples(st.just("del_max"), st.sampled_from(GROUPS)),
    st.tuples(st.just("empty"), st.sampled_from(GROUPS)),
    st.tuples(st.just("fan"), st.integers(0, 4), st.integers(20, 200)),
    st.tuples(st.just("b_insert"), st.integers(0, 4), st.sampled_from(["w0", "w1"])),
    st.tuples(st.just("b_delete"), st.integers(0, 10_000)),
)
STEPS = st.lists(st.lists(OPS, min_size=1, max_size=6), min_size=1, max_size=2)


def _extreme(a: list[Row], g: str, pick: Callable[..., Any]) -> int | None:
    """The index of a row of group ``g`` holding its min or max ``v``, if any."""
    held = [(r["v"], i) for i, r in enumerate(a) if r["g"] == g and r["v"] is not None]
    return pick(held)[1] if held else None


def apply(op: tuple, a: list[Row], b: list[Row], fa: list[Row], fb: list[Row]) -> None:
    """Apply ``op`` to the model rows ``a``/``b``, appending the signed records it feeds to ``fa``/``fb``."""
    kind = op[0]
    gone: list[int] = []
    if kind == "insert":
        a.append({"k": op[2], "g": op[1], "v": op[3]})
        fa.append(a[-1])
    elif kind == "fan":  # one join key with many matches
        new = [{"k": op[1], "g": GROUPS[i % 3], "v": i % 7} for i in range(op[2])]
        a.extend(new)
        fa.extend(new)
    elif kind == "b_insert":
        b.append({"k": op[1], "w": op[2]})
        fb.append(b[-1])
    elif kind == "b_delete" and b:
        fb.append({**b.pop(op[1] % len(b)), "_diff": -1})
    elif kind in ("delete", "move") and a:
        gone = [op[1] % len(a)]
    elif kind in ("del_min", "del_max"):
        i = _extreme(a, op[1], min if kind == "del_min" else max)
        gone = [] if i is None else [i]
    elif kind == "empty":
        gone = [i for i, r in enumerate(a) if r["g"] == op[1]]
    for i in sorted(gone, reverse=True):
        old = a.pop(i)
        fa.append({**old, "_diff": -1})
        if kind == "move":  # the same row, in another group
            a.append({**old, "g": op[2]})
            fa.append(a[-1])


def _net(records: list[Row]) -> list[Row]:
    """Signed records summed per distinct row, zeros dropped (one feed may not hold +r and -r)."""
    net: Counter[tuple] = Counter()
    for r in records:
        net[tuple(sorted((k, v) for k, v in r.items() if k != "_diff"))] += r.get("_diff", 1)
    return [dict(row) | ({"_diff": d} if d != 1 else {}) for row, d in net.items() if d]


FAN = [("fan", 1, 2000), ("b_insert", 1, "w0"), ("b_insert", 1, "w1"), ("insert", "g1", 1, None)]


@settings(max_examples=2, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(steps=STEPS)
@example(steps=[FAN, [("b_delete", 0), ("del_max", "g1"), ("del_min", "g2"), ("empty", "g0"), ("move", 5, "g2")]])
def test_micro_views_equal_a_from_scratch_computation(spark, steps):
    a: list[Row] = []
    b: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="cbp-props-") as home:
        path = f"{home}/props.yaml"
        with open(path, "w") as fh:
            fh.write(_yaml())
        p = cbp.Pipeline(path, f"{home}/home", spark=spark)
        for step, ops in enumerate(steps):
            fa: list[Row] = []
            fb: list[Row] = []
            for op in ops:
                apply(op, a, b, fa, fb)
            for flow, records in (("a", _net(fa)), ("b", _net(fb))):
                if records:
                    p.feed(flow, records)
            p.run()
            _check(p, a, b, step)


def test_a_view_over_a_delta_source_without_schema_reads_the_tables_columns(tmp_path):
    """The flow's schema is the table's (dates and decimals included): the view's columns are typed from it."""
    import datetime
    import decimal

    import pyarrow as pa
    from deltalake import write_deltalake

    from cbp.spec import load_spec

    table = {"d": [datetime.date(2024, 1, 2)], "x": pa.array([decimal.Decimal("1.50")], pa.decimal128(15, 2))}
    write_deltalake(str(tmp_path / "t"), pa.table(table), configuration={"delta.enableChangeDataFeed": "true"})
    path = tmp_path / "p.yaml"
    path.write_text(
        "pipeline: v\nflows:\n  t: {external: true, source: {delta: t}}\n"
        "views:\n  s: SELECT d, sum(x) AS total FROM t GROUP BY d\n"
    )
    fields = load_spec(path).flows["s"].schema.fields
    assert [str(fields["d"]).rstrip("?"), str(fields["total"]).rstrip("?")] == ["date", "decimal(25,2)"]
