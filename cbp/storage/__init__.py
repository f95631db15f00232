"""Internal: storage of a home, not part of cbp's public API.

- :mod:`.layout`: every path and file name of a home (:data:`LAYOUT`);
- :mod:`.home`: :class:`Home`: files, JSON records, locks;
- :mod:`.localfiles`: durable, atomic writes of small files on a local disk;
- :mod:`.tables`: a home's Delta tables: cbp's own commits (Delta JSON actions), delta-rs's loads and checkpoints, data
files;
- :mod:`.objectstore`: S3 settings from the environment, for pyarrow, delta-rs and Spark;
- :mod:`.lease`: leases made of conditional writes, the locks of a home on S3.
"""

from .home import Home
from .layout import INC, LAYOUT, PART, SRC, Layout

__all__ = ["Home", "Layout", "LAYOUT", "INC", "PART", "SRC"]
