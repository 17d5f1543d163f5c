"""Backfill without listing: manifests for existing objects, from an S3 Inventory report.

A landing bucket that held data before the stack's notifications existed (or a prefix a producer
wrote while they were off) is backfilled from its S3 Inventory report rather than by listing it:
``manifest.json`` names the report's files (CSV, ORC or Parquet, as S3 writes them); the objects
selected (the pipeline's own object filter, ``--prefix``, ``--since``, the latest version, no delete
marker) that the load history (or the ledger) does not say were ingested are written as bounded manifests (the manifest
Lambda's planner and contract: same names, same bounds) into the manifest prefix, at most ``--rate``
MB/s of referenced data, so live traffic keeps its SLA. The job takes them like any manifest; the
control plane sees their bytes as backlog (their names carry them). An object version that was
ingested live is skipped here, and one that arrives live while the backfill runs is dropped by the
job's dedupe index: it is loaded once.

    python -m glue_processor.local.backfill --inventory s3://inv/.../manifest.json --manifests s3://m/manifests/ \\
        --database ndjson_ingest [--prefix incoming/] [--since 2026-01-01] [--rate 200]
        (a hive-parquet job, which keeps no load history: --output s3://out/data, its ledger)
    python -m glue_processor.local.backfill --workdir .work [--inventory <its inventory/manifest.json>]
    python -m glue_processor.local.backfill --workdir .work --write-inventory    # a local folder's report
"""

from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import io
import json
import sys
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote_plus, unquote_plus

import pyarrow as pa
import pyarrow.parquet as pq
from botocore.exceptions import BotoCoreError, ClientError
from pyarrow import orc

from contracts.exceptions import ConfigError
from contracts.layout import manifest_key
from contracts.manifest import ManifestEntry
from contracts.object_filter import DEFAULT_SUFFIXES, ObjectFilter
from glue_processor.local.comparison import LandedObject, Load, reconcile
from glue_processor.local.errors import Parser, cli, user_path
from glue_processor.local.reconcile import loads_of
from lambdas.manifest_builder.batching import MessageEntries, plan_manifests

MB = 1_000_000
# What S3 Inventory calls the fields we use: CSV's header names (fileSchema) and ORC/Parquet's columns.
_FIELDS = {
    "bucket": "bucket",
    "key": "key",
    "versionid": "version_id",
    "version_id": "version_id",
    "islatest": "is_latest",
    "is_latest": "is_latest",
    "isdeletemarker": "is_delete_marker",
    "is_delete_marker": "is_delete_marker",
    "size": "size",
    "lastmodifieddate": "last_modified",
    "last_modified_date": "last_modified",
    "etag": "etag",
    "e_tag": "etag",
}


class InventoryError(ValueError):
    """The inventory report cannot be read (what and where)."""


@dataclass(frozen=True)
class InventoryObject:
    bucket: str
    key: str
    size: int
    etag: str
    last_modified: datetime
    version_id: str | None = None
    is_latest: bool = True
    is_delete_marker: bool = False


@dataclass(frozen=True)
class Selection:
    prefix: str = ""
    since: datetime | None = None
    suffixes: tuple[str, ...] = DEFAULT_SUFFIXES

    def admits(self, o: InventoryObject) -> bool:
        return (
            o.is_latest
            and not o.is_delete_marker
            and ObjectFilter(self.prefix, self.suffixes).admits(o.key)
            and (self.since is None or o.last_modified >= self.since)
        )


# -- reading a report ---------------------------------------------------------------------------
Read = Callable[[str, str], bytes]  # (bucket, key) -> bytes


def read_inventory(manifest: dict[str, Any], read: Read) -> Iterator[InventoryObject]:
    """Every row of the report ``manifest`` (a parsed ``manifest.json``) describes."""
    fmt = str(manifest.get("fileFormat", "")).upper()
    destination = str(manifest.get("destinationBucket", "")).removeprefix("arn:aws:s3:::")
    files = manifest.get("files")
    if not destination or not isinstance(files, list):
        raise InventoryError("manifest.json: destinationBucket and files are required")
    for item in files:
        body = read(destination, item["key"])
        where = f"s3://{destination}/{item['key']}"
        if fmt == "CSV":
            names = [_field(n) for n in str(manifest.get("fileSchema", "")).split(",")]
            yield from _csv_rows(body, names, where)
        elif fmt in ("PARQUET", "ORC"):
            table = pq.read_table(pa.BufferReader(body)) if fmt == "PARQUET" else orc.read_table(pa.BufferReader(body))
            yield from _table_rows(table, where)
        else:
            raise InventoryError(f"manifest.json: fileFormat {fmt!r} is not CSV, ORC or Parquet")


def _field(name: str) -> str:
    return _FIELDS.get(name.strip().lower(), name.strip().lower())


def _csv_rows(body: bytes, names: list[str], where: str) -> Iterator[InventoryObject]:
    text = gzip.decompress(body) if body[:2] == b"\x1f\x8b" else body
    for n, row in enumerate(csv.reader(io.StringIO(text.decode("utf-8"))), start=1):
        if len(row) != len(names):
            raise InventoryError(f"{where} line {n}: {len(row)} fields, the schema names {len(names)}")
        # CSV inventory keys are URL-encoded (S3 User Guide, "Amazon S3 Inventory list")
        values = dict(zip(names, row, strict=True))
        yield _object(values | {"key": unquote_plus(values.get("key", ""))}, f"{where} line {n}")


def _table_rows(table: pa.Table, where: str) -> Iterator[InventoryObject]:
    table = table.rename_columns([_field(c) for c in table.column_names])
    for n, values in enumerate(table.to_pylist(), start=1):
        yield _object(values, f"{where} row {n}")


def _object(v: dict[str, Any], where: str) -> InventoryObject:
    try:
        modified = v["last_modified"]
        if not isinstance(modified, datetime):
            modified = datetime.fromisoformat(str(modified).replace("Z", "+00:00"))
        return InventoryObject(
            bucket=str(v["bucket"]),
            key=str(v["key"]),
            size=int(v.get("size") or 0),
            etag=str(v.get("etag") or "").strip('"'),
            last_modified=modified if modified.tzinfo else modified.replace(tzinfo=UTC),
            version_id=v.get("version_id") or None,
            is_latest=_flag(v.get("is_latest"), default=True),
            is_delete_marker=_flag(v.get("is_delete_marker"), default=False),
        )
    except (KeyError, ValueError, TypeError) as exc:
        raise InventoryError(
            f"{where}: {exc!r} (an inventory needs Bucket, Key, Size, ETag, LastModifiedDate)"
        ) from exc


def _flag(value: Any, *, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value if isinstance(value, bool) else str(value).lower() == "true"


# -- planning and emitting ------------------------------------------------------------------------
@dataclass
class BackfillReport:
    listed: int = 0
    selected: int = 0
    already_ingested: int = 0
    emitted_objects: int = 0
    emitted_bytes: int = 0
    manifests: int = 0

    def as_json(self) -> dict[str, int]:
        return dict(vars(self))


# What was loaded of the objects with these keys (more rows are fine: they are filtered out)
Loads = Callable[[Collection[str]], Iterable[Load]]


# Selected objects compared with the loads at once (~1 GB: the planner holds ~1.9 KB an object,
# tests/test_backfill.py): a selection larger than this (a whole bucket, no SINCE or PREFIX) is
# planned a chunk at a time, each chunk one read of the loads filtered on its keys, so memory does
# not grow with the bucket
CHUNK = 500_000


def plan_backfill(
    objects: Iterable[InventoryObject],
    loads: Loads,
    selection: Selection,
    *,
    max_bytes: int,
    max_files: int,
    report: BackfillReport,
    chunk: int = CHUNK,
) -> Iterator[Any]:
    """The manifests (the manifest Lambda's planner) for the selected objects no load ingested,
    planned as they are consumed, ``chunk`` selected objects at a time. Only the loads of a chunk's
    objects are kept: memory holds one chunk, not the selection nor the history. ``report`` counts
    what was consumed so far."""
    chosen: dict[tuple[str, str, str], InventoryObject] = {}
    planned = 0
    for o in objects:
        report.listed += 1
        if selection.admits(o):
            chosen[(o.bucket, o.key, o.etag)] = o
            if len(chosen) >= chunk:
                yield from _plan_chunk(chosen, loads, max_bytes=max_bytes, max_files=max_files, report=report)
                chosen, planned = {}, planned + 1
    if chosen or not planned:
        yield from _plan_chunk(chosen, loads, max_bytes=max_bytes, max_files=max_files, report=report)


def _plan_chunk(
    chosen: dict[tuple[str, str, str], InventoryObject],
    loads: Loads,
    *,
    max_bytes: int,
    max_files: int,
    report: BackfillReport,
) -> list[Any]:
    report.selected += len(chosen)
    landed = [LandedObject(o.bucket, o.key, o.etag, o.size, o.version_id) for o in chosen.values()]
    relevant = (x for x in loads({k for _, k, _ in chosen}) if (x.bucket, x.key, x.etag) in chosen)
    missing = reconcile(landed, relevant).never_ingested
    report.already_ingested += len(chosen) - len(missing)
    messages = []
    for i, lo in enumerate(missing):
        o = chosen[(lo.bucket, lo.key, lo.etag)]
        entry = ManifestEntry(
            bucket=o.bucket,
            key=o.key,
            size=o.size,
            etag=o.etag,
            event_time=o.last_modified,
            version_id=o.version_id,
        )
        messages.append(MessageEntries(f"backfill-{i}", (entry,)))
    return [p.manifest for p in plan_manifests(messages, max_bytes=max_bytes, max_files=max_files).manifests]


def emit(
    manifests: Iterable[Any],
    put: Callable[[str, bytes], None],
    *,
    prefix: str,
    rate_mb_s: float,
    report: BackfillReport,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> None:
    """Write each manifest (``put(key, body)``), never ahead of ``rate_mb_s`` of referenced data."""
    started = clock()
    for manifest in manifests:
        due = started + report.emitted_bytes / (rate_mb_s * MB) if rate_mb_s > 0 else started
        if clock() < due:
            sleep(due - clock())
        put(manifest_key(prefix, manifest), manifest.to_json())
        report.manifests += 1
        report.emitted_objects += manifest.file_count
        report.emitted_bytes += manifest.total_bytes


# -- local ------------------------------------------------------------------------------------------
def write_local_inventory(workdir: Path) -> Path:
    """An S3 Inventory report (CSV, as S3 writes it) of a local run's landing folder; returns its
    ``manifest.json``."""
    from glue_processor.local.layout import LANDING_BUCKET, LocalLayout

    layout = LocalLayout(workdir)
    root = workdir / "inventory"
    rows = io.StringIO()
    writer = csv.writer(rows, quoting=csv.QUOTE_ALL, lineterminator="\n")
    for path in sorted(p for p in layout.landing.resolve().rglob("*") if p.is_file()):
        key = path.relative_to(layout.landing.resolve()).as_posix()
        st = path.stat()
        modified = datetime.fromtimestamp(st.st_mtime, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
        digest = hashlib.md5(path.read_bytes()).hexdigest()  # noqa: S324 - S3's single-part ETag is an MD5
        quoted = quote_plus(key, safe="/")
        writer.writerow([LANDING_BUCKET, quoted, "", "true", "false", st.st_size, modified, digest])
    data = root / "data" / "inventory-0.csv.gz"
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_bytes(gzip.compress(rows.getvalue().encode()))
    manifest = {
        "sourceBucket": LANDING_BUCKET,
        "destinationBucket": "arn:aws:s3:::local-inventory",
        "version": "2016-11-30",
        "fileFormat": "CSV",
        "fileSchema": "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag",
        "files": [{"key": "data/inventory-0.csv.gz", "size": data.stat().st_size}],
    }
    out = root / "manifest.json"
    out.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return out


def local_backfill(workdir: Path, inventory: Path, selection: Selection, *, rate_mb_s: float) -> BackfillReport:
    """Backfill a local run: the manifests go to its manifest folder, and the objects are recorded
    as fed, as S3 would send no event for an object that already exists."""
    from glue_processor.local.buckets import LocalBuckets
    from glue_processor.local.layout import MANIFEST_BUCKET, MANIFEST_PREFIX, LocalLayout
    from glue_processor.local.reconcile import local_records
    from lambdas.manifest_builder.settings import load_settings

    manifest = json.loads(inventory.read_text(encoding="utf-8"))
    root = inventory.parent

    def read(_bucket: str, key: str) -> bytes:
        return (root / key).read_bytes()

    settings = load_settings(manifest_bucket=MANIFEST_BUCKET, manifest_prefix=MANIFEST_PREFIX)
    report = BackfillReport()
    manifests = plan_backfill(
        read_inventory(manifest, read),
        lambda _keys: loads_of(local_records(workdir)),
        selection,
        max_bytes=settings.max_manifest_bytes,
        max_files=settings.max_manifest_files,
        report=report,
    )
    buckets = LocalBuckets(LocalLayout(workdir).buckets)

    def fed_first(planned: Iterable[Any]) -> Iterator[Any]:
        for manifest in planned:  # its objects recorded as fed before it is written
            _mark_fed(workdir, [manifest])
            yield manifest

    def put(key: str, body: bytes) -> None:
        buckets.put(MANIFEST_BUCKET, key, body, content_type="application/json")

    emit(fed_first(manifests), put, prefix=MANIFEST_PREFIX, rate_mb_s=rate_mb_s, report=report)
    return report


def _mark_fed(workdir: Path, manifests: list[Any]) -> None:
    from glue_processor.local.feeder import record_fed
    from glue_processor.local.layout import LocalLayout

    layout = LocalLayout(workdir)
    record_fed(layout, [(e.key, layout.landing / e.key, e.etag) for m in manifests for e in m.entries])


# -- AWS --------------------------------------------------------------------------------------------
def s3_backfill(
    s3: Any, inventory_uri: str, manifests_uri: str, loads: Loads, selection: Selection, *, rate_mb_s: float
) -> BackfillReport:
    """``loads``: what was loaded, from the load history (:func:`aws_loads`) or the ledger."""
    bucket, _, key = inventory_uri.removeprefix("s3://").partition("/")
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())

    def read(b: str, k: str) -> bytes:
        return bytes(s3.get_object(Bucket=b, Key=k)["Body"].read())

    report = BackfillReport()
    planned = plan_backfill(
        read_inventory(manifest, read),
        loads,
        selection,
        max_bytes=1024 * 1024 * 1024,
        max_files=1000,
        report=report,
    )
    target, _, prefix = manifests_uri.removeprefix("s3://").partition("/")

    def put(k: str, body: bytes) -> None:
        s3.put_object(Bucket=target, Key=k, Body=body, ContentType="application/json")

    emit(planned, put, prefix=prefix, rate_mb_s=rate_mb_s, report=report)
    return report


def aws_loads(
    s3: Any, *, database: str | None, history_table: str, output: str | None, since: datetime | None
) -> Loads:
    """What the job loaded: its load history (``database``: only the days from ``since`` on and
    the selected keys' rows are read), else its ledger under ``output`` (every commit record, one
    GET each: a hive-parquet job keeps no history, and the ledger also holds a batch whose history
    append failed, which the job logs; an ON_OVERWRITE=append table would load such an object
    again, a mirrored one's key index skips it)."""
    from glue_processor.local.reconcile import glue_history, history_loads, s3_records

    if database:
        table = glue_history(database, history_table, instead="give --output=<OutputDataUri> instead")
        return lambda keys: history_loads(table, since=since, keys=keys)
    return lambda _keys: loads_of(s3_records(s3, output or ""))


@cli
def main(argv: list[str] | None = None) -> int:
    p = Parser(prog="backfill", description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--workdir", type=user_path, help="a local run's WORKDIR")
    p.add_argument("--write-inventory", action="store_true", help="write the local landing folder's report and stop")
    p.add_argument("--inventory", help="the report's manifest.json (s3://... or a local path)")
    p.add_argument("--manifests", help="AWS: the manifest prefix, s3://bucket/manifests/")
    p.add_argument("--database", help="AWS: the Glue database of the job's load history (what was ingested)")
    p.add_argument("--history-table", default="load_history", help="the job's --load_history_table")
    p.add_argument(
        "--output", help="AWS, a hive-parquet job (no load history): its output URI, whose ledger says what loaded"
    )
    p.add_argument("--prefix", default="", help="only keys under this prefix")
    p.add_argument("--since", type=datetime.fromisoformat, help="only objects modified at or after (ISO 8601)")
    p.add_argument("--rate", type=float, default=200.0, help="MB/s of referenced data at most (default 200)")
    args = p.parse_args(argv)
    if args.database and args.output:
        # one source of what loaded: the history, or the ledger (the authority when the history is
        # behind, docs/operations.md); taking one silently would skip what the other knows
        p.error("give --database (the load history says what loaded) or --output (the job's ledger says it), not both")
    since = args.since if args.since is None or args.since.tzinfo else args.since.replace(tzinfo=UTC)
    selection = Selection(prefix=args.prefix, since=since)
    if args.workdir is not None and not (args.workdir / "state").is_dir():
        raise ConfigError(f"WORKDIR={args.workdir}: no local run here; run make run WORKDIR={args.workdir} first")
    try:
        if args.workdir is not None:
            if args.write_inventory:
                print(write_local_inventory(args.workdir))
                return 0
            inventory = Path(args.inventory) if args.inventory else args.workdir / "inventory" / "manifest.json"
            report = local_backfill(args.workdir, inventory, selection, rate_mb_s=args.rate)
        elif args.inventory and args.manifests and (args.database or args.output):
            import boto3

            s3 = boto3.client("s3")
            loads = aws_loads(
                s3, database=args.database, history_table=args.history_table, output=args.output, since=since
            )
            report = s3_backfill(s3, args.inventory, args.manifests, loads, selection, rate_mb_s=args.rate)
        else:
            p.error("give --workdir, or --inventory, --manifests and --database (or --output)")
    except (InventoryError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ClientError, BotoCoreError) as exc:  # S3 refusing a read or a write (AccessDenied, NoSuchBucket)
        print(f"error: AWS refused the backfill: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report.as_json()))
    if args.workdir is not None and report.manifests:
        # locally nothing runs the job on its own: say what does
        print(
            f"{report.manifests} manifests of {report.emitted_objects} objects are waiting; load them with: "
            f"make run WORKDIR={args.workdir}",
            file=sys.stderr,
        )
    elif args.workdir is not None:
        print("nothing to backfill: every object the report lists was ingested or is waiting", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
