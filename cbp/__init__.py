"""cbp: continuous bulk processing on Apache Spark with Delta Lake state.

The public API. A pipeline is a YAML file of flows and stages (see :mod:`cbp.spec`), with
translators as plain Python functions ``translate(key, state, *inputs, out)``.

    >>> import cbp
    >>> p = cbp.load("flows/url_count.yaml", home="/tmp/cbp-demo")   # doctest: +SKIP
    >>> p.feed("urls", [{"url": "http://a/"}]); p.run()              # doctest: +SKIP

The crawl-queue loop's crawler is :class:`Crawler` (:mod:`cbp.crawl.crawler`); Airflow DAGs are made
by :mod:`cbp.airflow.dagfactory` (it needs the ``airflow`` extra).
"""

__version__ = "0.1.0"  # before the imports: cbp.storage writes it into Delta commits

from .controller import EpochRecord, EpochReport, SyncReport
from .controller.feeds import DuplicateFeedWarning
from .controller.plan import Change, Plan
from .controller.rewind import RewindReport
from .crawl.crawler import Corpus, Crawler, CrawlRound
from .crawl.schedule import Revisits
from .engine.driver.progress import Progress
from .errors import BusyError, CbpError, InputError, RuntimeStateError, SpecError, UsageError, UserCodeError
from .model import ALL, Broadcast, Emitter, Multicast, Writer, broadcast, multicast, runnable_all, runnable_any
from .pipeline import Pipeline, load
from .spec import PipelineSpec, load_spec

__all__ = [
    "load",
    "Pipeline",
    "load_spec",
    "PipelineSpec",
    "EpochReport",
    "EpochRecord",
    "Plan",
    "Change",
    "Progress",
    "SyncReport",
    "Crawler",
    "Corpus",
    "CrawlRound",
    "Revisits",
    "Emitter",
    "Writer",
    "runnable_all",
    "runnable_any",
    "ALL",
    "broadcast",
    "multicast",
    "Broadcast",
    "Multicast",
    "RewindReport",
    "DuplicateFeedWarning",
    "CbpError",
    "SpecError",
    "InputError",
    "UsageError",
    "UserCodeError",
    "RuntimeStateError",
    "BusyError",
]
