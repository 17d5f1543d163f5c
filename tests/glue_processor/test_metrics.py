"""The job's metrics: conversion of real progress events, publishing to (moto) CloudWatch."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from contracts import metrics as M
from contracts.ledger import BatchStats, CommitRecord
from glue_processor.metrics.backlog import measure, waiting
from glue_processor.metrics.convert import RateTracker, backlog_datums, progress_datums, record_datums
from glue_processor.metrics.sinks import AsyncPublisher, CloudWatchSink, JsonlSink
from glue_processor.shared.objects import FileInfo
from tests.conftest import EVENTS

DIMS = {"JobName": "ingest", "QueryName": "ndjson-to-parquet"}


def progress_events() -> list[dict]:
    return json.loads((EVENTS / "streaming_progress.json").read_text())


def test_real_progress_events_become_rates_durations_and_utilization() -> None:
    first, second, *_ = progress_events()
    tracker = RateTracker()
    progress_datums(first, dimensions=DIMS, trigger_interval_ms=30_000, records=800, tracker=tracker)
    got = {
        d.name: d
        for d in progress_datums(second, dimensions=DIMS, trigger_interval_ms=30_000, records=800, tracker=tracker)
    }

    duration = second["durationMs"]["triggerExecution"]
    assert got["BatchDuration"].value == duration
    assert got["Utilization"].value == pytest.approx(duration / 30_000)
    assert got["TriggerInterval"].value == 30_000
    for key, metric in {
        "addBatch": "AddBatchDuration",
        "getBatch": "GetBatchDuration",
        "latestOffset": "LatestOffsetDuration",
        "queryPlanning": "QueryPlanningDuration",
        "walCommit": "WalCommitDuration",
    }.items():
        assert got[metric].value == second["durationMs"][key]
    since = (
        datetime.fromisoformat(second["timestamp"].replace("Z", "+00:00"))
        - datetime.fromisoformat(first["timestamp"].replace("Z", "+00:00"))
    ).total_seconds()
    assert got["InputRecordsPerSecond"].value == pytest.approx(800 / since)
    assert got["ProcessedRecordsPerSecond"].value == pytest.approx(800 / (duration / 1000))
    assert got["ManifestsProcessedPerSecond"].value == pytest.approx(second["processedRowsPerSecond"])
    assert all(d.dimensions == DIMS and d.name in M.BY_NAME and d.unit == M.BY_NAME[d.name].unit for d in got.values())


def test_first_batch_has_no_input_rate_yet() -> None:
    first = progress_events()[0]
    names = {
        d.name
        for d in progress_datums(first, dimensions=DIMS, trigger_interval_ms=30_000, records=10, tracker=RateTracker())
    }
    assert "InputRecordsPerSecond" not in names and "ProcessedRecordsPerSecond" in names


def record(**stats: float) -> CommitRecord:
    return CommitRecord(
        query_id="q",
        batch_id=1,
        attempt="a",
        committed_at=datetime(2026, 11, 22, tzinfo=UTC),
        partition="dt=2026-11-22",
        manifests=(),
        data_files=(),
        quarantine_files=(),
        sources=(),
        stats=BatchStats(**stats),
    )


def test_commit_record_datums() -> None:
    got = {
        d.name: d.value
        for d in record_datums(
            record(
                records_in=10,
                records_out=8,
                bad_records=2,
                input_bytes=100,
                output_files=2,
                output_bytes=300,
                missing_files=1,
                max_latency_s=9.5,
                p95_latency_s=7.0,
            ),
            dimensions=DIMS,
        )
    }
    assert got["RecordsIn"] == 10 and got["RecordsOut"] == 8 and got["BadRecords"] == 2
    assert got["ParquetAvgFileSize"] == 150 and got["MissingObjects"] == 1
    assert got["EndToEndLatencyMax"] == 9.5 and got["EndToEndLatencyP95"] == 7.0
    assert "ProcessingDuration" not in got  # no stage timed: nothing to learn a rate from


def test_the_processing_time_is_the_batch_s_parallel_stages() -> None:
    # what the control plane learns a worker's rate from: InputBytes over the executors' stages,
    # the driver's planning and the commit excluded (lambdas/control_plane/observation.py)
    stats = BatchStats(input_bytes=10**9, stage_s={"read_parse_write": 12.5, "write": 2.5, "write_quarantine": 0.4})
    got = {d.name: d.value for d in record_datums(record().model_copy(update={"stats": stats}), dimensions=DIMS)}
    assert got["ProcessingDuration"] == 15_000 and got["InputBytes"] == 10**9


def test_backlog_counts_waiting_manifests_after_the_watermark() -> None:
    listing = [FileInfo(f"u{i}", f"m{i}.json", 100, False, 1000 * i) for i in range(5)]
    listing.append(FileInfo("t", ".tmp-m9.json", 5, False, 1))
    w = waiting(listing, processed={"m2.json"}, watermark_ms=2000)
    assert [i.name for i in w] == ["m3.json", "m4.json"]
    b = measure(w, now_ms=10_000)
    assert (b.manifests, b.bytes, b.oldest_age_s) == (2, 200, 7.0)
    assert b.data_bytes is None  # names that do not say their data bytes


def test_backlog_data_bytes_are_exact_from_the_manifests_names() -> None:
    """Issue 24, cause 4: the backlog in data bytes is the waiting manifests' own totals (a 500 GB
    backfill reads 500 GB), not a count times a mean of per-minute averages."""
    from contracts.layout import manifest_key
    from contracts.manifest import Manifest, ManifestEntry

    def manifest(i: int, size: int) -> Manifest:
        when = datetime(2026, 11, 24, tzinfo=UTC)
        return Manifest.of([ManifestEntry(bucket="bkt", key=f"k{i}", size=size, etag="e", event_time=when)])

    sizes = [1024**3, 7, 512 * 1024**2]
    names = [manifest_key("", manifest(i, s)) for i, s in enumerate(sizes)]
    listing = [FileInfo(n, n, 300, False, 1000 * i) for i, n in enumerate(names)]
    assert measure(listing, now_ms=5_000).data_bytes == sum(sizes)
    # during an upgrade, a name without its bytes counts as the mean of the others
    older = [*listing, FileInfo("old", "20261124T000000Z-abc.json", 300, False, 0)]
    assert measure(older, now_ms=5_000).data_bytes == sum(sizes) + sum(sizes) // 3
    assert measure([], now_ms=5_000).data_bytes == 0
    got = {d.name: d.value for d in backlog_datums(measure(listing, now_ms=5_000), dimensions=DIMS)}
    assert got["BacklogDataBytes"] == sum(sizes)


def test_publishing_to_cloudwatch_and_reading_back(aws: None) -> None:
    client = boto3.client("cloudwatch", region_name="us-east-1")
    publisher = AsyncPublisher([CloudWatchSink(client, "TestNs")])
    now = datetime.now(UTC).replace(second=0, microsecond=0)
    publisher.emit([M.datum(M.RECORDS_OUT, 1200 + i, DIMS, now - timedelta(minutes=i)) for i in range(1500)][:3])
    publisher.emit([M.datum(M.UTILIZATION, 0.5, DIMS, now)] * 1200)  # more than one PutMetricData call
    publisher.close()

    out = client.get_metric_data(
        MetricDataQueries=[
            {
                "Id": "r",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "TestNs",
                        "MetricName": "RecordsOut",
                        "Dimensions": [{"Name": k, "Value": v} for k, v in DIMS.items()],
                    },
                    "Period": 60,
                    "Stat": "Sum",
                },
            },
            {
                "Id": "u",
                "MetricStat": {
                    "Metric": {
                        "Namespace": "TestNs",
                        "MetricName": "Utilization",
                        "Dimensions": [{"Name": k, "Value": v} for k, v in DIMS.items()],
                    },
                    "Period": 60,
                    "Stat": "SampleCount",
                },
            },
        ],
        StartTime=now - timedelta(minutes=10),
        EndTime=now + timedelta(minutes=1),
    )
    by_id = {r["Id"]: r for r in out["MetricDataResults"]}
    assert sorted(by_id["r"]["Values"]) == [1200.0, 1201.0, 1202.0]
    assert by_id["u"]["Values"] == [1200.0]


def test_cloudwatch_failure_never_raises(tmp_path: Path) -> None:
    class Broken:
        def put_metric_data(self, **_: object) -> None:
            from botocore.exceptions import EndpointConnectionError

            raise EndpointConnectionError(endpoint_url="https://monitoring")

    sink = CloudWatchSink(Broken(), "Ns")  # type: ignore[arg-type]
    jsonl = JsonlSink(tmp_path / "m.jsonl")
    publisher = AsyncPublisher([sink, jsonl])
    publisher.emit([M.datum(M.RECORDS_IN, 5, DIMS)])
    publisher.close()
    assert sink.failures == 1
    (line,) = (tmp_path / "m.jsonl").read_text().splitlines()
    assert json.loads(line) | {"timestamp": None} == {
        "name": "RecordsIn",
        "value": 5.0,
        "unit": "Count",
        "dimensions": DIMS,
        "timestamp": None,
    }


def test_datum_dimensions_must_match_the_catalogue() -> None:
    with pytest.raises(ValueError, match="JobName"):
        M.datum(M.RECORDS_IN, 1, {"JobName": "x"})


def test_the_listener_reports_each_batch_of_a_real_query_without_java_exceptions(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Each progress event of a real query becomes its datums, read as Spark's JSON of it. PySpark's
    own adapter copied every event field by field, ending each Java map it iterated with a Java
    exception PySpark converted (five an event, each a dozen classpath searches in the JVM): none
    now."""
    from pyspark.errors.exceptions import captured

    from glue_processor.metrics.listener import MetricsListener

    converted: list[str] = []
    real = captured.convert_exception

    def counting(e: Any) -> Any:
        converted.append(str(e.getClass().getName()))
        return real(e)

    monkeypatch.setattr(captured, "convert_exception", counting)
    source = tmp_path / "in"
    source.mkdir()
    for n in range(3):
        (source / f"{n}.txt").write_text(f"line {n}\n")
    publisher = AsyncPublisher([JsonlSink(tmp_path / "m.jsonl")])
    listener = MetricsListener(
        publisher, query_name="listened", dimensions=DIMS, trigger_interval_ms=30_000, records_by_batch={}
    )
    caplog.set_level(logging.INFO, logger="glue_processor.metrics.listener")
    spark.streams.addListener(listener)
    try:
        query = (
            spark.readStream.format("text")
            .option("maxFilesPerTrigger", 1)
            .load(str(source))
            .writeStream.queryName("listened")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .foreachBatch(lambda df, batch_id: None)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        progress = query.recentProgress

        def durations() -> list[float]:
            publisher.flush()
            path = tmp_path / "m.jsonl"
            lines = path.read_text().splitlines() if path.exists() else []
            return [d["value"] for d in map(json.loads, lines) if d["name"] == "BatchDuration"]

        deadline = time.monotonic() + 30  # the listener bus delivers after the query's own thread
        ended = lambda: [r for r in caplog.records if r.getMessage() == "query terminated"]  # noqa: E731
        while (len(durations()) < len(progress) or not ended()) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        spark.streams.removeListener(listener)
        publisher.close()
    assert len(progress) == 3
    assert durations() == [p["durationMs"]["triggerExecution"] for p in progress]
    assert converted == []
    started = [r for r in caplog.records if r.getMessage() == "query started"]
    assert [r.__dict__["id"] for r in started] == [str(query.id)]
    assert [r.__dict__["exception"] for r in ended()] == [None]


def test_a_released_listener_holds_no_hook_into_its_generation(tmp_path: Path) -> None:
    """The first listener of a process is frozen with its start-up (glue_processor.main.freeze_start_up)
    and never collected: what it still holds once released stays for the process's life. Its idle hook
    is a bound method of its generation's batch job (CI: that job outlived its generation)."""
    from glue_processor.metrics.listener import MetricsListener

    calls: list[int] = []
    publisher = AsyncPublisher([JsonlSink(tmp_path / "m.jsonl")])
    listener = MetricsListener(
        publisher,
        query_name="q",
        dimensions=DIMS,
        trigger_interval_ms=30_000,
        records_by_batch={},
        on_idle=lambda: calls.append(1),
    )
    listener.idle()
    listener.release()
    listener.idle()
    publisher.close()
    assert calls == [1] and listener.on_idle is None
