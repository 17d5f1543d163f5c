"""The end-of-run summary of a local run."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from contracts.ledger import BatchStats, CommitRecord
from glue_processor.local.text import aligned

MB = 1024 * 1024


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    return aligned(headers, rows)


def render(records: Sequence[CommitRecord], *, feed: Any, dataset: dict[str, Any]) -> str:
    """A readable account of what this run fed, processed and published."""
    out = []
    out.append(
        f"fed: {feed.files} new files, {feed.bytes / MB:.1f} MB, through {feed.invocations} manifest-builder "
        f"invocations -> {len(feed.manifests)} manifests" + (" (replayed an interrupted feed)" if feed.replayed else "")
    )
    if not records:
        out.append("no new batches: nothing new to process")
    else:
        rows = []
        for r in records:
            s = r.stats
            rows.append(
                [
                    r.batch_id,
                    s.manifests,
                    s.files,
                    f"{s.input_bytes / MB:.2f}",
                    s.records_in,
                    s.records_out,
                    s.bad_records,
                    s.missing_files + s.unreadable_files,
                    s.output_files,
                    f"{s.output_bytes / MB:.2f}",
                    f"{s.duration_s:.1f}",
                ]
            )
        out.append(
            _table(
                [
                    "batch",
                    "manifests",
                    "files",
                    "MB in",
                    "records in",
                    "records out",
                    "bad",
                    "bad files",
                    "parquet files",
                    "MB out",
                    "seconds",
                ],
                rows,
            )
        )

        def total(field: Callable[[BatchStats], float]) -> float:
            return sum(field(r.stats) for r in records)

        sizes = sorted(f.bytes for r in records for f in r.data_files)
        out.append(
            f"this run: {len(records)} batches, {total(lambda s: s.files)} files, "
            f"{total(lambda s: s.input_bytes) / MB:.1f} MB in, {total(lambda s: s.records_in)} records in, "
            f"{total(lambda s: s.records_out)} written, {total(lambda s: s.bad_records)} quarantined lines, "
            f"{total(lambda s: s.missing_files + s.unreadable_files)} quarantined files; "
            f"{len(sizes)} Parquet files, {sum(sizes) / MB:.1f} MB"
            + (f" (min {sizes[0] / MB:.2f} / max {sizes[-1] / MB:.2f} MB)" if sizes else "")
            + f"; batch time {total(lambda s: s.duration_s):.1f} s"
        )
    out.append(
        f"dataset {dataset['path']}: {dataset['rows']} rows in {dataset['files']} Parquet files, "
        f"{dataset['duplicates']} duplicate (source, line) pairs; "
        f"quarantine: {dataset['quarantined']} records under {dataset['quarantine_path']}"
    )
    tables = dataset.get("tables", [])
    if len(tables) > 1:
        out.append(
            _table(
                ["table", "rows", "parquet files", "duplicates", "snapshot"],
                [[t["name"], t["rows"], t["files"], t["duplicates"], t.get("snapshot_id", "")] for t in tables],
            )
        )
    if table := dataset.get("table"):
        what = f"table {table['name']}" if len(tables) < 2 else f"tables of {table['name'].split('.')[0]}"
        out.append(
            f"{what} (Iceberg, catalog {table['catalog']}, at {table['location']}): current snapshot "
            f"{table['snapshot_id']} of {table['snapshots']}; query it with: {table['query']} [SQL=...]"
            if len(tables) < 2
            else f"{what} (Iceberg, catalog {table['catalog']}); query them with: {table['query']} [SQL=...]"
        )
    return "\n".join(out)
