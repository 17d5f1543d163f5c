"""The Spark settings the job relies on, applied to Glue's session and to a local one alike.

Nothing here may import ``glue_processor.local``: this module ships in the job's zip, and the
local runner (``glue_processor/local/``) does not.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import SparkSession

# SQL settings the batch path relies on, applied on Glue and locally alike.
JOB_SQL_CONF = {
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.parquet.compression.codec": "snappy",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.shuffle.partitions": "64",
    # Keep the file source's metadata log compact (see README: bookkeeping at scale).
    "spark.sql.streaming.fileSource.log.compactInterval": "10",
    "spark.sql.streaming.minBatchesToRetain": "100",
    # The plan each SQL execution posts for the Spark UI, in its one-tree form: the default,
    # "formatted", renders every node again with its attributes, on the driver, for every execution
    # (a trigger's batch, the manifests' collect): 12 % of the stream thread's samples (JFR), and
    # 0.22-0.23 -> 0.19 s a trigger in make bench-serial. The UI still shows each plan, in one tree.
    "spark.sql.ui.explainMode": "simple",
}


def apply_job_conf(spark: SparkSession) -> None:
    for key, value in JOB_SQL_CONF.items():
        spark.conf.set(key, value)


def quiet_expected_warnings(spark: SparkSession) -> None:
    """Corrupt and missing objects are skipped on purpose and quarantined by the job; Spark's
    per-file warning with a stack trace would only bury the job's own record of them."""
    jvm: Any = spark.sparkContext._jvm
    level = jvm.org.apache.logging.log4j.Level.ERROR
    for name in ("org.apache.spark.sql.execution.datasources.FileScanRDD",):
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
