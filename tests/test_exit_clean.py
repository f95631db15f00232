"""A process that read a home's Delta tables exits cleanly, also on a loaded machine.

Read through delta-rs's own filesystem, a one-line table read made the process abort at exit
("terminate called without an active exception", SIGABRT) in 18 runs out of 100 with two busy
cores beside it; ``cbp state`` did in 2 out of 100 and failed a CI run. :meth:`Home.read_table`
reads the files through the home's pyarrow filesystem."""

from __future__ import annotations

import subprocess
import sys

import pyarrow as pa

from cbp.storage import Home

CHILD = """
import sys
from cbp.storage import Home
t = Home(sys.argv[1]).read_table("t")
print(t.num_rows)
"""


def test_reading_a_table_then_exiting_never_aborts(tmp_path, background):
    h = Home(str(tmp_path / "home"))
    h.ensure_table("t", pa.schema([("_inc", pa.int64()), ("v", pa.string())]), "_inc")
    adds = []
    for i in range(1, 4):
        add = h.write_parquet(f"t/_inc={i}", pa.table({"v": [f"x{j}" for j in range(1000)]}), "in", i)
        adds.append({**add, "path": add["rel"][2:]})
    h.commit_once("t", "_inc", adds, [], overwrite=False, app_id="t", app_version=1)
    for _ in range(2):  # both cores busy, as on a loaded machine
        background.popen([sys.executable, "-c", "while True: pass"])
    for _ in range(10):  # a fixed number of runs, however long they take (no count per wall-clock second)
        r = subprocess.run(
            [sys.executable, "-c", CHILD, str(tmp_path / "home")], capture_output=True, text=True, timeout=300
        )
        assert (r.returncode, r.stdout.strip()) == (0, "3000"), r.stderr[-500:]
