"""The Python worker daemon of cbp's Spark sessions (``spark.python.daemon.module``): pyspark's own
daemon, after importing what every cbp task imports (pyspark's worker, pyarrow, numpy, the task side), so
that each worker it forks starts with them loaded instead of importing them again (about a CPU second a
worker). Spark forks a fresh worker for every failing task attempt (a worker whose task raised is not
reused) and whenever its pool is empty, so a failing epoch's retries and the epoch after it pay it again.

Example::

    python -m cbp.engine.task.daemon   # as Spark starts it: listens, forks a worker per connection
"""

from __future__ import annotations

import pyspark.daemon

try:  # a module that cannot be imported here fails in the worker, with its own traceback
    import pyspark.worker  # noqa: F401

    import cbp.engine.task.arrowtasks  # noqa: F401  (pyarrow, numpy and cbp.spec with it)
    import cbp.engine.task.batch  # noqa: F401
    import cbp.engine.task.columnar  # noqa: F401
    import cbp.engine.task.executor  # noqa: F401
    import cbp.engine.task.translate  # noqa: F401
except ImportError:
    pass

if __name__ == "__main__":
    pyspark.daemon.manager()
