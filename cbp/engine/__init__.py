"""Internal: the physical layer on Spark (paper 001 §4.4-4.5), not part of cbp's public API.

- :mod:`.job`: one stage epoch as one Spark job (routing through Spark's shuffle, black-box mode);
- :mod:`.task`: what runs in a Spark task (translate calls, state reads and writes);
- :mod:`.bipindex`: state partitions and their BIPtable-style index;
- :mod:`.session`: the SparkSession cbp runs on.
"""
