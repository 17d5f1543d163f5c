"""Parquet's footer and page headers: Thrift structs in the compact protocol, read and written generically.

Only the subset Parquet uses is handled (field id, type, value), so fields a caller does not
know are carried through unchanged. Used to concatenate files by bytes
(:mod:`glue_processor.parquet_concat`) and to write the pages the job encodes itself
(:mod:`glue_processor.parquet_writer`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any


class ThriftError(ValueError):
    """Bytes that are not a compact-protocol struct of the kinds Parquet uses."""


# compact protocol types
STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)


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
        if type_ in (TRUE, FALSE):  # inside a container: one byte
            return self.byte() == TRUE
        if type_ == BYTE:
            return struct.unpack("b", bytes([self.byte()]))[0]
        if type_ in (I16, I32, I64):
            return self.zigzag()
        if type_ == DOUBLE:
            (v,) = struct.unpack("<d", self.data[self.pos : self.pos + 8])
            self.pos += 8
            return v
        if type_ == BINARY:
            n = self.varint()
            v = self.data[self.pos : self.pos + n]
            self.pos += n
            return v
        if type_ in (LIST, SET):
            head = self.byte()
            size, elem = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return (elem, [self.value(elem) for _ in range(size)])
        if type_ == MAP:
            size = self.varint()
            kv = self.byte() if size else 0
            return (kv, [(self.value(kv >> 4), self.value(kv & 0x0F)) for _ in range(size)])
        if type_ == STRUCT:
            return self.struct()
        raise ThriftError(f"unknown compact type {type_}")

    def struct(self) -> Struct:
        fields: Struct = []
        last = 0
        while True:
            head = self.byte()
            type_ = head & 0x0F
            if type_ == STOP:
                return fields
            delta = head >> 4
            fid = last + delta if delta else self.zigzag()
            value = (type_ == TRUE) if type_ in (TRUE, FALSE) else self.value(type_)
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
        if type_ in (TRUE, FALSE):
            self.out.append(TRUE if v else FALSE)
        elif type_ == BYTE:
            self.out += struct.pack("b", v)
        elif type_ in (I16, I32, I64):
            self.zigzag(v)
        elif type_ == DOUBLE:
            self.out += struct.pack("<d", v)
        elif type_ == BINARY:
            self.varint(len(v))
            self.out += v
        elif type_ in (LIST, SET):
            elem, items = v
            if len(items) < 15:
                self.out.append((len(items) << 4) | elem)
            else:
                self.out.append(0xF0 | elem)
                self.varint(len(items))
            for item in items:
                self.value(elem, item)
        elif type_ == MAP:
            kv, pairs = v
            self.varint(len(pairs))
            if pairs:
                self.out.append(kv)
            for key, val in pairs:
                self.value(kv >> 4, key)
                self.value(kv & 0x0F, val)
        elif type_ == STRUCT:
            self.struct(v)
        else:
            raise ThriftError(f"unknown compact type {type_}")

    def struct(self, fields: Struct) -> None:
        last = 0
        for f in fields:
            type_ = (TRUE if f.value else FALSE) if f.type in (TRUE, FALSE) else f.type
            delta = f.id - last
            if 0 < delta <= 15:
                self.out.append((delta << 4) | type_)
            else:
                self.out.append(type_)
                self.zigzag(f.id)
            if f.type not in (TRUE, FALSE):
                self.value(f.type, f.value)
            last = f.id
        self.out.append(STOP)


def decode(data: bytes) -> Struct:
    """The struct encoded in ``data``."""
    return _Reader(data).struct()


def encode(fields: Struct) -> bytes:
    """``fields`` as a compact-protocol struct."""
    w = _Writer()
    w.struct(fields)
    return bytes(w.out)


def get(fields: Struct, fid: int) -> Field | None:
    """The field ``fid`` of a struct, if set."""
    return next((f for f in fields if f.id == fid), None)
