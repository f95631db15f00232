"""Sliding window frames (issue 48): ``ROWS BETWEEN n PRECEDING AND CURRENT ROW``, ``... AND n
FOLLOWING``, ``CURRENT ROW AND UNBOUNDED FOLLOWING``, ``RANGE UNBOUNDED PRECEDING`` with ``count``,
``sum``, ``avg``, ``min``, ``max`` and ``first_value``/``last_value`` within ``PARTITION BY``, against
Spark SQL after inserts, deletes and updates (a touched partition is recomputed); the frames still
refused."""

from __future__ import annotations

import pytest
from test_sql_views import check_typed_views, few_partitions  # noqa: F401 (few_partitions: a fixture)

import cbp
from cbp.errors import SpecError
from cbp.spec import load_spec

T = {"id": "int", "g": "string", "x": "int?", "y": "float?", "p": "decimal(6,2)?"}
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
}


def _r(i: int, g: str, x: int | None, y: float | None, p: str | None) -> dict:
    import decimal

    return {"id": i, "g": g, "x": x, "y": y, "p": None if p is None else decimal.Decimal(p)}


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
    [{**ROWS[1], "_diff": -1}, ROWS[6], _r(9, "a", 11, 3.5, "4.00")],  # a middle row deleted, one added
    [{**ROWS[0], "_diff": -1}, {**ROWS[5], "_diff": -1}, ROWS[7]],  # the first row, a partition's only row
    [{**ROWS[3], "_diff": -1}, {**ROWS[3], "x": 100}, _r(10, "b", None, None, None)],  # an update
]


def _yaml(views: dict[str, str]) -> str:
    schema = ", ".join(f"{k}: {t!r}" for k, t in T.items())
    body = "\n".join(f"  {n}: |\n    {sql}" for n, sql in views.items())
    return f"pipeline: frames\nflows:\n  t: {{external: true, schema: {{{schema}}}}}\nviews:\n{body}\n"


@pytest.mark.usefixtures("few_partitions")
def test_sliding_frames_equal_spark_sql_after_every_epoch(spark, tmp_path):
    path = tmp_path / "frames.yaml"
    path.write_text(_yaml(VIEWS))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    try:
        for step in STEPS:
            p.feed("t", step)
            p.run()
            check_typed_views(spark, p, VIEWS, {"t": T})
    finally:
        for name in [*VIEWS, "t"]:
            spark.catalog.dropTempView(name)


REFUSED = [
    f"SELECT id, sum(x) OVER ({W} RANGE BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM t",
    f"SELECT id, sum(x) OVER ({W} ROWS BETWEEN 1 FOLLOWING AND 1 PRECEDING) AS s FROM t",
    f"SELECT id, row_number() OVER ({W} ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS s FROM t",
    f"SELECT id, sum(x) OVER ({W} ROWS BETWEEN x PRECEDING AND CURRENT ROW) AS s FROM t",
]


@pytest.mark.parametrize("sql", REFUSED, ids=[f"refused-{i}" for i in range(len(REFUSED))])
def test_a_frame_not_supported_is_refused_at_load(tmp_path, sql):
    path = tmp_path / "frames.yaml"
    path.write_text(_yaml({"v": sql}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == "view-unsupported" and "the window frame" in str(e.value), str(e.value)
