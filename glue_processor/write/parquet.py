"""How the job writes Parquet: one writer for parts, rewritten files and compaction, all Arrow's.

Every page, encoding and statistic is written by Arrow (``pyarrow.parquet``): snappy, no Arrow
schema in the footer (readers take the Parquet schema; files of one table then concatenate by bytes
whatever Arrow types wrote them), and a dictionary only for columns that benefit: a column of mostly
distinct values (ids, numbers, free text) fills the dictionary page, falls back to plain encoding,
and has meanwhile hashed every value and made the statistics slow; measured on 8 MB of ~100-byte
records, a writer with a dictionary for every column took 42 ms, one with dictionaries chosen from a
sample 27 ms, and wrote a smaller file.

Arrow writes a row group to the file as soon as it has it, so a file's size on disk tells how far it
is (the parse tasks stop a file near the target by it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

OPTIONS: dict[str, Any] = {"compression": "snappy", "store_schema": False}
# A column gets a dictionary when at most this share of a sample's values are distinct.
DICTIONARY_MAX_DISTINCT = 0.5
SAMPLE_ROWS = 2000
DICTIONARY_MAX_VALUE = 64 * 1024


def dictionary_columns(table: pa.Table) -> list[str]:
    """The flat columns of ``table`` with few distinct values in its first rows (nested columns,
    here the maps, are mostly NULL and keep plain encoding; so do columns with a value longer than
    ``DICTIONARY_MAX_VALUE``: a dictionary of such values saves nothing, and the sample's hash of a
    line-long value would be one more copy of it)."""
    chosen = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_nested(column.type):
            continue
        sample = column.slice(0, SAMPLE_ROWS).drop_null()
        if not len(sample):
            continue
        if pa.types.is_string(sample.type) or pa.types.is_binary(sample.type):
            longest = pc.max(pc.binary_length(sample)).as_py()
            if longest is not None and longest > DICTIONARY_MAX_VALUE:
                continue
        if len(pc.unique(sample)) <= DICTIONARY_MAX_DISTINCT * len(sample):
            chosen.append(name)
    return chosen


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
