"""``make run``: the whole pipeline on one machine, local directories standing in for S3.

1. The landing bucket is the user's tree (``--data``) or a generated sample.
2. Each new file goes through the manifest builder as the S3 -> SQS event it would produce.
3. The streaming job runs on local Spark until every manifest is processed, then stops.
4. A summary says what came in and what went out.

Run it again on the same WORKDIR and only new files are processed; after a crash (even
``kill -9``) it resumes from the checkpoint without loss or duplicates.
"""

from __future__ import annotations

import argparse
import logging
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from contracts.exceptions import IngestError
from contracts.routing import parse_routing
from glue_processor.local.feeder import Feeder
from glue_processor.local.layout import MANIFEST_BUCKET, MANIFEST_PREFIX, LocalLayout, local_uri
from glue_processor.local.metrics_report import read_datums, render_metrics
from glue_processor.local.sample import generate
from glue_processor.local.status import mark_run
from glue_processor.local.summary import render
from glue_processor.metrics.sinks import JsonlSink
from glue_processor.plan.routes import load_routes
from glue_processor.settings import JobSettings, settings_from_mapping
from glue_processor.table.read import load as load_table
from glue_processor.table.read import published_files
from lambdas.manifest_builder.settings import load_settings

logger = logging.getLogger("ingest-local")


def _cores(value: str) -> str:
    if value == "*" or (value.isdigit() and int(value) >= 1):
        return value
    raise argparse.ArgumentTypeError(f"--cores takes a number of cores (1 or more) or *, not {value!r}")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="ingest-local", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--data", type=Path, help="your NDJSON tree (.json/.ndjson/.jsonl, optionally .gz); default: a sample"
    )
    p.add_argument(
        "--workdir", type=Path, default=Path(".work"), help="local stand-ins for the buckets (default .work)"
    )
    p.add_argument(
        "--cores",
        default="*",
        type=_cores,
        help="local Spark cores: a number, or * for all (default)",
    )
    p.add_argument("--sample-files", type=int, default=48, help="files in the generated sample (default 48)")
    p.add_argument("--sample-records", type=int, default=400, help="records per sample file (default 400)")
    p.add_argument(
        "--sqs-batch-size",
        type=int,
        default=1000,
        help="messages per manifest-builder invocation (default 1000, the stack's SqsBatchSize)",
    )
    p.add_argument("--max-manifest-files", type=int, default=1000, help="files per manifest (default 1000)")
    p.add_argument(
        "--max-files-per-trigger",
        type=int,
        default=None,
        help="manifests per micro-batch (default: the deployed job's, a 16 GiB byte budget; 1 for small demo batches)",
    )
    p.add_argument("--target-file-mb", type=int, default=128, help="target Parquet file size (default 128)")
    p.add_argument(
        "--trigger",
        choices=["available-now", "processing-time"],
        default="available-now",
        help="available-now: drain and stop (default); processing-time: run 24/7",
    )
    p.add_argument("--trigger-interval-seconds", type=int, default=30)
    p.add_argument("--partition-by", default="", help="Iceberg partitioning, e.g. day(ts),kind (default: ingest day)")
    p.add_argument(
        "--routes",
        type=Path,
        help="a routing file (YAML or JSON, contracts/routing.py): key patterns to tables, each with its own "
        "columns, partitioning, file size and column bound; kept in WORKDIR for the next runs",
    )
    p.add_argument("--schema", type=Path, help="a declared-schema JSON file (column -> type); default: all strings")
    p.add_argument(
        "--table-format",
        choices=["iceberg", "hive-parquet"],
        default="iceberg",
        help="iceberg (default: a table in the embedded catalog) or hive-parquet (dt= directories)",
    )
    p.add_argument(
        "--checkpoint-rotate-manifests",
        type=int,
        default=20_000,
        help="new checkpoint generation after this many manifests (default 20000; 0: never)",
    )
    return p.parse_args(argv)


def routes_file(layout: LocalLayout, given: Path | None) -> Path | None:
    """The routing file of this WORKDIR: a given one is validated and kept there as JSON (what
    ``make deploy`` ships to S3); without one, the one kept by an earlier run, if any."""
    kept = layout.workdir / "routes.json"
    if given is None:
        return kept if kept.exists() else None
    if not given.is_file():
        raise IngestError(f"ROUTES={given} is not a file")
    routing = parse_routing(given.read_bytes(), source=str(given))
    kept.write_bytes(routing.to_json())
    return kept


def job_settings(layout: LocalLayout, args: argparse.Namespace, routes: Path | None = None) -> JobSettings:
    from glue_processor.local.buckets import LocalBuckets

    return settings_from_mapping(
        {
            "manifest_uri": local_uri(layout.manifests),
            "output_uri": local_uri(layout.output),
            "quarantine_uri": local_uri(layout.quarantine),
            "checkpoint_uri": local_uri(layout.checkpoint),
            "manifest_archive_uri": local_uri(layout.buckets / MANIFEST_BUCKET / "archive"),
            "checkpoint_rotate_manifests": str(args.checkpoint_rotate_manifests),
            "source_uri_template": LocalBuckets(layout.buckets).uri_template(),
            "trigger": args.trigger,
            "trigger_interval_seconds": str(args.trigger_interval_seconds),
            **({"max_files_per_trigger": str(args.max_files_per_trigger)} if args.max_files_per_trigger else {}),
            "target_file_mb": str(args.target_file_mb),
            "table_format": args.table_format,
            **({"schema": local_uri(args.schema)} if args.schema else {}),
            **({"partition_by": args.partition_by} if args.partition_by else {}),
            **({"routes": local_uri(routes)} if routes else {}),
            "metrics_sinks": "jsonl",
            "metrics_jsonl_path": str(layout.metrics),
        }
    )


def visible_files(root: Path, suffix: str) -> list[Path]:
    """Files a reader (Spark, Athena) sees: no path part under ``root`` starts with '_' or '.'."""
    if not root.exists():
        return []
    return [
        p
        for p in root.rglob(f"*{suffix}")
        if not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)
    ]


def dataset_check(spark: Any, layout: LocalLayout, settings: JobSettings | None = None) -> dict[str, Any]:
    """Read the output back as a reader would (each table's current snapshot), and count duplicates
    by lineage."""
    result: dict[str, Any] = {
        "path": str(layout.output),
        "quarantine_path": str(layout.quarantine),
        "rows": 0,
        "files": 0,
        "duplicates": 0,
        "quarantined": 0,
        "tables": [],
    }
    names = ["events"] if settings is None else list(load_routes(settings).tables)
    for name in names:
        files = published_files(layout.output, table_name=name)
        rows = duplicates = 0
        if files:
            lineage = pa.concat_tables(
                pq.read_table(path, columns=["_source_uri", "_line"], partitioning=None) for path in files
            )
            rows = lineage.num_rows
            distinct = lineage.unify_dictionaries().group_by(["_source_uri", "_line"]).aggregate([]).num_rows
            duplicates = rows - distinct
        result["rows"] += rows
        result["files"] += len(files)
        result["duplicates"] += duplicates
        label = name if settings is None else f"{settings.database}.{name}"
        entry: dict[str, Any] = {"name": label, "rows": rows, "files": len(files), "duplicates": duplicates}
        if settings is not None and settings.table_format == "iceberg" and files:
            table = load_table(settings, name)
            snapshot = table.current_snapshot()
            entry.update(
                catalog=settings.catalog_uri,
                location=table.location(),
                snapshot_id=snapshot.snapshot_id if snapshot else None,
                snapshots=len(table.metadata.snapshots),
                query=f"make query WORKDIR={layout.workdir}",
            )
            result.setdefault("table", entry)
        result["tables"].append(entry)
    qfiles = visible_files(layout.quarantine, ".json")
    if qfiles:
        result["quarantined"] = spark.read.json(local_uri(layout.quarantine)).count()
    return result


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("manifest-builder"):
            logging.getLogger(name).setLevel(logging.WARNING)
    args = parse_args(argv)
    layout = LocalLayout(args.workdir.resolve())
    try:
        layout.create()
    except FileExistsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    try:
        source = args.data
        if source is None:
            source = layout.sample
            if not source.exists():
                print(f"generating a sample of {args.sample_files} NDJSON files in {source}")
                generate(source, files=args.sample_files, records_per_file=args.sample_records)
        elif not source.is_dir():
            raise IngestError(f"DATA={source} is not a directory")
        layout.link_landing(source)
        builder = load_settings(
            manifest_bucket=MANIFEST_BUCKET,
            manifest_prefix=MANIFEST_PREFIX,
            max_manifest_files=args.max_manifest_files,
        )
        routes = routes_file(layout, args.routes)
        settings = job_settings(layout, args, routes)
        load_routes(settings)  # a bad routing file stops here, before anything is fed
        feed = Feeder(layout, builder, sqs_batch_size=args.sqs_batch_size, metrics=JsonlSink(layout.metrics)).feed()
    except IngestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from glue_processor.local.session import local_session
    from glue_processor.main import run_query

    print(f"running the streaming job on local Spark ({settings.trigger}); workdir {layout.workdir}")
    spark = local_session(cores=args.cores)
    mark_run(layout, finished=False)
    try:
        jobs = run_query(spark, settings)
        mark_run(layout, finished=True)
        committed = [record for job in jobs for record in job.committed]
        print(render(committed, feed=feed, dataset=dataset_check(spark, layout, settings)))
        datums = read_datums(layout.metrics, since=started)
        print(f"\nmetrics of this run ({len(datums)} datums in {layout.metrics}):")
        print(render_metrics(datums))
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
