"""Concatenate Parquet files of one schema into one file by copying bytes, without decoding them.

A Parquet file is ``PAR1``, its row groups' column chunks, a footer (Thrift ``FileMetaData``
in the compact protocol), the footer's length and ``PAR1``. Row groups are independent, so files
with the same schema concatenate by copying each file's row-group bytes and writing one footer
that lists every row group, with the byte offsets it records shifted to their new place. This
costs I/O only, which is what lets a batch's single output file be written from parts parsed on
every core (the write stage would otherwise decode and re-encode the whole file on one core).

Only the compact-protocol subset Parquet footers use is read and written, generically (field id,
type, value), so fields this module does not know are carried through unchanged. Files with page
indexes, bloom filters or encryption (which this job never writes) are refused.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

MAGIC = b"PAR1"

# compact protocol types
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)

# FileMetaData / RowGroup / ColumnChunk / ColumnMetaData field ids (parquet.thrift)
_FMD_SCHEMA, _FMD_NUM_ROWS, _FMD_ROW_GROUPS, _FMD_ENCRYPTION = 2, 3, 4, 8
_RG_COLUMNS, _RG_FILE_OFFSET, _RG_ORDINAL = 1, 5, 7
_CC_FILE_OFFSET, _CC_META, _CC_OFFSET_INDEX, _CC_COLUMN_INDEX, _CC_CRYPTO = 2, 3, 4, 6, 8
_CMD_DATA_PAGE, _CMD_INDEX_PAGE, _CMD_DICT_PAGE, _CMD_BLOOM = 9, 10, 11, 14


class ConcatError(ValueError):
    """The files cannot be concatenated (not Parquet, different schemas, unsupported features)."""


@dataclass
class Field:
    id: int
    type: int
    value: Any  # int, float, bytes, bool, list[Field] (struct), tuple[int, list] (list/set), map


Struct = list[Field]


# -- compact protocol ---------------------------------------------------------------------
class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, type_: int) -> Any:
        if type_ in (_TRUE, _FALSE):  # inside a container: one byte
            return self.byte() == _TRUE
        if type_ == _BYTE:
            return struct.unpack("b", bytes([self.byte()]))[0]
        if type_ in (_I16, _I32, _I64):
            return self.zigzag()
        if type_ == _DOUBLE:
            (v,) = struct.unpack("<d", self.data[self.pos : self.pos + 8])
            self.pos += 8
            return v
        if type_ == _BINARY:
            n = self.varint()
            v = self.data[self.pos : self.pos + n]
            self.pos += n
            return v
        if type_ in (_LIST, _SET):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return (elem, [self.value(elem) for _ in range(size)])
        if type_ == _MAP:
            size = self.varint()
            kv = self.byte() if size else 0
            return (kv, [(self.value(kv >> 4), self.value(kv & 0x0F)) for _ in range(size)])
        if type_ == _STRUCT:
            return self.struct()
        raise ConcatError(f"unknown compact type {type_}")

    def struct(self) -> Struct:
        fields: Struct = []
        last = 0
        while True:
            head = self.byte()
            type_ = head & 0x0F
            if type_ == _STOP:
                return fields
            delta = head >> 4
            fid = last + delta if delta else self.zigzag()
            value = (type_ == _TRUE) if type_ in (_TRUE, _FALSE) else self.value(type_)
            fields.append(Field(fid, type_, value))
            last = fid


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        while True:
            if n < 0x80:
                self.out.append(n)
                return
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7

    def zigzag(self, n: int) -> None:
        self.varint((n << 1) ^ (n >> 63))

    def value(self, type_: int, v: Any) -> None:
        if type_ in (_TRUE, _FALSE):
            self.out.append(_TRUE if v else _FALSE)
        elif type_ == _BYTE:
            self.out += struct.pack("b", v)
        elif type_ in (_I16, _I32, _I64):
            self.zigzag(v)
        elif type_ == _DOUBLE:
            self.out += struct.pack("<d", v)
        elif type_ == _BINARY:
            self.varint(len(v))
            self.out += v
        elif type_ in (_LIST, _SET):
            elem, items = v
            if len(items) < 15:
                self.out.append((len(items) << 4) | elem)
            else:
                self.out.append(0xF0 | elem)
                self.varint(len(items))
            for item in items:
                self.value(elem, item)
        elif type_ == _MAP:
            kv, pairs = v
            self.varint(len(pairs))
            if pairs:
                self.out.append(kv)
            for key, val in pairs:
                self.value(kv >> 4, key)
                self.value(kv & 0x0F, val)
        elif type_ == _STRUCT:
            self.struct(v)
        else:
            raise ConcatError(f"unknown compact type {type_}")

    def struct(self, fields: Struct) -> None:
        last = 0
        for f in fields:
            type_ = (_TRUE if f.value else _FALSE) if f.type in (_TRUE, _FALSE) else f.type
            delta = f.id - last
            if 0 < delta <= 15:
                self.out.append((delta << 4) | type_)
            else:
                self.out.append(type_)
                self.zigzag(f.id)
            if f.type not in (_TRUE, _FALSE):
                self.value(f.type, f.value)
            last = f.id
        self.out.append(_STOP)


def decode_footer(footer: bytes) -> Struct:
    return _Reader(footer).struct()


def encode_footer(meta: Struct) -> bytes:
    w = _Writer()
    w.struct(meta)
    return bytes(w.out)


# -- Parquet ------------------------------------------------------------------------------
def _get(fields: Struct, fid: int) -> Field | None:
    return next((f for f in fields if f.id == fid), None)


def _footer_of(f: BinaryIO, size: int) -> tuple[bytes, int]:
    """(footer bytes, where the footer starts)."""
    if size < 12:
        raise ConcatError("too short to be Parquet")
    f.seek(size - 8)
    tail = f.read(8)
    if tail[4:] != MAGIC:
        raise ConcatError("no PAR1 at the end")
    (length,) = struct.unpack("<I", tail[:4])
    start = size - 8 - length
    f.seek(start)
    return f.read(length), start


def _shift(row_group: Struct, by: int, ordinal: int) -> None:
    for f in row_group:
        if f.id == _RG_FILE_OFFSET:
            f.value += by
        elif f.id == _RG_ORDINAL:
            f.value = ordinal
        elif f.id == _RG_COLUMNS:
            for chunk in f.value[1]:
                for c in chunk:
                    if c.id in (_CC_OFFSET_INDEX, _CC_COLUMN_INDEX, _CC_CRYPTO):
                        raise ConcatError("page indexes and encryption are not supported")
                    if c.id == _CC_FILE_OFFSET and c.value:
                        c.value += by
                    elif c.id == _CC_META:
                        for m in c.value:
                            if m.id == _CMD_BLOOM:
                                raise ConcatError("bloom filters are not supported")
                            if m.id in (_CMD_DATA_PAGE, _CMD_INDEX_PAGE, _CMD_DICT_PAGE):
                                m.value += by


def concat(sources: Iterable[Path], target: Path, *, chunk: int = 8 * 1024 * 1024) -> int:
    """Write ``target`` as the row groups of ``sources`` (same schema), in order; returns rows."""
    meta: Struct | None = None
    schema: bytes | None = None
    row_groups: list[Struct] = []
    rows = 0
    with target.open("wb") as out:
        out.write(MAGIC)
        for path in sources:
            size = path.stat().st_size
            with path.open("rb") as f:
                footer, start = _footer_of(f, size)
                part = decode_footer(footer)
                if _get(part, _FMD_ENCRYPTION) is not None:
                    raise ConcatError(f"{path}: encrypted files are not supported")
                part_schema = encode_footer([_get(part, _FMD_SCHEMA)])  # type: ignore[list-item]
                if schema is None:
                    meta, schema = part, part_schema
                elif part_schema != schema:
                    raise ConcatError(f"{path}: schema differs from the first file's")
                by = out.tell() - len(MAGIC)
                groups = _get(part, _FMD_ROW_GROUPS)
                for group in groups.value[1] if groups else []:
                    _shift(group, by, len(row_groups))
                    row_groups.append(group)
                num_rows = _get(part, _FMD_NUM_ROWS)
                rows += num_rows.value if num_rows else 0
                f.seek(len(MAGIC))
                remaining = start - len(MAGIC)
                while remaining > 0:
                    block = f.read(min(chunk, remaining))
                    if not block:
                        raise ConcatError(f"{path}: truncated")
                    out.write(block)
                    remaining -= len(block)
        if meta is None:
            raise ConcatError("nothing to concatenate")
        for field in meta:
            if field.id == _FMD_NUM_ROWS:
                field.value = rows
            elif field.id == _FMD_ROW_GROUPS:
                field.value = (_STRUCT, row_groups)
        footer = encode_footer(meta)
        out.write(footer)
        out.write(struct.pack("<I", len(footer)))
        out.write(MAGIC)
    return rows
