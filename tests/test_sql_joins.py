"""SQL views' joins (cbp/views/joins.py, cbp/views/joinrun.py): n-way inner equi-joins (JOIN ... ON and
comma joins), LEFT/RIGHT/FULL OUTER joins, semi and anti joins ([NOT] EXISTS, IN (SELECT ...), LEFT
SEMI/ANTI JOIN). After every epoch each view's consolidated contents equal Spark SQL's result over the
inputs' consolidated contents (multiset equality), through inserts, deletes, a key whose matches go to
zero and come back, NULL join keys, and a join key with many matches; each refusal by its code and
place; ``cbp explain`` shows the chain's stages."""

from __future__ import annotations

import random
import textwrap

import pytest
from test_sql_views import _net, check_views, few_partitions  # noqa: F401 (few_partitions: a fixture)

import cbp
from cbp.commands.explain import explain
from cbp.errors import SpecError
from cbp.spec import load_spec
from cbp.views.plan import Generated

ORDERS = {"id": "int", "cust": "string?", "amount": "float", "qty": "int?"}
CUSTS = {"cust": "string?", "region": "string?"}
REGIONS = {"region": "string", "zone": "string", "lim": "float"}
INPUTS = {"orders": ORDERS, "custs": CUSTS, "regions": REGIONS}
VIEWS = {
    "n3": "SELECT o.id, c.region, r.zone, o.qty FROM orders o, regions r, custs c "
    "WHERE c.region = r.region AND o.cust = c.cust AND o.amount > r.lim",
    "lj_match": "SELECT o.id, c.region FROM orders o LEFT OUTER JOIN custs c ON o.cust = c.cust "
    "AND c.region <> 'r1' AND o.amount > 1 WHERE o.id % 3 <> 0",
    "rj": "SELECT c.cust, c.region, o.id FROM orders o RIGHT JOIN custs c ON o.cust = c.cust",
    "pushed": "SELECT o.id, c.region FROM orders o JOIN custs c ON o.cust = c.cust AND c.region <> 'r0' "
    "WHERE o.amount > 1 AND o.qty IS NOT NULL",
    "or_pushed": "SELECT o.id, c.region FROM orders o JOIN custs c ON o.cust = c.cust "
    "WHERE (o.amount > 2 AND c.region = 'r0') OR (o.qty > 1 AND o.amount < 1 AND c.region <> 'r0')",
    "lj_where": "SELECT o.id, c.region FROM orders o LEFT JOIN custs c ON o.cust = c.cust "
    "WHERE coalesce(c.region, 'none') <> 'r1' AND o.amount > 1",
    "rj_where": "SELECT c.cust, o.id FROM orders o RIGHT JOIN custs c ON o.cust = c.cust "
    "WHERE o.id IS NULL OR o.amount > 2",
    "fj": "SELECT o.id, c.cust, c.region FROM orders o FULL OUTER JOIN custs c ON o.cust = c.cust AND o.amount > 2",
    "lj_count": "SELECT c.region, count(o.id) AS n, count(*) AS rows FROM custs c "
    "LEFT JOIN orders o ON c.cust = o.cust GROUP BY c.region",
    "semi_in": "SELECT id, cust FROM orders WHERE cust IN (SELECT cust FROM custs WHERE region <> 'r2') "
    "AND amount > 0.5",
    "not_exists": "SELECT o.id FROM orders o WHERE NOT EXISTS (SELECT * FROM custs c "
    "WHERE c.cust = o.cust AND c.region < concat('r', o.qty))",
    "semi_of_join": "SELECT o.id, c.region FROM orders o JOIN custs c ON o.cust = c.cust "
    "WHERE EXISTS (SELECT * FROM regions r WHERE r.region = c.region AND r.zone = 'z0')",
    "anti_syntax": "SELECT o.id, o.cust FROM orders o LEFT ANTI JOIN custs c ON o.cust = c.cust",
    "not_in": "SELECT id, qty FROM orders WHERE cust IS NOT NULL AND cust NOT IN "
    "(SELECT cust FROM custs WHERE cust IS NOT NULL AND region <> 'r0')",
}


def _yaml(views: dict[str, str]) -> str:
    flows = "\n".join(
        f"  {n}: {{external: true, schema: {{{', '.join(f'{k}: {t!r}' for k, t in s.items())}}}}}"
        for n, s in INPUTS.items()
    )
    body = "\n".join(f"  {n}: |\n{textwrap.indent(sql, '    ')}" for n, sql in views.items())
    return f"pipeline: joins\nflows:\n{flows}\nviews:\n{body}\n"


def _steps() -> list[dict[str, list[dict]]]:
    """Per epoch, the records fed: c0 has most orders and two customer rows (a key with many
    matches; one goes in epoch 2); c1's only customer row goes in epoch 1 and comes back in epoch 2
    (matches to zero and back); every order of c2 goes in epoch 2; a region goes and comes back;
    NULL customers on both sides; orders inserted, deleted and moved between customers."""
    rng = random.Random(7)
    orders: dict[int, dict] = {}

    def order(i: int, cust: str | None) -> dict:
        orders[i] = {"id": i, "cust": cust, "amount": rng.randint(0, 16) / 4, "qty": rng.choice([None, 1, 2, 3])}
        return orders[i]

    custs0 = [("c0", "r0"), ("c0", "r1"), ("c1", "r1"), ("c2", "r2"), (None, "r0"), ("c5", None), ("c6", "r0")]
    first = [order(i, "c0") for i in range(120)]
    first += [order(i, rng.choice(["c1", "c2", "c3", "c4", None])) for i in range(120, 160)]
    steps = [
        {
            "orders": first,
            "custs": [{"cust": c, "region": r} for c, r in custs0],
            "regions": [{"region": f"r{i}", "zone": f"z{i % 2}", "lim": i * 0.5} for i in range(3)],
        }
    ]
    for step in range(1, 3):
        recs = []
        for oid in rng.sample(sorted(orders), 12):  # deletes, and moves to another customer
            old = orders.pop(oid)
            recs.append({**old, "_diff": -1})
            if rng.random() < 0.5:
                recs.append(order(oid, rng.choice(["c0", "c1", "c3", None])))
        recs += [order(1000 * step + i, rng.choice(["c0", "c1", "c2", "c6"])) for i in range(8)]
        if step == 2:  # every order of c2 deleted: the RIGHT JOIN's padded c2 row appears
            recs += [{**orders.pop(i), "_diff": -1} for i in [i for i, r in orders.items() if r["cust"] == "c2"]]
        steps.append({"orders": _net(recs)})
    steps[1]["custs"] = [{"cust": "c1", "region": "r1", "_diff": -1}, {"cust": "c3", "region": "r2"}]
    steps[1]["regions"] = [{"region": "r2", "zone": "z0", "lim": 1.0, "_diff": -1}]
    steps[2]["custs"] = [{"cust": "c1", "region": "r1"}, {"cust": "c6", "region": "r0", "_diff": -1}]
    steps[2]["custs"] += [{"cust": "c0", "region": "r1", "_diff": -1}, {"cust": "c4", "region": "r1"}]
    steps[2]["regions"] = [{"region": "r2", "zone": "z0", "lim": 1.0}]
    return steps


@pytest.mark.usefixtures("few_partitions")
def test_join_views_equal_spark_sql_after_every_epoch(spark, tmp_path):
    path = tmp_path / "joins.yaml"
    path.write_text(_yaml(VIEWS))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    try:
        for step in _steps():
            for flow, recs in step.items():
                p.feed(flow, recs)
            p.run()
            check_views(spark, p, VIEWS, INPUTS)
        assert [r for r in p.output("rj", consolidated=True) if r["cust"] is None and r["id"] is None]  # NULL key
        ex = explain(str(path), "n3", str(tmp_path / "home"))
        assert [s["stage"] for s in ex["stages"]] == ["n3__j1", "n3"]
        assert ex["stages"][1]["inputs"][0]["flow"] == "n3__j1" and ex["stages"][1]["state"]["rows"]
        match = explain(str(path), "lj_match")["stages"][0]
        assert match["operator"].startswith("LEFT OUTER equi-join ON (`cust`) = (`cust`) AND")
        assert "m" in match["state"]["schema"] and "(m)" in match["state"]["holds"]
        assert explain(str(path), "semi_of_join")["stages"][1]["operator"].startswith("semi-join")
    finally:
        for name in [*VIEWS, *INPUTS]:
            spark.catalog.dropTempView(name)


def test_join_chain_stages_keys_and_routes(tmp_path):
    """A 3-way comma join is ordered by its equalities; a LEFT JOIN keeps NULL keys of its left side
    (routed, not dropped); a subquery's own condition filters its input before the join."""
    path = tmp_path / "v.yaml"
    path.write_text(_yaml(VIEWS))
    spec = load_spec(path)
    comma = [spec.stages[s] for s in ("n3__j1", "n3")]
    assert [s.input_flows for s in comma] == [["orders", "custs"], ["n3__j1", "regions"]]
    assert all(s.signed and s.runnable_name == "any" for s in comma)
    lj = spec.stages["lj_match"]
    assert lj.inputs[0].route_by({"id": 1, "cust": None, "amount": 1.0, "qty": None}) == "[null]"
    assert lj.inputs[1].route_by({"cust": None, "region": "r0"}) == "-"
    semi = spec.stages["semi_in"]
    assert semi.inputs[1].route_by({"cust": "c2", "region": "r2"}) == "-"
    assert semi.inputs[1].route_by({"cust": "c2", "region": "r0"}) == '["c2"]'
    assert spec.stages["lj_count"].input_flows == ["lj_count__join"]
    pushed = spec.stages["pushed"]  # WHERE and ON conditions on one side filter its input before the join
    assert pushed.inputs[0].route_by({"id": 1, "cust": "c1", "amount": 0.5, "qty": 1}) == "-"
    assert pushed.inputs[0].route_by({"id": 1, "cust": "c1", "amount": 2.0, "qty": None}) == "-"
    assert pushed.inputs[0].route_by({"id": 1, "cust": "c1", "amount": 2.0, "qty": 1}) == '["c1"]'
    assert pushed.inputs[1].route_by({"cust": "c1", "region": "r0"}) == "-"
    orp = spec.stages["or_pushed"]  # an OR of branches: each side filtered by the OR of its own conditions (Q19)
    assert orp.inputs[0].route_by({"id": 1, "cust": "c1", "amount": 1.5, "qty": 2}) == "-"
    assert orp.inputs[0].route_by({"id": 1, "cust": "c1", "amount": 0.5, "qty": None}) == "-"
    assert orp.inputs[0].route_by({"id": 1, "cust": "c1", "amount": 0.5, "qty": 2}) == '["c1"]'
    assert orp.inputs[1].route_by({"cust": "c1", "region": None}) == "-"
    lw = spec.stages["lj_where"]  # the preserved side's condition is pushed, the NULL-padded side's is not
    assert lw.inputs[0].route_by({"id": 1, "cust": "c1", "amount": 0.5, "qty": 1}) == "-"
    assert lw.inputs[1].route_by({"cust": "c1", "region": "r1"}) == '["c1"]'
    assert spec.stages["rj_where"].inputs[0].route_by({"id": 1, "cust": "c1", "amount": 0.5, "qty": 1}) == '["c1"]'
    g = Generated()  # JOIN ... ON ... JOIN ... ON, grouped: two join steps, then the group
    g.add_view(
        "z",
        "SELECT r.zone, count(*) AS n FROM orders o JOIN custs c ON o.cust = c.cust "
        "JOIN regions r ON c.region = r.region GROUP BY r.zone",
        {f: {k: t.rstrip("?") for k, t in fs.items()} for f, fs in INPUTS.items()},
    )
    assert [[i["flow"] for i in g.stages[s]["inputs"]] for s in ("z__j1", "z__join", "z")] == [
        ["orders", "custs"],
        ["z__j1", "regions"],
        ["z__join"],
    ]


REFUSED = [
    (
        "SELECT o.id FROM orders o JOIN custs c ON o.cust = c.cust\n  JOIN regions r ON r.zone > c.region",
        "SQL line 2, column 8: a join without an equality",
    ),
    ("SELECT o.id FROM orders o, custs c, regions r WHERE o.cust = c.cust", "column 37: a join without an equality"),
    ("SELECT o.id FROM orders o LEFT JOIN custs c ON o.cust < c.cust", "a join without an equality"),
    ("SELECT id FROM orders WHERE EXISTS (SELECT * FROM custs WHERE region = 'r0')", "not correlated on an equality"),
    ("SELECT id FROM orders WHERE qty > 1 OR cust IN (SELECT cust FROM custs)", "ANDed in WHERE"),
    ("SELECT id, EXISTS (SELECT * FROM custs c WHERE c.cust = cust) AS e FROM orders", "ANDed in WHERE"),
    (
        "SELECT o.id FROM orders o LEFT JOIN custs c ON o.cust = r.region JOIN regions r ON c.region = r.region",
        "joined later",
    ),
]


@pytest.mark.parametrize("sql,says", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_a_join_cbp_cannot_maintain_is_refused_at_load(tmp_path, sql, says):
    path = tmp_path / "v.yaml"
    path.write_text(_yaml({"v": sql}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "view-unsupported", str(e.value)
    assert says in str(e.value) and "line 7: view 'v'" in str(e.value), str(e.value)


FUZZ = {  # each join kind over a(k, x) and b(k, y), with and without a match condition besides the key
    "inner": "SELECT a.x, b.y FROM a JOIN b ON a.k = b.k AND a.x < b.y",
    "inner_w": "SELECT a.x, b.y FROM a JOIN b ON a.k = b.k AND b.y > 0 WHERE a.x <> 1 AND b.y < 4",
    "left": "SELECT a.x, b.y FROM a LEFT JOIN b ON a.k = b.k",
    "left_m": "SELECT a.x, b.y FROM a LEFT JOIN b ON a.k = b.k AND a.x < b.y WHERE a.x <> 2",
    "right": "SELECT a.x, b.y FROM a RIGHT JOIN b ON a.k = b.k",
    "right_m": "SELECT a.x, b.y FROM a RIGHT JOIN b ON a.k = b.k AND a.x > b.y",
    "full": "SELECT a.x, b.y FROM a FULL JOIN b ON a.k = b.k",
    "full_m": "SELECT a.x, b.y FROM a FULL JOIN b ON a.k = b.k AND a.x + b.y > 3",
    "semi": "SELECT a.x FROM a WHERE EXISTS (SELECT * FROM b WHERE b.k = a.k)",
    "semi_m": "SELECT a.x FROM a WHERE a.k IN (SELECT k FROM b WHERE b.y > a.x)",
    "anti": "SELECT a.x FROM a WHERE NOT EXISTS (SELECT * FROM b WHERE b.k = a.k)",
    "anti_m": "SELECT a.x FROM a WHERE NOT EXISTS (SELECT * FROM b WHERE b.k = a.k AND b.y > a.x)",
    "not_in": "SELECT a.x FROM a WHERE a.k IS NOT NULL AND a.k NOT IN (SELECT k FROM b WHERE k IS NOT NULL)",
}


class _Out:
    """A stage's ``out`` for calling a join translator directly: its state rows and written records."""

    def __init__(self, plan: dict, rows: dict) -> None:
        self.params, self.rows, self.records = {"cbp_view": plan}, rows, []
        self.state = self
        setattr(self, plan["out"], self)

    def write(self, r: dict) -> None:
        if "s" in r and "_diff" not in r:
            self.rows[(r["s"], r["r"])] = r
        else:
            self.records.append(r)

    def delete(self, key: tuple) -> None:
        del self.rows[key]


def _nested_loop(how: str, a: list[dict], b: list[dict], match, where, cols) -> list[tuple]:
    """The join by definition: every pair, padded rows, semi and anti rows, as SQL has them."""
    from cbp.views.exprs import ev

    def env(x, y):
        return {f"a{k}": v for k, v in (x or {"k": None, "x": None}).items()} | {
            f"b{k}": v for k, v in (y or {"k": None, "y": None}).items()
        }

    def hit(x, y):
        return x["k"] is not None and x["k"] == y["k"] and (match is None or ev(match, env(x, y)) is True)

    rows = [env(x, y) for x in a for y in b if hit(x, y)] if how in ("inner", "left", "right", "full") else []
    rows += [env(x, None) for x in a if how in ("left", "full", "anti") and not any(hit(x, y) for y in b)]
    rows += [env(None, y) for y in b if how in ("right", "full") and not any(hit(x, y) for x in a)]
    rows += [env(x, None) for x in a if how == "semi" and any(hit(x, y) for y in b)]
    return sorted((tuple(ev(e, r) for e in cols) for r in rows if where is None or ev(where, r) is True), key=repr)


class _Keyed:
    """A keyed stage's ``state`` for calling a join translator directly (``cbp.engine.task.keyedstate.KeyedRows``'s
    reads): every row by iteration, or the rows asked for by ``get_many``; ``read`` counts the rows given."""

    def __init__(self, rows: dict) -> None:
        self.rows, self.read = rows, 0

    def __iter__(self):
        self.read += len(self.rows)
        return iter(list(self.rows.values()))

    def get_many(self, keys) -> dict:
        got = {tuple(k): self.rows[tuple(k)] for k in keys if tuple(k) in self.rows}
        self.read += len(got)
        return got


def _fuzz_join(keyed: bool) -> int:
    """Each FUZZ view's join translator over random inserts and deletes with NULL keys, its consolidated
    output against the join by definition; ``keyed``: its state read as a keyed stage's (directories
    kept); the rows it read."""
    from cbp.views.exprs import parse_expr
    from cbp.views.joinrun import join

    def ours(e):  # a plan's expression over the nested loop's names: `l__x`, `x` -> ax; `r__y`, `s1__y` -> by
        if e is None:
            return None
        for old, new in (("`l__", "`a"), ("`r__", "`b"), ("`s1__", "`b"), ("`x`", "`ax`"), ("`k`", "`ak`")):
            e = e.replace(old, new)
        return parse_expr(e)

    read = 0
    for name, sql in FUZZ.items():
        g = Generated()
        g.add_view("v", sql, {"a": {"k": "int", "x": "int"}, "b": {"k": "int", "y": "int"}})
        plan, route = g.stages["v"]["params"]["cbp_view"], g.routes["v"]
        how, cols = plan.get("how", "inner"), [ours(e) for _, e in plan["cols"]]
        for seed in range(40):
            rng = random.Random(seed)
            state: dict[str, dict] = {}
            a: list[dict] = []
            b: list[dict] = []
            view: dict[tuple, int] = {}
            for _ in range(4):
                keyed_in: dict[str, list[list[dict]]] = {}
                for side, rows, field in ((0, a, "x"), (1, b, "y")):
                    for _ in range(rng.randint(0, 4)):
                        if rows and rng.random() < 0.4:
                            rec = {**rows.pop(rng.randrange(len(rows))), "_diff": -1}
                        else:
                            rows.append({"k": rng.choice([None, 1, 2, 3]), field: rng.randint(0, 4)})
                            rec = {**rows[-1], "_diff": 1}
                        keyed_in.setdefault(route[side](rec), [[], []])[side].append(rec)
                for key, (left, right) in keyed_in.items():
                    out = _Out(plan, state.setdefault(key, {}))
                    given = _Keyed(out.rows) if keyed else iter(list(out.rows.values()))
                    join(key, given, left, right, out)
                    read += given.read if keyed else 0
                    for r in out.records:
                        t = tuple(r[n] for n, _ in plan["cols"])
                        view[t] = view.get(t, 0) + r["_diff"]
                got = sorted((t for t, d in view.items() for _ in range(d)), key=repr)
                pushed = [route[0].where] + ([route[1].where] if how == "inner" else [])  # pushed below the join
                wheres = [f"({w})" for w in [plan["filter"], *pushed] if w]
                want = _nested_loop(how, a, b, ours(plan.get("match")), ours(" AND ".join(wheres) or None), cols)
                assert got == want and all(d >= 0 for d in view.values()), (name, seed)
    return read


def test_join_translator_equals_a_nested_loop_join():
    """The join translator (no Spark: called per key as a stage's task calls it) over random inserts
    and deletes with NULL keys, each view's consolidated output against the join by definition."""
    _fuzz_join(keyed=False)


def test_join_translator_with_directories_equals_a_nested_loop_join(monkeypatch):
    """The same with keyed state and an inner join's directories at every key, listing at most 1 row a
    side (so directories are written, read, listed, "many", and deleted: 210 of the 464 inner calls
    read the directories alone)."""
    from cbp.views import joinrun

    monkeypatch.setattr(joinrun, "WIDE", 0)
    monkeypatch.setattr(joinrun, "LISTED", 1)
    assert _fuzz_join(keyed=True) > 0


def test_an_inner_join_on_a_key_of_few_values_reads_the_other_sides_rows(spark, tmp_path, monkeypatch):
    """Many rows of ``a`` on two keys, one row of ``b`` each (a many-to-one join, TPC-H's nation key),
    in a home an older cbp wrote (its join's state without the directories' field ``d``), upgraded:
    once the keys have directories (the run after the upgrade writes them), a change of ``a`` reads
    the directories and its own changed rows, not the key's 120 rows of ``a`` (the epoch's state rows
    read, from its report); the view equals the join by definition after every run."""
    from cbp.views import plan as views_plan

    older = views_plan.join_state
    monkeypatch.setattr(
        views_plan, "join_state", lambda kind, match: {k: t for k, t in older(kind, match).items() if k != "d"}
    )
    path = tmp_path / "few.yaml"
    path.write_text(
        "pipeline: few\nflows:\n  a: {external: true, schema: {k: int, x: int}}\n"
        "  b: {external: true, schema: {k: int, y: string}}\n"
        "views:\n  v: SELECT a.x, b.y FROM a JOIN b ON a.k = b.k\n"
    )
    a = [{"k": i % 2 + 1, "x": i} for i in range(240)]
    b = [{"k": 1, "y": "one"}, {"k": 2, "y": "two"}]
    steps = [(a, b), ([{"k": 1, "x": 1000}], []), ([{"k": 1, "x": 1005}, {"k": 2, "x": 1001}], [])]
    steps.append(([{"k": 1, "x": 1002}, {"k": 2, "x": 1003}, {**a[0], "_diff": -1}], []))
    steps.append(([{"k": 2, "x": 1004}], [{"k": 2, "y": "deux"}, {"k": 2, "y": "two", "_diff": -1}]))
    reads = []
    for i, (fa, fb) in enumerate(steps):
        if i in (0, 2):  # the older cbp's home, then this one's after `cbp upgrade`
            p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
        if i == 2:  # the same YAML: this cbp's compilation differs, so the home waits for `cbp upgrade`
            with pytest.raises(cbp.UsageError) as e:
                p.feed("a", fa)
            assert e.value.code == "pipeline-changed"
            assert [(c.kind, c.name) for c in p.plan().changes if c.verdict == "migrates"] == [("state-rewrite", "v")]
            p.upgrade()
        for flow, recs in (("a", fa), ("b", fb)):
            if recs:
                p.feed(flow, recs)
        reads.append(sum(r.keys_read for r in p.run() if r.stage == "v"))
        if i == 0:
            monkeypatch.undo()
        rows = [(r["x"], r["y"]) for r in p.output("v", consolidated=True)]
        ys = {r["k"]: r["y"] for r in _net(p.output("b", consolidated=True))}
        want = [(r["x"], ys[r["k"]]) for r in _net(p.output("a", consolidated=True)) if r["k"] in ys]
        assert sorted(rows) == sorted(want)
    assert reads[1] > 120 and reads[2] > 120  # no directories (the older layout; then written): a key's rows read
    assert reads[3] <= 2 * 2 + 1  # two keys' directories, and the one stored row retracted
    assert reads[4] > 120  # a change of b (the side of one row) reads a's rows of its key, as it must
