#!/usr/bin/env python
"""One key holding N state rows, 10 rows touched per epoch: with and without ``row_key`` (issue 38).

A stage ``site`` keeps, for one site (one grouping key), a row per URL: ``{url, n}``. The state is
built to N rows (N in ``--sizes``, default 10k, 100k, 1M, 10M), in epochs of at most ``--chunk``
new URLs; then ``--epochs`` epochs (default 3) each feed 10 records to the key (5 URLs it holds,
5 new ones), and the median epoch time is taken. Two forms of the same stage, in one run:

- **without** row_key: the translator gets every row of the key and re-emits every row it keeps
  (the only way before issue 38); run up to ``--max-without`` rows (default 1M: beyond, an epoch
  costs minutes and gigabytes);
- **with** ``row_key: url``: the translator asks for the rows it needs (``state.get``) and
  upserts them (``out.state.write``); the rows it does not touch stay where they are.

It prints a table (epoch seconds, and each size's ratio to the smallest size of its form, and
without/with), writes ``bench/out/keyed_rows.{md,json,png}``.

    .venv/bin/python bench/keyed_rows.py                               # all sizes (~20 min)
    .venv/bin/python bench/keyed_rows.py --sizes 10000 100000 --forms without
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = ROOT / "bench" / "out"

MODULE = '''
def without(key, state, links, out):
    """Every row of the key in, every row out (no row_key)."""
    rows = {r["url"]: r for r in state}
    for rec in links:
        prev = rows.get(rec["url"])
        rows[rec["url"]] = {"url": rec["url"], "n": rec["n"] + (prev["n"] if prev else 0)}
    for r in rows.values():
        out.state.write(r)


def with_row_key(key, state, links, out):
    """Only the rows touched: state.get_many and out.state.write (row_key: url)."""
    recs = list(links)
    prev = state.get_many([r["url"] for r in recs])
    for rec in recs:
        p = prev.get(rec["url"])
        out.state.write({"url": rec["url"], "n": rec["n"] + (p["n"] if p else 0)})
'''

YAML = """
pipeline: keyed_rows_{form}
flows:
  links: {{schema: {{site: string, url: string, n: int}}, external: true}}
stages:
  site:
    translator: keyed_rows_tr:{fn}
    inputs: [{{flow: links, route_by: site}}]
    state: {{schema: {{url: string, n: int}}{row_key}}}
    partitions: 2
"""


def log(msg: str) -> None:
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def records(a: int, b: int, site: str = "big.example") -> Any:
    import pyarrow as pa

    urls = [f"https://{site}/page/{i:09d}" for i in range(a, b)]
    return pa.table(
        {"site": pa.array([site] * (b - a)), "url": pa.array(urls), "n": pa.array([1] * (b - a), pa.int64())}
    )


def run_one(p: Any, table: Any) -> Any:
    p.feed("links", table)
    reports = p.run()
    if len(reports) != 1:
        raise RuntimeError(f"expected one epoch, got {len(reports)}")
    return reports[0]


def measure(form: str, sizes: list[int], epochs: int, chunk: int, work: Path) -> list[dict[str, Any]]:
    import numpy as np

    import cbp

    d = work / form
    d.mkdir(parents=True, exist_ok=True)
    (d / "keyed_rows_tr.py").write_text(MODULE)
    fn, rk = ("with_row_key", ", row_key: url") if form == "with" else ("without", "")
    (d / "p.yaml").write_text(textwrap.dedent(YAML.format(form=form, fn=fn, row_key=rk)))
    p = cbp.load(d / "p.yaml", home=str(d / "home"), mode="direct")
    have, rows = 0, []
    rng = np.random.default_rng(7)
    for size in sizes:
        t0 = time.perf_counter()
        while have < size:
            b = min(have + chunk, size)
            run_one(p, records(have, b))
            have = b
        log(f"{form}: built {size:,} rows in {time.perf_counter() - t0:.0f}s")
        times, loads, rgs = [], [], []
        for e in range(epochs):
            old = rng.integers(0, have, 5)
            t = records(0, 0)
            import pyarrow as pa

            urls = [f"https://big.example/page/{i:09d}" for i in old] + [
                f"https://big.example/new/{size}-{e}-{j}" for j in range(5)
            ]
            t = pa.table({"site": ["big.example"] * 10, "url": urls, "n": pa.array([1] * 10, pa.int64())})
            r = run_one(p, t)
            times.append(float(r.seconds))
            loads.append(float((r.phases or {}).get("index_load", 0.0)))
            rgs.append(int(r.row_groups_read or 0))
            log(
                f"{form}: {size:,} rows: epoch {e + 1}: {times[-1]:.2f}s (index load {loads[-1]:.2f}s, row groups read "
                f"{rgs[-1]})"
            )
        have += 5 * epochs  # the new URLs of the touched epochs
        rows.append(
            {
                "form": form,
                "rows": size,
                "epochs": times,
                "median": statistics.median(times),
                "index_load": loads,
                "row_groups_read": rgs,
                "median_index_load": statistics.median(loads),
            }
        )
    return rows


def report(results: list[dict[str, Any]]) -> str:
    by = {(r["form"], r["rows"]): r["median"] for r in results}
    sizes = sorted({r["rows"] for r in results})
    base = {f: by.get((f, sizes[0])) for f in ("without", "with")}
    loads = {r["rows"]: r.get("median_index_load") for r in results if r["form"] == "with"}
    lines = [
        "| rows of the key | without row_key (s) | x 10k | with row_key (s) | x 10k | without / with | with: index "
        "load (s, median) |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for n in sizes:
        wo, wi = by.get(("without", n)), by.get(("with", n))
        cell = lambda v, b: (f"{v:.2f}", f"{v / b:.2f}x" if b else "") if v is not None else ("-", "-")  # noqa: E731
        a, ra = cell(wo, base["without"])
        c, rc = cell(wi, base["with"])
        load = loads.get(n)
        lines.append(
            f"| {n:,} | {a} | {ra} | {c} | {rc} | {f'{wo / wi:.1f}x' if wo and wi else '-'} | "
            f"{'-' if load is None else f'{load:.2f}'} |"
        )
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for form, style in (("without", "o-"), ("with", "s-")):
        pts = sorted((r["rows"], r["median"]) for r in results if r["form"] == form)
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], style, label=f"{form} row_key")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("rows held by the one key")
    ax.set_ylabel("epoch seconds (median), 10 rows touched")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000, 10_000_000])
    ap.add_argument("--forms", nargs="+", default=["without", "with"], choices=["without", "with"])
    ap.add_argument("--max-without", type=int, default=1_000_000)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--chunk", type=int, default=1_000_000, help="new rows per build epoch")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--name", default="keyed_rows", help="output file names under bench/out/")
    ap.add_argument(
        "--with-results",
        default=None,
        help="a JSON of an earlier run (bench/out/NAME.json) to put in the table beside this run's",
    )
    args = ap.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    work = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="tmp-keyed-rows-", dir=OUT))
    from cbp.engine.driver.session import get_spark

    get_spark()
    results: list[dict[str, Any]] = json.loads(Path(args.with_results).read_text()) if args.with_results else []
    for form in args.forms:
        sizes = [s for s in args.sizes if form == "with" or s <= args.max_without]
        results += measure(form, sizes, args.epochs, args.chunk, work)
        (OUT / f"{args.name}.json").write_text(json.dumps(results, indent=1))
    table = report(results)
    print(table)
    (OUT / f"{args.name}.md").write_text(
        f"`{' '.join(sys.argv)}` ({time.strftime('%Y-%m-%d %H:%M')}, local[2], {os.cpu_count()} cores)\n\n{table}\n"
    )
    plot(results, OUT / f"{args.name}.png")
    log(f"wrote {OUT / args.name}.{{md,json,png}}")


if __name__ == "__main__":
    main()
