"""The crawl application's part of cbp's Airflow crawler DAGs (``crawlers:`` in ``dags/cbp.yaml``):
cbp's DAG factory finds this module by its entry point (group ``cbp.airflow.crawlers``, see
:data:`cbp.airflow.config.CRAWL_APPS`), checks a crawler's hosts and seeds with it, and has it do
one crawl round per DAG run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .fetch import is_host_name
from .links import normalize_url

if TYPE_CHECKING:
    from cbp.airflow.config import CrawlerConfig

__all__ = ["crawl_round", "is_host_name", "seed_ok"]


def seed_ok(url: str) -> bool:
    """Whether ``url`` can seed a crawl: an http(s) URL with a host that the link rules normalize.

    >>> seed_ok("http://h/"), seed_ok("javascript:alert(1)"), seed_ok("http://a b/")
    (True, False, False)
    """
    try:
        u = urlsplit(url)
        return u.scheme.lower() in ("http", "https") and bool(u.hostname) and normalize_url(url) is not None
    except ValueError:
        return False


def crawl_round(yaml_path: str, home: str, cfg: CrawlerConfig) -> dict[str, Any]:
    """One crawl round of the crawler ``cfg`` describes on the pipeline ``yaml_path`` at ``home``:
    prints the round's line, its failures and the crawl's statistics; returns what it fetched and landed."""
    from cbp import Pipeline

    from . import stats
    from .crawler import Corpus, Crawler
    from .schedule import Revisits

    pipe = Pipeline(yaml_path, home)
    hosts = cfg.hosts + [None] * (len(cfg.corpus) - len(cfg.hosts))
    policy = Revisits(
        revisit_min=cfg.revisit_min,
        revisit_max=cfg.revisit_max,
        gone_after=cfg.gone_after,
        max_per_host=cfg.max_per_host,
    )
    crawler = Crawler(
        pipe,
        [Corpus(d, h) for d, h in zip(cfg.corpus, hosts)],
        max_pages=cfg.max_pages,
        queue=cfg.queue,
        pages=cfg.pages,
        policy=policy,
        measure_freshness=True,
    )
    rep = crawler.round(seeds=cfg.seed if crawler.state()["round"] == 0 else ())
    print(rep.line())
    for url, reason in sorted(rep.failed.items()):
        print(f"  could not fetch {url}: {reason}")
    for line in stats.lines(stats.report(crawler, with_freshness=False)):  # the freshness is the round's, just measured
        print(f"  {line}")
    return {
        "round": rep.round,
        "landed": rep.records,
        "failed": len(rep.failed),
        "frontier": rep.frontier,
        "increments": rep.increments,
        "unchanged": len(rep.unchanged),
        "changed": len(rep.changed),
        "gone": len(rep.gone),
    }
