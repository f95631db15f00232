"""Delta sources with deletion vectors (issue 48): a table Spark writes with
``delta.enableDeletionVectors`` (its DELETE and UPDATE mark rows deleted instead of rewriting files).
delta-rs reads such a table's change data feed right, so a flow landed before the table got deletion
vectors follows its deletes and updates (the flow and a view over it equal Spark's read of the table);
its rows as of a version it cannot read, so a first sync of such a table is ``source-deletion-vectors``,
naming the table and what to do, and lands nothing (never rows a deletion vector removed)."""

from __future__ import annotations

import pytest
from conftest import cdf_source

import cbp
from cbp.errors import InputError

YAML = """
pipeline: dv
flows:
  src:
    external: true
    source: {delta: "SRC"}
views:
  per_v: SELECT v, count(*) AS n, sum(id) AS s FROM src GROUP BY v
"""


def _rows(recs: list[dict]) -> list[tuple]:
    return sorted((r["id"], r["v"]) for r in recs for _ in range(r.get("_diff", 1)))


#: Delta's DROP FEATURE deletionVectors also commits "tombstones" naming the dropped vectors' files (so that a
#: client that cannot read them never vacuums them too soon): the drop took 60-71 CPU seconds with them, 25 without
#: (docs/concepts/test-suite.md). cbp neither vacuums a source nor reads that commit (the fresh home's first sync
#: reads the rows after it), so the test drops the feature without them.
TOMBSTONES = "spark.databricks.delta.tableFeatures.fastDropFeature.generateDVTombstones.enabled"


def _drop_deletion_vectors(spark, uri: str) -> None:
    """``ALTER TABLE ... DROP FEATURE deletionVectors`` (the files they delete are purged, the protocol loses
    the feature), without the DV tombstones commit (:data:`TOMBSTONES`); the session's setting put back."""
    before = spark.conf.get(TOMBSTONES, None)
    spark.conf.set(TOMBSTONES, "false")
    try:
        spark.sql(f"ALTER TABLE delta.`{uri}` DROP FEATURE deletionVectors")
    finally:
        if before is None:
            spark.conf.unset(TOMBSTONES)
        else:
            spark.conf.set(TOMBSTONES, before)


def test_a_table_with_deletion_vectors_is_followed_and_a_first_sync_refused(spark, tmp_path):
    uri = str(tmp_path / "src")
    cdf_source(spark, uri, "id BIGINT, v STRING", "(1, 'a'), (2, 'b'), (3, 'a'), (4, 'b'), (5, 'c')", dv=False)
    path = tmp_path / "dv.yaml"
    path.write_text(YAML.replace("SRC", uri))
    p = cbp.Pipeline(str(path), str(tmp_path / "home"), spark=spark)
    p.run()  # landed from the table's rows: no deletion vectors yet
    spark.sql(f"ALTER TABLE delta.`{uri}` SET TBLPROPERTIES (delta.enableDeletionVectors = true)")
    spark.sql(f"DELETE FROM delta.`{uri}` WHERE id = 2")
    spark.sql(f"UPDATE delta.`{uri}` SET v = 'z' WHERE id = 3")
    log = [f for f in (tmp_path / "src" / "_delta_log").iterdir() if f.suffix == ".json"]
    assert any('"deletionVector"' in f.read_text() for f in log)  # the DELETE wrote one
    p.run()
    want = sorted((r["id"], r["v"]) for r in spark.read.format("delta").load(uri).collect())
    assert _rows(p.output("src", consolidated=True)) == want == [(1, "a"), (3, "z"), (4, "b"), (5, "c")]
    per_v = sorted((r["v"], r["n"], r["s"]) for r in p.output("per_v", consolidated=True))
    assert per_v == [("a", 1, 1), ("b", 1, 4), ("c", 1, 5), ("z", 1, 3)]

    fresh = cbp.Pipeline(str(path), str(tmp_path / "home2"), spark=spark)
    with pytest.raises(InputError) as e:  # a first sync reads the rows: refused, nothing landed
        fresh.run()
    assert e.value.code == "source-deletion-vectors" and uri in str(e.value)
    assert fresh.output("src", consolidated=True) == []
    _drop_deletion_vectors(spark, uri)  # what the error says to do
    fresh.run()
    assert _rows(fresh.output("src", consolidated=True)) == want
