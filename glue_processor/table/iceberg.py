"""The Iceberg sink: a batch's files, written in place under the table, become one append.

Tasks write the batch's Parquet files directly under ``<table>/data/<partition>/``; nothing is
renamed or copied. The driver, after the commit record (the fence, see :mod:`glue_processor.commit`),
commits them as **one** Iceberg fast append whose snapshot summary carries the query id and batch
id. A re-run of a committed batch finds that snapshot and appends nothing: the check and the append
are one optimistic commit (:class:`BatchAbsent` is validated by the catalog against the table's
current metadata, like its own requirements), so two runs finishing the same batch at once append it
once. Files of killed attempts are never in a snapshot; orphan-file clean-up removes them.

Each file's statistics come from the Parquet footer its task returned, so the driver makes no S3
call per file (a re-run after a crash reads the footers back).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, cast

import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import Field
from pyiceberg.exceptions import CommitFailedException, ValidationError, ValidationException
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import ValidatableTableRequirement

from contracts.ledger import CommitRecord
from glue_processor import faults
from glue_processor.publication import PublishRefused, refuse_columns
from glue_processor.table.datafiles import data_file
from glue_processor.table.footer import metadata_of
from glue_processor.table.schema import INGEST_DAY, data_columns, missing_columns

logger = logging.getLogger(__name__)

QUERY_ID = "ingest.query-id"
BATCH_ID = "ingest.batch-id"
ATTEMPT = "ingest.attempt"
EXPIRE_EVERY = 60


class BatchAppended(ValidationException):
    """The batch's snapshot is already in the table: nothing to append."""


class BatchAbsent(ValidatableTableRequirement):
    """Commit only if the table has no snapshot of this (query id, batch id)."""

    type: Literal["assert-ingest-batch-absent"] = Field(default="assert-ingest-batch-absent")
    query_id: str
    batch_id: int

    def validate(self, base_metadata: TableMetadata | None) -> None:  # type: ignore[override]
        if base_metadata is not None and find_snapshot(base_metadata, self.query_id, self.batch_id) is not None:
            raise BatchAppended(f"batch {self.batch_id} of query {self.query_id} is already in the table")


def find_snapshot(metadata: TableMetadata, query_id: str, batch_id: int) -> Snapshot | None:
    """The snapshot that appended this batch, newest first (it is recent when it exists)."""
    wanted = str(batch_id)
    for snapshot in reversed(metadata.snapshots):
        summary = snapshot.summary
        if summary is not None and summary[BATCH_ID] == wanted and summary[QUERY_ID] == query_id:
            return snapshot
    return None


class IcebergSink:
    """Publishes a batch's files as one append to the table."""

    in_place = True

    def __init__(self, table: Callable[[], Table], *, snapshot_retention: timedelta | None = None) -> None:
        self._table = table
        # Every commit costs time in proportion to the snapshots the metadata lists (pyiceberg copies
        # the metadata while it builds a commit: ~1 ms per snapshot, see bench/commit_cost.py), so the
        # job expires old snapshots itself every EXPIRE_EVERY batches instead of waiting for the daily
        # retention optimizer.
        self.snapshot_retention = snapshot_retention

    def open(self) -> None:
        self._table()

    def partition(self, committed_at: datetime) -> str:
        return f"{INGEST_DAY}={committed_at:%Y-%m-%d}"

    def output_dir(self, committed_at: datetime) -> str:
        """The table's data directory: each file goes under its partition's path there."""
        return f"{self._table().location().rstrip('/')}/data"

    def stats(self) -> dict[str, int]:
        """From the metadata in hand (no catalog call): snapshots kept, data files in the current one."""
        metadata = self._table().metadata
        current = metadata.current_snapshot()
        files = current.summary["total-data-files"] if current is not None and current.summary else None
        out = {"snapshots": len(metadata.snapshots)}
        if files is not None:
            out["data_files"] = int(files)
        return out

    def check(self, record: CommitRecord, footers: Mapping[str, bytes] | None = None) -> None:
        """The batch's schema change, as the catalog would take it: valid names, a width one Glue
        UpdateTable carries, types that merge (staged on a transaction that is never committed)."""
        if not record.data_files:
            return
        table = self._table()
        first = record.data_files[0].final
        written = _arrow_schema(table, first, (footers or {}).get(first))
        schema = table.schema()
        new = missing_columns(schema, record.keys, written)
        refuse_columns([f.name for f in schema.fields] + new)
        if new:
            try:
                table.transaction().update_schema().union_by_name(data_columns(record.keys, written))
            except (ValueError, ValidationError) as exc:
                raise PublishRefused(f"the batch's columns do not merge into the table's schema: {exc}") from exc

    def publish(self, record: CommitRecord, footers: Mapping[str, bytes] | None = None) -> int | None:
        """Append the record's data files unless the table has them; the snapshot id, or None when the
        batch wrote no data file."""
        if not record.data_files:
            return None
        table = self._table()
        table.refresh()
        done = find_snapshot(table.metadata, record.query_id, record.batch_id)
        if done is not None:
            return done.snapshot_id
        try:
            snapshot_id = self._append(table, record, footers or {})
        except BatchAppended:  # another run appended it between the refresh and the commit
            table.refresh()
            done = find_snapshot(table.metadata, record.query_id, record.batch_id)
            if done is None:
                raise
            return done.snapshot_id
        self._expire(table, record.batch_id)
        return snapshot_id

    def _expire(self, table: Table, batch_id: int) -> None:
        if self.snapshot_retention is None or batch_id % EXPIRE_EVERY:
            return
        from glue_processor.table.compact import expire_snapshots

        try:
            expired = expire_snapshots(table, max_age=self.snapshot_retention)
            logger.info("expired old snapshots", extra={"batch_id": batch_id, "expired": expired})
        except CommitFailedException:  # a concurrent commit: the next round expires them
            logger.warning("snapshot expiry conflicted; retried later", extra={"batch_id": batch_id})

    def _append(self, table: Table, record: CommitRecord, footers: Mapping[str, bytes]) -> int:
        properties = {QUERY_ID: record.query_id, BATCH_ID: str(record.batch_id), ATTEMPT: record.attempt}
        # the files' own column types (declared columns are typed): the first file's footer tells
        first = record.data_files[0].final
        written = _arrow_schema(table, first, footers.get(first))
        with table.transaction() as tx:
            new = missing_columns(tx.table_metadata.schema(), record.keys, written)
            if new:
                with tx.update_schema() as update:
                    update.union_by_name(data_columns(record.keys, written))
            tx._stage((), (cast(Any, BatchAbsent(query_id=record.query_id, batch_id=record.batch_id)),))
            metadata = tx.table_metadata
            files = [data_file(table.io, metadata, f.final, f.bytes, footers.get(f.final)) for f in record.data_files]
            with tx.update_snapshot(snapshot_properties=properties).fast_append() as append:
                for entry in files:
                    append.append_data_file(entry)
            faults.hit("before-table-commit")
        snapshot = find_snapshot(table.metadata, record.query_id, record.batch_id)
        if snapshot is None:
            raise CommitFailedException(f"batch {record.batch_id}: the append is not in the table after its commit")
        logger.info(
            "batch appended to the table",
            extra={
                "batch_id": record.batch_id,
                "snapshot_id": snapshot.snapshot_id,
                "files": len(files),
                "new_columns": new,
            },
        )
        return snapshot.snapshot_id


def _arrow_schema(table: Table, path: str, footer: bytes | None) -> pa.Schema:
    if footer:
        return metadata_of(footer).schema.to_arrow_schema()
    with table.io.new_input(path).open() as stream:
        return pq.read_schema(stream)
