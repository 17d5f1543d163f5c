"""Declared column types: conversion, rescue of what does not convert, on drifting data."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contracts.exceptions import ConfigError
from glue_processor.shared.declared import Column, conform, convert, parse_schema
from glue_processor.table.read import load
from tests.glue_processor.test_batch import Env
from tests.helpers import declared, read_rows

SCHEMA = {
    "columns": {
        "v": "bigint",
        "amount": "decimal(8,2)",
        "ts": {"type": "timestamp", "format": "iso8601"},
        "sent": {"type": "timestamp", "format": "epoch_ms"},
        "ok": "boolean",
    }
}


@pytest.mark.spark
def test_a_field_that_drifts_between_files_is_typed_where_it_converts_and_rescued_where_not(
    spark: Any, tmp_path: Path
) -> None:
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    env = Env(tmp_path, schema=schema.as_uri())
    job = env.job(spark)
    # Given `v` is a number in one file, a string in the next and an object in the third
    files = [
        ('{"v": 1, "amount": 10.5, "ts": "2026-11-22T10:00:00Z", "sent": 1700000000000, "ok": true}\n', 0),
        ('{"v": "abc", "amount": "12.345", "ts": "2026-11-22 11:00:00", "ok": "yes"}\n', 1),
        ('{"v": {"deep": [1, 2]}, "other": "x", "ts": "not a time"}\n', 2),
    ]
    records = [job.run([env.manifest(f"m{n}", [env.put(f"f{n}.json", body.encode())])], n) for body, n in files]
    rows = sorted(read_rows(tmp_path / "output"), key=lambda r: r["_batch_id"])
    # Then every record is a row; converted values are typed, the others NULL with their text in _rescued
    assert [r["v"] for r in rows] == [1, None, None]
    assert rows[0]["amount"] == Decimal("10.50") and rows[1]["amount"] is None
    assert rows[0]["ts"] == datetime(2026, 11, 22, 10, tzinfo=UTC)
    assert rows[1]["ts"] == datetime(2026, 11, 22, 11, tzinfo=UTC)
    assert rows[0]["sent"] == datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC) and rows[0]["ok"] is True
    assert rows[0]["_rescued"] is None
    assert dict(rows[1]["_rescued"]) == {"v": "abc", "amount": "12.345", "ok": "yes"}
    assert dict(rows[2]["_rescued"]) == {"v": '{"deep":[1,2]}', "ts": "not a time"}
    assert rows[2]["other"] == "x"  # an undeclared key stays a string column
    assert [r.stats.rescued_values for r in records] == [0, 3, 2]
    # And the table's schema carries the declared types and the rescue map
    types = {f.name: str(f.field_type) for f in load(env.settings).schema().fields}
    assert types["v"] == "long" and types["amount"] == "decimal(8, 2)" and types["ts"] == "timestamptz"
    assert types["ok"] == "boolean" and types["other"] == "string" and types["_rescued"].startswith("map<string")


def test_a_bad_schema_file_names_the_column_and_what_it_accepts() -> None:
    with pytest.raises(ConfigError, match=r"column 'x' has type 'int'; expected string, bigint"):
        parse_schema('{"columns": {"x": "int"}}')
    with pytest.raises(ConfigError, match="timestamp format 'unix'"):
        parse_schema('{"columns": {"t": {"type": "timestamp", "format": "unix"}}}')
    with pytest.raises(ConfigError, match="not JSON"):
        parse_schema("columns: x")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(-(10**20), 10**20), st.text(max_size=8)), max_size=30))
def test_bigint_conversion_keeps_every_value_as_a_number_or_its_text(values: list[Any]) -> None:
    # the raw texts as the parser produces them: numbers as written, strings unescaped
    raw = pa.array([None if v is None else str(v) for v in values], pa.large_string())
    out, rescued, count = conform({"n": raw}, parse_schema('{"columns": {"n": "bigint"}}'))
    for text, value, kept in zip(raw.to_pylist(), out["n"].to_pylist(), rescued.to_pylist(), strict=True):
        if text is None:
            assert value is None and kept is None
        elif value is not None:
            assert str(value) == text.lstrip("+") and kept is None and int(text) == value
        else:
            assert dict(kept) == {"n": text}  # not lost: its text is in _rescued
    assert count == sum(
        1 for t, v in zip(raw.to_pylist(), out["n"].to_pylist(), strict=True) if t is not None and v is None
    )


def test_bigints_hold_every_int64_and_nothing_past_it() -> None:
    texts = [
        "9223372036854775807",
        "-9223372036854775808",
        "1000000000000000000",
        "9223372036854775808",
        "-9999999999999999999",
    ]
    values, failed = convert(pa.array(texts), Column("n", "bigint"))
    assert values.to_pylist() == [2**63 - 1, -(2**63), 10**18, None, None]  # 19 digits went to _rescued before
    assert failed.to_pylist() == [False, False, False, True, True]


def test_doubles_refuse_what_a_double_cannot_hold() -> None:
    values, failed = convert(pa.array(["1.5", "1e400", "NaN", "-0", "007"]), Column("x", "double"))
    assert values.to_pylist() == [1.5, None, None, -0.0, None]
    assert failed.to_pylist() == [False, True, True, False, True]


def test_days_and_instants_outside_years_1_to_9999_are_rescued() -> None:
    # Arrow parses year 0, and year 10000 through an offset or an epoch; pyiceberg reads a file's
    # bounds into Python's datetime, which has neither, so the batch could never be published
    ts = ["0000-01-01T00:00:00Z", "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00Z", "9999-12-31T23:59:59.999999Z"]
    values, failed = convert(pa.array(ts), Column("ts", "timestamp"))
    assert values.to_pylist() == [
        None,
        None,
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    ]
    assert failed.to_pylist() == [True, True, False, False]
    values, failed = convert(pa.array(["-1e15", "253402300800000", "0"]), Column("t", "timestamp", "epoch_ms"))
    assert failed.to_pylist() == [True, True, False]
    values, failed = convert(pa.array(["0000-01-01", "0001-01-01", "9999-12-31"]), Column("d", "date"))
    assert values.to_pylist() == [None, date(1, 1, 1), date(9999, 12, 31)] and failed.to_pylist() == [
        True,
        False,
        False,
    ]


@pytest.mark.spark
def test_one_instant_past_year_9999_cannot_hold_its_batch_back(spark: Any, tmp_path: Path) -> None:
    # Given a declared timestamp, an object with a value of year 0 and one in year 10000 (UTC), and
    # another producer's object in the same batch
    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"columns": {"ts": "timestamp", "d": "date"}}))
    env = Env(tmp_path, schema=schema.as_uri())
    odd = b'{"i": 1, "ts": "0000-01-01T00:00:00Z"}\n{"i": 2, "ts": "9999-12-31T23:59:59-23:59", "d": "0000-01-01"}\n'
    good = b'{"i": 3, "ts": "2026-11-25T10:00:00Z", "d": "2026-11-25"}\n'
    record = env.job(spark).run([env.manifest("m0", [env.put("odd.json", odd), env.put("good.json", good)])], 0)
    # Then the batch is published: every row, the values no table holds rescued with their text
    assert record.stats.records_out == 3 and record.stats.rescued_values == 3
    rows = {r["i"]: r for r in load(env.settings).scan().to_arrow().to_pylist()}
    assert rows["3"]["ts"] == datetime(2026, 11, 25, 10, tzinfo=UTC) and rows["3"]["d"] == date(2026, 11, 25)
    assert dict(rows["1"]["_rescued"]) == {"ts": "0000-01-01T00:00:00Z"} and rows["1"]["ts"] is None
    assert dict(rows["2"]["_rescued"]) == {"ts": "9999-12-31T23:59:59-23:59", "d": "0000-01-01"}


def test_the_schema_setting_is_the_jobs_schema_argument() -> None:
    from glue_processor.settings import ours_from_argv, settings_from_mapping

    argv = ["--manifest_uri", "s3://m/x", "--output_uri", "s3://o/d", "--quarantine_uri", "s3://o/q"]
    argv += ["--checkpoint_uri", "s3://a/c", "--schema", "s3://code/types.json"]
    assert settings_from_mapping(ours_from_argv(argv)).schema_uri == "s3://code/types.json"
    with pytest.raises(ConfigError, match="schema"):
        settings_from_mapping({**ours_from_argv(argv), "schema": "types.json"})


@pytest.mark.spark
def partition_dir(path: str) -> str:
    """A data file's partition path: what follows its attempt's directory under the table's ingest/."""
    return path.split("/ingest/", 1)[1].split("/", 3)[3].rsplit("/", 1)[0]


def test_partitions_come_from_the_record_and_a_missing_value_is_counted_in_the_null_partition(
    spark: Any, tmp_path: Path
) -> None:
    from glue_processor.table.read import current_files

    schema = tmp_path / "schema.json"
    schema.write_text(json.dumps({"columns": {"ts": "timestamp", "kind": "string"}}))
    env = Env(tmp_path, schema=schema.as_uri(), partition_by="day(ts),kind")
    lines = [
        {"ts": "2026-11-20T23:59:59Z", "kind": "a", "n": 1},
        {"ts": "2026-11-21T00:00:00+01:00", "kind": "a", "n": 2},  # the 20th in UTC
        {"ts": "2026-11-21T08:00:00Z", "kind": "b", "n": 3},
        {"ts": "2026-11-21T09:00:00Z", "n": 4},  # no kind
        {"ts": "soon", "kind": "a", "n": 5},  # a timestamp that does not convert
        {"kind": "b", "n": 6},  # no timestamp
    ]
    body = "".join(json.dumps(r) + "\n" for r in lines).encode()
    record = env.job(spark).run([env.manifest("m0", [env.put("f.json", body)])], 0)
    table = load(env.settings)
    # Then the spec is the one asked for, and each file holds one partition
    assert [(f.name, str(f.transform)) for f in table.spec().fields] == [("ts_day", "day"), ("kind", "identity")]
    paths = current_files(table)
    dirs = sorted(partition_dir(p) for p in paths)
    assert dirs == [
        "ts_day=2026-11-20/kind=a",
        "ts_day=2026-11-21/kind=b",
        "ts_day=2026-11-21/kind=null",
        "ts_day=null/kind=a",
        "ts_day=null/kind=b",
    ]
    partitions = sorted(str(t.file.partition) for t in table.scan().plan_files())
    assert len(partitions) == 5
    # And every record is there once; the unconvertible timestamp is rescued; missing values are counted
    rows = read_rows(tmp_path / "output")
    assert sorted(int(r["n"]) for r in rows) == [1, 2, 3, 4, 5, 6]
    assert [dict(r["_rescued"]) for r in rows if r["n"] == "5"] == [{"ts": "soon"}]
    assert record.stats.null_partition_records == 3 and record.stats.rescued_values == 1


def test_partition_by_names_what_it_cannot_use() -> None:
    from glue_processor.settings import settings_from_mapping
    from glue_processor.shared.partitioning import parse_partition_by

    with pytest.raises(ConfigError, match=r"day\(x\) needs a timestamp or date column"):
        parse_partition_by("day(x)", None)
    # a double's 0.0 would be recorded as the partition -0.0 (Parquet's min of a zero), which an
    # engine comparing doubles exactly prunes from `price = 0.0`
    declared = parse_schema(b'{"columns": {"price": "double", "n": "bigint"}}')
    with pytest.raises(ConfigError, match=r"identity\(price\) of a double column"):
        parse_partition_by("price", declared)
    assert parse_partition_by("n", declared).fields[0].column == "n"
    # an identity field must be declared: an undeclared key may be absent or misspelt, and every row
    # went to the null partition with nothing said (a newcomer's PARTITION_BY=custid)
    with pytest.raises(ConfigError, match=r"'custid' is not a declared column: declare it"):
        parse_partition_by("custid", declared)
    # what Iceberg refuses in a spec is refused when the setting is read, not at the first commit
    # (where the share was refused three times and abandoned, every batch)
    timed = parse_schema(b'{"columns": {"ts": "timestamp", "ts_day": "date"}}')
    with pytest.raises(ConfigError, match=r"day\(ts\) and month\(ts\)|month\(ts\) and day\(ts\)"):
        parse_partition_by("day(ts),month(ts)", timed)
    with pytest.raises(ConfigError, match=r"identity\(n\) is there twice"):
        parse_partition_by("n,identity(n)", declared)
    with pytest.raises(ConfigError, match="two fields named 'ts_day'"):
        parse_partition_by("day(ts),ts_day", timed)
    assert [f.name for f in parse_partition_by("day(ts),ts", timed).fields] == ["ts_day", "ts"]
    base = {"manifest_uri": "s3://m/x", "output_uri": "s3://o/d", "quarantine_uri": "s3://o/q"}
    hive = {**base, "checkpoint_uri": "s3://a/c", "table_format": "hive-parquet", "partition_by": "kind"}
    with pytest.raises(ConfigError, match="partition_by needs table_format iceberg"):
        settings_from_mapping(hive)


def test_an_identity_partition_source_stays_a_column_past_the_column_bound(spark: Any, tmp_path: Path) -> None:
    from glue_processor.table.read import current_files, load

    # Given a bound of one column, a table partitioned by kind, and a first batch where kind is not the first key
    env = Env(tmp_path, schema=declared(tmp_path, kind="string"), partition_by="kind", max_columns="1")
    lines = [{"a": "x", "kind": "k1"}, {"b": 2, "kind": "k2"}, {"a": "y"}]
    body = "".join(json.dumps(r) + "\n" for r in lines).encode()
    env.job(spark).run([env.manifest("m0", [env.put("f.json", body)])], 0)
    # Then kind is the one column, and it partitions the files; the other keys are in _extra
    table = load(env.settings)
    assert [f.name for f in table.schema().fields if not f.name.startswith("_")] == ["kind"]
    dirs = sorted(partition_dir(p) for p in current_files(table))
    assert dirs == ["kind=k1", "kind=k2", "kind=null"]
    rows = sorted((r["kind"] or "", dict(r["_extra"] or [])) for r in table.scan().to_arrow().to_pylist())
    assert rows == [("", {"a": "y"}), ("k1", {"a": "x"}), ("k2", {"b": "2"})]
