"""A GROUP BY stage's first build computed by Spark SQL (the engine's bulk path,
:mod:`cbp.engine.driver.bulkjob`): over empty state, Spark aggregates the epoch's input rows into one
*seed* row per group (its row count, and per aggregate the count of non-NULL values and their sum,
or the counts of each distinct value for MIN, MAX and count(DISTINCT)); :func:`seeded`, the
translator of the seed rows, writes the group's state row and view row as
:func:`cbp.views.run.group` would have from the records one by one (same state format, same key text).
Most GROUP BYs skip the seeds' Python: Spark writes their state and view rows (:mod:`cbp.views.groupbulk`);
the seed path is for the others (an aggregate without GROUP BY, a key needing JSON escapes, ...).

What it covers (:meth:`GroupBuild.fits`): one input, group keys of type ``string``, ``int``,
``bool``, ``date`` or ``decimal``; MIN, MAX and count(DISTINCT) of those but ``bool``; expressions
Spark evaluates itself (not ``to_date`` with a format, which cbp evaluates in Python). A ``float``
group key or multiset is left to the per-key path (Spark groups ``-0.0`` with ``0.0``, cbp's key
text does not); a ``float`` sum is Spark's, added in another order (equal to 1e-9 relative).

    >>> spark_sql("cbp_view(cbp_decimal(`a` * `b`, 'decimal(31,4)', 'q6'), 'q6')")
    'CAST(`a` * `b` AS DECIMAL(31, 4))'
"""

from __future__ import annotations

import dataclasses
import datetime
import decimal
import json
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from sqlglot import exp, parse_one

from .exprs import DECIMAL_FN, VIEW_FN
from .intwidth import INT_FN, from_columns
from .run import MULTISET, RouteKey, _Group, write_group
from .vtypes import family, key_text

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from ..spec.objects import StageSpec
    from ..spec.schema import RecordSchema

__all__ = ["GroupBuild", "seeded", "spark_sql"]

_KEYS = ("string", "int", "bool", "date")  # and decimal(p,s)
_MULTISET = MULTISET  # MIN, MAX and the DISTINCT aggregates (count(DISTINCT a, b): at None, not keyable)


def spark_sql(text: str) -> str:
    """A view expression's Spark SQL text as Spark evaluates it: cbp's rounding of a decimal result to
    its type (``cbp_decimal``) a CAST to that type, which Spark's own result already has; ``cbp_view``
    (a failure names the view) and ``cbp_int`` (a narrow int's width, Spark's own) their argument.
    ``ValueError`` for another cbp function."""

    def plain(n: exp.Expr) -> exp.Expr:
        if isinstance(n, exp.Anonymous):
            name = n.name.lower()
            if name == DECIMAL_FN:  # the replacement's children are not visited again: transformed here
                to = exp.DataType.build(n.expressions[1].this, dialect="spark")
                return exp.Cast(this=n.expressions[0].transform(plain), to=to)
            if name == INT_FN and from_columns(n.expressions[0]):  # an int32 column: a bigint in the stored table
                raise ValueError(f"{name} of a narrow column is evaluated by cbp")
            if name in (VIEW_FN, INT_FN):  # Spark computes narrow ints in their width itself (cbp.views.intwidth)
                return n.expressions[0].transform(plain)
            if name.startswith("cbp_"):
                raise ValueError(f"{name} is evaluated by cbp")
        return n

    return parse_one(text, dialect="spark").transform(plain).sql(dialect="spark")


def _keyable(t: str | None) -> bool:
    return t is not None and (family(t) in _KEYS or t.startswith("decimal("))  # an int32 key: stored as a bigint


class GroupBuild:
    """The :class:`cbp.engine.driver.taskplan.BulkBuild` of :func:`cbp.views.run.group`."""

    def fits(self, stage: StageSpec) -> bool:
        """Whether Spark can build ``stage``'s state (see the module)."""
        plan = stage.params.get("cbp_view") or {}
        route = _route(stage)
        if plan.get("kind") != "group" or len(stage.inputs) != 1 or route is None or route.casts:
            return False
        if plan.get("ansi", True) is not True:
            return False  # compiled in non-ANSI mode (cbp.views.mode): its semantics are cbp's per-key path's
        if not all(_keyable(t) for t in plan["gtypes"]):
            return False
        for fn, _, at in plan["aggs"]:
            if fn in _MULTISET and (not _keyable(at) or at == "bool"):
                return False
            if fn in ("sum", "avg") and at.startswith("decimal(") and int(at.split(",")[1].rstrip(")")) > 6:
                return False  # Spark's product of such a decimal and an int may round (_decimal_sum)
        try:
            for text in _texts(plan, route):
                spark_sql(text)
        except Exception:
            return False
        return True

    def seed(
        self, spark: SparkSession, stage: StageSpec, frames: list[DataFrame]
    ) -> tuple[DataFrame, StageSpec, RecordSchema]:
        """The seed rows of ``stage`` over ``frames[0]`` (its input's rows), the stage that writes them,
        their schema. ``ValueError`` when the session is not ANSI (then cbp's evaluation, which
        fails where ANSI Spark does, and Spark's would differ)."""
        from ..spec.objects import InputSpec, KeyFunction
        from ..spec.schema import RecordSchema

        if str(spark.conf.get("spark.sql.ansi.enabled", "true")).lower() != "true":
            raise ValueError("the session is not ANSI")
        plan = stage.params["cbp_view"]
        route = _route(stage)
        assert route is not None
        frame, fields = _seed_frame(plan, route, frames[0], stage.state_schema)
        # the aggregation's reduce side in as many tasks as the stage has partitions, not Spark's
        # shuffle partitions (200 by default): each of its tasks starts the Python that routes the seeds
        frame = frame.coalesce(max(1, stage.partitions))
        key = RouteKey([f"`g__{j}`" for j in range(plan["groups"])], None, "", [], False)
        inp = InputSpec(stage.inputs[0].flow, KeyFunction(key.text, fn=key), None, True)
        path = f"{__name__}:seeded"
        seeds = dataclasses.replace(stage, translator=seeded, translator_path=path, inputs=(inp,))
        return frame, seeds, RecordSchema.parse(fields)


def _route(stage: StageSpec) -> Any:
    """The stage's input's :class:`cbp.views.run.RouteKey` (None: another RouteBy)."""
    rb = stage.inputs[0].route_by if stage.inputs else None
    fn = getattr(rb, "fn", None)
    return fn if isinstance(fn, RouteKey) and not fn.prefix and not fn.skip_null else None


def _texts(plan: dict[str, Any], route: Any) -> list[str]:
    """Every expression the build evaluates: group keys, WHERE, aggregates' arguments."""
    texts = [*route.exprs, *(w for w in (route.where, plan.get("where")) if w is not None)]
    return texts + [arg for _, arg, _ in plan["aggs"] if arg is not None]


def _seed_frame(
    plan: dict[str, Any], route: Any, rows: DataFrame, state: RecordSchema | None
) -> tuple[DataFrame, dict[str, str]]:
    """One row per group: ``g__j``, ``n``, ``c<i>``, ``s<i>`` or ``m<i>`` (JSON: ``[{"v": text, "n":
    count}, ...]``); and the seed's field types."""
    from pyspark.sql import functions as F

    base, keys = _base(plan, route, rows)
    out, fields = _aggregated(plan, base, keys, state)
    for i, (fn, _, _) in enumerate(plan["aggs"]):
        if fn in _MULTISET:
            out = _with_multiset(out, base, keys, i)
    cols = [*[F.col(k) for k in keys if k != "_one"], *[F.col(f) for f in fields if not f.startswith("g__")]]
    return out.select(*cols, F.lit(1).cast("bigint").alias("_diff")), fields


def _base(plan: dict[str, Any], route: Any, rows: DataFrame) -> tuple[DataFrame, list[str]]:
    """The input's rows the route does not skip, as ``g__j`` (the group keys), ``x__i`` (the aggregates'
    arguments), ``_ok`` (the stage's WHERE), ``_d`` (the ``_diff``); and the columns to group by."""
    from pyspark.sql import functions as F

    diff = F.coalesce(F.col("_diff"), F.lit(1)).cast("bigint")  # a null _diff is +1
    where = plan.get("where")
    ok = F.expr(spark_sql(where)) if where is not None else F.lit(True)
    if route.where is not None:
        rows = rows.where(F.expr(spark_sql(route.where)))
    gs = [F.expr(spark_sql(g)).alias(f"g__{j}") for j, g in enumerate(route.exprs)]
    xs = [F.expr(spark_sql(a)).alias(f"x__{i}") for i, (_, a, _) in enumerate(plan["aggs"]) if a is not None]
    base = rows.select(*gs, *xs, ok.alias("_ok"), diff.alias("_d"))
    keys = [f"g__{j}" for j in range(plan["groups"])] or ["_one"]
    if not plan["groups"]:
        base = base.withColumn("_one", F.lit(1))
    return base, keys


def _aggregated(
    plan: dict[str, Any], base: DataFrame, keys: list[str], state: RecordSchema | None
) -> tuple[DataFrame, dict[str, str]]:
    """One row per group of ``base`` (:func:`_base`) with ``n``, ``c<i>`` and ``s<i>`` (a multiset's
    ``m<i>`` is not in it, but in the field types)."""
    from pyspark.sql import functions as F

    assert state is not None
    d = F.col("_d")
    aggs: list[Column] = [F.coalesce(F.sum(F.when(F.col("_ok"), d)), F.lit(0)).alias("n"), F.count("*").alias("_rows")]
    fields: dict[str, str] = {f"g__{j}": f"{t}?" for j, t in enumerate(plan["gtypes"])}
    fields["n"] = "int"
    for i, (fn, arg, at) in enumerate(plan["aggs"]):
        x = F.col(f"x__{i}")
        counted = F.col("_ok") & x.isNotNull() if arg is not None else F.lit(False)
        aggs.append(F.coalesce(F.sum(F.when(counted, d)), F.lit(0)).alias(f"c{i}"))
        fields[f"c{i}"] = "int"
        if fn in _MULTISET:
            fields[f"m{i}"] = "string?"
            continue
        st = state.fields[f"s{i}"]
        zero = F.lit(0).cast(st.spark)
        if fn in ("sum", "avg") and at.startswith("decimal("):
            total = _decimal_sum(x, d, counted, st.spark)
        elif fn in ("sum", "avg"):
            total = F.coalesce(F.sum(F.when(counted, x * d)).cast(st.spark), zero)
        else:
            total = zero
        aggs.append(total.alias(f"s{i}"))
        fields[f"s{i}"] = st.scalar
    return base.groupBy(*keys).agg(*aggs).where(F.col("_rows") > 0).drop("_rows"), fields


def _decimal_sum(x: Column, d: Column, counted: Column, to: str) -> Column:
    """The ``d``-weighted sum of decimal ``x`` as type ``to``: ``x`` or ``-x`` per row (no product: a wider
    type per row, and Spark's arithmetic on it, costs), plus ``x * (d - sign(d))`` for the rare rows of
    ``|d| > 1`` (exact: a scale of at most 6 survives Spark's precision rules, :meth:`GroupBuild.fits`)."""
    from pyspark.sql import functions as F

    once = F.sum(F.when(counted, F.when(d > 0, x).otherwise(-x)))
    more = F.sum(F.when(counted & (F.abs(d) > 1), x * (d - F.signum(d).cast("bigint"))))
    return (F.coalesce(once, F.lit(0)) + F.coalesce(more, F.lit(0))).cast(to)


def value_counts(base: DataFrame, keys: list[str], i: int) -> DataFrame:
    """Per group (``keys``) and distinct value ``_v`` of aggregate ``i``'s argument counted (``_ok``, not NULL):
    its ``_diff``-weighted count ``_n``, where not 0 (a value retracted as often as added is gone)."""
    from pyspark.sql import functions as F

    x = F.col(f"x__{i}")
    counted = base.where(F.col("_ok") & x.isNotNull())
    return counted.groupBy(*keys, x.alias("_v")).agg(F.sum("_d").alias("_n")).where(F.col("_n") != 0)


def _with_multiset(out: DataFrame, base: DataFrame, keys: list[str], i: int) -> DataFrame:
    """``out`` with column ``m<i>``: each group's distinct values of aggregate ``i``'s argument (as text)
    and their counts, as JSON."""
    from pyspark.sql import functions as F

    counts = (
        value_counts(base, keys, i)
        .groupBy(*keys)
        .agg(F.to_json(F.collect_list(F.struct(F.col("_v").cast("string").alias("v"), F.col("_n").alias("n")))))
    )
    counts = counts.toDF(*[f"_k{j}" for j in range(len(keys))], f"m{i}")
    on = [F.col(k).eqNullSafe(F.col(f"_k{j}")) for j, k in enumerate(keys)]
    joined = out.join(counts, on=on, how="left")
    return joined.drop(*[f"_k{j}" for j in range(len(keys))])


def _value(text: str, t: str) -> Any:
    """A multiset value's text (Spark's cast to string) as the Python value of type ``t``."""
    if t == "int":
        return int(text)
    if t == "date":
        return datetime.date.fromisoformat(text)
    if t.startswith("decimal("):
        return decimal.Decimal(text)
    return text


def seeded(key: str, state: Iterator[dict[str, Any]], rows: Iterable[dict[str, Any]], *ticks: Any, out: Any) -> None:
    """The translator of a GROUP BY's seed rows (sums ``_diff``: a seed is the ``_diff``-weighted sum
    of the group's records): the group's state row and its view row, as :func:`cbp.views.run.group`
    writes them for a group with no state.

    Example: seed ``{"n": 3, "c0": 2, "s0": 5}`` of ``SELECT g, count(*), sum(x) ... GROUP BY g``
    writes state ``{"k": key, "n": 3, "c0": 0, "s0": 0, "c1": 2, "s1": 5}`` and the row ``(g, 3, 5)``."""
    plan = out.params["cbp_view"]
    for seed in rows:
        stored = {f: v for f, v in seed.items() if f[0] in "ncs" and f != "_diff"}
        for i, (fn, _, at) in enumerate(plan["aggs"]):
            if fn in _MULTISET:
                pairs = [(key_text([_value(e["v"], at)]), e["n"]) for e in json.loads(seed.get(f"m{i}") or "[]")]
                stored[f"m{i}"] = json.dumps(sorted(pairs))
        write_group(plan, key, None, _Group(plan["aggs"], stored), out)
