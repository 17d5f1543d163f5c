"""Concatenate Parquet files of one schema into one file by copying bytes, without decoding them.

A Parquet file is ``PAR1``, its row groups' column chunks, a footer (Thrift ``FileMetaData``
in the compact protocol), the footer's length and ``PAR1``. Row groups are independent, so files
with the same schema concatenate by copying each file's row-group bytes and writing one footer
that lists every row group, with the byte offsets it records shifted to their new place. This
costs I/O only, which is what lets a batch's single output file be written from parts parsed on
every core (the write stage would otherwise decode and re-encode the whole file on one core).

The footer is read and written with :mod:`glue_processor.write.thrift`, so fields this module
does not know are carried through unchanged. Files with page indexes, bloom filters or encryption
(which this job never writes) are refused.
"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from glue_processor.table.footer import MAGIC, NotParquet, footer_at
from glue_processor.write import thrift
from glue_processor.write.thrift import (
    CC_COLUMN_INDEX,
    CC_CRYPTO,
    CC_FILE_OFFSET,
    CC_META,
    CC_OFFSET_INDEX,
    CMD_BLOOM,
    CMD_DATA_PAGE,
    CMD_DICT_PAGE,
    CMD_INDEX_PAGE,
    FMD_ENCRYPTION,
    FMD_NUM_ROWS,
    FMD_ROW_GROUPS,
    FMD_SCHEMA,
    RG_COLUMNS,
    RG_FILE_OFFSET,
    RG_ORDINAL,
    STRUCT,
    Struct,
)


class ConcatError(ValueError):
    """The files cannot be concatenated (not Parquet, different schemas, unsupported features)."""


def decode_footer(footer: bytes) -> Struct:
    try:
        return thrift.decode(footer)
    except thrift.ThriftError as exc:
        raise ConcatError(str(exc)) from exc


_UNSUPPORTED = frozenset((CC_OFFSET_INDEX, CC_COLUMN_INDEX, CC_CRYPTO))
_PAGES = frozenset((CMD_DATA_PAGE, CMD_INDEX_PAGE, CMD_DICT_PAGE))


def _shift(row_group: Struct, by: int, ordinal: int) -> None:
    for f in row_group:
        if f.id == RG_FILE_OFFSET:
            f.value += by
        elif f.id == RG_ORDINAL:
            f.value = ordinal
        elif f.id == RG_COLUMNS:
            for chunk in f.value[1]:
                _move_chunk(chunk, by)


def _move_chunk(chunk: Struct, by: int) -> None:
    """Shift the file positions a column chunk records (its pages moved ``by`` bytes), refusing what
    this module cannot move; one pass over its fields (a batch over many partitions concatenates a
    file per partition, each column chunk of each part through here)."""
    meta: Struct | None = None
    for c in chunk:
        if c.id in _UNSUPPORTED:
            raise ConcatError("page indexes and encryption are not supported")
        if c.id == CC_META:
            meta = c.value
        elif c.id == CC_FILE_OFFSET and c.value:  # deprecated; older writers set it
            c.value += by
    if meta is None:
        raise ConcatError("a column chunk without its metadata")
    for m in meta:
        if m.id in _PAGES:
            m.value += by
        elif m.id == CMD_BLOOM:
            raise ConcatError("bloom filters are not supported")


@dataclass(frozen=True)
class Piece:
    """Bytes ``[offset, offset + length)`` of source ``source``, the next run of the output."""

    source: int
    offset: int
    length: int


@dataclass(frozen=True)
class ConcatPlan:
    """The output as runs of its sources' bytes (the first from byte 0, with its ``PAR1``; each of
    the others past its own), then ``tail``: the footer listing every row group, its length, ``PAR1``."""

    pieces: tuple[Piece, ...]
    tail: bytes
    rows: int

    @property
    def footer(self) -> bytes:
        return self.tail[:-8]

    @property
    def size(self) -> int:
        return sum(p.length for p in self.pieces) + len(self.tail)


def plan_concat(footers: Sequence[tuple[bytes, int]], names: Sequence[object]) -> ConcatPlan:
    """The plan that concatenates files of one schema, from each one's (footer, offset where its
    footer starts): their row groups in order, offsets shifted to their new place. ``names``: the
    files', for the errors."""
    meta: Struct | None = None
    schema: bytes | None = None
    row_groups: list[Struct] = []
    pieces: list[Piece] = []
    rows = 0
    position = len(MAGIC)  # where the next source's row groups start in the output
    for n, (footer, start) in enumerate(footers):
        part = decode_footer(footer)
        if thrift.get(part, FMD_ENCRYPTION) is not None:
            raise ConcatError(f"{names[n]}: encrypted files are not supported")
        part_schema = thrift.encode([thrift.get(part, FMD_SCHEMA)])  # type: ignore[list-item]
        if schema is None:
            meta, schema = part, part_schema
        elif part_schema != schema:
            raise ConcatError(f"{names[n]}: schema differs from the first file's")
        groups = thrift.get(part, FMD_ROW_GROUPS)
        for group in groups.value[1] if groups else []:
            _shift(group, position - len(MAGIC), len(row_groups))
            row_groups.append(group)
        num_rows = thrift.get(part, FMD_NUM_ROWS)
        rows += num_rows.value if num_rows else 0
        # the first run takes its source's PAR1 along: the output's own
        pieces.append(Piece(n, 0, start) if n == 0 else Piece(n, len(MAGIC), start - len(MAGIC)))
        position += start - len(MAGIC)
    if meta is None:
        raise ConcatError("nothing to concatenate")
    for field in meta:
        if field.id == FMD_NUM_ROWS:
            field.value = rows
        elif field.id == FMD_ROW_GROUPS:
            field.value = (STRUCT, row_groups)
    footer = thrift.encode(meta)
    return ConcatPlan(tuple(pieces), footer + struct.pack("<I", len(footer)) + MAGIC, rows)


def concat(sources: Iterable[Path], target: Path, *, chunk: int = 8 * 1024 * 1024) -> int:
    """Write ``target`` as the row groups of ``sources`` (same schema), in order; returns rows."""
    paths = list(sources)
    footers = []
    for path in paths:
        with path.open("rb") as f:
            if f.read(len(MAGIC)) != MAGIC:  # the first source's PAR1 is copied as the output's
                raise ConcatError(f"{path}: does not start with PAR1")
            try:
                footers.append(footer_at(f, path.stat().st_size))
            except NotParquet as exc:
                raise ConcatError(f"{path}: {exc}") from exc
    plan = plan_concat(footers, paths)
    with target.open("wb") as out:
        for piece in plan.pieces:
            with paths[piece.source].open("rb") as f:
                _copy(f, out, piece.offset, piece.length, chunk=chunk, path=paths[piece.source])
        out.write(plan.tail)
    return plan.rows


def _copy(src: BinaryIO, out: BinaryIO, offset: int, length: int, *, chunk: int, path: Path) -> None:
    """``length`` bytes of ``src`` from ``offset`` to the end of ``out``: in the kernel where it can
    (``copy_file_range``, no pass through Python's memory), else through one reused buffer."""
    out.flush()
    done = 0
    try:
        while done < length:
            n = os.copy_file_range(src.fileno(), out.fileno(), length - done, offset + done)
            if n == 0:  # some file systems copy nothing rather than refuse: the buffer tells
                break
            done += n
    except OSError as exc:  # another file system or kernel: copy through memory
        if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            raise
    out.seek(0, os.SEEK_END)  # the buffered writer's idea of its position, from the file
    if done == length:
        return
    src.seek(offset + done)
    buffer = bytearray(min(chunk, max(1, length - done)))
    view = memoryview(buffer)
    while done < length:
        n = src.readinto(view[: min(len(buffer), length - done)])  # type: ignore[attr-defined]
        if not n:
            raise ConcatError(f"{path}: truncated")
        out.write(view[:n])
        done += n
