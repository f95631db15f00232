"""A GROUP BY stage's first build written by Spark with no Python call per group (the engine's bulk
path, :func:`cbp.engine.driver.bulkjob.written`, as a join step's is: :mod:`cbp.views.joinbulk`):
Spark aggregates the input into one row per group (:mod:`cbp.views.bulk`'s count, value counts, sums),
and from it, in one row per group after one shuffle into the stage's state partitions (:func:`group_rows`):

- the *state row*: the group's key text, its ``_key``, hash and state partition, ``n``, ``c<i>``,
  ``s<i>`` and ``m<i>`` (the sorted JSON of ``[key_text, count]`` pairs), the row
  :func:`cbp.views.run.write_group` writes, by Spark SQL expressions;
- the *view row*: the aggregates' values as :func:`cbp.views.run._aggregates` gives them (a sum cast to
  its type, a decimal average divided as Spark's ``avg`` does, MIN/MAX/count(DISTINCT) over the
  values of a positive count), ``HAVING`` and the columns by Spark SQL, cast to the view's types.

One Arrow task per state partition (:func:`cbp.engine.task.bulkwrite.write_rows`) writes the state rows
as one state file and its index and the view rows as a file of the output increment.

What it covers (:func:`writes`), besides :meth:`cbp.views.bulk.GroupBuild.fits`: a ``GROUP BY`` (an
aggregate without one keeps its seed: its row is written even for no input), no INTERSECT/EXCEPT ALL
weight, an output not framed, ``HAVING`` and the columns Spark evaluates, multiset values and group keys
whose text Spark gives as Python's JSON does (:func:`cbp.views.joinbulk._value_text`: not a decimal of
scale above 6, nor a float). The others keep the seed path (:meth:`cbp.views.bulk.GroupBuild.seed`). A
key string with a character outside printable ASCII fails the job: the seed path runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .bulk import _MULTISET, GroupBuild, _aggregated, _base, _route, spark_sql, value_counts
from .joinbulk import _json_string, _list_text, _value_text
from .vtypes import avg_type, sum_type

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

__all__ = ["GroupRowsBuild", "writes", "group_rows", "attach"]


def _spark_type(t: str) -> str:
    """The Spark type cbp's scalar type ``t`` is stored as."""
    from ..spec.schema import RecordSchema

    return RecordSchema.parse({"x": t}).fields["x"].spark


def writes(plan: Any) -> bool:
    """Whether the stage epoch of ``plan`` (a :class:`~cbp.engine.task.plan.TaskPlan`) is written by
    :func:`group_rows` (see the module)."""
    gp = plan.stage.params["cbp_view"]
    if not gp["groups"] or gp.get("weight") or plan.out_frames:
        return False
    for fn, _, at in gp["aggs"]:
        if fn in _MULTISET and (at == "float" or (at.startswith("decimal(") and int(at.split(",")[1][:-1]) > 6)):
            return False
    try:
        for text in [e for _, e in gp["cols"]] + [t for t in (gp.get("having"),) if t is not None]:
            spark_sql(text)
    except Exception:
        return False
    return True


def group_rows(spark: SparkSession, plan: Any, frames: list[DataFrame]) -> DataFrame:
    """The build over ``frames[0]`` of the stage epoch of ``plan``: one row per group, each state partition
    in the Spark partition of its number, with its state row (``_key``, ``_h``, ``_q``, the state fields;
    ``_st``: a row to write) and its view row (``o__<name>``, the view's columns; ``_out``: a row to write),
    written by :func:`cbp.engine.task.bulkwrite.write_rows`.
    One row for both, so that the aggregation runs once (Spark pushes a filter below the exchange: two
    filtered branches would be two aggregations). ``ValueError`` when it does not apply."""
    from pyspark.sql import functions as F

    if str(spark.conf.get("spark.sql.ansi.enabled", "true")).lower() != "true":
        raise ValueError("the session is not ANSI")
    if not writes(plan):
        raise ValueError("a GROUP BY the seed path writes")
    stage, gp = plan.stage, plan.stage.params["cbp_view"]
    base, keys = _base(gp, _route(stage), frames[0])
    types = dict(base.dtypes)
    out, fields = _aggregated(gp, base, keys, stage.state_schema)
    for i, (fn, _, _) in enumerate(gp["aggs"]):
        if fn in _MULTISET:
            out = _with_values(out, base, keys, i, fn, types[f"x__{i}"])
    # the aggregation's reduce side in as many tasks as the stage has partitions, not Spark's shuffle
    # partitions (200 by default, no adaptive execution to coalesce them): 200 tasks cost the JVM more
    out = out.coalesce(max(1, stage.partitions))
    kt = _list_text([_value_text(f"`{k}`", types[k]) for k in keys])
    out = out.withColumn("k", F.expr(kt)).withColumn("_key", F.expr(_json_string("`k`")))
    out = out.where(_checked(gp, out))
    out = out.repartition(max(1, stage.partitions), "_key")  # in the stage's partitions by key
    state = ["k", *[f for f in fields if not f.startswith("g__")]]
    aggs = [_aggregate(i, fn, at).alias(f"a__{i}") for i, (fn, _, at) in enumerate(gp["aggs"])]
    out = out.select("_key", *state, *keys, *aggs)
    live = F.col("n") != 0
    shown = live & F.expr(spark_sql(gp["having"])) if gp.get("having") is not None else live
    out = out.select("*", live.alias("_st"), F.coalesce(shown, F.lit(False)).alias("_out"))
    fields_out = plan.out_schemas[gp["out"]].fields
    view = [  # evaluated for a row shown only (CASE WHEN): as the per-key path does
        F.when(F.col("_out"), F.expr(spark_sql(e)).cast(fields_out[n].spark)).alias(f"o__{n}") for n, e in gp["cols"]
    ]
    q = F.expr(f"pmod(hash(_key), {stage.partitions})")
    return out.select("_key", F.xxhash64("_key").alias("_h"), *state, q.alias("_q"), "_st", "_out", *view)


def _checked(gp: dict[str, Any], out: DataFrame) -> Column:
    """True for a group whose counts are not negative; the job fails on one that is (the per-key path
    then names the group)."""
    from pyspark.sql import functions as F

    counts = ["n", *[f"c{i}" for i in range(len(gp["aggs"]))]]
    counts += [f"_neg{i}" for i, (fn, _, _) in enumerate(gp["aggs"]) if fn in _MULTISET]
    bad = F.lit(False)
    for c in counts:
        bad = bad | (F.col(c) < 0)
    fail = F.raise_error(F.lit(f"view '{gp['out']}': more rows retracted than there were"))
    return F.when(bad, fail).otherwise(F.lit(True))


def _with_values(out: DataFrame, base: DataFrame, keys: list[str], i: int, fn: str, dtype: str) -> DataFrame:
    """``out`` with aggregate ``i``'s multiset (of aggregate function ``fn``): ``m<i>`` (its state text),
    and over the values of a positive count ``_d<i>`` (how many), ``_lo<i>`` (MIN), ``_hi<i>`` (MAX) or
    ``_sd<i>`` (their sum: the DISTINCT sum and average), ``_neg<i>`` (the lowest count, negative for a
    value retracted more often than added)."""
    from pyspark.sql import functions as F

    counts = value_counts(base, keys, i)
    pair = F.struct(F.expr(_list_text([_value_text("`_v`", dtype)])).alias("t"), F.col("_n").alias("n"))
    live = F.col("_n") > 0
    value = F.when(live, F.col("_v"))
    what = {"min": F.min(value).alias(f"_lo{i}"), "max": F.max(value).alias(f"_hi{i}")}
    got = [what.get(fn, F.sum(value).alias(f"_sd{i}"))] if fn != "count_distinct" else []
    per = counts.groupBy(*keys).agg(
        F.array_sort(F.collect_list(pair)).alias("_pairs"),
        F.count(F.when(live, 1)).alias(f"_d{i}"),
        *got,
        F.min("_n").alias(f"_neg{i}"),
    )
    pair_text = f"concat('[', {_json_string('e.t')}, ', ', CAST(e.n AS STRING), ']')"  # json.dumps's [text, n]
    text = f"concat('[', concat_ws(', ', transform(_pairs, e -> {pair_text})), ']')"
    per = per.withColumn(f"m{i}", F.expr(text)).drop("_pairs")
    per = per.toDF(*[f"_k{j}" for j in range(len(keys))], *per.columns[len(keys) :])
    on = [F.col(k).eqNullSafe(F.col(f"_k{j}")) for j, k in enumerate(keys)]
    joined = out.join(per, on=on, how="left").drop(*[f"_k{j}" for j in range(len(keys))])
    return joined.fillna({f"m{i}": "[]", f"_d{i}": 0, f"_neg{i}": 0})


def _aggregate(i: int, fn: str, at: str | None) -> Column:
    """Aggregate ``i``'s value from its group's row, as :func:`cbp.views.run._aggregates` gives it."""
    from pyspark.sql import functions as F

    c, s = F.col(f"c{i}"), F.col(f"s{i}")
    if fn == "count_star":
        return F.col("n")
    if fn == "count":
        return c
    if fn == "count_distinct":
        return F.col(f"_d{i}").cast("bigint")
    assert at is not None
    if fn in ("min", "max"):
        return F.col(f"_lo{i}" if fn == "min" else f"_hi{i}")
    if fn in ("sum_distinct", "avg_distinct"):
        c, s = F.col(f"_d{i}"), F.col(f"_sd{i}")
    if fn in ("sum", "sum_distinct"):
        value = s.cast(_spark_type(sum_type(at)))
    elif at.startswith("decimal("):  # Spark's avg: the sum divided by the count as decimal(20,0)
        value = (s.cast(_spark_type(sum_type(at))) / c.cast("decimal(20,0)")).cast(_spark_type(avg_type(at)))
    else:
        value = s.cast("double") / c.cast("double")
    return F.when(c != 0, value)


class GroupRowsBuild(GroupBuild):
    """:class:`cbp.views.bulk.GroupBuild` with the rows Spark writes (see the module)."""

    def writes(self, plan: Any) -> bool:
        """Whether :meth:`rows` writes the stage epoch of ``plan`` (:func:`writes`); the others get their seed
        rows written per group by :func:`cbp.views.bulk.seeded`."""
        return writes(plan)

    def rows(self, spark: SparkSession, plan: Any, frames: list[DataFrame]) -> DataFrame:
        """The state rows and view rows of the stage epoch of ``plan``, one row per group (:func:`group_rows`)."""
        return group_rows(spark, plan, frames)


def attach() -> None:
    """Give :func:`cbp.views.run.group` its bulk build (the engine's bulk path finds it on the translator:
    :class:`cbp.engine.driver.taskplan.BulkBuild`); called when a pipeline's views are compiled."""
    from .run import group

    group.bulk_build = GroupRowsBuild()  # type: ignore[attr-defined]
