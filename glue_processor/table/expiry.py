"""Snapshot expiry that deletes what it expires: the job's, for every table it commits to.

The job is the one owner of expiry (the stack has no retention optimizer): every ``EXPIRE_EVERY``
commits each table it appended to (data tables, routed tables, the load history) drops the
snapshots older than ``--snapshot_retention_hours`` and thins the ones younger to the newest of each
of ``TIME_TRAVEL_POINTS`` spans of that window (:func:`thinned`), keeping the newest
``history.expire.min-snapshots-to-keep`` and every snapshot of the last ``DENSE`` whatever their
age; then it deletes the files only the
expired snapshots held. A table so holds a bounded number of snapshots however long it runs, and
every commit, which rewrites the metadata listing them all, costs the same at batch 10 and at batch
3,000 (``make bench-commits``):

- **Incremental** (a table whose snapshots are all ancestors of ``main``, its only ref: what the job
  and the Glue compaction optimizer make). A file is removed by one commit, which records it as
  DELETED (status 2) in a manifest it adds (Iceberg spec, "Manifests": status; Java Iceberg's
  ``IncrementalFileCleanup`` reads the same entries); when that commit's snapshot expires, the file
  is held by no kept snapshot after it, and by the newest kept one before it only if it was added by
  then (its file sequence number says). A manifest, once dropped from the line, never comes back,
  so one that a run of expired snapshots lists and neither kept snapshot around the run lists is
  referenced by no one. Reads per expiry: the manifest lists of the expired snapshots and of the
  kept ones around them, and only the manifests the expired snapshots added that record deleted
  files (one per compaction or replacement among them). Nothing else of the kept history is read,
  so the cost does not grow with the table's age.
- **Full reachability** otherwise (another branch or a tag, snapshots off the line, e.g. after a
  rollback, or a deletion whose manifest lacks sequence numbers): every manifest of every snapshot
  is read once, and what only expired snapshots reach is deleted.

It never deletes what a kept snapshot holds; a file replaced while a kept span's snapshot still held
it is not seen again once that snapshot expires, and is left to orphan-file deletion. The commit
asserts that ``main`` is where the plan found it (a rollback meanwhile fails it).

Files are deleted only after the metadata commit succeeded (a commit that fails or whose outcome is
unknown deletes nothing), in batches (DeleteObjects, 1,000 keys). What a failed deletion leaves is
unreferenced from then on: orphan-file deletion (the table optimizer on AWS, ``make compact``
locally) removes it after its retention.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from pyiceberg.catalog import Catalog
from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntryStatus, ManifestFile
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import AssertRefSnapshotId, TableRequirement, TableUpdate
from pyiceberg.table.update.snapshot import ExpireSnapshots

from contracts.exceptions import StorageError
from glue_processor.shared.objects import NotDeleted, ObjectStore, store_for
from glue_processor.table.transaction import CommitThrough, committing_through, transaction

logger = logging.getLogger(__name__)

DEFAULT_MAX_AGE_MS = 5 * 24 * 3600 * 1000  # Iceberg's default history.expire.max-snapshot-age-ms
# a table property: {snapshot: predecessor} for the kept snapshots whose parent the job's thinning
# expired (pyiceberg clears their parent id), so the line stays known across its gaps (main_line)
PREDECESSORS = "ingest.expiry.predecessors"


@dataclass
class Expired:
    """What one expiry did: snapshots removed, files deleted (and not), what it read."""

    snapshots: int = 0
    deleted: int = 0
    not_deleted: int = 0
    manifest_lists_read: int = 0
    manifests_read: int = 0
    incremental: bool = True


@dataclass
class _Plan:
    expired: list[Snapshot]
    files: set[str]
    lists_read: int = 0
    manifests_read: int = 0


def expire_snapshots(
    table: Table,
    *,
    now: datetime | None = None,
    keep: int | None = None,
    max_age: timedelta | None = None,
    points: int = 0,
    dense: timedelta = timedelta(0),
    stores: Callable[[str], ObjectStore] = store_for,
) -> Expired:
    """Expire the snapshots older than ``max_age`` (default: the table's
    ``history.expire.max-snapshot-age-ms``), keeping the newest ``keep`` (default: the table's
    ``history.expire.min-snapshots-to-keep``; at least 1), and delete the files only they held.
    ``points`` > 0 thins the window too (:func:`thinned`): of the snapshots younger than ``max_age``
    but the newest ``keep`` and those younger than ``dense``, only the newest of each
    ``max_age / points`` span stays."""
    props = table.properties
    if max_age is None:
        max_age = timedelta(milliseconds=int(props.get("history.expire.max-snapshot-age-ms", DEFAULT_MAX_AGE_MS)))
    if keep is None:
        keep = int(props.get("history.expire.min-snapshots-to-keep", 1))
    now = now or datetime.now(UTC)
    cutoff_ms = int((now - max_age).timestamp() * 1000)
    dense_ms = int((now - dense).timestamp() * 1000)
    span_ms = int(max_age.total_seconds() * 1000) // points if points > 0 else 0
    started = time.monotonic()
    # planned on the catalog's latest metadata: pyiceberg's expiry commits with no requirement and
    # refuses to expire a snapshot a ref it knows of points at, so a ref made since an older read
    # would not be seen (the window left is this call's few milliseconds)
    _latest(table)
    metadata = table.metadata
    # a format-1 table's entries have no sequence numbers (pyiceberg reads them as 0): only the full
    # diff can tell what a thinned snapshot alone held
    line = main_line(metadata) if metadata.format_version >= 2 else None
    expired = thinned(metadata, cutoff_ms, max(1, keep), span_ms, dense_from_ms=dense_ms)
    plan = _incremental(line, expired, table.io) if line is not None else None
    incremental = plan is not None
    if plan is None:  # not one line, or a deletion whose sequence numbers the manifests do not say
        plan = _full(metadata, expired, table.io)
    out = Expired(
        snapshots=len(plan.expired),
        manifest_lists_read=plan.lists_read,
        manifests_read=plan.manifests_read,
        incremental=incremental,
    )
    if not plan.expired:
        return out
    # the metadata first: a file is deleted only once no snapshot of the committed table holds it;
    # in the same commit, the line across the gaps this expiry leaves (see main_line)
    line_after = json.dumps({str(k): str(v) for k, v in sorted(_recorded_after(metadata, expired).items())})
    # main must still be where the plan found it: a rollback while the plan read manifests would
    # otherwise lose its ref with the snapshots (pyiceberg drops a ref to an expired snapshot)
    head = metadata.current_snapshot_id
    with transaction(committing_through(table, _MainAt(table.catalog, head))) as tx:
        ExpireSnapshots(tx).by_ids([s.snapshot_id for s in plan.expired]).commit()
        if metadata.properties.get(PREDECESSORS, "{}") != line_after:
            tx.set_properties({PREDECESSORS: line_after})
    _latest(table)
    if incremental and main_line(table.metadata) is None:
        # a branch or tag appeared meanwhile: the incremental plan assumed main was the only ref, so
        # nothing is deleted (orphan-file deletion takes what no snapshot holds, later)
        logger.warning(
            "a ref appeared during expiry: its files are left to orphan deletion", extra={"table": str(table.name())}
        )
        out.not_deleted = len(plan.files)
        return out
    out.not_deleted = delete_files(sorted(plan.files), stores)
    out.deleted = len(plan.files) - out.not_deleted
    logger.info(
        "expired snapshots and deleted the files only they held",
        extra={
            "table": str(table.name()),
            "expired": out.snapshots,
            "files_deleted": out.deleted,
            "files_not_deleted": out.not_deleted,
            "manifest_lists_read": out.manifest_lists_read,
            "manifests_read": out.manifests_read,
            "incremental": out.incremental,
            "seconds": round(time.monotonic() - started, 3),
        },
    )
    return out


class _MainAt(CommitThrough):
    """A catalog that commits through another one, asserting that ``main`` is still at ``head``."""

    def __init__(self, catalog: Catalog, head: int | None) -> None:
        super().__init__(catalog)
        self.head = head

    def commit_table(
        self, table: Table, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        asserted = (*requirements, AssertRefSnapshotId(ref=MAIN_BRANCH, snapshot_id=self.head))
        return super().commit_table(table, asserted, updates)


def _latest(table: Table) -> None:
    """The catalog's latest metadata in ``table`` (its FileIO kept, unlike ``Table.refresh``)."""
    fresh = table.catalog.load_table(table.name())
    table.metadata, table.metadata_location = fresh.metadata, fresh.metadata_location


def main_line(metadata: TableMetadata) -> list[Snapshot] | None:
    """The table's snapshots, oldest first, when ``main`` is its only ref and every snapshot is an
    ancestor of its head (what incremental clean-up needs); None otherwise. A snapshot whose parent
    the job's thinning expired has no parent any more (pyiceberg clears it): its predecessor is the
    one the job recorded then (:data:`PREDECESSORS`); a gap it did not record is no line."""
    head = metadata.current_snapshot()
    if head is None or set(metadata.refs) != {MAIN_BRANCH}:
        return None
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    recorded = predecessors(metadata)
    line: list[Snapshot] = []
    snapshot: Snapshot | None = head
    while snapshot is not None and by_id.pop(snapshot.snapshot_id, None) is not None:
        line.append(snapshot)
        parent = _parent(snapshot, recorded)
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    return None if by_id else line[::-1]


def predecessors(metadata: TableMetadata) -> dict[int, int]:
    """What the job recorded of the line across the snapshots it thinned: snapshot -> predecessor."""
    try:
        return {int(k): int(v) for k, v in json.loads(metadata.properties.get(PREDECESSORS, "{}")).items()}
    except (ValueError, TypeError, AttributeError):  # not ours to trust: no line through its gaps
        return {}


def _parent(snapshot: Snapshot, recorded: dict[int, int]) -> int | None:
    return (
        snapshot.parent_snapshot_id if snapshot.parent_snapshot_id is not None else recorded.get(snapshot.snapshot_id)
    )


def _recorded_after(metadata: TableMetadata, expired_ids: set[int]) -> dict[int, int]:
    """The predecessors to record once ``expired_ids`` are gone: for each kept snapshot whose parent
    (or recorded predecessor) expires, its nearest kept ancestor, worked out on the lineage before
    the expiry (parents, and what was recorded); entries of kept snapshots only."""
    recorded = predecessors(metadata)
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    out: dict[int, int] = {}
    for snapshot in metadata.snapshots:
        if snapshot.snapshot_id in expired_ids:
            continue
        parent = _parent(snapshot, recorded)
        if parent is None or (parent not in expired_ids and snapshot.parent_snapshot_id is not None):
            continue
        seen = 0
        while parent is not None and parent in expired_ids and seen <= len(by_id):
            ancestor = by_id.get(parent)
            parent = _parent(ancestor, recorded) if ancestor is not None else None
            seen += 1
        if parent is not None and parent in by_id:
            out[snapshot.snapshot_id] = parent
    return out


def thinned(
    metadata: TableMetadata, cutoff_ms: int, keep: int, span_ms: int, *, dense_from_ms: int | None = None
) -> set[int]:
    """The ids of the snapshots to expire: every one older than the cut-off, and with ``span_ms`` > 0
    every one younger that a newer snapshot of its span (``timestamp // span_ms``) stands for, but
    those from ``dense_from_ms`` on (a compaction that started there still finds its snapshot's line
    through parent ids: Java Iceberg validates a rewrite so); never the newest ``keep`` nor a ref's
    head. Spans are fixed in time, so a snapshot kept as its span's
    newest stays until the cut-off passes it: time travel within the window reads the table as it
    was at most one span earlier (exactly, over the newest ``keep`` snapshots)."""
    protected = {ref.snapshot_id for ref in metadata.refs.values()}
    ordered = sorted(metadata.snapshots, key=lambda s: s.timestamp_ms)
    candidates = ordered[: max(0, len(ordered) - keep)]
    newest_of_span: dict[int, int] = {}
    if span_ms > 0:
        for snapshot in ordered:  # newest last: it overwrites the older ones of its span
            newest_of_span[snapshot.timestamp_ms // span_ms] = snapshot.snapshot_id
    out: set[int] = set()
    for snapshot in candidates:
        if snapshot.snapshot_id in protected:
            continue
        too_old = snapshot.timestamp_ms < cutoff_ms
        stood_for = (
            span_ms > 0
            and (dense_from_ms is None or snapshot.timestamp_ms < dense_from_ms)
            and newest_of_span[snapshot.timestamp_ms // span_ms] != snapshot.snapshot_id
        )
        if too_old or stood_for:
            out.add(snapshot.snapshot_id)
    return out


def _incremental(line: list[Snapshot], expired_ids: set[int], io: FileIO) -> _Plan | None:
    """The files only the expired snapshots of the line held, read from their manifest lists, those
    of the kept snapshots on either side of each run of them, and the manifests they added that
    record deletions; None when a deletion's sequence numbers are not in its manifest (then only a
    full reachability diff can tell).

    A manifest's life on the line is one stretch (once dropped it never comes back), so one that a
    run of expired snapshots lists and neither kept neighbour lists is listed by that run only. A
    file is deleted by one snapshot (the entry it writes, status DELETED, names it): when that
    snapshot expires, the file is held by no kept snapshot after it, and by the newest kept one
    before it only when it was added by then (its file sequence number is not above that
    snapshot's). The kept snapshot after a run is read the same way: what it deleted was held by the
    run, and by the kept one before the run only if added by then."""
    plan = _Plan([s for s in line if s.snapshot_id in expired_ids], set())
    if not plan.expired:
        return plan
    kept_before: dict[int, Snapshot | None] = {}  # expired snapshot id -> newest kept one older
    runs: list[tuple[Snapshot | None, list[Snapshot], Snapshot | None]] = []
    previous: Snapshot | None = None
    run: list[Snapshot] = []
    for snapshot in line:
        if snapshot.snapshot_id in expired_ids:
            run.append(snapshot)
            kept_before[snapshot.snapshot_id] = previous
            continue
        if run:
            runs.append((previous, run, snapshot))
            run = []
        previous = snapshot
    if run:  # the head is never expired (a ref's head), but the plan does not rely on it
        runs.append((previous, run, None))
    lists: dict[int, list[ManifestFile]] = {}  # kept snapshots' manifest lists, each read once

    def manifests_of(snapshot: Snapshot) -> list[ManifestFile]:
        if snapshot.snapshot_id not in lists:
            lists[snapshot.snapshot_id] = _manifests(snapshot, io, plan)
        return lists[snapshot.snapshot_id]

    def listed(snapshot: Snapshot | None) -> set[str]:
        return {m.manifest_path for m in manifests_of(snapshot)} if snapshot is not None else set()

    with_deletions: dict[str, ManifestFile] = {}
    for before, members, after in runs:
        only_run: set[str] = set()
        for snapshot in members:
            plan.files.add(snapshot.manifest_list)
            for manifest in _manifests(snapshot, io, plan):
                only_run.add(manifest.manifest_path)
                if manifest.added_snapshot_id in expired_ids and _has_deleted(manifest):
                    with_deletions[manifest.manifest_path] = manifest
        plan.files |= only_run - listed(before) - listed(after)
        if after is not None and _deletes(after):
            # what the kept snapshot after the run deleted was held by the run, and by the kept one
            # before it only if added by then: read the deletions it recorded too
            kept_before[after.snapshot_id] = before
            for manifest in manifests_of(after):
                if manifest.added_snapshot_id == after.snapshot_id and _has_deleted(manifest):
                    with_deletions[manifest.manifest_path] = manifest
    deleters = set(kept_before)
    for manifest in with_deletions.values():
        plan.manifests_read += 1
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
            if entry.status != ManifestEntryStatus.DELETED or entry.snapshot_id not in deleters:
                continue
            held_by = kept_before[entry.snapshot_id]
            if held_by is None:
                plan.files.add(entry.data_file.file_path)
                continue
            added = entry.file_sequence_number
            if added is None or held_by.sequence_number is None:
                return None
            if added > held_by.sequence_number:
                plan.files.add(entry.data_file.file_path)
    return plan


def _full(metadata: TableMetadata, expired_ids: set[int], io: FileIO) -> _Plan:
    """What only the expired snapshots reach: every manifest of the table is read once."""
    plan = _Plan([s for s in metadata.snapshots if s.snapshot_id in expired_ids], set())
    if not plan.expired:
        return plan
    live: dict[str, set[str]] = {}

    def reach(snapshots: Iterable[Snapshot]) -> set[str]:
        out: set[str] = set()
        for snapshot in snapshots:
            out.add(snapshot.manifest_list)
            for manifest in _manifests(snapshot, io, plan):
                path = manifest.manifest_path
                if path not in live:
                    plan.manifests_read += 1
                    live[path] = {e.data_file.file_path for e in manifest.fetch_manifest_entry(io)}
                out.add(path)
                out |= live[path]
        return out

    kept = reach(s for s in metadata.snapshots if s.snapshot_id not in expired_ids)
    plan.files = reach(plan.expired) - kept
    return plan


def _manifests(snapshot: Snapshot, io: FileIO, plan: _Plan) -> list[ManifestFile]:
    plan.lists_read += 1
    return snapshot.manifests(io)


def _deletes(snapshot: Snapshot) -> bool:
    """Whether a snapshot's commit may have removed files: any but an append."""
    return snapshot.summary is None or snapshot.summary.operation.value != "append"


def _has_deleted(manifest: ManifestFile) -> bool:
    # a manifest list from before the counts were required says nothing: read the manifest
    return manifest.deleted_files_count is None or manifest.deleted_files_count > 0


def delete_files(uris: list[str], stores: Callable[[str], ObjectStore] = store_for) -> int:
    """Delete ``uris``, batched per store; how many could not be (logged: orphan-file deletion
    removes them later, nothing references them any more)."""
    by_scheme: dict[str, list[str]] = {}
    for uri in uris:
        by_scheme.setdefault(uri.split(":", 1)[0], []).append(uri)
    failed = 0
    for group in by_scheme.values():
        try:
            stores(group[0]).delete_many(group)
        except StorageError as exc:  # NotDeleted names which; any other: the whole group
            failed += len(exc.failed) if isinstance(exc, NotDeleted) else len(group)
            logger.warning(
                "expired files not deleted; orphan-file deletion removes them later",
                extra={"files": len(group), "error": str(exc)},
            )
    return failed
