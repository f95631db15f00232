"""Apache Airflow integration: the DAG factory (:mod:`.dagfactory`) and the trigger that fires
when an increment lands (:mod:`.triggers`). Needs the ``airflow`` extra."""
