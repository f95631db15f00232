"""DISTINCT aggregates in SQL views (cbp/views/plan.py, run.py, select.py): ``sum(DISTINCT x)``,
``avg(DISTINCT x)`` (ints, doubles, decimals: Spark's result types), ``count(DISTINCT a, b)`` (the
distinct tuples with no NULL member), ``min``/``max(DISTINCT x)``, in ``HAVING``, without ``GROUP BY``
and over a join, and ``SELECT DISTINCT ... GROUP BY`` (with ``ORDER BY ... LIMIT``). The state is each
group's multiset of distinct values with their counts (DBSP's rule). After every epoch each view equals
Spark SQL over the inputs' consolidated contents (values and column types), through inserts, deletes,
a row moved between groups, the last copy of a distinct value deleted (and a copy of one that stays),
NULLs and a group emptied: a fixed sequence, and Hypothesis change sequences (the bulk path's first
build of them: tests/test_view_bulkbuild.py); ``cbp explain`` shows the user's column names; refusals by code."""

from __future__ import annotations

import decimal
import tempfile
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_sql_views import _net, check_typed_views, few_partitions  # noqa: F401 (few_partitions: a fixture)

import cbp
from cbp.commands.explain import explain
from cbp.errors import SpecError
from cbp.spec import load_spec

OS = {"k": "int", "g": "string", "v": "int?", "f": "float?", "d": "decimal(6,2)?"}
R = {"g": "string", "region": "string"}
INPUTS = {"o": OS, "r": R}
VIEWS = {
    "dis": "SELECT g, sum(DISTINCT v) AS sv, avg(DISTINCT v) AS av, sum(DISTINCT d) AS sd, avg(DISTINCT d) AS ad, "
    "sum(DISTINCT f) AS sf, count(DISTINCT v, d) AS c2, count(DISTINCT v) AS c1, max(DISTINCT v) AS mx "
    "FROM o GROUP BY g",
    "hav": "SELECT g, avg(DISTINCT f) AS af FROM o GROUP BY g HAVING count(DISTINCT v, g) >= 2 AND sum(DISTINCT d) > 1",
    "whole": "SELECT sum(DISTINCT v) AS sv, count(DISTINCT g, v) AS n, avg(DISTINCT d) AS ad FROM o",
    "dgrp": "SELECT DISTINCT g, count(*) AS n FROM o GROUP BY g, v",
    "dtop": "SELECT DISTINCT v % 2 AS odd, max(d) AS hi FROM o GROUP BY g, v % 2 "
    "ORDER BY hi DESC NULLS LAST, odd LIMIT 2",
    "jdis": "SELECT r.region, sum(DISTINCT o.v) AS sv, count(DISTINCT o.g, o.v) AS n FROM o JOIN r ON o.g = r.g "
    "GROUP BY r.region",
}


def _yaml(views: dict[str, str]) -> str:
    def schema(s: dict[str, str]) -> str:
        return "{" + ", ".join(f"{k}: {t!r}" for k, t in s.items()) + "}"

    flows = "".join(f"  {n}: {{external: true, schema: {schema(s)}}}\n" for n, s in INPUTS.items())
    body = "".join(f"  {n}: {sql!r}\n" for n, sql in views.items())
    return f"pipeline: distinct\nflows:\n{flows}views:\n{body}"


def _o(k: int, g: str, v: int | None, f: float | None, d: str | None) -> dict[str, Any]:
    return {"k": k, "g": g, "v": v, "f": f, "d": None if d is None else decimal.Decimal(d)}


def _gone(r: dict[str, Any]) -> dict[str, Any]:
    return {**r, "_diff": -1}


ROWS = [
    _o(1, "a", 1, 0.5, "1.25"),
    _o(2, "a", 1, -0.0, "1.25"),  # a second copy of v 1, d 1.25; -0.0 is 0.0's distinct value
    _o(3, "a", 2, 0.0, None),
    _o(4, "a", None, None, "9999.99"),
    _o(5, "b", 3, 1.5, "0.10"),
    _o(6, "b", 3, 1.5, "0.10"),
    _o(7, "b", -4, 2.25, "3.33"),
    _o(8, "c", 5, None, None),
]
STEPS = [  # (o, r) fed per epoch
    (ROWS, [{"g": "a", "region": "x"}, {"g": "b", "region": "x"}, {"g": "c", "region": "y"}]),
    # one copy of a's v 1 goes (the other stays: its distinct values unchanged), b's last -4 goes, row 8
    # moves from c to a (c emptied), a new distinct value in b
    ([_gone(ROWS[0]), _gone(ROWS[6]), _gone(ROWS[7]), {**ROWS[7], "g": "a"}, _o(9, "b", 7, 7.0, "0.11")], []),
    # the last copy of a's v 1 goes; b's rows all go (b emptied); a's region row goes
    (
        [_gone(ROWS[1]), _gone(ROWS[4]), _gone(ROWS[5]), _gone(_o(9, "b", 7, 7.0, "0.11"))],
        [_gone({"g": "a", "region": "x"})],
    ),
]


@pytest.mark.usefixtures("few_partitions")
def test_distinct_aggregates_equal_spark_sql_after_every_epoch(spark, tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(_yaml(VIEWS))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    try:
        for step, (o, r) in enumerate(STEPS):
            for flow, recs in (("o", o), ("r", r)):
                if recs:
                    p.feed(flow, recs)
            p.run()
            check_typed_views(spark, p, VIEWS, INPUTS)
            if step == 2:  # b emptied: its group's state is gone too
                assert not [s for s in p.state("dis") if s["k"] == '["b"]']
    finally:
        for name in [*VIEWS, *INPUTS]:
            spark.catalog.dropTempView(name)


# ------------------------------------------------------------------ change sequences (Hypothesis)
GROUPS = ["a", "b", "c"]
PROPS = {v: VIEWS[v] for v in ("dis", "dgrp")}
OPS = st.one_of(
    st.tuples(
        st.just("insert"),
        st.sampled_from(GROUPS),
        st.none() | st.integers(-1, 3),
        st.sampled_from([None, "0.50", "2.00"]),
    ),
    st.tuples(st.just("delete"), st.integers(0, 10_000)),
    st.tuples(st.just("move"), st.integers(0, 10_000), st.sampled_from(GROUPS)),
    st.tuples(st.just("del_value"), st.sampled_from(GROUPS), st.integers(-1, 3)),
    st.tuples(st.just("empty"), st.sampled_from(GROUPS)),
)


def _apply(op: tuple, rows: list[dict[str, Any]], fed: list[dict[str, Any]]) -> None:
    """Apply ``op`` to the model ``rows``, appending the signed records it feeds to ``fed``: ``del_value``
    deletes every copy of a value in a group (its last copy goes), ``empty`` every row of a group."""
    kind, gone = op[0], []
    if kind == "insert":
        v = op[2]
        rows.append(_o(len(fed), op[1], v, None if v is None else v / 2, op[3]))
        fed.append(rows[-1])
    elif kind in ("delete", "move") and rows:
        gone = [op[1] % len(rows)]
    elif kind == "del_value":
        gone = [i for i, r in enumerate(rows) if r["g"] == op[1] and r["v"] == op[2]]
    elif kind == "empty":
        gone = [i for i, r in enumerate(rows) if r["g"] == op[1]]
    for i in sorted(gone, reverse=True):
        old = rows.pop(i)
        fed.append(_gone(old))
        if kind == "move":
            rows.append({**old, "g": op[2]})
            fed.append(rows[-1])


FILL = [("insert", g, v, d) for g in GROUPS for v, d in ((1, "0.50"), (1, "0.50"), (2, None), (None, "2.00"))]


@pytest.mark.usefixtures("few_partitions")
@settings(max_examples=1, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(st.lists(OPS, min_size=1, max_size=6), min_size=1, max_size=2))
@example(steps=[FILL, [("delete", 0), ("del_value", "a", 1), ("move", 3, "c"), ("empty", "b")]])
def test_distinct_aggregates_through_change_sequences_equal_spark_sql(spark, steps):
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="cbp-distinct-") as home:
        path = f"{home}/d.yaml"
        with open(path, "w") as fh:
            fh.write(_yaml(PROPS))
        p = cbp.Pipeline(path, f"{home}/home", spark=spark)
        try:
            for ops in steps:
                fed: list[dict[str, Any]] = []
                for op in ops:
                    _apply(op, rows, fed)
                recs = _net(fed)
                if recs:
                    p.feed("o", recs)
                p.run()
                check_typed_views(spark, p, PROPS, {"o": OS})
        finally:
            for name in [*PROPS, "o"]:
                spark.catalog.dropTempView(name)


def test_explain_shows_the_multisets_and_the_users_column_names(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(_yaml(VIEWS))
    stages = {s["stage"]: s for s in explain(str(path), "jdis")["stages"]}
    group = stages["jdis"]
    assert group["operator"] == "GROUP BY (`region`) with sum(DISTINCT `v`), count(DISTINCT `g`, `v`)", group
    assert "sum(DISTINCT `v`): the count of non-NULL values (c0) and their multiset (m0)" in group["state"]["holds"]
    assert "count(DISTINCT `g`, `v`): the multiset of values (m1): the distinct tuples" in group["state"]["holds"]
    assert [s["stage"] for s in explain(str(path), "dgrp")["stages"]] == ["dgrp__from1", "dgrp"]
    assert explain(str(path), "dgrp")["stages"][1]["operator"] == "DISTINCT (`g`, `n`)"


REFUSED = [
    ("SELECT g, sum(DISTINCT v, k) AS s FROM o GROUP BY g", "view-unsupported", "column 11: SUM(DISTINCT of several"),
    ("SELECT g, count(DISTINCT v) OVER (PARTITION BY g) AS s FROM o", "view-unsupported", "DISTINCT"),
    ("SELECT DISTINCT g, count(*) FROM o GROUP BY g", "view-unsupported", "name it with AS"),
]


@pytest.mark.parametrize("sql,code,says", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_what_spark_refuses_too_is_refused_at_load(tmp_path, sql, code, says):
    path = tmp_path / "d.yaml"
    path.write_text(_yaml({"v": sql}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == code and says in str(e.value), str(e.value)
