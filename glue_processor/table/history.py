"""The load history: every object version a batch accepted, as rows of an Iceberg table.

``<database>.load_history`` (``--load_history_table``) holds one row per object version listed in
a batch's manifests: which table it went to, its outcome (ingested, empty, missing, unreadable,
duplicate...), rows written, lines quarantined, the batch, the data snapshot, its S3 event time and
the commit time. It is appended right after the batch's data, exactly once per batch by the same
check as the data (the snapshot summary names the query and batch, and a guard refuses a second
append), so a replay after a crash between the two appends only what is missing. Readers query it
like any table (Athena, ``make query``), e.g. what landed and was never loaded.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, timedelta

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from contracts.ledger import CommitRecord
from glue_processor.table.catalog import TABLE_PROPERTIES
from glue_processor.table.iceberg import (
    ATTEMPT,
    BATCH_ID,
    QUERY_ID,
    BatchAppended,
    expire_now_and_then,
    find_snapshot,
    guarded,
)

logger = logging.getLogger(__name__)

TIME = pa.timestamp("us", tz="UTC")
SCHEMA = pa.schema(
    [
        pa.field("table_name", pa.string()),
        pa.field("bucket", pa.string()),
        pa.field("key", pa.string()),
        pa.field("version_id", pa.string()),
        pa.field("etag", pa.string()),
        pa.field("size", pa.int64()),
        pa.field("status", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("rows_written", pa.int64()),
        pa.field("lines_quarantined", pa.int64()),
        pa.field("event_time", TIME),
        pa.field("commit_time", TIME),
        pa.field("commit_date", pa.date32()),
        pa.field("batch_id", pa.int64()),
        pa.field("query_id", pa.string()),
        pa.field("snapshot_id", pa.int64()),
        pa.field("manifest_uri", pa.string()),
    ]
)


def history_rows(record: CommitRecord, *, table_name: str, snapshot_id: int | None) -> pa.Table:
    """The batch's rows of the load history (one per object version its manifests listed)."""
    s = record.sources
    return pa.table(
        {
            "table_name": [table_name] * len(s),
            "bucket": [x.bucket for x in s],
            "key": [x.key for x in s],
            "version_id": [x.version_id for x in s],
            "etag": [x.etag for x in s],
            "size": [x.size for x in s],
            "status": [x.status for x in s],
            "reason": [x.reason for x in s],
            "rows_written": [x.records for x in s],
            "lines_quarantined": [x.bad_records for x in s],
            "event_time": [x.event_time for x in s],
            "commit_time": [record.committed_at] * len(s),
            "commit_date": [record.committed_at.astimezone(UTC).date()] * len(s),
            "batch_id": [record.batch_id] * len(s),
            "query_id": [record.query_id] * len(s),
            "snapshot_id": [snapshot_id] * len(s),
            "manifest_uri": [x.manifest_uri for x in s],
        },
        schema=SCHEMA,
    )


def ensure_history_table(catalog: Catalog, database: str, name: str, *, location: str) -> Table:
    """Load the load-history table, creating it (partitioned by the commit date) on first use.

    An identity partition on a date column, not ``day(commit_time)``: pyiceberg computes a day
    transform with pyiceberg-core, which Glue does not provide."""
    identifier = (database, name)
    try:
        return catalog.load_table(identifier)
    except NoSuchTableError:
        pass
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(database)
    try:
        table = catalog.create_table(identifier, schema=SCHEMA, location=location, properties=TABLE_PROPERTIES)
    except TableAlreadyExistsError:  # another run created it first
        return catalog.load_table(identifier)
    with table.update_spec() as spec:
        spec.add_field("commit_date", IdentityTransform(), "commit_date")
    logger.info("created the load-history table", extra={"table": f"{database}.{name}", "location": location})
    return table


class LoadHistory:
    """Appends a committed batch's rows of the load history, once."""

    def __init__(self, table: Callable[[], Table], *, data_table: str, snapshot_retention: timedelta) -> None:
        self._table = table
        self.data_table = data_table
        self.snapshot_retention = snapshot_retention  # a snapshot per batch: expired as the data's

    def publish(self, record: CommitRecord, snapshot_id: int | None) -> None:
        """Append the batch's rows unless the history has them. The history never holds up the
        stream: a failure is logged (the ledger's commit record keeps every row's content) and the
        batch counts as published."""
        if not record.sources:
            return
        try:
            self._append(record, snapshot_id)
        except Exception:
            logger.exception(
                "could not append the batch to the load history; the ledger's commit record has its rows",
                extra={"batch_id": record.batch_id, "query_id": record.query_id},
            )

    def _append(self, record: CommitRecord, snapshot_id: int | None) -> None:
        table = self._table()
        table.refresh()
        if find_snapshot(table.metadata, record.query_id, record.batch_id) is not None:
            return
        rows = history_rows(record, table_name=self.data_table, snapshot_id=snapshot_id)
        properties = {QUERY_ID: record.query_id, BATCH_ID: str(record.batch_id), ATTEMPT: record.attempt}
        try:
            with guarded(table, record.query_id, record.batch_id).transaction() as tx:
                tx.append(rows, snapshot_properties=properties)
        except BatchAppended:  # another run appended it between the refresh and the commit
            table.refresh()
            if find_snapshot(table.metadata, record.query_id, record.batch_id) is None:
                raise
            return
        table.refresh()
        expire_now_and_then(table, record.batch_id, self.snapshot_retention)
