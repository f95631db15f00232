#!/usr/bin/env python
"""Record the driver JVM's class archive now (cbp.engine.driver.jvmcache), so that the first `cbp run`
after setup already starts from it; nothing to do when this Java and class path have one.

The archive holds what this process's JVM loads: URLCount's epochs, per-key and vectorised, on the
driver-routed small-epoch path and through Spark's shuffle, and a read of the state.

    .venv/bin/python scripts/jvm_archive.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import cbp  # noqa: E402
from cbp.engine.driver import jvmcache  # noqa: E402
from cbp.engine.driver.session import get_spark  # noqa: E402


def main() -> int:
    spark = get_spark()
    if jvmcache.recording() is None:
        print(f"cbp: no JVM class archive to record (kept in {jvmcache.cache_dir()}; CBP_JVM_ARCHIVE=0 turns them off)")
        return 0
    with tempfile.TemporaryDirectory(prefix="cbp-jvm-") as d:
        for yaml in ("url_count.yaml", "url_count_vec.yaml"):
            for small in (None, 0):  # the driver-routed small epoch, then Spark's shuffle
                tuning = {} if small is None else {"small_epoch_records": small}
                p = cbp.Pipeline(ROOT / "flows" / yaml, f"{d}/{yaml}-{small}", spark=spark, **tuning)
                for i in range(2):
                    p.feed("urls", [{"url": f"https://example.org/{i % 2}/{j}"} for j in range(50)])
                    p.run()
                p.state("url_count")
    print(f"cbp: recording the driver JVM's classes; {jvmcache.recording()} is written as this process exits (~10 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
