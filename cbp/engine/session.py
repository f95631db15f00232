"""The SparkSession cbp runs on: local Spark by default, any master through ``CBP_SPARK_MASTER``.

    >>> spark = get_spark()          # doctest: +SKIP
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Optional

from ..errors import RuntimeStateError

__all__ = ["get_spark"]

_LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")

_JAVA_HINT = (
    "cbp runs on Apache Spark, which needs Java 17 or newer, and no 'java' was found on PATH or in JAVA_HOME. "
    "Install it (Debian/Ubuntu: 'sudo apt-get install -y openjdk-17-jre-headless'; macOS: 'brew install openjdk@17') "
    "and try again."
)


def get_spark(master: Optional[str] = None) -> "pyspark.sql.SparkSession":  # type: ignore[name-defined]  # noqa: F821
    """Return the process's SparkSession, creating it with cbp's settings on first use.

    ``master`` (or ``CBP_SPARK_MASTER``) defaults to ``local[*,2]``: local Spark on every core,
    retrying a failed task once, as a cluster would (a lost Python worker, say). Adaptive query execution is
    switched off: a stage's shuffle must keep exactly its partition count, because partition
    ``p`` of the shuffle is the task that owns state partition ``p``.
    """
    java_home = os.environ.get("JAVA_HOME")
    if not shutil.which("java") and not (java_home and os.path.exists(os.path.join(java_home, "bin", "java"))):
        raise RuntimeStateError(_JAVA_HINT, code="no-java")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    builder = (
        SparkSession.builder.master(master or os.environ.get("CBP_SPARK_MASTER", "local[*,2]"))
        .appName("cbp")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.driver.memory", os.environ.get("CBP_DRIVER_MEMORY", "4g"))
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "20000")
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile={_LOG4J}")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("CBP_SPARK_LOG_LEVEL", "ERROR"))
    return spark
