"""Sliding window frames (issue 48): ``ROWS BETWEEN n PRECEDING AND CURRENT ROW``, ``... AND n
FOLLOWING``, ``CURRENT ROW AND UNBOUNDED FOLLOWING``, ``RANGE UNBOUNDED PRECEDING`` with ``count``,
``sum``, ``avg``, ``min``, ``max`` and ``first_value``/``last_value`` within ``PARTITION BY``; RANGE
frames with offsets by the ORDER BY value (ints, doubles, decimals, dates with days or INTERVALs,
timestamps with INTERVALs; ASC and DESC, NULLs first and last: a NULL's frame is its NULL peers),
RANGE frames from CURRENT ROW, constant ROWS bounds (``1 + 1 PRECEDING``), ``nth_value`` and IGNORE
NULLS (``first_value``, ``last_value``, ``nth_value``, ``lag``, ``lead``): all against Spark SQL after
inserts, deletes and updates (a row moved between partitions, a peer group split, an ORDER BY value
changed; a touched partition is recomputed); the frames and functions still refused."""

from __future__ import annotations

import datetime
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_sql_views import _same, _table, check_typed_views, check_views_after_each_feed, few_partitions  # noqa: F401 (few_partitions: a fixture)

from cbp.errors import SpecError
from cbp.spec import load_spec

T = {"id": "int", "g": "string", "x": "int?", "y": "float?", "p": "decimal(6,2)?", "d": "date?", "ts": "timestamp?"}
W = "PARTITION BY g ORDER BY id"
VIEWS = {
    "slid": f"SELECT id, g, sum(x) OVER ({W} ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) AS s3, "
    f"avg(y) OVER ({W} ROWS BETWEEN 1 PRECEDING AND 1 FOLLOWING) AS a3, "
    f"count(x) OVER ({W} ROWS BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS cf, "
    f"min(x) OVER ({W} ROWS BETWEEN 1 FOLLOWING AND 2 FOLLOWING) AS mn, "
    f"max(p) OVER ({W} ROWS 1 PRECEDING) AS mx, "
    f"sum(p) OVER ({W} RANGE UNBOUNDED PRECEDING) AS rs, "
    f"avg(p) OVER ({W} ROWS BETWEEN UNBOUNDED PRECEDING AND 1 FOLLOWING) AS ap, "
    f"first_value(x) OVER ({W} ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS fv, "
    f"last_value(y) OVER ({W} ROWS BETWEEN CURRENT ROW AND 1 FOLLOWING) AS lv, "
    f"count(*) OVER ({W} ROWS BETWEEN 3 PRECEDING AND 2 PRECEDING) AS c2 FROM t",
    "ranged": "SELECT id, g, sum(x) OVER (PARTITION BY g ORDER BY x RANGE BETWEEN 2 PRECEDING AND CURRENT ROW) AS rx, "
    "count(*) OVER (PARTITION BY g ORDER BY x DESC RANGE BETWEEN 1 PRECEDING AND 3 FOLLOWING) AS cx, "
    "avg(p) OVER (PARTITION BY g ORDER BY p NULLS LAST RANGE BETWEEN 1.5 PRECEDING AND 0.5 FOLLOWING) AS ap, "
    "sum(y) OVER (PARTITION BY g ORDER BY y RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS sy, "
    "sum(p) OVER (PARTITION BY g ORDER BY d RANGE BETWEEN INTERVAL 7 DAYS PRECEDING AND CURRENT ROW) AS s7, "
    "count(x) OVER (PARTITION BY g ORDER BY d DESC NULLS LAST RANGE BETWEEN 3 PRECEDING AND 1 FOLLOWING) AS cd, "
    "max(x) OVER (PARTITION BY g ORDER BY ts RANGE BETWEEN INTERVAL 12 HOURS PRECEDING AND INTERVAL 36 HOURS "
    "FOLLOWING) AS mt, min(y) OVER (PARTITION BY g ORDER BY d RANGE BETWEEN INTERVAL 2 MONTHS PRECEDING AND "
    f"INTERVAL 1 MONTH PRECEDING) AS mm, sum(x) OVER ({W} ROWS BETWEEN 1 + 1 PRECEDING AND -1 FOLLOWING) AS sr, "
    f"nth_value(y, 2) OVER ({W}) AS n2, nth_value(x, 2) IGNORE NULLS OVER ({W} ROWS BETWEEN UNBOUNDED "
    f"PRECEDING AND UNBOUNDED FOLLOWING) AS n2i, first_value(y) IGNORE NULLS OVER ({W} RANGE BETWEEN 2 "
    f"PRECEDING AND CURRENT ROW) AS fi, last_value(x, true) OVER ({W}) AS li, lag(y) IGNORE NULLS OVER ({W}) "
    f"AS lg, lead(x, 2, -1) IGNORE NULLS OVER ({W}) AS ld, nth_value(y, 2, true) OVER ({W} ROWS BETWEEN 1 "
    f"PRECEDING AND 3 FOLLOWING) AS nt, lag(y, -1) IGNORE NULLS OVER ({W}) AS lm FROM t",
}


def _r(i: int, g: str, x: int | None, y: float | None, p: str | None) -> dict:
    """A row; its date (ties: ids 3 apart; NULL for every 7th id) and timestamp (ties, a NULL) from its id."""
    import decimal

    d = None if i % 7 == 0 else datetime.date(2024, 1, 27) + datetime.timedelta(days=(i * 5) % 12 * 3)
    ts = None if i % 5 == 0 else datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    ts = ts and ts + datetime.timedelta(hours=(i * 7) % 4 * 12)
    return {"id": i, "g": g, "x": x, "y": y, "p": None if p is None else decimal.Decimal(p), "d": d, "ts": ts}


ROWS = [
    _r(1, "a", 5, 1.5, "1.25"),
    _r(2, "a", None, 2.0, "3.50"),
    _r(3, "a", 7, None, None),
    _r(4, "a", -2, 0.25, "-1.00"),
    _r(5, "a", 9, 4.0, "2.00"),
    _r(6, "b", 1, 1.0, "0.10"),
    _r(7, "b", 3, None, "0.20"),
    _r(8, "c", 4, 8.0, "9.99"),
]
STEPS = [
    ROWS[:6],
    [  # a middle row deleted, rows added: ties in x, d and ts
        {**ROWS[1], "_diff": -1},
        ROWS[6],
        _r(9, "a", 11, 3.5, "4.00"),
        _r(11, "a", 7, 2.0, "3.50"),
        _r(12, "a", 9, None, "4.00"),
        _r(13, "b", 3, 1.0, "0.20"),
    ],
    [{**ROWS[0], "_diff": -1}, {**ROWS[5], "_diff": -1}, ROWS[7]],  # the first row, a partition's only row
    [  # updates: x changed; a row moved between partitions; a peer group split (x 7 of id 11 becomes 8); d changed
        {**ROWS[3], "_diff": -1},
        {**ROWS[3], "x": 100},
        _r(10, "b", None, None, None),
        {**ROWS[6], "_diff": -1},
        {**ROWS[6], "g": "a"},
        {**_r(11, "a", 7, 2.0, "3.50"), "_diff": -1},
        _r(11, "a", 8, 2.0, "3.50"),
        {**ROWS[4], "_diff": -1},
        {**ROWS[4], "d": datetime.date(2024, 2, 1), "y": 0.5, "p": None},
    ],
]


def _yaml(views: dict[str, str]) -> str:
    schema = ", ".join(f"{k}: {t!r}" for k, t in T.items())
    body = "\n".join(f"  {n}: |\n    {sql}" for n, sql in views.items())
    return f"pipeline: frames\nflows:\n  t: {{external: true, schema: {{{schema}}}}}\nviews:\n{body}\n"


@pytest.mark.usefixtures("few_partitions")
def test_sliding_frames_equal_spark_sql_after_every_epoch(spark, tmp_path):
    path = tmp_path / "frames.yaml"
    path.write_text(_yaml(VIEWS))
    check_views_after_each_feed(spark, path, tmp_path / "home", "t", STEPS, VIEWS, T)


REFUSED = [  # (the SQL, what the message names); each is view-unsupported, and Spark refuses each too
    (f"SELECT id, sum(x) OVER ({W} ROWS BETWEEN 1 FOLLOWING AND 1 PRECEDING) AS s FROM t", "the window frame"),
    (f"SELECT id, row_number() OVER ({W} ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM t", "the window frame"),
    (f"SELECT id, sum(x) OVER ({W} ROWS BETWEEN x PRECEDING AND CURRENT ROW) AS s FROM t", "the window frame"),
    (f"SELECT id, sum(x) OVER ({W} ROWS BETWEEN 1.5 PRECEDING AND CURRENT ROW) AS s FROM t", "the window frame"),
    (f"SELECT id, sum(x) OVER ({W} RANGE BETWEEN 2 FOLLOWING AND 1 FOLLOWING) AS s FROM t", "the window frame"),
    (f"SELECT id, lag(x) OVER ({W} ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM t", "the window frame"),
    (
        "SELECT id, sum(x) OVER (PARTITION BY g ORDER BY x, id RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM t",
        "more than one ORDER BY term",
    ),
    (
        "SELECT id, sum(x) OVER (PARTITION BY g ORDER BY g RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM t",
        "ORDER BY of type string",
    ),
    (
        "SELECT id, sum(x) OVER (PARTITION BY g ORDER BY d RANGE BETWEEN INTERVAL 36 HOURS PRECEDING AND CURRENT "
        "ROW) AS s FROM t",
        "ORDER BY of type date",
    ),
    (
        "SELECT id, sum(x) OVER (PARTITION BY g ORDER BY ts RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM t",
        "ORDER BY of type timestamp",
    ),
    (
        "SELECT id, sum(x) OVER (PARTITION BY g ORDER BY ts RANGE BETWEEN INTERVAL 12 HOURS PRECEDING AND INTERVAL "
        "1 DAY FOLLOWING) AS s FROM t",
        "not of the same type",
    ),
    (  # without ORDER BY: Spark's ROWS frame runs over an arbitrary order, a RANGE frame is refused
        "SELECT id, sum(x) OVER (PARTITION BY g ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS s FROM t",
        "the window frame",
    ),
    ("SELECT id, sum(x) OVER (PARTITION BY g RANGE BETWEEN CURRENT ROW AND UNBOUNDED FOLLOWING) AS s FROM t", "frame"),
    (f"SELECT id, sum(x) IGNORE NULLS OVER ({W}) AS s FROM t", "IGNORE NULLS"),
    (f"SELECT id, nth_value(x, 0) OVER ({W}) AS s FROM t", "nth_value() of other than a positive"),
    (f"SELECT id, nth_value(x, 2, x > 1) OVER ({W}) AS s FROM t", "third argument"),
    ("SELECT id, nth_value(x, 2) OVER (PARTITION BY g) AS s FROM t", "without ORDER BY"),
    (f"SELECT id, sum(DISTINCT x) OVER ({W}) AS s FROM t", "DISTINCT in a window function"),
]


@pytest.mark.parametrize("sql,says", REFUSED, ids=[f"refused-{i}" for i in range(len(REFUSED))])
def test_a_frame_or_function_not_supported_is_refused_at_load(tmp_path, sql, says):
    path = tmp_path / "frames.yaml"
    path.write_text(_yaml({"v": sql}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "view-unsupported" and says in str(e.value), str(e.value)


PROP = {  # RANGE frames over ties, NULLs, both directions, dates; one total ORDER BY for nth_value
    "v": "SELECT id, g, sum(y) OVER (PARTITION BY g ORDER BY x RANGE BETWEEN 2 PRECEDING AND 1 FOLLOWING) AS a, "
    "count(*) OVER (PARTITION BY g ORDER BY x DESC NULLS FIRST RANGE BETWEEN CURRENT ROW AND 3 FOLLOWING) AS b, "
    "max(id) OVER (PARTITION BY g ORDER BY d RANGE BETWEEN INTERVAL 3 DAYS PRECEDING AND CURRENT ROW) AS c, "
    "avg(p) OVER (PARTITION BY g ORDER BY x NULLS LAST RANGE BETWEEN 1 FOLLOWING AND 2 FOLLOWING) AS e, "
    "nth_value(y, 2) IGNORE NULLS OVER (PARTITION BY g ORDER BY x, id) AS f FROM t"
}
_OP = st.tuples(
    st.integers(0, 2),  # insert, delete, update (moved to another partition, its x and d changed)
    st.integers(0, 10**6),  # which row a delete or update picks
    st.sampled_from(["a", "b"]),
    st.one_of(st.none(), st.integers(0, 6)),  # x: ties, NULLs
    st.one_of(st.none(), st.integers(0, 4)),  # y (as a double), NULLs
    st.one_of(st.none(), st.integers(0, 8)),  # d: days after 2024-01-01, NULLs
)


class _Run:
    """A window stage's translator driven without a pipeline: per key its state (row text -> count), and
    the view's contents (the written records' ``_diff`` summed)."""

    def __init__(self, stage) -> None:
        self.stage, self.states, self.view = stage, {}, {}

    def epoch(self, records: list[dict]) -> None:
        from cbp.views.winrun import window

        by_key: dict[str, list[dict]] = {}
        for r in records:
            by_key.setdefault(self.stage.inputs[0].route_by(r), []).append(r)
        for key, rows in by_key.items():
            state = self.states.setdefault(key, {})
            held = SimpleNamespace(write=lambda r, s=state: s.__setitem__(r["r"], r["n"]), delete=state.pop)
            out = SimpleNamespace(params=self.stage.params, state=held, v=SimpleNamespace(write=self._write))
            window(key, iter([{"r": t, "n": n} for t, n in state.items()]), rows, out=out)

    def _write(self, r: dict) -> None:
        row = tuple(v for k, v in r.items() if k != "_diff")
        self.view[row] = self.view.get(row, 0) + r["_diff"]
        assert self.view[row] >= 0, row

    def rows(self) -> list[tuple]:
        return [row for row, n in self.view.items() for _ in range(n)]


def _apply(ops, live: dict[int, dict], next_id: list[int]) -> list[dict]:
    """One epoch's records from hypothesis' ops, ``live`` updated (id -> row)."""
    recs = []
    for kind, pick, g, x, y, d in ops:
        day = None if d is None else datetime.date(2024, 1, 1) + datetime.timedelta(days=d)
        if kind == 0 or not live:
            next_id[0] += 1
            row = {**_r(next_id[0], g, x, None if y is None else float(y), None if y is None else f"{y}.25"), "d": day}
            live[row["id"]] = row
            recs.append({**row, "_diff": 1})
            continue
        old = live.pop(sorted(live)[pick % len(live)])
        recs.append({**old, "_diff": -1})
        if kind == 2:
            live[old["id"]] = {**old, "g": g, "x": x, "d": day}
            recs.append({**live[old["id"]], "_diff": 1})
    return recs


@pytest.mark.usefixtures("few_partitions")
@settings(max_examples=5, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(st.lists(_OP, min_size=1, max_size=8), min_size=2, max_size=3))
def test_range_frames_through_random_changes_equal_spark_sql(spark, tmp_path_factory, steps):
    """The window translator fed random inserts, deletes and updates: after each epoch, the view's
    contents (its written records summed) equal Spark SQL over the live rows."""
    path = tmp_path_factory.mktemp("prop") / "frames.yaml"
    path.write_text(_yaml(PROP))
    run = _Run(load_spec(path).stages["v"])
    live: dict[int, dict] = {}
    next_id = [100]
    try:
        for ops in steps:
            run.epoch(_apply(ops, live, next_id))
            _table(spark, "t", T, list(live.values()))
            want = [tuple(row) for row in spark.sql(PROP["v"]).collect()]
            assert _same(run.rows(), want), f"cbp {sorted(map(str, run.rows()))}\nspark {sorted(map(str, want))}"
    finally:
        spark.catalog.dropTempView("t")
