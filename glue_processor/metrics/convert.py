"""Pure conversions to datums: streaming progress, commit records, backlog snapshots."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from contracts import metrics as M
from contracts.ledger import CommitRecord
from contracts.metrics import Datum, datum

# Spark's durationMs keys -> our metrics
OPERATION_METRICS = {
    "addBatch": M.ADD_BATCH_DURATION,
    "getBatch": M.GET_BATCH_DURATION,
    "latestOffset": M.LATEST_OFFSET_DURATION,
    "queryPlanning": M.QUERY_PLANNING_DURATION,
    "walCommit": M.WAL_COMMIT_DURATION,
}


def _when(progress: Mapping[str, Any]) -> datetime:
    stamp = str(progress.get("timestamp", ""))
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).astimezone(UTC)
    except ValueError:
        return datetime.now(UTC)


@dataclass
class RateTracker:
    """Remembers the previous trigger's start to compute the input rate in records/s."""

    previous_start: datetime | None = None


def progress_datums(
    progress: Mapping[str, Any],
    *,
    dimensions: dict[str, str],
    trigger_interval_ms: int,
    records: int | None,
    tracker: RateTracker,
) -> list[Datum]:
    """Datums for one ``StreamingQueryProgress`` (as its JSON dict).

    ``records`` is the number of NDJSON records the batch read (from its commit record): Spark's
    own rows are manifests, so both views are published.
    """
    when = _when(progress)
    durations: Mapping[str, Any] = progress.get("durationMs") or {}
    batch_ms = float(progress.get("batchDuration") or durations.get("triggerExecution") or 0)
    out = [
        datum(M.BATCH_DURATION, batch_ms, dimensions, when),
        datum(M.TRIGGER_INTERVAL, trigger_interval_ms, dimensions, when),
        datum(M.UTILIZATION, batch_ms / trigger_interval_ms if trigger_interval_ms else 0.0, dimensions, when),
        datum(M.MANIFEST_INPUT_RATE, float(progress.get("inputRowsPerSecond") or 0.0), dimensions, when),
        datum(M.MANIFEST_PROCESS_RATE, float(progress.get("processedRowsPerSecond") or 0.0), dimensions, when),
    ]
    for key, metric in OPERATION_METRICS.items():
        if key in durations:
            out.append(datum(metric, float(durations[key]), dimensions, when))
    if records is not None:
        since = (when - tracker.previous_start).total_seconds() if tracker.previous_start else None
        # The input rate divides by the time since the previous batch started, as the Spark UI does.
        if since and since > 0:
            out.append(datum(M.INPUT_ROWS_PER_SECOND, records / since, dimensions, when))
        if batch_ms > 0:
            out.append(datum(M.PROCESSED_ROWS_PER_SECOND, records / (batch_ms / 1000), dimensions, when))
    if int(progress.get("numInputRows") or 0) > 0:
        tracker.previous_start = when
    return out


def record_datums(
    record: CommitRecord,
    *,
    dimensions: dict[str, str],
    max_partitions: int | None = None,
    deferred: int = 0,
    history_behind: int = 0,
    history_dropped: int = 0,
) -> list[Datum]:
    """Datums for one committed batch (``max_partitions``: the bound its partitions are held to;
    ``deferred``: the shares set aside after it; ``history_behind``: the appends the load history
    is owed after it; ``history_dropped``: those it stopped retrying since the last report)."""
    s = record.stats
    when = record.committed_at
    refused = sum(1 for x in record.sources if x.status == "rejected" and x.table)
    out = [
        datum(M.UNROUTED_OBJECTS, sum(1 for x in record.sources if x.status == "ignored"), dimensions, when),
        datum(M.REFUSED_OBJECTS, refused, dimensions, when),
        datum(M.DEFERRED_PUBLICATIONS, deferred, dimensions, when),
        datum(M.LOAD_HISTORY_BEHIND, history_behind, dimensions, when),
        datum(M.LOAD_HISTORY_DROPPED, history_dropped, dimensions, when),
        datum(M.RECORDS_IN, s.records_in, dimensions, when),
        datum(M.RECORDS_OUT, s.records_out, dimensions, when),
        datum(M.INPUT_BYTES, s.input_bytes, dimensions, when),
        datum(M.INPUT_FILES, s.files, dimensions, when),
        datum(M.MANIFESTS_PROCESSED, s.manifests, dimensions, when),
        datum(M.BAD_RECORDS, s.bad_records, dimensions, when),
        datum(M.MISSING_OBJECTS, s.missing_files, dimensions, when),
        datum(M.UNREADABLE_OBJECTS, s.unreadable_files + s.partial_files, dimensions, when),
        datum(M.QUARANTINED_MANIFESTS, s.bad_manifests, dimensions, when),
        datum(M.PARQUET_FILES, s.output_files, dimensions, when),
        datum(M.PARTITIONS_WRITTEN, s.partitions, dimensions, when),
        datum(M.RESCUED_VALUES, s.rescued_values, dimensions, when),
        datum(M.NULL_PARTITION_RECORDS, s.null_partition_records, dimensions, when),
        datum(M.PARTITION_OVERFLOW_RECORDS, s.overflow_records, dimensions, when),
        datum(M.EXTRA_VALUES, s.extra_values, dimensions, when),
        datum(M.ROWS_REPLACED, s.rows_removed, dimensions, when),
        datum(M.BYTES_REWRITTEN, s.rewrite_bytes, dimensions, when),
        datum(
            M.RULE_VIOLATIONS,
            sum(n for share in record.tables for n in share.stats.rule_violations.values()),
            dimensions,
            when,
        ),
    ]
    processing = s.parallel_s
    if processing > 0:
        out.append(datum(M.PROCESSING_DURATION, processing * 1000, dimensions, when))
    if s.output_files:
        out.append(datum(M.PARQUET_AVG_SIZE, s.output_bytes / s.output_files, dimensions, when))
    if s.max_latency_s is not None:
        out.append(datum(M.LATENCY_MAX, s.max_latency_s, dimensions, when))
    if s.p95_latency_s is not None:
        out.append(datum(M.LATENCY_P95, s.p95_latency_s, dimensions, when))
    if max_partitions is not None:
        out.append(datum(M.PARTITIONS_PAST_BOUND, max(0, s.partitions - max_partitions), dimensions, when))
    return out


def share_datums(
    record: CommitRecord,
    commit_ms: Mapping[str, float],
    *,
    dimensions: dict[str, str],
    table_of: Callable[[str], str] = lambda t: t,
) -> list[Datum]:
    """Each table's share of a batch, with the ``Table`` dimension: records, bytes, bad lines,
    objects refused, and its publication's duration (the dashboard's top tables)."""
    when = record.committed_at
    out: list[Datum] = []
    for share in record.tables:
        table = table_of(share.table)
        dims = {**dimensions, M.TABLE_DIMENSION: table}
        s = share.stats
        refused = sum(1 for x in record.sources if x.status == "rejected" and x.table == share.table)
        out += [
            datum(M.RECORDS_IN, s.records_in, dims, when),
            datum(M.RECORDS_OUT, s.records_out, dims, when),
            datum(M.INPUT_BYTES, s.input_bytes, dims, when),
            datum(M.BAD_RECORDS, s.bad_records, dims, when),
            datum(M.REFUSED_OBJECTS, refused, dims, when),
        ]
        if share.table in commit_ms:
            out.append(datum(M.TABLE_COMMIT_DURATION, commit_ms[share.table], dims, when))
        for rule, n in s.rule_violations.items():
            out.append(datum(M.RULE_VIOLATIONS, n, {**dims, M.RULE_DIMENSION: rule}, when))
    return out


def table_datums(
    commit_ms: float, tables: Mapping[str, dict[str, int]], *, dimensions: dict[str, str], when: datetime
) -> list[Datum]:
    """Datums of a batch's commit: its duration, and the tables' size after it (Iceberg only): the
    most snapshots any table keeps (what a commit's cost grows with), the data files of them all."""
    # a failed publication attempt counts 1 as it happens (the batch may wait long); a published batch 0
    out = [datum(M.TABLE_COMMIT_DURATION, commit_ms, dimensions, when), datum(M.PUBLISH_FAILURES, 0, dimensions, when)]
    snapshots = [t["snapshots"] for t in tables.values() if "snapshots" in t]
    files = [t["data_files"] for t in tables.values() if "data_files" in t]
    if snapshots:
        out.append(datum(M.TABLE_SNAPSHOTS, max(snapshots), dimensions, when))
    if files:
        out.append(datum(M.TABLE_DATA_FILES, sum(files), dimensions, when))
    return out


@dataclass(frozen=True)
class Backlog:
    manifests: int
    bytes: int
    oldest_age_s: float
    # data bytes the waiting manifests reference, from their names (None: no name says)
    data_bytes: int | None = None
    # each waiting manifest's data bytes, oldest first (those whose name says): what the next
    # triggers take, in the order they take it (glue_processor.intake)
    sizes: tuple[int, ...] = ()


def backlog_datums(backlog: Backlog, *, dimensions: dict[str, str], when: datetime | None = None) -> list[Datum]:
    return [
        datum(M.BACKLOG_MANIFESTS, backlog.manifests, dimensions, when),
        datum(M.BACKLOG_BYTES, backlog.bytes, dimensions, when),
        datum(M.BACKLOG_AGE, backlog.oldest_age_s, dimensions, when),
        *(
            [datum(M.BACKLOG_DATA_BYTES, backlog.data_bytes, dimensions, when)]
            if backlog.data_bytes is not None
            else []
        ),
    ]


def history_datums(behind: int, dropped: int, *, dimensions: dict[str, str]) -> list[Datum]:
    """What the load history owes when no batch reports it (an idle trigger's retry, the job's stop)."""
    return [
        datum(M.LOAD_HISTORY_BEHIND, behind, dimensions),
        datum(M.LOAD_HISTORY_DROPPED, dropped, dimensions),
    ]
