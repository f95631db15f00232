"""Old names of the crawl application, which is now the package :mod:`cbp_crawl` beside cbp.

A home recorded by an older cbp may name translators or route functions ``cbp.crawl.<module>:<name>``
in its recorded pipeline, and older translator modules import ``cbp.crawl.links``: each module here
makes its old name the very module of :mod:`cbp_crawl` (the same objects, not copies), so they
still load and run. Nothing in cbp imports this package; new code imports :mod:`cbp_crawl`.
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    """``from cbp.crawl import Crawler``: the name of :mod:`cbp_crawl`."""
    return getattr(importlib.import_module("cbp_crawl"), name)
