#!/usr/bin/env python
"""Where a SQL view's small epoch should stop running in the driver (``DRIVER_RUN``, issue 48).

TPC-H at ``--sf`` (default 0.1) as Delta tables (``bench/tpch_data.py``), Q6 (a filter and a global
sum) and Q1 (``GROUP BY``) each in its own pipeline, built once. Then, per size N of ``--sizes``
(change records: an update of N/2 lineitems' prices is N records, each row's pre- and post-image) and
per path, one update and one run of both pipelines: **driver** (``CBP_DRIVER_RUN_RECORDS`` above N:
the epoch's partitions run in the driver, no Spark job) and **job** (``CBP_DRIVER_RUN_RECORDS=0``:
the same small epoch as a one-stage Spark job). The two paths alternate which goes first. Each run's
wall and CPU seconds (the process tree's: driver, JVM, Python workers), and for the driver path the
envelopes' Arrow bytes per record (what the driver holds); the views are checked against Spark SQL
(``bench/tpch.py``'s recompute) after every run.

    .venv/bin/python bench/driver_run.py                        # SF 0.1, N = 5k..100k
    .venv/bin/python bench/driver_run.py --sizes 5000,20000 --sf 0.01
"""

from __future__ import annotations

import argparse
import decimal
import json
import os
import random
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import tpch  # noqa: E402
import tpch_data  # noqa: E402

QUERIES = ("q6", "q1")
_SEEN: list[tuple[int, int]] = []  # (envelopes, Arrow bytes) of each epoch run in the driver


def _watch_driver() -> None:
    """Record the envelopes' rows and bytes of every epoch that runs in the driver."""
    from cbp.engine.driver import smallepoch

    inner = smallepoch._run_in_driver

    def watched(plan: Any, parts: list[Any], task: Any) -> Any:
        _SEEN.append((sum(t.num_rows for t in parts), sum(t.nbytes for t in parts)))
        return inner(plan, parts, task)

    smallepoch._run_in_driver = watched  # type: ignore[assignment]


def update_lines(data: Path, n: int, rnd: random.Random) -> int:
    """New prices for ``n`` lineitems (each a MERGE's update: ``2 n`` change records)."""
    refresh = tpch_data.Refresh(data)
    keys = refresh._read("lineitem", ["l_orderkey", "l_linenumber", "l_extendedprice"])
    chosen = sorted(rnd.sample(range(keys.num_rows), n))
    lines = keys.take(chosen)
    factor = decimal.Decimal(rnd.choice(["1.10", "0.90", "1.25"]))
    prices = [(p * factor).quantize(decimal.Decimal("0.01")) for p in lines["l_extendedprice"].to_pylist()]
    import pyarrow as pa

    lines = lines.set_column(2, "l_extendedprice", pa.array(prices, lines.schema.field("l_extendedprice").type))
    on = "t.l_orderkey = s.l_orderkey AND t.l_linenumber = s.l_linenumber"
    refresh._merge("lineitem", lines, on, {"l_extendedprice": "s.l_extendedprice"})
    return lines.num_rows


def one_run(spark: Any, data: Path, pipes: dict[str, Any], path: str, n: int, rnd: random.Random) -> dict[str, Any]:
    """One update of ``n`` change records, both pipelines run on ``path`` (driver or job)."""
    os.environ["CBP_DRIVER_RUN_RECORDS"] = str(10 * n) if path == "driver" else "0"
    update_lines(data, n // 2, rnd)
    row: dict[str, Any] = {"records": n, "path": path}
    for q, (p, yaml) in pipes.items():
        del _SEEN[:]
        run = tpch.epoch(p)
        _secs, want, _cpu = tpch.recompute(spark, data, yaml, q)
        run["same"] = tpch.same(tpch.contents(p, q), want)
        run["driver_envelopes"] = sum(r for r, _ in _SEEN)
        run["driver_bytes"] = sum(b for _, b in _SEEN)
        row[q] = run
        print(
            f"{path:6} N={n:7,} {q}: {run['seconds']:.2f} s, {run['cpu_seconds']:.2f} CPU s, in driver "
            f"{run['driver_envelopes']:,} envelopes / {run['driver_bytes'] / 1e6:.1f} MB, same={run['same']}",
            flush=True,
        )
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", type=float, default=0.1)
    ap.add_argument(
        "--sizes", type=lambda s: [int(x) for x in s.split(",")], default=[5000, 10000, 20000, 50000, 100000]
    )
    ap.add_argument("--out", default=str(Path(__file__).resolve().parent / "out"))
    args = ap.parse_args(argv)
    import cbp
    from cbp.engine.driver.session import get_spark

    out = Path(args.out)
    data = out / f"driver-run-sf{args.sf}"
    shutil.rmtree(data, ignore_errors=True)
    tpch_data.generate(data, args.sf)
    spark = get_spark()
    _watch_driver()
    pipes = {}
    for q in QUERIES:
        yaml = tpch_data.write_pipeline(data, out / "driver-run-pipelines" / q, [q])
        home = out / "driver-run-homes" / q
        shutil.rmtree(home, ignore_errors=True)
        pipes[q] = (cbp.Pipeline(str(yaml), str(home), spark=spark), yaml)
        tpch.epoch(pipes[q][0])
    rnd = random.Random(7)
    rows = []
    for i, n in enumerate(args.sizes):
        order = ("driver", "job") if i % 2 == 0 else ("job", "driver")
        rows += [one_run(spark, data, pipes, path, n, rnd) for path in order]
    result = {"sf": args.sf, "rows": rows, "load": os.getloadavg()}
    (out / "driver_run.json").write_text(json.dumps(result, indent=1))
    print(table(rows))


def table(rows: list[dict[str, Any]]) -> str:
    """Per size and query: each path's CPU and wall seconds, and the driver's ratio to the job's."""
    lines = [
        "| change records | query | driver: CPU s / wall s | job: CPU s / wall s | CPU driver / job | MB in driver |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    by = {(r["records"], r["path"]): r for r in rows}
    for n in sorted({r["records"] for r in rows}):
        for q in QUERIES:
            d, j = by[(n, "driver")][q], by[(n, "job")][q]
            lines.append(
                f"| {n:,} | {q} | {d['cpu_seconds']:.2f} / {d['seconds']:.2f} | {j['cpu_seconds']:.2f} / "
                f"{j['seconds']:.2f} | {d['cpu_seconds'] / max(j['cpu_seconds'], 1e-9):.2f} | "
                f"{d['driver_bytes'] / 1e6:.1f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
