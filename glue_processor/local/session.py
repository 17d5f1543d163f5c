"""A local SparkSession configured as the job expects (``make run``, tests, benchmarks).

Local only: it finds a JDK on this machine. On Glue, ``main`` takes Glue's session instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from glue_processor.local.java import java_home
from glue_processor.session import JOB_SQL_CONF, quiet_expected_warnings

QUIET_LOG4J = Path(__file__).with_name("log4j2-quiet.properties")
# The checkpoint's logs written through Hadoop's FileSystem, not its FileContext: on the local file
# system FileContext goes through a checksum layer that forks `readlink` and `chmod` for each file
# (no native Hadoop library here), ~45 processes a trigger: 135 -> 78 ms a trigger with an empty
# foreachBatch, ~60 ms of each trigger (make bench-serial). Local only: the job's checkpoint on
# Glue is on S3.
CHECKPOINT_FILE_MANAGER = "org.apache.spark.sql.execution.streaming.FileSystemBasedCheckpointFileManager"


def local_session(
    app_name: str = "ndjson-ingest",
    *,
    cores: str = "*",
    driver_memory: str = "4g",
    extra: dict[str, Any] | None = None,
    quiet: bool = False,
) -> SparkSession:
    """A local SparkSession configured as the job expects; ``quiet``: the JVM logs errors only (a
    user's ``make run`` reads our lines, not Spark's start-up warnings)."""
    os.environ["JAVA_HOME"] = java_home()
    java_options = "-Dderby.system.home=/tmp/derby -XX:+UseG1GC"
    if quiet:
        # the loopback-hostname warning is decided before any log configuration: name the address
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        java_options += f" -Dlog4j2.configurationFile={QUIET_LOG4J.as_uri()}"
    # The batch's tasks run Python (the native parser, pyarrow): the workers use this interpreter, not
    # whichever python3 is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", os.path.join(os.getcwd(), ".spark-warehouse"))
        .config("spark.driver.extraJavaOptions", java_options)
        # The local file system without .crc side files: its checksum layer cannot name the side file
        # of an object whose name has a ':' (timestamps), and S3 has no such layer either.
        .config("spark.hadoop.fs.file.impl", "org.apache.hadoop.fs.RawLocalFileSystem")
        .config("spark.sql.streaming.checkpointFileManagerClass", CHECKPOINT_FILE_MANAGER)
    )
    for key, value in {**JOB_SQL_CONF, **(extra or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR" if quiet else "WARN")
    quiet_expected_warnings(spark)
    return spark
