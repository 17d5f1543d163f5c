"""Where datums go: CloudWatch (batched PutMetricData with retries), a JSON-lines file, or both.

Publishing never fails a batch and never blocks the query: :class:`AsyncPublisher` hands datums
to a background thread; a sink error is logged and counted, never raised.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from contracts.metrics import Datum

if TYPE_CHECKING:
    from mypy_boto3_cloudwatch import CloudWatchClient

logger = logging.getLogger(__name__)
PUT_LIMIT = 1000  # datums per PutMetricData call


class Sink(Protocol):
    def write(self, datums: Sequence[Datum]) -> None: ...


class JsonlSink:
    """Appends one JSON object per datum (name, value, unit, dimensions, timestamp)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def write(self, datums: Sequence[Datum]) -> None:
        if not datums:
            return
        lines = "".join(json.dumps(d.as_json()) + "\n" for d in datums)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(lines)


class CloudWatchSink:
    """PutMetricData in chunks of up to 1000 datums. Retries are the client's own (botocore's standard
    mode, configured where the client is built: :mod:`glue_processor.metrics.setup`); a chunk that
    still fails is counted and logged, never raised: metrics never stop a batch."""

    def __init__(self, client: CloudWatchClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace
        self.failures = 0

    def write(self, datums: Sequence[Datum]) -> None:
        for start in range(0, len(datums), PUT_LIMIT):
            self._put(datums[start : start + PUT_LIMIT])

    def _put(self, chunk: Sequence[Datum]) -> None:
        data = [
            {
                "MetricName": d.name,
                "Dimensions": [{"Name": k, "Value": v} for k, v in sorted(d.dimensions.items())],
                "Timestamp": d.timestamp,
                "Value": d.value,
                "Unit": d.unit,
            }
            for d in chunk
        ]
        try:
            self.client.put_metric_data(Namespace=self.namespace, MetricData=data)  # type: ignore[arg-type]
        except (ClientError, BotoCoreError) as exc:
            self.failures += 1
            logger.error(
                "PutMetricData failed after the client's retries; datums dropped",
                extra={"namespace": self.namespace, "datums": len(chunk), "error": str(exc)},
            )


class AsyncPublisher:
    """Non-blocking front of the sinks: ``emit`` enqueues, a daemon thread writes."""

    def __init__(self, sinks: Iterable[Sink], *, capacity: int = 10_000) -> None:
        self.sinks = list(sinks)
        self._queue: queue.Queue[list[Datum] | None] = queue.Queue(maxsize=capacity)
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="metrics-publisher", daemon=True)
        self._thread.start()

    def emit(self, datums: Sequence[Datum]) -> None:
        if not datums:
            return
        try:
            self._queue.put_nowait(list(datums))
        except queue.Full:
            self.dropped += len(datums)

    def flush(self, timeout_s: float = 30) -> None:
        """Wait until everything emitted so far is written (used at shutdown and in tests)."""
        deadline = time.monotonic() + timeout_s
        while self._queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)

    def close(self) -> None:
        self.flush()
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    return
                for sink in self.sinks:
                    try:
                        sink.write(item)
                    except Exception:  # a metrics sink must never take the job down
                        logger.exception("metrics sink failed", extra={"sink": type(sink).__name__})
            finally:
                self._queue.task_done()
