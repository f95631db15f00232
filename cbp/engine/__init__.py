"""Internal: the physical layer on Spark (paper 001 §4.4-4.5), not part of cbp's public API.

- :mod:`.job`: one stage epoch as one Spark job (routing through Spark's shuffle, black-box mode);
- :mod:`.task`: what runs in a Spark task (routing, translate calls key group by key group);
- :mod:`.groups`: streaming the sorted input one key group at a time;
- :mod:`.statepart`: reading and writing a state partition (lookups, compaction, index rebuilds);
- :mod:`.sinks`: output and state files written row group by row group;
- :mod:`.protocol`: typed task results and failure records sent to the driver;
- :mod:`.bipindex`: the BIPtable-style index of a state partition;
- :mod:`.session`: the SparkSession cbp runs on;
- :mod:`.jvmcache`: the class archive that lets a new driver JVM start sooner.
"""
