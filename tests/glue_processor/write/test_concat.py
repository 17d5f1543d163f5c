"""Byte-level Parquet concatenation: the same rows as reading and rewriting, without re-encoding."""

from __future__ import annotations

import errno
import os
import random
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
