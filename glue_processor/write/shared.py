"""The write stage's side of a task's shared file (its layout: :mod:`glue_processor.shared.spill`).

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
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from glue_processor.shared import parquet as parquet_writer
from glue_processor.shared.objects import ObjectStore, local_path

# The most decoded row groups of shared files a merge task keeps (by Arrow bytes).
READER_CACHE_BYTES = 128 * 1024 * 1024


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
