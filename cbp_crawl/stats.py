"""Crawl statistics (``cbp crawl --stats``): pages by status, what each round did, links added and
retracted, the queue, score and fetch-interval quantiles, and the estimated freshness.

Freshness is the share of crawled pages whose stored version is the current one: measurable
here because the "web" is a local corpus. A page is current when its file still has the stamp
(modification time, size, inode) of the version landed, or the same digest; a gone page is
current while its file is still missing.

    >>> quantiles([1, 2, 3, 4, 5])
    {'p10': 1.4, 'p50': 3.0, 'p90': 4.6, 'max': 5.0}
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["freshness", "quantiles", "report", "plot_rounds"]


def quantiles(values: list[float]) -> dict[str, float | None]:
    """p10, median, p90 and max of ``values`` (None for none), linear interpolation."""
    v = sorted(float(x) for x in values)
    if not v:
        return {"p10": None, "p50": None, "p90": None, "max": None}

    def q(f: float) -> float:
        i = f * (len(v) - 1)
        lo, hi = math.floor(i), math.ceil(i)
        return round(v[lo] + (v[hi] - v[lo]) * (i - lo), 6)

    return {"p10": q(0.1), "p50": q(0.5), "p90": q(0.9), "max": v[-1]}


def freshness(crawler: Any, pages: dict[str, dict[str, Any]]) -> float | None:
    """Share of the crawled pages (``pages``: the crawler's schedule entries) whose stored version is current."""
    if not pages:
        return None
    current = 0
    for url, e in pages.items():
        stamp = tuple(e["stamp"]) if e.get("status") == 200 and e.get("stamp") else None
        f = crawler._corpus_fetch(url, stamp)
        if e.get("status") == 200:
            current += bool(f.not_modified or (f.html is not None and f.digest == e.get("digest")))
        else:
            current += f.html is None and not f.not_modified
    return round(current / len(pages), 6)


def _links_per_epoch(p: Any, last: int = 50) -> list[dict[str, int]]:
    """Links added and retracted by each of the ``last`` epochs of the stage producing ``links`` (if
    the pipeline has one)."""
    flow = p.spec.flows.get("links")
    if flow is None or flow.producer is None:
        return []
    out = []
    newest = int(p.status()["stages"][flow.producer]["epochs"])
    for e in range(max(1, newest - last + 1), newest + 1):
        added = retracted = 0
        for r in p.output("links", epoch=e):
            d = r.get("_diff", 1)
            if d > 0:
                added += d
            else:
                retracted -= d
        out.append({"epoch": e, "added": added, "retracted": retracted})
    return out


def _scores(p: Any) -> list[float]:
    """The current score of every URL with in-links, from ``count_links``' state (the crawl queue's formula)."""
    if "count_links" not in p.spec.stages or p.spec.stages["count_links"].state_schema is None:
        return []
    from .links import site_of

    rows = p.state("count_links")
    site_in = {r["name"]: int(r["inlinks"]) for r in rows if r.get("kind") == "site"}
    return [
        r["inlinks"] + 0.5 * math.log2(1 + max(0, site_in.get(site_of(r["name"]), 0)))
        for r in rows
        if r.get("kind") == "url" and r["inlinks"] > 0
    ]


def report(crawler: Any, *, with_freshness: bool = True) -> dict[str, Any]:
    """Everything ``cbp crawl --stats`` prints, as a dict."""
    st = crawler.state()
    pages = st.get("pages", {})
    by_status: dict[str, int] = {}
    for e in pages.values():
        by_status[str(e.get("status"))] = by_status.get(str(e.get("status")), 0) + 1
    keys = (
        "fetched",
        "revisited",
        "unchanged",
        "changed",
        "back",
        "gone",
        "held",
        "failed",
        "landed",
        "queue_retracted",
        "freshness",
    )
    rounds = [{"round": r["round"], **{k: r.get(k) for k in keys}} for r in st.get("rounds", [])]
    return {
        "rounds_done": st["round"],
        "pages_by_status": by_status,
        "failed": len(st["failed"]),
        "queue_length": crawler.pending(),
        "due_now": sum(1 for e in pages.values() if e["next"] <= crawler.clock()),
        "score_quantiles": quantiles(_scores(crawler.p)),
        "interval_quantiles_s": quantiles([e["interval"] for e in pages.values()]),
        "freshness": freshness(crawler, pages) if with_freshness else None,
        "rounds": rounds,
        "links_per_epoch": _links_per_epoch(crawler.p),
    }


def lines(rep: dict[str, Any]) -> list[str]:
    """The report as text lines."""
    out = [
        f"rounds done: {rep['rounds_done']}; pages by status: {rep['pages_by_status']}; failed URLs: {rep['failed']}",
        f"queue length (frontier + unread queue records): {rep['queue_length']}; revisits due now: {rep['due_now']}",
        f"scores: {rep['score_quantiles']}",
        f"fetch intervals (s): {rep['interval_quantiles_s']}",
        f"freshness (share of crawled pages whose stored version is current): {rep['freshness']}",
        "round  fetched revisited unchanged changed back gone held failed landed freshness",
    ]
    for r in rep["rounds"][-20:]:
        out.append(
            f"{r['round']:>5} "
            + " ".join(
                f"{'' if r.get(k) is None else r[k]!s:>{w}}"
                for k, w in (
                    ("fetched", 7),
                    ("revisited", 9),
                    ("unchanged", 9),
                    ("changed", 7),
                    ("back", 4),
                    ("gone", 4),
                    ("held", 4),
                    ("failed", 6),
                    ("landed", 6),
                    ("freshness", 9),
                )
            )
        )
    if rep["links_per_epoch"]:
        out.append(
            "links per epoch (added/retracted): "
            + ", ".join(f"{x['epoch']}:+{x['added']}/-{x['retracted']}" for x in rep["links_per_epoch"][-20:])
        )
    return out


def plot_rounds(rep: dict[str, Any], path: str) -> None:
    """A PNG of the per-round statistics: what each round did, links, freshness."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rounds = [r["round"] for r in rep["rounds"]]
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for k in ("fetched", "unchanged", "changed", "gone", "back", "held"):
        axes[0].plot(rounds, [r.get(k) or 0 for r in rep["rounds"]], marker=".", label=k)
    axes[0].set_title("pages per round")
    axes[0].set_xlabel("round")
    axes[0].legend(fontsize=8)
    ep = rep["links_per_epoch"]
    axes[1].plot([x["epoch"] for x in ep], [x["added"] for x in ep], marker=".", label="links added")
    axes[1].plot([x["epoch"] for x in ep], [x["retracted"] for x in ep], marker=".", label="links retracted")
    axes[1].set_title("links per epoch of extract_links")
    axes[1].set_xlabel("epoch")
    axes[1].legend(fontsize=8)
    fr = [(r["round"], r["freshness"]) for r in rep["rounds"] if r.get("freshness") is not None]
    axes[2].plot([a for a, _ in fr], [b for _, b in fr], marker=".")
    if not fr:
        axes[2].text(
            0.5, 0.5, "not recorded per round (cbp crawl --freshness)", ha="center", transform=axes[2].transAxes
        )
    axes[2].set_ylim(0, 1.05)
    axes[2].set_title(f"freshness after each round (now {rep['freshness']})")
    axes[2].set_xlabel("round")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
