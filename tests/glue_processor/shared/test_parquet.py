"""The job's Parquet writer: dictionaries only where values repeat; mostly-NULL string columns
encoded by the job, read back by Arrow and DuckDB with the statistics Arrow writes."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from glue_processor.shared import parquet as parquet_writer
from glue_processor.shared.extra import EXTRA_TYPE
from glue_processor.write.concat import concat


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


def test_a_map_columns_keys_get_a_dictionary_when_they_repeat_and_files_of_either_concatenate(
    tmp_path: Path,
) -> None:
    # Given _extra maps whose keys repeat (names of keys past the column bound, values all distinct),
    # and maps whose every key is new (a producer keying a map by id)
    n = 4000
    names = [f"attr_{i:03d}" for i in range(40)]
    repeating = pa.table(
        {
            "id": pa.array([str(i) for i in range(n)]),
            "_extra": pa.array(
                [[(names[(i + j) % 40], f"v{i}-{j}") for j in range(i % 4)] or None for i in range(n)], EXTRA_TYPE
            ),
        }
    )
    ids = pa.array([str(i) for i in range(n)])
    distinct = pa.table({"id": ids, "_extra": pa.array([[(f"k{i}", "v")] for i in range(n)], EXTRA_TYPE)})
    # When each is written by the job's writer
    assert parquet_writer.dictionary_columns(repeating) == ["_extra.key_value.key"]
    assert parquet_writer.dictionary_columns(distinct) == []
    paths = [tmp_path / "repeating.parquet", tmp_path / "distinct.parquet"]
    for table, path in zip((repeating, distinct), paths, strict=True):
        parquet_writer.write(table, path)

    # Then the repeating keys are dictionary-encoded (and no value is), the others plain; every
    # value reads back, and the two files concatenate by bytes (encodings are per column chunk)
    def encodings(path: Path) -> dict[str, tuple[str, ...]]:
        meta = pq.ParquetFile(path).metadata.row_group(0)
        return {meta.column(i).path_in_schema: meta.column(i).encodings for i in range(meta.num_columns)}

    first, second = encodings(paths[0]), encodings(paths[1])
    assert any("DICTIONARY" in e for e in first["_extra.key_value.key"])
    assert not any("DICTIONARY" in e for e in first["_extra.key_value.value"])
    assert not any("DICTIONARY" in e for e in second["_extra.key_value.key"])
    assert pq.read_table(paths[0]).equals(repeating)
    assert concat(paths, tmp_path / "both.parquet") == 2 * n
    assert pq.read_table(tmp_path / "both.parquet").equals(pa.concat_tables([repeating, distinct]))


def test_every_page_is_arrows_and_each_table_is_one_row_group_on_disk_at_once(tmp_path: Path) -> None:
    # Given tables written one after another (sparse and dense strings, numbers, a map)
    n = 1000
    table = pa.table(
        {
            "sparse": pa.array([None] * (n - 1) + ["x"]),
            "kind": pa.array(["u", "v"] * (n // 2)),
            "_line": pa.array(range(n), pa.int64()),
            "_extra": pa.array([[("k", str(i))] if i % 7 == 0 else None for i in range(n)], EXTRA_TYPE),
        }
    )
    path = tmp_path / "f.parquet"
    sizes = []
    with parquet_writer.writer(path, table) as out:
        for _ in range(3):
            out.write_table(table, row_group_size=len(table))
            sizes.append(path.stat().st_size)
    # Then each is one row group, on disk as soon as it is written (the tasks size files by it), and
    # the file is Arrow's own: its writer, its statistics, every value back
    assert sizes[0] < sizes[1] < sizes[2]
    meta = pq.read_metadata(path)
    assert [meta.row_group(g).num_rows for g in range(meta.num_row_groups)] == [n, n, n]
    assert meta.created_by.startswith("parquet-cpp-arrow")
    assert meta.row_group(0).column(0).statistics.null_count == n - 1
    assert pq.read_table(path).equals(pa.concat_tables([table] * 3))


TEXT = ["", "zürich", "東京", 'q"\\', "x" * 300, "\x00nul", "😀"]


@pytest.mark.spark
def test_spark_reads_every_row_whatever_its_reader_and_splits(spark: Any, tmp_path: Path) -> None:
    # Given a file of several row groups (sparse and dense string columns)
    rng = random.Random(5)
    groups = []
    for g in range(4):
        n = 3000
        groups.append(
            pa.table(
                {
                    "id": pa.array([f"{g}-{i}" for i in range(n)]),
                    "rare": pa.array(
                        [
                            rng.choice(["", "zürich", "東京", 'q"\\', "x" * 300]) if rng.random() < 0.03 else None
                            for _ in range(n)
                        ],
                        pa.string(),
                    ),
                    "none": pa.nulls(n, pa.string()),
                    "_line": pa.array(range(n), pa.int32()),
                }
            )
        )
    path = tmp_path / "f.parquet"
    with parquet_writer.writer(path, groups[0]) as out:
        for table in groups:
            out.write_table(table, row_group_size=len(table))
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


def test_a_maps_key_sample_is_bounded_reads_only_its_rows_and_skips_nested_keys(tmp_path: Path) -> None:
    # Given maps of 1,000 entries a row, a NULL row whose offsets still span entries, and a map whose
    # keys are structs (a table's older files may hold any type: compaction rewrites them)
    wide = pa.table({"_extra": pa.array([[(f"k{j}", "v") for j in range(1000)]] * 50, EXTRA_TYPE)})
    base = pa.array([[("a", "1")], [("x", "2"), ("y", "3")], [("a", "4")]], EXTRA_TYPE)
    hidden = pa.MapArray.from_arrays(base.offsets, base.keys, base.items, mask=pa.array([False, True, False]))
    struct_keys = pa.table(
        {"m": pa.array([[({"a": 1}, "v")]] * 10, pa.map_(pa.struct([("a", pa.int32())]), pa.string()))}
    )
    # Then the sample holds about as many keys as a flat column's holds values, from whole rows
    sample = parquet_writer._map_keys(wide.column(0))
    assert parquet_writer.SAMPLE_ROWS <= len(sample) < parquet_writer.SAMPLE_ROWS + 1000
    # ... only the keys of rows that are not NULL, within the slice
    assert parquet_writer._map_keys(pa.chunked_array([hidden])).to_pylist() == ["a", "a"]
    assert parquet_writer._map_keys(pa.chunked_array([hidden]).slice(1)).to_pylist() == ["a"]
    # ... and a map of struct keys gets no dictionary and writes as before
    assert parquet_writer.dictionary_columns(struct_keys) == []
    parquet_writer.write(struct_keys, tmp_path / "s.parquet")
    assert pq.read_table(tmp_path / "s.parquet").equals(struct_keys)
