"""The load history: every object version a batch accepted, as rows of an Iceberg table.

``<database>.load_history`` (``--load_history_table``) holds one row per object version listed in
a batch's manifests: which table it went to, its outcome (ingested, empty, missing, unreadable,
duplicate, ignored...), rows written, lines quarantined, the batch, the data snapshot, its S3 event
time and the commit time. It is appended right after the batch's tables, exactly once per batch by
the same check as the data (the snapshot summary names the query and batch, and a guard refuses a
second append), so a replay after a crash between the two appends only what is missing. The rows of
a table's share that was set aside (its publication kept failing) are appended when it is published. Readers query it
like any table (Athena, ``make query``), e.g. what landed and was never loaded.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, timedelta

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.table import Table
from pyiceberg.transforms import IdentityTransform

from contracts.ledger import CommitRecord, Replaced, SourceRecord
from glue_processor.shared.names import TIMESTAMP
from glue_processor.table.catalog import TABLE_PROPERTIES
from glue_processor.table.iceberg import (
    ATTEMPT,
    BATCH_ID,
    PART,
    QUERY_ID,
    BatchAppended,
    ExpiryCadence,
    expire_now_and_then,
    find_snapshot,
    guarded,
)
from glue_processor.table.transaction import Head, transaction

logger = logging.getLogger(__name__)

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
        pa.field("event_time", TIMESTAMP),
        pa.field("commit_time", TIMESTAMP),
        pa.field("commit_date", pa.date32()),
        pa.field("batch_id", pa.int64()),
        pa.field("query_id", pa.string()),
        pa.field("snapshot_id", pa.int64()),
        pa.field("manifest_uri", pa.string()),
        # rows of the object that broke each of its table's rules (NULL: none did)
        pa.field("rule_violations", pa.map_(pa.string(), pa.int64())),
    ]
)


def history_rows(
    record: CommitRecord,
    sources: Sequence[SourceRecord],
    *,
    database: str,
    legacy: str,
    snapshots: Mapping[str, int | None],
) -> pa.Table:
    """Rows of the load history for ``sources`` of a batch: their table (``<database>.<table>``, null
    for an object no table took), and the snapshot that published their table's share."""
    tables = [_table_of(record, x, legacy) for x in sources]
    broke = {k: v for share in record.tables for k, v in share.stats.object_violations.items()}
    return pa.table(
        {
            "table_name": [f"{database}.{t}" if t else None for t in tables],
            "bucket": [x.bucket for x in sources],
            "key": [x.key for x in sources],
            "version_id": [x.version_id for x in sources],
            "etag": [x.etag for x in sources],
            "size": [x.size for x in sources],
            "status": [x.status for x in sources],
            "reason": [x.reason for x in sources],
            "rows_written": [x.records for x in sources],
            "lines_quarantined": [x.bad_records for x in sources],
            "event_time": [x.event_time for x in sources],
            "commit_time": [record.committed_at] * len(sources),
            "commit_date": [record.committed_at.astimezone(UTC).date()] * len(sources),
            "batch_id": [record.batch_id] * len(sources),
            "query_id": [record.query_id] * len(sources),
            "snapshot_id": [snapshots.get(t) if t else None for t in tables],
            "manifest_uri": [x.manifest_uri for x in sources],
            "rule_violations": [list(broke[x.identity].items()) if x.identity in broke else None for x in sources],
        },
        schema=SCHEMA,
    )


def replaced_rows(
    record: CommitRecord,
    tables: Collection[str],
    *,
    database: str,
    legacy: str,
    snapshots: Mapping[str, int | None],
) -> pa.Table:
    """Rows of the versions the shares of ``tables`` replaced or retracted (docs/mirror.md): status
    ``replaced`` (or ``retracted``), the version that replaced it in ``reason``, the batch and the
    snapshot that removed its rows."""
    items = [(share.table or legacy, r) for share in record.tables for r in share.replaced]
    items = [(t, r) for t, r in items if t in tables]

    def why(r: Replaced) -> str:
        if r.status == "retracted":
            return "its key was deleted (on_delete: retract)"
        by = f"version {r.by_version_id}" if r.by_version_id else f"eTag {r.by_etag}"
        if r.from_line > 1:  # a tail whose version loaded before ended in a torn line
            return (
                f"extended by {by} (on_overwrite: tail): its torn last line {r.from_line} is read again whole "
                f"from it (a row that line left is removed; its quarantine record stays), its lines before stay"
            )
        return f"replaced by {by} (on_overwrite); its rows were loaded by batch(es) {list(r.batches)}"

    n = len(items)
    return pa.table(
        {
            "table_name": [f"{database}.{t}" for t, _ in items],
            "bucket": [r.bucket for _, r in items],
            "key": [r.key for _, r in items],
            "version_id": [r.version_id for _, r in items],
            "etag": [r.etag for _, r in items],
            "size": pa.array([None] * n, pa.int64()),
            "status": [r.status for _, r in items],
            "reason": [why(r) for _, r in items],
            "rows_written": pa.array([0] * n, pa.int64()),
            "lines_quarantined": pa.array([0] * n, pa.int64()),
            "event_time": pa.array([None] * n, TIMESTAMP),
            "commit_time": [record.committed_at] * n,
            "commit_date": [record.committed_at.astimezone(UTC).date()] * n,
            "batch_id": [record.batch_id] * n,
            "query_id": [record.query_id] * n,
            "snapshot_id": [snapshots.get(t) for t, _ in items],
            "manifest_uri": pa.array([None] * n, pa.string()),
            "rule_violations": pa.nulls(n, SCHEMA.field("rule_violations").type),
        },
        schema=SCHEMA,
    )


def _table_of(record: CommitRecord, source: SourceRecord, legacy: str) -> str | None:
    if source.table is not None:
        return source.table or legacy
    # a record from before routing named no table: what it loaded went to the one table
    return legacy if record.schema_version == 1 and source.status in ("ingested", "empty") else None


def ensure_dated_table(catalog: Catalog, database: str, name: str, schema: pa.Schema, *, location: str) -> Table:
    """Load a table of the job's own (the load history, the quarantine), creating it on first use,
    partitioned by its ``commit_date``.

    An identity partition on a date column, not ``day(commit_time)``: pyiceberg computes a day
    transform with pyiceberg-core, which Glue does not provide."""
    identifier = (database, name)
    try:
        return _with_columns(catalog.load_table(identifier), schema)
    except NoSuchTableError:
        pass
    with contextlib.suppress(NamespaceAlreadyExistsError):
        catalog.create_namespace(database)
    try:
        table = catalog.create_table(identifier, schema=schema, location=location, properties=TABLE_PROPERTIES)
    except TableAlreadyExistsError:  # another run created it first
        return catalog.load_table(identifier)
    with table.update_spec() as spec:
        spec.add_field("commit_date", IdentityTransform(), "commit_date")
    logger.info("created a table of the job's", extra={"table": f"{database}.{name}", "location": location})
    return table


def _with_columns(table: Table, schema: pa.Schema) -> Table:
    """``table`` with the columns of ``schema`` a later version added (a table created before them
    gains them, NULL in its older rows: Iceberg adds a column without rewriting a file)."""
    have = set(table.schema().column_names)
    if all(name in have for name in schema.names):
        return table
    with table.update_schema() as update:
        update.union_by_name(schema)
    logger.info("added the columns a later version has", extra={"table": table.name(), "columns": schema.names})
    return table


# Failed appends kept to be tried again, and how many of them one call tries.
BEHIND = 32  # 16 minutes of 30 s triggers
CATCH_UP = 4


@dataclass(frozen=True)
class _Append:
    record: CommitRecord
    snapshots: Mapping[str, int | None]
    part: str
    set_aside: tuple[str, ...]


class LoadHistory:
    """Appends a committed batch's rows of the load history, once: the batch's rows when its
    shares are published (``part`` ""), and the rows of a share set aside (see
    :mod:`glue_processor.commit.deferred`) when that share is published (``part``: its table)."""

    def __init__(
        self, table: Callable[[], Table], *, database: str, legacy: str, snapshot_retention: timedelta
    ) -> None:
        self._table = table
        self.database, self.legacy = database, legacy
        self.snapshot_retention = snapshot_retention  # a snapshot per batch: expired as the data's
        self._cadence = ExpiryCadence()
        self._head = Head()
        # appends that failed, oldest first, tried again before the next: at most BEHIND of them (a
        # record of the seed's ~1,700 objects is ~2.9 MB, so ~93 MB at most: the driver does not grow
        # with an outage); ``lost``: those dropped (pushed out of that list, or owed when the job
        # stopped), in the ledger only; ``_unreported``: of those, the ones no metric has counted yet
        self._behind: deque[_Append] = deque()
        self.lost = 0
        self._unreported = 0
        self._lock = threading.RLock()  # the batch's appends and an idle trigger's retry
        self._tried = 0.0  # monotonic time of the last attempt

    def open(self) -> None:
        self._table()

    @property
    def behind(self) -> int:
        """Appends this process owes the history and still tries (metric ``LoadHistoryBehind``)."""
        return len(self._behind)

    def appended(self, query_id: str) -> set[int]:
        """The batches of ``query_id`` whose own rows (part ``""``) a snapshot of the history names,
        as the catalog has it now. Every snapshot of the last ``DENSE`` is there; older ones thinned."""
        table = self._table()
        table.refresh()
        out: set[int] = set()
        for snapshot in table.metadata.snapshots:
            summary = snapshot.summary
            if summary is None or summary.get(QUERY_ID) != query_id or summary.get(PART, ""):
                continue
            batch = str(summary.get(BATCH_ID) or "")
            if batch.isdigit():
                out.add(int(batch))
        return out

    def take_dropped(self) -> int:
        """Appends dropped since the last call (metric ``LoadHistoryDropped``: a count per report,
        so each loss is its own alarm)."""
        with self._lock:
            dropped, self._unreported = self._unreported, 0
            return dropped

    def take_over(self, previous: LoadHistory) -> None:
        """Owe what ``previous`` (the last checkpoint generation's) still owed: its kept appends,
        before any of this one's, and its count of those dropped."""
        with self._lock, previous._lock:
            self._behind.extendleft(reversed(previous._behind))
            self.lost += previous.lost
            self._unreported += previous._unreported
            previous._behind.clear()
            previous.lost = previous._unreported = 0

    def abandon(self) -> int:
        """The job stops owing appends: log each (the ledger has their rows; a restart soon appends
        them from it, :mod:`glue_processor.commit.owed`) and count them dropped. Returns how many."""
        with self._lock:
            while self._behind:
                self._drop(self._behind.popleft(), "the job stopped")
            return self._unreported

    def retry_idle(self, *, every_s: float) -> bool:
        """An idle trigger's turn (no batch to append before): try the oldest kept append, unless a
        batch is appending or one was tried less than ``every_s`` ago. True when it tried."""
        if not self._behind or time.monotonic() - self._tried < every_s:
            return False
        if not self._lock.acquire(blocking=False):
            return False
        try:
            if self._behind and self._try(self._behind[0]):
                self._done(self._behind.popleft())
            return True
        finally:
            self._lock.release()

    def publish(
        self,
        record: CommitRecord,
        snapshots: Mapping[str, int | None],
        *,
        part: str = "",
        set_aside: Collection[str] = (),
        keep: bool = True,
        try_now: bool = True,
    ) -> bool:
        """Append the rows of ``part`` unless the history has them: ``""``, every source but those of
        the tables ``set_aside``; a table's name, that table's sources. True when they are in. The
        history never holds up the stream: a failure is logged (the ledger's commit record keeps
        every row's content) and False returned.

        With ``keep``, a failed append is kept and tried again before the next one, oldest first, up
        to CATCH_UP of them a call (and by :meth:`retry_idle`); while one of those still fails, the
        new one joins them untried, so a history that is down costs a batch one attempt on this path,
        not one per batch it owes. Without ``keep`` (a caller that retries it itself), it is tried at
        once and not kept. Without ``try_now`` it is kept untried (a caller that saw the history
        refuse one just now)."""
        this = _Append(record, dict(snapshots), part, tuple(set_aside))
        with self._lock:
            if not keep:
                return self._try(this)
            if not try_now:
                self._keep(this)
                return False
            if not self._catch_up():
                self._keep(this)
                return False
            if self._try(this):
                return True
            self._keep(this)
            return False

    def _catch_up(self) -> bool:
        """Try the appends kept from earlier calls, oldest first, at most CATCH_UP: True when none is
        left."""
        for _ in range(min(CATCH_UP, len(self._behind))):
            if not self._try(self._behind[0]):
                return False
            self._done(self._behind.popleft())
        return not self._behind

    def _done(self, append: _Append) -> None:
        logger.info(
            "appended a batch the load history missed",
            extra={"batch_id": append.record.batch_id, "query_id": append.record.query_id, "part": append.part},
        )

    def _keep(self, append: _Append) -> None:
        key = (append.record.query_id, append.record.batch_id, append.part)
        if any((a.record.query_id, a.record.batch_id, a.part) == key for a in self._behind):
            return  # a replay of a batch already kept: one place, one append
        self._behind.append(append)
        if len(self._behind) > BEHIND:
            self._drop(self._behind.popleft(), f"{BEHIND} later batches are owed too")

    def _drop(self, gone: _Append, why: str) -> None:
        self.lost += 1
        self._unreported += 1
        logger.error(
            "the load history misses a batch and no longer retries it; the ledger's commit record has its rows "
            "(make backfill OUTPUT= reads the ledger instead of the history)",
            extra={"batch_id": gone.record.batch_id, "query_id": gone.record.query_id, "part": gone.part, "why": why},
        )

    def _try(self, append: _Append) -> bool:
        record, snapshots, part, set_aside = append.record, append.snapshots, append.part, append.set_aside
        if part:
            sources = [s for s in record.sources if _table_of(record, s, self.legacy) == part]
            tables = {part}
        else:
            sources = [s for s in record.sources if _table_of(record, s, self.legacy) not in set_aside]
            tables = {s.table or self.legacy for s in record.tables} - set(set_aside)
        tables = {
            t for t in tables if any(share.replaced for share in record.tables if (share.table or self.legacy) == t)
        }
        if not sources and not tables:
            return True
        self._tried = time.monotonic()
        try:
            self._append(record, sources, snapshots, part, tables)
        except Exception:
            logger.exception(
                "could not append the batch to the load history; the ledger's commit record has its rows; the "
                "append is tried again",
                extra={"batch_id": record.batch_id, "query_id": record.query_id, "part": part},
            )
            return False
        return True

    def _append(
        self,
        record: CommitRecord,
        sources: Sequence[SourceRecord],
        snapshots: Mapping[str, int | None],
        part: str,
        replaced: Collection[str] = (),
    ) -> None:
        def rows() -> pa.Table:
            new = history_rows(record, sources, database=self.database, legacy=self.legacy, snapshots=snapshots)
            if not replaced:
                return new
            old = replaced_rows(record, replaced, database=self.database, legacy=self.legacy, snapshots=snapshots)
            return pa.concat_tables([new, old])

        append_once(
            self._table(),
            record,
            rows,
            part=part,
            retention=self.snapshot_retention,
            cadence=self._cadence,
            head=self._head,
        )


def append_once(
    table: Table,
    record: CommitRecord,
    rows: Callable[[], pa.Table],
    *,
    part: str,
    retention: timedelta,
    cadence: ExpiryCadence,
    head: Head | None = None,
) -> None:
    """Append ``rows()`` for ``record``'s batch (and ``part``) to a table of the job's own (the load
    history, the quarantine) unless it has them: the snapshot summary names the query, batch and
    part, and a guard refuses a second append, so a replay appends only what is missing. The rows
    are made only when they are to be appended. ``head``: where this process left the table (no
    refresh needed while it is there; without one, the table is read again first)."""
    with (head or Head()).kept(table):
        if find_snapshot(table.metadata, record.query_id, record.batch_id, part=part) is not None:
            return
        properties = {QUERY_ID: record.query_id, BATCH_ID: str(record.batch_id), ATTEMPT: record.attempt, PART: part}
        try:
            committing = guarded(table, record.query_id, record.batch_id, part)
            with transaction(committing) as tx:
                tx.append(rows(), snapshot_properties=properties)
        except BatchAppended:  # another run appended it before this commit
            table.refresh()
            if find_snapshot(table.metadata, record.query_id, record.batch_id, part=part) is None:
                raise
            return
        table.metadata, table.metadata_location = committing.metadata, committing.metadata_location
        expire_now_and_then(table, record.batch_id, retention, cadence)
