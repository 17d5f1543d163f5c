"""The end of make run as a user reads it: every file counted once, and nothing said loaded that a
table refused (the newcomer's run of an existing table with new declared types)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from contracts.ledger import BatchStats, CommitRecord, SourceRecord
from glue_processor.local.summary import RunReport, TableState, render, size

NOW = datetime(2026, 11, 27, tzinfo=UTC)


def _source(key: str, status: str, records: int = 0, reason: str | None = None, table: str = "events") -> SourceRecord:
    return SourceRecord(
        bucket="local-landing",
        key=key,
        etag="e-" + key,
        size=10,
        event_time=NOW,
        manifest_uri="file:///m.json",
        status=status,  # type: ignore[arg-type]
        records=records,
        reason=reason,
        table=table,
    )


def _record(batch: int, *sources: SourceRecord, **stats: int) -> CommitRecord:
    return CommitRecord(
        query_id="q",
        batch_id=batch,
        attempt="a",
        committed_at=NOW,
        partition="p",
        manifests=("file:///m.json",),
        quarantine_files=(),
        sources=sources,
        stats=BatchStats(**stats),
    )


def _report(*records: CommitRecord, **kw: object) -> RunReport:
    return RunReport(
        records=records,
        fed_files=sum(len(r.sources) for r in records),
        ignored=["notes.txt"],
        tables=[TableState("ingest.events", rows=5, files=1, bytes=2_000, duplicates=0)],
        workdir=Path("/w"),
        data=Path("/d"),
        **kw,  # type: ignore[arg-type]
    )


def test_each_file_is_counted_once_and_the_parts_add_up_to_the_files_seen() -> None:
    record = _record(
        0,
        _source("a.json", "ingested", 5),
        _source("b.json", "ingested", 2, reason="lines from 3 on were not loaded: the gzip stream ends early"),
        _source("empty.json", "empty"),
    )
    text = render(_report(record), here=Path("/"))
    headline = text.splitlines()[0]
    # 3 fed + 1 ignored = 4 new = 1 loaded + 1 in part + 1 empty + 1 ignored
    # (each part's rows its own: the file loaded in part's 2 are not the loaded one's)
    assert headline.startswith("your files: 4 new; 1 loaded (5 rows), 1 loaded in part (2 rows), 1 empty, 1 ignored")
    assert "empty              d/empty.json  no record in it: nothing to load" in text


def test_files_of_a_share_the_table_refused_are_not_called_loaded() -> None:
    # Given a batch whose share the table refused at publication, and abandoned
    record = _record(3, _source("a.json", "ingested", 4), _source("b.json", "ingested", 1))
    why = "PublishRefused: the file does not fit the table's schema: id: long in the file, string in the table"
    report = _report(record, unpublished={(3, "events"): ("abandoned", why)})
    text = render(report, here=Path("/"))
    # Then the summary counts them as not published, with no rows, naming each file and why
    assert text.splitlines()[0].startswith("your files: 3 new; 0 loaded (0 rows), 2 not published, 1 ignored")
    assert f"not published      d/a.json  {why}" in text
    assert report.not_published() == 2


def test_values_that_did_not_land_as_declared_are_named_in_the_summary() -> None:
    record = _record(0, _source("a.json", "ingested", 10), rescued_values=2, null_partition_records=603)
    text = render(_report(record), here=Path("/"))
    assert "values rescued     2 values  did not convert to their declared type: kept as text in _rescued" in text
    assert "SELECT _source_uri, _line, _rescued FROM events WHERE _rescued IS NOT NULL" in text
    assert "null partition     603 rows  had no value for a partition column" in text


def test_a_changed_file_is_counted_changed_and_earlier_versions_rows_are_explained() -> None:
    record = _record(0, _source("a.json", "ingested", 8))
    report = _report(record, changed_files=1)
    report.tables = [TableState("ingest.events", rows=13, files=2, bytes=4_000, duplicates=0, earlier_rows=5)]
    text = render(report, here=Path("/"))
    assert text.splitlines()[0].startswith("your files: 1 new, 1 changed; 1 loaded (8 rows)")
    assert "each (source version, line) once; 5 rows of earlier versions of changed files kept beside" in text


def test_a_renamed_column_is_said_in_the_run_that_brings_it_only() -> None:
    record = _record(0, _source("a.json", "ingested", 1))
    first = render(_report(record, known_keys={"events": ("Name", "name")}), here=Path("/"))
    assert 'column name__2     key "name"' in first
    later = _report(record, known_keys={"events": ("Name", "name")}, shown_keys={"events": ("Name", "name")})
    assert "column name__2" not in render(later, here=Path("/"))


def test_sizes_read_as_a_person_reads_them() -> None:
    assert [size(61), size(2_300), size(99_999), size(3_900_000)] == ["61 B", "2.3 kB", "100.0 kB", "3.9 MB"]


def test_a_refusal_older_than_the_records_kept_still_fails_the_run() -> None:
    from glue_processor.local.cli import Progress, unpublished_error

    progress = Progress(files=0, data_bytes=0, started=0.0)
    # Given a run whose summary reads its latest 2 records of 3 batches, and the first batch's share refused
    progress.batches = 3
    progress.unpublished[(0, "events")] = ("abandoned", "table refused the schema change")
    progress.unpublished[(2, "events")] = ("deferred", "catalog out of reach")
    # Then the run fails, saying so, though the summary's records hold no refused file
    error = unpublished_error(0, progress, kept=2, workdir=Path("w"))
    assert error is not None and "1 table share of batches before the summary's" in error
    assert "make reconcile WORKDIR=w REQUEUE=1" in error
    # and a refused file of the summary's own records is said as before
    assert "2 files loaded but not published" in (unpublished_error(2, progress, kept=2, workdir=Path("w")) or "")
    # and when every batch's record is in the summary, or the share was only deferred, nothing more
    assert unpublished_error(0, progress, kept=3, workdir=Path("w")) is None
    del progress.unpublished[(0, "events")]
    assert unpublished_error(0, progress, kept=2, workdir=Path("w")) is None


def test_the_elements_of_an_array_line_are_one_line_of_the_summary() -> None:
    # Given a file whose line 1 is [1,2,3] (read as a document: three records, all of line 1)
    record = _record(0, _source("arr.json", "ingested", 2).model_copy(update={"bad_records": 4}))
    bad = {"kind": "line", "source_uri": "s3://local-landing/arr.json", "line": 1}
    reason = "record is a JSON scalar, expected an object"
    quarantined = [{**bad, "reason": reason}] * 3 + [{**bad, "line": 4, "reason": "malformed JSON"}]
    text = render(_report(record, quarantined=quarantined), here=Path("/"))
    # Then the line is listed once, with its count
    listed = [x for x in text.splitlines() if "line quarantined" in x]
    assert listed == [
        f"  line quarantined   d/arr.json:1  {reason} (3 records of the line)",
        "  line quarantined   d/arr.json:4  malformed JSON",
    ], text
    # And the headline counts two lines, of four records (the record says 4 bad records)
    assert "2 lines quarantined (4 records)" in text.splitlines()[0], text


def test_the_headline_counts_records_when_the_summary_holds_only_the_first_quarantined() -> None:
    # Given a file with 500 bad lines, of which the summary reads the first few
    record = _record(0, _source("a.ndjson", "ingested", 2).model_copy(update={"bad_records": 500}))
    first = [{"kind": "line", "source_uri": "s3://local-landing/a.ndjson", "line": n, "reason": "x"} for n in range(3)]
    text = render(_report(record, quarantined=first), here=Path("/"))
    # Then it says the count in the unit it has, not lines it cannot tell apart
    assert "500 records quarantined" in text.splitlines()[0], text
