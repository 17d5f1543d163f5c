"""The job's Parquet writer: dictionaries only where values repeat; mostly-NULL string columns
encoded by the job, read back by Arrow and DuckDB with the statistics Arrow writes."""

from __future__ import annotations

import random
import struct
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ndjson_arrow._pages import encode_strings

from glue_processor import parquet_writer
from glue_processor.overflow import EXTRA_TYPE


def test_only_columns_whose_values_repeat_get_a_dictionary(tmp_path: Path) -> None:
    # Given ids (all distinct), a kind (three values), a mostly NULL column and a map column
    n = 5000
    table = pa.table(
        {
            "id": pa.array([str(i) for i in range(n)]),
            "kind": pa.array(["a", "b", "c"] * (n // 3) + ["a"] * (n % 3)),
            "rare": pa.array([None] * (n - 1) + ["x"]),
            "_extra": pa.nulls(n, pa.map_(pa.string(), pa.string())),
        }
    )
    # When it is written
    path = tmp_path / "part.parquet"
    parquet_writer.write(table, path)
    # Then kind is dictionary-encoded and id is not; every value reads back
    meta = pq.ParquetFile(path).metadata.row_group(0)
    encodings = {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}
    assert any("DICTIONARY" in e for e in encodings["kind"])
    assert not any("DICTIONARY" in e for e in encodings["id"])
    assert pq.read_table(path).equals(table)
    assert parquet_writer.dictionary_columns(table) == ["kind"]


# -- mostly-NULL string columns, encoded by the job itself ---------------------------------------
_TEXT = ["", "a", "zürich", "東京", 'q"\\', "x" * 300, "y" * 5000, "\x00nul", "😀"]


def _strings(draw: st.DrawFn, n: int) -> pa.Array:
    fill = draw(st.sampled_from([0.0, 0.03, 0.3, 0.6, 1.0]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    return pa.array(
        [rng.choice(_TEXT) + str(rng.randint(0, 9)) if rng.random() < fill else None for _ in range(n)], pa.string()
    )


@st.composite
def _row_groups(draw: st.DrawFn) -> list[pa.Table]:
    """Tables of one schema: string columns of any fill, a dictionary-friendly one, numbers, a
    timestamp and a map, each a concatenation of slices (chunked, offsets not on a byte)."""
    width = draw(st.integers(1, 6))
    groups = []
    for _ in range(draw(st.integers(1, 3))):
        pieces = []
        for _ in range(draw(st.integers(1, 3))):
            n = draw(st.integers(1, 300))
            skip = draw(st.integers(0, 9))
            columns = {f"s{i}": _strings(draw, n + skip).slice(skip) for i in range(width)}
            columns["kind"] = pa.array(["a", "b", None][i % 3] for i in range(n))
            columns["_line"] = pa.array(range(n), pa.int32())
            columns["_t"] = pa.array([1_700_000_000_000_000 + i for i in range(n)], pa.timestamp("us", tz="UTC"))
            columns["_extra"] = pa.array([[("k", str(i))] if i % 7 == 0 else None for i in range(n)], EXTRA_TYPE)
            pieces.append(pa.table(columns))
        groups.append(pa.concat_tables(pieces))
    return groups


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(groups=_row_groups(), page_bytes=st.sampled_from([16, 1000, 1024 * 1024]))
def test_every_row_group_reads_back_with_arrows_statistics(
    tmp_path_factory: pytest.TempPathFactory, groups: list[pa.Table], page_bytes: int
) -> None:
    # Given row groups whose string columns are empty, sparse, half or wholly set, written by the
    # job's writer (pages of page_bytes), and the same row groups written by Arrow alone
    tmp = tmp_path_factory.mktemp("w")
    ours, arrows = tmp / "ours.parquet", tmp / "arrow.parquet"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(parquet_writer, "PAGE_BYTES", page_bytes)
        with parquet_writer.writer(ours, groups[0]) as out:
            for table in groups:
                out.write_table(table, row_group_size=len(table))
    with pq.ParquetWriter(arrows, groups[0].schema, **parquet_writer.OPTIONS) as out:
        for table in groups:
            out.write_table(table, row_group_size=len(table))
    # Then every value reads back, with the row groups as written
    want = pa.concat_tables(groups).combine_chunks()
    assert pq.read_table(ours).equals(want)
    meta, ref = pq.read_metadata(ours), pq.read_metadata(arrows)
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [len(t) for t in groups]
    # and each column chunk has the statistics Arrow writes (min/max dropped past 4,096 bytes)
    for g in range(meta.num_row_groups):
        for c in range(meta.num_columns):
            got, exp = meta.row_group(g).column(c), ref.row_group(g).column(c)
            assert got.path_in_schema == exp.path_in_schema
            assert got.num_values == exp.num_values
            s, e = got.statistics, exp.statistics
            assert (s.null_count, s.has_min_max) == (e.null_count, e.has_min_max), got.path_in_schema
            if e.has_min_max:
                assert (s.min, s.max) == (e.min, e.max), got.path_in_schema
    # and DuckDB (another reader) sees the same values
    con = duckdb.connect()
    names = ", ".join(f"count({c}), min({c}), max({c})" for c in want.column_names if c.startswith("s"))
    assert con.sql(f"SELECT {names} FROM '{ours}'").fetchall() == con.sql(f"SELECT {names} FROM want").fetchall()


def test_column_chunks_are_laid_out_in_schema_order(tmp_path: Path) -> None:
    # Given a row group whose columns alternate between the job's encoder and Arrow's
    n = 1000
    table = pa.table(
        {
            "a_rare": pa.array([None] * (n - 1) + ["x"]),
            "b_kind": pa.array(["u", "v"] * (n // 2)),
            "c_rare": pa.array(["y"] + [None] * (n - 1)),
            "_line": pa.array(range(n), pa.int32()),
        }
    )
    path = tmp_path / "f.parquet"
    with parquet_writer.writer(path, table) as out:
        out.write_table(table)
        out.write_table(table)
    # Then, as readers that assign row groups to splits by position expect, each row group starts
    # at its first column and its chunks follow one another in schema order
    meta = pq.read_metadata(path)
    end = 4
    for g in range(meta.num_row_groups):
        group = meta.row_group(g)
        for c in range(group.num_columns):
            chunk = group.column(c)
            start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
            assert start == end
            end = start + chunk.total_compressed_size
    assert end == path.stat().st_size - 8 - int.from_bytes(path.read_bytes()[-8:-4], "little")
    encodings = [meta.row_group(0).column(c).encodings for c in range(4)]
    assert encodings[0] == encodings[2] == ("RLE", "PLAIN")  # the job's own pages
    assert "RLE_DICTIONARY" in encodings[1]


def test_bad_offsets_are_refused() -> None:
    good = pa.array(["ab", None, "c"])
    validity, offsets, data = good.buffers()
    assert encode_strings([(offsets, data, validity, 0, 3)], 1024)[1:] == (1, b"ab", b"c", 3)
    broken = struct.pack("<4i", 0, 2, 9, 3)  # the middle offset points past the data
    with pytest.raises(ValueError, match="offsets"):
        encode_strings([(broken, data, None, 0, 3)], 1024)
    with pytest.raises(ValueError, match="shorter"):
        encode_strings([(offsets, data, validity, 2, 3)], 1024)


@pytest.mark.spark
def test_spark_reads_every_row_whatever_its_reader_and_splits(spark: Any, tmp_path: Path) -> None:
    # Given a file of several row groups (sparse and dense string columns, pages of 4 KB)
    rng = random.Random(5)
    groups = []
    for g in range(4):
        n = 3000
        groups.append(
            pa.table(
                {
                    "id": pa.array([f"{g}-{i}" for i in range(n)]),
                    "rare": pa.array(
                        [rng.choice(_TEXT) if rng.random() < 0.03 else None for _ in range(n)], pa.string()
                    ),
                    "none": pa.nulls(n, pa.string()),
                    "_line": pa.array(range(n), pa.int32()),
                }
            )
        )
    path = tmp_path / "f.parquet"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(parquet_writer, "PAGE_BYTES", 4096)
        with parquet_writer.writer(path, groups[0]) as out:
            for table in groups:
                out.write_table(table)
    want = sorted(pa.concat_tables(groups).to_pylist(), key=lambda r: r["id"])
    # When Spark reads it with either Parquet reader, the file split in several byte ranges
    for vectorized in ("true", "false"):
        spark.conf.set("spark.sql.parquet.enableVectorizedReader", vectorized)
        spark.conf.set("spark.sql.files.maxPartitionBytes", str(16 * 1024))
        try:
            frame = spark.read.parquet(path.as_uri())
            rows = sorted((r.asDict() for r in frame.collect()), key=lambda r: r["id"])
            splits = frame.rdd.getNumPartitions()
        finally:
            spark.conf.unset("spark.sql.parquet.enableVectorizedReader")
            spark.conf.unset("spark.sql.files.maxPartitionBytes")
        # Then every row is read once, with its values
        assert splits > 1
        assert rows == want, vectorized


def test_required_string_columns_and_long_tables_are_written_as_arrow_would(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a table with a REQUIRED (not nullable) string column, longer than a row group may be
    monkeypatch.setattr(parquet_writer, "MAX_ROW_GROUP_ROWS", 1000)
    schema = pa.schema([pa.field("id", pa.string(), nullable=False), pa.field("note", pa.string())])
    table = pa.table({"id": [f"k{i}" for i in range(2500)], "note": [None] * 2499 + ["x"]}, schema=schema)
    # When it is written
    path = tmp_path / "f.parquet"
    with parquet_writer.writer(path, table) as out:
        out.write_table(table)
    # Then it reads back whole, in row groups of at most that many rows, the REQUIRED column by Arrow
    assert pq.read_table(path).equals(table)
    meta = pq.read_metadata(path)
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [1000, 1000, 500]
    assert meta.schema.column(0).max_definition_level == 0
