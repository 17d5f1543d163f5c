"""The write side of a batch: parts staged by the parse tasks become files of about the target size.

The parse tasks are planned by input, so that every core of the cluster has work whatever the
batch's output size; each stages Parquet *parts* of about an eighth of the target size. This module plans
and writes the batch's output files from those parts, one Spark task per output file:

- a part of about the target size whose columns are already the batch's final ones is kept as
  it is (no rewrite);
- every other part is packed with others into outputs of about the target size. Parts that have
  the final columns are concatenated by bytes (:mod:`glue_processor.write.concat`: no decoding,
  so one output file costs I/O, not a core's worth of re-encoding); a group holding a part written
  before another task found a new key is rewritten once, row group by row group, with the final
  columns. When the tasks of a batch together found more new keys than the column bound has room
  for, a part's columns of keys that did not make the cut are folded into its ``_extra`` then.

Sizes are exact here (the parts exist), so the output sizes do not depend on an estimate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

from glue_processor.plan.sizing import plan_groups
from glue_processor.read.parts import Staged, output_table
from glue_processor.shared import parquet as parquet_writer
from glue_processor.shared.declared import RESCUED, RESCUED_TYPE, DeclaredSchema, column_type
from glue_processor.shared.extra import EXTRA, to_map, values_in
from glue_processor.shared.names import LINEAGE_COLUMNS, column_names
from glue_processor.shared.objects import ObjectStore, local_path, store_for
from glue_processor.table.footer import footer_at, footer_of, metadata_of
from glue_processor.write.compose import composed
from glue_processor.write.concat import ConcatError, concat
from glue_processor.write.shared import SharedReader

if TYPE_CHECKING:
    from glue_processor.shared.partitioning import PartitionPlan
    from glue_processor.table.datafiles import StatsPlan

logger = logging.getLogger(__name__)

# A part within this fraction of the target is a file of its own already.
FULL = 0.85
# Output files within this fraction of the target count as on target.
TOLERANCE = 0.15


@dataclass(frozen=True)
class MergeSpec:
    index: int
    parts: tuple[Staged, ...]
    keys: tuple[str, ...]
    uri: str
    declared: DeclaredSchema | None = None
    partition: str = ""
    stats: StatsPlan | None = None  # the table's, when the file's statistics are worked out here
    partitions: PartitionPlan | None = None  # the table's: what an overflow part's rows move (write.overflow)


@dataclass(frozen=True)
class MergePlan:
    keep: tuple[Staged, ...]  # parts that are output files as they are
    merges: tuple[MergeSpec, ...]  # groups of parts, each rewritten into one file


def plan_merge(
    parts: Sequence[Staged],
    keys: tuple[str, ...],
    *,
    target_bytes: int,
    out_dir: str,
    prefix: str = "merged",
    keep_parts: bool = True,
    declared: DeclaredSchema | None = None,
    stats: StatsPlan | None = None,
    partitions: PartitionPlan | None = None,
) -> MergePlan:
    """Keep full parts with the final columns (when the sink may publish a staged part); pack the
    rest, partition by partition (a file never mixes two), into about ``total / target`` files named
    ``<out_dir>/[<partition path>/]<prefix>-<n>.parquet``."""
    keep = [
        p
        for p in parts
        if keep_parts
        and p.shared is None
        and not p.overflow
        and p.bytes >= FULL * target_bytes
        and set(p.keys) == set(keys)
    ]
    kept = {p.uri for p in keep}
    by_partition: dict[str, list[Staged]] = {}
    for p in parts:
        if p.uri not in kept:
            by_partition.setdefault(p.partition, []).append(p)
    merges: list[MergeSpec] = []
    for label in sorted(by_partition):  # a file holds one partition's rows
        rest = by_partition[label]
        where = f"{out_dir}/{label}" if label else out_dir
        # the null partition past the partition limit gathers ranges of every shared file: packed by
        # size, each of its files would read (decode) every shared file again
        moved = any(p.overflow for p in rest)
        for group in _in_order(rest, target_bytes) if moved else _packing([p.bytes for p in rest], target_bytes):
            i = len(merges)
            uri = f"{where}/{prefix}-{i:05d}.parquet"
            merges.append(MergeSpec(i, tuple(rest[j] for j in group), keys, uri, declared, label, stats, partitions))
    return MergePlan(tuple(keep), tuple(merges))


def _packing(sizes: list[int], target_bytes: int) -> list[list[int]]:
    """Groups of parts for files of about the target: of the file counts around ``total / target``,
    the one whose packing puts the most bytes within ±15 % of the target (parts come in steps of
    about a quarter of it, so ``round`` alone can leave every file just outside)."""
    total = sum(sizes)
    counts = sorted({max(1, math.floor(total / target_bytes)), max(1, math.ceil(total / target_bytes))})
    best: list[list[int]] = []
    best_score = (-1, 0.0)
    for n in counts:
        groups = plan_groups(sizes, n)
        totals = [sum(sizes[i] for i in g) for g in groups]
        within = sum(t for t in totals if abs(t - target_bytes) <= TOLERANCE * target_bytes)
        score = (within, -abs(n - total / target_bytes))
        if score > best_score:
            best, best_score = groups, score
    return best


def _in_order(parts: Sequence[Staged], target_bytes: int) -> list[list[int]]:
    """Groups of parts for files of about the target, parts taken in their place in the files they
    are in (a shared file's ranges by their first row): a group reads a span of few files, so the
    files of a partition gathered from everywhere decode each shared row group about once."""

    def place(i: int) -> tuple[str, int]:
        shared = parts[i].shared
        return parts[i].uri, shared.first if shared is not None else -1

    order = sorted(range(len(parts)), key=place)
    groups: list[list[int]] = [[]]
    size = 0
    for i in order:
        if groups[-1] and size + parts[i].bytes > target_bytes:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += parts[i].bytes
    return groups


def concatenable(spec: MergeSpec) -> bool:
    """Every part is a file with the final columns, and none has rows to move to the null
    partition: the file is their bytes, concatenated."""
    return all(p.shared is None and not p.overflow and set(p.keys) == set(spec.keys) for p in spec.parts)


def merge_parts(
    spec: MergeSpec, stores: Callable[[str], ObjectStore] = store_for, shared: SharedReader | None = None
) -> Staged:
    """Make one Parquet file of a group of parts, then delete the parts: by concatenating their
    bytes when they all have the final columns, else by rewriting them with those columns. Rows in
    shared files (small partitions' rows, read through ``shared``) are written once more, and the
    shared files are left to the write stage (other merges read them too)."""
    files = tuple(p for p in spec.parts if p.shared is None)
    metadata = None
    if len(files) == len(spec.parts):
        staged = _concatenate(spec, stores) if concatenable(spec) else _rewrite(spec, stores)
    else:
        reader = shared or SharedReader(stores)
        try:
            staged, metadata = _with_shared(spec, files, reader, stores)
        finally:
            if shared is None:
                reader.close()
    for part in files:
        stores(part.uri).delete(part.uri)
    return _with_stats(spec, staged, metadata)


def _with_stats(spec: MergeSpec, staged: Staged, metadata: pq.FileMetaData | None = None) -> Staged:
    """The file's table statistics, worked out here (in parallel with the other merges) rather than
    on the driver, from its FileMetaData as written when there is one, else from its footer. A file
    the plan does not fit is left without: the driver works its statistics out at the append, and
    reports what is wrong with it there."""
    if spec.stats is None or not staged.footer:
        return staged
    try:
        return dataclasses.replace(staged, stats=spec.stats.of(metadata or metadata_of(staged.footer)))
    except Exception as exc:  # noqa: BLE001 - the append works them out (and raises) on the driver
        logger.warning("statistics left to the driver", extra={"uri": spec.uri, "error": f"{exc}"[:500]})
        return staged


def _with_shared(
    spec: MergeSpec, files: tuple[Staged, ...], reader: SharedReader, stores: Callable[[str], ObjectStore]
) -> tuple[Staged, pq.FileMetaData | None]:
    """A file of the partition's rows in shared files, and of its own parts: those are copied by
    bytes when they have the final columns (the shared rows joining as one more row group), else
    rewritten."""
    folded = 0
    tables: dict[bool, list[pa.Table]] = {False: [], True: []}
    for part in spec.parts:
        if part.shared is not None:
            rows = reader.rows(part.uri, part.shared.first, part.shared.rows, part.shared.file_bytes)
            table, n = _conformed(rows, part.keys, spec)
            tables[part.overflow].append(table)
            folded += n
    moved = _demoted(_concat(tables[True]), spec) if tables[True] else None
    rows = _concat(tables[False] + ([moved] if moved is not None else []))
    demoted = len(moved) if moved is not None else 0
    if not files:  # the rows are in memory already, and the file is smaller than they are
        body, metadata = parquet_writer.encode(rows, use_dictionary=reader.dictionary_columns(rows))
        with stores(spec.uri).writer(spec.uri) as path:
            path.write_bytes(body)
        footer = footer_at(pa.BufferReader(body), body.size)[0]
        return Staged(spec.uri, body.size, spec.keys, footer, spec.partition, folded, demoted=demoted), metadata
    own = dataclasses.replace(spec, parts=files)
    if concatenable(own):
        with tempfile.TemporaryDirectory(prefix="shared-") as tmp:
            extra = Path(tmp) / "shared.parquet"
            parquet_writer.write(rows, extra)
            try:
                return dataclasses.replace(_concatenate(own, stores, extra=extra), folded=folded, demoted=demoted), None
            except ConcatError:  # the parts' Parquet schema differs from the shared rows': rewrite
                pass
    staged = _rewrite(own, stores, extra=rows)
    return dataclasses.replace(staged, folded=staged.folded + folded, demoted=staged.demoted + demoted), None


def _concat(tables: list[pa.Table]) -> pa.Table:
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def _demoted(table: pa.Table, spec: MergeSpec) -> pa.Table:
    """Rows of partitions past the batch's limit, moved to the null partition (write.overflow)."""
    if spec.partitions is None:
        raise ValueError(f"{spec.uri}: rows to move to the null partition, and no partition plan to move them by")
    return spec.partitions.demote(table)


def _concatenate(spec: MergeSpec, stores: Callable[[str], ObjectStore], *, extra: Path | None = None) -> Staged:
    # on S3, by S3 (write/compose.py): no byte of the parts passes through here
    done = composed(spec.parts, spec.uri, spec.keys, spec.partition, stores, extra=extra)
    if done is not None:
        return done
    with contextlib.ExitStack() as stack:
        local = []
        tmp: Path | None = None  # made for the first remote part only: a batch over many partitions
        for n, part in enumerate(spec.parts):  # has a merge per partition, each a few ms
            if part.uri.startswith("file:"):
                local.append(local_path(part.uri))  # already a file: no copy
                continue
            if tmp is None:
                tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="parts-")))
            path = tmp / f"{n:05d}.parquet"
            path.write_bytes(stores(part.uri).read(part.uri).data)
            local.append(path)
        if extra is not None:
            local.append(extra)
        with stores(spec.uri).writer(spec.uri) as path:
            rows = concat(local, path)
            # the footer was written here: read it back (once, from the file) before the file can
            # be published
            footer = footer_of(path)
            if metadata_of(footer).num_rows != rows:
                raise ValueError(f"{spec.uri}: concatenated file does not read back {rows} rows")
            size = path.stat().st_size
    return Staged(spec.uri, size, spec.keys, footer, spec.partition)


def _conformed(table: pa.Table, keys: tuple[str, ...], spec: MergeSpec) -> tuple[pa.Table, int]:
    """Rows written with ``keys`` as the final columns of ``spec`` (absent ones NULL, declared ones
    of their type, keys past the column bound folded into ``_extra``), and the values folded."""
    if set(keys) == set(spec.keys):
        return table, 0  # written with the final columns already (column_names orders by the key set)
    final_names = column_names(spec.keys)
    final = set(spec.keys)
    names = dict(column_names(keys))
    spilled = [key for key in keys if key not in final]  # past the bound: to _extra
    types = {key: column_type(key, spec.declared) for key, _ in final_names}
    data = {
        key: table.column(names[key]).cast(types[key]) if key in names else pa.nulls(len(table), types[key])
        for key, _ in final_names
    }
    rescued = None
    if spec.declared is not None:
        rescued = table.column(RESCUED) if RESCUED in table.column_names else pa.nulls(len(table), RESCUED_TYPE)
    lineage = {c: table.column(c) for c in LINEAGE_COLUMNS}
    extra = table.column(EXTRA).combine_chunks()
    folded = 0
    if spilled:
        columns = [table.column(names[key]).combine_chunks() for key in spilled]
        folded = values_in(columns)
        extra = to_map(spilled, columns, len(table), base=extra)
    return output_table(data, spec.keys, lineage, rescued, extra), folded


def _rewrite(spec: MergeSpec, stores: Callable[[str], ObjectStore], *, extra: pa.Table | None = None) -> Staged:
    """Rewrite parts with the final columns, one row group at a time (memory: one part's bytes and
    one row group), and ``extra`` rows (final columns already) after them."""
    folded = demoted = 0
    with stores(spec.uri).writer(spec.uri) as path:
        writer: pq.ParquetWriter | None = None
        try:
            for part in spec.parts:
                source = pq.ParquetFile(pa.BufferReader(stores(part.uri).read(part.uri).data))
                for group in range(source.num_row_groups):
                    conformed, n = _conformed(source.read_row_group(group), part.keys, spec)
                    folded += n
                    if part.overflow:
                        conformed = _demoted(conformed, spec)
                        demoted += len(conformed)
                    if writer is None:
                        writer = parquet_writer.writer(path, conformed)
                    writer.write_table(conformed, row_group_size=max(1, len(conformed)))
            if extra is not None and len(extra):
                if writer is None:
                    writer = parquet_writer.writer(path, extra)
                writer.write_table(extra, row_group_size=max(1, len(extra)))
        finally:
            if writer is not None:
                writer.close()
        size = path.stat().st_size
        footer = footer_of(path)
    return Staged(spec.uri, size, spec.keys, footer, spec.partition, folded, demoted=demoted)
