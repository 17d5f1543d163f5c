"""Table maintenance, locally (``make compact``); on AWS the Glue table optimizers do the same.

1. **Compaction**: in each closed partition (an ingest day before today), files under 3/4 of the
   target are packed into files of about the target size, replacing them in **one** atomic commit
   (an overwrite snapshot that deletes the small files and adds the new ones; the data is unchanged).
2. **Snapshot expiry**: snapshots older than the table's ``history.expire.max-snapshot-age-ms``
   (keeping ``history.expire.min-snapshots-to-keep``) are removed from the metadata.
3. **Orphan files**: files under ``<table>/data/`` that no remaining snapshot references and that are
   older than ``orphan_age`` (killed attempts, compacted-away files of expired snapshots) are deleted.
"""

from __future__ import annotations

import argparse
import logging
import sys
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

from glue_processor.plan.sizing import plan_groups
from glue_processor.read.objects import store_for
from glue_processor.table.datafiles import DataFiles, WrittenFile
from glue_processor.table.footer import footer_of
from glue_processor.write import parquet as parquet_writer

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


def plan_compaction(
    files: list[DataFile], *, target_bytes: int, today: date, include_open: bool = False
) -> list[tuple[str, list[DataFile]]]:
    """Groups of small files of one closed partition, each to become one file of about the target."""
    by_partition: dict[tuple[Any, ...], list[DataFile]] = defaultdict(list)
    for f in files:
        if f.file_size_in_bytes < SMALL * target_bytes:
            by_partition[(f.spec_id, *(f.partition[i] for i in range(len(f.partition))))].append(f)
    today_days = (today - EPOCH).days
    groups: list[tuple[str, list[DataFile]]] = []
    for key, small in sorted(by_partition.items(), key=lambda kv: str(kv[0])):
        day = key[1] if len(key) > 1 else None
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
    """Rewrite the small files of closed partitions in one commit."""
    report = MaintenanceReport()
    if table.current_snapshot() is None:
        return report
    files = [task.file for task in table.scan().plan_files()]
    report.files_before = report.files_after = len(files)
    groups = plan_compaction(
        files, target_bytes=target_bytes, today=today or datetime.now(UTC).date(), include_open=include_open
    )
    if not groups:
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


def expire_snapshots(
    table: Table,
    *,
    now: datetime | None = None,
    keep: int | None = None,
    max_age: timedelta | None = None,
    clean_files: bool = False,
) -> int:
    """Expire snapshots older than ``max_age`` (default: the table's ``history.expire.max-snapshot-age-ms``),
    keeping the newest ``keep`` (default: the table's ``history.expire.min-snapshots-to-keep``). With
    ``clean_files`` (as the Glue retention optimizer's CleanExpiredFiles), the data files only expired
    snapshots referenced are deleted too; without, only the metadata changes."""
    props = table.properties
    if max_age is None:
        max_age = timedelta(milliseconds=int(props.get("history.expire.max-snapshot-age-ms", 5 * 24 * 3600 * 1000)))
    if keep is None:
        keep = int(props.get("history.expire.min-snapshots-to-keep", 1))
    cutoff_ms = int(((now or datetime.now(UTC)) - max_age).timestamp() * 1000)
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    current = table.current_snapshot()
    old = [
        s.snapshot_id
        for s in snapshots[: max(0, len(snapshots) - keep)]
        if s.timestamp_ms < cutoff_ms and (current is None or s.snapshot_id != current.snapshot_id)
    ]
    if not old:
        return 0
    before = _all_files(table) if clean_files else set()
    table.maintenance.expire_snapshots().by_ids(old).commit()
    if clean_files:
        table.refresh()
        for uri in sorted(before - _all_files(table)):
            store_for(uri).delete(uri)
    return len(old)


def _all_files(table: Table) -> set[str]:
    """Every data file any snapshot of the table references."""
    if not table.metadata.snapshots:
        return set()
    return set(table.inspect.all_data_files().column("file_path").to_pylist())


def delete_orphans(table: Table, *, older_than: timedelta, now: datetime | None = None) -> int:
    """Delete files under the table's ``data/`` (where compaction writes) that no snapshot references,
    older than ``older_than``, as the Glue orphan-file optimizer does with its Location there. Batches
    write under ``ingest/``, which this never scans (see IcebergSink.output_dir)."""
    table.refresh()
    referenced = _all_files(table)
    root = f"{table.location().rstrip('/')}/data/"
    store = store_for(root)
    cutoff = (now or datetime.now(UTC)) - older_than
    deleted = 0
    for uri, modified in _list(root):
        if uri.endswith(".parquet") and uri not in referenced and modified < cutoff:
            store.delete(uri)
            deleted += 1
    return deleted


def maintain(
    table: Table, *, target_bytes: int, orphan_age: timedelta, include_open: bool = False
) -> MaintenanceReport:
    report = compact(table, target_bytes=target_bytes, include_open=include_open)
    report.expired_snapshots = expire_snapshots(table, clean_files=True)
    report.orphans_deleted = delete_orphans(table, older_than=orphan_age)
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


def main(argv: list[str] | None = None) -> int:
    from glue_processor.local.layout import LocalLayout
    from glue_processor.table.catalog import open_catalog

    logging.basicConfig(level=logging.WARNING)
    p = argparse.ArgumentParser(prog="compact", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workdir", type=Path, default=Path(".work"))
    p.add_argument("--target-mb", type=int, default=128)
    p.add_argument("--orphan-age-hours", type=float, default=24.0)
    p.add_argument("--include-open", action="store_true", help="compact today's partition too")
    args = p.parse_args(argv)
    output = LocalLayout(args.workdir.resolve()).output
    catalog_db = output / "_catalog" / "catalog.db"
    if not catalog_db.exists():
        print(f"error: no Iceberg table under {output} (run `make run` first)", file=sys.stderr)
        return 2
    catalog = open_catalog(f"sqlite:///{catalog_db}")
    # every table of the run (a routing file writes several), as the table optimizers maintain each
    for ident in sorted(catalog.list_tables("ingest")):
        table = catalog.load_table(ident)
        report = maintain(
            table,
            target_bytes=args.target_mb * 1024 * 1024,
            orphan_age=timedelta(hours=args.orphan_age_hours),
            include_open=args.include_open,
        )
        print(
            f"{'.'.join(ident)}: compacted {report.rewritten} small files in {report.partitions} partitions into "
            f"{report.written} (table files {report.files_before} -> {report.files_after}, snapshot "
            f"{report.snapshot_id}); expired {report.expired_snapshots} snapshots; deleted {report.orphans_deleted} "
            "orphan files"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
