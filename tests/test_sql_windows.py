"""Window functions with PARTITION BY, top-k per group (a view over a window view) and ORDER BY ...
LIMIT (cbp/views/windows.py, winrun.py): after every epoch each view's consolidated contents equal
Spark SQL's result over its inputs' consolidated contents (multiset equality), through inserts, the
top row of a partition deleted, a row moved between partitions, a partition emptied and ties added;
ORDER BY total wherever row_number() or LIMIT could pick among ties. And each refusal's code."""

from __future__ import annotations

import datetime
import decimal
import textwrap

import pytest
from test_sql_views import _expand, _same, _table, few_partitions  # noqa: F401 (few_partitions: a fixture)

import cbp
from cbp.errors import SpecError
from cbp.spec import load_spec

ORDERS = {"id": "int", "cust": "string", "amount": "float", "qty": "int?", "price": "decimal(10,2)", "day": "date"}
CUSTS = {"cust": "string", "region": "string"}
VIEWS = {  # few views: an epoch's cost grows with the stages
    "ranked": "SELECT id, cust, amount, row_number() OVER (PARTITION BY cust ORDER BY amount DESC, id) AS rn, "
    "rank() OVER (PARTITION BY cust ORDER BY qty DESC) AS rk, "
    "dense_rank() OVER (PARTITION BY cust ORDER BY qty NULLS LAST) * 10 + 1 AS dr, "
    "count(*) OVER (PARTITION BY cust) AS n, sum(qty) OVER (PARTITION BY cust ORDER BY id) AS run, "
    "avg(amount) OVER (PARTITION BY cust ORDER BY qty) AS peers, min(amount) OVER (PARTITION BY cust) AS lo, "
    "max(qty) OVER (PARTITION BY cust ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS hi, "
    "count(qty) OVER (PARTITION BY cust ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS nq, "
    "lag(amount) OVER (PARTITION BY cust ORDER BY id) AS prev, lead(qty, 2, -1) OVER (PARTITION BY cust ORDER BY id) "
    "AS nxt, sum(price) OVER (PARTITION BY cust ORDER BY day) AS sp, avg(price) OVER (PARTITION BY cust) AS ap, "
    "max(day) OVER (PARTITION BY cust ORDER BY amount) AS md, rank() OVER (PARTITION BY cust ORDER BY day DESC) AS rd, "
    "ntile(3) OVER (PARTITION BY cust ORDER BY amount, id) AS nt, percent_rank() OVER (PARTITION BY cust ORDER BY "
    "qty) AS pr, cume_dist() OVER (PARTITION BY cust ORDER BY qty) AS cd, first_value(amount) OVER (PARTITION BY "
    "cust ORDER BY id) AS fv, last_value(qty) OVER (PARTITION BY cust ORDER BY amount, id ROWS BETWEEN UNBOUNDED "
    "PRECEDING AND UNBOUNDED FOLLOWING) AS lv, last_value(id) OVER (PARTITION BY cust ORDER BY day, id) AS lp "
    "FROM orders WHERE id >= 0",
    "top2": "SELECT cust, id, amount FROM (SELECT cust, id, amount, row_number() OVER (PARTITION BY cust "
    "ORDER BY amount DESC, id) AS rn FROM orders) AS r WHERE rn <= 2",  # top-k per group in one query
    "by_region": "SELECT o.id, c.region, row_number() OVER (PARTITION BY c.region ORDER BY o.amount DESC, o.id) AS rn "
    "FROM orders o JOIN custs c ON o.cust = c.cust",
    "top_all": "SELECT id, cust, amount FROM orders ORDER BY amount DESC, id LIMIT 3",
    "top_cust": "SELECT cust, sum(amount) AS total, count(*) AS n FROM orders GROUP BY cust "
    "ORDER BY total DESC, cust LIMIT 2 OFFSET 1",  # the 2nd and 3rd customers by total
}


def _yaml(views: dict[str, str]) -> str:
    flows = "\n".join(
        f"  {n}: {{external: true, schema: {{{', '.join(f'{k}: {t!r}' for k, t in s.items())}}}}}"
        for n, s in (("orders", ORDERS), ("custs", CUSTS))
    )
    body = "\n".join(f"  {n}: |\n{textwrap.indent(sql, '    ')}" for n, sql in views.items())
    return f"pipeline: windows\nflows:\n{flows}\nviews:\n{body}\n"


def _key(row: tuple) -> tuple:
    return tuple((v is None, round(v, 6) if isinstance(v, float) else v) for v in row)


def _check(spark, p, views: dict[str, str] = VIEWS) -> None:
    _table(spark, "orders", ORDERS, _expand(p.output("orders", consolidated=True)))
    _table(spark, "custs", CUSTS, _expand(p.output("custs", consolidated=True)))
    for view, sql in views.items():
        df = spark.sql(sql)
        df.createOrReplaceTempView(view)  # a view over this view reads Spark's own result
        cols = list(p.spec.flows[view].schema.fields)
        want = [tuple(row) for row in df.collect()]
        got = [tuple(r.get(c) for c in cols) for r in _expand(p.output(view, consolidated=True))]
        assert _same(got, want), f"view {view}:\n cbp   {sorted(got, key=_key)}\n spark {sorted(want, key=_key)}"


def _row(i: int, cust: str, amount: float, qty: int | None) -> dict:
    price = decimal.Decimal(i * 37 % 50) / 4
    day = datetime.date(2024, 1, 1) + datetime.timedelta(days=i % 6)
    return {
        "id": i,
        "cust": cust,
        "amount": amount,
        "qty": qty,
        "price": price.quantize(decimal.Decimal("0.01")),
        "day": day,
    }


def _gone(r: dict) -> dict:
    return {**r, "_diff": -1}


FIRST = [_row(i, f"c{i % 4}", 10.0 + (i * 7) % 13, [None, 1, 2, 2, 3][i % 5]) for i in range(16)]
EPOCHS = [  # (orders fed, custs fed)
    (FIRST, [{"cust": f"c{i}", "region": f"r{i % 2}"} for i in range(4)]),
    ([_gone(FIRST[12]), _row(20, "c0", 5.5, 4)], []),  # c0's top row (16.0) deleted; a row at the bottom
    (
        [_gone(FIRST[5]), {**FIRST[5], "cust": "c2"}, _row(21, "c1", 30.0, None)],
        [_gone({"cust": "c1", "region": "r1"})],
    ),
    (  # partition c3 emptied (its 22.0 and 20.0 leave top_all); ties in amount and qty
        [_gone(r) for r in FIRST if r["cust"] == "c3"] + [_row(22, "c2", 14.0, 2), _row(23, "c2", 14.0, 2)],
        [{"cust": "c1", "region": "r0"}],
    ),
]


@pytest.mark.usefixtures("few_partitions")
def test_window_and_top_k_views_equal_spark_sql_after_every_epoch(spark, tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(_yaml(VIEWS))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    try:
        for step, (o_inc, c_inc) in enumerate(EPOCHS):
            p.feed("orders", o_inc)
            if c_inc:
                p.feed("custs", c_inc)
            p.run()
            _check(spark, p)
            if step == 3:  # partition c3 emptied: gone from the window's view and its state
                assert not [r for r in p.output("ranked", consolidated=True) if r["cust"] == "c3"]
                assert not [r for r in p.state("ranked") if '"c3"' in r["r"]]
        top = sorted(r["amount"] for r in _expand(p.output("top_all", consolidated=True)))
        assert top == [19.0, 21.0, 30.0]  # the top rows' deletes brought the next ones in
    finally:
        for name in [*VIEWS, "orders", "custs"]:
            spark.catalog.dropTempView(name)


class _Out:
    """A window translator's ``out``: its plan, a state that takes writes, the records it writes."""

    def __init__(self, params: dict) -> None:
        self.params, self.written = params, []
        self.state = type("S", (), {"write": staticmethod(lambda r: None), "delete": staticmethod(lambda k: None)})
        self.ranked = type("W", (), {"write": staticmethod(self.written.append)})


def _one_partition(params: dict, amounts: list[float], added: float) -> list[tuple]:
    """The records a window stage writes when partition ``["a"]`` holding ``amounts`` gets one more row."""
    from cbp.views.vtypes import key_text
    from cbp.views.winrun import window

    out = _Out(params)
    rows = [_row(i, "a", a, 1) for i, a in enumerate(amounts)]
    fields = params["cbp_view"]["fields"]  # the fields the view reads (a partition's rows keep no other)
    state = iter([{"r": key_text([r[f] for f in fields]), "n": 1} for r in rows])
    window('["a"]', state, [_row(len(rows), "a", added, 1) | {"_diff": 1}], out=out)
    return sorted((r["id"], r["rn"], r["_diff"]) for r in out.written)


RANKED = {"ranked": "SELECT id, row_number() OVER (PARTITION BY cust ORDER BY amount DESC) AS rn FROM orders"}


def test_an_epoch_emits_only_the_rows_that_changed(tmp_path):
    """Inserting a partition's new last row emits that row only; the rows above it are not rewritten."""
    params = load_spec(_write(tmp_path, RANKED)).stages["ranked"].params
    assert _one_partition(params, [5.0, 4.0], 1.0) == [(2, 3, 1)]
    assert _one_partition(params, [5.0, 4.0], 4.5) == [(1, 2, -1), (1, 3, 1), (2, 2, 1)]


def test_a_window_stage_keeps_only_the_rows_of_a_rank_filter():
    """keep_only (for a derived table's top-k): a row pushed below rank 2 is retracted, the rows below
    it are not written at all."""
    from cbp.views.exprs import parse_expr
    from cbp.views.plan import Generated
    from cbp.views.windows import keep_only

    gen = Generated()
    gen.add_view("ranked", RANKED["ranked"], {"orders": {k: t.rstrip("?") for k, t in ORDERS.items()}})
    keep_only(gen, "ranked", parse_expr("rn <= 2"))
    params = gen.stages["ranked"]["params"]
    assert _one_partition(params, [5.0, 4.0, 3.0, 2.0], 6.0) == [(0, 1, -1), (0, 2, 1), (1, 2, -1), (4, 1, 1)]
    with pytest.raises(Exception) as e:
        keep_only(gen, "ranked", parse_expr("rn + 1"))
    assert getattr(e.value, "code", None) == "view-unsupported"


def _write(tmp_path, views: dict[str, str]):
    path = tmp_path / "v.yaml"
    path.write_text(_yaml(views))
    return path


REFUSED = [
    ("SELECT id, row_number() OVER (ORDER BY id) AS r FROM orders", "view-unsupported", "without PARTITION BY"),
    (
        "SELECT id,\n  sum(qty) OVER (PARTITION BY cust ORDER BY id RANGE BETWEEN 2 FOLLOWING AND 1 FOLLOWING) AS s "
        "FROM orders",
        "view-unsupported",
        "SQL line 2, column 3: the window frame",
    ),
    ("SELECT id, ntile(0) OVER (PARTITION BY cust ORDER BY id) AS t FROM orders", "view-unsupported", "buckets"),
    (
        "SELECT id, percentile(id, 0.5) OVER (PARTITION BY cust ORDER BY id) AS t FROM orders",
        "view-unsupported",
        "as a window function",
    ),
    ("SELECT id, row_number() OVER (PARTITION BY cust) AS r FROM orders", "view-unsupported", "without ORDER BY"),
    ("SELECT id, count(DISTINCT qty) OVER (PARTITION BY cust) AS r FROM orders", "view-unsupported", "DISTINCT"),
    (  # (windows over a GROUP BY, and of several PARTITION BYs, compile: test_windows_over_groups_...)
        "SELECT *, rank() OVER (PARTITION BY cust ORDER BY id) AS a, rank() OVER (PARTITION BY qty ORDER BY id) AS b "
        "FROM orders",
        "view-unsupported",
        "different PARTITION BY",
    ),
    (
        "SELECT id FROM orders WHERE row_number() OVER (PARTITION BY cust ORDER BY id) = 1",
        "view-unsupported",
        "outside the SELECT list",
    ),
    ("SELECT id FROM orders\nLIMIT 3", "view-unsupported", "SQL line 2, column 1: LIMIT without ORDER BY"),
    ("SELECT id FROM orders ORDER BY id\nOFFSET 1", "view-unsupported", "SQL line 2, column 1: OFFSET without LIMIT"),
    ("SELECT id FROM orders ORDER BY amount LIMIT 3", "view-unknown", "ORDER BY column 'amount'"),
]  # (a window in a set operation's branch compiles: tests/test_sql_setops.py's view 'branches')


#: Windows over a GROUP BY (an aggregate in the window's ORDER BY and argument, HAVING, ORDER BY ... LIMIT), windows
#: of three PARTITION BYs in one SELECT, and SELECT DISTINCT over a window: derived tables (cbp/views/winsplit.py).
APART = {
    "grp_rank": "SELECT cust, qty, count(*) AS n, sum(amount) AS s, rank() OVER (PARTITION BY cust ORDER BY "
    "sum(amount) DESC) AS rk, sum(count(*)) OVER (PARTITION BY cust) AS cn FROM orders WHERE id >= 0 "
    "GROUP BY cust, qty HAVING count(*) >= 1",
    "grp_top": "SELECT cust, sum(amount) AS s, dense_rank() OVER (PARTITION BY cust ORDER BY cust) AS d FROM orders "
    "GROUP BY cust ORDER BY s DESC, cust LIMIT 2",
    "parts": "SELECT id, cust, rank() OVER (PARTITION BY cust ORDER BY amount DESC, id) AS rc, dense_rank() OVER "
    "(PARTITION BY qty ORDER BY amount) AS rq, sum(amount) OVER (PARTITION BY day) AS sd, "
    "count(*) OVER (PARTITION BY cust) AS nc FROM orders",
    "dist_win": "SELECT DISTINCT cust, max(amount) OVER (PARTITION BY cust) AS m FROM orders",
}


@pytest.mark.usefixtures("few_partitions")
def test_windows_over_groups_and_several_partitionings_equal_spark_sql(spark, tmp_path):
    """Each view of :data:`APART` equals Spark SQL after every epoch of :data:`EPOCHS`; ``cbp explain`` shows
    the derived tables' stages (one window stage per PARTITION BY)."""
    from cbp.commands.explain import explain

    path = tmp_path / "apart.yaml"
    path.write_text(_yaml(APART))
    stages = {v: [s["stage"] for s in explain(str(path), v)["stages"]] for v in APART}
    assert stages["grp_rank"] == ["grp_rank__from1", "grp_rank"]
    assert stages["parts"] == ["parts__from1__from1", "parts__from1", "parts"]
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    try:
        for o_inc, c_inc in EPOCHS:
            p.feed("orders", o_inc)
            if c_inc:
                p.feed("custs", c_inc)
            p.run()
            _check(spark, p, APART)
    finally:
        for name in [*APART, "orders", "custs"]:
            spark.catalog.dropTempView(name)


@pytest.mark.parametrize("sql,code,says", REFUSED, ids=[f"{c}-{i}" for i, (_, c, _) in enumerate(REFUSED)])
def test_a_window_or_limit_cbp_cannot_compile_is_refused_at_load(tmp_path, sql, code, says):
    with pytest.raises(SpecError) as e:
        load_spec(_write(tmp_path, {"v": sql}))
    assert e.value.code == code
    assert says in str(e.value)


def test_window_and_top_k_stages_are_keyed_and_typed(tmp_path):
    spec = load_spec(_write(tmp_path, VIEWS))
    ranked = spec.stages["ranked"]
    assert ranked.signed and ranked.inputs[0].route_by({"id": 1, "cust": "a", "amount": 1.0, "qty": 1}) == '["a"]'
    assert ranked.inputs[0].route_by({"id": -1, "cust": "a", "amount": 1.0, "qty": 1}) == "-"  # WHERE id >= 0
    assert list(ranked.state_schema.fields) == ["r", "n"]
    fields = {k: str(t) for k, t in spec.flows["ranked"].schema.fields.items() if k not in ("id", "cust", "amount")}
    assert fields == {
        k: f"{t}?"
        for k, t in [
            ("rn", "int"),
            ("rk", "int"),
            ("dr", "int"),
            ("n", "int"),
            ("run", "int"),
            ("peers", "float"),
            ("lo", "float"),
            ("hi", "int"),
            ("nq", "int"),
            ("prev", "float"),
            ("nxt", "int"),
            ("sp", "decimal(20,2)"),
            ("ap", "decimal(14,6)"),
            ("md", "date"),
            ("rd", "int"),
            ("nt", "int"),
            ("pr", "float"),
            ("cd", "float"),
            ("fv", "float"),
            ("lv", "int"),
            ("lp", "int"),
        ]
    }
    assert [n for n in spec.stages if n.startswith("top_cust")] == ["top_cust__sort", "top_cust"]
    assert spec.stages["top_cust"].inputs[0].route_by({"cust": "a", "total": 1.0, "n": 1}) == "[]"
    from cbp.commands.explain import explain

    shown = explain(str(_write(tmp_path, VIEWS)), "top_cust")["stages"]
    assert [s["stage"] for s in shown] == ["top_cust__sort", "top_cust"]
    assert shown[1]["operator"].startswith("rows 2 to 3 ORDER BY `total` DESC, `cust`")
    assert "the whole view's rows" in shown[1]["state"]["holds"]
    shown = explain(str(_write(tmp_path, VIEWS)), "by_region")["stages"]
    assert [s["operator"] for s in shown][1:] == ["window functions row_number() OVER (PARTITION BY `region`)"]
    ignored = load_spec(_write(tmp_path, {"v": "SELECT id FROM orders ORDER BY id"}))  # ORDER BY without LIMIT
    assert [n for n in ignored.stages] == ["v"] and ignored.stages["v"].translator_path == "cbp.views.run:linear"


@pytest.mark.usefixtures("few_partitions")
def test_window_and_top_k_views_changed_under_a_home_that_ran(spark, tmp_path):
    """A changed window view and a changed LIMIT are rebuilt by ``upgrade`` from their inputs' contents."""
    before = {"ranked": VIEWS["ranked"], "top_all": VIEWS["top_all"]}
    after = {
        "ranked": "SELECT id, cust, rank() OVER (PARTITION BY cust ORDER BY amount, id) AS rn FROM orders",
        "top_all": "SELECT id, cust, amount FROM orders ORDER BY amount, id LIMIT 4",
    }
    path = _write(tmp_path, before)
    home = str(tmp_path / "home")
    p = cbp.Pipeline(str(path), home, spark=spark)
    try:
        for o_inc, _ in EPOCHS[:2]:
            p.feed("orders", o_inc)
            p.run()
        p.feed("orders", EPOCHS[2][0])  # pending when the YAML changes
        path.write_text(_yaml(after))
        p = cbp.Pipeline(str(path), home, spark=spark)
        kinds = {c.name: c.kind for c in p.plan().changes if c.name}
        assert kinds["ranked"] == "rebuild-view" and kinds["top_all"] == "rebuild-view"
        p.upgrade()
        p.run()
        _check(spark, p, after)
    finally:
        for name in [*after, "orders", "custs"]:
            spark.catalog.dropTempView(name)
