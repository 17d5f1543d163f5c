"""Where a key's rows are in an Iceberg table: the files of the batches that wrote them.

Every row carries the batch that wrote it (``_batch_id``), and every data file its bounds (a file of
one batch has min = max; one compaction merged spans the batches it took). The key index keeps, for
each key, the batches of its rows and the partitions their files went to
(:class:`glue_processor.keys.state.Segment`); a scan planned with ``_batch_id`` equal to each batch,
in each of its partitions, reads only the manifests of those partitions (pyiceberg projects the
filter on each spec) and keeps only the files whose ``_batch_id`` bounds hold the batch: the files
that may hold the rows, however large the table. Compaction keeps that true (a merged file's bounds
hold every batch it took).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    EqualTo,
    GreaterThanOrEqual,
    IsNull,
    LessThan,
    Or,
)
from pyiceberg.manifest import DataFile, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.transforms import DayTransform, HourTransform, IdentityTransform, MonthTransform, YearTransform
from pyiceberg.types import DateType, TimestamptzType

from glue_processor.keys.state import Segment, partition_json

BATCH_COLUMN = "_batch_id"
# a share's partitions kept per segment at most; past it, none (every partition is looked at)
MAX_PARTITIONS = 64
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def files_holding(table: Table, segments: Iterable[Segment]) -> list[DataFile]:
    """The table's current data files that may hold the rows of ``segments``."""
    filters = [segment_filter(table, s) for s in segments]
    if not filters or table.current_snapshot() is None:
        return []
    where = filters[0] if len(filters) == 1 else Or(*filters)
    return [task.file for task in table.scan(row_filter=where).plan_files()]


def segment_filter(table: Table, segment: Segment) -> BooleanExpression:
    batch = EqualTo(term=BATCH_COLUMN, value=segment.batch_id)
    parts = [_partition_filter(table, p) for p in segment.partitions]
    if not parts or any(isinstance(p, AlwaysTrue) for p in parts):
        return batch
    return And(batch, parts[0] if len(parts) == 1 else Or(*parts))


def _partition_filter(table: Table, text: str) -> BooleanExpression:
    """A partition (its spec's values) as a filter on its source columns; AlwaysTrue for what it
    cannot say (a spec or a transform it does not know)."""
    item = json.loads(text)
    spec = table.specs().get(item["spec"])
    if spec is None or len(spec.fields) != len(item["values"]):
        return AlwaysTrue()
    schema = table.schema()
    terms: list[BooleanExpression] = []
    for field, value in zip(spec.fields, item["values"], strict=True):
        name = schema.find_column_name(field.source_id)
        if name is None:
            return AlwaysTrue()
        kind = schema.find_field(field.source_id).field_type
        term = _term(name, kind, field.transform, value)
        if term is None:
            return AlwaysTrue()
        terms.append(term)
    if not terms:
        return AlwaysTrue()
    return terms[0] if len(terms) == 1 else And(*terms)


def _term(name: str, kind: Any, transform: Any, value: Any) -> BooleanExpression | None:
    if value is None:
        return IsNull(term=name)
    if isinstance(transform, IdentityTransform):
        return EqualTo(term=name, value=value) if isinstance(value, str | int | bool) else None
    if not isinstance(value, int):
        return None
    if isinstance(transform, DayTransform):
        start, end = EPOCH + timedelta(days=value), EPOCH + timedelta(days=value + 1)
    elif isinstance(transform, HourTransform):
        start, end = EPOCH + timedelta(hours=value), EPOCH + timedelta(hours=value + 1)
    elif isinstance(transform, MonthTransform | YearTransform):
        months = value * 12 if isinstance(transform, YearTransform) else value
        span = 12 if isinstance(transform, YearTransform) else 1
        start, end = _month(months), _month(months + span)
    else:
        return None
    low, high = _literal(kind, start), _literal(kind, end)
    return And(GreaterThanOrEqual(term=name, value=low), LessThan(term=name, value=high))


def _month(months: int) -> datetime:
    return datetime(1970 + months // 12, 1 + months % 12, 1, tzinfo=UTC)


def _literal(kind: Any, when: datetime) -> str:
    if isinstance(kind, DateType):
        return date(when.year, when.month, when.day).isoformat()
    if isinstance(kind, TimestamptzType):
        return when.isoformat()
    return when.replace(tzinfo=None).isoformat()


def added_partitions(table: Table, snapshot_id: int) -> tuple[str, ...]:
    """The partitions of the files a snapshot added (at most :data:`MAX_PARTITIONS`, else none: a
    segment that names none is looked for in every partition)."""
    snapshot = table.snapshot_by_id(snapshot_id)
    if snapshot is None:
        return ()
    found: set[str] = set()
    for manifest in snapshot.manifests(table.io):
        if manifest.added_snapshot_id != snapshot_id or not manifest.added_files_count:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if entry.status != ManifestEntryStatus.ADDED:
                continue
            record = entry.data_file.partition
            values = [record[i] for i in range(len(record))]
            found.add(partition_json(entry.data_file.spec_id, values))
            if len(found) > MAX_PARTITIONS:
                return ()
    return tuple(sorted(found))
