"""Internal: storage of a home, not part of cbp's public API.

- :mod:`.layout`: every path and file name of a home (:data:`LAYOUT`);
- :mod:`.home`: :class:`Home`: files, JSON records, locks;
- :mod:`.localfiles`: durable, atomic writes of small files on a local disk;
- :mod:`.tables`: a home's Delta tables: cbp's own commits, delta-rs's loads and checkpoints, data files;
- :mod:`.deltalog`: the Delta JSON actions of cbp's own commits, what a table's writer knows of it, when to
  checkpoint;
- :mod:`.flock`: the lock files of a local home;
- :mod:`.objectstore`: S3 settings from the environment, for pyarrow, delta-rs and Spark;
- :mod:`.lease`: leases made of conditional writes, the locks of a home on S3.
"""

from .home import Home
from .layout import INC, LAYOUT, PART, SRC, Layout

__all__ = ["Home", "Layout", "LAYOUT", "INC", "PART", "SRC"]
