"""An identity partition takes its values from the records, so a producer chooses them: none may
climb out of the table, wedge the batch, or put two partitions in one file (issue 27).

Before: ``a/b`` and ``../../x`` became directories (the second outside its batch's directory), a
300-character value failed every attempt of its batch (``File name too long``: a wedged stream),
and the text ``null`` shared the null partition's path, so one file held both and Iceberg recorded
it as ``kind = 'null'``: the rows without a ``kind`` were invisible to ``kind IS NULL``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo, IsNull

from contracts.exceptions import ConfigError
from glue_processor.shared.declared import DeclaredSchema, parse_schema
from glue_processor.shared.partitioning import (
    PATH_VALUE_CHARS,
    PartitionPlan,
    _path_values,
    parse_partition_by,
    path_value,
)
from glue_processor.table.read import load
from tests.glue_processor.test_batch import Env
from tests.helpers import declared, merge_plans

HOSTILE = [
    "ok",
    "a/b",
    "../../../escaped",
    "..",
    ".",
    "",
    "null",
    "NULL",
    "x" * 300,
    "y" * 4000,
    "z" * 5000,
    "per%cent",
    "new\nline",
    "sp ace",
    "a+b",
    "é",
    "a=b",
    "C:\\win",
    "?#!",
]


@pytest.mark.parametrize("value", HOSTILE)
def test_a_value_is_one_bounded_path_segment_of_safe_characters(value: str) -> None:
    segment = path_value(value)
    assert "/" not in segment and segment not in (".", "..", "null")
    assert len(segment) <= PATH_VALUE_CHARS
    assert set(segment) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~%+!")


def strings(*keys: str) -> DeclaredSchema:
    """``keys`` declared as strings: a partition column must be declared."""
    return parse_schema(json.dumps({"columns": dict.fromkeys(keys, "string")}))


def test_a_spec_whose_longest_path_would_not_fit_a_key_is_refused_and_names_are_encoded() -> None:
    # a field's name is written as pyiceberg writes it: no "/" of a column name adds a directory
    (field,) = parse_partition_by("a/b", strings("a/b")).fields
    assert field.path_name == "a%2Fb"
    labels, _ = PartitionPlan((field,)).labels(pa.table({field.column: ["v", None]}))
    assert labels.dictionary.to_pylist() == ["a%2Fb=v", "a%2Fb=null"]
    # six identity fields fit; seven with long names would not (S3 keys hold 1,024 bytes)
    assert len(parse_partition_by("a,b,c,d,e,f", strings(*"abcdef")).fields) == 6
    wide = ",".join(f"{c * 60}" for c in "abcdefg")
    with pytest.raises(ConfigError, match="partition path can take"):
        parse_partition_by(wide, strings(*wide.split(",")))


def test_different_values_never_share_a_segment() -> None:
    values = [*HOSTILE, *(f"{'z' * 200}{i}" for i in range(50)), "%6Eull", "n", "nul"]
    assert len({path_value(v) for v in values}) == len(values)


def test_a_batch_s_values_are_encoded_as_each_alone_plain_ones_without_a_python_call() -> None:
    values = [*HOSTILE, "tenant-0001", "A-b_c.d~e", "y" * PATH_VALUE_CHARS, "y" * (PATH_VALUE_CHARS + 1)]
    assert _path_values(pa.array(values, pa.string())).to_pylist() == [path_value(v) for v in values]


def test_hostile_identity_values_stay_in_their_batch_each_in_its_own_partition(spark: Any, tmp_path: Path) -> None:
    # Given records whose partition values are paths, escapes, long text and the word "null", and
    # records without one
    env = Env(tmp_path, schema=declared(tmp_path, kind="string"), partition_by="kind")
    records: list[dict[str, Any]] = [{"kind": v, "i": i} for i, v in enumerate(HOSTILE)]
    records += [{"i": 100}, {"kind": None, "i": 101}]
    body = "".join(json.dumps(r) + "\n" for r in records).encode()
    # When one batch takes them
    record = env.job(spark).run([env.manifest("m0", [env.put("f.json", body)])], 0)
    # Then it succeeded, and every file is one level under its batch's directory
    batch_dir = tmp_path / "output" / "events" / "ingest"
    files = [Path(f.final.removeprefix("file://")) for f in record.data_files]
    assert len(files) == len(HOSTILE)  # one partition per value, the longest's row in the null partition
    assert {f.resolve().parent.parent for f in files} == {p.resolve() for p in batch_dir.glob("*/*/*") if p.is_dir()}
    assert not list((tmp_path / "output" / "events").glob("*/*/escaped"))
    # And in the table each file's partition is the value of each of its rows
    table = load(env.settings)
    for task in table.scan().plan_files():
        kinds = pq.ParquetFile(task.file.file_path.removeprefix("file://")).read(columns=["kind"]).column("kind")
        assert set(kinds.to_pylist()) == {task.file.partition[0]}, task.file.file_path

    # And a filter on the partition finds exactly its rows: the missing ones with IS NULL, the text
    # "null" with = 'null', every row once
    def found(expr: Any) -> list[int]:
        return sorted(int(r["i"]) for r in table.scan(row_filter=expr).to_arrow().to_pylist())

    assert found(IsNull("kind")) == [HOSTILE.index("z" * 5000), 100, 101]
    assert found(EqualTo("kind", "null")) == [HOSTILE.index("null")]
    assert found(EqualTo("kind", "../../../escaped")) == [HOSTILE.index("../../../escaped")]
    assert found(EqualTo("kind", "y" * 4000)) == [HOSTILE.index("y" * 4000)]
    # And a value past what Parquet keeps statistics of is no partition value: its row is in the
    # null partition, with its value in _extra, as it was
    assert found(EqualTo("kind", "z" * 5000)) == []
    (long,) = [r for r in table.scan(row_filter=IsNull("kind")).to_arrow().to_pylist() if r["_extra"]]
    assert long["i"] == str(HOSTILE.index("z" * 5000)) and dict(long["_extra"]) == {"kind": "z" * 5000}
    assert record.stats.null_partition_records == 3 and record.stats.extra_values == 1
    assert sorted(int(r["i"]) for r in table.scan().to_arrow().to_pylist()) == [*range(len(HOSTILE)), 100, 101]


def test_a_value_per_row_writes_at_most_the_limit_and_reads_the_rest_as_runs(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An identity partition on a field that turns out to be unique per row: without the limit, 200,000
    # such rows made a batch of 200,000 files (173 s and 1.7 GB on the driver here), every batch
    plans = merge_plans(monkeypatch)
    # Given two objects of 10,000 rows, each with a kind of its own, and a limit of 50 a batch
    env = Env(
        tmp_path,
        schema=declared(tmp_path, kind="string"),
        partition_by="kind",
        max_partitions_per_batch="50",
        partition_limit_per_batch="50",
    )
    entries = [
        env.put(
            f"f{n}.json", "".join(json.dumps({"kind": f"k{n}-{i:05d}", "i": i}) + "\n" for i in range(10_000)).encode()
        )
        for n in range(2)
    ]
    record = env.job(spark).run([env.manifest("m0", entries)], 0)
    # Then the batch wrote 50 partitions, and every row once: the moved ones with their kind in _extra
    assert (record.stats.partitions, record.stats.output_files) == (50, 50)
    assert record.stats.overflow_records == 20_000 - 49
    rows = load(env.settings).scan().to_arrow().to_pylist()
    kinds = sorted(r["kind"] if r["kind"] is not None else dict(r["_extra"])["kind"] for r in rows)
    assert kinds == sorted(f"k{n}-{i:05d}" for n in range(2) for i in range(10_000))
    assert sum(1 for r in rows if r["kind"] is None) == 20_000 - 49
    # And the driver held ranges of at most 50 partitions a task (each task moved the rest itself),
    # and the null partition's file read what it moved as runs of each shared file, not a range each
    (null,) = [m for plan in plans for m in plan.merges if m.partition == "kind=null"]
    assert sum(len(m.parts) for plan in plans for m in plan.merges) <= 2 * 50
    assert len(null.parts) <= 4
