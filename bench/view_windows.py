"""CPU seconds of one touched key of a window-function stage and of a top-k stage (cbp/views/winrun.py),
in-process, without Spark: a key holding N rows, one row added (the epoch recomputes the key before
and after and writes the difference). Measured with ``time.process_time`` (the machine is shared).

    .venv/bin/python bench/view_windows.py --sizes 1000 10000 100000
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from cbp.spec import load_spec
from cbp.views.vtypes import key_text
from cbp.views.winrun import topk, window

YAML = """pipeline: bench
flows:
  a: {external: true, schema: {k: int, g: string, v: 'int?'}}
views:
  win: |
    SELECT k, g, v, row_number() OVER (PARTITION BY g ORDER BY v DESC NULLS LAST, k) AS rn,
      sum(v) OVER (PARTITION BY g ORDER BY k) AS rs FROM a
  top: SELECT k, g, v FROM a ORDER BY v DESC, k LIMIT 10
"""


class _Sink:
    def __init__(self) -> None:
        self.n = 0

    def write(self, record: dict[str, Any]) -> None:
        self.n += 1

    def delete(self, row_key: Any) -> None:
        self.n += 0


def one_key(params: dict[str, Any], fn: Any, key: str, n: int) -> tuple[float, int]:
    """CPU seconds and records written for one key of ``n`` rows getting one more row."""
    out: Any = type("Out", (), {})()
    out.params, out.state = params, _Sink()
    sink = _Sink()
    setattr(out, params["cbp_view"]["out"], sink)
    stored = [{"r": key_text([i, "g0", i % 97]), "n": 1} for i in range(n)]
    t = time.process_time()
    fn(key, iter(stored), [{"k": n + 1, "g": "g0", "v": 50, "_diff": 1}], out=out)
    return time.process_time() - t, sink.n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.yaml"
        path.write_text(YAML)
        spec = load_spec(path)
    print("| rows in the key | window stage: CPU s (records written) | top-10 stage: CPU s (records written) |")
    print("|---:|---:|---:|")
    for n in args.sizes:
        w = one_key(spec.stages["win"].params, window, '["g0"]', n)
        t = one_key(spec.stages["top"].params, topk, "[]", n)
        print(f"| {n:,} | {w[0]:.3f} ({w[1]:,}) | {t[0]:.3f} ({t[1]:,}) |")


if __name__ == "__main__":
    main()
