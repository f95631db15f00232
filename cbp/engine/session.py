"""The SparkSession cbp runs on: local Spark by default, any master through ``CBP_SPARK_MASTER``,
any further Spark settings through ``CBP_SPARK_CONF`` (``key=value;key=value``).

    >>> spark = get_spark()          # doctest: +SKIP
    >>> spark_conf("spark.executor.pyspark.memory=1g; spark.sql.shuffle.partitions = 4")
    {'spark.executor.pyspark.memory': '1g', 'spark.sql.shuffle.partitions': '4'}
"""

from __future__ import annotations

import os
import shutil
import sys
from typing import Optional

from ..errors import RuntimeStateError

__all__ = ["get_spark", "spark_conf"]

_LOG4J = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")

_JAVA_HINT = (
    "cbp runs on Apache Spark, which needs Java 17 or newer, and no 'java' was found on PATH or in JAVA_HOME. "
    "Install it (Debian/Ubuntu: 'sudo apt-get install -y openjdk-17-jre-headless'; macOS: 'brew install openjdk@17') "
    "and try again."
)


def spark_conf(text: str) -> dict[str, str]:
    """Spark settings from ``key=value`` pairs separated by ``;`` (the form of ``CBP_SPARK_CONF``)."""
    conf = {}
    for item in text.split(";"):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise RuntimeStateError(f"CBP_SPARK_CONF: {item.strip()!r} is not key=value (settings are separated by ';')", code="spark-conf")
        conf[key.strip()] = value.strip()
    return conf


def get_spark(master: Optional[str] = None, conf: Optional[dict[str, str]] = None) -> "pyspark.sql.SparkSession":  # type: ignore[name-defined]  # noqa: F821
    """Return the process's SparkSession, creating it with cbp's settings on first use.

    ``master`` (or ``CBP_SPARK_MASTER``) defaults to ``local[*,2]``: local Spark on every core,
    retrying a failed task once, as a cluster would (a lost Python worker, say). Adaptive query execution is
    switched off: a stage's shuffle must keep exactly its partition count, because partition
    ``p`` of the shuffle is the task that owns state partition ``p``. ``CBP_SPARK_CONF`` and then
    ``conf`` add or override settings (e.g. ``spark.executor.pyspark.memory``, the address-space
    limit of each Python worker) when the session is created.
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
    for key, value in {**spark_conf(os.environ.get("CBP_SPARK_CONF", "")), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("CBP_SPARK_LOG_LEVEL", "ERROR"))
    return spark
