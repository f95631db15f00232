"""Old name of :mod:`cbp_crawl.command` (see :mod:`cbp.crawl`)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("cbp_crawl.command")
