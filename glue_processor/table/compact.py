"""Table maintenance, locally (``make compact``); on AWS the Glue compaction and orphan-file
optimizers do 1 and 3, and the job does 2 (:mod:`glue_processor.table.expiry`).

1. **Compaction**: in each closed partition (an ingest day before today), files under 3/4 of the
   target are packed into files of about the target size, replacing them in **one** atomic commit
   (an overwrite snapshot that deletes the small files and adds the new ones; the data is unchanged).
2. **Snapshot expiry**: snapshots older than the table's ``history.expire.max-snapshot-age-ms``
   (keeping ``history.expire.min-snapshots-to-keep``) are removed, and the files only they held
   deleted (the job's own expiry, run with the table's settings).
3. **Orphan files**: files anywhere under the table's location (``ingest/`` where batches write,
   ``data/`` where compaction writes, ``metadata/``) that nothing in the table references and that
   are older than ``orphan_age`` (killed attempts, files an interrupted expiry left) are deleted;
   never those of a batch committed in the ledger but not yet published. The ledger and the
   catalog live beside the tables (``<output>/_commits``, ``_deferred``, ``_catalog``), never under one.
"""

from __future__ import annotations

import logging
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from contracts.layout import COMMITS_DIR
from glue_processor.plan.sizing import plan_groups
from glue_processor.shared import parquet as parquet_writer
from glue_processor.shared.objects import local_path, store_for
from glue_processor.table.datafiles import DataFiles, WrittenFile
from glue_processor.table.expiry import expire_snapshots
from glue_processor.table.footer import footer_of
from glue_processor.table.iceberg import INGEST_DIR

logger = logging.getLogger(__name__)
SMALL = 0.75
EPOCH = date(1970, 1, 1)


@dataclass
class MaintenanceReport:
    partitions: int = 0
    files_before: int = 0
    files_after: int = 0
    rewritten: int = 0
    written: int = 0
    snapshot_id: int | None = None
    expired_snapshots: int = 0
    orphans_deleted: int = 0
    why_not: str = ""  # why nothing was compacted, when nothing was


def plan_compaction(
    files: list[DataFile],
    *,
    target_bytes: int,
    today: date,
    include_open: bool = False,
    day_fields: dict[int, int] | None = None,
    spec_id: int | None = None,
) -> list[tuple[str, list[DataFile]]]:
    """Groups of small files of one closed partition, each to become one file of about the target.
    ``day_fields``: per spec id, the position of its day field (a partition of today's day is open:
    it still receives batches); a spec without one has no open partition. ``spec_id``: only files of
    this spec (the table's current one: pyiceberg writes the files a commit adds under the current
    spec, so the files of an earlier spec stay as they are)."""
    by_partition: dict[tuple[Any, ...], list[DataFile]] = defaultdict(list)
    for f in files:
        if spec_id is not None and f.spec_id != spec_id:
            continue
        if f.file_size_in_bytes < SMALL * target_bytes:
            by_partition[(f.spec_id, *(f.partition[i] for i in range(len(f.partition))))].append(f)
    today_days = (today - EPOCH).days
    groups: list[tuple[str, list[DataFile]]] = []
    for key, small in sorted(by_partition.items(), key=lambda kv: str(kv[0])):
        at = (day_fields or {}).get(key[0])
        day = key[1 + at] if at is not None and len(key) > 1 + at else None
        if not include_open and isinstance(day, int) and day >= today_days:
            continue  # today's partition still receives batches
        if len(small) < 2:
            continue
        total = sum(f.file_size_in_bytes for f in small)
        for group in plan_groups([f.file_size_in_bytes for f in small], max(1, round(total / target_bytes))):
            if len(group) > 1:
                groups.append((_partition_dir(small[group[0]].file_path), [small[i] for i in group]))
    return groups


def compact(
    table: Table, *, target_bytes: int, today: date | None = None, include_open: bool = False
) -> MaintenanceReport:
    """Rewrite the small files of closed partitions in one commit; a report that says why when it
    rewrites nothing."""
    report = MaintenanceReport()
    if table.current_snapshot() is None:
        report.why_not = "the table has no data yet"
        return report
    files = [task.file for task in table.scan().plan_files()]
    report.files_before = report.files_after = len(files)
    day_fields = {
        spec_id: n
        for spec_id, spec in table.specs().items()
        for n, field in enumerate(spec.fields)
        if str(field.transform) == "day"
    }
    when = today or datetime.now(UTC).date()
    groups = plan_compaction(
        files,
        target_bytes=target_bytes,
        today=when,
        include_open=include_open,
        day_fields=day_fields,
        spec_id=table.spec().spec_id,
    )
    if not groups:
        small = sum(1 for f in files if f.file_size_in_bytes < SMALL * target_bytes)
        if not small:
            report.why_not = f"every file is at least {SMALL * target_bytes / 2**20:.0f} MB (3/4 of the target)"
        elif plan_compaction(
            files,
            target_bytes=target_bytes,
            today=when,
            include_open=True,
            day_fields=day_fields,
            spec_id=table.spec().spec_id,
        ):
            report.why_not = (
                f"its small files ({small}) are in today's partition, which still receives batches "
                "(make compact OPEN=1 compacts it too)"
            )
        else:
            report.why_not = f"no partition has two small files to pack together ({small} small in all)"
        return report
    report.partitions = len({d for d, _ in groups})
    written: list[tuple[str, int, bytes]] = [_rewrite(d, group, n) for n, (d, group) in enumerate(groups)]
    with table.transaction() as tx:
        metadata = tx.table_metadata
        with tx.update_snapshot(snapshot_properties={"ingest.operation": "compaction"}).overwrite() as overwrite:
            for _, group in groups:
                for old in group:
                    overwrite.delete_data_file(old)
            entries = DataFiles(table.io, metadata)
            for path, size, footer in written:
                overwrite.append_data_file(entries.entry(path, size, WrittenFile(footer)))
    report.rewritten = sum(len(g) for _, g in groups)
    report.written = len(written)
    report.files_after = len(files) - report.rewritten + report.written
    snapshot = table.current_snapshot()
    report.snapshot_id = snapshot.snapshot_id if snapshot else None
    return report


def referenced(table: Table) -> set[str]:
    """Every file the table's metadata reaches: its metadata files (current and logged), each
    snapshot's manifest list, manifests and their live data files, statistics files."""
    metadata = table.metadata
    out = {f.metadata_file for f in metadata.metadata_log}
    if table.metadata_location:
        out.add(table.metadata_location)
    out |= {s.statistics_path for s in metadata.statistics}
    out |= {s.statistics_path for s in metadata.partition_statistics}
    seen: set[str] = set()
    for snapshot in metadata.snapshots:
        out.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            if manifest.manifest_path not in seen:
                seen.add(manifest.manifest_path)
                out |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io)}
    return out | seen


def delete_orphans(table: Table, *, older_than: timedelta, output_uri: str, now: datetime | None = None) -> int:
    """Delete the files under the table's location that nothing in the table references, older than
    ``older_than`` (as the Glue orphan-file optimizer does with the table's location), but those of
    batches committed in the ledger under ``output_uri`` and not yet published."""
    root = table.location().rstrip("/")
    listed = _list(root)  # before the metadata: a file written after it is listed is not listed
    table.refresh()
    keep = referenced(table)
    unsettled = _unsettled_batches(root, output_uri, table.name()[-1])
    cutoff = (now or datetime.now(UTC)) - older_than
    doomed = [
        uri
        for uri, modified in listed
        if uri not in keep and modified < cutoff and not any(uri.startswith(d) for d in unsettled)
    ]
    store = store_for(root)
    for uri in doomed:
        store.delete(uri)
    return len(doomed)


def _unsettled_batches(location: str, output_uri: str, table: str) -> list[str]:
    """The ``ingest/<query>/<batch>/`` directories of the table whose batch has a commit record and
    no marker saying its share of this table was published or abandoned (see
    :mod:`glue_processor.commit.ledger`): its files wait for their append, however long that takes."""
    base = local_path(f"{location}/{INGEST_DIR}")
    commits = local_path(output_uri) / COMMITS_DIR
    out = []
    for query in sorted(base.iterdir()) if base.is_dir() else []:
        for batch in sorted(query.iterdir()) if query.is_dir() else []:
            ledger = commits / query.name
            settled = [f"{batch.name}.{table}.{k}" for k in ("published", "abandoned")] + [
                f"{batch.name}.{k}"
                for k in ("published", "abandoned")  # a record from before routing
            ]
            if (ledger / f"{batch.name}.json").exists() and not any((ledger / m).exists() for m in settled):
                out.append(f"{location}/{INGEST_DIR}/{query.name}/{batch.name}/")
    return out


def maintain(
    table: Table, *, target_bytes: int, orphan_age: timedelta, output_uri: str, include_open: bool = False
) -> MaintenanceReport:
    report = compact(table, target_bytes=target_bytes, include_open=include_open)
    report.expired_snapshots = expire_snapshots(table).snapshots
    report.orphans_deleted = delete_orphans(table, older_than=orphan_age, output_uri=output_uri)
    return report


def _partition_dir(path: str) -> str:
    return path.rsplit("/", 1)[0]


def _rewrite(directory: str, group: list[DataFile], n: int) -> tuple[str, int, bytes]:
    """One file of the group's rows, with the union of their columns (a file may lack newer ones)."""
    tables = []
    for f in group:
        store = store_for(f.file_path)
        tables.append(pq.ParquetFile(pa.BufferReader(store.read(f.file_path).data)).read())
    merged = pa.concat_tables(tables, promote_options="permissive")
    uri = f"{directory}/compacted-{uuid.uuid4().hex[:12]}-{n:05d}.parquet"
    with store_for(uri).writer(uri) as path:
        parquet_writer.write(merged, path)
        size = Path(path).stat().st_size
        footer = footer_of(path)
    return uri, size, footer


def _list(root: str) -> list[tuple[str, datetime]]:
    """Every file under ``root`` with its modification time (local output; S3 is the optimizer's)."""
    if not root.startswith("file://"):
        raise ValueError("orphan-file clean-up runs on local tables; on AWS the table optimizer does it")
    base = Path(root.removeprefix("file://"))
    if not base.exists():
        return []
    return [
        ("file://" + str(p), datetime.fromtimestamp(p.stat().st_mtime, UTC)) for p in base.rglob("*") if p.is_file()
    ]
