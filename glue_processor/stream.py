"""The streaming query: manifests directory -> foreachBatch(ManifestBatchJob)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from contracts.layout import MANIFEST_SUFFIX
from glue_processor.batch import ManifestBatchJob
from glue_processor.settings import JobSettings

logger = logging.getLogger(__name__)


def start_query(
    spark: SparkSession, settings: JobSettings, job: ManifestBatchJob, *, manifests_per_trigger: int | None = None
) -> StreamingQuery:
    """Start the named query. ``available-now`` drains what is there and stops (local runs);
    ``processing-time`` runs forever (the 24/7 job). Both run the same code. ``manifests_per_trigger``:
    the count the manifests' bytes ask for (``glue_processor.intake``; default: full manifests)."""
    reader = (
        spark.readStream.format("text")
        .option("wholetext", True)
        .option("maxFilesPerTrigger", manifests_per_trigger or settings.files_per_trigger)
        .option("pathGlobFilter", f"*{MANIFEST_SUFFIX}")
    )
    if settings.manifest_archive_uri:
        # Processed manifests leave the listed prefix, so each trigger's listing stays small however
        # long the job runs (see README: bookkeeping at scale).
        reader = reader.option("cleanSource", "archive").option("sourceArchiveDir", settings.manifest_archive_uri)
    manifests = reader.load(settings.manifest_uri).select(F.input_file_name().alias("manifest_uri"), "value")
    writer = (
        manifests.writeStream.queryName(settings.query_name)
        .option("checkpointLocation", settings.checkpoint_uri)
        .foreachBatch(job)
    )
    if settings.trigger == "available-now":
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=f"{settings.trigger_interval_seconds} seconds")
    query = writer.start()
    logger.info("query started", extra={"query": settings.query_name, "id": str(query.id)})
    return query


def stop_gracefully(query: StreamingQuery, *, poll_seconds: float = 0.5, timeout_seconds: float = 600) -> None:
    """Stop between batches: wait for the running trigger to finish, then stop the query.

    Stopping mid-batch is safe too (the batch re-runs from the checkpoint), but wastes its work.
    """
    _stop_when(query, lambda: not query.status.get("isTriggerActive"), poll_seconds, timeout_seconds)


def stop_after_batch(
    query: StreamingQuery, batch_id: int, *, poll_seconds: float = 0.05, timeout_seconds: float = 600
) -> None:
    """Stop the query as soon as batch ``batch_id`` has ended (Spark reported its progress): between
    batches even when they run back to back, where an idle trigger is a gap of milliseconds that a
    poll would rarely see. A batch Spark started since is stopped, and replayed as it was planned."""

    def ended() -> bool:
        progress = query.lastProgress
        return progress is not None and int(progress.get("batchId", -1)) >= batch_id

    _stop_when(query, ended, poll_seconds, timeout_seconds)


def _stop_when(query: StreamingQuery, ready: Callable[[], bool], poll_seconds: float, timeout_seconds: float) -> None:
    """Stop the query once ``ready()`` (polled), or at the timeout, or not at all when it ended first."""
    deadline = time.monotonic() + timeout_seconds
    try:
        while query.isActive and not ready() and time.monotonic() < deadline:
            time.sleep(poll_seconds)
        query.stop()
    except Exception:  # noqa: BLE001 - the query, or Spark, ended first: there is nothing left to stop
        logger.info("the query ended before it was stopped")


def stop_on_signal(query: StreamingQuery, *, early: threading.Event | None = None) -> threading.Event:
    """Install SIGTERM/SIGINT handlers that stop the query between batches. ``early``: set when a
    stop was asked for before the query started (the query stops at once, between batches too)."""
    import signal

    requested = threading.Event()

    def _handler(signum: int, _frame: object) -> None:
        logger.warning("stop requested", extra={"signal": signum})
        requested.set()
        threading.Thread(target=stop_gracefully, args=(query,), daemon=True).start()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    if early is not None and early.is_set():
        _handler(signal.SIGINT, None)
    return requested
