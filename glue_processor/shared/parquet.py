"""How the job writes Parquet: one writer for parts, rewritten files and compaction, all Arrow's.

Every page, encoding and statistic is written by Arrow (``pyarrow.parquet``): snappy, no Arrow
schema in the footer (readers take the Parquet schema; files of one table then concatenate by bytes
whatever Arrow types wrote them), and a dictionary only for columns that benefit: a column of mostly
distinct values (ids, numbers, free text) fills the dictionary page, falls back to plain encoding,
and has meanwhile hashed every value and made the statistics slow; measured on 8 MB of ~100-byte
records, a writer with a dictionary for every column took 42 ms, one with dictionaries chosen from a
sample 27 ms, and wrote a smaller file. A map column (``_extra``, ``_rescued``) gets one for its keys
by the same rule: they are the names of keys past the column bound, which repeat row after row (a
part of 100,376 sparse-keys rows, six ``_extra`` entries a row: that column 3.49 -> 2.30 MB and 57 ->
42 ms written alone, the part 7.74 -> 6.55 MB; its values keep plain encoding, whose dictionary cost
more time than it saved).

Arrow writes a row group to the file as soon as it has it, so a file's size on disk tells how far it
is (the parse tasks stop a file near the target by it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

OPTIONS: dict[str, Any] = {"compression": "snappy", "store_schema": False}
# A column gets a dictionary when at most this share of a sample's values are distinct.
DICTIONARY_MAX_DISTINCT = 0.5
SAMPLE_ROWS = 2000
DICTIONARY_MAX_VALUE = 64 * 1024


def dictionary_columns(table: pa.Table) -> list[str]:
    """The Parquet columns of ``table`` to dictionary-encode: each flat column, and each map
    column's keys (``<name>.key_value.key``, the path Arrow names them by), whose first rows have few
    distinct values. Other nested columns keep plain encoding, and so does a column with a value
    longer than ``DICTIONARY_MAX_VALUE``: a dictionary of such values saves nothing, and the
    sample's hash of a line-long value would be one more copy of it."""
    chosen = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_map(column.type):
            # keys of a nested type get none (Arrow has no unique of them)
            if not pa.types.is_nested(column.type.key_type) and _repeats(_map_keys(column)):
                chosen.append(f"{name}.key_value.key")
        elif not pa.types.is_nested(column.type) and _repeats(column.slice(0, SAMPLE_ROWS).drop_null()):
            chosen.append(name)
    return chosen


def _map_keys(column: pa.ChunkedArray, most: int = SAMPLE_ROWS) -> pa.Array:
    """The keys of a map column's first entries, about ``most`` of them (as many as a flat column's
    sample has values, however many entries a row has): of its slice only (a chunk's ``keys`` are
    its whole buffer's, whatever the slice: its offsets say which are the slice's), and of non-NULL
    rows only (Arrow lets a NULL row's offsets span entries)."""
    keys: list[pa.Array] = []
    taken = 0
    for whole in column.slice(0, most).chunks:
        if not len(whole):
            continue
        ends = whole.offsets.to_numpy()
        rows = max(1, min(len(whole), int(np.searchsorted(ends, ends[0] + most - taken))))  # rows that reach it
        start, end = int(ends[0]), int(ends[rows])
        own = pa.array(ends[: rows + 1] - start)  # from 0: Arrow takes no NULL mask with a slice's offsets
        lists = pa.ListArray.from_arrays(own, whole.keys[start:end], mask=whole.slice(0, rows).is_null())
        found = pc.list_flatten(lists)
        keys.append(found)
        taken += len(found)
        if taken >= most:
            break
    return pa.concat_arrays(keys) if keys else pa.array([], column.type.key_type)


def _repeats(sample: pa.Array | pa.ChunkedArray) -> bool:
    """At most ``DICTIONARY_MAX_DISTINCT`` of the sample's values are distinct, none too long."""
    if not len(sample):
        return False
    if pa.types.is_string(sample.type) or pa.types.is_binary(sample.type):
        longest = pc.max(pc.binary_length(sample)).as_py()
        if longest is not None and longest > DICTIONARY_MAX_VALUE:
            return False
    return len(pc.unique(sample)) <= DICTIONARY_MAX_DISTINCT * len(sample)


def writer(
    where: str | Path | pa.NativeFile,
    first: pa.Table,
    use_dictionary: list[str] | None = None,
    metadata: list[pq.FileMetaData] | None = None,
) -> pq.ParquetWriter:
    """A writer for tables of ``first``'s schema, its dictionary columns chosen from ``first`` unless
    given; ``write_table(t, row_group_size=len(t))`` writes ``t`` as one row group. The file's
    FileMetaData is appended to ``metadata`` when it closes."""
    chosen = dictionary_columns(first) if use_dictionary is None else use_dictionary
    target = where if isinstance(where, pa.NativeFile) else str(where)
    return pq.ParquetWriter(target, first.schema, use_dictionary=chosen, metadata_collector=metadata, **OPTIONS)


def write(
    table: pa.Table,
    where: str | Path | pa.NativeFile,
    use_dictionary: list[str] | None = None,
    metadata: list[pq.FileMetaData] | None = None,
) -> None:
    """``table`` as one row group (its FileMetaData appended to ``metadata``)."""
    with writer(where, table, use_dictionary, metadata) as out:
        out.write_table(table, row_group_size=max(1, len(table)))


def encode(table: pa.Table, use_dictionary: list[str] | None = None) -> tuple[pa.Buffer, pq.FileMetaData]:
    """``table`` as the bytes of a file of one row group, and their FileMetaData (as written: no
    read-back). For rows already in memory: the file is smaller than they are."""
    sink = pa.BufferOutputStream()
    metadata: list[pq.FileMetaData] = []
    write(table, sink, use_dictionary, metadata)
    return sink.getvalue(), metadata[0]
