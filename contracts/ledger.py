"""The batch commit record: what a committed micro-batch published, and from which objects.

The job writes one record per batch under ``<output>/_commits/<query_id>/``. Writing it is the
batch's commit point (see ``glue_processor.commit.ledger``); the records together are the ledger of
every object ever ingested, read by the local summary, ``make status`` and reconciliation.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SourceStatus = Literal["ingested", "empty", "missing", "unreadable", "rejected", "duplicate", "superseded"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PublishedFile(_Frozen):
    staged: str
    final: str
    bytes: int = Field(ge=0)


class SourceRecord(_Frozen):
    """The outcome for one object version listed in a manifest of this batch."""

    bucket: str
    key: str
    etag: str
    size: int
    event_time: datetime
    manifest_uri: str
    status: SourceStatus
    records: int = 0
    bad_records: int = 0
    reason: str | None = None
    version_id: str | None = None  # the S3 version read (versioned buckets)


class BatchStats(_Frozen):
    manifests: int = 0
    bad_manifests: int = 0
    files: int = 0
    missing_files: int = 0
    unreadable_files: int = 0
    input_bytes: int = 0
    text_bytes: int = 0
    records_in: int = 0
    records_out: int = 0
    bad_records: int = 0
    rescued_values: int = 0  # values of declared columns that did not convert (kept in _rescued)
    extra_values: int = 0  # values of keys past max_columns (kept in _extra)
    null_partition_records: int = 0  # rows whose partition value was missing or did not convert
    output_files: int = 0
    output_bytes: int = 0
    partitions: int = 0  # table partitions the batch's data files are in
    columns: int = 0
    duration_s: float = 0.0
    stage_s: dict[str, float] = Field(default_factory=dict)
    max_latency_s: float | None = None
    p95_latency_s: float | None = None


class CommitRecord(_Frozen):
    schema_version: Literal[1] = 1
    query_id: str
    batch_id: int = Field(ge=0)
    attempt: str
    committed_at: datetime
    partition: str
    manifests: tuple[str, ...]
    data_files: tuple[PublishedFile, ...]
    quarantine_files: tuple[PublishedFile, ...]
    sources: tuple[SourceRecord, ...]
    stats: BatchStats
    # The JSON keys known when the batch was written (its columns); a restarted job starts from them.
    keys: tuple[str, ...] = ()
