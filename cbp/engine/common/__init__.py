"""What the driver and the tasks both use: task results and failure records (:mod:`.protocol`)
and Spark's hashes (:mod:`.sparkhash`). Imports neither :mod:`cbp.engine.task` nor
:mod:`cbp.engine.driver`."""
