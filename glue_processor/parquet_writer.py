"""How the job writes Parquet: one writer for parts, rewritten files and compaction.

Snappy, no Arrow schema in the footer (readers take the Parquet schema; files of one table then
concatenate by bytes whatever Arrow types wrote them), and a dictionary only for columns that
benefit: a column of mostly distinct values (ids, numbers, free text) fills the dictionary page,
falls back to plain encoding, and has meanwhile hashed every value and made the statistics
slow; measured on 8 MB of ~100-byte records, a writer with a dictionary for every column took
42 ms, one with dictionaries chosen from a sample 27 ms, and wrote a smaller file.

Nullable string columns without a dictionary (and those with one that are mostly NULL) are
encoded here, not by Arrow. Arrow's writer costs ~8 ns per row per nullable column whatever the
column holds (it builds definition levels, derives a bitmap back from them and run-length encodes
them), so records with many sparse keys (500 columns, a few set per row) were written at a few
MB/s. A nullable column's definition levels are its validity bitmap, so :mod:`ndjson_arrow._pages`
copies the bitmap and the values that are set into PLAIN data pages, with the statistics Arrow
would write (as fast as Arrow on dense columns, 3x faster on sparse ones). Every other column is
written by Arrow into a file of its own in memory, whose column chunks are copied in; the schema is
the one Arrow writes for the whole table, and chunks are laid out in schema order, as readers that
split files by row-group position expect.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from ndjson_arrow._pages import encode_strings

from glue_processor import parquet_thrift as thrift
from glue_processor.parquet_thrift import BINARY, I32, I64, LIST, STRUCT, TRUE, Field, Struct

OPTIONS: dict[str, Any] = {"compression": "snappy", "store_schema": False}
# A column gets a dictionary when at most this share of a sample's values are distinct.
DICTIONARY_MAX_DISTINCT = 0.5
SAMPLE_ROWS = 2000
# A string column that would get a dictionary is still encoded here when at least this NULL.
NATIVE_MIN_NULL_SHARE = 0.5
# Values per data page (Arrow's default), the longest min/max Arrow keeps in statistics, and the
# most rows Arrow puts in a row group (a larger table is written as several).
PAGE_BYTES = 1024 * 1024
MAX_STATISTICS_BYTES = 4096
MAX_ROW_GROUP_ROWS = 64 * 1024 * 1024

_SNAPPY = pa.Codec("snappy")
# parquet.thrift: Type.BYTE_ARRAY, CompressionCodec.SNAPPY, Encoding.PLAIN / RLE, PageType.DATA_PAGE
_BYTE_ARRAY, _CODEC_SNAPPY, _PLAIN, _RLE, _DATA_PAGE = 6, 1, 0, 3, 0


def dictionary_columns(table: pa.Table) -> list[str]:
    """The flat columns of ``table`` with few distinct values in its first rows (nested columns,
    here the maps, are mostly NULL and keep plain encoding)."""
    chosen = []
    for name, column in zip(table.column_names, table.columns, strict=True):
        if pa.types.is_nested(column.type):
            continue
        sample = column.slice(0, SAMPLE_ROWS).drop_null()
        if len(sample) and len(pc.unique(sample)) <= DICTIONARY_MAX_DISTINCT * len(sample):
            chosen.append(name)
    return chosen


def writer(path: str | Path, first: pa.Table) -> Writer:
    """A writer for tables of ``first``'s schema, its dictionary columns chosen from ``first``."""
    return Writer(path, first.schema, dictionary_columns(first))


def write(table: pa.Table, path: str | Path) -> None:
    """``table`` as one row group."""
    with writer(path, table) as out:
        out.write_table(table)


class Writer:
    """A Parquet file written one row group per :meth:`write_table` (the file grows as it goes, so
    its size on disk tells how far it is)."""

    def __init__(self, path: str | Path, schema: pa.Schema, dictionary: Sequence[str] = ()) -> None:
        self.schema = schema
        self._dictionary = frozenset(dictionary)
        self._template = _template(schema)
        self._leaves = [_leaf_count(field.type) for field in schema]
        self._row_groups: list[Struct] = []
        self._rows = 0
        self._file = open(path, "wb")  # noqa: SIM115 - closed by close()
        self._file.write(thrift.MAGIC)

    def __enter__(self) -> Writer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def write_table(self, table: pa.Table, row_group_size: int | None = None) -> None:
        """``table`` as one row group (``row_group_size`` is accepted for ``pq.ParquetWriter``'s
        callers and must not split it), or as several past ``MAX_ROW_GROUP_ROWS`` rows."""
        if not table.schema.equals(self.schema):
            raise ValueError(f"table schema differs from the file's:\n{table.schema}\nvs\n{self.schema}")
        if row_group_size is not None and row_group_size < len(table):
            raise ValueError("this writer writes one row group per table")
        for offset in range(0, len(table), MAX_ROW_GROUP_ROWS):
            self._row_group(table.slice(offset, MAX_ROW_GROUP_ROWS))

    def _row_group(self, table: pa.Table) -> None:
        native = [self._native(field, column) for field, column in zip(table.schema, table.columns, strict=True)]
        arrow_chunks = iter(self._arrow_chunks(table, native))
        columns: list[Struct] = []
        start = self._file.tell()
        for field, column, mine, leaves in zip(table.schema, table.columns, native, self._leaves, strict=True):
            if mine:
                columns.append(self._string_chunk(field.name, column))
                continue
            for _ in range(leaves):
                chunk, body = next(arrow_chunks)
                columns.append(self._place(chunk, body))
        self._file.flush()
        self._row_groups.append(
            [
                Field(thrift.RG_COLUMNS, LIST, (STRUCT, columns)),
                Field(thrift.RG_TOTAL_BYTE_SIZE, I64, sum(_meta_value(c, thrift.CMD_RAW_SIZE) for c in columns)),
                Field(thrift.RG_NUM_ROWS, I64, len(table)),
                Field(thrift.RG_FILE_OFFSET, I64, start),
                Field(thrift.RG_COMPRESSED_SIZE, I64, sum(_meta_value(c, thrift.CMD_SIZE) for c in columns)),
                Field(thrift.RG_ORDINAL, thrift.I16, len(self._row_groups)),
            ]
        )
        self._rows += len(table)

    def close(self) -> None:
        if self._file.closed:
            return
        kept = (thrift.FMD_VERSION, thrift.FMD_SCHEMA, thrift.FMD_CREATED_BY, thrift.FMD_COLUMN_ORDERS)
        meta = [Field(f.id, f.type, f.value) for f in self._template if f.id in kept]
        meta += [
            Field(thrift.FMD_NUM_ROWS, I64, self._rows),
            Field(thrift.FMD_ROW_GROUPS, LIST, (STRUCT, self._row_groups)),
        ]
        footer = thrift.encode(sorted(meta, key=lambda f: f.id))
        self._file.write(footer + struct.pack("<I", len(footer)) + thrift.MAGIC)
        self._file.close()

    # -- internals ---------------------------------------------------------------------------
    def _native(self, field: pa.Field, column: pa.ChunkedArray) -> bool:
        if not (pa.types.is_string(field.type) and field.nullable):  # a REQUIRED column has no levels
            return False
        return field.name not in self._dictionary or column.null_count >= NATIVE_MIN_NULL_SHARE * len(column)

    def _arrow_chunks(self, table: pa.Table, native: list[bool]) -> list[tuple[Struct, memoryview]]:
        """Arrow's column chunks of the columns not encoded here: (ColumnChunk, its bytes)."""
        others = [i for i, mine in enumerate(native) if not mine]
        if not others:
            return []
        sub = table.select(others)
        sink = pa.BufferOutputStream()
        dictionary = [n for n in sub.column_names if n in self._dictionary]
        pq.write_table(sub, sink, row_group_size=len(sub), use_dictionary=dictionary, **OPTIONS)
        data = memoryview(sink.getvalue())
        meta, _ = thrift.footer_in(data)
        (group,) = thrift.get(meta, thrift.FMD_ROW_GROUPS).value[1]  # type: ignore[union-attr]
        chunks = thrift.get(group, thrift.RG_COLUMNS).value[1]  # type: ignore[union-attr]
        out = []
        for chunk in chunks:
            first = thrift.chunk_start(chunk)
            out.append((chunk, data[first : first + _meta_value(chunk, thrift.CMD_SIZE)]))
        return out

    def _place(self, chunk: Struct, body: memoryview) -> Struct:
        """An Arrow column chunk written at the end of the file, its page offsets moved there."""
        thrift.move_chunk(chunk, self._file.tell() - thrift.chunk_start(chunk))
        self._file.write(body)
        return chunk

    def _string_chunk(self, name: str, column: pa.ChunkedArray) -> Struct:
        """A nullable string column's chunk, encoded here: PLAIN pages, snappy, statistics."""
        where = self._file.tell()
        arrays = []
        for array in column.chunks:
            if not len(array):
                continue
            validity, offsets, data = array.buffers()
            arrays.append((offsets, b"" if data is None else data, validity, array.offset, len(array)))
        pages, nulls, low, high, value_bytes = encode_strings(arrays, PAGE_BYTES)
        raw = written = 0
        for body, rows, _ in pages:
            packed = _SNAPPY.compress(body, asbytes=True)
            header = _page_header(len(body), len(packed), rows)
            self._file.write(header)
            self._file.write(packed)
            raw += len(header) + len(body)
            written += len(header) + len(packed)
        statistics = [Field(3, I64, nulls)]  # as Arrow: each of max and min only when not too long
        if high is not None and len(high) <= MAX_STATISTICS_BYTES:
            statistics += [Field(5, BINARY, high)]
        if low is not None and len(low) <= MAX_STATISTICS_BYTES:
            statistics += [Field(6, BINARY, low)]
        statistics += [Field(f.id + 2, TRUE, True) for f in statistics if f.id in (5, 6)]  # is_max/min_value_exact
        meta = [
            Field(1, I32, _BYTE_ARRAY),
            Field(2, LIST, (I32, [_RLE, _PLAIN])),
            Field(3, LIST, (BINARY, [name.encode()])),
            Field(4, I32, _CODEC_SNAPPY),
            Field(5, I64, len(column)),
            Field(thrift.CMD_RAW_SIZE, I64, raw),
            Field(thrift.CMD_SIZE, I64, written),
            Field(thrift.CMD_DATA_PAGE, I64, where),
            Field(12, STRUCT, statistics),
            Field(13, LIST, (STRUCT, [[Field(1, I32, _DATA_PAGE), Field(2, I32, _PLAIN), Field(3, I32, len(pages))]])),
            Field(16, STRUCT, [Field(1, I64, value_bytes)]),
        ]
        return [Field(thrift.CC_FILE_OFFSET, I64, 0), Field(thrift.CC_META, STRUCT, meta)]


def _page_header(raw: int, packed: int, rows: int) -> bytes:
    """A v1 data page's PageHeader: PLAIN values, RLE definition and repetition levels."""
    return thrift.encode(
        [
            Field(1, I32, _DATA_PAGE),
            Field(2, I32, raw),
            Field(3, I32, packed),
            Field(5, STRUCT, [Field(1, I32, rows), Field(2, I32, _PLAIN), Field(3, I32, _RLE), Field(4, I32, _RLE)]),
        ]
    )


@functools.lru_cache(maxsize=64)
def _template(schema: pa.Schema) -> Struct:
    """The FileMetaData Arrow writes for ``schema`` (its schema elements, column orders, version)."""
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink, **OPTIONS)
    return thrift.footer_in(memoryview(sink.getvalue()))[0]


def _leaf_count(type_: pa.DataType) -> int:
    """Parquet columns (leaves) of an Arrow type."""
    if pa.types.is_struct(type_):
        return sum(_leaf_count(type_.field(i).type) for i in range(type_.num_fields))
    if pa.types.is_map(type_):
        return _leaf_count(type_.key_type) + _leaf_count(type_.item_type)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_fixed_size_list(type_):
        return _leaf_count(type_.value_type)
    return 1


def _meta_value(chunk: Struct, fid: int) -> int:
    return thrift.get(thrift.chunk_meta(chunk), fid).value  # type: ignore[union-attr,no-any-return]
