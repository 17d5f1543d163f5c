"""Many small partitions in one file: how a batch over hundreds of partitions costs what its bytes cost.

A table partitioned from the record needs one file per partition, and each parse task has rows of
every partition. Writing a part file per partition per task costs a Parquet writer, a footer and a
file for each (~1 ms here, whatever the rows), then a merge per partition that opens every task's
part: 1,000 partitions on 2 tasks were 2,000 part files. Instead, a parse task keeps its rows as they
come (bounded), and at a *spill* sorts them by partition once:

- a partition with at least ``OWN_BYTES`` of rows in the spill (or the only one) is written to a part
  of its own, as before: its bytes are copied into the partition's file by the write stage, never
  re-encoded;
- the rows of all the other (small) partitions, sorted by partition, are appended to the task's one
  *shared file*, in row groups of about ``SHARED_ROW_GROUP_BYTES``; each partition's rows there are a
  range of rows, which the task reports like a part (:class:`glue_processor.read.parts.SharedRows`).

The write stage gives each merge task a contiguous run of partitions (in label order, the order the
shared files are sorted in), so a merge task decodes only its share of each shared file's row groups,
each once (:class:`SharedReader`), and writes each small partition's file in one pass. A batch then
writes a shared file per task and a file per partition, instead of a part per partition per task.
"""

from __future__ import annotations

import bisect
import io
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from glue_processor.shared.objects import ObjectStore, local_path
from glue_processor.write import parquet as parquet_writer

# A partition with at least this weight of rows in a spill is written to a part of its own (its bytes
# are then copied, not re-encoded, into its file); smaller ones share the task's file. At this size
# a part's own writer and footer (~1 ms) cost about what re-encoding its rows once more would.
OWN_BYTES = 256 * 1024
# Row groups of the shared file: small enough that a merge task reads little beyond its partitions.
SHARED_ROW_GROUP_BYTES = 4 * 1024 * 1024
# The most decoded row groups of shared files a merge task keeps (by Arrow bytes).
READER_CACHE_BYTES = 128 * 1024 * 1024


@dataclass(frozen=True)
class Spill:
    """A spill's rows sorted by partition: the shared partitions first, then those written on their
    own; each partition's rows are ``(label, first row, rows)`` of ``table``."""

    table: pa.Table
    shared: list[tuple[str, int, int]]
    own: list[tuple[str, int, int]]

    @property
    def shared_rows(self) -> int:
        return sum(n for _, _, n in self.shared)


def sort_spill(
    tables: Sequence[pa.Table], labels: Sequence[pa.DictionaryArray], *, weight: int, own_bytes: int = OWN_BYTES
) -> Spill:
    """The rows of ``tables`` (each row's partition in ``labels``) sorted by partition with one take:
    partitions under ``own_bytes`` (by their share of ``weight``) first, in label order, then the
    others in label order. Linear in the rows, whatever the number of partitions."""
    names: dict[str, int] = {}
    codes = []
    for label in labels:
        local = np.array([names.setdefault(n, len(names)) for n in label.dictionary.to_pylist()], dtype=np.int64)
        codes.append(local[label.indices.to_numpy(zero_copy_only=False)] if len(local) else np.zeros(0, np.int64))
    code = np.concatenate(codes) if codes else np.zeros(0, np.int64)
    table = pa.concat_tables(tables, promote_options="default") if len(tables) != 1 else tables[0]
    counts = np.bincount(code, minlength=len(names))
    rows = max(1, len(code))
    of = list(names)
    # a spill of one partition has nothing to share its file with: it is written on its own
    own = [len(of) == 1 or int(counts[i]) * weight >= own_bytes * rows for i in range(len(of))]
    ranked = sorted((i for i in range(len(of)) if counts[i]), key=lambda i: (own[i], of[i]))
    if len(ranked) > 1:
        rank = np.empty(len(of), dtype=np.int64)
        rank[ranked] = np.arange(len(ranked))
        table = table.take(pa.array(np.argsort(rank[code], kind="stable")))
    shared: list[tuple[str, int, int]] = []
    owned: list[tuple[str, int, int]] = []
    start = 0
    for i in ranked:
        (owned if own[i] else shared).append((of[i], start, int(counts[i])))
        start += int(counts[i])
    return Spill(table, shared, owned)


def contiguous_groups(sizes: Sequence[float], groups: int) -> list[list[int]]:
    """Items split, in order, into at most ``groups`` runs of about equal total size (a merge task's
    partitions are then a contiguous range of every shared file's rows)."""
    total = float(sum(sizes))
    n = max(1, min(groups, len(sizes)))
    out: list[list[int]] = [[] for _ in range(n)]
    done = 0.0
    for i, size in enumerate(sizes):
        # the run whose share of the total holds this item's middle
        b = min(n - 1, int((done + size / 2) * n / total)) if total > 0 else i * n // len(sizes)
        out[b].append(i)
        done += size
    return [g for g in out if g]


class RangedFile(io.RawIOBase):
    """A remote object as a seekable file for Arrow's Parquet reader: each read a ranged GET."""

    def __init__(self, store: ObjectStore, uri: str, size: int) -> None:
        self._store, self._uri, self._size, self._pos = store, uri, size, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self._size - self._pos)
        if n <= 0:
            return 0
        with self._store.open(self._uri, start=self._pos, length=n) as body:
            data = body.stream.read(n)
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)


class SharedReader:
    """A merge task's reads of shared files: each file's footer once, each row group decoded once
    while it is needed (the least recently used are let go past ``READER_CACHE_BYTES``)."""

    def __init__(self, stores: Callable[[str], ObjectStore], cache_bytes: int = READER_CACHE_BYTES) -> None:
        self._stores = stores
        self._files: dict[str, tuple[pq.ParquetFile, list[int]]] = {}
        self._groups: OrderedDict[tuple[str, int], pa.Table] = OrderedDict()
        self._cache_bytes = cache_bytes
        self._held = 0
        self._dictionaries: dict[pa.Schema, list[str]] = {}

    def rows(self, uri: str, first: int, count: int, file_bytes: int) -> pa.Table:
        """Rows ``[first, first + count)`` of the shared file ``uri``."""
        source, starts = self._open(uri, file_bytes)
        pieces = []
        group = bisect.bisect_right(starts, first) - 1
        while count > 0:
            table = self._group(uri, source, group)
            offset = first - starts[group]
            n = min(count, table.num_rows - offset)
            if n <= 0:
                raise ValueError(f"{uri}: rows {first}+{count} are past its end")
            pieces.append(table.slice(offset, n))
            first, count, group = first + n, count - n, group + 1
        return pieces[0] if len(pieces) == 1 else pa.concat_tables(pieces)

    def _open(self, uri: str, file_bytes: int) -> tuple[pq.ParquetFile, list[int]]:
        found = self._files.get(uri)
        if found is None:
            if uri.startswith("file:"):
                source = pq.ParquetFile(local_path(uri))
            else:  # the footer, then each row group's column chunks in coalesced ranged reads
                source = pq.ParquetFile(RangedFile(self._stores(uri), uri, file_bytes), pre_buffer=True)
            meta = source.metadata
            starts = np.cumsum([0] + [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]).tolist()
            found = self._files[uri] = (source, starts)
        return found

    def _group(self, uri: str, source: pq.ParquetFile, group: int) -> pa.Table:
        key = (uri, group)
        table = self._groups.get(key)
        if table is not None:
            self._groups.move_to_end(key)
            return table
        table = self._groups[key] = source.read_row_group(group)
        self._held += table.nbytes
        while self._held > self._cache_bytes and len(self._groups) > 1:
            _, dropped = self._groups.popitem(last=False)
            self._held -= dropped.nbytes
        return table

    def dictionary_columns(self, table: pa.Table) -> list[str]:
        """The dictionary columns for a file of ``table``'s schema: chosen from the task's first rows
        of that schema, then kept (a sample per file would cost each small partition ~0.1 ms)."""
        chosen = self._dictionaries.get(table.schema)
        if chosen is None:
            chosen = self._dictionaries[table.schema] = parquet_writer.dictionary_columns(table)
        return chosen

    def close(self) -> None:
        for source, _ in self._files.values():
            source.close()
        self._files.clear()
        self._groups.clear()
        self._held = 0
