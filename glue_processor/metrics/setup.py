"""Wiring the job's metrics from its settings: sinks, publisher, listener, backlog probe."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pyspark.sql import SparkSession

from glue_processor.metrics.backlog import BacklogProbe
from glue_processor.metrics.convert import Backlog, backlog_datums
from glue_processor.metrics.listener import MetricsListener
from glue_processor.metrics.rule_surge import RuleBaseline
from glue_processor.metrics.sinks import AsyncPublisher, CloudWatchSink, JsonlSink, Sink
from glue_processor.settings import JobSettings


def sinks_for(settings: JobSettings) -> list[Sink]:
    sinks: list[Sink] = []
    if "cloudwatch" in settings.metrics_sinks:
        import boto3
        from botocore.config import Config

        client = boto3.client("cloudwatch", config=Config(retries={"max_attempts": 5, "mode": "standard"}))
        sinks.append(CloudWatchSink(client, settings.metrics_namespace))
    if "jsonl" in settings.metrics_sinks and settings.metrics_jsonl_path:
        sinks.append(JsonlSink(Path(settings.metrics_jsonl_path)))
    return sinks


@dataclass
class JobMetrics:
    """Everything the job uses to report on itself; ``close`` flushes and stops it."""

    publisher: AsyncPublisher
    probe: BacklogProbe
    dimensions: dict[str, str]
    records_by_batch: dict[int, int] = field(default_factory=dict)
    rule_baseline: RuleBaseline = field(default_factory=RuleBaseline)
    listener: MetricsListener | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    def attach(self, spark: SparkSession, settings: JobSettings, *, on_idle: Callable[[], None] | None = None) -> None:
        """Register the progress listener and start the periodic backlog probe. ``on_idle``: called
        on the listener's thread when a trigger finds no data."""
        self.listener = MetricsListener(
            self.publisher,
            query_name=settings.query_name,
            dimensions=self.dimensions,
            trigger_interval_ms=settings.trigger_interval_seconds * 1000,
            records_by_batch=self.records_by_batch,
            on_idle=on_idle,
        )
        spark.streams.addListener(self.listener)
        self.probe.run_every(
            settings.trigger_interval_seconds,
            lambda b: self.publisher.emit(backlog_datums(b, dimensions=self.dimensions)),
            self._stop,
        )

    def emit_backlog(self, backlog: Backlog) -> None:
        self.publisher.emit(backlog_datums(backlog, dimensions=self.dimensions))

    def close(self, spark: SparkSession, *, progress_wait_s: float = 10) -> None:
        """Stop the probe, let the last progress events arrive, flush the publisher."""
        self._stop.set()
        deadline = time.monotonic() + progress_wait_s
        while self.records_by_batch and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.listener is not None:
            spark.streams.removeListener(self.listener)
            self.listener.release()
            self.listener = None
        self.publisher.close()


def job_metrics(spark: SparkSession, settings: JobSettings, sinks: list[Sink] | None = None) -> JobMetrics:
    return JobMetrics(
        publisher=AsyncPublisher(sinks_for(settings) if sinks is None else sinks),
        probe=BacklogProbe(settings.manifest_uri),
        dimensions=settings.metric_dimensions,
    )
