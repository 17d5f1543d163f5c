"""A Parquet file's footer: the one place that finds it (the last 8 bytes: length, then PAR1).

A write task returns its files' footers so the driver needs no read-back; the write stage's
concatenation reads the parts' footers here too.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

MAGIC = b"PAR1"


class NotParquet(ValueError):
    """The bytes do not end the way every Parquet file ends."""


def footer_at(f: BinaryIO, size: int) -> tuple[bytes, int]:
    """(the serialized FileMetaData, the offset where it starts) of an open file of ``size`` bytes."""
    if size < 12:
        raise NotParquet("too short to be Parquet")
    f.seek(size - 8)
    tail = f.read(8)
    if tail[4:] != MAGIC:
        raise NotParquet("no PAR1 at the end")
    (length,) = struct.unpack("<I", tail[:4])
    start = size - 8 - length
    if start < 4:
        raise NotParquet(f"footer length {length} does not fit in {size} bytes")
    f.seek(start)
    return f.read(length), start


def footer_of(path: Path | str) -> bytes:
    """The serialized FileMetaData of a local Parquet file."""
    with open(path, "rb") as f:
        try:
            return footer_at(f, f.seek(0, 2))[0]
        except NotParquet as exc:
            raise NotParquet(f"{path}: {exc}") from None


def metadata_of(footer: bytes) -> pq.FileMetaData:
    """The footer's FileMetaData (statistics, row groups, schema): no page is read."""
    return pq.read_metadata(pa.BufferReader(MAGIC + footer + struct.pack("<i", len(footer)) + MAGIC))
