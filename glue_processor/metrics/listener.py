"""The streaming listener: progress events -> datums, handed off without blocking the query."""

from __future__ import annotations

import json
import logging
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

from glue_processor.metrics.convert import RateTracker, progress_datums
from glue_processor.metrics.sinks import AsyncPublisher

logger = logging.getLogger(__name__)


class MetricsListener(StreamingQueryListener):
    """Publishes rates, durations and utilization for every progress event of one query.

    Callbacks only convert and enqueue (the publisher writes on its own thread), and swallow
    their own errors after logging them: a listener must never block or fail the query.
    """

    def __init__(
        self,
        publisher: AsyncPublisher,
        *,
        query_name: str,
        dimensions: dict[str, str],
        trigger_interval_ms: int,
        records_by_batch: dict[int, int],
    ) -> None:
        self.publisher = publisher
        self.query_name = query_name
        self.dimensions = dimensions
        self.trigger_interval_ms = trigger_interval_ms
        self.records_by_batch = records_by_batch
        self.tracker = RateTracker()

    def onQueryStarted(self, event: Any) -> None:
        logger.info("query started", extra={"query": self.query_name, "id": str(event.id)})

    def onQueryProgress(self, event: Any) -> None:
        try:
            progress = json.loads(event.progress.json)
            if progress.get("name") != self.query_name:
                return
            records = self.records_by_batch.pop(int(progress.get("batchId", -1)), None)
            self.publisher.emit(
                progress_datums(
                    progress,
                    dimensions=self.dimensions,
                    trigger_interval_ms=self.trigger_interval_ms,
                    records=records,
                    tracker=self.tracker,
                )
            )
        except Exception:  # never let a metrics problem reach the query
            logger.exception("progress conversion failed", extra={"query": self.query_name})

    def onQueryIdle(self, event: Any) -> None:
        return

    def onQueryTerminated(self, event: Any) -> None:
        logger.info("query terminated", extra={"query": self.query_name, "exception": event.exception})
