"""Byte-level Parquet concatenation: the same rows as reading and rewriting, without re-encoding."""

from __future__ import annotations

import errno
import os
import random
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from glue_processor.write import thrift
from glue_processor.write.concat import ConcatError, concat, decode_footer

OPTIONS = {"compression": "snappy", "store_schema": False}


def part(path: Path, seed: int, rows: int, row_group: int) -> pa.Table:
    rng = random.Random(seed)
    table = pa.table(
        {
            "a": pa.array([rng.choice(["x", "y", None, "ünï"]) for _ in range(rows)], pa.large_string()),
            "b": pa.array([f"{rng.random():.6f}" * rng.randint(1, 5) for _ in range(rows)], pa.large_string()),
            "_line": pa.array(range(1, rows + 1), pa.int32()),
            "_t": pa.array([1_700_000_000_000_000 + i for i in range(rows)], pa.timestamp("us", tz="UTC")),
        }
    )
    pq.write_table(table, path, row_group_size=row_group, **OPTIONS)
    return table


def test_footers_round_trip_byte_for_byte(tmp_path: Path) -> None:
    part(tmp_path / "p.parquet", 1, 5000, 700)
    data = (tmp_path / "p.parquet").read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length : -8]
    assert thrift.encode(decode_footer(footer)) == footer


@pytest.mark.parametrize("copy", ["kernel", "buffer", "nothing-copied"])
def test_concatenated_file_holds_every_row_group_in_order(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, copy: str
) -> None:
    if copy == "buffer":  # a file system without copy_file_range between these files

        def cross_device(*_: object) -> int:
            raise OSError(errno.EXDEV, "Invalid cross-device link")

        monkeypatch.setattr(os, "copy_file_range", cross_device)
    if copy == "nothing-copied":  # a file system that copies nothing rather than refuse
        monkeypatch.setattr(os, "copy_file_range", lambda *_: 0)
    # Given parts of one schema, with one or several row groups each
    tables = [
        part(tmp_path / f"p{i}.parquet", i, rows, rg)
        for i, (rows, rg) in enumerate([(3000, 1000), (10, 64), (7000, 2500)])
    ]
    # When they are concatenated by bytes
    rows = concat([tmp_path / f"p{i}.parquet" for i in range(3)], tmp_path / "out.parquet")
    # Then a reader sees one file with all rows, in order, statistics and all
    got = pq.read_table(tmp_path / "out.parquet")
    want = pa.concat_tables(tables)
    assert rows == got.num_rows == 10_010
    assert got.cast(want.schema).equals(want)
    meta = pq.read_metadata(tmp_path / "out.parquet")
    assert meta.num_row_groups == 3 + 1 + 3
    assert meta.row_group(4).column(2).statistics.min == 1  # each group keeps its own statistics


def test_different_schemas_are_refused(tmp_path: Path) -> None:
    part(tmp_path / "a.parquet", 1, 10, 10)
    pq.write_table(pa.table({"a": ["x"]}), tmp_path / "b.parquet", **OPTIONS)
    with pytest.raises(ConcatError, match="schema differs"):
        concat([tmp_path / "a.parquet", tmp_path / "b.parquet"], tmp_path / "out.parquet")


def _with_footer(path: Path, edit: Callable[[thrift.Struct], None]) -> None:
    """Rewrite ``path``'s footer after ``edit`` (what a writer this job never uses would record)."""
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    meta = decode_footer(data[-8 - length : -8])
    edit(meta)
    footer = thrift.encode(meta)
    path.write_bytes(data[: -8 - length] + footer + len(footer).to_bytes(4, "little") + b"PAR1")


def _chunks(meta: thrift.Struct) -> list[thrift.Struct]:
    groups = thrift.get(meta, thrift.FMD_ROW_GROUPS)
    assert groups is not None
    out = []
    for group in groups.value[1]:
        columns = thrift.get(group, thrift.RG_COLUMNS)
        assert columns is not None
        out.extend(columns.value[1])
    return out


def test_page_indexes_are_refused(tmp_path: Path) -> None:
    # Given a part written with page indexes (their offsets would be stale once its bytes move)
    table = part(tmp_path / "b.parquet", 1, 10, 10)
    pq.write_table(table, tmp_path / "a.parquet", write_page_index=True, **OPTIONS)
    # Then concatenating it is refused, not written with wrong offsets
    with pytest.raises(ConcatError, match="page indexes"):
        concat([tmp_path / "b.parquet", tmp_path / "a.parquet"], tmp_path / "out.parquet")


def test_bloom_filters_are_refused(tmp_path: Path) -> None:
    # Given a part whose column chunk records a bloom filter's offset (pyarrow writes none)
    part(tmp_path / "a.parquet", 1, 10, 10)

    def bloom(meta: thrift.Struct) -> None:
        chunk_meta = thrift.get(_chunks(meta)[0], thrift.CC_META)
        assert chunk_meta is not None
        chunk_meta.value.append(thrift.Field(thrift.CMD_BLOOM, thrift.I64, 4))

    _with_footer(tmp_path / "a.parquet", bloom)
    with pytest.raises(ConcatError, match="bloom filters"):
        concat([tmp_path / "a.parquet"], tmp_path / "out.parquet")


def test_a_column_chunk_without_its_metadata_is_refused(tmp_path: Path) -> None:
    part(tmp_path / "a.parquet", 1, 10, 10)

    def strip(meta: thrift.Struct) -> None:
        chunk = _chunks(meta)[1]
        chunk[:] = [f for f in chunk if f.id != thrift.CC_META]

    _with_footer(tmp_path / "a.parquet", strip)
    with pytest.raises(ConcatError, match="without its metadata"):
        concat([tmp_path / "a.parquet"], tmp_path / "out.parquet")


def _first_page(chunk: thrift.Struct) -> int:
    meta = thrift.get(chunk, thrift.CC_META)
    assert meta is not None
    return int(min(f.value for f in meta.value if f.id in (thrift.CMD_DATA_PAGE, thrift.CMD_DICT_PAGE)))


def _footer(path: Path) -> thrift.Struct:
    data = path.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    return decode_footer(data[-8 - length : -8])


def test_the_deprecated_chunk_file_offset_moves_with_the_pages(tmp_path: Path) -> None:
    # Given parts whose column chunks record the deprecated file_offset, as older writers set it
    # (pyarrow writes 0, which means unset and stays 0)
    tables = [part(tmp_path / f"p{i}.parquet", i, 50, 20) for i in range(2)]

    def set_offsets(meta: thrift.Struct) -> None:
        for chunk in _chunks(meta):
            offset = thrift.get(chunk, thrift.CC_FILE_OFFSET)
            assert offset is not None
            offset.value = _first_page(chunk)

    for i in range(2):
        _with_footer(tmp_path / f"p{i}.parquet", set_offsets)
    # When concatenated
    concat([tmp_path / f"p{i}.parquet" for i in range(2)], tmp_path / "out.parquet")
    # Then the rows read back, and each chunk's file_offset still names its first page
    got = pq.read_table(tmp_path / "out.parquet")
    assert got.cast(tables[0].schema).equals(pa.concat_tables(tables))
    chunks = _chunks(_footer(tmp_path / "out.parquet"))
    assert len(chunks) == 2 * 3 * 4
    for chunk in chunks:
        offset = thrift.get(chunk, thrift.CC_FILE_OFFSET)
        assert offset is not None and offset.value == _first_page(chunk)


def test_a_file_that_does_not_start_with_par1_is_refused(tmp_path: Path) -> None:
    # the first source's leading PAR1 becomes the output's: a file that ends as Parquet but does not
    # begin as it is refused, not copied into a file no reader opens
    part(tmp_path / "a.parquet", 1, 100, 50)
    bad = tmp_path / "b.parquet"
    data = bytearray((tmp_path / "a.parquet").read_bytes())
    data[:4] = b"XXXX"
    bad.write_bytes(bytes(data))
    with pytest.raises(ConcatError, match="does not start with PAR1"):
        concat([bad, tmp_path / "a.parquet"], tmp_path / "out.parquet")
