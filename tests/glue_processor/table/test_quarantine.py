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
