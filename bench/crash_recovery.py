#!/usr/bin/env python
"""Crash-recovery benchmark: the long fault-injection suite, on the real link graph of the Python
3.11 documentation, with recovery time compared with a normal epoch.

The pipeline is ``tests/crash/components.yaml`` (parse -> connected components with a loopback
cycle -> component sizes). The page-to-page links of the ``python3.11-doc`` HTML (downloaded once
with ``apt-get download`` into ``bench/data/``; generated edges if that fails, and the output
says so) are fed in ``--increments`` increments, each followed by ``cbp run``, through the
command line. The same operations run twice:

* uninterrupted, in this process: the reference;
* through ``cbp`` processes that are SIGKILLed: every kill point of the CI suite
  (``tests/crash_harness.py``: feeds, intentions, inside Spark tasks, before/between/after the
  Delta commits, the snapshot, garbage collection, recovery itself), plus ``--random-kills``
  SIGKILLs from outside at random moments of ``cbp run``.

It checks that the restarted runs end with the same epochs, the same records in every output
increment and the same state (through cbp and through a plain Delta reader) as the reference,
and as networkx; then prints a table of the recovery times next to a normal epoch, and writes
``bench/out/crash_recovery.{md,json,png}``.

    .venv/bin/python bench/crash_recovery.py                  # 12 increments, 22 named + 12 random kills
    .venv/bin/python bench/crash_recovery.py --increments 4 --random-kills 4
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import crash_harness as ch  # noqa: E402

from cbp_crawl.corpus import fetch_debian_doc, iter_pages  # noqa: E402
from cbp_crawl.links import page_links  # noqa: E402

EPOCH_LINE = re.compile(r"^(\w+)\s+epoch\s+(\d+)\s.*\s([\d.]+)s$")
RECOVERED = re.compile(r"recovered: finished committing (.*), which was interrupted \(([\d.]+)s\)")
FINISHING = re.compile(r"finishing stage '(\w+)' epoch (\d+), which was interrupted")

#: The kill points of the CI suite (tests/crash_harness.py KILLS), in smaller groups, so that each
#: group lands on its own `cbp run` (on real data a run may be too short for a long group).
KILLS: list[tuple[str, list[str]]] = [g for g in ch.KILLS if g[0] == "feed"] + [
    ("run", ["kill:epoch:intention:1", "kill-driver:task:state-written:1"]),
    ("run", ["kill:epoch:ran:2", "kill:gc:pending:1"]),
    ("run", ["kill:epoch:pending:3", "kill:recover:committed:0:1", "kill:recover:snapshot:1"]),
    ("run", ["kill:epoch:committed:0:2", "kill:gc:committed:0:1"]),
    ("run", ["kill:epoch:committed:1:1"]),
    ("run", ["kill:epoch:committed:2:1", "kill-driver:task:outputs-written:1"]),
    ("run", ["kill:epoch:snapshot:3", "kill:gc:snapshot:1"]),
    ("run", ["kill:epoch:intention:4", "kill:epoch:ran:1", "kill:epoch:ran:1"]),
]


def real_edges(limit_pages: int) -> tuple[list[str], str]:
    """'a b' lines: links between pages of python3.11-doc (page ids by sorted URL), each link once.

    The links are the crawl queue's (:func:`cbp_crawl.links.page_links`: distinct targets, the page
    itself left out), in sorted order per page.
    """
    root = fetch_debian_doc("python3.11-doc", str(BENCH / "data"))
    if root is None:
        rng = random.Random(3)
        return [
            f"{rng.randrange(400)} {rng.randrange(400)}" for _ in range(3000)
        ], "generated (python3.11-doc could not be downloaded)"
    pages = sorted(iter_pages(root, "python3.11-doc"))[:limit_pages]
    ids = {url: i for i, (url, _) in enumerate(pages)}
    random.Random(1).shuffle(pages)  # pages arrive as a crawl finds them: in no particular order, each with its links
    lines = []
    for url, html in pages:
        for dst in sorted(page_links(url, html)):
            if dst in ids:
                lines.append(f"{ids[url]} {ids[dst]}")
    return lines, f"python3.11-doc: {len(pages)} pages, {len(lines)} links between them, in crawl order"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--increments", type=int, default=12)
    ap.add_argument("--pages", type=int, default=300, help="pages of the corpus whose links are used")
    ap.add_argument("--random-kills", type=int, default=12, help="SIGKILLs from outside at random moments of cbp run")
    ap.add_argument("--seed", type=int, default=5)
    args = ap.parse_args()

    lines, source = real_edges(args.pages)
    per = -(-len(lines) // args.increments)
    incs = [[{"text": t} for t in lines[i * per : (i + 1) * per]] for i in range(args.increments)]
    print(f"data: {source}; {args.increments} increments of ~{per} links")
    work = Path(tempfile.mkdtemp(prefix="cbp-crash-"))

    from cbp.engine.driver.session import get_spark

    spark = get_spark()
    t0 = time.perf_counter()
    normal: list[float] = []
    import cbp

    p = cbp.load(ch.YAML, home=str(work / "reference"), spark=spark)
    for k, inc in enumerate(incs):
        p.feed("lines", inc, feed_id=f"inc{k}")
        normal += [r.seconds for r in p.run()]
    print(f"reference: {len(normal)} stage epochs in {time.perf_counter() - t0:.1f}s")
    want = ch.results(str(work / "reference"), spark)
    assert want["state"] == ch.expected(incs), "the reference differs from networkx"

    ops = len(ch.operations(incs))
    plan = ch.plan_chained(ops, KILLS, spread=False)  # early increments have the longest runs
    rng = random.Random(args.seed)
    free = [i for i in range(ops) if i % 2 == 1 and i not in plan] or [i for i in range(ops) if i % 2 == 1]
    for _ in range(args.random_kills):  # random moments of runs that have no planned kill
        plan.setdefault(rng.choice(free), []).append(f"after:{rng.uniform(3.0, 14.0):.1f}")
    t1 = time.perf_counter()
    log = ch.run_victim(str(work / "victim"), incs, plan, work, strict=False)
    victim_s = time.perf_counter() - t1
    got = ch.results(str(work / "victim"), spark)
    checks = {part: got[part] == want[part] for part in ("epochs", "outputs", "state", "delta_state")}
    checks["leftovers"] = got["leftovers"] == {"pending": False, "intentions": []}
    checks["networkx"] = got["state"] == ch.expected(incs)

    killed = log.killed()
    planned = [a for a in killed if not a.fault.startswith("after:")]  # type: ignore[union-attr]
    timed = [a for a in killed if a.fault.startswith("after:")]  # type: ignore[union-attr]
    pending_s, rerun_s, restart_s, first_s = [], [], [], []
    for prev, a in zip([None, *log.attempts], log.attempts):
        if a.op == "run" and not a.fault and (prev is None or not prev.fault or prev.op != "run"):
            firsts = [float(m.group(3)) for m in (EPOCH_LINE.match(x.strip()) for x in a.stdout.splitlines()) if m][:1]
            first_s += firsts  # the first epoch of a fresh `cbp run` (Spark starts with it)
    for prev, a in zip(log.attempts, log.attempts[1:]):
        if not prev.fault:
            continue
        pending_s += [float(m.group(2)) for m in RECOVERED.finditer(a.stderr)]
        reruns = {(m.group(1), int(m.group(2))) for m in FINISHING.finditer(a.stderr)}
        for line in a.stdout.splitlines():
            m = EPOCH_LINE.match(line.strip())
            if m and (m.group(1), int(m.group(2))) in reruns:
                rerun_s.append(float(m.group(3)))
        if a.op == "run":
            restart_s.append(
                a.seconds
                - sum(float(m.group(3)) for m in (EPOCH_LINE.match(x.strip()) for x in a.stdout.splitlines()) if m)
            )

    def med(xs: list[float]) -> str:
        return f"{statistics.median(xs):.2f}" if xs else "-"

    rows = [
        ("normal stage epoch (reference, warm Spark)", med(normal), len(normal)),
        ("finish a pending commit (no Spark needed)", med(pending_s), len(pending_s)),
        ("first epoch of a fresh `cbp run` process (includes Spark start)", med(first_s), len(first_s)),
        ("re-run an interrupted epoch (first of its process: includes Spark start)", med(rerun_s), len(rerun_s)),
        ("restart of `cbp run` outside epochs (Python + Spark start, lock, GC)", med(restart_s), len(restart_s)),
    ]
    md = [
        f"Data: {source}; {args.increments} increments. Kills: {len(planned)} at named points"
        + (f" ({len(log.missed)} named points not reached: {', '.join(log.missed)})" if log.missed else "")
        + f" + {len(timed)} at random moments "
        f"(of {args.random_kills} timers; the rest fired after the run had finished); victim wall time "
        f"{victim_s:.0f}s.",
        "",
        "| check | result |",
        "|---|---|",
        *[
            f"| {k} identical to the uninterrupted run{' (from scratch)' if k == 'networkx' else ''} | "
            f"{'yes' if v else 'NO'} |"
            for k, v in checks.items()
        ],
        "",
        "| what | median seconds | n |",
        "|---|---:|---:|",
        *[f"| {w} | {m} | {n} |" for w, m, n in rows],
    ]
    if pending_s and normal:
        md += [
            "",
            f"Finishing a pending commit takes {statistics.median(pending_s) / statistics.median(normal):.2f}x a "
            f"normal warm epoch.",
        ]
    if rerun_s and first_s:
        md += [
            f"Re-running an interrupted epoch takes {statistics.median(rerun_s) / statistics.median(first_s):.2f}x the "
            f"first epoch "
            "of a fresh `cbp run` (both start Spark)."
        ]
    text = "\n".join(md)
    print(text)
    out = BENCH / "out"
    out.mkdir(exist_ok=True)
    (out / "crash_recovery.md").write_text(text + "\n")
    (out / "crash_recovery.json").write_text(
        json.dumps(
            {
                "source": source,
                "checks": checks,
                "normal": normal,
                "first": first_s,
                "pending": pending_s,
                "rerun": rerun_s,
                "restart": restart_s,
                "kills": [a.fault for a in killed],
                "missed": log.missed,
                "victim_seconds": victim_s,
            },
            indent=1,
        )
    )
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.5))
        data = [normal, pending_s, first_s, rerun_s, restart_s]
        ax.boxplot(
            [d or [0.0] for d in data],
            tick_labels=["warm epoch", "finish pending", "first epoch\n(fresh run)", "re-run\ninterrupted", "restart"],
        )
        ax.set_ylabel("seconds")
        ax.set_title(f"cbp crash recovery: {len(killed)} SIGKILLs, results identical: {all(checks.values())}")
        fig.tight_layout()
        fig.savefig(out / "crash_recovery.png", dpi=120)
    except ImportError:
        print("(matplotlib missing: no plot)")
    if not all(checks.values()):
        sys.exit(1)


if __name__ == "__main__":
    main()
