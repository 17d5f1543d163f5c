"""``make run``: the whole pipeline on one machine, local directories standing in for S3.

1. The landing bucket is the user's tree (``--data``, remembered by the WORKDIR) or a generated
   sample (in a WORKDIR of its own).
2. Each new file goes through the manifest builder as the S3 -> SQS event it would produce.
3. The streaming job runs on local Spark until every manifest is processed, then stops, printing a
   line per batch; with nothing new to do, Spark is not started at all.
4. A summary says what happened to the user's files, then what the tables hold.

Run it again on the same WORKDIR and only new files are processed; after a crash (even
``kill -9``) it resumes from the checkpoint without loss or duplicates.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from contracts.exceptions import ConfigError
from contracts.ledger import CommitRecord
from contracts.routing import parse_routing
from glue_processor.local import runs
from glue_processor.local.errors import cli
from glue_processor.local.feeder import Feeder, FeedResult
from glue_processor.local.layout import MANIFEST_BUCKET, MANIFEST_PREFIX, LocalLayout, local_uri
from glue_processor.local.sample import generate
from glue_processor.local.source import DataSource, choose, remember
from glue_processor.local.summary import RunReport, TableState, quarantine_records, render, shown
from glue_processor.metrics.sinks import JsonlSink
from glue_processor.plan.routes import load_routes
from glue_processor.settings import JobSettings, settings_from_mapping
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
        raise ConfigError(f"ROUTES={given} is not a file: give the path of your routing file (docs/routing.md)")
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
            **({"schema": local_uri(_schema_file(args.schema))} if args.schema else {}),
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


def _table_settings(args: argparse.Namespace, layout: LocalLayout) -> dict[str, str]:
    """PARTITION_BY and SCHEMA as this WORKDIR's table has them: given, they are what to remember
    (once they prove valid); not given, the remembered ones apply (a bare rerun must not repartition
    the table, or drop its types), said on one line. ``PARTITION_BY=default`` goes back to the
    ingest day."""
    kept = layout.state / "table.json"
    known = json.loads(kept.read_text(encoding="utf-8")) if kept.exists() else {}
    used = []
    if args.partition_by == "default":
        args.partition_by = ""
        known.pop("partition_by", None)
    elif args.partition_by:
        known["partition_by"] = args.partition_by
    elif known.get("partition_by"):
        args.partition_by = known["partition_by"]
        used.append(f"PARTITION_BY='{args.partition_by}'")
    if args.schema is not None:
        known["schema"] = str(args.schema.resolve())
    elif known.get("schema"):
        args.schema = Path(known["schema"])
        used.append(f"SCHEMA={args.schema}")
    if used:
        print(f"using this WORKDIR's {' and '.join(used)} (give another to change it; PARTITION_BY=default resets)")
    return known


def _schema_file(path: Path) -> Path:
    if not path.is_file():
        raise ConfigError(f'SCHEMA={path} is not a file: give a JSON file like {{"columns": {{"ts": "timestamp"}}}}')
    return path


class Progress:
    """One line per batch as the job runs: files and MB done of what was waiting, rows, time."""

    def __init__(self, files: int, data_bytes: int, started: float) -> None:
        self.files, self.data_bytes, self.started = files, data_bytes, started
        self.done_files = self.done_bytes = self.rows = 0

    def __call__(self, record: CommitRecord) -> None:
        s = record.stats
        self.done_files += s.files
        self.done_bytes += s.input_bytes
        self.rows += s.records_out
        total_files = max(self.files, self.done_files)
        total_mb = max(self.data_bytes, self.done_bytes) / 1e6
        print(
            f"batch {record.batch_id}: {self.done_files:,} of {total_files:,} files, "
            f"{self.done_bytes / 1e6:,.1f} of {total_mb:,.1f} MB, {self.rows:,} rows, "
            f"{time.monotonic() - self.started:.1f} s",
            flush=True,
        )


def table_states(settings: JobSettings, layout: LocalLayout) -> list[TableState]:
    """Each table as a reader finds it now: rows, files and bytes from its current snapshot, and
    the (source, line) pairs found twice (DuckDB over its files: two columns read)."""
    from glue_processor.table.read import published_files

    out = []
    for name in load_routes(settings).tables:
        files = published_files(layout.output, database=settings.database, table_name=name)
        out.append(
            TableState(
                name=f"{settings.database}.{name}",
                rows=_rows(files),
                files=len(files),
                bytes=sum(f.stat().st_size for f in files),
                duplicates=_duplicates(files),
            )
        )
    return out


def _rows(files: list[Path]) -> int:
    import pyarrow.parquet as pq

    return sum(pq.ParquetFile(f).metadata.num_rows for f in files)


def _duplicates(files: list[Path]) -> int:
    if not files:
        return 0
    import duckdb

    listed = ", ".join("'" + str(f).replace("'", "''") + "'" for f in files)
    con = duckdb.connect()
    # paths quoted: no user text is interpolated
    sql = f"SELECT count(*) - count(DISTINCT (_source_uri, _line)) FROM read_parquet([{listed}], union_by_name = true)"  # noqa: S608
    ((found,),) = con.execute(sql).fetchall()
    return int(found)


def _feed_line(feed: FeedResult, source: DataSource, here: Path) -> str:
    where = shown(source.path, here)
    ignored = f"; {len(feed.ignored):,} ignored (not .json/.ndjson/.jsonl)" if feed.ignored else ""
    replayed = " (and the interrupted feed of the last run)" if feed.replayed else ""
    return f"fed {_count(feed.files, 'new file')} ({feed.bytes / 1e6:,.1f} MB) from {where}{ignored}{replayed}"


@cli
def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("manifest-builder"):  # what it ignores, the summary names
            logging.getLogger(name).setLevel(logging.ERROR)
    args = parse_args(argv)
    started = time.monotonic()
    here = Path.cwd()
    layout = LocalLayout(args.workdir.resolve())
    try:
        layout.create()
    except FileExistsError as exc:
        raise ConfigError(str(exc)) from exc
    except OSError as exc:  # a file where the folder should be, a path that cannot be written
        raise ConfigError(
            f"WORKDIR={args.workdir} cannot be used: {exc.strerror or exc}; give a folder you can write"
        ) from exc
    with runs.exclusive(layout):
        return _main(args, layout, started=started, here=here)


def _main(args: argparse.Namespace, layout: LocalLayout, *, started: float, here: Path) -> int:
    source = choose(layout, args.data)
    if source.sample and not source.path.exists():
        print(f"generating a sample of {args.sample_files} NDJSON files in {shown(source.path, here)}")
        generate(source.path, files=args.sample_files, records_per_file=args.sample_records)
    try:
        layout.link_landing(source.path)
    except OSError as exc:
        raise ConfigError(f"WORKDIR={args.workdir}: {exc}") from exc
    remember(layout, source)
    table_settings = _table_settings(args, layout)
    builder = load_settings(
        manifest_bucket=MANIFEST_BUCKET, manifest_prefix=MANIFEST_PREFIX, max_manifest_files=args.max_manifest_files
    )
    routes = routes_file(layout, args.routes)
    settings = job_settings(layout, args, routes)
    load_routes(settings)  # a bad routing file, schema or partitioning stops here, before anything is fed
    (layout.state / "table.json").write_text(json.dumps(table_settings), encoding="utf-8")  # valid: kept
    settings_print = runs.fingerprint(
        settings.model_dump_json(),
        routes.read_bytes() if routes else b"",
        args.schema.read_bytes() if args.schema else b"",
    )
    feeder = Feeder(layout, builder, sqs_batch_size=args.sqs_batch_size, metrics=JsonlSink(layout.metrics))
    if not feeder.pending():
        last = runs.nothing_to_do(layout, fed=0, replayed=False, settings_print=settings_print)
        if last is not None:
            print(
                f"nothing new in {shown(source.path, here)} since the last run ({last[:19].replace('T', ' ')}): "
                f"the tables are as they were; make query WORKDIR={args.workdir}"
            )
            return 0
    # the JVM starts while the feed hashes the new files (both take seconds; neither needs the other)
    with ThreadPoolExecutor(max_workers=1) as pool:
        fed = pool.submit(feeder.feed)
        try:
            return _run_job(
                args,
                layout,
                settings,
                fed=fed,
                source=source,
                settings_print=settings_print,
                started=started,
                here=here,
            )
        finally:
            fed.cancel()


def _run_job(
    args: argparse.Namespace,
    layout: LocalLayout,
    settings: JobSettings,
    *,
    fed: Future[FeedResult],
    source: DataSource,
    settings_print: str,
    started: float,
    here: Path,
) -> int:
    from glue_processor.local.session import local_session
    from glue_processor.main import run_query

    spark = local_session(cores=args.cores, quiet=True)
    try:
        feed = fed.result()
        print(_feed_line(feed, source, here))
        waiting = runs.waiting(layout)
        files = _files_waiting(layout, waiting.manifests)
        print(
            f"running the streaming job on local Spark ({args.cores if args.cores != '*' else 'all'} cores): "
            f"{_count(len(waiting.manifests), 'manifest')}, {_count(files, 'file')}, "
            f"{waiting.data_bytes / 1e6:,.1f} MB",
            flush=True,
        )
        runs.mark_run(layout, finished=False)
        jobs = run_query(spark, settings, on_batch=Progress(files, waiting.data_bytes, started))
        # available-now drained every manifest listed before it started, unless a signal stopped it
        # between batches or another run fenced it out: then the next run must look again
        drained = bool(jobs) and not any(j.fenced or j.interrupted for j in jobs)
        runs.mark_run(layout, finished=True, drained=waiting.manifests if drained else (), fingerprint=settings_print)
        if not drained:
            print("stopped before every waiting manifest was loaded: make run loads the rest", flush=True)
        committed = [record for job in jobs for record in job.committed]
        known = {name: tuple(sorted(jobs[-1].memory.keys_of(name))) for name in jobs[-1].routes.tables} if jobs else {}
        report = RunReport(
            records=committed,
            fed_files=feed.files,
            ignored=feed.ignored,
            tables=table_states(settings, layout),
            quarantined=quarantine_records(committed),
            workdir=layout.workdir,
            data=source.path,
            seconds=time.monotonic() - started,
            known_keys=known,
        )
        print(render(report, here=here), flush=True)
    finally:
        spark.stop()
    return 0


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'s' * (n != 1)}"


def _files_waiting(layout: LocalLayout, names: list[str]) -> int:
    """The objects the waiting manifests list (each names its file count)."""
    total = 0
    for name in names:
        try:
            total += int(json.loads((layout.manifests / name).read_bytes()).get("file_count", 0))
        except (OSError, ValueError):
            continue
    return total


if __name__ == "__main__":
    sys.exit(main())
