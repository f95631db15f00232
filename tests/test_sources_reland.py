"""A Delta source written without change data feed (issue 46): the first sync warns
(``source-no-cdf``), a later version written without it is refused with a hint that names what
works, and a re-land (``cbp sync --reland FLOW`` / ``Pipeline.sync(reland=...)``) lands the table's
current snapshot as signed changes against what was landed; then changes flow again. Every result
is compared with a from-scratch groupby over the table's rows. Also ``cbp run --no-sync``."""

from __future__ import annotations

import logging
import os
import random
import subprocess
import sys

import pytest
from conftest import ROOT
from crash_harness import cli_here
from deltalake import DeltaTable, write_deltalake
from test_sources import CDF, MOD, YAML, _change, _expected, _orders, _totals

import cbp
from cbp.controller.sources import parse_feed_id, signed_difference
from cbp.errors import InputError

ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _rows(p) -> list:
    """The flow's consolidated contents as sorted tuples (each record as often as its multiplicity)."""
    out = []
    for r in p.output("orders", consolidated=True):
        n = r.pop("_diff", 1)
        out += [(r["order_id"], r["customer"], r["amount"])] * n
    return sorted(out)


def _table_rows(uri: str) -> list:
    df = DeltaTable(uri).to_pandas()
    return sorted(zip(df["order_id"].tolist(), df["customer"].tolist(), df["amount"].tolist()))


def _cli(*args: str):
    cmd = [sys.executable, "-m", "cbp.cli", *args]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)


def test_signed_difference_retracts_adds_and_keeps():
    was = [{"k": 1}, {"k": 2, "_diff": 2}, {"k": 4}]
    recs, diffs = signed_difference(was, [{"k": 2}, {"k": 3}, {"k": 3}, {"k": 4}])
    assert sorted(zip([r["k"] for r in recs], diffs)) == [(1, -1), (2, -1), (3, 1), (3, 1)]
    assert signed_difference(was, [{"k": 1}, {"k": 2}, {"k": 2}, {"k": 4}]) == ([], [])
    assert parse_feed_id("delta:/t@7~reland3") == ("/t", 7)


def test_table_without_cdf_warns_then_relands_and_follows(spark, make_pipeline, tmp_path, caplog):
    uri = str(tmp_path / "src")
    rnd = random.Random(7)
    write_deltalake(uri, _orders(list(range(15)), rnd))  # no change data feed
    yaml = make_pipeline(YAML.replace("SRC", uri), MOD)
    p = cbp.load(yaml, home=str(tmp_path / "home"))
    with caplog.at_level(logging.WARNING, logger="cbp"):
        [first] = p.sync()
    assert first.versions == [0] and len(first.warnings) == 1 and first.warnings[0].startswith("[source-no-cdf]")
    assert "--reland orders" in first.warnings[0] and any("[source-no-cdf]" in r.getMessage() for r in caplog.records)
    DeltaTable(uri).delete("order_id < 4")  # version 1: no change data
    dt = DeltaTable(uri)
    dt.alter.set_table_properties(CDF)  # version 2: as the hint says
    for attempt in range(2):  # today's failure mode: every later sync and run refuses, the same way
        with pytest.raises(InputError) as e:
            p.sync() if attempt == 0 else p.run()
        assert e.value.code == "source-no-cdf" and "version 1" in str(e.value)
        assert f"cbp sync {yaml} --reland orders" in str(e.value) and "enableChangeDataFeed" in str(e.value)
    assert p.feeds("orders") == 1
    [re] = p.sync(reland=["orders"])
    assert re.relanded and re.versions == [2] and re.records == 4 and re.feeds == [2] and not re.warnings
    assert sorted(r["_diff"] for r in p.output("orders", epoch=2)) == [-1] * 4  # the deleted rows retracted, no more
    assert _rows(p) == _table_rows(uri)
    p.run()
    assert _totals(p) == _expected(uri)
    next_id = [100]
    for v in range(1, 7):  # appends, MERGE updates, deletes: through the change data feed again
        _change(uri, v, rnd, next_id)
        reports = p.run() if v % 2 else (p.sync(), p.run())[1]
        assert reports and _totals(p) == _expected(uri), f"after change {v}"
    assert _rows(p) == _table_rows(uri)
    [again] = p.sync(reland=["orders"])  # nothing changed since: nothing lands
    assert again.feeds == [] and again.line().startswith("orders: re-landed nothing")


def test_reland_without_cdf_and_from_the_cli(spark, make_pipeline, tmp_path):
    """A re-land works with the change data feed still off (and warns that later syncs need it);
    ``cbp sync --reland`` prints the re-land and the warning; ``--reland`` of a flow that is no
    source is refused."""
    uri = str(tmp_path / "src")
    rnd = random.Random(9)
    write_deltalake(uri, _orders(list(range(10)), rnd))
    yaml = make_pipeline(YAML.replace("SRC", uri), MOD)
    home = str(tmp_path / "home")
    r = _cli("sync", str(yaml), "--home", home)
    assert r.returncode == 0 and "[source-no-cdf]" in r.stderr and "--reland orders" in r.stderr, r.stderr
    dt = DeltaTable(uri)
    dt.update(predicate="order_id = 3", updates={"amount": "1000"})
    write_deltalake(uri, _orders([50, 51], rnd), mode="append")
    p = cbp.load(yaml, home=home)
    [re] = p.sync(reland="orders")
    assert re.records == 4 and "[source-no-cdf]" in re.warnings[0]  # -old row 3, +new row 3, +the 2 appended
    assert sorted(r.get("_diff", 1) for r in p.output("orders", epoch=2)) == [-1, 1, 1, 1]
    p.run()
    assert _totals(p) == _expected(uri) and _rows(p) == _table_rows(uri)
    DeltaTable(uri).delete("order_id = 50")
    DeltaTable(uri).alter.set_table_properties(CDF)
    r = _cli("sync", str(yaml), "--home", home, "--reland", "orders")
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr
    assert r.stdout.startswith("orders: re-landed version 4 of ")
    _change(uri, 0, rnd, [200])
    p.run()
    assert _totals(p) == _expected(uri) and _rows(p) == _table_rows(uri)
    r = _cli("sync", str(yaml), "--home", home, "--reland", "totals")
    assert r.returncode != 0 and "[not-source]" in r.stderr


def test_run_no_sync(spark, make_pipeline, tmp_path):
    """``cbp run --no-sync`` runs on what was landed (as ``run(sync=False)``); ``cbp run`` syncs first. The
    commands' own code (``cbp.cli.main``, their exit codes and stderr) in the test's process, on its Spark
    session (``crash_harness.cli_here``): a ``cbp`` process of its own for each was four Spark drivers."""
    uri = str(tmp_path / "src")
    rnd = random.Random(3)
    write_deltalake(uri, _orders(list(range(8)), rnd), configuration=CDF)
    yaml = make_pipeline(YAML.replace("SRC", uri), MOD)
    home = str(tmp_path / "home")
    assert cli_here(["sync"], home, yaml).returncode == 0
    landed = _expected(uri)
    write_deltalake(uri, _orders([20, 21, 22], rnd), mode="append")
    r = cli_here(["run", "--no-sync", "--quiet"], home, yaml)
    assert r.returncode == 0, r.stderr
    p = cbp.load(yaml, home=home)
    assert p.feeds("orders") == 1 and _totals(p) == landed != _expected(uri)
    r = cli_here(["run", "--no-sync", "--follow"], home, yaml)
    assert r.returncode == 2 and "[usage]" in r.stderr and "--no-sync" in r.stderr
    assert cli_here(["run", "--quiet"], home, yaml).returncode == 0
    assert p.feeds("orders") == 2 and _totals(p) == _expected(uri)


def test_reland_of_a_keyed_flow(make_pipeline, tmp_path):
    """A keyed flow re-landed: a changed row is an update of its key (-old, +new), a deleted row a
    delete, a new row an insert; the flow's signed records add up to the table's rows, and the
    change data feed goes on from the re-landed version."""
    uri = str(tmp_path / "src")
    rnd = random.Random(5)
    write_deltalake(uri, _orders(list(range(8)), rnd))
    text = YAML.replace("SRC", uri).replace("    source:", "    key: [order_id]\n    source:")
    p = cbp.load(make_pipeline(text, MOD), home=str(tmp_path / "home"))
    assert p.sync()[0].warnings
    dt = DeltaTable(uri)
    dt.update(predicate="order_id = 2", updates={"customer": "'moved'"})
    DeltaTable(uri).delete("order_id = 5")
    write_deltalake(uri, _orders([30], rnd), mode="append")
    DeltaTable(uri).alter.set_table_properties(CDF)
    [re] = p.sync(reland=["orders"])
    assert re.records == 4 and not re.warnings  # -2 +2 (moved), -5, +30
    assert _rows(p) == _table_rows(uri)
    _change(uri, 1, rnd, [40])  # a MERGE update, read from the change data feed
    _change(uri, 2, rnd, [40])  # a delete
    assert [r.versions for r in p.sync()] == [[5, 6]]
    assert _rows(p) == _table_rows(uri)
