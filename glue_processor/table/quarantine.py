"""The quarantine table: every quarantined line, object and manifest, as rows you can query.

``<database>.quarantine`` (``--quarantine_table``) holds one row per quarantine record a batch made:
the table the object was meant for, its bucket, key, version and eTag, the line, the kind (``line``, a
whole object, a manifest, a ``rule`` a row broke), the reason, the rule, the raw text's first 64 KiB
and its size, the batch, the manifest and the commit time. It is appended with the batch's load
history, exactly once by the same guard (``history.append_once``: the snapshot summary names the
query, batch and part), from the batch's quarantine files, which the parse tasks and the driver
write as they find what they cannot load (JSON lines under ``<QuarantineUri>``, expired by the
bucket's lifecycle; ``make reconcile`` requeues from the load history, where an object quarantined
whole has its status). A batch's files are appended in groups of at most :data:`GROUP_BYTES` (a
group, a part), so the driver holds one group at a time however much a batch quarantined; a file
past it (a task that read an object of bad lines) is one row saying where its records are: what the
JSON lines hold that the table does not.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, timedelta

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pajson
from pyiceberg.table import Table

from contracts.exceptions import StorageError
from contracts.layout import source_uri
from contracts.ledger import CommitRecord, PublishedFile
from glue_processor.shared.names import TIMESTAMP
from glue_processor.shared.objects import split_s3
from glue_processor.table.history import append_once
from glue_processor.table.iceberg import ExpiryCadence
from glue_processor.table.transaction import Head

logger = logging.getLogger(__name__)

RAW_CHARS = 64 * 1024  # the raw text kept: its first 64 KiB characters (the parser keeps 64 KiB bytes)
GROUP_BYTES = 256 * 1024 * 1024  # quarantine files read and appended at once, at most
SCHEMA = pa.schema(
    [
        pa.field("table_name", pa.string()),
        pa.field("bucket", pa.string()),
        pa.field("key", pa.string()),
        pa.field("version_id", pa.string()),
        pa.field("etag", pa.string()),
        pa.field("line", pa.int64()),
        pa.field("kind", pa.string()),
        pa.field("reason", pa.string()),
        pa.field("rule", pa.string()),
        pa.field("raw", pa.string()),
        pa.field("raw_bytes", pa.int64()),
        pa.field("source_uri", pa.string()),
        pa.field("manifest_uri", pa.string()),
        pa.field("batch_id", pa.int64()),
        pa.field("query_id", pa.string()),
        pa.field("commit_time", TIMESTAMP),
        pa.field("commit_date", pa.date32()),
    ]
)
# the fields of a quarantine record (read/task.py, write/stage.py) the table takes
RECORD = pa.schema(
    [
        pa.field("kind", pa.string()),
        pa.field("source_uri", pa.string()),
        pa.field("line", pa.int64()),
        pa.field("reason", pa.string()),
        pa.field("rule", pa.string()),
        pa.field("raw", pa.string()),
        pa.field("raw_bytes", pa.int64()),
        pa.field("manifest_uri", pa.string()),
        pa.field("etag", pa.string()),
        pa.field("version_id", pa.string()),
    ]
)


def read_records(body: bytes) -> pa.Table:
    """A quarantine file's records (JSON lines) as a table of :data:`RECORD`'s fields."""
    if not body.strip():
        return RECORD.empty_table()
    options = pajson.ParseOptions(explicit_schema=RECORD, unexpected_field_behavior="ignore")
    read = pajson.ReadOptions(block_size=max(1 << 20, min(len(body), 64 << 20)))
    table = pajson.read_json(pa.BufferReader(body), read_options=read, parse_options=options)
    return table.select(RECORD.names).cast(RECORD)


def quarantine_rows(record: CommitRecord, records: pa.Table, *, database: str, legacy: str) -> pa.Table:
    """The quarantine table's rows for ``records`` of a batch: each object's table and version from the
    batch's sources (a record names its object by URI), the raw text cut to :data:`RAW_CHARS`."""
    # a record names its object by URI and, since issue 47, its version (eTag, S3 version): two
    # versions of one key in a batch are told apart; a record from before, by the URI's loaded one
    by_version: dict[tuple[str, str, str | None], tuple[str | None, str, str, str | None, str]] = {}
    by_uri: dict[str, tuple[str | None, str, str, str | None, str]] = {}
    loaded = ("ingested", "empty")
    for s in sorted(record.sources, key=lambda s: s.status not in loaded):  # loaded ones first
        table = s.table if s.table is not None else (legacy if record.schema_version == 1 else None)
        this = (table or None, s.bucket, s.key, s.version_id, s.etag)
        uri = source_uri(s.bucket, s.key)
        by_version.setdefault((uri, s.etag, s.version_id), this)
        by_uri.setdefault(uri, this)
    uris, etags = records.column("source_uri").to_pylist(), records.column("etag").to_pylist()
    versions = zip(uris, etags, records.column("version_id").to_pylist(), strict=True)
    found = [
        (by_version.get((u, e, v)) if e is not None else None) or by_uri.get(u) if u else None for u, e, v in versions
    ]
    n = len(uris)
    raw = records.column("raw")
    sizes = pc.if_else(pc.is_null(records.column("raw_bytes")), pc.binary_length(raw), records.column("raw_bytes"))
    return pa.table(
        {
            "table_name": [f"{database}.{f[0]}" if f and f[0] else None for f in found],
            "bucket": [f[1] if f else _where(u)[0] for f, u in zip(found, uris, strict=True)],
            "key": [f[2] if f else _where(u)[1] for f, u in zip(found, uris, strict=True)],
            "version_id": [f[3] if f else None for f in found],
            # the version's eTag: a version replaced later keeps its rows, told apart by it
            "etag": [e if e is not None else f[4] if f else None for f, e in zip(found, etags, strict=True)],
            "line": records.column("line"),
            "kind": records.column("kind"),
            "reason": records.column("reason"),
            "rule": records.column("rule"),
            "raw": pc.utf8_slice_codeunits(raw, 0, RAW_CHARS),
            "raw_bytes": pc.cast(sizes, pa.int64()),
            "source_uri": records.column("source_uri"),
            "manifest_uri": records.column("manifest_uri"),
            "batch_id": pa.array([record.batch_id] * n, pa.int64()),
            "query_id": pa.array([record.query_id] * n, pa.string()),
            "commit_time": pa.array([record.committed_at] * n, TIMESTAMP),
            "commit_date": pa.array([record.committed_at.astimezone(UTC).date()] * n, pa.date32()),
        },
        schema=SCHEMA,
    )


def _where(uri: str | None) -> tuple[str | None, str | None]:
    """(bucket, key) of an s3:// URI no source of the batch names; (None, None) for another."""
    try:
        return split_s3(uri) if uri else (None, None)
    except StorageError:
        return None, None


def groups(files: Sequence[PublishedFile], limit: int = GROUP_BYTES) -> list[list[PublishedFile]]:
    """The batch's quarantine files in groups of at most ``limit`` bytes (a file past it alone)."""
    out: list[list[PublishedFile]] = []
    size = 0
    for f in sorted(files, key=lambda f: f.final):
        if not out or (size + f.bytes > limit and out[-1]):
            out.append([])
            size = 0
        out[-1].append(f)
        size += f.bytes
    return out


def left_in_file(f: PublishedFile) -> pa.Table:
    """The one row that stands for a quarantine file too large to read on the driver at once: where
    its records are."""
    reason = (
        f"{f.bytes:,} bytes of quarantine records, more than the {GROUP_BYTES // 2**20} MiB read at once: "
        f"they are in {f.final}, not in this table"
    )
    return pa.Table.from_pylist([{"kind": "records-in-file", "reason": reason, "raw_bytes": f.bytes}], schema=RECORD)


class QuarantineTable:
    """Appends a committed batch's quarantine records to the quarantine table, once."""

    def __init__(
        self,
        table: Callable[[], Table],
        read: Callable[[PublishedFile], bytes],
        *,
        database: str,
        legacy: str,
        snapshot_retention: timedelta,
    ) -> None:
        self._table, self._read = table, read
        self.database, self.legacy = database, legacy
        self.snapshot_retention = snapshot_retention
        self._cadence = ExpiryCadence()
        self._head = Head()

    def open(self) -> None:
        self._table()

    def _records(self, f: PublishedFile) -> pa.Table:
        return left_in_file(f) if f.bytes > GROUP_BYTES else read_records(self._read(f))

    def publish(self, record: CommitRecord) -> bool:
        """Append the batch's quarantine records unless the table has them; True when they are in.
        Like the load history it never holds up the stream: a failure is logged (the records are in
        the quarantine files) and False returned."""
        try:
            for n, group in enumerate(groups(record.quarantine_files)):

                def rows(group: list[PublishedFile] = group) -> pa.Table:
                    read = pa.concat_tables([self._records(f) for f in group])
                    return quarantine_rows(record, read, database=self.database, legacy=self.legacy)

                append_once(
                    self._table(),
                    record,
                    rows,
                    part=f"q{n}",
                    retention=self.snapshot_retention,
                    cadence=self._cadence,
                    head=self._head,
                )
        except Exception:
            logger.exception(
                "could not append the batch's quarantine records to the quarantine table; its files have them",
                extra={"batch_id": record.batch_id, "query_id": record.query_id},
            )
            return False
        return True
