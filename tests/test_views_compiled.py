"""The compiled closures of a view's expressions (cbp/views/compiled.py) compute what the evaluator
(cbp.views.exprs.ev, checked against Spark SQL in test_sql_views.py) computes: the same value, of the
same type, or the same error, on rows with NULLs, negative numbers, decimals, dates and timestamps.
In-process, no Spark."""

from __future__ import annotations

import datetime
import decimal

import pytest
from test_sql_views import EXPRESSIONS, TYPED_EXPRESSIONS, TYPED_ROWS

from cbp.views.compiled import conformer, expr_fn
from cbp.views.exprs import ev, parse_expr, with_decimal_types
from cbp.views.vtypes import conform

ROWS = [{"x": 1, "s": " ab ", "b": True}, {"x": -3, "s": "hello", "b": False}, {"x": None, "s": None, "b": None}]
ROWS += [{"x": 7, "s": "ab", "b": None}, {"x": 0, "s": "", "b": True}, {"x": 2, "s": "h_l%o\nb", "b": False}]
TYPES = {"p": "decimal(10,2)", "q": "int", "d": "date", "s": "string", "t": "timestamp"}
MORE = [
    "1 - p",
    "q - 1",
    "q * 2 + q",
    "p * (1 - p) * (1 + p)",
    "q / (q - q)",
    "q % (q - q)",
    "d <= DATE '2024-01-02'",
    "d < '2024-01-02' AND q > 0",
    "CASE WHEN p IS NULL THEN 'none' WHEN p > 0 THEN 'up' ELSE 'down' END",
    "NOT (p IS NULL) OR q IN (2, 3)",
    "extract(YEAR FROM d) * 100 + month(d)",
]


def _outcome(f, row):
    try:
        v = f(row)
    except Exception as e:  # the same error class as the evaluator's
        return ("error", type(e))
    return (v, type(v))


def _typed_row(r: dict) -> dict:
    d = r["d"]
    t = datetime.datetime(d.year, d.month, d.day, 1, tzinfo=datetime.timezone.utc) if d is not None else None
    return {**r, "t": t}


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_compiled_equals_the_evaluator(text):
    for row in ROWS:
        assert _outcome(expr_fn(text), row) == _outcome(lambda r: ev(parse_expr(text), r), row), (text, row)


@pytest.mark.parametrize("text", TYPED_EXPRESSIONS + MORE)
def test_compiled_equals_the_evaluator_on_decimals_and_times(text):
    typed = with_decimal_types(parse_expr(text), TYPES, "v").sql("spark")  # as a view's plan carries it
    for row in map(_typed_row, TYPED_ROWS):
        assert _outcome(expr_fn(typed), row) == _outcome(lambda r: ev(parse_expr(typed), r), row), (typed, row)


def test_columns_with_a_prefix_read_the_row_without_it():
    text = "l__x > 0 AND coalesce(l__s, 'n') LIKE '%b%'"
    for row in ROWS:
        prefixed = {"l__" + k: v for k, v in row.items()}
        assert expr_fn(text, "l__")(row) == ev(parse_expr(text), prefixed), row


@pytest.mark.parametrize("t", ["decimal(5,2)", "decimal(3,0)", "int", "float", None])
def test_conformer_equals_conform(t):
    for v in [decimal.Decimal("1.005"), decimal.Decimal("-12.345"), decimal.Decimal("999.995"), 7, 2.5, None]:
        assert _outcome(conformer(t, "v"), v) == _outcome(lambda x: conform(x, t, "v"), v), (t, v)


WHERES = [  # route WHEREs that batch_where evaluates with Arrow (each must compile)
    "q >= 1 AND q <= 1 + 10 AND s IN ('x', 'y')",
    "(p >= 1 AND s = 'x') OR (p BETWEEN -2 AND 0 AND q IN (-7, 2)) OR d < CAST('2024-01-02' AS DATE)",
    "NOT (s IN ('x', 'z')) OR p IS NULL",
    "NOT (d IS NULL) AND 0 < q AND p <> 2.5",
    "q != 3 AND (s < 'y' OR p > 99999999.98)",
    "p > 0.055 OR p = -1.25 OR p BETWEEN 0.05 - 0.01 AND 2.5",
]


def _batch(rows):
    import pyarrow as pa

    types = {"p": pa.decimal128(10, 2), "q": pa.int64(), "d": pa.date32(), "s": pa.string()}
    return pa.record_batch({n: pa.array([r[n] for r in rows], t) for n, t in types.items()})


@pytest.mark.parametrize("text", WHERES + TYPED_EXPRESSIONS + MORE)
def test_a_route_where_by_arrow_keeps_what_the_row_wise_where_keeps(text):
    from cbp.views.arrowwhere import batch_where

    typed = with_decimal_types(parse_expr(text), TYPES, "v").sql("spark")
    declared = (("p", "decimal(10,2)"), ("q", "int"), ("d", "date"), ("s", "string"))
    rows = [{k: v for k, v in r.items() if k != "t"} for r in map(_typed_row, TYPED_ROWS)]
    for prefix, batch_rows in (("", rows), ("l__", rows[::-1])):  # with a side's prefix too
        shown = parse_expr(typed).transform(
            lambda n, p=prefix: n.__class__(this=p + n.name) if n.key == "column" else n
        )
        mask = batch_where(shown.sql("spark"), prefix, _batch(batch_rows), declared)
        if text in WHERES:
            assert mask is not None, text
        if mask is None:
            continue
        for r, kept in zip(batch_rows, mask.to_pylist()):
            assert (kept is True) == (_outcome(expr_fn(typed), r)[0] is True), (text, r)
