"""A failed epoch that fixing the source unblocks (issue 48): a Delta source row whose value overflows a
view's int arithmetic (ANSI on) fails the run with ``view-overflow`` naming the view and the row, and
commits nothing; deleting the row in the source, or updating it to a good value, lets the next sync and
run succeed, every view equal to Spark SQL over the table. The pending increments then hold each bad
insert and its retraction in two files: they cancel before any record is evaluated (the Z-set rule,
cbp/engine/driver/signedinputs.py), on the small-epoch path and on the shuffled one.

Both fixes are made in one round (two bad rows, one deleted and one updated, then one run): the run can
succeed only if each bad insert is cancelled by its own retraction, the delete's and the update's, so one
failed round and one fixed round make the claim that two rounds made (each run after a fix pays a failed
first try and the consolidated second one, cbp.engine.driver.job.run_stage_epoch: the costliest epochs here)."""

from __future__ import annotations

import pytest
from conftest import cdf_source
from test_sql_views import _same, few_partitions  # noqa: F401 (few_partitions: a fixture)

import cbp

YAML = """
pipeline: unblock
flows:
  src:
    external: true
    source: {delta: "SRC"}
views:
  plus: SELECT id, v + 1 AS w FROM src WHERE v * 2 <> 4
  by_w: SELECT v + 1 AS w, count(*) AS n, sum(id) AS s FROM src GROUP BY v + 1
"""
VIEWS = {
    "plus": "SELECT id, v + 1 AS w FROM src WHERE v * 2 <> 4",
    "by_w": "SELECT v + 1 AS w, count(*) AS n, sum(id) AS s FROM src GROUP BY v + 1",
}
BAD = 2147483647  # v + 1 and v * 2 overflow a 32-bit int


def _check(spark, uri: str, pipes: list) -> None:
    """Each view of each pipeline against Spark SQL over the Delta table as it is now."""
    spark.read.format("delta").load(uri).createOrReplaceTempView("src")
    for view, sql in VIEWS.items():
        want = [tuple(r) for r in spark.sql(sql).collect()]
        for p in pipes:
            cols = list(p.spec.flows[view].schema.fields)
            got = [
                tuple(r[c] for c in cols) for r in p.output(view, consolidated=True) for _ in range(r.get("_diff", 1))
            ]
            assert _same(got, want), f"view {view}:\n cbp   {sorted(got)}\n spark {sorted(want)}"


def _fails(pipes: list) -> None:
    """Each pipeline's run fails with ``view-overflow`` naming a view and the row; nothing is committed."""
    for p in pipes:
        before = {v: p.output(v, consolidated=True) for v in VIEWS}
        with pytest.raises(cbp.CbpError) as e:
            p.run()
        msg = str(e.value)
        assert e.value.code == "view-overflow", msg
        assert any(f"view '{v}'" in msg for v in VIEWS) and str(BAD) in msg, msg
        assert {v: p.output(v, consolidated=True) for v in VIEWS} == before


@pytest.mark.usefixtures("few_partitions")
def test_deleting_or_updating_the_bad_source_row_unblocks_the_pipeline(spark, tmp_path):
    uri = str(tmp_path / "src")
    cdf_source(spark, uri, "id BIGINT, v INT", "(1, 10), (2, 20), (3, 2)")
    path = tmp_path / "unblock.yaml"
    path.write_text(YAML.replace("SRC", uri))
    small = cbp.Pipeline(str(path), str(tmp_path / "small"), spark=spark)  # the driver routes a small epoch
    shuffled = cbp.Pipeline(str(path), str(tmp_path / "shuffled"), spark=spark, small_epoch_records=0)
    pipes = [small, shuffled]
    try:
        for p in pipes:
            p.run()
        _check(spark, uri, pipes)
        spark.sql(f"INSERT INTO delta.`{uri}` VALUES (4, {BAD}), (5, 30), (6, {BAD})")
        _fails(pipes)
        spark.sql(f"DELETE FROM delta.`{uri}` WHERE id = 4")  # the user's fix: the row goes
        spark.sql(f"UPDATE delta.`{uri}` SET v = 7 WHERE id = 6")  # the other fix: a good value
        for p in pipes:
            p.run()  # succeeds only if both bad inserts cancel
        _check(spark, uri, pipes)
    finally:
        spark.catalog.dropTempView("src")
