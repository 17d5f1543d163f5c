"""A Parquet file's footer as bytes: what a write task returns so the driver needs no read-back."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

MAGIC = b"PAR1"


def footer_of(path: Path | str) -> bytes:
    """The serialized FileMetaData of a local Parquet file."""
    with open(path, "rb") as f:
        f.seek(-8, 2)
        tail = f.read(8)
        if tail[4:] != MAGIC:
            raise ValueError(f"{path}: not a Parquet file")
        (length,) = struct.unpack("<i", tail[:4])
        f.seek(-8 - length, 2)
        return f.read(length)


def metadata_of(footer: bytes) -> pq.FileMetaData:
    """The footer's FileMetaData (statistics, row groups, schema): no page is read."""
    return pq.read_metadata(pa.BufferReader(MAGIC + footer + struct.pack("<i", len(footer)) + MAGIC))
