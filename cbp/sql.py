"""Spark SQL over a pipeline's tables, through Spark's own Delta connector (delta-spark).

Each stateful stage is a view of its current state records (as ``cbp state`` shows them) and
each flow a view of its records (as ``cbp output`` shows them, with a ``_diff`` column: +1, or -1
for a retraction), both read with
``spark.read.format("delta")`` at the versions the controller snapshot names, so a query sees
one committed moment of the pipeline. ``epoch`` pins stages to the state after one of their
epochs (Delta time travel), and the flows they produce to what that epoch wrote.

    >>> parse_epoch("3"), parse_epoch("url_count=2")
    ({'*': 3}, {'url_count': 2})

Example (a pipeline fed and run; Spark with the delta-spark jars)::

    p = cbp.load("flows/url_count.yaml")
    p.sql("SELECT count(*) AS n FROM url_count WHERE count > 1").collect()
    # [Row(n=4)]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, NamedTuple

from .engine.driver.deltaread import latest_state, read_delta
from .engine.driver.job import spark_ddl
from .engine.driver.session import require_delta
from .errors import RuntimeStateError, UsageError
from .spec.schema import DIFF
from .sqlcheck import Checked, check
from .storage import INC, LAYOUT, SRC

if TYPE_CHECKING:
    from .controller import Parts

__all__ = [
    "state_df",
    "flow_df",
    "view_df",
    "sql_views",
    "views",
    "view_names",
    "prepare",
    "run_sql",
    "parse_epoch",
    "view_name",
    "Epochs",
    "classic_context",
]

#: ``epoch``: one stage epoch for every stateful stage (``N``), or per stage (``{stage: N}``).
Epochs = int | str | Mapping[str, int] | None
_EPOCH = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)\s*=\s*)?(-?\d+)\s*\Z")
_COPIES = "_cbp_copies"  # a SQL view's row multiplicity (view_df)


def parse_epoch(text: str) -> dict[str, int]:
    """``N`` (every stage, key ``*``) or ``STAGE=N`` (several separated by ``,``) as a dict.

    >>> parse_epoch("a=1, b=2")
    {'a': 1, 'b': 2}
    """
    out: dict[str, int] = {}
    for item in text.split(","):
        m = _EPOCH.match(item)
        if not m:
            raise UsageError(f"--epoch {text!r}: give N, or STAGE=N (several separated by ',')", code="usage")
        out[m.group(1) or "*"] = int(m.group(2))
    return out


def view_name(name: str) -> str:
    """The name as a quoted Spark SQL identifier (backticks; a reserved word works too).

    >>> view_name("order"), view_name("a`b")
    ('`order`', '`a``b`')
    """
    return "`" + name.replace("`", "``") + "`"


def _stage_epochs(parts: Parts, epoch: Epochs) -> dict[str, int]:
    """Which stateful stage is pinned to which epoch (unknown stages and epochs are refused)."""
    if epoch is None:
        return {}
    if isinstance(epoch, str):
        epoch = parse_epoch(epoch)
    if isinstance(epoch, int):
        epoch = {"*": epoch}
    stateful = [s for s, st in parts.live.spec.stages.items() if st.state_schema is not None]
    out: dict[str, int] = {}
    for stage, n in epoch.items():
        for s in stateful if stage == "*" else [parts.live.spec.stage(stage).name]:
            out[s] = int(n)
    for s, n in out.items():
        parts.reads.state_version(s, n)  # raises unknown-epoch for an epoch the stage has not run
    return out


def state_df(parts: Parts, spark: Any, stage: str, epoch: int | None = None) -> Any:
    """A stage's state records after ``epoch`` (default: the latest) as a Spark DataFrame, sorted by key.

    Example::

        state_df(p.parts, spark, "url_count").orderBy("url").first()
        # Row(url='http://a/', count=2)
    """
    spec = parts.live.spec.stage(stage)
    if spec.state_schema is None:
        raise UsageError(f"stage '{stage}' has no state (no 'state:' in the YAML)", code="no-state")
    require_delta(spark)
    version = parts.reads.state_version(stage, epoch)
    fields = [view_name(f) for f in spec.state_schema.fields]
    if version is None:
        return spark.createDataFrame([], spark_ddl(spec.state_schema))
    df = read_delta(spark, parts.home.uri(LAYOUT.state(spec.name)), version)
    parts_n = spec.partitions  # a shuffle of the stage's partition count, not spark.sql.shuffle.partitions
    rows = latest_state(df, partitions=parts_n, row_key=bool(spec.row_key))  # no schema asked of the server
    return rows.repartitionByRange(parts_n, "_key").sortWithinPartitions("_key").select(*fields)


def flow_df(parts: Parts, spark: Any, flow: str, epoch: int | None = None, upto: bool = False) -> Any:
    """A flow's records (only those its producer wrote in ``epoch``, or ``upto``: in every epoch up
    to it; or the Nth feed of an external flow) as a Spark DataFrame, in increment order: the
    records of ``cbp output``.

    Example::

        flow_df(p.parts, spark, "counts", epoch=1).count()
        # 3
    """
    from pyspark.sql import functions as F

    fl = parts.live.spec.flow(flow)
    require_delta(spark)
    fields = [view_name(f) for f in fl.schema.fields]
    pieces = []
    n_incs = 0
    for version, incs in parts.reads.output_versions(fl.name, epoch, upto=upto).items():
        n_incs += len(incs)
        df = read_delta(spark, parts.home.uri(LAYOUT.flow(fl.name)), version)
        pieces.append(df.where(F.col(INC).cast("bigint").isin([int(i) for i in incs])))
    if not pieces:
        return spark.createDataFrame([], spark_ddl(fl.schema) + f", {DIFF} bigint")
    df = pieces[0]
    for more in pieces[1:]:
        df = df.unionByName(more, allowMissingColumns=True)  # versions from before the table got _diff lack it
    if (
        epoch is not None and not upto and fl.frame_by is not None
    ):  # a framed increment may hold records of several feeds/epochs
        df = df.where(F.col(SRC) == int(epoch))
    diff = F.coalesce(F.col(DIFF).cast("bigint"), F.lit(1)) if DIFF in df.columns else F.lit(1).cast("bigint")
    inc = F.col(INC).cast("bigint")
    ordered = df.repartitionByRange(max(1, min(n_incs, 200)), inc).sortWithinPartitions(inc)  # not 200 tasks
    return ordered.select(*fields, diff.alias(DIFF))


def view_df(parts: Parts, spark: Any, flow: str, epoch: int | None = None) -> Any:
    """A SQL view's contents (``views:``, :mod:`cbp.views`): its flow's records consolidated (each
    row as often as its ``_diff`` sums to), as of its stage's ``epoch`` (default: the latest).

    Example::

        view_df(p.parts, spark, "by_region").orderBy("region").first()
        # Row(region='north', n=3, total=190.0)
    """
    from pyspark.sql import functions as F

    fields = [view_name(f) for f in parts.live.spec.flow(flow).schema.fields]
    df = flow_df(parts, spark, flow, epoch, upto=epoch is not None)
    n = F.sum(DIFF).alias(_COPIES)
    kept = df.groupBy(*fields).agg(n).where(F.col(_COPIES) > 0)  # a retracted row's sum is 0
    copies = F.explode(F.array_repeat(F.lit(True), F.col(_COPIES).cast("int")))
    return kept.select(*fields, copies.alias(_COPIES)).select(*fields)


def sql_views(parts: Parts) -> dict[str, str]:
    """The pipeline's SQL views: flow -> the stage that maintains it (a stage a view compiled to,
    :mod:`cbp.views`; the flows and stages generated inside a view, ``v__join``, are not views)."""
    out = {}
    for f, fl in parts.live.spec.flows.items():
        st = parts.live.spec.stages.get(fl.producer or "")
        if st is not None and "__" not in f and str(st.translator_path or "").startswith("cbp.views.run:"):
            out[f] = st.name
    return out


class _View(NamedTuple):
    """One view: its name, what it shows, its DataFrame at an epoch, its pinned epoch, and a
    check (no Spark) that raises ``unknown-epoch`` for an epoch it does not have."""

    name: str
    what: str
    make: Callable[[int | None], Any]
    at: int | None
    probe: Callable[[int], Any]


def _view_makers(parts: Parts, spark: Any, pinned: Mapping[str, int]) -> list[_View]:
    """The views of the pipeline (each stateful stage's state, each flow's records; a SQL view's
    contents by its name, its records as ``<view>__changes``, its stage's state as ``<view>__state``)."""
    stateful = [s for s, st in parts.live.spec.stages.items() if st.state_schema is not None]
    sql = sql_views(parts)
    named = [
        _View(
            f"{s}__state" if s in sql else s,
            f"the state of stage '{s}'",
            partial(state_df, parts, spark, s),
            pinned.get(s),
            partial(parts.reads.state_version, s),
        )
        for s in stateful
    ]
    for f, fl in parts.live.spec.flows.items():
        at = pinned.get(fl.producer) if fl.producer is not None else None
        if f in sql:
            probe = partial(parts.reads.output_versions, f, upto=True)
            named.append(_View(f, f"view '{f}'", partial(view_df, parts, spark, f), at, probe))
        named.append(
            _View(
                f"{f}__changes" if f in sql else f"flow_{f}" if f in stateful else f,
                f"flow '{f}'",
                partial(flow_df, parts, spark, f),
                at,
                partial(parts.reads.output_versions, f),
            )
        )
    return named


def view_names(parts: Parts) -> list[str]:
    """The names of the views :func:`run_sql` registers (no Spark needed)."""
    return [v.name for v in _view_makers(parts, None, {})]


def views(parts: Parts, spark: Any, epoch: Epochs = None, query: str | None = None) -> dict[str, Any]:
    """The DataFrames ``run_sql`` registers, by view name: each stateful stage's state, each flow's
    records (a flow named like a stage is ``flow_<name>``). Pinned stages (``epoch``) show their
    state after that epoch and the flows they produce what that epoch wrote. With ``query``, only
    the views whose names it mentions (each view reads its Delta log when it is made)."""
    pinned = _stage_epochs(parts, epoch)
    wanted = (lambda name: True) if query is None else (lambda name: _mentions(query, name))
    seen: dict[str, str] = {}
    out: dict[str, Any] = {}
    for name, what, make, at, _ in _view_makers(parts, spark, pinned):
        if not wanted(name):
            continue
        other = seen.setdefault(name.lower(), what)
        if other != what:
            raise UsageError(
                f"the view {name} would be both {other} and {what} (Spark SQL names are case-insensitive); rename one "
                "in the YAML, or read them with 'cbp state' / 'cbp output'",
                code="sql-ambiguous",
            )
        out[name] = make(at)
    return out


def prepare(parts: Parts, query: str, epoch: Epochs = None) -> Checked:
    """Check ``query`` (:func:`cbp.sqlcheck.check`) and the epochs it and ``epoch`` name, without
    Spark: an unknown view, a statement that writes, bad syntax and an epoch not run are refused here."""
    _stage_epochs(parts, epoch)
    checked = check(view_names(parts), query)
    probes = {v.name: v.probe for v in _view_makers(parts, None, {})}
    for name, n in checked.travel:
        probes[name](n)  # raises unknown-epoch
    return checked


def _travel_views(parts: Parts, spark: Any, checked: Checked) -> dict[str, Any]:
    """The DataFrames of the views ``VERSION AS OF`` names, by their registered names."""
    makers = {v.name: v.make for v in _view_makers(parts, spark, {})}
    return {registered: makers[name](n) for (name, n), registered in checked.travel.items()}


def _mentions(query: str, name: str) -> bool:
    """Whether ``name`` occurs in ``query`` as a word (Spark SQL names are case-insensitive).

    >>> _mentions("SELECT * FROM `Counts` c", "counts"), _mentions("SELECT counts_x FROM t", "counts")
    (True, False)
    """
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", query, re.IGNORECASE) is not None


def run_sql(parts: Parts, spark: Any, query: str, epoch: Epochs = None, checked: Checked | None = None) -> Any:
    """Run a read-only Spark SQL query over the pipeline's views (:func:`views`); a DataFrame.

    Errors (codes): ``bad-sql`` (the query does not parse or fails), ``sql-unknown-view``,
    ``sql-not-query`` (it would change something), ``sql-not-allowed``, ``sql-time-travel``,
    ``no-delta-jars``, ``unknown-stage``, ``unknown-epoch``. ``checked``: what :func:`prepare` gave.
    Spark gets only a statement :func:`prepare` let through (sqlglot, :mod:`cbp.sqlcheck`; no JVM
    parser: on Spark Connect ``spark.sql`` runs a command the moment it gets it).

    Example::

        run_sql(p.parts, spark, "SELECT sum(count) FROM url_count").first()[0]
        # 40
    """
    checked = checked or prepare(parts, query, epoch)
    require_delta(spark)
    for name, df in {**views(parts, spark, epoch, checked.query), **_travel_views(parts, spark, checked)}.items():
        df.createOrReplaceTempView(view_name(name))
    try:
        return spark.sql(checked.query)
    except Exception as e:
        raise sql_error(e) from None


def classic_context(spark: Any) -> Any:
    """The SparkContext of a classic session, or None on Spark Connect (whose ``sparkContext``
    raises: a Connect client has no JVM).

        >>> classic_context(object()) is None
        True
    """
    try:
        return spark.sparkContext
    except Exception:  # pyspark.errors.PySparkNotImplementedError on Connect
        return None


def sql_error(exc: Exception) -> Exception:
    """The cbp error for a failed Spark SQL query: the user's query (``bad-sql``: Spark's SQLSTATE
    class 42, syntax or access, 22, data, or P0, ``raise_error``) or anything else (``sql-failed``).
    A query that fails while its rows are fetched comes, on a classic session, as py4j's error
    around Spark's: the message and SQLSTATE are those of the innermost Spark error in its causes;
    on Spark Connect the error carries its SQLSTATE itself."""
    from pyspark.errors import AnalysisException

    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    state = ""
    try:
        state = (exc.getSqlState() or "") if hasattr(exc, "getSqlState") else ""
    except Exception:
        state = ""
    cause = _spark_cause(exc)
    if cause is not None:
        first, state = cause
    if "TIME_TRAVEL" in first:  # a form of time travel cbp's own check did not see (sqlglot did not parse it)
        return UsageError(
            f"the SQL query failed: {first}; cbp's views travel by epoch: write 'VIEW VERSION AS OF N' "
            "or use --epoch N",
            code="sql-time-travel",
        )
    if isinstance(exc, AnalysisException) or state[:2] in ("42", "22", "P0"):
        return UsageError(f"the SQL query failed: {first}", code="bad-sql")
    return RuntimeStateError(f"the SQL query failed in Spark: {first}", code="sql-failed")


def _spark_cause(exc: Exception) -> tuple[str, str] | None:
    """(first line of the message, SQLSTATE) of the innermost error with a SQLSTATE among the
    causes of a py4j error, else of its innermost cause; None without a JVM error."""
    je = getattr(exc, "java_exception", None)
    if je is None:
        return None
    found: tuple[str, str] | None = None
    last: tuple[str, str] | None = None
    try:
        for _ in range(32):
            if je is None:
                break
            msg = str(je.getMessage() or je.getClass().getName())
            line = next((ln.strip() for ln in msg.splitlines() if ln.strip()), str(je.getClass().getName()))
            state = ""
            try:
                state = str(je.getSqlState() or "")
            except Exception:  # not a SparkThrowable
                state = ""
            last = (line, state)
            if state:
                found = last
            je = je.getCause()
    except Exception:  # the JVM is gone
        pass
    return found or last
