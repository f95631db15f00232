"""What runs inside a Spark task (the Python workers); shipped there by module path, never
importing :mod:`cbp.engine.driver`. Bottom to top, each importing only those before it:

- :mod:`.groups`, :mod:`.signed`, :mod:`.sinks`, :mod:`.partindex`, :mod:`.executor`: key
  groups, signed records and consolidation, the files a task writes, a partition's index, the
  executor's name;
- :mod:`.routing`, :mod:`.framing`, :mod:`.bipindex`: envelopes and keys, outputs framed by a
  field, the BIPtable-style state partition reader;
- :mod:`.plan`: :class:`~.plan.TaskPlan`, what a task of a stage epoch is given (frozen), and its
  :class:`~.plan.EnginePath`;
- :mod:`.partition`: the state partition protocol every kind implements;
- :mod:`.statepart`, :mod:`.keyedstate`, :mod:`.copies`: reading and writing a state partition
  (keyed rows too), broadcast and multicast copies;
- :mod:`.calls`, :mod:`.batch`, :mod:`.columnar`, :mod:`.keyedbatch`: the translator's calls, per
  key, per batch of keys, columnar;
- :mod:`.translators`: the translator runners (per key, batch, columnar) a grouped task runs;
- :mod:`.translate`: the task entry points (``route_batches``, ``grouped_task``, ``recordwise_task``);
- :mod:`.runners`, :mod:`.restate`: what the driver's other jobs ship (placed and small-epoch tasks,
  object-store reads; a state rewrite's tasks).
"""
