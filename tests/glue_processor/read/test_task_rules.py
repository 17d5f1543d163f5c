"""A parse task checks its typed rows against the table's rules: what is kept, quarantined (with its
line as the object has it), dropped, and counted per object."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pyarrow.parquet as pq

from contracts.routing import parse_expect
from glue_processor.read.task import run_task
from glue_processor.shared.declared import parse_schema
from glue_processor.shared.objects import local_path
from glue_processor.shared.rules import compile_rules, rule_specs
from tests.glue_processor.read.test_task import file_task, spec

DECLARED = parse_schema('{"columns": {"amount": "decimal(12,2)", "ts": "timestamp"}}')
EXPECT = {
    "positive_amount": "amount > 0",
    "recent": "ts >= TIMESTAMP '2020-01-01 00:00:00'",
    "known_country": {"sql": "country IN ('DE', 'US')", "on_fail": "drop"},
    "sku_length": {"sql": "length(sku) = 3", "on_fail": "warn"},
}
LINES = [
    b'{"id": "ok", "amount": "1.50", "ts": "2026-01-01T00:00:00Z", "country": "DE", "sku": "abc"}',
    b'{"id": "negative", "amount": "-2", "ts": "2026-01-01T00:00:00Z", "country": "US", "sku": "abc"}',
    b"",  # a blank line: a line number, no row
    b'{"id": "old and negative", "amount": -3, "ts": "2019-05-05 10:00:00", "country": "DE", "sku": "abc"}',
    b'{"id": "elsewhere", "amount": 4, "ts": "2026-01-01T00:00:00Z", "country": "FR", "sku": "abc"}',
    b'{"id": "long sku", "amount": 5, "ts": "2026-01-01T00:00:00Z", "country": "US", "sku": "abcd"}',
    b'{"id": "not a number", "amount": "x", "ts": "2026-01-01T00:00:00Z", "country": "US", "sku": "abc"}',
    b"not json",
]


def rules():  # type: ignore[no-untyped-def]
    return compile_rules(rule_specs(parse_expect(json.dumps(EXPECT))), DECLARED, where="table 'orders'")


def test_rows_breaking_rules_are_quarantined_dropped_or_counted_each_with_its_line(tmp_path: Path) -> None:
    # Given an object with CRLF line ends, declared types and four rules (two quarantine, a drop, a warn)
    root = tmp_path / "src"
    root.mkdir()
    (root / "o.json").write_bytes(b"\r\n".join(LINES) + b"\r\n")
    out = f"file://{tmp_path}/out"
    # When a task reads it
    result = run_task(
        spec(
            [file_task(f"file://{root}/o.json", source="s3://b/o.json")],
            out,
            known=(),
            declared=DECLARED,
            rules=rules(),
        )
    )
    # Then the object's outcome counts kept rows, quarantined lines (rules' and the bad line) and drops
    (found,) = result.files
    assert (found.status, found.good, found.bad, found.dropped) == ("ingested", 2, 4, 1)
    assert dict(found.violations) == {"positive_amount": 3, "recent": 1, "known_country": 1, "sku_length": 1}
    # And the table gets the rows that kept every quarantine and drop rule, typed, the warned one too
    (staged,) = result.data
    rows = pq.read_table(local_path(staged.uri)).to_pylist()
    assert [(r["id"], r["amount"], r["_line"]) for r in rows] == [
        ("ok", Decimal("1.50"), 1),
        ("long sku", Decimal("5.00"), 6),
    ]
    # And a quarantine record per quarantined row: its first broken rule, why it broke each, and its
    # line as the object has it (once, however many rules it broke)
    (qfile,) = result.quarantine
    records = [json.loads(line) for line in Path(local_path(qfile.uri)).read_text().splitlines()]
    by_line = sorted((r["line"], r["kind"], r.get("rule"), r["raw"]) for r in records)
    assert by_line == [
        (2, "rule", "positive_amount", LINES[1].decode()),
        (4, "rule", "positive_amount", LINES[3].decode()),
        (7, "rule", "positive_amount", LINES[6].decode()),  # "x" is no decimal: NULL (rescued), which breaks it
        (8, "line", None, "not json"),
    ]
    why = {r["line"]: r["reason"] for r in records}
    assert why[2] == "rule positive_amount not kept (quarantine): amount > 0 is false"
    assert why[4] == (
        "rule positive_amount not kept (quarantine): amount > 0 is false; "
        "rule recent not kept (quarantine): ts >= TIMESTAMP '2020-01-01 00:00:00' is false"
    )
    assert why[7].endswith("is NULL (a value it reads is missing or NULL)")
    assert all(r["source_uri"] == "s3://b/o.json" and r["etag"] == "etag-1" for r in records)
    # And a value that did not convert counts as rescued only in a row the table keeps (line 7's
    # "x" is in the quarantine table's raw text, not in the table's _rescued)
    assert result.rescued == 0


def test_an_object_whose_rows_all_break_rules_is_empty_not_unreadable(tmp_path: Path) -> None:
    root = tmp_path / "src"
    root.mkdir()
    (root / "all.json").write_bytes(LINES[1] + b"\n" + LINES[4] + b"\n")
    result = run_task(
        spec(
            [file_task(f"file://{root}/all.json")], f"file://{tmp_path}/out", known=(), declared=DECLARED, rules=rules()
        )
    )
    (found,) = result.files
    assert (found.status, found.good, found.bad, found.dropped) == ("empty", 0, 1, 1)
    assert result.data == ()


def test_a_json_documents_record_is_quarantined_with_its_values(tmp_path: Path) -> None:
    # Given a pretty-printed JSON array (records span lines): the raw text is the record, whole
    root = tmp_path / "src"
    root.mkdir()
    doc = [{"id": "a", "amount": "1", "ts": "2026-01-01T00:00:00Z", "country": "DE", "sku": "abc"}]
    # its amount breaks the rule; its "extra" value is in no column: both are in the raw text
    doc.append({"id": "b", "amount": -1, "ts": "2026-01-01T00:00:00Z", "country": "DE", "sku": "abc", "x": {"y": [1]}})
    (root / "doc.json").write_text(json.dumps(doc, indent=2))
    result = run_task(
        spec(
            [file_task(f"file://{root}/doc.json")], f"file://{tmp_path}/out", known=(), declared=DECLARED, rules=rules()
        )
    )
    (qfile,) = result.quarantine
    (record,) = [json.loads(line) for line in Path(local_path(qfile.uri)).read_text().splitlines()]
    assert record["rule"] == "positive_amount" and record["line"] == 9  # the line the record starts on
    assert json.loads(record["raw"]) == doc[1]


def test_a_piece_with_none_of_the_declared_keys_loads_beside_one_that_has_them(tmp_path: Path) -> None:
    # Given a declared column and a task whose first object has none of the declared keys (a new
    # table's first batch): the piece's _rescued had no rows, and the whole task failed (review)
    root = tmp_path / "src"
    root.mkdir()
    (root / "a.json").write_bytes(b'{"id": "1"}\n')
    (root / "b.json").write_bytes(b'{"id": "2", "amount": "5"}\n')
    declared = parse_schema('{"columns": {"amount": "bigint"}}')
    files = [file_task(f"file://{root}/a.json"), file_task(f"file://{root}/b.json")]
    # When one task reads both, with no rules at all
    result = run_task(spec(files, f"file://{tmp_path}/out", known=(), declared=declared))
    # Then both load, the declared column typed
    assert [(f.status, f.good) for f in result.files] == [("ingested", 1), ("ingested", 1)]
    rows = [r for s in result.data for r in pq.read_table(local_path(s.uri)).to_pylist()]
    assert sorted((r["id"], r.get("amount")) for r in rows) == [("1", None), ("2", 5)]


def test_a_rule_on_an_objects_uri_reads_it_as_text(tmp_path: Path) -> None:
    """A task holds each object's ``_source_uri`` as a dictionary of one value (no copy a row); a rule
    reads the text (Arrow's string functions take no dictionary: ``length`` of one fails)."""
    root = tmp_path / "src"
    root.mkdir()
    for name in ("keep.json", "skip-me.json"):
        (root / name).write_bytes(b'{"id": "1"}\n{"id": "2"}\n')
    expect = {"not_skipped": "_source_uri NOT LIKE '%skip%' AND length(_source_uri) > 3"}
    checked = compile_rules(rule_specs(parse_expect(json.dumps(expect))), None, where="table 't'")
    # When one task reads both objects under that rule
    result = run_task(
        spec(
            [file_task(f"file://{root}/{n}", source=f"s3://b/{n}") for n in ("keep.json", "skip-me.json")],
            f"file://{tmp_path}/out",
            known=(),
            rules=checked,
        )
    )
    # Then the skipped object's two rows are quarantined under the rule, the other's loaded as text
    outcomes = {f.read_uri.rsplit("/", 1)[-1]: (f.good, f.bad, f.violations) for f in result.files}
    assert outcomes == {"keep.json": (2, 0, ()), "skip-me.json": (0, 2, (("not_skipped", 2),))}
    (part,) = result.data
    table = pq.read_table(local_path(part.uri))
    assert str(table.schema.field("_source_uri").type) == "string"
    assert table.column("_source_uri").to_pylist() == ["s3://b/keep.json"] * 2


def test_the_values_of_new_keys_are_counted_in_the_rows_the_rules_keep(tmp_path: Path) -> None:
    # Given 2 kept rows with "Kind" and 8 rows with "kind" that a drop rule removes (a review: counted
    # before the rules, "kind" won the column and held no value, the kept "Kind" values in _extra)
    root = tmp_path / "src"
    root.mkdir()
    lines = [{"Kind": "K", "country": "DE"}] * 2 + [{"kind": "k", "country": "FR"}] * 8
    (root / "o.json").write_text("".join(json.dumps(x) + "\n" for x in lines))
    expect = {"known_country": {"sql": "country IN ('DE', 'US')", "on_fail": "drop"}}
    checked = compile_rules(rule_specs(parse_expect(json.dumps(expect))), None, where="table 't'")
    result = run_task(spec([file_task(f"file://{root}/o.json")], f"file://{tmp_path}/out", known=(), rules=checked))
    # Then the task counts the kept rows' values only
    assert dict(result.new_key_values) == {"Kind": 2, "country": 2}
