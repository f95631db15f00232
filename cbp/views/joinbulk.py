"""An inner, LEFT, semi or anti join stage's first build computed by Spark (the engine's bulk path,
:mod:`cbp.engine.driver.bulkjob`), with no Python call per row: over empty state, Spark consolidates
each side's rows by join key and row (the ``_diff``-weighted count of each distinct row), and

- the *state rows* (per key and side, each distinct row's text and count: ``{"s", "r", "n"}``, the
  rows :func:`cbp.views.joinrun.join` writes) get their key text, row key and hashes from Spark SQL
  (the texts :func:`cbp.views.vtypes.key_text` and :func:`cbp.engine.task.routing.encode_key` give,
  the hashes of :mod:`cbp.engine.task.keyedstate`), are shuffled into the stage's state partitions
  and written by one task per partition, as Arrow batches, with the partition's index
  (:func:`cbp.engine.task.bulkwrite.write_state`);
- the *output records* (the joined rows, filtered and projected, ``_diff`` the product of the two
  rows' counts) are Spark SQL's join of the consolidated sides, written as the output increment by
  Arrow tasks (:func:`cbp.engine.task.bulkwrite.write_output`).

The tasks' results are those of a grouped epoch (:class:`cbp.engine.common.protocol.TaskResult`),
committed by the controller: a failed job commits nothing, and the epoch runs again on the per-key path.

What it covers (:meth:`JoinBuild.fits`): an inner, ``LEFT``, semi or anti join step, with or without match
conditions (``ON`` conditions besides the key of an outer join, correlated ones of a subquery: then Spark's
join has them too, and a kept row's state has ``m``, the count of the other side's rows it matches), keys
without casts, every expression one Spark evaluates. At run time (:meth:`JoinBuild.write`, ``ValueError``
before any job): key and row values of type ``string``, ``int``, ``bool``, ``date`` or ``decimal``
of scale at most 6 (whose text Spark gives as Python's JSON does), an output flow not framed. A string
with a character outside printable ASCII fails the job (Python's JSON escapes it): the per-key path runs.

    >>> print(_list_text([_value_text("`x`", "bigint"), _value_text("`b`", "boolean")]))
    concat('[', concat_ws(', ', coalesce(CAST(`x` AS STRING), 'null'), coalesce(CAST(`b` AS STRING), 'null')), ']')
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .bulk import spark_sql
from .run import RouteKey

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from ..spec.objects import StageSpec

__all__ = ["JoinBuild", "attach"]

_HOW = ("inner", "left", "semi", "anti")  # the steps built here
_INTS = ("tinyint", "smallint", "int", "bigint", "boolean")


def _json_string(x: str) -> str:
    """SQL of the JSON string of text ``x`` (an SQL expression) with only ``\\`` and ``"`` to escape."""
    return f"concat('\"', replace(replace({x}, '\\\\', '\\\\\\\\'), '\"', '\\\\\"'), '\"')"


def _value_text(x: str, dtype: str) -> str:
    """SQL of the JSON text :func:`cbp.views.vtypes.key_text` gives a value of Spark type ``dtype``
    (``null`` for NULL); ``ValueError`` for a type whose text Spark does not give alike."""
    if dtype in _INTS:
        text = f"CAST({x} AS STRING)"
    elif dtype == "string":  # Python's JSON escapes other characters (\\uXXXX): such a row fails the job
        bad = "raise_error('cbp bulk join: a string with a character to escape')"
        text = f"CASE WHEN {x} RLIKE '[^ -~]' THEN {bad} ELSE {_json_string(x)} END"
    elif dtype == "date":
        text = f"concat('\"', CAST({x} AS STRING), '\"')"
    elif dtype.startswith("decimal(") and int(dtype.split(",")[1].rstrip(")")) <= 6:
        plain = f"CAST({x} AS STRING)"
        if not dtype.endswith(",0)"):  # Decimal.normalize(): no trailing zeros, no trailing point
            plain = f"regexp_replace(regexp_replace({plain}, '0+$', ''), '\\\\.$', '')"
        text = f"concat('\"', {plain}, '\"')"
    else:
        raise ValueError(f"a value of type {dtype}")
    return f"coalesce({text}, 'null')"


def _list_text(items: list[str]) -> str:
    """SQL of ``json.dumps`` of a list of values whose JSON texts are ``items``."""
    return f"concat('[', concat_ws(', ', {', '.join(items)}), ']')" if items else "'[]'"


class JoinBuild:
    """The :class:`cbp.engine.driver.taskplan.BulkBuild` of :func:`cbp.views.joinrun.join` (inner joins)."""

    def fits(self, stage: StageSpec) -> bool:
        """Whether Spark can build ``stage``'s state and output (see the module)."""
        plan = (stage.params or {}).get("cbp_view") or {}
        if plan.get("kind") != "join" or plan.get("how", "inner") not in _HOW:
            return False
        if plan.get("ansi", True) is not True or len(stage.inputs) != 2 or not stage.row_key:
            return False
        routes = [_route(stage, i) for i in (0, 1)]
        if any(r is None or any(c is not None for c in r.casts) for r in routes) or not routes[1].skip_null:
            return False
        texts = [e for _, e in plan["cols"]] + [t for t in (plan.get("filter"), plan.get("match")) if t is not None]
        for r in routes:
            texts += [*r.exprs, *([r.where] if r.where is not None else [])]
        try:
            for t in texts:
                spark_sql(t)
        except Exception:
            return False
        return True

    def seed(self, spark: SparkSession, stage: StageSpec, frames: list[DataFrame]) -> Any:
        """Not used: :meth:`rows` gives the state and output itself."""
        raise ValueError("a join's bulk build writes its files itself")

    def rows(self, spark: SparkSession, plan: Any, frames: list[DataFrame]) -> tuple[DataFrame, DataFrame]:
        """The build over ``frames`` (each input's rows) of the stage epoch of ``plan`` (a
        :class:`~cbp.engine.task.plan.TaskPlan`): its state rows, in the stage's partitions, and its
        output records (written by :mod:`cbp.engine.task.bulkwrite`'s tasks). ``ValueError`` when the
        build does not apply."""
        if str(spark.conf.get("spark.sql.ansi.enabled", "true")).lower() != "true":
            raise ValueError("the session is not ANSI")
        if plan.out_frames:
            raise ValueError("an output framed by a field")
        jp = plan.stage.params["cbp_view"]
        sides = [_side(jp, plan.stage, s, frames[s]) for s in (0, 1)]
        counted = _counted(jp, sides)
        return _state_rows(counted, plan.stage.partitions, jp.get("match") is not None), _joined(jp, plan, sides)


def _route(stage: StageSpec, i: int) -> Any:
    """Input ``i``'s :class:`cbp.views.run.RouteKey` (None: another RouteBy)."""
    fn = getattr(stage.inputs[i].route_by, "fn", None)
    return fn if isinstance(fn, RouteKey) else None


def _side(jp: dict[str, Any], stage: StageSpec, s: int, rows: DataFrame) -> DataFrame:
    """Side ``s``'s rows consolidated by join key and row: ``_key`` (the key's text as the engine
    stores it), its held fields by their prefixed names, ``_n`` (the row's count) and ``_r`` (the row's
    text, made once per distinct row, after the shuffle)."""
    from pyspark.sql import functions as F

    route = _route(stage, s)
    prefix = (jp.get("prefixes") or ["l__", "r__"])[s]
    types = dict(rows.dtypes)
    rows = rows.select(
        *[F.col(f"`{c}`").alias(prefix + c) for c in rows.columns if c != "_diff"],
        F.coalesce(F.col("_diff"), F.lit(1)).cast("bigint").alias("_d"),
    )
    if route.where is not None:
        rows = rows.where(F.expr(spark_sql(route.where)))
    keys = [F.expr(spark_sql(e)) for e in route.exprs]
    if keys and route.skip_null:  # a NULL key matches nothing: the rows of a side not kept are dropped
        rows = rows.where(_all_not_null(keys))
    held = [prefix + f for f in jp["fields"][s]]
    kt = _list_text([_key_item(rows, spark_sql(e)) for e in route.exprs])
    rows = rows.select(F.expr(_json_string(kt)).alias("_key"), *[F.col(f"`{h}`") for h in held], "_d")
    # in the stage's partitions by key, not Spark's shuffle partitions (200 by default): the aggregation
    # and the join below keep that partitioning (no other shuffle), and the output's tasks are as many.
    # The state rows and the output read this one exchange (Spark reuses it: both need every column of it)
    rows = rows.repartition(max(1, stage.partitions), "_key")
    # a row's fields are its identity (each type here has one text per value): grouped by them, hashed
    out = rows.groupBy("_key", *[F.col(f"`{h}`") for h in held]).agg(F.sum("_d").alias("_n"))
    fail = F.raise_error(F.lit(f"view '{jp['out']}': a row retracted more often than it was added"))
    out = out.where(F.when(F.col("_n") < 0, fail).otherwise(F.col("_n") > 0))
    rt = _list_text([_value_text(f"`{h}`", types[h[len(prefix) :]]) for h in held])
    return out.select("_key", F.expr(rt).alias("_r"), *[F.col(f"`{h}`") for h in held], "_n")


def _all_not_null(keys: list[Any]) -> Any:
    cond = keys[0].isNotNull()
    for k in keys[1:]:
        cond = cond & k.isNotNull()
    return cond


def _key_item(rows: DataFrame, sql: str) -> str:
    """The JSON text SQL of key expression ``sql`` over ``rows`` (its type as Spark infers it)."""
    dtype = rows.select(_expr(sql)).dtypes[0][1]
    return _value_text(f"({sql})", dtype)


def _expr(sql: str) -> Any:
    from pyspark.sql import functions as F

    return F.expr(sql)


def _counted(jp: dict[str, Any], sides: list[DataFrame]) -> list[DataFrame]:
    """The sides as their state rows have them: with ``_m`` when the step has match conditions, as
    :func:`cbp.views.joinrun.join` writes it: for each row of the kept (left) side of an outer, semi or
    anti join the count of the right side's rows it matches (their ``_n`` summed), 0 for the right side's
    rows; NULL (not written) for an inner join's."""
    from pyspark.sql import functions as F

    if jp.get("match") is None:
        return sides
    if jp.get("how", "inner") == "inner":
        return [side.withColumn("_m", F.lit(None).cast("bigint")) for side in sides]
    left, right = sides[0], sides[1].drop("_r").withColumnRenamed("_n", "_n1").withColumnRenamed("_key", "_k1")
    on = (F.col("_key") == F.col("_k1")) & F.expr(spark_sql(jp["match"]))
    # each left row with the right rows it matches, summed: one join, and an aggregation within the sides'
    # partitions by key (a join back by row would shuffle both again, into Spark's shuffle partitions)
    kept = left.join(right, on, "left").groupBy("_key", "_r", "_n")
    counts = kept.agg(F.coalesce(F.sum("_n1"), F.lit(0).cast("bigint")).alias("_m"))
    return [counts, sides[1].withColumn("_m", F.lit(0).cast("bigint"))]


def _state_rows(sides: list[DataFrame], partitions: int, counted: bool = False) -> DataFrame:
    """Both sides' state rows with the engine's columns (``_key``, ``_h``, ``_rk``) and ``_q``, their
    state partition, each partition in one Spark partition of that number (``counted``: and ``m``,
    :func:`_counted`'s)."""
    from pyspark.sql import functions as F

    parts = []
    m = [F.col("_m").alias("m")] if counted else []
    for s, side in enumerate(sides):
        rk = F.concat(F.lit(f"[{s},"), F.expr(_json_string("_r")), F.lit("]"))
        parts.append(side.select("_key", rk.alias("_rk"), F.lit(s).cast("bigint").alias("s"), "_r", "_n", *m))
    rows = parts[0].unionByName(parts[1])
    top = F.shiftleft(F.shiftright(F.xxhash64("_key"), 32), 32)
    rows = rows.select(
        "_key",
        (top + F.xxhash64("_rk").bitwiseAND(F.lit(0xFFFFFFFF).cast("bigint"))).alias("_h"),
        "_rk",
        "s",
        F.col("_r").alias("r"),
        F.col("_n").alias("n"),
        *([F.col("m")] if m else []),
        F.lit(None).cast("string").alias("d"),  # an inner join's directory field (none written: cbp.views.joinrun)
        F.expr(f"pmod(hash(_key), {partitions})").alias("_q"),
    )
    # repartition(P, _key): Spark partition pmod(hash(_key), P), the key's state partition (the sides'
    # partitioning already: no shuffle); its task sorts its rows by hash (cbp.engine.task.bulkwrite)
    return rows.repartition(partitions, "_key")


def _joined(jp: dict[str, Any], plan: Any, sides: list[DataFrame]) -> DataFrame:
    """The output records: the consolidated sides joined by key, filtered, projected, conformed."""
    from pyspark.sql import functions as F

    how = jp.get("how", "inner")
    left = sides[0].withColumnRenamed("_n", "_n0").drop("_r")
    right = sides[1].withColumnRenamed("_n", "_n1").drop("_r").withColumnRenamed("_key", "_k1")
    on = F.col("_key") == F.col("_k1")
    if jp.get("match") is not None:  # a right row matches a left one when these hold too
        on = on & F.expr(spark_sql(jp["match"]))
    if how in ("semi", "anti"):  # the left rows as they are, while their key has a right row (semi) or none
        matched = right if jp.get("match") is not None else right.select("_k1").distinct()
        rows = left.join(matched, on, "left_semi" if how == "semi" else "left_anti")
        weight = F.col("_n0")
    else:  # a LEFT JOIN's row without a match: the right side's fields NULL, its count 1
        rows = left.join(right, on, "inner" if how == "inner" else "left")
        weight = F.col("_n0") * F.coalesce(F.col("_n1"), F.lit(1).cast("bigint"))
    if jp.get("filter") is not None:
        rows = rows.where(F.expr(spark_sql(jp["filter"])))
    fields = plan.out_schemas[jp["out"]].fields
    cols = [F.expr(spark_sql(e)).cast(fields[n].spark).alias(n) for n, e in jp["cols"]]
    return rows.select(*cols, weight.alias("_diff"))


def attach() -> None:
    """Give :func:`cbp.views.joinrun.join` its bulk build; called when a pipeline's views are compiled."""
    from .joinrun import join

    join.bulk_build = JoinBuild()  # type: ignore[attr-defined]
