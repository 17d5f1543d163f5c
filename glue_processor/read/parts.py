"""A parse task's Parquet parts: its rows in row groups of about a step, in files of about the target.

A new key set starts a new file (a Parquet file has one schema), and so does each partition of a
table partitioned from the record (a file holds one); a partitioned task's rows wait for a spill
that sorts them by partition once, its small partitions' rows go to one shared file
(:mod:`glue_processor.shared.spill`), and it keeps at most ``max_open_files`` files open. What it
wrote is reported as :class:`Staged` parts, which the write stage (:mod:`glue_processor.write.merge`)
makes the batch's files of. Arrow writes every page (:mod:`glue_processor.shared.parquet`).
"""

from __future__ import annotations

import builtins
import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from glue_processor.read.ndjson import MAX_CELLS
from glue_processor.shared import parquet as parquet_writer
from glue_processor.shared.declared import RESCUED, column_type
from glue_processor.shared.extra import EXTRA, EXTRA_TYPE
from glue_processor.shared.names import LINEAGE_COLUMNS, column_names
from glue_processor.shared.objects import ObjectStore
from glue_processor.shared.partitioning import PartitionPlan
from glue_processor.shared.spec import TaskSpec
from glue_processor.shared.spill import SHARED_ROW_GROUP_BYTES, sort_spill

if TYPE_CHECKING:
    from glue_processor.table.datafiles import FileStats

DATA = "k/"  # prefix of data columns inside a task, apart from the lineage columns


@dataclass(frozen=True)
class SharedRows:
    """One partition's rows in a task's shared file (see :mod:`glue_processor.shared.spill`)."""

    first: int  # the first row, counted from the start of the file
    rows: int
    file_bytes: int  # the size of the whole shared file (a ranged reader needs it)


@dataclass(frozen=True)
class Staged:
    uri: str
    bytes: int  # of a shared range: its share of the shared file's bytes, by rows
    keys: tuple[str, ...] = ()
    # the Parquet footer of an output file, for the table's statistics (no read-back on the driver)
    footer: builtins.bytes = field(default=b"", repr=False)
    partition: str = ""  # the partition path of its rows ("" when the sink does not partition by row)
    folded: int = 0  # values the write stage moved to _extra (keys past the batch's column bound)
    shared: SharedRows | None = None  # a range of rows of a shared file, not a file of its own
    # rows of a partition past the batch's partition limit, relabelled to the null partition: the write
    # stage moves their partition values to _extra (glue_processor.write.overflow)
    overflow: bool = False
    demoted: int = 0  # of an output file: rows the write stage moved so into the null partition
    # an output file's table statistics, worked out by the write task that wrote it (Iceberg tables)
    stats: FileStats | None = field(default=None, repr=False)


def output_table(
    data: dict[str, Any], keys: tuple[str, ...], lineage: dict[str, Any], rescued: Any = None, extra: Any = None
) -> pa.Table:
    """Data columns named and ordered by :func:`column_names`, then the lineage columns, ``_extra``,
    and ``_rescued`` when columns are declared."""
    mapping = column_names(keys)
    names = [name for _, name in mapping] + list(LINEAGE_COLUMNS) + [EXTRA]
    rows = len(lineage["_line"])
    arrays = [data[key] for key, _ in mapping] + [lineage[c] for c in LINEAGE_COLUMNS]
    arrays.append(extra if extra is not None else pa.nulls(rows, EXTRA_TYPE))
    if rescued is not None:
        names.append(RESCUED)
        arrays.append(rescued)
    return pa.table(arrays, names=names)


def _weight(table: pa.Table) -> int:
    """What a table's rows weigh in a Parquet file, about: the bytes of its string values, and the
    Arrow bytes of other columns, a dictionary's indices only (an object's lineage strings, one value
    each, weigh next to nothing in the file either; and a slice keeps its source's whole dictionary).
    Not ``nbytes``, which counts the offsets of every NULL: with many sparse columns that is most of
    it, and row groups would come out a fraction of their size."""
    total = 0
    for column in table.columns:
        if column.null_count == len(column):
            continue
        if pa.types.is_dictionary(column.type):
            total += len(column) * column.type.index_type.bit_width // 8
            continue
        wide = pa.types.is_large_string(column.type)
        if not (wide or pa.types.is_string(column.type)):
            total += column.nbytes
            continue
        for chunk in column.chunks:  # the span of its offsets: O(1), no pass over the values
            offsets = chunk.buffers()[1]
            if offsets is None or not len(chunk):
                continue
            ends = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32)
            total += int(ends[chunk.offset + len(chunk)] - ends[chunk.offset])
    return total


def _one_dictionary(table: pa.Table) -> pa.Table:
    """``table`` (a row group's rows) with each dictionary column on one dictionary of the values its
    rows use. Used only: a slice or a take keeps its source's whole dictionary (a partitioned spill's
    take, every object of the spill), and Arrow's writer puts all of it in the row group's dictionary
    page (2,000 objects in 20 partitions: 10x the bytes). One: Arrow's
    writer encodes a chunk's indices as they are only while its dictionary equals the row group's
    first; a chunk of another object's would be decoded and hashed value by value (520,000 rows of
    four objects' ``_source_uri``: 20.9 ms as they came, 6.8 ms on one dictionary, 17.3 ms as plain
    strings)."""
    for i, column in enumerate(table.columns):
        if pa.types.is_dictionary(column.type) and any(len(c.dictionary) > 1 for c in column.chunks):
            chunks = [_used_only(c) for c in column.chunks]
            table = table.set_column(i, table.field(i), pa.chunked_array(chunks, column.type))
    return table.unify_dictionaries()


def _used_only(chunk: pa.DictionaryArray) -> pa.DictionaryArray:
    """``chunk`` with the dictionary values its rows use, in their order: one pass over the indices."""
    if len(chunk.dictionary) <= 1:
        return chunk
    nulls = chunk.indices.is_null().to_numpy(zero_copy_only=False) if chunk.null_count else None
    indices = chunk.indices.fill_null(0).to_numpy(zero_copy_only=False)
    seen = np.zeros(len(chunk.dictionary), dtype=bool)
    seen[indices] = True
    if seen.all():
        return chunk
    remap = np.cumsum(seen, dtype=np.int32) - 1
    return pa.DictionaryArray.from_arrays(
        pa.array(remap[indices], mask=nulls), chunk.dictionary.take(pa.array(np.flatnonzero(seen)))
    )


@dataclass
class _OpenFile:
    """A Parquet file being written: one partition, one key set."""

    uri: str
    keys: tuple[str, ...]
    file: contextlib.ExitStack
    path: Path
    writer: Any
    arrow_bytes: int = 0
    full: bool = False  # about the target: the next rows start a new file

    def finish(self) -> int:
        """Close the writer and put the file in place; its size."""
        self.writer.close()
        size = self.path.stat().st_size
        self.file.close()
        return size


def _rows_per_group(table: pa.Table, weight: int, group_weight: int, columns: int) -> int:
    """Rows of ``table`` (weighing ``weight``) in a row group of about ``group_weight``, at most
    ``MAX_CELLS`` cells of ``columns`` columns."""
    return max(1, min(len(table) * group_weight // max(1, weight), MAX_CELLS // max(1, columns)))


# The most a task holds (by weight, see _weight) of partitions' rows not yet written: rows wait in
# runs of at most half of it, then a spill sorts them (one copy, the other half).
HELD_BYTES = 128 * 1024 * 1024


@dataclass
class _SharedFile:
    """A task's one file for the rows of its small partitions (:mod:`glue_processor.shared.spill`)."""

    out: _OpenFile
    rows: int = 0
    ranges: list[tuple[str, int, int]] = field(default_factory=list)


@dataclass
class ParquetParts:
    """Row groups of ~``row_group_bytes`` into files of ~``target_bytes``; a new key set starts
    a new file (a Parquet file has one schema), and so does each partition (a file holds one)."""

    spec: TaskSpec
    stores: Callable[[str], ObjectStore]
    staged: list[Staged] = field(default_factory=list)
    _pending: list[pa.Table] = field(default_factory=list)
    _pending_keys: tuple[str, ...] = ()
    _pending_weight: int = 0
    _pending_cells: int = 0  # rows x columns held (each an offset at least, whatever its weight)
    _open: dict[str, _OpenFile] = field(default_factory=dict)
    # rows of a partitioned table waiting for a spill (each a table and its rows' partitions)
    _runs: list[tuple[pa.Table, pa.DictionaryArray]] = field(default_factory=list)
    _runs_keys: tuple[str, ...] = ()
    _runs_weight: int = 0
    _runs_cells: int = 0
    _shared: _SharedFile | None = None
    rescued: int = 0
    null_partitions: int = 0
    extra_values: int = 0
    overflow_records: int = 0
    rules_s: float = 0.0
    # the values of each key the table does not know, over the task's objects (read.task)
    new_key_values: dict[str, int] = field(default_factory=dict)
    _kept: set[str] = field(default_factory=set)  # the partitions whose rows the task keeps apart

    def __enter__(self) -> ParquetParts:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None:
            self._flush(final=True)
            for label in list(self._open):
                self._close(label)
            self._close_shared()
        else:
            # The task failed: the files being written are discarded, never put in place.
            for open_file in self._open.values():
                open_file.file.__exit__(exc_type, exc, tb)
            if self._shared is not None:
                self._shared.out.file.__exit__(exc_type, exc, tb)

    def add(self, table: pa.Table, keys: tuple[str, ...]) -> None:
        """Rows to write; a row group is written when they weigh a step, or hold MAX_CELLS cells."""
        weight = _weight(table)
        width = max(len(keys), table.num_columns)
        rows = _rows_per_group(table, weight, self._step, width)
        for offset in range(0, len(table), rows):
            piece = table.slice(offset, rows)
            self._pending.append(piece)
            self._pending_weight += weight * len(piece) // max(1, len(table))
            self._pending_cells += len(piece) * width
            self._pending_keys = keys
            if self._pending_weight >= self._step or self._pending_cells >= MAX_CELLS:
                self._flush()

    @property
    def _step(self) -> int:
        """Weight (see :func:`_weight`) per row group: by default at most a quarter of the target, so a
        file stops close to it."""
        return min(self.spec.row_group_bytes, max(1, self.spec.target_bytes // self.spec.row_groups_per_file))

    def _flush(self, *, final: bool = False) -> None:
        if self._pending:
            self._write_pending(final=final)
        if final:  # the rows waiting for a spill go too, whether or not rows were pending
            self._spill(final=True)

    def _write_pending(self, *, final: bool) -> None:
        keys = self._pending_keys
        merged = pa.concat_tables(self._pending, promote_options="default")
        self._pending = []
        self._pending_weight = 0
        self._pending_cells = 0
        present = set(merged.column_names)
        declared = self.spec.declared
        data = {
            k: merged.column(f"{DATA}{k}")
            if f"{DATA}{k}" in present
            else pa.nulls(len(merged), column_type(k, declared))
            for k in keys
        }
        # declared columns were converted per piece (_typed), before the rules
        rescued = merged.column(RESCUED) if declared is not None else None
        lineage = {c: merged.column(c) for c in LINEAGE_COLUMNS}
        table = output_table(data, keys, lineage, rescued, merged.column(EXTRA))
        if self.spec.partitions is None:
            self._write("", table, keys, final=final)
            return
        table, moved = self.spec.partitions.bound_values(table)  # their rows: null partitions, counted below
        self.extra_values += moved
        labels, nulls = self.spec.partitions.labels(table)
        self.null_partitions += nulls
        if self.spec.partition_limit is not None:
            table, labels = self._within_limit(table, labels, self.spec.partitions, self.spec.partition_limit)
        self._keep(table, labels, keys)

    def _within_limit(
        self, table: pa.Table, labels: pa.DictionaryArray, plan: PartitionPlan, limit: int
    ) -> tuple[pa.Table, pa.DictionaryArray]:
        """``table``'s rows, those of partitions past the task's ``limit`` moved to the null
        partition (their values to ``_extra``): the task keeps apart the first ``limit`` partitions
        it meets (the null one among them; within a chunk, the largest first), so it reports, and
        the driver holds, ranges of at most ``limit`` partitions a spill whatever the input (one
        object of a value per row would otherwise be a range per row). The batch then keeps the
        ``limit`` largest of what its tasks kept (:mod:`glue_processor.write.overflow`)."""
        null = plan.null_label
        self._kept.add(null)
        names = labels.dictionary.to_pylist()
        codes = labels.indices.to_numpy(zero_copy_only=False)
        counts = np.bincount(codes, minlength=len(names))
        fresh = sorted(
            (i for i, name in enumerate(names) if counts[i] and name not in self._kept),
            key=lambda i: (-counts[i], names[i]),
        )
        room = max(0, limit - len(self._kept))
        self._kept.update(names[i] for i in fresh[:room])
        if len(fresh) <= room:
            return table, labels
        moving = np.zeros(len(names), dtype=bool)
        moving[fresh[room:]] = True
        rows = moving[codes]
        self.overflow_records += int(rows.sum())
        # the labels again: the rows kept keep theirs (a dictionary without the moved ones), the
        # moved ones are the null partition's
        stay = [i for i in range(len(names)) if not moving[i]]
        dictionary = [names[i] for i in stay] + ([] if null in names else [null])
        remap = np.full(len(names), dictionary.index(null), dtype=np.int32)
        remap[stay] = np.arange(len(stay), dtype=np.int32)
        relabelled = pa.DictionaryArray.from_arrays(pa.array(remap[codes]), pa.array(dictionary, pa.string()))
        return plan.demote(table, pa.array(rows)), relabelled

    def _keep(self, table: pa.Table, labels: pa.DictionaryArray, keys: tuple[str, ...]) -> None:
        """Rows of a partitioned table wait, as they came, for a spill that sorts them by partition
        once (a take per partition per piece would cost each partition ~0.5 ms a piece). A spill
        comes when they weigh half of ``HELD_BYTES`` or hold half of ``MAX_CELLS`` cells (its sorted
        copy is the other half), when the key set changes (a file has one), and at the end."""
        if self._runs and self._runs_keys != keys:
            self._spill()
        self._runs.append((table, labels))
        self._runs_keys = keys
        self._runs_weight += _weight(table)
        self._runs_cells += len(table) * table.num_columns
        if self._runs_weight >= HELD_BYTES // 2 or self._runs_cells >= MAX_CELLS // 2:
            self._spill()

    def _spill(self, *, final: bool = False) -> None:
        """The waiting rows sorted by partition: a partition with enough rows is written to its own
        part, in row groups of about the step; the small ones to the task's shared file."""
        if not self._runs:
            return
        tables, labels = zip(*self._runs, strict=True)
        keys, weight = self._runs_keys, self._runs_weight
        self._runs, self._runs_weight, self._runs_cells = [], 0, 0
        spill = sort_spill(tables, labels, weight=weight)
        del tables, labels
        if spill.shared:
            self._share(spill.table.slice(0, spill.shared_rows), spill.shared, keys)
        # rows per row group of about the step, by the spill's mean row
        step = _rows_per_group(spill.table, weight, self._step, spill.table.num_columns)
        for label, first, count in spill.own:
            for offset in range(first, first + count, step):
                self._write(label, spill.table.slice(offset, min(step, first + count - offset)), keys, final=final)

    def _share(self, table: pa.Table, ranges: list[tuple[str, int, int]], keys: tuple[str, ...]) -> None:
        """Small partitions' rows (sorted by partition) to the end of the task's shared file."""
        if self._shared is not None and self._shared.out.keys != keys:
            self._close_shared()  # a file has one key set
        if self._shared is None:
            self._shared = _SharedFile(self._open_file("shared", table, keys))
        rows = _rows_per_group(table, _weight(table), SHARED_ROW_GROUP_BYTES, table.num_columns)
        for offset in range(0, len(table), rows):  # a row group a call: each with its own dictionary
            self._shared.out.writer.write_table(_one_dictionary(table.slice(offset, rows)), row_group_size=rows)
        self._shared.ranges.extend((label, self._shared.rows + first, count) for label, first, count in ranges)
        self._shared.rows += len(table)

    def _close_shared(self) -> None:
        shared, self._shared = self._shared, None
        if shared is None:
            return
        size = shared.out.finish()
        for label, first, count in shared.ranges:
            self.staged.append(
                Staged(
                    shared.out.uri,
                    max(1, size * count // max(1, shared.rows)),
                    shared.out.keys,
                    partition=label,
                    shared=SharedRows(first, count, size),
                )
            )

    def _write(self, label: str, table: pa.Table, keys: tuple[str, ...], *, final: bool = False) -> None:
        """A row group into the partition's open file; a full file is closed when more rows come,
        except a small last remainder, which joins it (rather than making a part of its own, whose
        footer and scheduling would cost as much as a full one's)."""
        table = _one_dictionary(table)
        weight = _weight(table)
        current = self._open.get(label)
        tail = final and weight < self._step / 2
        if current is not None and (current.keys != keys or (current.full and not tail)):
            self._close(label)
            current = None
        if current is None:
            if len(self._open) >= self.spec.max_open_files:
                # a bound on what a task holds open (descriptors, writers' buffers), however many
                # partitions its rows span: the least recently written file is finished; its
                # partition's later rows start another part, which the write stage merges
                self._close(next(iter(self._open)))
            current = self._open[label] = self._open_file("part", table, keys)
        else:
            self._open[label] = self._open.pop(label)  # most recently written last
        current.writer.write_table(table, row_group_size=max(1, len(table)))
        current.arrow_bytes += weight
        written = current.path.stat().st_size
        next_group = self._step * written / max(1, current.arrow_bytes)
        current.full = written + next_group / 2 >= self.spec.target_bytes

    def _open_file(self, kind: str, first: pa.Table, keys: tuple[str, ...]) -> _OpenFile:
        """A new ``part`` (one partition) or ``shared`` file of the task, for tables like ``first``."""
        n = len(self.staged) + len(self._open)
        uri = f"{self.spec.data_dir}/{kind}-{self.spec.index:05d}-{n:03d}.parquet"
        stack = contextlib.ExitStack()
        path = stack.enter_context(self.stores(uri).writer(uri))
        return _OpenFile(uri, keys, stack, path, parquet_writer.writer(path, first))

    def _close(self, label: str) -> None:
        current = self._open.pop(label, None)
        if current is None:
            return
        size = current.finish()
        self.staged.append(Staged(current.uri, size, current.keys, partition=label))
