"""The pure transforms, on a local SparkSession."""

from __future__ import annotations

from typing import Any

import pytest

from glue_processor import transforms as T

pytestmark = pytest.mark.spark


def lines_of(spark: Any, text: str) -> Any:
    files = spark.createDataFrame([("file:///f.json", text)], ["file_uri", "value"])
    return T.parse_fields(T.split_lines(files))


def test_lines_are_numbered_and_blank_lines_flagged(spark: Any) -> None:
    rows = lines_of(spark, '{"a":1}\r\n\n  \n{"b":2}\n').orderBy("line").collect()
    assert [(r.line, r.blank) for r in rows] == [(1, False), (2, True), (3, True), (4, False), (5, True)]


def test_fields_are_strings_and_nested_values_json_text(spark: Any) -> None:
    (row,) = (
        lines_of(spark, '{"s":"x","i":12345678901234567890,"b":true,"n":null,"o":{"k":[1,"2"]},"a":[1,2]}')
        .where("not blank")
        .collect()
    )
    assert row.fields == {
        "s": "x",
        "i": "12345678901234567890",
        "b": "true",
        "n": None,
        "o": '{"k":[1,"2"]}',
        "a": "[1,2]",
    }


def test_duplicate_keys_last_wins_and_case_variants_kept(spark: Any) -> None:
    (row,) = lines_of(spark, '{"a":1,"a":2,"A":3}').where("not blank").collect()
    assert row.fields == {"a": "2", "A": "3"}


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("[1,2]", T.REASON_ARRAY),
        ("42", T.REASON_SCALAR),
        ('"text"', T.REASON_SCALAR),
        ("{bad", T.REASON_MALFORMED),
        ("\ufffd{}", T.REASON_NOT_UTF8),
    ],
)
def test_rejected_lines_carry_a_reason(spark: Any, line: str, reason: str) -> None:
    parsed = lines_of(spark, line + "\n")
    joined = parsed.selectExpr("*", "'s3://b/f.json' as source_uri", "'s3://m/x.json' as manifest_uri")
    (row,) = T.rejected_lines(joined, batch_id=7).collect()
    assert (row.reason, row.source_uri, row.line, row.batch_id, row.raw) == (
        reason,
        "s3://b/f.json",
        1,
        7,
        line,
    )


def test_column_names_are_unique_case_insensitively() -> None:
    mapping = dict(T.column_names(["a", "A", "_line", "", "b"]))
    assert mapping == {"A": "A", "a": "a__2", "_line": "_line__2", "": "_empty_key", "b": "b"}
    assert len({v.lower() for v in mapping.values()} | {c.lower() for c in T.LINEAGE_COLUMNS}) == len(mapping) + len(
        T.LINEAGE_COLUMNS
    )


def test_clean_rows_need_no_rebuild_and_new_keys_are_named(spark: Any) -> None:
    text = '{"a":1}\n{"b":1,"a":2}\n{"a":1,"a":3}\n{}\nnope\n'
    files = spark.createDataFrame([("file:///f.json", text)], ["file_uri", "value"])
    parsed = T.parse_fields(T.split_lines(files), ["a"]).where("not blank").withColumn("new", T.new_keys(["a"]))
    rows = {r.line: (r.clean, r.new, r.fields) for r in parsed.collect()}
    assert rows[1] == (True, None, {"a": "1"})
    assert rows[2] == (False, ["b"], {"b": "1", "a": "2"})
    assert rows[3] == (False, [], {"a": "3"})  # a repeated key is not clean; the last one wins
    assert rows[4] == (True, None, {})
    assert rows[5][2] is None  # not an object


@pytest.mark.parametrize(
    "line",
    [
        '{"a":1} junk',
        '{"a":1}{"b":2}',
        '{"a":1},{"b":2}',
        '{"a":1}]',
        '{"a":1} {"b":2}',
        '{"a":1}  {"b":2}',
        '{"a":1}\t{"b":2}',
    ],
)
def test_trailing_content_after_one_object_is_rejected(spark: Any, line: str) -> None:
    parsed = lines_of(spark, line + "\n").where("not blank")
    joined = parsed.selectExpr("*", "'s3://b/f.json' as source_uri", "'s3://m/x.json' as manifest_uri")
    (row,) = T.rejected_lines(joined, batch_id=1).collect()
    assert row.raw == line
    assert row.reason in (T.REASON_TRAILING, T.REASON_MALFORMED)
