"""``cbp sql FLOW.yaml "SELECT ..." [--epoch N|STAGE=N] [--format jsonl|table]``: a Spark SQL query
over the stages' state and the flows (views by name, through Spark's Delta connector).

    $ cbp sql flows/url_count.yaml "SELECT * FROM url_count WHERE count > 1" --format table
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Callable
from typing import Any

from ..errors import CbpError
from ._open import open_pipeline
from ._terminal import json_line

__all__ = ["NAME", "add_parser", "run"]

NAME = "sql"


def add_parser(sub: Any, with_home: Callable[[argparse.ArgumentParser], None]) -> None:
    p = sub.add_parser(
        NAME, help="run a Spark SQL query (Spark's Delta connector) over the stages' state and the flows"
    )
    with_home(p)
    p.add_argument(
        "query", metavar="SQL", help="a query; stages (their state) and flows (their records) are views by name"
    )
    p.add_argument(
        "--epoch",
        metavar="N|STAGE=N",
        help="stages' state after their epoch N (Delta time travel); "
        "flows they produce: what that epoch wrote. STAGE=N (comma-separated) pins single stages",
    )
    p.add_argument("--format", choices=["jsonl", "table"], default="jsonl", help="JSON lines (default) or a text table")


def run(args: argparse.Namespace) -> int:
    from ..engine.driver.session import get_spark
    from ..sql import classic_context, sql_error

    pipe = open_pipeline(args)
    # py4j and pyspark's SQLQueryContextLogger would log a failed query as a traceback; cbp reports it (main)
    for name in ("", "SQLQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.CRITICAL)

    # this process runs no stage epoch, so Spark may coalesce the shuffles of the query (AQE) as usual
    # (and no SQL on files by path: the query reads the pipeline's views, see cbp.sqlcheck)
    def session() -> Any:  # started only for a statement cbp's own check let through (cbp.sqlcheck)
        spark = get_spark(conf={"spark.sql.adaptive.enabled": "true", "spark.sql.runSQLOnFiles": "false"})
        context = classic_context(spark)
        if context is not None:  # a task failing under the query is reported once, below, not as Java traces
            context.setLogLevel("OFF")
        return spark

    df = pipe.sql(args.query, args.epoch, session=session)
    try:
        # every row is held before the first is printed (a failure prints none), so one job collects them:
        # toLocalIterator ran a job per partition for no memory saved (in-process calls: -20% CPU, same output)
        got = df.collect()
        # the columns as the rows name them; only a result with no row asks them (on Connect, an AnalyzePlan)
        columns = list(got[0].__fields__) if got else list(df.columns)
        rows = [_plain(r.asDict(recursive=True)) for r in got]
    except CbpError:
        raise
    except Exception as e:  # the query failed while it ran (a bad cast, a division by zero with ANSI on, ...)
        raise sql_error(e) from None
    if args.format == "jsonl":
        for row in rows:
            print(json_line(row))
    else:
        _table(columns, rows)
    return 0


def _table(columns: list[str], rows: list[dict[str, Any]]) -> None:
    """The rows as a text table: a header, a rule, one line a row, and the count."""
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip())
    print("  ".join("-" * w for w in widths))
    for r in cells:
        print("  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip())
    print(f"({len(rows)} row{'s' if len(rows) != 1 else ''})")


def _plain(value: Any) -> Any:
    """A query result value in the JSON form ``cbp output`` prints (docs/reference/schema-types.md):
    decimals as exact text, timestamps in UTC with ``Z``, dates as ISO text, binary as base64.

    >>> import datetime, decimal
    >>> _plain({"d": decimal.Decimal("1.50"), "t": datetime.datetime(2024, 5, 1, 12, tzinfo=datetime.timezone.utc)})
    {'d': '1.50', 't': '2024-05-01T12:00:00.000000Z'}
    """
    import datetime

    from ..spec.typedvalues import to_json

    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, datetime.datetime) and value.tzinfo is None:
        value = value.astimezone(datetime.timezone.utc)  # PySpark gives a TIMESTAMP in the local zone, naive
    if isinstance(value, datetime.time):
        return value.isoformat()
    try:
        return to_json(value)
    except TypeError:
        return value


def _cell(value: Any) -> str:
    return "NULL" if value is None else value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
