"""A table that mirrors its bucket (issue 44, docs/mirror.md), through the batch path on local Spark.

A later version of a key replaces its rows in the commit that adds the new ones; the same bytes
again, or an earlier version arriving late, change nothing; an append table keeps both.
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from contracts.manifest import ManifestEntry
from glue_processor.table.read import load, published_files
from tests.glue_processor.test_batch import BUCKET, T0, Env

pytestmark = pytest.mark.spark


def lines(*records: dict[str, Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def entry(env: Env, key: str, body: bytes, *, at: int, sequencer: str | None = None) -> ManifestEntry:
    """An event of ``body`` at ``key`` written at T0 + ``at`` seconds (the object is written now)."""
    env.buckets.put(BUCKET, key, body, content_type="application/x-ndjson")
    path = env.root / "buckets" / BUCKET / key
    stamp = (T0 + timedelta(seconds=at)).timestamp()
    import os

    os.utime(path, (stamp, stamp))
    return ManifestEntry(
        bucket=BUCKET,
        key=key,
        size=len(body),
        etag=hashlib.md5(body).hexdigest(),
        event_time=T0 + timedelta(seconds=at),
        sequencer=sequencer,
    )


def table_rows(env: Env) -> list[dict[str, Any]]:
    """The rows a reader of the table's current snapshot sees."""
    return [r for path in published_files(env.root / "output") for r in pq.read_table(path).to_pylist()]


def history(env: Env) -> list[dict[str, Any]]:
    return load(env.settings, "load_history").scan().to_arrow().to_pylist()


def test_a_later_version_replaces_the_rows_of_the_one_loaded_in_one_commit(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    # Given a key loaded with three lines, beside another key
    v1 = entry(env, "a.json", lines({"n": 1}, {"n": 2}, {"n": 3}), at=0, sequencer="0A")
    other = entry(env, "b.json", lines({"n": 9}), at=0, sequencer="0B")
    job.run([env.manifest("m0", [v1, other])], 0)
    assert sorted(r["n"] for r in table_rows(env)) == ["1", "2", "3", "9"]
    before = load(env.settings).current_snapshot()
    # When a later version of it, with two lines, is committed
    v2 = entry(env, "a.json", lines({"n": 10}, {"n": 20}), at=60, sequencer="0C")
    record = job.run([env.manifest("m1", [v2])], 1)
    # Then the table holds the later version's rows and the other key's, no row of the first version
    rows = table_rows(env)
    assert sorted((r["_source_uri"][-6:], r["n"]) for r in rows) == [
        ("a.json", "10"),
        ("a.json", "20"),
        ("b.json", "9"),
    ]
    # in one commit after the first batch's: a reader sees the old rows or the new, never both or neither
    table = load(env.settings)
    snapshot = table.current_snapshot()
    assert snapshot is not None and before is not None and snapshot.parent_snapshot_id == before.snapshot_id
    assert snapshot.summary is not None and snapshot.summary.operation.value == "overwrite"
    # And the record and the load history say which version it replaced
    (share,) = record.tables
    assert [(r.key, r.etag, r.by_etag) for r in share.replaced] == [("a.json", v1.etag, v2.etag)]
    assert share.stats.rows_removed == 3
    replaced = [h for h in history(env) if h["status"] == "replaced"]
    assert [(h["key"], h["etag"], h["batch_id"]) for h in replaced] == [("a.json", v1.etag, 1)]
    assert v2.etag in replaced[0]["reason"]


def test_the_same_bytes_again_or_an_earlier_version_late_change_nothing(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    v1 = entry(env, "a.json", lines({"n": 1}), at=0, sequencer="01")
    job.run([env.manifest("m0", [v1])], 0)
    v2 = entry(env, "a.json", lines({"n": 2}), at=60, sequencer="02")
    job.run([env.manifest("m1", [v2])], 1)
    # Given the later version's event delivered again, and the earlier version's arriving late
    record = job.run([env.manifest("m2", [v2, v1])], 2)
    # Then neither is read: the same bytes are a duplicate, the earlier one is superseded
    status = {(s.etag, s.status) for s in record.sources}
    assert status == {(v2.etag, "duplicate"), (v1.etag, "superseded")}
    assert [r["n"] for r in table_rows(env)] == ["2"]


def test_two_versions_in_one_batch_load_the_later_only(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    v1 = entry(env, "a.json", lines({"n": 1}), at=0, sequencer="0001")
    # (the object holds the later bytes: the earlier version is gone, as on a bucket without versions)
    v2 = entry(env, "a.json", lines({"n": 2}), at=1, sequencer="0002")
    record = job.run([env.manifest("m0", [v1, v2])], 0)
    assert {(s.etag, s.status) for s in record.sources} == {(v1.etag, "superseded"), (v2.etag, "ingested")}
    assert [r["n"] for r in table_rows(env)] == ["2"]


def test_an_append_table_keeps_every_version(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path, on_overwrite="append")
    job = env.job(spark)
    job.run([env.manifest("m0", [entry(env, "a.json", lines({"n": 1}), at=0)])], 0)
    job.run([env.manifest("m1", [entry(env, "a.json", lines({"n": 2}), at=60)])], 1)
    assert sorted(r["n"] for r in table_rows(env)) == ["1", "2"]


def removal(key: str, *, at: int, sequencer: str | None = None) -> ManifestEntry:
    """A deletion of ``key`` (s3:ObjectRemoved:Delete), as the manifest builder lists it."""
    return ManifestEntry(
        bucket=BUCKET,
        key=key,
        size=0,
        etag=f"removed-{sequencer or at}",
        event_time=T0 + timedelta(seconds=at),
        sequencer=sequencer,
        event="removed",
    )


def test_a_deletion_retracts_the_keys_rows_in_a_commit_of_its_own(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path, on_delete="retract")
    job = env.job(spark)
    v1 = entry(env, "a.json", lines({"n": 1}, {"n": 2}), at=0, sequencer="0A")
    job.run([env.manifest("m0", [v1, entry(env, "b.json", lines({"n": 9}), at=0, sequencer="0B")])], 0)
    # When the key is deleted (a batch with nothing else in it)
    record = job.run([env.manifest("m1", [removal("a.json", at=60, sequencer="0C")])], 1)
    # Then its rows are gone, the other key's stay, and the history says the version was retracted
    assert [r["n"] for r in table_rows(env)] == ["9"]
    (share,) = record.tables
    assert [(r.key, r.etag, r.status) for r in share.replaced] == [("a.json", v1.etag, "retracted")]
    assert {(s.key, s.status) for s in record.sources} == {("a.json", "deleted")}
    assert [(h["key"], h["etag"]) for h in history(env) if h["status"] == "retracted"] == [("a.json", v1.etag)]
    # And a deletion delivered again, or an older version arriving after it, changes nothing
    late = entry(env, "a.json", lines({"n": 5}), at=30, sequencer="0B")
    again = job.run([env.manifest("m2", [removal("a.json", at=60, sequencer="0C"), late])], 2)
    assert {s.status for s in again.sources} <= {"deleted", "superseded"}
    assert [r["n"] for r in table_rows(env)] == ["9"]
    # And the key uploaded again after the deletion is loaded
    v3 = entry(env, "a.json", lines({"n": 3}), at=120, sequencer="0D")
    job.run([env.manifest("m3", [v3])], 3)
    assert sorted(r["n"] for r in table_rows(env)) == ["3", "9"]


def test_a_deletion_on_a_table_that_keeps_changes_nothing(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    job.run([env.manifest("m0", [entry(env, "a.json", lines({"n": 1}), at=0, sequencer="01")])], 0)
    record = job.run([env.manifest("m1", [removal("a.json", at=60, sequencer="02")])], 1)
    assert [(s.status, s.reason) for s in record.sources] == [
        ("deleted", "deleted from the bucket: its rows stay (on_delete: keep)")
    ]
    assert [r["n"] for r in table_rows(env)] == ["1"]


def test_replacements_past_the_rewrite_bound_are_carried_to_a_later_batch(spark: Any, tmp_path: Path) -> None:
    import random

    env = Env(tmp_path, max_rewrite_mb_per_batch="1")
    job = env.job(spark)
    rng = random.Random(44)

    def big(tag: str) -> bytes:  # ~1.2 MB of Parquet: a key's rows alone fill the 1 MiB bound
        return lines(*({"n": tag, "pad": rng.randbytes(100).hex()} for _ in range(12_000)))

    # Given two keys, each loaded by a batch of its own (each in its own data file)
    job.run([env.manifest("m0", [entry(env, "a.json", big("a1"), at=0, sequencer="01")])], 0)
    job.run([env.manifest("m1", [entry(env, "b.json", big("b1"), at=0, sequencer="02")])], 1)
    # When one batch brings a later version of both
    a2 = entry(env, "a.json", lines({"n": "a2"}), at=60, sequencer="03")
    b2 = entry(env, "b.json", lines({"n": "b2"}), at=60, sequencer="04")
    record = job.run([env.manifest("m2", [a2, b2])], 2)
    # Then the first is replaced and the second carried over: not read, its old rows still whole
    assert {(s.key, s.status) for s in record.sources} == {("a.json", "ingested"), ("b.json", "carried")}
    assert sorted({r["n"] for r in table_rows(env)}) == ["a2", "b1"]
    assert record.stats.rewrite_bytes > 1024 * 1024
    # And a manifest of its own lists it for a later batch, which replaces it: nothing lost
    (carried,) = [p for p in (env.root / "manifests").iterdir() if "-carried-" in p.name]
    job.run([(carried.as_uri(), carried.read_text())], 3)
    assert sorted({r["n"] for r in table_rows(env)}) == ["a2", "b2"]


def test_tail_loads_only_the_lines_a_version_appends(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path, on_overwrite="tail")
    job = env.job(spark)
    v1 = entry(env, "log.json", lines({"n": 1}, {"n": 2}, {"n": 3}), at=0, sequencer="01")
    job.run([env.manifest("m0", [v1])], 0)
    # When lines are appended to it
    v2 = entry(env, "log.json", lines({"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}, {"n": 5}), at=60, sequencer="02")
    record = job.run([env.manifest("m1", [v2])], 1)
    # Then only lines 4 and 5 are read (numbered on), nothing is rewritten, each line is in the table once
    (source,) = record.sources
    assert (source.status, source.from_line, source.records) == ("ingested", 4, 2)
    assert record.stats.rewrite_bytes == 0 and not record.tables[0].replaced
    assert sorted((r["_line"], r["n"], r["_source_etag"]) for r in table_rows(env)) == [
        (1, "1", v1.etag),
        (2, "2", v1.etag),
        (3, "3", v1.etag),
        (4, "4", v2.etag),
        (5, "5", v2.etag),
    ]
    # And a version that changes a line it had (not an extension) is replaced whole
    v3 = entry(
        env, "log.json", lines({"n": 0}, {"n": 2}, {"n": 3}, {"n": 4}, {"n": 5}, {"n": 6}), at=120, sequencer="03"
    )
    third = job.run([env.manifest("m2", [v3])], 2)
    assert third.sources[0].from_line == 1 and third.tables[0].stats.rows_removed == 5
    assert sorted((r["_line"], r["n"]) for r in table_rows(env)) == [
        (i + 1, str(n)) for i, n in enumerate([0, 2, 3, 4, 5, 6])
    ]


def test_tail_over_a_torn_last_line_reads_that_line_again_whole(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path, on_overwrite="tail")
    job = env.job(spark)
    # Given a version whose last line has no line end yet: valid JSON (a row) in one key, cut JSON
    # (a quarantined line) in the other
    job.run(
        [
            env.manifest(
                "m0",
                [
                    entry(env, "a.json", b'{"n":1}\n{"n":2}', at=0, sequencer="01"),
                    entry(env, "b.json", b'{"n":1}\n{"n":', at=0, sequencer="02"),
                ],
            )
        ],
        0,
    )
    assert sorted((r["_source_uri"][-6:], r["_line"]) for r in table_rows(env)) == [
        ("a.json", 1),
        ("a.json", 2),
        ("b.json", 1),
    ]
    # When both are extended: the torn line completed, one more after it
    a2 = entry(env, "a.json", b'{"n":1}\n{"n":2}\n{"n":3}\n', at=60, sequencer="03")
    b2 = entry(env, "b.json", b'{"n":1}\n{"n":2}\n{"n":3}\n', at=60, sequencer="04")
    record = job.run([env.manifest("m1", [a2, b2])], 1)
    # Then each is read from its torn line on; the row the torn line left is replaced, nothing doubled
    assert {(s.key, s.from_line) for s in record.sources} == {("a.json", 2), ("b.json", 2)}
    assert sorted((r["_source_uri"][-6:], r["_line"], r["n"]) for r in table_rows(env)) == [
        ("a.json", 1, "1"),
        ("a.json", 2, "2"),
        ("a.json", 3, "3"),
        ("b.json", 1, "1"),
        ("b.json", 2, "2"),
        ("b.json", 3, "3"),
    ]
    torn = [h["reason"] for h in history(env) if h["status"] == "replaced"]
    assert len(torn) == 2 and all("torn last line 2 is read again whole" in why for why in torn)


def test_after_load_archives_what_it_loaded_whole_once_published(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path, after_load="archive", on_delete="retract")
    job = env.job(spark)
    landing = env.root / "buckets" / BUCKET
    good = entry(env, "in/a.json", lines({"n": 1}), at=0, sequencer="01")
    bad = entry(env, "in/b.json.gz", b"not gzip", at=0, sequencer="02")  # quarantined whole: stays
    job.run([env.manifest("m0", [good, bad])], 0)
    # Then the object loaded whole is under the archive prefix, the other where it was
    assert not (landing / "in/a.json").exists() and (landing / "archive/in/a.json").read_bytes() == lines({"n": 1})
    assert (landing / "in/b.json.gz").exists()
    # And the deletion this causes (a retracting table) keeps the rows: it is not a retraction
    record = job.run([env.manifest("m1", [removal("in/a.json", at=60, sequencer="03")])], 1)
    assert [(s.status, s.reason) for s in record.sources] == [
        ("deleted", "moved or deleted by after_load once loaded: its rows stay")
    ]
    assert [r["n"] for r in table_rows(env)] == ["1"]
    # And a replay of the first batch's publication finds nothing left to move
    job.run([env.manifest("m0", [good, bad])], 0)
    assert (landing / "archive/in/a.json").exists() and not (landing / "archive/archive").exists()


def test_a_redelivered_event_from_before_the_key_index_is_still_a_duplicate(spark: Any, tmp_path: Path) -> None:
    # Given a table loaded by an earlier build (append: no key index), then run with the default (replace)
    before = Env(tmp_path, on_overwrite="append")
    v1 = entry(before, "a.json", lines({"n": 1}), at=0, sequencer="0A")
    before.job(spark).run([before.manifest("m0", [v1])], 0)
    after = Env(tmp_path)
    # When SQS delivers the same event again (at least once), the index knowing nothing of the key
    record = after.job(spark).run([after.manifest("m1", [v1])], 1)
    # Then the dedupe window answers for it: a duplicate, loaded once
    assert [(s.status, s.reason) for s in record.sources] == [("duplicate", "already ingested by batch 0")]
    assert [r["n"] for r in table_rows(after)] == ["1"]


def test_a_batch_that_replaces_many_keys_scans_the_table_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyiceberg.table import Table

    env = Env(tmp_path)
    job = env.job(spark)
    first = [entry(env, f"k{i}.json", lines({"n": i}), at=0, sequencer="01") for i in range(20)]
    job.run([env.manifest("m0", first)], 0)
    scans = []
    real = Table.scan

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        scans.append(kwargs.get("row_filter"))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Table, "scan", counted)
    later = [entry(env, f"k{i}.json", lines({"n": i + 100}), at=60, sequencer="02") for i in range(20)]
    record = job.run([env.manifest("m1", later)], 1)
    # Then the 20 replacements cost one scan to plan (and one at the commit), not one a key
    assert len(record.tables[0].replaced) == 20 and len(scans) <= 2, scans
