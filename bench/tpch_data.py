#!/usr/bin/env python
"""TPC-H data as Delta tables with change data feed, and its refresh functions as Delta commits.

``generate(dest, sf)`` runs ``tpchgen-cli`` (PyPI, offline) for the 8 tables at scale factor
``sf`` and writes each as a Delta table ``dest/<table>`` with change data feed on (delta-rs, no
Spark). ``Refresh(dest, seed)`` then changes them as TPC-H's refresh functions do, each change a
few Delta commits, each about ``fraction`` of the orders (0.1% by default, at least one order):

- ``rf1()``: new orders with their lineitems (copies of existing orders under new order keys);
- ``rf2()``: deletes orders with their lineitems;
- ``update()``: new ``l_extendedprice`` of the lineitems of some orders, new ``p_retailprice`` of as
  many parts and a new ``c_mktsegment`` of as many customers (rows moved between groups).

    .venv/bin/python bench/tpch_data.py /tmp/tpch --sf 0.01    # generate, then RF1, RF2, update once
"""

from __future__ import annotations

import argparse
import decimal
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable, write_deltalake

TABLES = ("region", "nation", "supplier", "customer", "part", "partsupp", "orders", "lineitem")
CDF = {"delta.enableChangeDataFeed": "true"}
QUERIES = tuple(f"q{i}" for i in range(1, 23))
FLOWS = Path(__file__).resolve().parents[1] / "flows" / "tpch"
SEGMENTS = ("AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY")


def _tpchgen() -> str:
    """The ``tpchgen-cli`` next to this Python (a venv's bin), else on PATH."""
    here = Path(sys.executable).parent / "tpchgen-cli"
    found = str(here) if here.exists() else shutil.which("tpchgen-cli")
    if found is None:
        raise SystemExit("tpchgen-cli is not installed: pip install tpchgen-cli")
    return found


def _plain(table: pa.Table) -> pa.Table:
    """Strings as ``string`` (not ``string_view``), every column nullable: what Delta and cbp read."""
    fields = [pa.field(f.name, pa.string() if f.type == pa.string_view() else f.type) for f in table.schema]
    return table.cast(pa.schema(fields))


def generate(dest: str | Path, sf: float) -> dict[str, int]:
    """Write the 8 TPC-H tables at scale factor ``sf`` under ``dest``; return each table's rows.

    >>> generate("/tmp/tpch", 0.001)["orders"]  # doctest: +SKIP
    1500
    """
    dest = Path(dest)
    rows = {}
    with tempfile.TemporaryDirectory(prefix="tpchgen-") as tmp:
        subprocess.run([_tpchgen(), "parquet", "-s", str(sf), "-o", tmp], check=True, capture_output=True)
        for name in TABLES:
            table = _plain(pq.read_table(os.path.join(tmp, f"{name}.parquet")))
            write_deltalake(str(dest / name), table, mode="overwrite", configuration=CDF)
            rows[name] = table.num_rows
    return rows


def write_pipeline(data: str | Path, where: str | Path, queries: list[str]) -> Path:
    """A pipeline ``where/tpch.yaml`` over the tables under ``data`` they read (absolute paths) with the views
    of ``flows/tpch/<query>.sql`` (copied beside it); return the YAML's path.

    >>> write_pipeline("/tmp/tpch", "/tmp/p", ["q1", "q12"])  # doctest: +SKIP
    PosixPath('/tmp/p/tpch.yaml')
    """
    where, data = Path(where), Path(data).resolve()
    where.mkdir(parents=True, exist_ok=True)
    for q in queries:
        shutil.copy(FLOWS / f"{q}.sql", where / f"{q}.sql")
    path = where / "tpch.yaml"
    files = ", ".join(f"{q}.sql" for q in queries)
    read = read_tables(path, queries)
    flows = "".join(f"  {t}: {{external: true, source: {{delta: {json.dumps(str(data / t))}}}}}\n" for t in read)
    path.write_text(f"pipeline: tpch\nflows:\n{flows}sql: [{files}]\n")
    return path


def read_tables(yaml: Path, queries: list[str]) -> list[str]:
    """The TPC-H tables the views of ``queries`` (their files beside ``yaml``) read, in TABLES' order."""
    from cbp.views.query import tables_of
    from cbp.views.sqlfiles import read_sql_files

    views = read_sql_files(str(yaml), [f"{q}.sql" for q in queries], {})
    names = {t.lower() for v in views.values() for t in tables_of(v.sql)}
    return [t for t in TABLES if t in names]


class Refresh:
    """TPC-H's refresh functions (and price / segment updates) on the Delta tables under ``dest``.

    >>> r = Refresh("/tmp/tpch", seed=1)  # doctest: +SKIP
    >>> r.rf1(), r.rf2(), r.update()      # doctest: +SKIP
    """

    def __init__(self, dest: str | Path, seed: int = 0, fraction: float = 0.001) -> None:
        self.dest, self.rnd, self.fraction = Path(dest), random.Random(seed), fraction

    def _table(self, name: str) -> DeltaTable:
        return DeltaTable(str(self.dest / name))

    def _read(self, name: str, columns: list[str], keys: tuple[str, list[int]] | None = None) -> pa.Table:
        ds = self._table(name).to_pyarrow_dataset()
        filt = pc.field(keys[0]).isin(keys[1]) if keys else None
        return ds.to_table(columns=columns, filter=filt)

    def _count(self, total: int) -> int:
        return max(1, round(total * self.fraction))

    def _sample_orders(self) -> list[int]:
        keys = self._read("orders", ["o_orderkey"])["o_orderkey"].to_pylist()
        return sorted(self.rnd.sample(keys, min(len(keys), self._count(len(keys)))))

    def rf1(self) -> int:
        """Insert new orders (copies of sampled ones, new keys) with their lineitems; return the orders added."""
        keys = self._sample_orders()
        top = pc.max(self._read("orders", ["o_orderkey"])["o_orderkey"]).as_py()
        new = {old: top + 1 + i for i, old in enumerate(keys)}
        orders = self._full("orders", "o_orderkey", keys)
        lines = self._full("lineitem", "l_orderkey", keys)
        orders = orders.set_column(0, "o_orderkey", pa.array([new[k] for k in orders["o_orderkey"].to_pylist()]))
        lines = lines.set_column(0, "l_orderkey", pa.array([new[k] for k in lines["l_orderkey"].to_pylist()]))
        write_deltalake(str(self.dest / "orders"), orders, mode="append")
        write_deltalake(str(self.dest / "lineitem"), lines, mode="append")
        return len(keys)

    def _full(self, name: str, key: str, keys: list[int]) -> pa.Table:
        dt = self._table(name)
        table = dt.to_pyarrow_dataset().to_table(filter=pc.field(key).isin(keys))
        return _plain(table)

    def rf2(self) -> int:
        """Delete sampled orders and their lineitems; return the orders deleted."""
        keys = self._sample_orders()
        listed = ", ".join(map(str, keys))
        self._table("lineitem").delete(f"l_orderkey IN ({listed})")
        self._table("orders").delete(f"o_orderkey IN ({listed})")
        return len(keys)

    def update(self) -> int:
        """New prices (lineitems of sampled orders, as many parts) and market segments; return the orders touched."""
        keys = self._sample_orders()
        lines = self._read("lineitem", ["l_orderkey", "l_linenumber", "l_extendedprice"], ("l_orderkey", keys))
        factor = decimal.Decimal(self.rnd.choice(["1.10", "0.90", "1.25"]))
        prices = [(p * factor).quantize(decimal.Decimal("0.01")) for p in lines["l_extendedprice"].to_pylist()]
        lines = lines.set_column(2, "l_extendedprice", pa.array(prices, lines.schema.field("l_extendedprice").type))
        on = "t.l_orderkey = s.l_orderkey AND t.l_linenumber = s.l_linenumber"
        self._merge("lineitem", lines, on, {"l_extendedprice": "s.l_extendedprice"})
        parts = self._sample("part", "p_partkey", len(keys), ["p_partkey", "p_retailprice"])
        prices = [p + decimal.Decimal("1.00") for p in parts["p_retailprice"].to_pylist()]
        parts = parts.set_column(1, "p_retailprice", pa.array(prices, parts.schema.field("p_retailprice").type))
        self._merge("part", parts, "t.p_partkey = s.p_partkey", {"p_retailprice": "s.p_retailprice"})
        custs = self._sample("customer", "c_custkey", len(keys), ["c_custkey", "c_mktsegment"])
        segs = [SEGMENTS[(SEGMENTS.index(s) + 1) % len(SEGMENTS)] for s in custs["c_mktsegment"].to_pylist()]
        custs = custs.set_column(1, "c_mktsegment", pa.array(segs, pa.string()))
        self._merge("customer", custs, "t.c_custkey = s.c_custkey", {"c_mktsegment": "s.c_mktsegment"})
        return len(keys)

    def _sample(self, name: str, key: str, n: int, columns: list[str]) -> pa.Table:
        keys = self._read(name, [key])[key].to_pylist()
        chosen = sorted(self.rnd.sample(keys, min(n, len(keys))))
        return _plain(self._read(name, columns, (key, chosen)))

    def _merge(self, name: str, source: pa.Table, on: str, updates: dict[str, str]) -> None:
        merger = self._table(name).merge(source, on, source_alias="s", target_alias="t")
        merger.when_matched_update(updates=updates).execute()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest")
    ap.add_argument("--sf", type=float, default=0.01)
    args = ap.parse_args(argv)
    print(generate(args.dest, args.sf))
    r = Refresh(args.dest, seed=1)
    print({"rf1": r.rf1(), "rf2": r.rf2(), "update": r.update()})


if __name__ == "__main__":
    main()
