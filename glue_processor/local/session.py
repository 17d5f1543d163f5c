"""A local SparkSession configured as the job expects (``make run``, tests, benchmarks).

Local only: it finds a JDK on this machine. On Glue, ``main`` takes Glue's session instead.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from pyspark.sql import SparkSession

from glue_processor.local.java import java_home
from glue_processor.session import JOB_SQL_CONF, quiet_expected_warnings


def local_session(
    app_name: str = "ndjson-ingest",
    *,
    cores: str = "*",
    driver_memory: str = "4g",
    extra: dict[str, Any] | None = None,
) -> SparkSession:
    """A local SparkSession configured as the job expects."""
    os.environ["JAVA_HOME"] = java_home()
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
