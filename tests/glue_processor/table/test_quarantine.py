"""The quarantine table (issue 47): every quarantine record a row, appended with its batch, once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from contracts.ledger import PublishedFile
from glue_processor.table.catalog import open_catalog
from glue_processor.table.quarantine import RAW_CHARS, groups, read_records
from tests.glue_processor.test_batch import BUCKET, Env


def quarantine(env: Env) -> list[dict[str, Any]]:
    table = open_catalog(env.settings.catalog_uri).load_table((env.settings.database, "quarantine"))
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: (r["batch_id"], r["key"] or "", r["line"] or 0))


def test_every_quarantine_record_of_a_batch_is_a_row_once(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    # Given a batch with two malformed lines (one of them over 64 KiB) and a missing object
    long = b"{" + b"x" * 100_000 + b"\n"
    mixed = env.put("in/b.json", b'{"b": 1}\nnot json\n' + long)
    missing = env.put("in/gone.json", b'{"c": 1}\n')
    env.buckets.path_of(BUCKET, "in/gone.json").unlink()
    record = job.run([env.manifest("m0", [mixed, missing])], 0)
    # Then the quarantine table holds a row per quarantine record: where, what, why, the raw text
    rows = quarantine(env)
    lines = [r for r in rows if r["kind"] == "line"]
    assert [(r["key"], r["line"], r["table_name"]) for r in lines] == [
        ("in/b.json", 2, "ingest.events"),
        ("in/b.json", 3, "ingest.events"),
    ]
    assert lines[0]["raw"] == "not json" and lines[0]["raw_bytes"] == 8 and lines[0]["bucket"] == BUCKET
    assert len(lines[1]["raw"]) <= RAW_CHARS and lines[1]["raw_bytes"] == 100_001  # the head, and its size
    assert all(r["batch_id"] == 0 and r["query_id"] == record.query_id for r in rows)
    assert all(r["commit_time"] == record.committed_at for r in rows)
    written = env.quarantine()
    assert len(rows) == len(written) and {r["kind"] for r in rows} == {x["kind"] for x in written}
    # And publishing the batch again (a replay) appends nothing
    job.publisher().publish(record, job.committer(), fresh=False)
    assert len(quarantine(env)) == len(rows)


def test_a_batch_s_files_are_appended_in_bounded_groups() -> None:
    files = [PublishedFile(staged=f"s{n}", final=f"f{n}", bytes=b) for n, b in enumerate([60, 50, 200, 10, 30])]
    assert [[f.final for f in g] for g in groups(files, limit=100)] == [["f0"], ["f1"], ["f2"], ["f3", "f4"]]
    assert groups([]) == []


def test_a_record_s_unknown_fields_are_left_and_missing_ones_null() -> None:
    body = b'{"kind": "manifest", "reason": "bad", "extra": {"x": 1}}\n{"kind": "line", "line": 3, "raw": "r"}\n'
    got = read_records(body).to_pylist()
    assert [(r["kind"], r["line"], r["reason"], r["source_uri"]) for r in got] == [
        ("manifest", None, "bad", None),
        ("line", 3, None, None),
    ]
    assert read_records(b"").num_rows == 0


def test_a_record_is_the_row_of_its_own_version_when_a_batch_has_two_of_a_key() -> None:
    # review of issue 47, finding 6: the second version's bad line was labelled with the first's
    # version, and with no table when the first was a rejected entry
    from datetime import UTC, datetime
    from types import SimpleNamespace

    import pyarrow as pa

    from contracts.ledger import SourceRecord
    from glue_processor.table.quarantine import RECORD, quarantine_rows

    t = datetime(2026, 11, 27, 12, tzinfo=UTC)

    def src(version: str, status: str, table: str | None) -> SourceRecord:
        return SourceRecord(
            bucket="b", key="k.ndjson", etag=f"e{version}", size=10, event_time=t, manifest_uri="m",
            status=status, version_id=version, table=table,
        )  # fmt: skip

    line = {"kind": "line", "source_uri": "s3://b/k.ndjson", "line": 5, "reason": "bad", "raw": "x"}
    for first in (src("v1", "ingested", "events"), src("v1", "rejected", None)):
        record: Any = SimpleNamespace(
            sources=(first, src("v2", "ingested", "events")), schema_version=2, batch_id=7, query_id="q", committed_at=t
        )
        versioned = pa.Table.from_pylist([line | {"etag": "ev2", "version_id": "v2"}], schema=RECORD)
        (row,) = quarantine_rows(record, versioned, database="ingest", legacy="events").to_pylist()
        assert (row["table_name"], row["version_id"], row["etag"], row["line"]) == ("ingest.events", "v2", "ev2", 5)
        # a record from before versions were written: the URI's loaded version
        older = pa.Table.from_pylist([line], schema=RECORD)
        (row,) = quarantine_rows(record, older, database="ingest", legacy="events").to_pylist()
        assert row["table_name"] == "ingest.events" and row["etag"] == f"e{row['version_id']}"


def test_a_file_too_large_to_read_at_once_is_one_row_saying_where_its_records_are() -> None:
    from glue_processor.table.quarantine import GROUP_BYTES, left_in_file

    big = PublishedFile(staged="s", final="s3://q/quarantine-00001.json", bytes=GROUP_BYTES + 1)
    (row,) = left_in_file(big).to_pylist()
    assert row["kind"] == "records-in-file" and "s3://q/quarantine-00001.json" in row["reason"]
    assert row["raw_bytes"] == GROUP_BYTES + 1


def test_a_quarantine_table_from_before_etag_gains_it_and_a_fixed_version_is_told_apart(
    spark: Any, tmp_path: Path
) -> None:
    # a newcomer fixed a bad line, re-ran, and the README's query still showed it: every version's
    # bad lines stay, and the table had no eTag to tell the fixed version's from the old one's
    from glue_processor.table.history import ensure_dated_table
    from glue_processor.table.quarantine import SCHEMA

    env = Env(tmp_path)
    # Given a quarantine table made by a version of the job without the etag column
    older = SCHEMA.remove(SCHEMA.get_field_index("etag"))
    catalog = open_catalog(env.settings.catalog_uri)
    ensure_dated_table(
        catalog, env.settings.database, "quarantine", older, location=env.settings.location_of("quarantine")
    )
    job = env.job(spark)
    # When an object with a bad line is loaded, then a fixed version of it
    bad = env.put("in/a.json", b'{"a": 1}\nnot json\n')
    job.run([env.manifest("m0", [bad])], 0)
    fixed = env.put("in/a.json", b'{"a": 1}\n{"a": 2}\n')
    job.run([env.manifest("m1", [fixed])], 1)
    # Then the table has the column, and the bad line's row names the version it was in
    table = catalog.load_table((env.settings.database, "quarantine"))
    assert "etag" in table.schema().column_names
    (row,) = [r for r in quarantine(env) if r["kind"] == "line"]
    assert (row["key"], row["line"], row["etag"]) == ("in/a.json", 2, bad.etag)
    assert bad.etag != fixed.etag
