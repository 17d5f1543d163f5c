"""The Iceberg sink: a batch's files, written in place under the table, become one append.

Tasks write the batch's Parquet files directly under the table; nothing is renamed or copied. The
driver, after the commit record (the fence, see :mod:`glue_processor.commit.ledger`), commits them as
**one** Iceberg fast append whose snapshot summary carries the query id and batch id, through
pyiceberg's public API only. Exactly once: the append is built on the table as this run's last
commit left it, or as just read (:class:`~glue_processor.table.transaction.Head`), and pyiceberg
asserts at commit that the branch's head is still the snapshot it was built on (its parent-snapshot
requirement); the commit goes through :class:`BatchGuard`, a catalog that refuses it
when that head already holds the batch. So the check and the append see the same head, whoever
commits in between (another run finishing the same batch, or a compaction: pyiceberg then rebuilds
the append on the new head, and the guard checks again). Files of killed attempts are never in a
snapshot; the job removes them itself (:mod:`glue_processor.commit.ledger`).

Each file's statistics are worked out by the task that wrote it, for the table's schema after the
batch's new columns (:meth:`IcebergSink.stats_plan`, :mod:`glue_processor.table.datafiles`), so the
driver makes no S3 call and works out no statistics per file; it does when the table changed in
between (another writer's columns), and a re-run after a crash reads the footers back.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import (
    CommitFailedException,
    CommitStateUnknownException,
    ValidationError,
    ValidationException,
)
from pyiceberg.manifest import DataFile
from pyiceberg.table import CommitTableResponse, Table, Transaction
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AssertRefSnapshotId, TableRequirement, TableUpdate
from pyiceberg.transforms import IdentityTransform

from contracts.exceptions import ConfigError
from contracts.ledger import CommitRecord, TableShare
from glue_processor import faults
from glue_processor.commit.publication import PublishRefused, refuse_columns
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.keys.state import Segment
from glue_processor.shared.declared import DeclaredSchema
from glue_processor.table.datafiles import DataFiles, StatsPlan, WrittenFile
from glue_processor.table.footer import metadata_of
from glue_processor.table.locate import added_partitions, files_holding, files_of_each
from glue_processor.table.replace import stage_replacing
from glue_processor.table.schema import INGEST_DAY, data_columns, missing_columns, typed_columns
from glue_processor.table.transaction import CommitThrough, Head, committing_through, transaction

logger = logging.getLogger(__name__)

QUERY_ID = "ingest.query-id"
BATCH_ID = "ingest.batch-id"
ATTEMPT = "ingest.attempt"
# the load history's appends of a batch: the batch's ("") or one table's share set aside, appended later
PART = "ingest.part"
# how often (in commits to a table) the job expires its snapshots: a table holds at most the snapshots
# the expiry keeps (the newest 10, one for each of TIME_TRAVEL_POINTS spans of the retention) and
# EXPIRE_EVERY more, whatever its age (docs/table.md)
EXPIRE_EVERY = 10
# time travel over the retention window reads the table as it was at most retention / TIME_TRAVEL_POINTS
# earlier (11 min 15 s at the default 6 hours); exactly over the newest 10 snapshots
TIME_TRAVEL_POINTS = 32
# ... but every snapshot of the last DENSE stays: a compaction the Glue optimizer (Java Iceberg) started
# on one of them validates its rewrite by walking parent ids from the head back to it, which a thinned
# snapshot in between breaks (its child's parent id is cleared). A compaction longer than this across
# an expiry round fails that validation and the optimizer runs it again (docs/table.md)
DENSE = timedelta(minutes=20)
# The orphan-file optimizer deletes the files no snapshot references after OrphanFileRetentionDays (1
# day at least), the files of a share committed and not appended among them: a share this late is
# checked file by file (a HEAD each) before its append, so no snapshot ever names a file that is gone
LATE = timedelta(hours=12)
# where batches write their files under the table (see IcebergSink.output_dir)
INGEST_DIR = "ingest"


class BatchAppended(ValidationException):
    """The batch's snapshot is already in the table: nothing to append."""


class BatchGuard(CommitThrough):
    """A catalog that commits through another one, refusing to append a batch the table already
    holds: each attempt is checked against the metadata it was built on (whose head pyiceberg's
    requirement asserts), pyiceberg's own retries after a conflict included."""

    def __init__(self, catalog: Catalog, query_id: str, batch_id: int, part: str | None = None) -> None:
        super().__init__(catalog)
        self.query_id, self.batch_id, self.part = query_id, batch_id, part

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        head = next(
            (r.snapshot_id for r in requirements if isinstance(r, AssertRefSnapshotId) and r.ref == MAIN_BRANCH), None
        )
        base = table.metadata
        if head is not None and base.current_snapshot_id != head:
            base = self._catalog.load_table(table.name()).metadata  # not the head asserted: read it
        if find_snapshot(base, self.query_id, self.batch_id, part=self.part) is not None:
            raise BatchAppended(f"batch {self.batch_id} of query {self.query_id} is already in the table")
        return super().commit_table(table, requirements, updates)


def guarded(table: Table, query_id: str, batch_id: int, part: str | None = None) -> Table:
    """The same table, committing through :class:`BatchGuard`."""
    return committing_through(table, BatchGuard(table.catalog, query_id, batch_id, part))


class ExpiryCadence:
    """When a table is due for expiry: at its first commit after the job starts, then every
    EXPIRE_EVERY commits to it. Counted per table, not by batch id: a routed table fed on batch
    ids that are never a multiple of EXPIRE_EVERY was never expired (its snapshots and replaced
    files grew without bound). A table gains one snapshot a commit, so it holds at most the
    retention window's snapshots and EXPIRE_EVERY more."""

    def __init__(self) -> None:
        self._since: dict[str, int] = {}

    def due(self, table: str) -> bool:
        count = self._since.get(table)
        if count is None or count + 1 >= EXPIRE_EVERY:
            self._since[table] = 0
            return True
        self._since[table] = count + 1
        return False


def expire_now_and_then(
    table: Table, batch_id: int, retention: timedelta, cadence: ExpiryCadence | None = None
) -> None:
    """When the table is due (``cadence``; without one, on batch ids that are multiples of
    EXPIRE_EVERY), expire its snapshots older than ``retention`` and delete the files only they held
    (:mod:`glue_processor.table.expiry`): the job is the one owner of its tables' expiry. A round
    that fails is logged and left to the next: the batch is in already."""
    due = cadence.due(str(table.name())) if cadence is not None else not batch_id % EXPIRE_EVERY
    if not due:
        return
    from glue_processor.table.expiry import expire_snapshots

    try:
        expire_snapshots(table, max_age=retention, points=TIME_TRAVEL_POINTS, dense=DENSE)
    # a commit that lost, or whose outcome is unknown, deletes nothing; ValueError: pyiceberg's word
    # for a snapshot another expiry removed first; OSError: a manifest list or manifest unreadable
    except (CommitFailedException, CommitStateUnknownException, ValueError, OSError) as exc:
        logger.warning(
            "snapshot expiry failed; the next round tries again",
            extra={"table": str(table.name()), "batch_id": batch_id, "error": f"{type(exc).__name__}: {exc}"},
        )


def find_snapshot(metadata: TableMetadata, query_id: str, batch_id: int, *, part: str | None = None) -> Snapshot | None:
    """The snapshot that appended this batch, newest first (it is recent when it exists); ``part``:
    which of the batch's appends to the load history (None: the one a data table has)."""
    wanted = str(batch_id)
    for snapshot in reversed(metadata.snapshots):
        summary = snapshot.summary
        if summary is None or summary[BATCH_ID] != wanted or summary[QUERY_ID] != query_id:
            continue
        if part is None or summary.get(PART, "") == part:
            return snapshot
    return None


class IcebergSink:
    """Publishes a batch's files as one append to the table."""

    in_place = True

    def __init__(
        self, table: Callable[[], Table], *, snapshot_retention: timedelta | None = None, location: str | None = None
    ) -> None:
        self._table = table
        self.location = location  # where the table is configured to live (used while it is out of reach)
        # Every commit costs time in proportion to the snapshots the metadata lists (it is parsed,
        # copied and written again: ~0.2 ms per snapshot, ``make bench-commits``), so the job expires
        # and thins its snapshots itself every EXPIRE_EVERY commits, deleting the files only they
        # held: it is the one owner of its tables' expiry (the stack has no retention optimizer).
        self.snapshot_retention = snapshot_retention
        self._cadence = ExpiryCadence()
        self._head = Head()

    def open(self) -> None:
        self._table()

    def partition(self, committed_at: datetime) -> str:
        return f"{INGEST_DAY}={committed_at:%Y-%m-%d}"

    def output_dir(self, committed_at: datetime, *, query_id: str, batch_id: int, attempt: str) -> str:
        """Where a batch attempt writes its files (each under its partition's path there): the table's
        ``ingest/`` directory, one per attempt. The job removes the attempts that lost itself
        (:meth:`discard_attempts`), and the files compaction replaced when it expires the snapshots
        that held them (:mod:`glue_processor.table.expiry`). Orphan-file deletion covers the whole
        table, so a batch committed but not yet appended keeps its files for the orphan retention
        (``OrphanFileRetentionDays``, 3 days) on AWS; ``make compact`` never deletes them."""
        return f"{self.ingest_dir(query_id, batch_id)}/{attempt}"

    def ingest_dir(self, query_id: str, batch_id: int) -> str:
        return f"{self._location().rstrip('/')}/{INGEST_DIR}/{query_id}/{batch_id:012d}"

    def _location(self) -> str:
        """The table's own location; its configured one while the table is out of reach (a batch
        still writes its files, and publishes them once the table is back)."""
        try:
            return str(self._table().location())
        except ConfigError:  # the table cannot be what its routing says: that stops the job
            raise
        except Exception:
            if self.location is None:
                raise
            logger.warning(
                "the table is out of reach; writing under its configured location", extra={"location": self.location}
            )
            return self.location

    def discard_attempts(self, fs: HadoopFS, query_id: str, batch_id: int, *, keep: str | None) -> None:
        """Remove the files of every attempt of a batch but ``keep`` (the published one)."""
        for info in fs.list(self.ingest_dir(query_id, batch_id)):
            if info.is_dir and info.name != keep:
                fs.delete(info.uri)

    def files_holding(self, segments: Sequence[Segment]) -> list[DataFile]:
        """The table's current data files that may hold the rows of ``segments`` (docs/mirror.md)."""
        table = self._table()
        table.refresh()
        return files_holding(table, segments)

    def files_of_each(self, segments_of: Mapping[Any, Sequence[Segment]]) -> dict[Any, dict[str, int]]:
        """For each key, the files (path -> bytes) that may hold its rows: one scan for them all."""
        table = self._table()
        table.refresh()
        return files_of_each(table, segments_of)

    def added_partitions(self, snapshot_id: int) -> tuple[str, ...]:
        table = self._table()
        if table.snapshot_by_id(snapshot_id) is None:
            table.refresh()
        return added_partitions(table, snapshot_id)

    def stats(self) -> dict[str, int]:
        """From the metadata in hand (no catalog call): snapshots kept, data files in the current one."""
        metadata = self._table().metadata
        current = metadata.current_snapshot()
        files = current.summary["total-data-files"] if current is not None and current.summary else None
        out = {"snapshots": len(metadata.snapshots)}
        if files is not None:
            out["data_files"] = int(files)
        return out

    def stats_plan(self, keys: tuple[str, ...], declared: DeclaredSchema | None) -> StatsPlan | None:
        """What the write tasks need to work out their files' statistics: the table as the batch's
        append will find it, its schema after the batch's new columns (typed as the write stage types
        them), staged on a transaction that is never committed. None when the table is out of reach
        or would refuse the columns: the driver then works the statistics out at the append."""
        try:
            tx = transaction(self._table())
            _add_columns(tx, keys, typed_columns(declared))
            return StatsPlan(tx.table_metadata)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - an optimisation: the append works the statistics out
            logger.warning("no statistics plan for the write tasks", extra={"error": f"{type(exc).__name__}: {exc}"})
            return None

    def check(self, share: TableShare, written_files: Mapping[str, WrittenFile] | None = None) -> None:
        """The share's schema change, as the catalog would take it: valid names, a width one Glue
        UpdateTable carries, types that merge (staged on a transaction that is never committed)."""
        if not share.data_files:
            return
        table = self._table()
        first = share.data_files[0].final
        written = _arrow_schema(table, first, (written_files or {}).get(first))
        schema = table.schema()
        new = missing_columns(schema, share.keys, written)
        refuse_columns([f.name for f in schema.fields] + new)
        # a time partition's field may not share a column's name (Iceberg checks it at the commit, with
        # a ValueError that would be retried: ``ingest_day`` as a key held every later batch back)
        fields = {f.name for spec in table.specs().values() for f in spec.fields if f.transform != IdentityTransform()}
        if clash := sorted(fields & set(new)):
            raise PublishRefused(f"columns named as the table's partition fields: {clash[:5]!r}")
        if new:
            try:
                transaction(table).update_schema().union_by_name(data_columns(share.keys, written))
            except (ValueError, ValidationError) as exc:
                raise PublishRefused(f"the batch's columns do not merge into the table's schema: {exc}") from exc

    def publish(
        self, record: CommitRecord, share: TableShare, written_files: Mapping[str, WrittenFile] | None = None
    ) -> int | None:
        """Append the share's data files unless the table has them; the snapshot id, or None when
        the share wrote no data file. Before its append, a late share's files are checked (a file
        gone is the share's refusal, never a snapshot naming it) and the share's schema change
        again (a share committed while its table was out of reach was not): a refusal is the
        share's content."""
        if not share.data_files and not share.replaced:
            return None
        table = self._table()
        # read first when the share replaces rows (the mirror plans on the table as it is) or adds
        # a column the schema in hand lacks: another writer's schema change since (a second run, a
        # deploy's declared columns, an ALTER TABLE) would fail every retry pyiceberg makes of an
        # append built on the old schema (~100 s of back-off)
        adds = bool(share.data_files) and bool(missing_columns(table.schema(), share.keys))
        with self._head.kept(table, refresh=bool(share.replaced) or adds) as read:
            try:
                return self._publish(table, record, share, written_files)
            except PublishRefused:
                if read:
                    raise
                # refused on metadata not read for this share: a refusal is counted, so read it,
                # and look again (another run may have published the share meanwhile)
                table.refresh()
                return self._publish(table, record, share, written_files)

    def _publish(
        self, table: Table, record: CommitRecord, share: TableShare, written_files: Mapping[str, WrittenFile] | None
    ) -> int | None:
        done = find_snapshot(table.metadata, record.query_id, record.batch_id)
        if done is not None:
            return done.snapshot_id
        if gone := _gone(table, record, share):
            raise PublishRefused(
                f"{len(gone)} of the share's {len(share.data_files)} files are gone (the orphan-file optimizer "
                f"deletes them after OrphanFileRetentionDays), e.g. {gone[0]}"
            )
        self.check(share, written_files)
        try:
            snapshot_id = self._append(table, record, share, written_files or {})
        except BatchAppended:  # another run appended it before this commit
            table.refresh()
            done = find_snapshot(table.metadata, record.query_id, record.batch_id)
            if done is None:
                raise
            return done.snapshot_id
        self._expire(table, record.batch_id)
        return snapshot_id

    def _expire(self, table: Table, batch_id: int) -> None:
        if self.snapshot_retention is not None:
            expire_now_and_then(table, batch_id, self.snapshot_retention, self._cadence)

    def _append(
        self, table: Table, record: CommitRecord, share: TableShare, written_files: Mapping[str, WrittenFile]
    ) -> int:
        properties = {QUERY_ID: record.query_id, BATCH_ID: str(record.batch_id), ATTEMPT: record.attempt}
        removed = None
        committing = guarded(table, record.query_id, record.batch_id)
        with transaction(committing) as tx:
            new: list[str] = []
            if share.data_files:
                # the files' own column types (declared columns are typed): the first file's footer tells
                first = share.data_files[0].final
                new = _add_columns(tx, share.keys, _arrow_schema(table, first, written_files.get(first)))
            entries = DataFiles(table.io, tx.table_metadata)
            files = [entries.entry(f.final, f.bytes, written_files.get(f.final)) for f in share.data_files]
            if share.replaced:  # the versions they replace: their rows go in this commit (docs/mirror.md)
                redo = self.output_dir(
                    record.committed_at, query_id=record.query_id, batch_id=record.batch_id, attempt=record.attempt
                )
                removed = stage_replacing(
                    tx, table, share, written_files, properties=properties, redo_dir=f"{redo}/redo"
                )
            else:
                # merged past commit.manifest.min-count-to-merge manifests (TABLE_PROPERTIES): the
                # manifests a commit lists and a reader plans with stay bounded however many batches
                with tx.update_snapshot(snapshot_properties=properties).merge_append() as append:
                    for entry in files:
                        append.append_data_file(entry)
            faults.hit("before-table-commit")
        # the metadata the commit returned (a table refresh would read and parse it again)
        table.metadata, table.metadata_location = committing.metadata, committing.metadata_location
        snapshot = find_snapshot(table.metadata, record.query_id, record.batch_id)
        if snapshot is None:
            raise CommitFailedException(f"batch {record.batch_id}: the append is not in the table after its commit")
        if written_files and entries.from_tasks < len(files):
            logger.warning(
                "the driver worked out statistics the write tasks had not (the table changed in between, or a "
                "task could not: see its log)",
                extra={"batch_id": record.batch_id, "files": len(files), "from_tasks": entries.from_tasks},
            )
        logger.info(
            "batch appended to the table",
            extra={
                "table": str(table.name()),
                "batch_id": record.batch_id,
                "snapshot_id": snapshot.snapshot_id,
                "files": len(files),
                "new_columns": new,
                "statistics_from_tasks": entries.from_tasks,
                **(
                    {"rows_removed": removed.rows, "files_rewritten": removed.files, "on_driver": removed.on_driver}
                    if removed is not None
                    else {}
                ),
            },
        )
        return snapshot.snapshot_id


def _gone(table: Table, record: CommitRecord, share: TableShare) -> list[str]:
    """The share's files that no longer exist, when it is late enough to have lost some (:data:`LATE`)."""
    if datetime.now(UTC) - record.committed_at < LATE:
        return []
    return [f.final for f in share.data_files if not table.io.new_input(f.final).exists()]


def _add_columns(tx: Transaction, keys: tuple[str, ...], types: pa.Schema) -> list[str]:
    """Stage on ``tx`` the columns of ``keys`` its table does not have yet, typed by ``types`` (a
    file's schema, or the declared columns); their names."""
    new = missing_columns(tx.table_metadata.schema(), keys, types)
    if new:
        with tx.update_schema() as update:
            update.union_by_name(data_columns(keys, types))
    return new


def _arrow_schema(table: Table, path: str, written: WrittenFile | None) -> pa.Schema:
    if written is not None and written.footer:
        return metadata_of(written.footer).schema.to_arrow_schema()
    with table.io.new_input(path).open() as stream:
        return pq.read_schema(stream)
