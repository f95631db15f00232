"""Internal: the physical layer on Spark (paper 001 §4.4-4.5), not part of cbp's public API.

Where a module runs is told by its package:

- :mod:`.task`: what runs inside a Spark task (in the Python workers): routing, translate calls
  key group by key group, batch and columnar translate, keyed rows, state partitions and their
  index, the files a task writes. It never imports :mod:`.driver`.
- :mod:`.driver`: what runs in the driver: the SparkSession and its JVM, one stage epoch as one
  Spark job, small epochs routed by the driver, task placement, progress, state rewrites.
- :mod:`.common`: what both sides use (task results and failures, Spark's hashes); it imports
  neither.
"""
