"""A batch's parse tasks: its objects cut into pieces and grouped so that every core has work.

Tasks are planned from the batch's input, whatever its output size (see
:func:`glue_processor.plan.sizing.parse_unit_count`): as many as keep every core busy, none reading
more than its cap; a large plain object is read in byte ranges by several tasks, numbered first
(:func:`glue_processor.plan.ranges.number_ranges`, a counting task per range).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from glue_processor.plan.manifests import SourceFile
from glue_processor.plan.ranges import number_ranges
from glue_processor.plan.sizing import Piece, parse_unit_count, plan_groups, plan_pieces
from glue_processor.settings import JobSettings
from glue_processor.shared.spec import FileOutcome, FileTask, TaskSpec
from glue_processor.shared.text import MIB, Limits

if TYPE_CHECKING:
    from glue_processor.plan.routes import TableConfig

# A parse task stages parts of 1/PART_FRACTION of the target file size: the write stage packs them
# into files of about the target whatever each task wrote (whole-target parts left ~0.6-target
# tails; quarter-target parts came out at 0.28 of it, and files of 3 or 4 of them at 0.84 or 1.12).
PART_FRACTION = 8
SparkMap = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]


@dataclass(frozen=True)
class Where:
    """Where a batch attempt's tasks write, and what they stamp on every row."""

    parts_dir: str
    quarantine_dir: str
    batch_id: int
    ingest_time: datetime


def plan_tasks(
    files: list[SourceFile],
    where: Where,
    *,
    settings: JobSettings,
    config: TableConfig,
    known: tuple[str, ...],
    held: tuple[str, ...] = (),
    gzip_expansion: float,
    cores: int,
    spark_map: SparkMap,
) -> tuple[list[TaskSpec], list[FileOutcome]]:
    """The parse tasks of ``files`` (one table's: ``config``), and the objects that will not be read
    (a range of theirs could not be counted: nothing of them is loaded, rather than some of their
    lines)."""
    # a version that extends the one loaded (on_overwrite tail) is read from where that one ended
    estimates = [(f.entry.size - f.tail_from) * (gzip_expansion if gzipped(f) else 1.0) for f in files]
    # a gzip object is one stream; one over max_object_mb is read whole, so the cap still applies
    cap = settings.max_object_mb * MIB
    pieces = plan_pieces(estimates, [not gzipped(f) and f.entry.size <= cap for f in files], cores=cores)
    items, unread = number_ranges([file_task(files[p.item], p) for p in pieces], spark_map)
    estimate = {(p.item, p.start + files[p.item].tail_from): p.estimate for p in pieces}
    weights = [estimate[i.item, i.start] for i in items]
    part = max(1, config.target_file_bytes // PART_FRACTION)
    limits = Limits(max_line_bytes=settings.max_line_mb * MIB, max_object_bytes=settings.max_object_mb * MIB)
    specs = [
        TaskSpec(
            index=i,
            files=tuple(items[j] for j in group),
            known=known,
            held=held,
            data_dir=where.parts_dir,
            quarantine_dir=where.quarantine_dir,
            batch_id=where.batch_id,
            ingest_time=where.ingest_time,
            target_bytes=part,
            row_group_bytes=part,
            row_groups_per_file=1,
            max_open_files=settings.max_open_files_per_task,
            limits=limits,
            declared=config.declared,
            rules=config.rules,
            partitions=config.partitions,
            partition_limit=settings.partition_limit_per_batch if config.partitions is not None else None,
            max_columns=config.max_columns,
        )
        for i, group in enumerate(plan_groups(weights, parse_unit_count(weights, cores=cores)))
    ]
    return specs, unread


def gzipped(source: SourceFile) -> bool:
    return source.read_uri.lower().endswith(".gz")


def file_task(source: SourceFile, piece: Piece) -> FileTask:
    return FileTask(
        read_uri=source.read_uri,
        source_uri=source.source_uri,
        etag=source.entry.etag,
        event_time=source.entry.event_time,
        manifest_uri=source.manifest_uri,
        version_id=source.entry.version_id,
        item=piece.item,
        # a tail's pieces are of the bytes past the version loaded, numbered on from its last line
        start=piece.start + source.tail_from,
        end=None if piece.end is None else piece.end + source.tail_from,
        first_line=source.tail_line,
    )
