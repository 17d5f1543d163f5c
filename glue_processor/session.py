"""Building the SparkSession: Glue's when running on Glue, a local one otherwise."""

from __future__ import annotations

import os
import sys
from typing import Any

from pyspark.sql import SparkSession

from glue_processor.local.java import java_home

# SQL settings the batch path relies on, applied on Glue and locally alike.
JOB_SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.compression.codec": "snappy",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.shuffle.partitions": "64",
    # Keep the file source's metadata log compact (see README: bookkeeping at scale).
    "spark.sql.streaming.fileSource.log.compactInterval": "10",
    "spark.sql.streaming.minBatchesToRetain": "100",
}


def apply_job_conf(spark: SparkSession) -> None:
    for key, value in JOB_SQL_CONF.items():
        spark.conf.set(key, value)


def local_session(
    app_name: str = "ndjson-ingest",
    *,
    cores: str = "*",
    driver_memory: str = "4g",
    extra: dict[str, Any] | None = None,
) -> SparkSession:
    """A local SparkSession configured as the job expects."""
    os.environ["JAVA_HOME"] = java_home()
    # The batch's tasks run Python (msgspec, pyarrow): the workers use this interpreter, not
    # whichever python3 is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", os.path.join(os.getcwd(), ".spark-warehouse"))
        .config("spark.driver.extraJavaOptions", "-Dderby.system.home=/tmp/derby -XX:+UseG1GC")
        # The local file system without .crc side files: its checksum layer cannot name the side file
        # of an object whose name has a ':' (timestamps), and S3 has no such layer either.
        .config("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
    )
    for key, value in {**JOB_SQL_CONF, **(extra or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    quiet_expected_warnings(spark)
    return spark


def quiet_expected_warnings(spark: SparkSession) -> None:
    """Corrupt and missing objects are skipped on purpose and quarantined by the job; Spark's
    per-file warning with a stack trace would only bury the job's own record of them."""
    jvm: Any = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.ERROR
    for name in ("org.apache.spark.sql.execution.datasources.FileScanRDD",):
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
