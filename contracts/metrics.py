"""Every metric the system publishes: name, unit, dimensions and meaning, defined once.

The job, the Lambdas, the dashboard, the alarms and the tests import this module; the dashboard
and the alarms are generated from it, so they cannot name a metric the code does not emit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

DEFAULT_NAMESPACE = "NdjsonIngest"
Unit = Literal["Count", "Bytes", "Seconds", "Milliseconds", "Count/Second", "None"]


class Source(StrEnum):
    JOB = "job"
    MANIFEST_LAMBDA = "manifest-lambda"
    CONTROL_PLANE = "control-plane"


# Dimensions by source. The job's values come from its settings; the Lambdas' from theirs.
JOB_DIMENSIONS = ("JobName", "QueryName")
# A metric of one table (contracts/routing.py) is also published per table, with this dimension more.
TABLE_DIMENSION = "Table"
# A rule's metric (glue_processor/shared/rules.py) is also published per table and rule.
RULE_DIMENSION = "Rule"
MANIFEST_LAMBDA_DIMENSIONS = ("service",)  # powertools' default dimension
CONTROL_PLANE_DIMENSIONS = ("JobName",)


@dataclass(frozen=True)
class MetricDef:
    name: str
    unit: Unit
    source: Source
    description: str
    # also published per table (the job's dimensions and Table): the dashboard's top tables
    per_table: bool = False
    per_rule: bool = False  # also published per table and rule (the job's dimensions, Table and Rule)

    @property
    def dimensions(self) -> tuple[str, ...]:
        return {
            Source.JOB: JOB_DIMENSIONS,
            Source.MANIFEST_LAMBDA: MANIFEST_LAMBDA_DIMENSIONS,
            Source.CONTROL_PLANE: CONTROL_PLANE_DIMENSIONS,
        }[self.source]

    @property
    def table_dimensions(self) -> tuple[str, ...]:
        """The dimensions of its per-table series (only for ``per_table`` metrics)."""
        return (*self.dimensions, TABLE_DIMENSION) if self.per_table else ()

    @property
    def rule_dimensions(self) -> tuple[str, ...]:
        """The dimensions of its per-rule series (only for ``per_rule`` metrics)."""
        return (*self.dimensions, TABLE_DIMENSION, RULE_DIMENSION) if self.per_rule else ()


def _m(
    name: str, unit: Unit, source: Source, description: str, *, per_table: bool = False, per_rule: bool = False
) -> MetricDef:
    return MetricDef(name, unit, source, description, per_table, per_rule)


J, L, C = Source.JOB, Source.MANIFEST_LAMBDA, Source.CONTROL_PLANE

# -- the job, per micro-batch -----------------------------------------------------------------
RECORDS_IN = _m("RecordsIn", "Count", J, "non-blank lines read in the batch", per_table=True)
RECORDS_OUT = _m("RecordsOut", "Count", J, "rows written to Parquet in the batch", per_table=True)
INPUT_BYTES = _m("InputBytes", "Bytes", J, "bytes of the batch's NDJSON objects (as stored)", per_table=True)
INPUT_FILES = _m("InputFiles", "Count", J, "NDJSON objects read in the batch")
MANIFESTS_PROCESSED = _m("ManifestsProcessed", "Count", J, "manifests in the batch")
INPUT_ROWS_PER_SECOND = _m(
    "InputRecordsPerSecond",
    "Count/Second",
    J,
    "records / time since the previous batch started (Spark UI input rate)",
)
PROCESSED_ROWS_PER_SECOND = _m(
    "ProcessedRecordsPerSecond", "Count/Second", J, "records / batch duration (Spark UI process rate)"
)
MANIFEST_INPUT_RATE = _m("ManifestsInputPerSecond", "Count/Second", J, "Spark's inputRowsPerSecond (manifests)")
MANIFEST_PROCESS_RATE = _m(
    "ManifestsProcessedPerSecond", "Count/Second", J, "Spark's processedRowsPerSecond (manifests)"
)
BATCH_DURATION = _m("BatchDuration", "Milliseconds", J, "wall time of the micro-batch")
PROCESSING_DURATION = _m(
    "ProcessingDuration",
    "Milliseconds",
    J,
    "wall time of the batch's parallel stages (read, parse, write): the work executors share; "
    "InputBytes over it per executor is the rate the control plane learns",
)
TRIGGER_INTERVAL = _m("TriggerInterval", "Milliseconds", J, "configured processing-time trigger interval")
UTILIZATION = _m("Utilization", "None", J, "batch duration / trigger interval; near 1 means at capacity")
ADD_BATCH_DURATION = _m("AddBatchDuration", "Milliseconds", J, "time in addBatch (the batch's real work)")
GET_BATCH_DURATION = _m("GetBatchDuration", "Milliseconds", J, "time in getBatch")
LATEST_OFFSET_DURATION = _m("LatestOffsetDuration", "Milliseconds", J, "time finding new manifests")
QUERY_PLANNING_DURATION = _m("QueryPlanningDuration", "Milliseconds", J, "time planning the batch")
WAL_COMMIT_DURATION = _m("WalCommitDuration", "Milliseconds", J, "time writing the offset log")
RESCUED_VALUES = _m(
    "RescuedValues", "Count", J, "values of declared columns that did not convert: NULL, original text in _rescued"
)
EXTRA_VALUES = _m(
    "ExtraValues",
    "Count",
    J,
    "values kept in the _extra map column: keys past max_columns (key explosion), keys no column may have "
    "(a name catalogs refuse, another case of an existing column), identity partition values over 4,096 bytes",
)
NULL_PARTITION_RECORDS = _m(
    "NullPartitionRecords", "Count", J, "rows whose partition value was missing or did not convert (null partition)"
)
PARTITION_OVERFLOW_RECORDS = _m(
    "PartitionOverflowRecords",
    "Count",
    J,
    "rows of partitions past --partition_limit_per_batch, moved to the null partition with their partition values "
    "in _extra (nothing lost; alarms)",
)
ROWS_REPLACED = _m(
    "RowsReplaced",
    "Count",
    J,
    "rows of earlier versions of changed objects (on_overwrite replace) and of deleted ones (on_delete retract) the "
    "batch's commits removed (docs/mirror.md)",
)
BYTES_REWRITTEN = _m(
    "BytesRewritten",
    "Bytes",
    J,
    "bytes of the data files the batch rewrote to remove those rows: what replacing costs (bounded per batch by "
    "--max_rewrite_mb_per_batch)",
)
# -- the table, per committed batch ----------------------------------------------------------
TABLE_COMMIT_DURATION = _m(
    "TableCommitDuration",
    "Milliseconds",
    J,
    "commit record + publication: the Iceberg append, or the hive moves (per table: that table's publication)",
    per_table=True,
)
PUBLISH_FAILURES = _m(
    "PublishFailures",
    "Count",
    J,
    "failed attempts to publish a committed batch's share of a table (retried with back-off; a table that "
    "keeps failing is set aside so the others go on): alarms",
    per_table=True,
)
DEFERRED_PUBLICATIONS = _m(
    "DeferredPublications",
    "Count",
    J,
    "committed table shares set aside after failing to publish for --publish_hold_seconds, retried every batch "
    "until they publish (nothing is lost; the table is behind): alarms",
)
LOAD_HISTORY_BEHIND = _m(
    "LoadHistoryBehind",
    "Count",
    J,
    "committed batches whose load-history rows could not be appended yet: retried before each batch's, oldest "
    "first, and on an idle trigger, 32 at most (the data is in its tables; the ledger's commit records have the "
    "rows): alarms",
)
LOAD_HISTORY_DROPPED = _m(
    "LoadHistoryDropped",
    "Count",
    J,
    "committed batches the load history stopped retrying since the last report (a 33rd owed, or the job "
    "stopped owing them; a restart within 15 minutes appends those from the ledger): their rows are in the "
    "ledger's commit records, which make backfill OUTPUT= and make reconcile read instead of the history: alarms",
)
TABLE_SNAPSHOTS = _m("TableSnapshots", "Count", J, "Iceberg snapshots in the table's metadata (retention bounds it)")
TABLE_DATA_FILES = _m("TableDataFiles", "Count", J, "data files in the table's current snapshot (compaction bounds it)")
BACKLOG_MANIFESTS = _m("BacklogManifests", "Count", J, "manifests written but not yet processed")
BACKLOG_BYTES = _m(
    "BacklogBytes",
    "Bytes",
    J,
    "bytes of the waiting manifest files themselves",
)
BACKLOG_DATA_BYTES = _m(
    "BacklogDataBytes",
    "Bytes",
    J,
    "data bytes the waiting manifests reference, exact (each manifest's name carries its total): what the "
    "control plane sizes the backlog from",
)
BACKLOG_AGE = _m("OldestBacklogAge", "Seconds", J, "age of the oldest waiting manifest")
LATENCY_MAX = _m("EndToEndLatencyMax", "Seconds", J, "max S3 event time -> Parquet commit in the batch")
LATENCY_P95 = _m("EndToEndLatencyP95", "Seconds", J, "p95 S3 event time -> Parquet commit in the batch")
BAD_RECORDS = _m("BadRecords", "Count", J, "lines quarantined (not a JSON object, not UTF-8, ...)", per_table=True)
RULE_VIOLATIONS = _m(
    "RuleViolations",
    "Count",
    J,
    "rows that broke a rule of their table (quarantined, dropped or kept, as the rule's on_fail says); per table "
    "and rule too (glue_processor/shared/rules.py)",
    per_rule=True,
)
RULE_VIOLATION_SURGE = _m(
    "RuleViolationSurge",
    "None",
    J,
    "the batch's highest ratio of a rule's share of broken rows to that rule's usual share (its table's last "
    "~hour of batches; 0 until known): a rule suddenly broken far more often than usual "
    "(glue_processor/metrics/rule_surge.py)",
)
# RuleViolationSurge past which the stack alarms: a rule broken 10x as often as usual (a rule no row
# used to break: by one row in a thousand)
RULE_SURGE_ALARM = 10.0
REFUSED_OBJECTS = _m(
    "RefusedObjects",
    "Count",
    J,
    "objects quarantined because their table refused the batch's schema change (the other tables go on)",
    per_table=True,
)
UNROUTED_OBJECTS = _m(
    "UnroutedObjects", "Count", J, "objects no route leads to a table (routing: unmatched: ignore); not read"
)
MISSING_OBJECTS = _m("MissingObjects", "Count", J, "objects listed in a manifest but not found")
UNREADABLE_OBJECTS = _m(
    "UnreadableObjects",
    "Count",
    J,
    "objects not read whole: missing parts or not decompressed (a truncated gzip: its rows before the break load)",
)
QUARANTINED_MANIFESTS = _m("QuarantinedManifests", "Count", J, "manifests that are invalid or failed too often")
PARTITIONS_WRITTEN = _m("PartitionsWritten", "Count", J, "table partitions the batch wrote files into")
PARTITIONS_PAST_BOUND = _m(
    "PartitionsPastBound",
    "Count",
    J,
    "partitions the batch wrote beyond --max_partitions_per_batch: still written, exactly once, but each costs "
    "the batch a file, a merge and a manifest entry (alarms)",
)
PARQUET_FILES = _m("ParquetFilesWritten", "Count", J, "Parquet files committed by the batch")
PARQUET_AVG_SIZE = _m("ParquetAvgFileSize", "Bytes", J, "average size of those files")

# -- the manifest Lambda, per invocation ------------------------------------------------------
MANIFESTS_WRITTEN = _m("ManifestsWritten", "Count", L, "manifests written")
OBJECTS_PER_MANIFEST = _m("ObjectsPerManifest", "Count", L, "objects listed in a manifest")
BYTES_PER_MANIFEST = _m("BytesPerManifest", "Bytes", L, "object bytes listed in a manifest")
DUPLICATES_DROPPED = _m("DuplicatesDropped", "Count", L, "duplicate notifications dropped")
RECORDS_REJECTED = _m("RecordsRejected", "Count", L, "SQS messages failed back to the queue")
OBJECTS_IGNORED = _m("ObjectsIgnored", "Count", L, "notified objects outside the prefix/suffix filter (logged)")

# -- the control plane ------------------------------------------------------------------------
CURRENT_WORKERS = _m("CurrentWorkers", "Count", C, "workers of the running job run")
DESIRED_WORKERS = _m("DesiredWorkers", "Count", C, "workers the control plane wants")
JOB_RUNNING = _m("JobRunning", "Count", C, "1 while a job run is STARTING/RUNNING, else 0")
JOB_RESTARTS = _m("JobRestarts", "Count", C, "job runs started after a failure")
RESTARTS_EXHAUSTED = _m("RestartsExhausted", "Count", C, "1 when restarts hit their cap (alarm)")
TABLE_OPTIMIZERS_UNHEALTHY = _m(
    "TableOptimizersUnhealthy",
    "Count",
    C,
    "the table's Glue optimizers that are missing, disabled or whose last run failed (the table is not maintained)",
)

ALL: tuple[MetricDef, ...] = tuple(v for v in list(globals().values()) if isinstance(v, MetricDef))
BY_NAME: dict[str, MetricDef] = {m.name: m for m in ALL}


@dataclass(frozen=True)
class Datum:
    """One value of one metric, as published (CloudWatch) or written (metrics.jsonl)."""

    name: str
    value: float
    unit: Unit
    dimensions: dict[str, str] = field(default_factory=dict)
    timestamp: datetime = field(default_factory=lambda: datetime.now(UTC))

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "value": self.value,
            "unit": self.unit,
            "dimensions": self.dimensions,
            "timestamp": self.timestamp.isoformat(),
        }


def datum(metric: MetricDef, value: float, dimensions: dict[str, str], when: datetime | None = None) -> Datum:
    """A datum of a defined metric; its dimensions must be exactly the metric's (or, for a metric
    published per table, the metric's and ``Table``; per rule, and ``Rule``)."""
    got = tuple(sorted(dimensions))
    allowed = {tuple(sorted(d)) for d in (metric.dimensions, metric.table_dimensions, metric.rule_dimensions) if d}
    if got not in allowed:
        raise ValueError(f"{metric.name} takes dimensions {metric.dimensions}, got {sorted(dimensions)}")
    return Datum(metric.name, float(value), metric.unit, dict(dimensions), when or datetime.now(UTC))
