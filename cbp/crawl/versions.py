"""Old name of :mod:`cbp_crawl.versions` (see :mod:`cbp.crawl`)."""

import importlib
import sys

sys.modules[__name__] = importlib.import_module("cbp_crawl.versions")
