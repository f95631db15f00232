"""Old name of :mod:`cbp_crawl.fetch` (see :mod:`cbp.crawl`)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("cbp_crawl.fetch")
