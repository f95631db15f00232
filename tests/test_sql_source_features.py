"""A Delta source with a reader feature cbp's Delta reader (delta-rs) lacks (issue 48): Delta's type widening
(``delta.enableTypeWidening``, a column's type widened in place by ``ALTER COLUMN ... TYPE``). delta-rs reads
neither such a table's rows nor its change data, so the sync of a flow landed before the feature, and a first
sync, are ``source-reader-feature`` naming the table and the feature (not ``source-cdf-missing``, whose
message says the data was vacuumed), and land nothing; after ``DROP FEATURE typeWidening`` (what the error
says to do) the sync lands the rows and a view over the flow equals Spark SQL over the table. (A value past the
flow's 32-bit type is ``source-schema`` for the home landed before the widening: a schema change, not this.)"""

from __future__ import annotations

import pytest
from conftest import cdf_source

import cbp
from cbp.errors import InputError

YAML = """
pipeline: widened
flows:
  src:
    external: true
    source: {delta: "SRC"}
views:
  per_g: SELECT g, count(*) AS n, sum(v) AS s FROM src GROUP BY g
"""
VIEW = "SELECT g, count(*) AS n, sum(v) AS s FROM src GROUP BY g"


def _refused(p) -> None:
    with pytest.raises(InputError) as e:
        p.run()
    msg = str(e.value)
    assert e.value.code == "source-reader-feature" and "typeWidening" in msg and "vacuumed" not in msg.split("(")[0]


def _per_g(p) -> list[tuple]:
    return sorted((r["g"], r["n"], r["s"]) for r in p.output("per_g", consolidated=True))


def test_a_type_widened_table_is_refused_by_name_until_the_feature_is_dropped(spark, tmp_path):
    uri = str(tmp_path / "src")
    cdf_source(spark, uri, "g STRING, v INT", "('a', 1), ('b', 2), ('a', 3)")
    path = tmp_path / "widened.yaml"
    path.write_text(YAML.replace("SRC", uri))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    p.run()
    before = _per_g(p)
    assert before == [("a", 2, 4), ("b", 1, 2)]
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES (delta.enableTypeWidening = true)")
    spark.sql(f"ALTER TABLE delta.`{uri}` ALTER COLUMN v TYPE BIGINT")
    spark.sql(f"INSERT INTO delta.`{uri}` VALUES ('b', 30)")
    _refused(p)  # the change data of a table with the feature
    assert _per_g(p) == before  # nothing landed
    fresh = cbp.Pipeline(str(path), str(tmp_path / "fresh"), spark=spark)
    _refused(fresh)  # its rows, for a first sync
    assert fresh.output("src", consolidated=True) == []
    spark.sql(f"ALTER TABLE delta.`{uri}` DROP FEATURE typeWidening")
    try:
        spark.read.format("delta").load(uri).createOrReplaceTempView("src")
        want = sorted(tuple(r) for r in spark.sql(VIEW).collect())
        assert want == [("a", 2, 4), ("b", 2, 32)]
        for q in (p, fresh):
            q.run()
            assert _per_g(q) == want
    finally:
        spark.catalog.dropTempView("src")
