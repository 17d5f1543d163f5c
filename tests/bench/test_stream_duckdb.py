"""``make bench-stream``'s DuckDB columns: DuckDB on the warm batch's files, declared the columns the
table got, and those columns read from the table's own files (not the load history's)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.stream import _duckdb_cells, batch_commits, duckdb_child, split, table_columns, verdict
from glue_processor.shared.names import LINEAGE_COLUMNS


def test_duckdb_writes_the_declared_columns_of_every_line(tmp_path: Path) -> None:
    files = []
    (tmp_path / "it's").mkdir()  # quotes in paths and names are SQL literals, not SQL
    for n in range(2):
        f = tmp_path / "it's" / f"part-{n}.json"
        lines = [{"id": n * 10 + i, "nested": {"a": [1, 2]}, "dropped": "x", "it's": "q"} for i in range(10)]
        f.write_text("".join(json.dumps(line) + "\n" for line in lines))
        files.append(f)
    got = duckdb_child(files, ["id", "nested", "it's"], tmp_path / "it's" / "out", threads=1)
    table = pq.read_table(tmp_path / "it's" / "out" / "duckdb.parquet")
    assert table.num_rows == 20 and table.column_names == ["id", "nested", "it's"]
    assert all(t == pa.string() for t in table.schema.types)  # declared VARCHAR: nested values as JSON text
    assert json.loads(table.column("nested")[0].as_py()) == {"a": [1, 2]}
    assert got["seconds"] > 0 and got["columns"] == 3
    assert abs(got["mb"] - sum(f.stat().st_size for f in files) / (1024 * 1024)) < 1e-9


def test_the_columns_are_the_tables_not_the_load_historys(tmp_path: Path) -> None:
    table = tmp_path / "data" / "events" / "part-0.parquet"
    history = tmp_path / "data" / "load_history" / "h-0.parquet"
    for f in (table, history):
        f.parent.mkdir(parents=True)
    lineage = {name: pa.array(["x"]) for name in LINEAGE_COLUMNS}
    pq.write_table(pa.table({"b": ["1"], "a": ["2"], **lineage, "_extra": ["{}"]}), table)
    pq.write_table(pa.table({"table_name": ["t"], "status": ["ok"]}), history)  # written last: the newest
    assert table_columns(tmp_path) == ["b", "a"]
    table.unlink()
    with pytest.raises(RuntimeError, match="no data file of the table"):
        table_columns(tmp_path)


def test_the_warm_batch_is_the_second_manifests_files() -> None:
    files = [Path(f"f{i}") for i in range(5)]
    assert split(files, 2) == [files[:2], files[2:]]


def test_ours_against_duckdb_is_its_time_over_ours() -> None:
    warm = {"batch_s": 2.0, "duckdb": {"seconds": 4.0, "mb": 120.0}}
    assert _duckdb_cells(warm, cores=1) == ["4.00", "30.0", "2.00"]


def test_a_batchs_commit_is_its_own_point_not_a_tables() -> None:
    # the job publishes TableCommitDuration per table and for the whole batch (contracts/metrics.py):
    # taking all of them gave two a batch, and the column printed "-" for every shape
    job = {"JobName": "local", "QueryName": "q"}
    points = [
        {"name": "TableCommitDuration", "dimensions": {**job, "Table": "events"}, "value": 26.5},
        {"name": "TableCommitDuration", "dimensions": job, "value": 83.2},
        {"name": "BatchDuration", "dimensions": job, "value": 900.0},
        {"name": "TableCommitDuration", "dimensions": {**job, "Table": "events"}, "value": 16.1},
        {"name": "TableCommitDuration", "dimensions": job, "value": 46.9},
    ]
    assert batch_commits(points) == [83.2, 46.9]


def test_the_verdict_names_each_shape_under_the_floor() -> None:
    rates = [(91.3, "compact"), (32.6, "sparse-keys"), (60.0, "crlf"), (59.9, "tiny-records")]
    assert verdict(rates) == (
        "shapes at 60 MB/s per core or more: 2 of 4; under it: sparse-keys 32.6, tiny-records 59.9"
    )
    assert verdict([(61.0, "compact")]) == "shapes at 60 MB/s per core or more: 1 of 1"
