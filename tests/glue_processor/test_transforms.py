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


def test_file_stats_count_good_bad_and_key_sets(spark: Any) -> None:
    (row,) = T.file_stats(lines_of(spark, '{"a":1}\n{"b":1,"a":2}\nnope\n\n')).collect()
    assert (row.good, row.bad) == (2, 1)
    assert sorted(map(tuple, row.key_sets)) == [("a",), ("a", "b")]
