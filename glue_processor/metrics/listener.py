"""The streaming listener: progress events -> datums, handed off without blocking the query.

Spark calls the listener for every progress event on its listener thread, beside the next trigger.
PySpark's own adapter (``JStreamingQueryListener``) copies each event into Python field by field
before the listener sees it: ~60 py4j round trips, and five Java exceptions (py4j ends each Java map
it iterates with ``NoSuchElementException``), each converted by PySpark with a dozen class lookups
that search the JVM's whole classpath. JFR of ``make bench-serial``: ~9 ms of the JVM's time an
event, plus the Python side's share of the GIL the batch's own Python code needs. This listener
takes the event's JSON instead (one round trip, Spark's own serialisation) through its own adapter.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, ClassVar

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
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self.publisher = publisher
        self.query_name = query_name
        self.dimensions = dimensions
        self.trigger_interval_ms = trigger_interval_ms
        self.records_by_batch = records_by_batch
        self.on_idle = on_idle  # an idle trigger's turn for work owed between batches
        self.tracker = RateTracker()
        self._java: Any = None
        self._released = False

    @property
    def _jlistener(self) -> Any:
        """What ``spark.streams.addListener`` and ``removeListener`` hand to Spark: Spark's wrapper
        around :class:`_AsJson` (PySpark's is the same wrapper around its field-by-field adapter)."""
        if self._released:
            raise RuntimeError("this listener was released: a new one listens to a new query")
        if self._java is None:
            from pyspark import SparkContext

            jvm: Any = SparkContext._jvm
            self._java = jvm.org.apache.spark.sql.streaming.PythonStreamingQueryListenerWrapper(_AsJson(self))
        return self._java

    def release(self) -> None:
        """Once removed from Spark: let go of the JVM's wrapper. It holds this listener through
        py4j's callbacks, and this listener holds it: a cycle across the two runtimes that neither
        collector sees (one listener and its publisher kept a checkpoint generation)."""
        self._java = None
        self.on_idle = None  # a bound method of this generation's batch job: held, it keeps the job
        self._released = True

    def onQueryStarted(self, event: Any) -> None:
        self.started(str(event.id))

    def onQueryProgress(self, event: Any) -> None:
        self.progressed(event.progress.json)

    def onQueryIdle(self, event: Any) -> None:
        self.idle()

    def onQueryTerminated(self, event: Any) -> None:
        self.terminated(event.exception)

    def started(self, query_id: str) -> None:
        logger.info("query started", extra={"query": self.query_name, "id": query_id})

    def progressed(self, progress_json: str) -> None:
        """One progress event, as Spark's JSON of it."""
        try:
            progress = json.loads(progress_json)
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

    def idle(self) -> None:
        """A trigger found no data (Spark says so every ``noDataProgressEventInterval``, 10 s by default)."""
        if self.on_idle is None:
            return
        try:
            self.on_idle()
        except Exception:  # never let it reach the query
            logger.exception("idle-trigger work failed", extra={"query": self.query_name})

    def terminated(self, exception: str | None) -> None:
        logger.info("query terminated", extra={"query": self.query_name, "exception": exception})


class _AsJson:
    """Spark's ``PythonStreamingQueryListener``, implemented for py4j: each event read in the round
    trips it needs (a progress event: its JSON), never copied field by field."""

    def __init__(self, listener: MetricsListener) -> None:
        self._listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        try:
            self._listener.started(jevent.id().toString())
        except Exception:
            logger.exception("query start event unreadable", extra={"query": self._listener.query_name})

    def onQueryProgress(self, jevent: Any) -> None:
        try:
            progress_json = jevent.progress().json()
        except Exception:  # the event unreadable (the JVM going away mid-event): logged, never raised
            logger.exception("progress event unreadable", extra={"query": self._listener.query_name})
            return
        self._listener.progressed(progress_json)

    def onQueryIdle(self, jevent: Any) -> None:
        self._listener.idle()

    def onQueryTerminated(self, jevent: Any) -> None:
        try:
            exception = jevent.exception()
            self._listener.terminated(exception.get() if exception.isDefined() else None)
        except Exception:
            logger.exception("query termination event unreadable", extra={"query": self._listener.query_name})

    class Java:
        implements: ClassVar[list[str]] = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
