"""The job's Parquet writer: dictionaries only where values repeat."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from glue_processor import parquet_writer


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
