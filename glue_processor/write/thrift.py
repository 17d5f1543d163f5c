"""Parquet's footer and page headers: Thrift structs in the compact protocol, read and written generically.

A struct is a list of :class:`Field` (id, type, value), so fields a caller does not know are
carried through unchanged. The codec is native (:mod:`ndjson_arrow._thrift`): a wide file's footer
has tens of thousands of fields, which cost ~0.1 s per footer in Python. Used to concatenate files by bytes
(:mod:`glue_processor.write.concat`).
"""

from __future__ import annotations

from ndjson_arrow import _thrift
from ndjson_arrow._thrift import Field

__all__ = [
    "Field",
    "Struct",
    "ThriftError",
    "decode",
    "encode",
    "get",
]


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


# -- Parquet's footer (found by glue_processor.table.footer) -----------------------------------------
# field ids (parquet.thrift): FileMetaData, RowGroup, ColumnChunk, ColumnMetaData
FMD_VERSION, FMD_SCHEMA, FMD_NUM_ROWS, FMD_ROW_GROUPS, FMD_CREATED_BY, FMD_COLUMN_ORDERS, FMD_ENCRYPTION = (
    1,
    2,
    3,
    4,
    6,
    7,
    8,
)
RG_COLUMNS, RG_TOTAL_BYTE_SIZE, RG_NUM_ROWS, RG_FILE_OFFSET, RG_COMPRESSED_SIZE, RG_ORDINAL = 1, 2, 3, 5, 6, 7
CC_FILE_OFFSET, CC_META, CC_OFFSET_INDEX, CC_COLUMN_INDEX, CC_CRYPTO = 2, 3, 4, 6, 8
CMD_RAW_SIZE, CMD_SIZE, CMD_DATA_PAGE, CMD_INDEX_PAGE, CMD_DICT_PAGE, CMD_BLOOM = 6, 7, 9, 10, 11, 14
