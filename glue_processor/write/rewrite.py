"""A data file without the rows of replaced or retracted versions: one Spark task per file.

The file is read whole (pyarrow), the rows of each removed version dropped (``_source_uri`` its
object, ``_batch_id`` one of the batches that loaded it, ``_line`` from its first removed line on),
and the rest written as a new file of the same columns, with its statistics worked out here for the
table's plan. What a removal costs is the files that hold the rows: each is read and written once,
however many of its versions go. A file none of whose rows go is left as it is (no new file).
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from glue_processor.read.parts import Staged
from glue_processor.shared import parquet as parquet_writer
from glue_processor.shared.objects import store_for
from glue_processor.table.datafiles import StatsPlan
from glue_processor.table.footer import footer_of, metadata_of

logger = logging.getLogger(__name__)
SOURCE, BATCH, LINE = "_source_uri", "_batch_id", "_line"


@dataclass(frozen=True)
class Removal:
    """The rows of one loaded version: its object, the batches that wrote them, its first line gone."""

    source_uri: str
    batches: tuple[int, ...]
    from_line: int = 1


@dataclass(frozen=True)
class RewriteSpec:
    old: str
    old_bytes: int
    removals: tuple[Removal, ...]
    new: str  # the URI of the file of the rows that stay
    stats: StatsPlan | None = None


@dataclass(frozen=True)
class RewriteResult:
    old: str
    old_bytes: int
    rows_removed: int
    new: Staged | None  # None: no row of it stays (or none went: rows_removed 0, the file stays)


def rewrite_all(specs: list[RewriteSpec]) -> list[RewriteResult]:
    """One Spark task's files, one after the other."""
    return [rewrite(spec) for spec in specs]


def rewrite(spec: RewriteSpec) -> RewriteResult:
    store = store_for(spec.old)
    table = pq.ParquetFile(pa.BufferReader(store.read(spec.old).data)).read()
    drop = removed_rows(table, spec.removals)
    gone = int(pc.sum(drop).as_py() or 0)
    if not gone:
        return RewriteResult(spec.old, spec.old_bytes, 0, None)
    kept = table.filter(pc.invert(drop))
    if not kept.num_rows:
        return RewriteResult(spec.old, spec.old_bytes, gone, None)
    with store_for(spec.new).writer(spec.new) as path:
        parquet_writer.write(kept, path)
        footer = footer_of(path)
        size = Path(path).stat().st_size
    staged = Staged(spec.new, size, tuple(kept.column_names), footer)
    if spec.stats is not None:
        try:
            staged = dataclasses.replace(staged, stats=spec.stats.of(metadata_of(footer)))
        except Exception as exc:  # noqa: BLE001 - the driver works them out (and raises) at the commit
            logger.warning("statistics left to the driver", extra={"uri": spec.new, "error": f"{exc}"[:500]})
    return RewriteResult(spec.old, spec.old_bytes, gone, staged)


def removed_rows(table: pa.Table, removals: tuple[Removal, ...]) -> pa.ChunkedArray | pa.Array:
    """A mask of the rows of ``table`` that ``removals`` take away (the other rows: False)."""
    n = table.num_rows
    if not removals or SOURCE not in table.column_names or BATCH not in table.column_names:
        return pa.array([False] * n)
    source = table.column(SOURCE)
    if pa.types.is_dictionary(source.type):
        source = source.cast(pa.string())
    batch, line = table.column(BATCH), table.column(LINE)
    # the few rows of the removed objects first: a file holds many objects' rows
    candidates = pc.fill_null(pc.is_in(source, value_set=pa.array(sorted({r.source_uri for r in removals}))), False)
    drop = pa.array([False] * n)
    if not pc.any(candidates).as_py():
        return drop
    for r in removals:
        mine = pc.and_(
            pc.and_(candidates, pc.fill_null(pc.equal(source, r.source_uri), False)),
            pc.fill_null(pc.is_in(batch, value_set=pa.array(r.batches, pa.int64())), False),
        )
        if r.from_line > 1:
            mine = pc.and_(mine, pc.fill_null(pc.greater_equal(line, r.from_line), False))
        drop = pc.or_(drop, mine)
    return drop
