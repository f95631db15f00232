"""Shared stages between views: state held and epoch time, shared against ``CBP_SHARE_STATE=0``.

The six views of ``tests/test_view_sharing.py`` (two GROUP BYs over one join, a GROUP BY that two
views' CTEs repeat, a UNION ALL of one join twice) over its generated orders and customers, six
epochs of inserts, deletes and moves; each mode twice, alternating, in one SparkSession. Prints per
run: stages, stateful stages, the state tables' rows and bytes (current files), and the wall time and
driver CPU of epochs 2-6.

    .venv/bin/python bench/view_sharing.py    # ~1 min
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_sql_views import _changes, _net, _yaml  # noqa: E402  (tests/ is not a package)
from test_view_sharing import VIEWS  # noqa: E402

import cbp  # noqa: E402
from cbp.commands.explain import _size  # noqa: E402
from cbp.engine.driver.session import get_spark  # noqa: E402
from cbp.storage.home import Home  # noqa: E402


def _run(spark, where: Path, share: str, steps: list) -> str:
    os.environ["CBP_SHARE_STATE"] = share
    where.mkdir(parents=True)
    (where / "v.yaml").write_text(_yaml(VIEWS))
    p = cbp.Pipeline(str(where / "v.yaml"), str(where / "home"), spark=spark)
    times = []
    for orders, custs in steps:
        p.feed("orders", orders)
        if custs:
            p.feed("custs", _net(custs))
        t0, c0 = time.perf_counter(), time.process_time()
        p.run()
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    stateful = [s for s, st in p.spec.stages.items() if st.state_schema is not None]
    sizes = [_size(Home(str(where / "home")), s) for s in stateful]
    wall, cpu = sum(t for t, _ in times[1:]), sum(c for _, c in times[1:])
    rows, size = sum(x["rows"] or 0 for x in sizes), sum(x["bytes"] for x in sizes)
    return (
        f"| {'on' if share == '1' else 'off'} | {len(p.spec.stages)} | {len(stateful)} | {rows} | {size} "
        f"| {wall:.2f} | {cpu:.2f} |"
    )


def main() -> None:
    spark = get_spark()
    steps = _changes(seed=11, steps=6)
    base = Path(tempfile.mkdtemp(prefix="view-sharing-"))
    print("| sharing | stages | stateful | state rows | state bytes | epochs 2-6 wall s | driver CPU s |")
    print("|---|---|---|---|---|---|---|")
    try:
        for i, share in enumerate(("0", "1", "0", "1")):
            print(_run(spark, base / f"{i}", share, steps), flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
