"""Reconcile and replay: compare what landed with what was loaded.

S3 event notifications are at-least-once and can be late or, rarely, lost. This lists the
landing prefix (or reads it from a local WORKDIR), reads what was loaded, and reports objects never
ingested and object versions ingested twice, with the objects ingested per table. What was loaded
comes from the load history (``<database>.load_history``: one scan, whatever the history's
length), or, ``--from ledger``, from the job's commit records (one read per batch; the reference
when a history append failed, which the job logs). ``--requeue`` sends the missing ones through the
pipeline again as the S3 event they would have produced: to the SQS queue on AWS, through the
manifest builder locally (a version already ingested is dropped there as a duplicate).

    python -m glue_processor.local.reconcile --workdir .work [--requeue] [--from ledger]
    python -m glue_processor.local.reconcile --landing s3://bucket/incoming/ --database ndjson_ingest \\
        [--queue-url https://sqs...] [--requeue]
    python -m glue_processor.local.reconcile --landing s3://bucket/incoming/ --from ledger --output s3://out/data

An object the routing file ignored is left out on purpose, until the routing changes: one that the
current routing (the WORKDIR's, or ``--routes`` on AWS) sends to a table counts as never ingested,
and ``--requeue`` loads it.

Exit codes: 0 every object that landed is accounted for (loaded, left out on purpose: ignored by
the routing file's ``unmatched: ignore``, or requeued by this run); 3 an object that should have
been loaded never was, or an object version was loaded twice (the JSON report says which); 2 the
command was given wrong (a setting, a WORKDIR with no run). ``make reconcile`` exits 2 whenever
this does not exit 0 (make's own code for a failed recipe), naming this one's.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Collection, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from botocore.exceptions import BotoCoreError, ClientError

from contracts.exceptions import ConfigError
from contracts.layout import COMMITS_DIR, is_commit_record
from contracts.ledger import CommitRecord
from contracts.object_filter import DEFAULT_SUFFIXES, ObjectFilter
from contracts.routing import parse_routing, read_routing
from glue_processor.commit.ledger import abandoned_shares
from glue_processor.local.comparison import LandedObject, Load, Report, reconcile_bounded
from glue_processor.local.errors import USAGE, Parser, cli, user_path
from glue_processor.local.layout import LANDING_BUCKET, MANIFEST_BUCKET, MANIFEST_PREFIX, LocalLayout

if TYPE_CHECKING:
    from glue_processor.local.feeder import Feeder

ALL_ACCOUNTED, NOT_LOADED = 0, 3


def loads_of(records: Iterable[CommitRecord]) -> Iterator[Load]:
    """The ledger's commit records as loads."""
    for record in records:
        for s in record.sources:
            yield Load(s.bucket, s.key, s.etag, s.status, s.reason, record.batch_id)


HISTORY_COLUMNS = ("bucket", "key", "etag", "status", "reason", "batch_id", "table_name")


def history_filter(since: datetime | None) -> str:
    """The load history's rows committed on or after ``since``'s day (UTC; all rows when None): the
    table is partitioned by ``commit_date``, so the other days' files are not read."""
    return "TRUE" if since is None else f"commit_date >= '{since.astimezone(UTC).date().isoformat()}'"


def history_loads(table: Any, *, since: datetime | None = None, keys: Collection[str] | None = None) -> Iterator[Load]:
    """The load history's rows as loads (an Iceberg table): only the columns needed, one data file
    at a time (pyiceberg's batch reader reads every file at once), only the days from ``since`` on
    (:func:`history_filter`), and with ``keys``, only the rows of those keys (filtered in Arrow, so
    a year of other keys' rows never becomes Python objects)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.io.pyarrow import ArrowScan

    scan = table.scan(row_filter=history_filter(since), selected_fields=HISTORY_COLUMNS)
    reader = ArrowScan(table.metadata, table.io, scan.projection(), scan.row_filter)
    wanted = None if keys is None else pa.array(list(keys), pa.string())
    for task in scan.plan_files():
        for batch in reader.to_record_batches([task]):
            rows = batch if wanted is None else batch.filter(pc.is_in(batch.column("key"), value_set=wanted))
            for r in rows.to_pylist():
                yield Load(r["bucket"], r["key"], r["etag"], r["status"], r["reason"], r["batch_id"], r["table_name"])


# -- local ----------------------------------------------------------------------------------------
def local_landing(workdir: Path) -> Iterator[LandedObject]:
    """The landing bucket of a local run, filtered as the local feeder filters it."""
    from glue_processor.local.feeder import md5_of

    feeder = _local_feeder(workdir)
    for key, path in feeder.landing_files():
        yield LandedObject(LANDING_BUCKET, key, md5_of(path), path.stat().st_size)


def local_records(workdir: Path) -> Iterator[CommitRecord]:
    """The ledger's records, but those of abandoned batches and the loads of abandoned shares
    (their objects were never loaded: rejected)."""
    for path in sorted((workdir / "output" / COMMITS_DIR).glob("*/*.json")):
        if not is_commit_record(path.name) or path.with_suffix(".abandoned").exists():
            continue
        record = CommitRecord.model_validate_json(path.read_bytes())
        batch = path.name.removesuffix(".json")
        markers = {p.name.removesuffix(".abandoned"): str(p) for p in path.parent.glob(f"{batch}.*.abandoned")}
        yield record.without(abandoned_shares(record, batch, markers, lambda p: Path(p).read_bytes()))


def local_loads(workdir: Path, source: str) -> Iterator[Load]:
    """What a local run loaded: its load history, or (``ledger``, or no history yet) its ledger."""
    catalog_db = workdir / "output" / "_catalog" / "catalog.db"
    if source == "history" and catalog_db.exists():
        from pyiceberg.exceptions import NoSuchTableError

        from glue_processor.table.catalog import open_catalog

        try:
            table = open_catalog(f"sqlite:///{catalog_db}").load_table(("ingest", "load_history"))
        except NoSuchTableError:
            pass
        else:
            return history_loads(table)
    if source == "history":
        print("no load history (hive-parquet, or no batch yet): reading the ledger", file=sys.stderr)
    return loads_of(local_records(workdir))


def local_routed(workdir: Path) -> Callable[[str], bool]:
    """Whether the routing a local run uses now (the WORKDIR's routes.json; none: every key to one
    table) sends a key to a table."""
    kept = workdir / "routes.json"
    if not kept.exists():
        return lambda _key: True
    routing = parse_routing(kept.read_bytes(), source=str(kept))
    return lambda key: routing.table_of(key) is not None


def local_requeue(workdir: Path, missing: list[LandedObject]) -> int:
    return _local_feeder(workdir).feed_keys([o.key for o in missing]).files


def _local_feeder(workdir: Path) -> Feeder:
    from glue_processor.local.feeder import Feeder
    from lambdas.manifest_builder.settings import load_settings

    return Feeder(LocalLayout(workdir), load_settings(manifest_bucket=MANIFEST_BUCKET, manifest_prefix=MANIFEST_PREFIX))


# -- AWS ------------------------------------------------------------------------------------------
def _split(uri: str) -> tuple[str, str]:
    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    return bucket, prefix


def s3_landing(s3: Any, uri: str, *, suffixes: tuple[str, ...] = DEFAULT_SUFFIXES) -> Iterator[LandedObject]:
    """The landed objects the pipeline takes: the same filter as the stack's notification and the Lambda."""
    bucket, prefix = _split(uri)
    taken = ObjectFilter(prefix, suffixes)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            if taken.admits(obj["Key"]):
                yield LandedObject(bucket, obj["Key"], obj["ETag"].strip('"'), obj["Size"])


def s3_landing_versions(s3: Any, uri: str, *, suffixes: tuple[str, ...] = DEFAULT_SUFFIXES) -> Iterator[LandedObject]:
    """Every version of every landed object the pipeline takes (versioned buckets): an object
    overwritten before the job read it must still appear in the ledger, by its own eTag."""
    bucket, prefix = _split(uri)
    taken = ObjectFilter(prefix, suffixes)
    for page in s3.get_paginator("list_object_versions").paginate(Bucket=bucket, Prefix=prefix):
        for v in page.get("Versions", []):
            if taken.admits(v["Key"]):
                yield LandedObject(bucket, v["Key"], v["ETag"].strip('"'), v["Size"], v.get("VersionId"))


def s3_records(s3: Any, output_uri: str) -> Iterator[CommitRecord]:
    """The ledger's records, but those of abandoned batches (their objects were never loaded)."""
    bucket, prefix = _split(output_uri.rstrip("/") + f"/{COMMITS_DIR}/")
    keys = [
        o["Key"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for o in page.get("Contents", [])
    ]
    abandoned = {k.removesuffix(".abandoned"): k for k in keys if k.endswith(".abandoned")}
    for key in keys:
        if is_commit_record(key.rsplit("/", 1)[-1]) and key.removesuffix(".json") not in abandoned:
            record = CommitRecord.model_validate_json(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
            shares = abandoned_shares(
                record,
                key.removesuffix(".json"),
                abandoned,
                lambda k: s3.get_object(Bucket=bucket, Key=k)["Body"].read(),
            )
            yield record.without(shares)


def sqs_requeue(sqs: Any, queue_url: str, missing: list[LandedObject]) -> int:
    """Send each missing object as the S3 event notification S3 would have sent."""
    from glue_processor.local.events import CreatedObject, s3_notification

    now = datetime.now(UTC)
    for start in range(0, len(missing), 10):
        entries = []
        for i, o in enumerate(missing[start : start + 10]):
            obj = CreatedObject(o.bucket, o.key, o.size, o.etag, now, f"REQUEUE{start + i:012d}", o.version_id)
            entries.append({"Id": str(i), "MessageBody": json.dumps(s3_notification(obj))})
        sqs.send_message_batch(QueueUrl=queue_url, Entries=entries)
    return len(missing)


def glue_history(database: str, history_table: str, *, instead: str) -> Any:
    """The job's load history in the Glue Data Catalog, or one line saying why not: a database
    with no such table, or a catalog that refused (``instead``: the other source of what loaded)."""
    from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

    from glue_processor.table.catalog import open_catalog

    try:
        return open_catalog("glue").load_table((database, history_table))
    except (NoSuchTableError, NoSuchNamespaceError) as exc:
        raise ConfigError(
            f"--database={database}: no load history {history_table} there ({exc}); give the stack's Database "
            f"output (a hive-parquet stack keeps no load history: {instead})"
        ) from exc
    except (ClientError, BotoCoreError) as exc:
        raise ConfigError(f"--database={database}: the Glue catalog refused to read {history_table}: {exc}") from exc


@cli
def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="reconcile", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workdir", type=user_path, help="a local run's WORKDIR")
    p.add_argument("--landing", help="s3://bucket/prefix of the landing objects")
    p.add_argument("--output", help="the job's output_uri (s3://...), where the ledger lives (--from ledger)")
    p.add_argument("--from", dest="source", choices=("history", "ledger"), default="history", help="what was loaded")
    p.add_argument("--database", help="the Glue database of the load history (AWS, --from history)")
    p.add_argument("--history-table", default="load_history", help="the job's --load_history_table")
    p.add_argument(
        "--suffixes",
        default=",".join(DEFAULT_SUFFIXES),
        help="the manifest Lambda's SOURCE_SUFFIXES (default: the stack's)",
    )
    p.add_argument("--versions", action="store_true", help="compare every object version (versioned landing bucket)")
    p.add_argument("--queue-url", help="the landing SQS queue, for --requeue on AWS")
    p.add_argument("--requeue", action="store_true", help="send the never-ingested objects through again")
    p.add_argument(
        "--routes",
        help="AWS: the routing file the job runs with now (its RoutesUri, s3://...): an object an earlier "
        "routing ignored that this one takes counts as never ingested (locally: the WORKDIR's)",
    )
    args = p.parse_args(argv)
    if args.workdir:
        if not (args.workdir / "state").is_dir():
            raise ConfigError(f"WORKDIR={args.workdir}: no local run here; run make run WORKDIR={args.workdir} first")
        report = reconcile_bounded(
            local_landing(args.workdir), local_loads(args.workdir, args.source), routed=local_routed(args.workdir)
        )
        if args.requeue and report.never_ingested:
            report.requeued = local_requeue(args.workdir, report.never_ingested)
    elif args.landing and (args.output if args.source == "ledger" else args.database):
        if args.requeue and not args.queue_url:  # before anything is read
            p.error("--requeue on AWS needs --queue-url")
        try:
            report = _aws_reconcile(args)
        except (ClientError, BotoCoreError) as exc:  # S3 or SQS refusing (AccessDenied, NoSuchBucket)
            print(f"error: AWS refused the reconcile: {exc}", file=sys.stderr)
            return USAGE
    else:
        p.error("give --workdir, or --landing and --database (or --from ledger and --output)")
    print(json.dumps(report.as_json(), indent=1, ensure_ascii=False))
    if report.requeued and args.workdir:
        print(f"requeued {report.requeued}: make run WORKDIR={args.workdir} loads them", file=sys.stderr)
    print(
        f"landed {report.landed}, ingested {report.ingested}, ignored by the routing {report.ignored}, "
        f"superseded by a later version {report.superseded}, "
        f"never ingested {len(report.never_ingested)} "
        f"({len(report.failed)} with a recorded failure), ingested twice {len(report.ingested_twice)}, "
        f"requeued {report.requeued}",
        file=sys.stderr,
    )
    # what was requeued is on its way (the next run, or the job, loads it): nothing is left to do
    settled = not report.never_ingested or report.requeued >= len(report.never_ingested)
    return ALL_ACCOUNTED if settled and not report.ingested_twice else NOT_LOADED


def _aws_reconcile(args: argparse.Namespace) -> Report:
    import boto3

    suffixes = tuple(x for x in args.suffixes.split(",") if x)
    lister = s3_landing_versions if args.versions else s3_landing
    landed = lister(boto3.client("s3"), args.landing, suffixes=suffixes)
    if args.source == "ledger":
        loads = loads_of(s3_records(boto3.client("s3"), args.output))
    else:
        table = glue_history(args.database, args.history_table, instead="give --from ledger and --output instead")
        loads = history_loads(table)
    routed = None
    if args.routes:
        routing = read_routing(boto3.client("s3"), args.routes)
        routed = lambda key: routing.table_of(key) is not None  # noqa: E731 - one line
    report = reconcile_bounded(landed, loads, routed=routed)
    if args.requeue and report.never_ingested:
        report.requeued = sqs_requeue(boto3.client("sqs"), args.queue_url, report.never_ingested)
    return report


if __name__ == "__main__":
    sys.exit(main())
