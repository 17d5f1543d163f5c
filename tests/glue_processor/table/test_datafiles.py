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
from hypothesis import given, settings
from hypothesis import strategies as st
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    NestedField,
    StringType,
    StructType,
    TimestamptzType,
)

from glue_processor.commit.publication import PublishRefused, refused
from glue_processor.table.datafiles import DataFiles, StatsPlan, WrittenFile, check_compatible
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
    schema.write_text(json.dumps({"columns": {"ts": "timestamp", "kind": "string"}}))
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
    from glue_processor.read.parts import Staged
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


# -- a file fits the table: pyiceberg's rule, from its public API ---------------------------------

# (Iceberg type, the Arrow types a file may hold for a column of it); a file's column takes any
# Arrow type of the list, so fitting, promotable and unfitting pairs all come up
PRIMITIVES: list[tuple[IcebergType, list[pa.DataType]]] = [
    (IntegerType(), [pa.int32(), pa.int64(), pa.string()]),
    (LongType(), [pa.int64(), pa.int32(), pa.float64()]),
    (FloatType(), [pa.float32(), pa.float64()]),
    (DoubleType(), [pa.float64(), pa.float32(), pa.int64()]),
    (StringType(), [pa.string(), pa.large_string(), pa.binary()]),
    (BooleanType(), [pa.bool_(), pa.int32()]),
    (DateType(), [pa.date32(), pa.timestamp("us")]),
    (TimestamptzType(), [pa.timestamp("us", tz="UTC"), pa.timestamp("us")]),
    (DecimalType(12, 2), [pa.decimal128(12, 2), pa.decimal128(10, 2), pa.decimal128(14, 2), pa.decimal128(12, 3)]),
]


@st.composite
def table_and_file(draw: st.DrawFn) -> tuple[Schema, pa.Schema]:
    ids = iter(range(1, 1000))
    table: list[NestedField] = []
    columns: list[pa.Field] = []

    def column(name: str, *, nested: bool = True) -> tuple[NestedField, pa.Field | None]:
        # mostly optional, present and as nullable as the table says: fitting files come up too
        required, present = draw(st.integers(0, 3)) == 0, draw(st.integers(0, 4)) > 0
        optional_in_file = draw(st.integers(0, 3)) == 0
        if nested and draw(st.integers(0, 4)) == 0:  # a struct of two primitives, or a list of one
            inner = [column(f"{name}_{i}", nested=False) for i in range(2)]
            if draw(st.booleans()):
                kind: IcebergType = StructType(*(f for f, _ in inner))
                arrow: pa.DataType = pa.struct([c for _, c in inner if c is not None])
            else:
                element, element_column = inner[0]
                kind = ListType(element.field_id, element.field_type, element_required=element.required)
                arrow = pa.list_(element_column or pa.field("element", pa.int32()))
        else:
            kind, choices = draw(st.sampled_from(PRIMITIVES))
            arrow = draw(st.sampled_from(choices))
        field = NestedField(next(ids), name, kind, required=required)
        return field, pa.field(name, arrow, nullable=optional_in_file or not required) if present else None

    for i in range(draw(st.integers(1, 4))):
        field, arrow_field = column(f"c{i}")
        table.append(field)
        if arrow_field is not None:
            columns.append(arrow_field)
    if draw(st.integers(0, 5)) == 0:
        columns.append(pa.field("not_in_the_table", pa.string()))
    return Schema(*table), pa.schema(draw(st.permutations(columns)))


@settings(max_examples=400, deadline=None)
@given(table_and_file())
def test_a_file_fits_the_table_exactly_when_pyiceberg_s_own_append_says_it_does(case: tuple[Schema, pa.Schema]) -> None:
    # pyiceberg's check is private (its Transaction.append's); datafiles.check_compatible is the same
    # rule from its public parts, and this keeps the two equal (the private one only as the oracle here)
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible

    schema, arrow = case

    def verdict(check: Any) -> bool:
        try:
            check(schema, arrow, format_version=2)
        except ValueError:
            return False
        return True

    assert verdict(check_compatible) == verdict(_check_pyarrow_schema_compatible), (schema, arrow)


def test_a_file_that_does_not_fit_the_table_says_which_column(tmp_path: Path) -> None:
    metadata = new_table_metadata(SCHEMA, SPEC, UNSORTED_SORT_ORDER, str(tmp_path), {})
    _, footer = _file(tmp_path, {"ts": pa.array([1], pa.int64()), "kind": pa.array(["a"])})
    with pytest.raises(ValueError, match=r"ts: long in the file, timestamptz in the table"):
        StatsPlan(metadata).of(metadata_of(footer))
    _, footer = _file(tmp_path, {"kind": pa.array(["a"]), "other": pa.array(["b"])})
    with pytest.raises(ValueError, match="a column the table's schema does not"):
        StatsPlan(metadata).of(metadata_of(footer))


def test_the_job_imports_no_private_name_of_pyiceberg() -> None:
    # a private name may change in any release (pyiceberg pins none of them); the job is pinned to
    # one pyiceberg but upgrades it with Glue's, and then should only meet documented changes
    import ast

    root = Path(__file__).resolve().parents[3]
    private = []
    for path in sorted((root / "glue_processor").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyiceberg"):
                private += [f"{path.relative_to(root)}: {a.name}" for a in node.names if a.name.startswith("_")]
    assert private == []
