"""Spark SQL over a pipeline's tables, through Spark's own Delta connector (delta-spark).

Each stateful stage is a view of its current state records (as ``cbp state`` shows them) and
each flow a view of its records (as ``cbp output`` shows them), both read with
``spark.read.format("delta")`` at the versions the controller snapshot names, so a query sees
one committed moment of the pipeline. ``epoch`` pins stages to the state after one of their
epochs (Delta time travel), and the flows they produce to what that epoch wrote.

    >>> parse_epoch("3"), parse_epoch("url_count=2")
    ({'*': 3}, {'url_count': 2})
    >>> p = cbp.load("flows/url_count.yaml")                                      # doctest: +SKIP
    >>> p.sql("SELECT count(*) AS n FROM url_count WHERE count > 1").collect()    # doctest: +SKIP
    [Row(n=4)]
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Mapping, Optional, Union

from .engine.deltaread import latest_state, read_delta
from .engine.job import spark_ddl
from .engine.session import require_delta
from .errors import RuntimeStateError, UsageError
from .storage import INC, LAYOUT, SRC

if TYPE_CHECKING:
    from .controller import Controller

__all__ = ["state_df", "flow_df", "views", "run_sql", "parse_epoch", "view_name", "Epochs"]

#: ``epoch``: one stage epoch for every stateful stage (``N``), or per stage (``{stage: N}``).
Epochs = Union[None, int, str, Mapping[str, int]]
_EPOCH = re.compile(r"\s*(?:([A-Za-z_][A-Za-z0-9_]*)\s*=\s*)?(-?\d+)\s*\Z")
#: Top-level plans a read-only query may be besides queries (class names of Spark's logical plans).
_READ_ONLY_COMMANDS = ("Explain", "Describe", "Show")


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


def _stage_epochs(ctl: "Controller", epoch: Epochs) -> dict[str, int]:
    """Which stateful stage is pinned to which epoch (unknown stages and epochs are refused)."""
    if epoch is None:
        return {}
    if isinstance(epoch, str):
        epoch = parse_epoch(epoch)
    if isinstance(epoch, int):
        epoch = {"*": epoch}
    stateful = [s for s, st in ctl.spec.stages.items() if st.state_schema is not None]
    out: dict[str, int] = {}
    for stage, n in epoch.items():
        for s in (stateful if stage == "*" else [ctl.spec.stage(stage).name]):
            out[s] = int(n)
    for s, n in out.items():
        ctl.state_version(s, n)  # raises unknown-epoch for an epoch the stage has not run
    return out


def state_df(ctl: "Controller", spark: Any, stage: str, epoch: Optional[int] = None) -> Any:
    """A stage's state records after ``epoch`` (default: the latest) as a Spark DataFrame, sorted by key.

        >>> state_df(p.controller, spark, "url_count").orderBy("url").first()   # doctest: +SKIP
        Row(url='http://a/', count=2)
    """
    spec = ctl.spec.stage(stage)
    if spec.state_schema is None:
        raise UsageError(f"stage '{stage}' has no state (no 'state:' in the YAML)", code="no-state")
    require_delta(spark)
    version = ctl.state_version(stage, epoch)
    fields = [view_name(f) for f in spec.state_schema.fields]
    if version is None:
        return spark.createDataFrame([], spark_ddl(spec.state_schema))
    df = read_delta(spark, ctl.home.uri(LAYOUT.state(spec.name)), version)
    return latest_state(df).orderBy("_key").select(*fields)


def flow_df(ctl: "Controller", spark: Any, flow: str, epoch: Optional[int] = None) -> Any:
    """A flow's records (only those its producer wrote in ``epoch``, or the Nth feed of an external
    flow) as a Spark DataFrame, in increment order: the records of ``cbp output``.

        >>> flow_df(p.controller, spark, "counts", epoch=1).count()   # doctest: +SKIP
        3
    """
    from pyspark.sql import functions as F

    fl = ctl.spec.flow(flow)
    require_delta(spark)
    fields = [view_name(f) for f in fl.schema.fields]
    parts = []
    for version, incs in ctl.output_versions(fl.name, epoch).items():
        df = read_delta(spark, ctl.home.uri(LAYOUT.flow(fl.name)), version)
        parts.append(df.where(F.col(INC).cast("bigint").isin([int(i) for i in incs])))
    if not parts:
        return spark.createDataFrame([], spark_ddl(fl.schema))
    df = parts[0]
    for more in parts[1:]:
        df = df.unionByName(more)
    if epoch is not None and fl.frame_by is not None:  # a framed increment may hold records of several feeds/epochs
        df = df.where(F.col(SRC) == int(epoch))
    return df.orderBy(F.col(INC).cast("bigint")).select(*fields)


def views(ctl: "Controller", spark: Any, epoch: Epochs = None, query: Optional[str] = None) -> dict[str, Any]:
    """The DataFrames ``run_sql`` registers, by view name: each stateful stage's state, each flow's
    records (a flow named like a stage is ``flow_<name>``). Pinned stages (``epoch``) show their
    state after that epoch and the flows they produce what that epoch wrote. With ``query``, only
    the views whose names it mentions (each view reads its Delta log when it is made)."""
    pinned = _stage_epochs(ctl, epoch)
    wanted = (lambda name: True) if query is None else (lambda name: _mentions(query, name))
    out: dict[str, Any] = {}
    stateful = [s for s, st in ctl.spec.stages.items() if st.state_schema is not None]
    for s in stateful:
        if wanted(s):
            out[s] = state_df(ctl, spark, s, pinned.get(s))
    for f, fl in ctl.spec.flows.items():
        name = f"flow_{f}" if f in stateful else f
        if wanted(name):
            out[name] = flow_df(ctl, spark, f, pinned.get(fl.producer) if fl.producer is not None else None)
    return out


def _mentions(query: str, name: str) -> bool:
    """Whether ``name`` occurs in ``query`` as a word (Spark SQL names are case-insensitive).

        >>> _mentions("SELECT * FROM `Counts` c", "counts"), _mentions("SELECT counts_x FROM t", "counts")
        (True, False)
    """
    return re.search(rf"(?<![A-Za-z0-9_]){re.escape(name)}(?![A-Za-z0-9_])", query, re.IGNORECASE) is not None


def run_sql(ctl: "Controller", spark: Any, query: str, epoch: Epochs = None) -> Any:
    """Run a read-only Spark SQL query over the pipeline's views (:func:`views`); a DataFrame.

    Errors (codes): ``bad-sql`` (the query does not parse or names what does not exist),
    ``sql-not-query`` (it would change something), ``no-delta-jars``, ``unknown-stage``,
    ``unknown-epoch``.

        >>> run_sql(p.controller, spark, "SELECT sum(count) FROM url_count").first()[0]   # doctest: +SKIP
        40
    """
    require_delta(spark)
    _check_read_only(spark, query)
    for name, df in views(ctl, spark, epoch, query).items():
        df.createOrReplaceTempView(view_name(name))
    try:
        return spark.sql(query)
    except Exception as e:
        raise sql_error(e) from None


def _check_read_only(spark: Any, query: str) -> None:
    """Refuse a statement that is not a query (INSERT, DELETE, CREATE, SET ...) before it runs:
    ``spark.sql`` runs commands at once, and cbp's tables are written by cbp only."""
    try:
        plan = spark._jsparkSession.sessionState().sqlParser().parsePlan(query)
    except Exception as e:
        raise sql_error(e) from None
    jvm = spark.sparkContext._jvm
    cls = plan.getClass().getSimpleName()
    command = jvm.java.lang.Class.forName("org.apache.spark.sql.catalyst.plans.logical.Command")
    if (command.isInstance(plan) and not cls.startswith(_READ_ONLY_COMMANDS)) or "Insert" in cls:
        raise UsageError(f"cbp sql runs queries only (SELECT, WITH, VALUES, EXPLAIN, DESCRIBE, SHOW); this statement is a {cls}, "
                         "which would change tables or settings", code="sql-not-query")


def sql_error(exc: Exception) -> Exception:
    """The cbp error for a failed Spark SQL query: the user's query (``bad-sql``: Spark's SQLSTATE
    class 42, syntax or access, or 22, data) or anything else (``sql-failed``)."""
    from pyspark.errors import AnalysisException

    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
    state = ""
    try:
        state = (exc.getSqlState() or "") if hasattr(exc, "getSqlState") else ""  # type: ignore[attr-defined]
    except Exception:
        state = ""
    if isinstance(exc, AnalysisException) or state[:2] in ("42", "22"):
        return UsageError(f"the SQL query failed: {first}", code="bad-sql")
    return RuntimeStateError(f"the SQL query failed in Spark: {first}", code="sql-failed")
