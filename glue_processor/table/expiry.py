"""Snapshot expiry that deletes what it expires: the job's, for every table it commits to.

The job is the one owner of expiry (the stack has no retention optimizer): every ``EXPIRE_EVERY``
batches each table it appended to (data tables, routed tables, the load history) drops the
snapshots older than ``--snapshot_retention_hours``, keeping the newest
``history.expire.min-snapshots-to-keep``, and then deletes the files only those snapshots held:

- **Incremental** (a table whose snapshots are all ancestors of ``main``, its only ref: what the job
  and the Glue compaction optimizer make). The expired snapshots are the oldest of that line, so a
  file one of them held and no kept one holds was removed by a commit of the expired line, which
  recorded it as DELETED (status 2) in a manifest it added (Iceberg spec, "Manifests": status; Java
  Iceberg's ``IncrementalFileCleanup`` does the same). A manifest, once dropped from the line, never
  comes back, so one the expired snapshots listed and the oldest kept one does not list is no
  longer referenced. Reads per expiry: the manifest lists of the expired snapshots and of the oldest
  kept one (``expired + 1``), and only the manifests the expired snapshots added that record deleted
  files (one per compaction among them). Nothing of the kept history is read, so the cost does not
  grow with the table's age.
- **Full reachability** otherwise (another branch or a tag, or snapshots off the line, e.g. after a
  rollback): every manifest of every snapshot is read once, and what only expired snapshots reach
  is deleted.

Files are deleted only after the metadata commit succeeded (a commit that fails or whose outcome is
unknown deletes nothing), in batches (DeleteObjects, 1,000 keys). What a failed deletion leaves is
unreferenced from then on: orphan-file deletion (the table optimizer on AWS, ``make compact``
locally) removes it after its retention.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import takewhile

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestEntryStatus, ManifestFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Snapshot

from contracts.exceptions import StorageError
from glue_processor.read.objects import NotDeleted, ObjectStore, store_for

logger = logging.getLogger(__name__)

DEFAULT_MAX_AGE_MS = 5 * 24 * 3600 * 1000  # Iceberg's default history.expire.max-snapshot-age-ms


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
    stores: Callable[[str], ObjectStore] = store_for,
) -> Expired:
    """Expire the snapshots older than ``max_age`` (default: the table's
    ``history.expire.max-snapshot-age-ms``), keeping the newest ``keep`` (default: the table's
    ``history.expire.min-snapshots-to-keep``; at least 1), and delete the files only they held."""
    props = table.properties
    if max_age is None:
        max_age = timedelta(milliseconds=int(props.get("history.expire.max-snapshot-age-ms", DEFAULT_MAX_AGE_MS)))
    if keep is None:
        keep = int(props.get("history.expire.min-snapshots-to-keep", 1))
    cutoff_ms = int(((now or datetime.now(UTC)) - max_age).timestamp() * 1000)
    started = time.monotonic()
    # planned on the catalog's latest metadata: pyiceberg's expiry commits with no requirement and
    # refuses to expire a snapshot a ref it knows of points at, so a ref made since an older read
    # would not be seen (the window left is this call's few milliseconds)
    _latest(table)
    metadata = table.metadata
    line = main_line(metadata)
    if line is not None:
        plan = _incremental(line, cutoff_ms, max(1, keep), table.io)
    else:
        plan = _full(metadata, cutoff_ms, max(1, keep), table.io)
    out = Expired(
        snapshots=len(plan.expired),
        manifest_lists_read=plan.lists_read,
        manifests_read=plan.manifests_read,
        incremental=line is not None,
    )
    if not plan.expired:
        return out
    # the metadata first: a file is deleted only once no snapshot of the committed table holds it
    table.maintenance.expire_snapshots().by_ids([s.snapshot_id for s in plan.expired]).commit()
    _latest(table)
    if line is not None and main_line(table.metadata) is None:
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


def _latest(table: Table) -> None:
    """The catalog's latest metadata in ``table`` (its FileIO kept, unlike ``Table.refresh``)."""
    fresh = table.catalog.load_table(table.name())
    table.metadata, table.metadata_location = fresh.metadata, fresh.metadata_location


def main_line(metadata: TableMetadata) -> list[Snapshot] | None:
    """The table's snapshots, oldest first, when ``main`` is its only ref and every snapshot is an
    ancestor of its head (what incremental clean-up needs); None otherwise."""
    head = metadata.current_snapshot()
    if head is None or set(metadata.refs) != {MAIN_BRANCH}:
        return None
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    line: list[Snapshot] = []
    snapshot: Snapshot | None = head
    while snapshot is not None and by_id.pop(snapshot.snapshot_id, None) is not None:
        line.append(snapshot)
        parent = snapshot.parent_snapshot_id
        snapshot = metadata.snapshot_by_id(parent) if parent is not None else None
    return None if by_id else line[::-1]


def _incremental(line: list[Snapshot], cutoff_ms: int, keep: int, io: FileIO) -> _Plan:
    """The oldest snapshots of the line older than the cut-off (never the newest ``keep``), and the
    files only they held, from their manifest lists and the manifests they added with deletions."""
    expired = list(takewhile(lambda s: s.timestamp_ms < cutoff_ms, line[: max(0, len(line) - keep)]))
    plan = _Plan(expired, set())
    if not expired:
        return plan
    expired_ids = {s.snapshot_id for s in expired}
    listed: set[str] = set()
    with_deletions: dict[str, ManifestFile] = {}
    for snapshot in expired:
        plan.files.add(snapshot.manifest_list)
        for manifest in _manifests(snapshot, io, plan):
            listed.add(manifest.manifest_path)
            if manifest.added_snapshot_id in expired_ids and _has_deleted(manifest):
                with_deletions[manifest.manifest_path] = manifest
    kept = {m.manifest_path for m in _manifests(line[len(expired)], io, plan)}
    plan.files |= listed - kept
    kept_ids = {s.snapshot_id for s in line[len(expired) :]}
    for manifest in with_deletions.values():
        plan.manifests_read += 1
        for entry in manifest.fetch_manifest_entry(io, discard_deleted=False):
            # removed by an expired commit (Java's rule: the entry's snapshot is not a kept one)
            if entry.status == ManifestEntryStatus.DELETED and entry.snapshot_id not in kept_ids:
                plan.files.add(entry.data_file.file_path)
    return plan


def _full(metadata: TableMetadata, cutoff_ms: int, keep: int, io: FileIO) -> _Plan:
    """Any snapshot older than the cut-off but the newest ``keep`` and the refs' heads, and what
    only they reach: every manifest of the table is read once."""
    protected = {ref.snapshot_id for ref in metadata.refs.values()}
    ordered = sorted(metadata.snapshots, key=lambda s: s.timestamp_ms)
    expired = [
        s
        for s in ordered[: max(0, len(ordered) - keep)]
        if s.timestamp_ms < cutoff_ms and s.snapshot_id not in protected
    ]
    plan = _Plan(expired, set())
    if not expired:
        return plan
    expired_ids = {s.snapshot_id for s in expired}
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
    plan.files = reach(expired) - kept
    return plan


def _manifests(snapshot: Snapshot, io: FileIO, plan: _Plan) -> list[ManifestFile]:
    plan.lists_read += 1
    return snapshot.manifests(io)


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
