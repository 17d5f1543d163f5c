"""Issue 27: a data file's table statistics are worked out by the task that wrote it, for the table
as the append finds it; the driver only assembles the entries, and works them out itself when the
plan the tasks had is not the table's any more."""

from __future__ import annotations

import dataclasses
import json
import logging
import pickle
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import NestedField, StringType, TimestamptzType

from glue_processor.commit.publication import PublishRefused, refused
from glue_processor.table.datafiles import DataFiles, StatsPlan, WrittenFile
from glue_processor.table.footer import footer_of, metadata_of
from glue_processor.table.iceberg import IcebergSink
from glue_processor.table.read import load
from tests.glue_processor.test_batch import Env

FIELDS = (
    "partition",
    "record_count",
    "column_sizes",
    "value_counts",
    "null_value_counts",
    "lower_bounds",
    "upper_bounds",
)


def _facts(entry: DataFile) -> dict[str, Any]:
    return {name: getattr(entry, name) for name in FIELDS}


@pytest.mark.spark
def test_write_tasks_work_out_every_file_s_statistics_as_the_driver_would(
    spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a table partitioned by day(ts) (declared) and kind, and two batches over nine partitions,
    # the second with a key the table does not have yet
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"columns": {"ts": "timestamp"}}))
    env = Env(tmp_path, schema=schema.as_uri(), partition_by="day(ts),kind", target_file_mb="1")
    job = env.job(spark)

    def body(batch: int, extra: dict[str, Any]) -> bytes:
        rows = [
            {"ts": f"2026-11-0{1 + i % 3}T0{i % 10}:00:00Z", "kind": "abc"[(i // 3) % 3], "i": i, **extra}
            for i in range(90)
        ]
        return "".join(json.dumps(r) + "\n" for r in rows).encode()

    caplog.set_level(logging.INFO, logger="glue_processor.table.iceberg")
    for n, extra in enumerate([{}, {"new": "x"}]):
        job.run(
            [env.manifest(f"m{n}", [env.put(f"f{n}a.json", body(n, extra)), env.put(f"f{n}b.json", body(n, {}))])], n
        )
    # Then each append took every file's statistics from the task that wrote it
    appended = [r for r in caplog.records if r.getMessage() == "batch appended to the table"]
    assert [(r.files, r.statistics_from_tasks) for r in appended] == [(9, 9), (9, 9)]  # type: ignore[attr-defined]
    assert appended[1].new_columns == ["new"]  # type: ignore[attr-defined]
    # And they are the statistics the driver works out from each file's footer for the table's schema
    table = load(env.settings)
    driver = DataFiles(table.io, table.metadata)
    tasks = [t.file for t in table.scan().plan_files()]
    assert len(tasks) == 18
    for entry in tasks:
        assert _facts(entry) == _facts(driver.entry(entry.file_path, entry.file_size_in_bytes))
        assert None not in tuple(entry.partition)


SCHEMA = Schema(
    NestedField(1, "ts", TimestamptzType(), required=False),
    NestedField(2, "kind", StringType(), required=False),
    NestedField(3, "note", StringType(), required=False),
)
SPEC = PartitionSpec(
    PartitionField(1, 1000, DayTransform(), "ts_day"), PartitionField(2, 1001, IdentityTransform(), "kind"), spec_id=0
)


def _file(tmp_path: Path, columns: dict[str, pa.Array]) -> tuple[str, bytes]:
    path = tmp_path / f"f{len(list(tmp_path.iterdir()))}.parquet"
    pq.write_table(pa.table(columns), path, store_schema=False)
    return str(path), footer_of(path)


def _day_file(tmp_path: Path, *, note: bool = False) -> tuple[str, bytes]:
    ts = pa.array([datetime(2026, 11, 2, h, tzinfo=UTC) for h in (1, 5, 9)], pa.timestamp("us", tz="UTC"))
    columns = {"ts": ts, "kind": pa.array(["a", "a", "a"])}
    if note:
        columns["note"] = pa.array(["x", None, "z"])
    return _file(tmp_path, columns)


def test_a_plan_carried_to_a_task_works_out_what_the_driver_s_does(tmp_path: Path) -> None:
    # Given the plan of a table partitioned by day(ts) and identity(kind), pickled as Spark carries it
    metadata = new_table_metadata(SCHEMA, SPEC, UNSORTED_SORT_ORDER, str(tmp_path), {})
    plan = StatsPlan(metadata)
    carried = pickle.loads(pickle.dumps(plan))
    # Then a file's statistics are the same on both sides, its partition included (pyiceberg's own
    # objects, pickled whole, made every partition value NULL)
    _, footer = _day_file(tmp_path, note=True)
    here, there = plan.of(metadata_of(footer)), carried.of(metadata_of(footer))
    assert carried.key == plan.key
    assert tuple(there.partition) == tuple(here.partition) == (20759, "a")
    assert there.values == here.values


def test_an_entry_whose_plan_is_not_the_table_s_is_worked_out_again(tmp_path: Path) -> None:
    # Given statistics a task worked out for the table before another writer added a column
    before = new_table_metadata(SCHEMA.select("ts", "kind"), SPEC, UNSORTED_SORT_ORDER, str(tmp_path), {})
    after = new_table_metadata(SCHEMA, SPEC, UNSORTED_SORT_ORDER, str(tmp_path), {})
    path, footer = _day_file(tmp_path)
    stale = StatsPlan(before).of(metadata_of(footer))
    # When the append's table has the new column
    entries = DataFiles(None, after)  # type: ignore[arg-type]  # no read-back: the footer is in hand
    assert stale.plan != entries.plan.key
    entry = entries.entry(path, 100, WrittenFile(footer, stale))
    # Then the entry is the one worked out for that table, not the task's
    fresh = DataFiles(None, after).entry(path, 100, WrittenFile(footer))  # type: ignore[arg-type]
    assert _facts(entry) == _facts(fresh)
    # And statistics of the table's own plan are taken as they are
    own = StatsPlan(after).of(metadata_of(footer))
    doctored = WrittenFile(footer, dataclasses.replace(own, values={**own.values, "record_count": 41}))
    assert entries.entry(path, 100, doctored).record_count == 41
    assert entries.from_tasks == 1


def test_a_file_whose_statistics_cannot_be_worked_out_refuses_its_share_rather_than_retrying(tmp_path: Path) -> None:
    # Given a file whose ts bound Python cannot read (year 0: Arrow writes it, datetime has no such year)
    metadata = new_table_metadata(SCHEMA, SPEC, UNSORTED_SORT_ORDER, str(tmp_path), {})
    year_0 = pa.array([-62167219200000000], pa.timestamp("us", tz="UTC"))
    path, footer = _file(tmp_path, {"ts": year_0, "kind": pa.array(["a"])})
    # When its entry is made for the append
    with pytest.raises(PublishRefused, match="statistics cannot be worked out") as refused_with:
        DataFiles(None, metadata).entry(path, 100, WrittenFile(footer))  # type: ignore[arg-type]
    # Then it is the share's content (refused: set aside for its rows' quarantine), not a failure
    # retried for as long as it takes, which held every later batch back
    assert refused(refused_with.value)
    assert isinstance(refused_with.value.__cause__, OverflowError)


def test_partition_sources_keep_their_bounds_whatever_the_metrics_configuration(tmp_path: Path) -> None:
    # Given a table whose metrics configuration keeps no bounds (Iceberg's write.metadata.metrics.*)
    for properties in (
        {"write.metadata.metrics.default": "none"},
        {"write.metadata.metrics.default": "counts"},
        {"write.metadata.metrics.column.kind": "none", "write.metadata.metrics.column.ts": "counts"},
    ):
        metadata = new_table_metadata(SCHEMA, SPEC, UNSORTED_SORT_ORDER, str(tmp_path), properties)
        _, footer = _day_file(tmp_path, note=True)
        stats = StatsPlan(metadata).of(metadata_of(footer))
        # Then a file's partition is still read from its source columns (else every file would be
        # appended to the NULL partition), and the other columns keep the configuration's metrics
        assert tuple(stats.partition) == (20759, "a"), properties
        assert 3 not in stats.values["lower_bounds"] or properties.get("write.metadata.metrics.default") is None


def test_a_plan_that_does_not_reach_a_task_whole_leaves_the_statistics_to_the_driver(tmp_path: Path) -> None:
    from glue_processor.read.task import Staged
    from glue_processor.write.merge import MergeSpec, _with_stats

    # Given a plan whose schema the task cannot read back (another pyiceberg on the executor, say)
    plan = StatsPlan(new_table_metadata(SCHEMA, SPEC, UNSORTED_SORT_ORDER, str(tmp_path), {}))
    state = plan.__getstate__() | {"schema": '{"type": "struct", "fields": [{"id": "x"}]}'}
    broken = StatsPlan.__new__(StatsPlan)
    broken.__setstate__(state)  # no error here: Spark unpickles before the merge runs
    path, footer = _day_file(tmp_path)
    staged = Staged(path, 100, ("kind", "ts"), footer)
    # Then the merge keeps its file and leaves its statistics to the driver
    assert _with_stats(MergeSpec(0, (), ("kind", "ts"), path, stats=broken), staged) == staged
    assert _with_stats(MergeSpec(0, (), ("kind", "ts"), path, stats=plan), staged).stats is not None


def test_no_plan_when_the_table_is_out_of_reach() -> None:
    def unreachable() -> Any:
        raise ConnectionError("catalog down")

    # Then the tasks get none, and the append works the statistics out
    assert IcebergSink(unreachable).stats_plan(("a",), None) is None
