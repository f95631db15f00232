"""A view's 32-bit floats as Spark has them (issue 48): ``round``/``bround`` of a ``float`` typed ``float`` and
computed as Spark's (on the float's double, the result narrowed to 32 bits), and a ``float`` cast to a string
printed as Java's ``Float.toString`` (``0.1``, not the double's ``0.10000000149011612``). Each expression's type
and value (by ``ev`` and compiled) against Spark SQL's over the same floats; no pipeline, one Spark query.

Java 17's ``Float.toString`` (the session's Java here) sometimes writes more digits than the shortest that read
back as the float (``1.53748398E10`` for ``1.537484E10``: JDK-4511638, fixed in Java 19); cbp writes the shortest
(Python's and Java 19's): those are checked to be the same float, the rest equal."""

from __future__ import annotations

import math
import random

import pytest
from test_sql_views import few_partitions  # noqa: F401 (few_partitions: a fixture)

from cbp.views.casts import _float32

SPECIAL = [0.1, 0.125, 2.5, 1.005, 0.3, 0.35, 2.675, 1e7, 12345678.0, 1.5e-3, 9.999e-4, 1e-3, 123456.789, 3.4e38]
SPECIAL += [1e-45, 16777217.0, -0.0, 100.0, -7.25, 5e-324]
EXPRESSIONS = [
    "round(f, 2)",
    "round(f)",
    "round(f, -1)",
    "bround(f, 1)",
    "bround(f, 3)",
    "CAST(f AS STRING)",
    "CAST(round(f, 1) AS STRING)",
    "CAST(f * f AS STRING)",
]


def _floats() -> list[float]:
    rnd = random.Random(48)
    return SPECIAL + [rnd.uniform(-1000, 1000) for _ in range(80)] + [10 ** rnd.uniform(-12, 30) for _ in range(60)]


def _cbp(text: str) -> tuple[str, list]:
    """The expression's view type (with its width) and its values on :func:`_floats` by ``ev`` and compiled."""
    from cbp.views import intwidth
    from cbp.views.compiled import node_fn
    from cbp.views.exprs import ev, infer, parse_expr, with_decimal_types

    types = {"f": "float32"}
    node = parse_expr(text)
    t = intwidth.typed(node, infer(node, types), types, infer)
    compiled = parse_expr(with_decimal_types(node, types, "v").sql("spark"))
    values = []
    for x in _floats():
        row = {"f": _float32(x)}
        a, b = ev(compiled, row), node_fn(compiled)(row)
        assert a == b or (a != a and b != b), (text, x, a, b)
        values.append(a)
    return t, values


def _same_float_text(got: str, want: str, java: int) -> bool:
    """Equal, or (Java before 19) Spark's longer digits of the same 32-bit float."""
    if got == want:
        return True
    digits = [len(s.split("E")[0].lstrip("-").replace(".", "").strip("0")) for s in (got, want)]
    return java < 19 and digits[0] < digits[1] and _float32(float(got)) == _float32(float(want))


@pytest.mark.usefixtures("few_partitions")
def test_round_and_string_of_a_float32_as_spark(spark):
    # the Java that formats Spark's strings (the server's on Connect, where the session has no sparkContext)
    java = int(
        spark.sql("SELECT java_method('java.lang.System', 'getProperty', 'java.specification.version')").first()[0]
    )
    values = ", ".join(f"({i}, {x!r}D)" for i, x in enumerate(_floats()))
    cols = ", ".join(f"{e} AS e{j}, typeof({e}) AS t{j}" for j, e in enumerate(EXPRESSIONS))
    query = f"SELECT i, {cols} FROM (SELECT i, CAST(x AS FLOAT) AS f FROM VALUES {values} AS v(i, x)) ORDER BY i"
    rows = spark.sql(query).collect()
    longer = 0
    for j, text in enumerate(EXPRESSIONS):
        t, got = _cbp(text)
        assert {rows[0][f"t{j}"]} == {r[f"t{j}"] for r in rows}
        assert t == {"float": "float32", "string": "string"}[rows[0][f"t{j}"]], (text, t)
        for x, g, r in zip(_floats(), got, rows, strict=True):
            want = r[f"e{j}"]
            if isinstance(want, str):
                assert _same_float_text(g, want, java), (text, x, g, want)
                longer += g != want
            else:
                assert g == want or (math.isnan(g) and math.isnan(want)), (text, x, g, want)
    assert longer < len(_floats()) // 4  # Java 17's longer digits: a few (14 of 160 for CAST(f AS STRING))
