"""The crawl-queue application (paper 001 §1.1, Fig. 1), built on cbp: the crawler and its corpus
(:mod:`.crawler`), the link rules shared by the pipeline, the crawler and the reference
(:mod:`.links`), Debian documentation corpora (:mod:`.corpus`) and the from-scratch queue
(:mod:`.reference`). Its pipeline is ``flows/crawl_queue.yaml``.
"""

from .crawler import Corpus, Crawler, CrawlRound
from .schedule import Revisits

__all__ = ["Corpus", "Crawler", "CrawlRound", "Revisits"]
