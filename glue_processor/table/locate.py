"""Where a key's rows are in an Iceberg table: the files of the batches that wrote them.

Every row carries the batch that wrote it (``_batch_id``), and every data file its bounds (a file of
one batch has min = max; one compaction merged spans the batches it took). The key index keeps, for
each key, the batches of its rows and the partitions their files went to
(:class:`glue_processor.keys.state.Segment`); a scan planned on those batches keeps only the files
whose ``_batch_id`` bounds hold one, and of those the files in the segments' partitions: the files
that may hold the rows, whatever the table's data. (Planning reads the table's manifests: metadata,
whose count the table's maintenance bounds.) Compaction keeps that true (a merged file's bounds hold
every batch it took).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TypeVar

from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import (
    EqualTo,
    In,
)
from pyiceberg.manifest import DataFile, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.types import LongType

from glue_processor.keys.state import Segment, partition_json

BATCH_COLUMN = "_batch_id"
K = TypeVar("K")
# a share's partitions kept per segment at most; past it, none (every partition is looked at)
MAX_PARTITIONS = 64


def files_holding(table: Table, segments: Iterable[Segment]) -> list[DataFile]:
    """The table's current data files that may hold the rows of ``segments``: a scan filtered on
    their batches (one ``In`` on ``_batch_id``, checked against each file's bounds), then the files
    of the segments' partitions kept (a set lookup per file). The partitions are not put in the
    scan's filter: pyiceberg evaluates a filter on every file of every manifest it reads, and one of
    hundreds of partition terms cost seconds where this costs a tenth (bench.overwrites)."""
    segments = list(segments)
    if not segments or table.current_snapshot() is None:
        return []
    batches = sorted({s.batch_id for s in segments})
    where = (
        EqualTo(term=BATCH_COLUMN, value=batches[0]) if len(batches) == 1 else In(term=BATCH_COLUMN, literals=batches)
    )
    anywhere = any(not s.partitions for s in segments)
    wanted = {p for s in segments for p in s.partitions}
    out = []
    for task in table.scan(row_filter=where).plan_files():
        f = task.file
        if anywhere or _partition_of(f) in wanted:
            out.append(f)
    return out


def files_of_each(table: Table, segments_of: Mapping[K, Sequence[Segment]]) -> dict[K, dict[str, int]]:
    """For each key of ``segments_of``, the files (path -> bytes) that may hold its rows: one scan
    for them all (:func:`files_holding` over every segment), then each file given to the keys whose
    segments it may hold (a batch within its ``_batch_id`` bounds, in one of their partitions)."""
    every = [s for segs in segments_of.values() for s in segs]
    found = files_holding(table, every)
    field_id = table.schema().find_field(BATCH_COLUMN).field_id
    out: dict[K, dict[str, int]] = {k: {} for k in segments_of}
    for f in found:
        low, high = _bounds(f, field_id)
        where = _partition_of(f)
        for k, segs in segments_of.items():
            if any(low <= s.batch_id <= high and (not s.partitions or where in s.partitions) for s in segs):
                out[k][str(f.file_path)] = int(f.file_size_in_bytes)
    return out


def _bounds(f: DataFile, field_id: int) -> tuple[float, float]:
    """A file's ``_batch_id`` bounds (unknown: every batch)."""
    lower, upper = (f.lower_bounds or {}).get(field_id), (f.upper_bounds or {}).get(field_id)
    low = from_bytes(LongType(), lower) if lower is not None else float("-inf")
    high = from_bytes(LongType(), upper) if upper is not None else float("inf")
    return float(low), float(high)


def _partition_of(f: DataFile) -> str:
    record = f.partition
    return partition_json(f.spec_id, [record[i] for i in range(len(record))])


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
