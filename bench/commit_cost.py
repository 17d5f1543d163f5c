"""What publishing a batch costs, per table format, and how the Iceberg commit grows with history.

1. The real batch path on local Spark, ``--batches`` small batches per format: the time from the
   commit record to visible files (``TableCommitDuration``): one Iceberg append, or the hive moves.
2. The Iceberg sink alone, ``--appends`` appends of one file each to an embedded-catalog table, no
   expiry: the commit time as the snapshot list grows (every commit rewrites metadata.json, which
   lists every snapshot: the job's expiry is what keeps it bounded, ``make bench-commits``).

Local disk and SQLite stand in for S3 and the Glue Data Catalog, so the absolute figures are a
floor: on AWS a commit adds a few S3 PUTs (manifest, manifest list, metadata.json) and a Glue
UpdateTable, ~100-300 ms; a hive move is a copy and a delete per file, done 16 at a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.batch import local_job


def _batches(spark: Any, root: Path, table_format: str, batches: int, files_per_batch: int) -> list[float]:
    from bench.batch import manifest_of
    from glue_processor.batch import ManifestBatchJob
    from glue_processor.settings import settings_from_mapping

    data = root / "landing"
    data.mkdir(parents=True)
    settings = settings_from_mapping(local_job(root, table_format=table_format, target_file_mb="1"))
    job = ManifestBatchJob(spark, settings, query_id="bench-commit-" + table_format)
    times = []
    for b in range(batches):
        files = []
        for f in range(files_per_batch):
            path = data / f"b{b:04d}-{f}.json"
            path.write_text("".join(json.dumps({"id": i, "v": "x" * 40}) + "\n" for i in range(3000)))
            files.append(path)
        job.run([manifest_of(files)], b)
        times.append(job.last_commit_ms)
    return times


def _appends(root: Path, appends: int) -> list[tuple[int, float]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from contracts.ledger import BatchStats, CommitRecord, PublishedFile, TableShare
    from glue_processor.table.catalog import ensure_table, open_catalog
    from glue_processor.table.datafiles import WrittenFile
    from glue_processor.table.footer import footer_of
    from glue_processor.table.iceberg import IcebergSink

    catalog = open_catalog(f"sqlite:///{root}/catalog.db")
    table = ensure_table(catalog, "bench", "events", location=(root / "events").as_uri())
    sink = IcebergSink(lambda: table)
    now = datetime.now(UTC)
    body = pa.table(
        {
            "_source_uri": ["s3://b/k"],
            "_line": pa.array([1], pa.int64()),
            "_ingest_time": pa.array([now], pa.timestamp("us", tz="UTC")),
            "v": ["x"],
        }
    )
    out: list[tuple[int, float]] = []
    for b in range(appends):
        path = root / "events" / "data" / f"ingest_day={now:%Y-%m-%d}" / f"f{b:05d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(body, path)
        published = PublishedFile(staged=path.as_uri(), final=path.as_uri(), bytes=path.stat().st_size)
        share = TableShare(table="", data_files=(published,), keys=("v",))
        record = CommitRecord(
            query_id="q",
            batch_id=b,
            attempt="a",
            committed_at=now,
            partition="p",
            manifests=(),
            tables=(share,),
            quarantine_files=(),
            sources=(),
            stats=BatchStats(),
        )
        t0 = time.perf_counter()
        sink.publish(record, share, {path.as_uri(): WrittenFile(footer_of(path))})
        out.append((b + 1, (time.perf_counter() - t0) * 1000))
    return out


def _summary(times: list[float]) -> str:
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"median {statistics.median(ordered):7.1f} ms   p95 {p95:7.1f} ms   max {ordered[-1]:7.1f} ms"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="commit_cost", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--batches", type=int, default=40)
    p.add_argument("--files-per-batch", type=int, default=4)
    p.add_argument("--appends", type=int, default=1000)
    args = p.parse_args(argv)
    from glue_processor.local.session import local_session

    spark = local_session(cores="2")
    try:
        print(f"publication per batch, real batch path, {args.batches} batches of {args.files_per_batch} files:")
        for table_format in ("iceberg", "hive-parquet"):
            with tempfile.TemporaryDirectory(prefix="commit-") as tmp:
                times = _batches(spark, Path(tmp), table_format, args.batches, args.files_per_batch)
                print(f"  {table_format:13s} {_summary(times[1:])}  (first batch {times[0]:.0f} ms: table creation)")
    finally:
        spark.stop()
    with tempfile.TemporaryDirectory(prefix="appends-") as tmp:
        growth = _appends(Path(tmp), args.appends)
    print(f"\nIceberg append time as snapshots accumulate ({args.appends} appends, one file each):")
    step = max(1, args.appends // 5)
    for start in range(0, args.appends, step):
        window = [ms for n, ms in growth[start : start + step]]
        print(f"  snapshots {start + 1:5d}-{start + len(window):5d}: {_summary(window)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
