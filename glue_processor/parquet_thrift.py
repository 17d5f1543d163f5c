"""Parquet's footer and page headers: Thrift structs in the compact protocol, read and written generically.

A struct is a list of :class:`Field` (id, type, value), so fields a caller does not know are
carried through unchanged. The codec is native (:mod:`ndjson_arrow._thrift`): a wide file's footer
has tens of thousands of fields, which cost ~0.1 s per footer in Python. Used to concatenate files by bytes
(:mod:`glue_processor.parquet_concat`) and to write the pages the job encodes itself
(:mod:`glue_processor.parquet_writer`).
"""

from __future__ import annotations

from ndjson_arrow import _thrift
from ndjson_arrow._thrift import Field

__all__ = ["Field", "Struct", "ThriftError", "decode", "encode", "get"]


class ThriftError(ValueError):
    """Bytes that are not a compact-protocol struct of the kinds Parquet uses."""


# compact protocol types
STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)


Struct = list[Field]


def decode(data: bytes) -> Struct:
    """The struct encoded in ``data``."""
    try:
        return _thrift.decode(data)
    except (ValueError, TypeError) as exc:
        raise ThriftError(str(exc)) from exc


def encode(fields: Struct) -> bytes:
    """``fields`` as a compact-protocol struct."""
    try:
        return _thrift.encode(fields)
    except (ValueError, TypeError, OverflowError) as exc:
        raise ThriftError(str(exc)) from exc


def get(fields: Struct, fid: int) -> Field | None:
    """The field ``fid`` of a struct, if set."""
    return next((f for f in fields if f.id == fid), None)
