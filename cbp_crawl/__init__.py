"""The crawl-queue application (paper 001 §1.1, Fig. 1), built on cbp's public API and beside it,
not in it: the crawler and its corpus (:mod:`.crawler`, :mod:`.fetch`), the link rules shared by
the pipeline, the crawler and the reference (:mod:`.links`), Debian documentation corpora
(:mod:`.corpus`) and the from-scratch queue (:mod:`.reference`). Its pipeline is
``flows/crawl_queue.yaml``. It plugs into cbp by entry points (pyproject.toml): ``cbp crawl``
(:mod:`.command`, group ``cbp.commands``) and the Airflow crawler DAG's rounds (:mod:`.airflow`,
group ``cbp.airflow.crawlers``). Its modules' old names ``cbp.crawl.*`` still import them.
"""

from .crawler import Corpus, Crawler, CrawlRound
from .schedule import Revisits

__all__ = ["Corpus", "Crawler", "CrawlRound", "Revisits"]
