"""The batch path on local Spark: manifests -> Parquet, exactly once."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from contracts.ledger import Stage
from contracts.manifest import Manifest, ManifestEntry
from glue_processor.batch import ManifestBatchJob
from glue_processor.local.buckets import LocalBuckets
from glue_processor.metrics.timing import Step
from glue_processor.settings import JobSettings, settings_from_mapping
from glue_processor.shared.names import LINEAGE_COLUMNS
from tests.helpers import read_rows, visible_parquet

pytestmark = pytest.mark.spark
BUCKET = "landing"
T0 = datetime(2026, 11, 22, 12, 0, tzinfo=UTC)


class Env:
    def __init__(self, root: Path, **overrides: str) -> None:
        self.root = root
        self.buckets = LocalBuckets(root / "buckets")
        self.settings: JobSettings = settings_from_mapping(
            {
                "manifest_uri": (root / "manifests").as_uri(),
                "output_uri": (root / "output").as_uri(),
                "quarantine_uri": (root / "quarantine").as_uri(),
                "checkpoint_uri": (root / "checkpoint").as_uri(),
                "source_uri_template": self.buckets.uri_template(),
                **overrides,
            }
        )

    def put(self, key: str, body: bytes) -> ManifestEntry:
        self.buckets.put(BUCKET, key, body, content_type="application/x-ndjson")
        # S3 sends the event after the write: an event time before the object's mtime means "overwritten".
        now = datetime.now(UTC)
        return ManifestEntry(bucket=BUCKET, key=key, size=len(body), etag=hashlib.md5(body).hexdigest(), event_time=now)

    def manifest(self, name: str, entries: list[ManifestEntry]) -> tuple[str, str]:
        return (f"file:///manifests/{name}.json", Manifest.of(entries).to_json().decode())

    def job(self, spark: Any) -> ManifestBatchJob:
        return ManifestBatchJob(spark, self.settings, query_id="0123456789abcdef")

    def quarantine(self) -> list[dict[str, Any]]:
        rows = []
        for path in sorted((self.root / "quarantine").rglob("*.json")):
            if any(p.startswith(("_", ".")) for p in path.relative_to(self.root / "quarantine").parts):
                continue
            rows.extend(json.loads(line) for line in path.read_text().splitlines() if line)
        return rows


def expected_rows(key: str, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the job promises: every top-level field as a string, nested values as JSON text."""
    out = []
    for n, rec in enumerate(records, start=1):
        fields = {
            k: (
                v
                if isinstance(v, str)
                else None
                if v is None
                else json.dumps(v, separators=(",", ":")).lower()
                if isinstance(v, bool)
                else json.dumps(v, separators=(",", ":"))
            )
            for k, v in rec.items()
        }
        out.append({"fields": fields, "_source_uri": f"s3://{BUCKET}/{key}", "_line": n})
    return out


def actual_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    lineage = {"_source_uri", "_source_etag", "_line", "_event_time", "_batch_id", "_ingest_time", "dt"}
    return [
        {
            "fields": {k: v for k, v in r.items() if k not in lineage and v is not None},
            "_source_uri": r["_source_uri"],
            "_line": r["_line"],
        }
        for r in rows
    ]


def drop_nulls(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**r, "fields": {k: v for k, v in r["fields"].items() if v is not None}} for r in rows]


def key_of(row: dict[str, Any]) -> tuple[str, int]:
    return (row["_source_uri"], row["_line"])


def test_parquet_holds_exactly_the_input_records(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    # Given files with known content: nested values, a field whose type drifts, odd key names, gzip
    a = [
        {"id": 1, "user": {"name": "ana", "tags": ["x", "y"]}, "amount": 10},
        {"id": 2, "amount": "10", "ok": True},
    ]
    b = [{"id": 3, "note": None, "items": [{"sku": "s", "qty": 2}]}, {"id": 4, "ünïcode key": "välue"}]
    entries = [
        env.put("in/a file+1 %.json", "".join(json.dumps(r) + "\n" for r in a).encode()),
        env.put("in/ü/b.json.gz", gzip.compress("".join(json.dumps(r) + "\n" for r in b).encode())),
    ]

    # When one batch processes their manifest
    record = env.job(spark).run([env.manifest("m1", entries)], 0)

    # Then the Parquet rows equal the input records, with lineage
    rows = read_rows(tmp_path / "output")
    want = drop_nulls(expected_rows("in/a file+1 %.json", a) + expected_rows("in/ü/b.json.gz", b))
    assert sorted(actual_rows(rows), key=key_of) == sorted(want, key=key_of)
    assert {r["_batch_id"] for r in rows} == {0}
    assert {r["_source_etag"] for r in rows} == {e.etag for e in entries}
    assert record.stats.records_out == 4 and record.stats.bad_records == 0
    assert [s.status for s in record.sources] == ["ingested", "ingested"]


def test_rerunning_a_committed_batch_leaves_no_duplicates(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    manifest = env.manifest("m1", [env.put("in/x.json", b'{"a":1}\n{"a":2}\n')])
    job = env.job(spark)
    first = job.run([manifest], 5)
    again = job.run([manifest], 5)  # the same batch id after a crash before Spark's own commit
    assert again.attempt == first.attempt
    assert sorted(r["a"] for r in read_rows(tmp_path / "output")) == ["1", "2"]


def test_killed_attempt_leftovers_are_discarded(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    manifest = env.manifest("m1", [env.put("in/x.json", b'{"a":1}\n')])
    job = env.job(spark)
    # Given a killed attempt that staged a Parquet file but never committed
    staged = Path(job.committer().staging_uri(env.settings.output_uri, 3, "deadbeef").removeprefix("file://"))
    staged.mkdir(parents=True)
    (staged / "part-00000-x.parquet").write_bytes(b"half-written")
    # When the batch re-runs
    job.run([manifest], 3)
    # Then only the committed attempt's rows are visible, and the staging area is gone
    assert [r["a"] for r in read_rows(tmp_path / "output")] == ["1"]
    assert not staged.exists()


@pytest.mark.parametrize("table_format", ["iceberg", "hive-parquet"])
def test_crash_between_commit_and_publish_is_finished_by_the_rerun(
    spark: Any, tmp_path: Path, table_format: str
) -> None:
    env = Env(tmp_path, table_format=table_format)
    manifest = env.manifest("m1", [env.put("in/x.json", b'{"a":1}\n{"a":2}\n')])
    job = env.job(spark)
    committer = job.committer()
    published: list[Any] = []
    # Given an attempt that wrote its commit record and then died before moving any file
    committer.publish_share = lambda record, share, written_files=None: published.append(record)  # type: ignore[method-assign]
    committer.settle = lambda record: None  # type: ignore[method-assign]
    job.committer = lambda query_id=None: committer  # type: ignore[method-assign]
    job.run([manifest], 9)
    assert published and read_rows(tmp_path / "output") == []
    # When the batch id runs again, Then its files are published once
    env.job(spark).run([manifest], 9)
    assert sorted(r["a"] for r in read_rows(tmp_path / "output")) == ["1", "2"]
    # And again (a crash after the publication, before Spark's checkpoint): still once
    env.job(spark).run([manifest], 9)
    assert sorted(r["a"] for r in read_rows(tmp_path / "output")) == ["1", "2"]


def test_a_commit_record_write_killed_before_its_rename_does_not_stop_a_restart(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    job.run([env.manifest("m1", [env.put("in/x.json", b'{"a":1}\n')])], 0)
    # Given the empty temporary file a kill -9 leaves when it lands between create and rename
    commits = Path(job.committer().commits_dir().removeprefix("file://"))
    (commits / ".tmp-000000000001.json").write_bytes(b"")
    # When a restarted job resumes (it reads back its recent commit records) and runs the next batch
    env.job(spark).run([env.manifest("m2", [env.put("in/y.json", b'{"a":2}\n')])], 1)
    # Then both batches' rows are there
    assert sorted(r["a"] for r in read_rows(tmp_path / "output")) == ["1", "2"]


def snapshotting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int) -> Env:
    """An Env whose jobs snapshot their memory every ``every`` batches (60 in production)."""
    from glue_processor.plan import memory

    monkeypatch.setattr(memory, "DEDUPE_SNAPSHOT_BATCHES", every)
    return Env(tmp_path)


def test_a_restart_rebuilds_the_dedupe_index_from_its_snapshot_not_from_the_history(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = snapshotting(tmp_path, monkeypatch, 2)
    job = env.job(spark)
    first = env.put("in/a.json", b'{"a":1}\n')
    job.run([env.manifest("m0", [first])], 0)
    job.run([env.manifest("m1", [env.put("in/b.json", b'{"b":2}\n')])], 1)  # the snapshot covers 0-1
    job.run([env.manifest("m2", [env.put("in/c.json", b'{"c":3}\n')])], 2)
    # Given the commit records the snapshot covers are gone (a restart must not need them)
    commits = Path(job.committer().commits_dir().removeprefix("file://"))
    for name in ("000000000000.json", "000000000001.json"):
        (commits / name).unlink()
    # When a restarted job is handed the first object again
    restarted = env.job(spark)
    record = restarted.run([env.manifest("m3", [first])], 3)
    # Then it knows it was ingested, and the keys learnt before the restart are still columns
    assert [(s.key, s.status) for s in record.sources] == [("in/a.json", "duplicate")]
    assert restarted.known_keys >= {"a", "b", "c"}


def test_a_restart_after_a_pause_longer_than_the_dedupe_window_keeps_the_keys_learnt_since_the_snapshot(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime, timedelta

    from glue_processor.plan import memory

    env = snapshotting(tmp_path, monkeypatch, 2)
    job = env.job(spark)
    job.run([env.manifest("m0", [env.put("in/a.json", b'{"kind":1}\n')])], 0)
    job.run([env.manifest("m1", [env.put("in/b.json", b'{"b":2}\n')])], 1)  # the snapshot covers 0-1
    job.run([env.manifest("m2", [env.put("in/c.json", b'{"Region":3}\n')])], 2)  # after it
    # Given a restart after a pause longer than the dedupe window (every record is older than it)
    monkeypatch.setattr(memory.Memory, "_window_start", lambda self: datetime.now(UTC) + timedelta(seconds=1))
    restarted = env.job(spark)
    # When a batch brings another case of a key learnt after the snapshot
    restarted.run([env.manifest("m3", [env.put("in/d.json", b'{"region":4}\n')])], 3)
    # Then that key was still known: the variant went to _extra, not to a second column (which a
    # case-insensitive catalog refuses); it used to be forgotten with every record past the window
    assert restarted.known_keys >= {"kind", "b", "Region"}
    assert "region" not in restarted.known_keys
    rows = read_rows(tmp_path / "output")
    assert not any("region" in r for r in rows)
    assert [r["Region"] for r in rows if r.get("Region") is not None] == ["3"]


def test_runs_shorter_than_a_snapshot_s_batches_still_snapshot(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a restart replays the records since the latest snapshot; runs restarted (resized) before they
    # publish DEDUPE_SNAPSHOT_BATCHES batches each must not let those records pile up
    from glue_processor.plan.dedupe import load_snapshot

    env = snapshotting(tmp_path, monkeypatch, 3)
    records = []
    job = env.job(spark)
    for batch in range(5):  # a run of two batches, then runs of one
        if batch > 1:
            job = env.job(spark)
        records.append(job.run([env.manifest(f"m{batch}", [env.put(f"in/{batch}.json", b'{"a":1}\n')])], batch))
    snapshot = load_snapshot(env.settings.output_uri)
    assert snapshot is not None and snapshot[2] == records[2].committed_at  # after batches 0-2, across runs


@pytest.mark.parametrize("table_format", ["iceberg", "hive-parquet"])
def test_two_runs_racing_on_a_batch_publish_it_once(spark: Any, tmp_path: Path, table_format: str) -> None:
    from contracts.exceptions import FencedOut

    env = Env(tmp_path, table_format=table_format)
    manifest = env.manifest("m1", [env.put("in/x.json", b'{"a":1}\n{"a":2}\n')])
    slow, fast = env.job(spark), env.job(spark)  # two job runs on one checkpoint (same query id)
    # Given the slow run started (resumed, found no commit record for the batch) before the fast one
    slow.resume()
    slow._resumed = True
    slow.committer = lambda real=slow.committer: _not_committed_yet(real())  # type: ignore[method-assign]
    # ...and the fast run committed the batch meanwhile
    fast.run([manifest], 4)
    published = sorted(p.name for p in visible_parquet(tmp_path / "output"))
    # When the slow run, having computed the same batch, reaches its commit point
    with pytest.raises(FencedOut, match="committed by another run"):
        slow.run([manifest], 4)
    # Then it published nothing and deleted nothing: each record is there once, in the winner's files
    assert sorted(p.name for p in visible_parquet(tmp_path / "output")) == published
    assert sorted(r["a"] for r in read_rows(tmp_path / "output")) == ["1", "2"]
    on_disk = {  # the table's files (the load history, beside it, is another table)
        p.name
        for p in (tmp_path / "output").rglob("*.parquet")
        if "_staging" not in str(p) and "load_history" not in p.parts
    }
    if table_format == "iceberg":
        # the loser wrote in place under the table, and removed its files: none is left for clean-up
        assert on_disk == set(published)
    else:
        staged = list((tmp_path / "output" / "_staging").rglob("*.parquet"))
        assert staged, "the loser staged its own attempt (left for the lifecycle rule)"
    # And losing is not a failure of the batch (no poison count)
    assert slow.fenced and not (tmp_path / "output" / "_failures").exists()


def _not_committed_yet(committer: Any) -> Any:
    committer.load = lambda batch_id: None
    return committer


def test_bad_manifest_and_missing_object_are_quarantined_and_the_rest_loaded(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    good = env.put("in/good.json", b'{"a":1}\nnot json\n')
    gone = ManifestEntry(bucket=BUCKET, key="in/gone.json", size=5, etag="e", event_time=T0)
    record = env.job(spark).run([env.manifest("m1", [good, gone]), ("file:///manifests/broken.json", "{truncated")], 0)
    assert [r["a"] for r in read_rows(tmp_path / "output")] == ["1"]
    q = {(r["kind"], r["source_uri"], r.get("line")): r["reason"] for r in env.quarantine()}
    assert q[("line", "s3://landing/in/good.json", 2)] == "malformed JSON"
    assert "not found" in q[("file", "s3://landing/in/gone.json", None)]
    assert "invalid manifest" in q[("manifest", "file:///manifests/broken.json", None)]
    assert record.stats.bad_manifests == 1 and record.stats.missing_files == 1 and record.stats.bad_records == 1


def test_output_files_follow_the_target_size(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path, target_file_mb="1")
    rng = random.Random(3)

    def body(n: int) -> bytes:
        recs = ({"id": i, "blob": rng.randbytes(300).hex(), "v": rng.random()} for i in range(n))
        return "".join(json.dumps(r) + "\n" for r in recs).encode()

    job = env.job(spark)
    # the first batch teaches the job this data's Parquet/NDJSON ratio
    first = job.run([env.manifest("m0", [env.put(f"in/warm{i}.json", body(1500)) for i in range(2)])], 0)
    record = job.run([env.manifest("m1", [env.put(f"in/f{i}.json", body(1500)) for i in range(8)])], 1)
    sizes = [f.bytes for f in record.data_files]
    assert len(sizes) >= 3
    mb = 1024 * 1024
    assert all(0.6 * mb <= s <= 1.4 * mb for s in sizes), str(sizes)
    assert len(visible_parquet(tmp_path / "output")) == len(sizes) + len(first.data_files)


def test_a_new_key_adds_a_column_and_the_schema_survives_a_restart(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    # Given a first batch that teaches the job the key "a"
    first = job.run([env.manifest("m0", [env.put("in/0.json", b'{"a":1}\n')])], 0)
    assert first.tables[0].keys == ("a",)
    # When a later batch brings a new key "b" (written in a second pass)
    second = job.run([env.manifest("m1", [env.put("in/1.json", b'{"a":2,"b":"x"}\n{"a":3}\n')])], 1)
    # Then no value of "b" is lost, and the schema only grows
    assert second.tables[0].keys == ("a", "b")
    rows = {(r["a"], r["b"]) for r in read_rows(tmp_path / "output") if r["_batch_id"] == 1}
    assert rows == {("2", "x"), ("3", None)}
    assert second.stats.records_out == 2 and second.stats.columns == 2
    # And a restarted job starts from the schema it had: a batch without "b" still has its column
    restarted = env.job(spark)
    third = restarted.run([env.manifest("m2", [env.put("in/2.json", b'{"a":4}\n')])], 2)
    assert third.tables[0].keys == ("a", "b")
    (row,) = (r for r in read_rows(tmp_path / "output") if r["_batch_id"] == 2)
    assert (row["a"], row["b"]) == ("4", None)


def test_counts_per_file_match_the_rows_written_and_the_lines_quarantined(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    entries = [
        env.put("in/clean.json", b'{"a":1}\n{"a":2}\n{"a":3}\n'),
        env.put("in/mixed.json", b'{"a":1}\nnope\n\n{"a":2,"a":5}\n[1]\n'),
        env.put("in/blank.json", b"\n  \n"),
    ]
    record = env.job(spark).run([env.manifest("m0", entries)], 0)
    by_key = {s.key: (s.status, s.records, s.bad_records) for s in record.sources}
    assert by_key == {
        "in/clean.json": ("ingested", 3, 0),
        "in/mixed.json": ("ingested", 2, 2),
        "in/blank.json": ("empty", 0, 0),
    }
    assert sorted(r["a"] for r in read_rows(tmp_path / "output")) == ["1", "1", "2", "3", "5"]
    assert sorted((q["source_uri"], q["line"]) for q in env.quarantine()) == [
        ("s3://landing/in/mixed.json", 2),
        ("s3://landing/in/mixed.json", 5),
    ]


def test_a_key_found_by_one_task_is_a_column_of_every_file(spark: Any, tmp_path: Path) -> None:
    # Given two objects read by two tasks, where only the second has the key "extra"
    env = Env(tmp_path, target_file_mb="1")
    rng = random.Random(5)

    def body(n: int, extra: bool) -> bytes:
        recs = ({"id": i, "blob": rng.randbytes(200).hex(), **({"extra": i} if extra else {})} for i in range(n))
        return "".join(json.dumps(r) + "\n" for r in recs).encode()

    entries = [env.put("in/plain.json", body(9000, False)), env.put("in/extra.json", body(9000, True))]
    job = env.job(spark)
    record = job.run([env.manifest("m0", entries)], 0)
    # Then every file of the batch has the same columns, and no value is lost
    files = visible_parquet(tmp_path / "output")
    assert len(files) >= 2
    schemas = {tuple(pq.read_schema(f).names) for f in files}
    assert schemas == {("blob", "extra", "id", *LINEAGE_COLUMNS, "_extra")}
    rows = read_rows(tmp_path / "output")
    assert sum(1 for r in rows if r["extra"] is not None) == 9000 == record.stats.records_out - 9000
    # And the batch timed its stages and its driver steps by the names the benches read them by
    # (foreachBatch's own steps, total and collect, are __call__'s, not run's)
    assert set(record.stats.stage_s) == {Stage.READ_PARSE_WRITE, Stage.WRITE, Stage.WRITE_QUARANTINE}
    assert record.stats.parallel_s == record.stats.stage_s[Stage.READ_PARSE_WRITE] + record.stats.stage_s[Stage.WRITE]
    assert set(job.steps.seconds) == set(Step.IN_ORDER) - {Step.COLLECT}


def test_two_versions_of_one_key_in_a_batch_each_get_their_own_record(spark: Any, tmp_path: Path) -> None:
    # Given an object written twice, both events in one batch (the first version already gone)
    env = Env(tmp_path)
    first = env.put("in/x.json", b'{"v":1}\n')
    first = first.model_copy(update={"event_time": datetime(2020, 1, 1, tzinfo=UTC)})  # before the rewrite
    second = env.put("in/x.json", b'{"v":2}\n{"v":3}\n')
    # When the batch runs
    record = env.job(spark).run([env.manifest("m0", [first, second])], 0)
    # Then each version has its own record: the first superseded, the second loaded
    by_etag = {s.etag: (s.status, s.records) for s in record.sources}
    assert by_etag == {first.etag: ("superseded", 0), second.etag: ("ingested", 2)}
    assert sorted(r["v"] for r in read_rows(tmp_path / "output")) == ["2", "3"]


def test_a_batch_whose_files_hold_fewer_rows_than_were_parsed_is_not_committed(spark: Any, tmp_path: Path) -> None:
    import dataclasses

    from contracts.exceptions import RowsLost
    from glue_processor import batch as batch_module

    env = Env(tmp_path, target_file_mb="8")  # parts of 1 MB: a task stages several
    job = env.job(spark)
    real = job._spark_map

    def lose_a_part(fn: Any, items: Any) -> Any:
        results = real(fn, items)
        if fn is batch_module.run_task:  # a defect that drops a part on the floor
            results = [dataclasses.replace(r, data=r.data[1:]) for r in results]
        return results

    job._spark_map = lose_a_part  # type: ignore[method-assign]
    body = "".join(json.dumps({"a": i, "pad": "x" * 4000}) + "\n" for i in range(8000)).encode()
    manifest = env.manifest("m1", [env.put("in/x.json", body)])
    # When the batch runs, Then it fails before its commit record, saying how many rows are missing
    with pytest.raises(RowsLost, match=r"hold \d+ rows, its tasks parsed 8000"):
        job.run([manifest], 0)
    assert not list((tmp_path / "output" / "_commits").rglob("*.json"))
