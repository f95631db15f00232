"""Intervals of two units in SQL views (cbp/views/datefns.py, frames.py): ``INTERVAL '1-2' YEAR TO
MONTH`` (months by Spark's end-of-month rule), ``INTERVAL '1 12:00:00.5' DAY TO SECOND``, ``'1 2' DAY
TO HOUR``, ``'10:20' HOUR TO MINUTE`` and ``INTERVAL 1 DAY 2 HOURS`` (one interval of Spark's type: a
date plus it is a timestamp) in date and timestamp arithmetic and in ``RANGE`` frames; and the window
functions Spark accepts that cbp refused: ``first_value(x, false)``, ``last_value(x, true)``,
``lead(y, 1, 9.0)`` over a double (the default cast to the value's type). After every epoch each view
equals Spark SQL over the input's consolidated contents (values and types), through inserts, deletes
and a row moved between partitions; what Spark refuses (a ``ROWS`` offset ``CAST(2 AS BIGINT)``, a
day-time interval over a date's ``RANGE``, an hour of 25) is refused at load, by code."""

from __future__ import annotations

import datetime

import pytest
from test_sql_views import check_views_after_each_feed, few_partitions  # noqa: F401 (few_partitions: a fixture)

from cbp.errors import SpecError
from cbp.spec import load_spec

T = {"k": "int", "g": "string", "x": "int?", "y": "float?", "dt": "date", "ts": "timestamp"}
W = "PARTITION BY g ORDER BY ts, k"
VIEWS = {
    "iv": "SELECT k, dt + INTERVAL '1 12:00:00' DAY TO SECOND AS a, dt + INTERVAL '1-2' YEAR TO MONTH AS b, "
    "ts + INTERVAL '1-1' YEAR TO MONTH AS c, ts - INTERVAL '1 12:30:00.5' DAY TO SECOND AS e, "
    "dt + INTERVAL 1 DAY 2 HOURS AS f, dt - INTERVAL 1 YEAR 2 MONTHS AS h, ts + INTERVAL '10:20' HOUR TO MINUTE AS i, "
    "dt - INTERVAL '-0-1' YEAR TO MONTH AS j, dt - INTERVAL '1 2' DAY TO HOUR AS l, ts + INTERVAL '1.5' SECOND AS m, "
    "dt - INTERVAL 1 MINUTE 0.25 SECONDS AS n FROM t WHERE k > 0",
    "win": f"SELECT k, g, first_value(x, false) OVER ({W}) AS fv, "
    f"last_value(x, true) OVER ({W} ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS lv, "
    f"lead(y, 1, 9.0) OVER ({W}) AS ld, lag(x, 1, 2.5D) OVER ({W}) AS lg, "
    f"sum(x) OVER ({W} ROWS BETWEEN CAST(1 AS INT) PRECEDING AND CURRENT ROW) AS s2, "
    "sum(x) OVER (PARTITION BY g ORDER BY ts RANGE BETWEEN INTERVAL '1 12:00:00' DAY TO SECOND PRECEDING "
    "AND CURRENT ROW) AS s36, count(*) OVER (PARTITION BY g ORDER BY ts RANGE BETWEEN INTERVAL 1 DAY 2 HOURS "
    "PRECEDING AND INTERVAL '0 1' DAY TO HOUR FOLLOWING) AS c26 FROM t",
    "months": "SELECT k, g, count(*) OVER (PARTITION BY g ORDER BY dt RANGE BETWEEN INTERVAL '0-1' YEAR TO MONTH "
    "PRECEDING AND INTERVAL '0-1' YEAR TO MONTH FOLLOWING) AS c1 FROM t",
}


def _row(k: int, g: str, x: int | None, y: float | None, day: tuple[int, int, int], hour: int) -> dict:
    ts = datetime.datetime(*day, hour, tzinfo=datetime.timezone.utc)
    return {"k": k, "g": g, "x": x, "y": y, "dt": datetime.date(*day), "ts": ts}


ROWS = [
    _row(1, "a", 1, 0.5, (2024, 1, 31), 10),
    _row(2, "a", None, None, (2024, 2, 1), 20),
    _row(3, "a", 3, 1.5, (2024, 2, 29), 0),
    _row(4, "a", None, 2.0, (2024, 3, 1), 11),
    _row(5, "b", 5, None, (2023, 12, 31), 23),
    _row(6, "b", 6, 3.0, (2024, 1, 1), 1),
    _row(7, "b", None, 4.5, (2024, 1, 30), 12),
]
STEPS = [
    ROWS,
    # a's last non-NULL x goes, b's first row goes, row 4 moves to b
    [{**ROWS[2], "_diff": -1}, {**ROWS[4], "_diff": -1}, {**ROWS[3], "_diff": -1}, {**ROWS[3], "g": "b"}],
]


def _yaml(views: dict[str, str]) -> str:
    schema = "{" + ", ".join(f"{k}: {t!r}" for k, t in T.items()) + "}"
    body = "".join(f"  {n}: {sql!r}\n" for n, sql in views.items())
    return f"pipeline: iv\nflows:\n  t: {{external: true, schema: {schema}}}\nviews:\n{body}"


@pytest.mark.usefixtures("few_partitions")
def test_intervals_and_window_arguments_equal_spark_sql_after_every_epoch(spark, tmp_path):
    path = tmp_path / "iv.yaml"
    path.write_text(_yaml(VIEWS))
    check_views_after_each_feed(spark, path, tmp_path / "home", "t", STEPS, VIEWS, T)


_U = "view-unsupported"
REFUSED = [  # each refused by Spark too (the comment: its error class)
    (f"SELECT k, sum(x) OVER ({W} ROWS BETWEEN CAST(2 AS BIGINT) PRECEDING AND CURRENT ROW) AS s FROM t", _U, "ROWS"),
    (
        f"SELECT k, sum(x) OVER ({W} ROWS 2L PRECEDING) AS s FROM t",
        _U,
        "ROWS",
    ),  # SPECIFIED_WINDOW_FRAME_UNACCEPTED_TYPE
    (
        "SELECT k, sum(x) OVER (PARTITION BY g ORDER BY dt RANGE BETWEEN INTERVAL '1 12:00:00' DAY TO SECOND "
        "PRECEDING AND CURRENT ROW) AS s FROM t",
        _U,
        "over an ORDER BY of type date",  # RANGE_FRAME_INVALID_TYPE
    ),
    ("SELECT k, dt + INTERVAL '1 25:00:00' DAY TO SECOND AS a FROM t", _U, "HOUR 25 out of range"),
    ("SELECT k, dt + INTERVAL 1 MONTH 2 DAYS AS a FROM t", _U, "INTERVAL '1' MONTH + INTERVAL '2' DAYS"),
    ("SELECT k, dt + INTERVAL 1 DAY -2 HOURS FROM t", _U, "column 31: INTERVAL ... -2 HOURS: a signed part"),
    ("SELECT k, first_value(x, k > 1) OVER (PARTITION BY g ORDER BY k) AS f FROM t", "view-syntax", "not valid SQL"),
]


@pytest.mark.parametrize("sql,code,says", REFUSED, ids=[str(i) for i in range(len(REFUSED))])
def test_what_spark_refuses_is_refused_at_load(tmp_path, sql, code, says):
    path = tmp_path / "iv.yaml"
    path.write_text(_yaml({"v": sql}))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert e.value.code == code and says in str(e.value), str(e.value)
