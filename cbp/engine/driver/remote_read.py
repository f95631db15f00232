"""Reading a home's parquet files on an object store in Spark's Python workers, through pyarrow.

Spark reads ``s3://`` paths only with Hadoop's S3A connector on its classpath (``hadoop-aws`` and
the AWS SDK bundle, some 700 MB). cbp's own jobs do not need it: for a home on S3 the file list
becomes a small DataFrame, and each Python worker reads its files with the home's pyarrow
filesystem (:mod:`cbp.storage.objectstore`, the driver's settings carried in the function).
Local homes keep Spark's reader.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, cast

from ...storage import objectstore
from ..task.runners import read_files
from .dfjobs import ddl_type, known_schema, parallelism

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["needs_arrow_reader", "read_parquet"]


def needs_arrow_reader(files: list[str]) -> bool:
    """Whether the files are on an object store (read them with :func:`read_parquet`)."""
    return bool(files) and objectstore.is_object_store(files[0])


def read_parquet(spark: SparkSession, ddl: str, files: list[str]) -> DataFrame:
    """A DataFrame of the files' records with the columns of ``ddl`` (missing columns are null)."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    parsed = ddl_type(spark, ddl)  # on Connect the server's parse, once per session and DDL
    schema = cast(StructType, StructType.fromDDL(ddl)) if isinstance(parsed, str) else parsed  # not in the workers
    n = max(1, min(len(files), parallelism(spark)))
    names = spark.createDataFrame([(f,) for f in files], "_file STRING").repartition(n)
    read = names.mapInArrow(partial(read_files, to_arrow_schema(schema), objectstore.settings()), schema)
    return known_schema(read, schema)
