"""More scalar functions of a view (cbp/views/morefns.py, regex.py): math (``sign``, ``pmod``, ``power``,
``sqrt``, ``exp``, ``ln``, ``log10``, ``log2``, ``log(b, x)``), ``nvl2``, ``substring_index``, ``instr``,
``locate``, ``initcap`` and Java regular expressions (``rlike``, ``regexp_extract``, ``regexp_replace``)
against Spark SQL on the same rows (NULLs, empty strings, unicode); each refusal's code."""

from __future__ import annotations

import datetime
import textwrap

import pytest
from test_sql_casts import _equal, _plain, _view_type, check_refused
from test_sql_views import _table, few_partitions  # noqa: F401 (few_partitions: a fixture)

SCHEMA = {"k": "int", "i": "int?", "x": "float?", "p": "decimal(10,2)?", "s": "string?", "u": "string?"}
SCHEMA |= {"d": "date?", "t": "timestamp?", "w": "string?"}
TYPES = {k: v.rstrip("?") for k, v in SCHEMA.items()}


def _row(k, i, x, p, s, u, d=None, t=None) -> dict:
    import decimal

    out = {"k": k, "i": i, "x": x, "p": None if p is None else decimal.Decimal(p), "s": s, "u": u}
    day = None if d is None else datetime.date(*d)
    stamp = None if t is None else datetime.datetime(*t, tzinfo=datetime.timezone.utc)
    text = None if stamp is None else stamp.strftime("%d.%m.%Y %H:%M:%S.%f")[:-3]
    return out | {"d": day, "t": stamp, "w": text}


ROWS = [
    _row(0, 7, 2.5, "12.50", "www.apache.org", "hELLO wORLD", (2024, 2, 29), (2024, 1, 31, 13, 4, 5, 120000)),
    _row(1, -7, -0.5, "-3.25", "a1b22c333", "ǆemal ßtraße  x", (2024, 3, 31), (2023, 12, 31, 0, 0, 1)),
    _row(2, 0, 0.0, "0.00", "", "", (1998, 12, 1), (2024, 3, 1, 23, 59, 59, 999999)),
    _row(3, None, None, None, None, None),
    _row(4, 3, 1e300, "99999999.99", "line\r\nnext\u2028x", " leading  spaces", (2024, 1, 1), (1999, 12, 31, 12)),
    _row(5, -3, -8.0, "1.00", "ÄÖü-éè 12", "ÉCOLE élève", (2023, 2, 28), (2024, 2, 29, 0, 30)),
]
FUNCTIONS = [
    "sign(x)",
    "signum(i)",
    "sign(p)",
    "pmod(i, 3)",
    "pmod(i, -3)",
    "pmod(x, 2)",
    "pmod(p, 2)",
    "pmod(-i, 4)",
    "power(x, 2)",
    "pow(i, 0.5)",
    "power(x, -1)",
    "power(x, 1.0E0 / 3)",
    "sqrt(x)",
    "sqrt(i)",
    "exp(x)",
    "exp(p)",
    "ln(x)",
    "log(i)",
    "log10(x)",
    "log2(i)",
    "log(2, x)",
    "log(i, 100)",
    "nvl2(s, 'set', 'null')",
    "nvl2(i, x, p)",
    "substring_index(s, '.', 2)",
    "substring_index(s, '.', -1)",
    "substring_index(s, '.', 0)",
    "substring_index(s, '', 1)",
    "substring_index(u, ' ', -2)",
    "instr(s, 'a')",
    "instr(s, '')",
    "instr(u, 'ß')",
    "locate('2', s)",
    "locate('2', s, 5)",
    "locate('', s, 3)",
    "locate('a', s, 0)",
    "initcap(u)",
    "initcap(s)",
    "s RLIKE '^[a-z]+\\\\d'",
    "rlike(s, 'a.c')",
    "regexp_like(s, '(?i)APACHE')",
    "u RLIKE '\\\\w+$'",
    "s RLIKE 'x$'",
    "s RLIKE '(?s)line.next'",
    "s RLIKE 'e.n'",
    "regexp_extract(s, '([a-z])(\\\\d+)', 2)",
    "regexp_extract(s, '([a-z])(\\\\d+)')",
    "regexp_extract(s, '(\\\\d+)|(z)', 2)",
    "regexp_extract(u, '\\\\s(\\\\S+)$', 1)",
    "regexp_extract(s, '[^.]+$', 0)",
    "regexp_replace(s, '\\\\d', '#')",
    "regexp_replace(s, '([a-z])(\\\\d)', '$2$1')",
    "regexp_replace(s, '(a)|(z)', '<$2\\\\$>')",
    "regexp_replace(u, ' +', ' ')",
    "regexp_replace(s, 'x*', '-')",
    "regexp_replace(s, '[.-]', '')",
    "regexp_replace(u, '(?i)e', 'E')",
    "regexp_replace(s, 'a++', 'A')",
    "date_format(t, 'yyyy-MM-dd HH:mm:ss')",
    "date_format(d, 'yy/M/d')",
    "date_format(t, 'EEE, d MMM yyyy h:mm a')",
    "date_format(t, 'EEEE MMMM dd D')",
    "date_format(t, 'HH:mm:ss.SSS')",
    "date_format(t, 'SSSSSS')",
    "date_format(d, 'yyyyMMdd')",
    "date_format(t, 'yyyy-MM-dd\\'T\\'HH:mm')",
    "date_format(t, 'h \\'o\\'\\'clock\\'')",
    "months_between(t, d)",
    "months_between(d, t)",
    "months_between(d, DATE '2024-01-31')",
    "months_between(t, TIMESTAMP '2023-11-30 12:00:00', false)",
    "months_between(d, '2024-02-15')",
    "to_timestamp(w, 'dd.MM.yyyy HH:mm:ss.SSS')",
    "to_timestamp(substring(w, 1, 10), 'dd.MM.yyyy')",
    "to_timestamp(concat(substring(w, 7, 4), substring(w, 4, 2), substring(w, 1, 2), 'T', substring(w, 12, 2)), "
    "'yyyyMMdd\\'T\\'H')",
    "bround(x, 0)",
    "bround(x)",
    "bround(p, 1)",
    "bround(p)",
    "bround(i, -1)",
    "bround(x * 10, -1)",
    "bround(2.5)",
    "bround(-0.125, 2)",
    "cbrt(x)",
    "cbrt(i)",
    "cbrt(p)",
    "regexp(s, '\\\\d+')",
    "regexp(u, '^[A-Z]')",
    "unix_timestamp(t)",
    "unix_timestamp(d)",
    "to_unix_timestamp(t)",
    "to_unix_timestamp(w, 'dd.MM.yyyy HH:mm:ss.SSS')",
    "unix_timestamp(substring(w, 1, 10), 'dd.MM.yyyy')",
    "unix_timestamp(date_format(t, 'yyyy-MM-dd HH:mm:ss'))",
    "from_unixtime(i * 100000000)",
    "from_unixtime(i, 'yyyy-MM-dd HH:mm')",
    "from_unixtime(unix_timestamp(t), 'EEE d MMM yyyy')",
    "make_date(2024, 2, 29)",
    "make_date(year(d), month(d), 1)",
    "next_day(d, 'MON')",
    "next_day(t, 'sunday')",
    "next_day(d, 'Fr')",
    "next_day(date_format(t, 'yyyy-MM-dd'), 'tue')",
    "extract(QUARTER FROM d)",
    "extract(WEEK FROM t)",
    "extract(W FROM d)",
    "extract(DAYOFWEEK FROM t)",
    "extract(DOW FROM d)",
    "extract(DAYOFWEEK_ISO FROM d)",
    "extract(DOW_ISO FROM t)",
    "extract(DOY FROM t)",
    "extract(HOUR FROM t)",
    "extract(HOUR FROM d)",
    "extract(MINUTE FROM t)",
    "extract(SECOND FROM t)",
    "extract(SECOND FROM d)",
    "extract(YEAROFWEEK FROM d)",
    "extract(YRS FROM t) * 10 + extract(QTR FROM t)",
    "date_part('week', t)",
    "date_part('SECS', t) * 2",
    "datepart('doy', d)",
    "datepart('Mon', t)",
    "timestampdiff(DAY, d, t)",
    "timestampdiff(MONTH, t, d)",
    "timestampdiff(QUARTER, DATE '2023-01-31', d)",
    "timestampdiff(WEEK, d, t)",
    "timestampdiff(YEAR, t, d)",
    "timestampdiff(HOUR, d, t)",
    "timestampdiff(MINUTE, t, d)",
    "timestampdiff(SECOND, d, t)",
    "timestampdiff(MILLISECOND, t, d)",
    "timestampdiff(MICROSECOND, d, t)",
    "datediff(MONTH, d, t)",
    "datediff(DAY, t, d) + 1",
    "timestampadd(HOUR, i, t)",
    "timestampadd(MONTH, i, d)",
    "timestampadd(DAY, i, t)",
    "dateadd(QUARTER, 1, t)",
    "timestampadd(WEEK, -i, d)",
    "timestampadd(MICROSECOND, i, t)",
    "timestampadd(MILLISECOND, i, t)",
    "timestampadd(YEAR, i, d)",
    "date_add(SECOND, i, d)",
    "timestampadd(DAYOFYEAR, i, d)",
    "timestampadd(MINUTE, i * 1000, t)",
    "extract(DOY FROM date_format(t, 'yyyy-MM-dd'))",
    "date_part('HOUR', date_format(t, 'yyyy-MM-dd HH:mm:ss'))",
    "timestampdiff(HOUR, date_format(d, 'yyyy-MM-dd'), t)",
    "timestampadd(DAY, 1, date_format(t, 'yyyy-MM-dd HH:mm:ss'))",
]


def _compiled(text: str):
    from cbp.views.exprs import infer, parse_expr, with_decimal_types

    node = parse_expr(text)
    return infer(node, TYPES), parse_expr(with_decimal_types(node, TYPES, "v").sql("spark"))


@pytest.mark.usefixtures("few_partitions")
def test_functions_type_and_evaluate_as_spark_does(spark):
    """Each function's type and its value on each row (by ``ev`` and by the compiled closure) against
    Spark SQL's over the same rows."""
    from cbp.views.compiled import node_fn
    from cbp.views.exprs import ev
    from cbp.views.vtypes import conform

    _table(spark, "fns_t", SCHEMA, ROWS)
    try:
        df = spark.sql(f"SELECT k, {', '.join(f'{e} AS e{i}' for i, e in enumerate(FUNCTIONS))} FROM fns_t")
        want_types = [_view_type(f.dataType) for f in df.schema.fields[1:]]
        compiled = [_compiled(e) for e in FUNCTIONS]
        assert [t for t, _ in compiled] == want_types
        bad = []
        for row in df.collect():
            env = ROWS[row["k"]]
            for text, (t, node), want in zip(FUNCTIONS, compiled, list(row)[1:], strict=True):
                for how, value in (("ev", ev(node, env)), ("compiled", node_fn(node)(env))):
                    got = _plain(conform(value, t, "v"))
                    if not _equal(got, want):
                        bad.append((how, text, env, got, want))
        assert not bad, "\n".join(map(str, bad))
    finally:
        spark.catalog.dropTempView("fns_t")


def _yaml(sql: str) -> str:
    schema = ", ".join(f"{k}: {t!r}" for k, t in SCHEMA.items())
    body = textwrap.indent(sql, "    ")
    return f"pipeline: v\nflows:\n  t: {{external: true, schema: {{{schema}}}}}\nviews:\n  v: |\n{body}\n"


REFUSED = [  # (SQL, what the message says): each view-unsupported, at its line and column
    ("SELECT s RLIKE '\\\\p{L}+' AS x FROM t", "\\p{...} classes"),
    ("SELECT s RLIKE '\\\\bword' AS x FROM t", "\\b"),
    ("SELECT s RLIKE '\\\\Qa.b\\\\E' AS x FROM t", "\\Q...\\E"),
    ("SELECT s RLIKE '[a-z&&[^aeiou]]' AS x FROM t", "class union or intersection"),
    ("SELECT s RLIKE '(?<name>a)' AS x FROM t", "named groups"),
    ("SELECT s RLIKE 'a(?m)b' AS x FROM t", "other than (?:"),
    ("SELECT s RLIKE '(?m)^a' AS x FROM t", "inline flags (?m)"),
    ("SELECT s RLIKE 'end\\\\Z' AS x FROM t", "\\Z"),
    ("SELECT s RLIKE u AS x FROM t", "not a string literal"),
    ("SELECT s RLIKE '(?<=a+)b' AS x FROM t", "Python cannot compile"),
    ("SELECT regexp_extract(s, '(a)', 2) AS x FROM t", "group 2 of a pattern with 1 groups"),
    ("SELECT regexp_replace(s, 'a', '$1') AS x FROM t", "group 1 of 0"),
    ("SELECT regexp_replace(s, '(a)', '${x}') AS x FROM t", "named groups"),
    ("SELECT regexp_replace(s, 'a', 'b', 2) AS x FROM t", "with a position"),
    ("SELECT regexp_extract(i, 'a', 0) AS x FROM t", "regexp_extract() of a int"),
    ("SELECT sqrt(s) AS x FROM t", "sqrt() of a string"),
    ("SELECT pmod(i, s) AS x FROM t", "pmod() of a string"),
    ("SELECT nvl2(i, s, 1) AS x FROM t", "nvl2() of string and int"),
    ("SELECT substring_index(s, '.', x) AS x FROM t", "substring_index() of a float"),
    ("SELECT unix_timestamp() AS x FROM t", "not deterministic"),
    ("SELECT make_date(s, 1, 1) AS x FROM t", "make_date() of a string"),
    ("SELECT next_day(d, i) AS x FROM t", "next_day() of a int"),
    ("SELECT from_unixtime(x) AS x FROM t", "from_unixtime() of a float"),
    ("SELECT regexp(s, u) AS x FROM t", "not a string literal"),
    ("SELECT unix_timestamp(s, 'yyyy-ww') AS x FROM t", "pattern letter 'ww'"),
    ("SELECT date_format(t, 'yyyy-ww') AS x FROM t", "date_format pattern letter 'ww'"),
    ("SELECT date_format(t, 'Q') AS x FROM t", "date_format pattern letter 'Q'"),
    ("SELECT date_format(t, s) AS x FROM t", "not a string literal"),
    ("SELECT date_format(i, 'yyyy') AS x FROM t", "date_format() of a int"),
    ("SELECT months_between(t, i) AS x FROM t", "months_between() of a int"),
    ("SELECT to_timestamp(s, 'yyyy-MM-dd hh:mm') AS x FROM t", "to_timestamp format letter 'hh'"),
    ("SELECT to_timestamp(s, 'HH:mm') AS x FROM t", "without yyyy, M and d"),
    ("SELECT to_timestamp(d, 'yyyy-MM-dd') AS x FROM t", "to_timestamp() of a date with a format"),
    ("SELECT extract(EPOCH FROM t) AS x FROM t", "EXTRACT(EPOCH FROM ...) (Spark has no such field"),
    ("SELECT extract(DAYOFMONTH FROM d) AS x FROM t", "EXTRACT(DAYOFMONTH FROM ...)"),
    ("SELECT date_part('millennium', d) AS x FROM t", "EXTRACT(MILLENNIUM FROM ...)"),
    ("SELECT date_part(s, d) AS x FROM t", "date_part() with a field that is not a string literal"),
    ("SELECT datepart('week', i) AS x FROM t", "EXTRACT(WEEK FROM ...) of a int"),
    ("SELECT timestampdiff(DAYOFYEAR, d, t) AS x FROM t", "timestampdiff() in 'DAYOFYEAR'"),
    ("SELECT datediff(HOUR, d, i) AS x FROM t", "timestampdiff() of a int"),
    ("SELECT timestampadd(DAY, x, d) AS x FROM t", "timestampadd() of a float quantity"),
    ("SELECT timestampadd(DAY, 1, x) AS x FROM t", "timestampadd() of a float"),
    ("SELECT dateadd(FORTNIGHT, 1, d) AS x FROM t", "timestampadd() in 'FORTNIGHT'"),
    ("SELECT d - d AS x FROM t", "an interval day"),
    ("SELECT t - d AS x FROM t", "an interval day to second"),
]


@pytest.mark.parametrize("sql,says", REFUSED, ids=[f"refused-{i}" for i in range(len(REFUSED))])
def test_a_function_a_view_cannot_compile_is_refused_at_load(tmp_path, sql, says):
    path = tmp_path / "v.yaml"
    path.write_text(_yaml(sql))
    check_refused(path, says)


ANSI_FAILING = [  # Spark's ANSI mode fails the query on these; the view's epoch fails with view-cast
    "make_date(2023, 2, 29 + k - k)",
    "next_day(d, 'xx')",
    "unix_timestamp(s, 'yyyy-MM-dd')",
    "timestampadd(DAY, 3000000000 + k - k, d)",
    "extract(WEEK FROM s)",
    "timestampdiff(DAY, s, t)",
]


@pytest.mark.usefixtures("few_partitions")
@pytest.mark.parametrize("text", ANSI_FAILING)
def test_a_time_function_ansi_fails_on_fails_the_view_too(spark, text):
    """ANSI: a day that does not exist, a day of week that is not one, text that does not parse: Spark
    fails the query, the view's expression raises ``view-cast`` naming the view."""
    from cbp.errors import UserCodeError
    from cbp.views.compiled import node_fn

    _, node = _compiled(text)
    with pytest.raises(UserCodeError) as e:
        node_fn(node)(ROWS[0])
    assert e.value.code == "view-cast" and "view 'v'" in str(e.value)
    _table(spark, "fns_t", SCHEMA, ROWS[:1])
    try:
        with pytest.raises(Exception):  # noqa: B017 - Spark's own error class varies with the function
            spark.sql(f"SELECT {text} AS e FROM fns_t").collect()
    finally:
        spark.catalog.dropTempView("fns_t")
