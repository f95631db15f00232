"""The Airflow side of Delta sources: a source flow's asset is watched for new table versions."""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

import cbp

pytest.importorskip("airflow", reason="needs apache-airflow (pip install -e '.[airflow]')")

YAML = """
pipeline: src_af
flows:
  orders:
    external: true
    source: {delta: SRC}
    schema: {order_id: int, customer: string}
  clicks: {external: true, schema: {url: string}}
  out: {schema: {customer: string}}
stages:
  s:
    translator: MOD:f
    signed: true
    inputs: [orders, clicks]
    outputs: [out]
    runnable: any
"""
MOD = "def f(key, state, orders, clicks, out):\n    pass\n"


def test_trigger_fires_once_per_new_version(make_pipeline, tmp_path):
    from cbp.airflow.config import DagConfig
    from cbp.airflow.dagfactory import pipeline_dag
    from cbp.airflow.sourcetrigger import SourceVersionAdded
    from cbp.airflow.triggers import IncrementLanded

    uri = str(tmp_path / "src")
    yaml = make_pipeline(YAML.replace("SRC", uri), MOD)
    home = str(tmp_path / "homes" / "src_af")
    t = SourceVersionAdded(home, "orders", uri, poke_interval=0.1)
    assert t.check() is None  # no table yet: nothing to announce
    write_deltalake(
        uri,
        pa.table({"order_id": [1, 2], "customer": ["a", "b"]}),
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    assert t.check() == {"flow": "orders", "table": uri, "version": 0, "landed": None}
    assert t.check() is None  # announced once
    p = cbp.load(yaml, home=home)
    p.sync()
    assert t.check() is None
    DeltaTable(uri).delete("order_id = 1")
    write_deltalake(uri, pa.table({"order_id": [3], "customer": ["c"]}), mode="append")
    assert t.check() == {"flow": "orders", "table": uri, "version": 2, "landed": 0}
    assert SourceVersionAdded(**t.serialize()[1]).check() is None  # a re-created trigger remembers
    p.sync()
    assert t.check() is None
    dag = pipeline_dag(
        str(yaml), DagConfig(flows=str(tmp_path), homes=str(tmp_path / "homes"), inbox=str(tmp_path / "inbox"))
    )
    triggers = {type(w.trigger).__name__ for a in dag.timetable.asset_condition.objects for w in a.watchers}
    assert triggers == {SourceVersionAdded.__name__, IncrementLanded.__name__}
