"""The Iceberg sink: one append per batch, exactly once, schema growth, compaction, the query."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from glue_processor.shared.names import LINEAGE_COLUMNS
from glue_processor.table.compact import compact, delete_orphans
from glue_processor.table.expiry import expire_snapshots
from glue_processor.table.iceberg import BATCH_ID, QUERY_ID, BatchAppended, IcebergSink, find_snapshot
from glue_processor.table.read import current_files, load, local_file
from tests.glue_processor.test_batch import Env
from tests.helpers import read_rows, visible_parquet

pytestmark = pytest.mark.spark


def _lines(*records: dict[str, Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _batch(env: Env, job: Any, n: int, **fields: str) -> None:
    """Batch ``n``: one object of one record, ``{"n": n}`` and ``fields``."""
    job.run([env.manifest(f"m{n}", [env.put(f"f{n}.json", _lines({"n": n, **fields}))])], n)


def _after_two_batches(spark: Any, tmp_path: Path) -> tuple[Env, Any]:
    """A job that ran batches 0 and 1 (a run's first commit to each table reads it, and is its
    first expiry round)."""
    env = Env(tmp_path)
    job = env.job(spark)
    for n in range(2):
        _batch(env, job, n)
    return env, job


def test_each_batch_is_one_snapshot_carrying_its_query_and_batch_id(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path, target_file_mb="1")
    job = env.job(spark)
    # Given two batches, the second with a key the first did not have
    job.run([env.manifest("m0", [env.put("a.json", _lines({"a": 1}, {"a": 2}))])], 0)
    job.run([env.manifest("m1", [env.put("b.json", _lines({"a": 3, "b": "x"}))])], 1)
    table = load(env.settings)
    # Then the table has one append snapshot per batch, with the ids in its summary
    appends = [s for s in table.metadata.snapshots if s.summary and s.summary[BATCH_ID] is not None]
    assert [(s.summary[QUERY_ID], s.summary[BATCH_ID]) for s in appends] == [
        ("0123456789abcdef", "0"),
        ("0123456789abcdef", "1"),
    ]
    assert [s.summary["added-records"] for s in appends] == ["2", "1"]
    # And the schema grew by the new key (strings), after the lineage columns; the name mapping follows
    names = [f.name for f in table.schema().fields]
    assert names[:6] == ["_source_uri", "_source_etag", "_line", "_event_time", "_batch_id", "_ingest_time"]
    assert names[6:] == ["_extra", "a", "b"] and str(table.schema().find_field("b").field_type) == "string"
    mapping = table.metadata.name_mapping()
    assert mapping is not None and {f.names[0] for f in mapping} >= {"a", "b"}
    # And its data files live under the table, partitioned by ingest day, with no file left staged
    for path in current_files(table):
        assert "/events/ingest/0123456789abcdef/00000000000" in path  # <table>/ingest/<query>/<batch>/<attempt>/
        assert f"/ingest_day={datetime.now(UTC):%Y-%m-%d}/" in path
    assert sorted((r["a"], r.get("b")) for r in read_rows(tmp_path / "output")) == [
        ("1", None),
        ("2", None),
        ("3", "x"),
    ]
    assert not list((tmp_path / "output" / "_staging").rglob("*.parquet"))


def test_a_rerun_of_a_committed_batch_appends_nothing(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    manifest = env.manifest("m0", [env.put("a.json", _lines({"a": 1}))])
    env.job(spark).run([manifest], 0)
    snapshots = len(load(env.settings).metadata.snapshots)
    # When a restarted run is handed the same batch id (Spark's checkpoint was not committed)
    env.job(spark).run([manifest], 0)
    # Then the table is unchanged
    assert len(load(env.settings).metadata.snapshots) == snapshots
    assert [r["a"] for r in read_rows(tmp_path / "output")] == ["1"]


def test_two_runs_finishing_the_same_batch_append_it_once(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    record = job.run([env.manifest("m0", [env.put("a.json", _lines({"a": 1}))])], 0)
    # Given a second run that loaded the table before the first run's append (a stale view)
    sink = job.sink
    assert isinstance(sink, IcebergSink)
    table = load(env.settings)
    stale = load(env.settings)
    stale.metadata = stale.metadata.model_copy(
        update={"snapshots": [], "refs": {}, "current_snapshot_id": None, "snapshot_log": []}
    )
    assert find_snapshot(stale.metadata, record.query_id, record.batch_id) is None
    # When it appends the same batch, Then the catalog refuses (the check is part of the commit)
    with pytest.raises(BatchAppended):
        sink._append(stale, record, record.tables[0], {})
    table.refresh()
    assert sum(1 for s in table.metadata.snapshots if s.summary and s.summary[BATCH_ID] == "0") == 1


def test_compaction_packs_a_day_of_small_batches_with_every_record_once(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    # Given a day of small batches (one small file each), with columns that changed over the day
    for n in range(6):
        body = _lines(*({"n": n, "i": i, **({"late": "y"} if n >= 3 else {})} for i in range(50)))
        job.run([env.manifest(f"m{n}", [env.put(f"f{n}.json", body)])], n)
    table = load(env.settings)
    before = sorted((r["_source_uri"], r["_line"], r.get("late")) for r in read_rows(tmp_path / "output"))
    small = current_files(table)
    assert len(small) == 6
    # When the (closed) day is compacted
    report = compact(table, target_bytes=128 * 1024 * 1024, today=datetime.now(UTC).date() + timedelta(days=1))
    # Then one commit replaced the six files by one, and every record is there once, columns intact
    assert (report.rewritten, report.written, report.files_after) == (6, 1, 1)
    table.refresh()
    assert table.current_snapshot().summary.operation.value == "overwrite"  # type: ignore[union-attr]
    assert len(current_files(table)) == 1
    after = sorted((r["_source_uri"], r["_line"], r.get("late")) for r in read_rows(tmp_path / "output"))
    assert after == before and len(after) == 300
    # And once the compaction's snapshot expires too (a batch came after it), the replaced files are
    # deleted with it (glue_processor/table/expiry.py)
    job.run([env.manifest("m6", [env.put("f6.json", _lines({"n": 6}))])], 6)
    table.refresh()
    assert expire_snapshots(table, now=datetime.now(UTC) + timedelta(days=2), keep=1).snapshots == 7
    assert not any(local_file(p).exists() for p in small)
    assert delete_orphans(table, older_than=timedelta(0), output_uri=env.settings.output_uri) == 0
    rows = sorted((r["_source_uri"], r["_line"], r.get("late")) for r in read_rows(tmp_path / "output"))
    assert [r for r in rows if not r[0].endswith("/f6.json")] == before and len(rows) == 301


def test_the_open_day_is_left_alone(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    for n in range(3):
        job.run([env.manifest(f"m{n}", [env.put(f"f{n}.json", _lines({"n": n}))])], n)
    report = compact(load(env.settings), target_bytes=128 * 1024 * 1024)
    assert report.rewritten == 0 and len(current_files(load(env.settings))) == 3


def test_orphans_under_data_are_removed_and_table_files_kept(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    env.job(spark).run([env.manifest("m0", [env.put("a.json", _lines({"a": 1}))])], 0)
    table = load(env.settings)
    kept = current_files(table)
    # Given a file a killed compaction wrote under data/, never committed
    orphan = Path(table.location().removeprefix("file://")) / "data" / "ingest_day=2026-01-01" / "compacted-x.parquet"
    orphan.parent.mkdir(parents=True)
    orphan.write_bytes(local_file(kept[0]).read_bytes())
    # Then a young orphan stays (a compaction may be in flight), an old one goes; table files stay
    output = env.settings.output_uri
    assert delete_orphans(table, older_than=timedelta(hours=1), output_uri=output) == 0 and orphan.exists()
    assert delete_orphans(table, older_than=timedelta(0), output_uri=output) == 1 and not orphan.exists()
    assert all(local_file(p).exists() for p in kept)


def test_a_killed_attempt_s_files_go_when_its_batch_is_published(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    job.sink.open()
    # Given the files an earlier attempt of batch 0 wrote under the table before it was killed
    where = job.sink.output_dir(datetime.now(UTC), query_id=job.query_id, batch_id=0, attempt="deadbeef0000")
    killed = Path(where.removeprefix("file://"))
    (killed / "ingest_day=2026-01-01").mkdir(parents=True)
    (killed / "ingest_day=2026-01-01" / "part-killed.parquet").write_bytes(b"PAR1")
    # When the batch runs again and is published
    job.run([env.manifest("m0", [env.put("a.json", _lines({"a": 1}))])], 0)
    # Then the killed attempt's files are gone, the published ones kept
    assert not killed.exists()
    assert [r["a"] for r in read_rows(tmp_path / "output")] == ["1"]
    assert all(local_file(p).exists() for p in current_files(load(env.settings)))


def test_a_batch_committed_but_not_appended_keeps_its_files_through_orphan_deletion(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    # Given a batch whose commit record is written, and whose append is not (the job went down)
    monkeypatch.setattr(
        IcebergSink, "publish", lambda self, record, share, written_files=None: (_ for _ in ()).throw(SystemExit(1))
    )
    with pytest.raises(SystemExit):
        job.run([env.manifest("m0", [env.put("a.json", _lines({"a": 1}, {"a": 2}))])], 0)
    monkeypatch.undo()
    # When orphan-file deletion runs with no retention at all (the job was down longer than it)
    assert delete_orphans(load(env.settings), older_than=timedelta(0), output_uri=env.settings.output_uri) == 0
    # Then the replay publishes every record
    env.job(spark).run([env.manifest("m0", [env.put("a.json", _lines({"a": 1}, {"a": 2}))])], 0)
    assert sorted(r["a"] for r in read_rows(tmp_path / "output")) == ["1", "2"]


def test_a_replay_long_after_its_snapshot_expired_appends_nothing(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    manifest = env.manifest("m0", [env.put("a.json", _lines({"a": 1}))])
    env.job(spark).run([manifest], 0)
    env.job(spark).run([env.manifest("m1", [env.put("b.json", _lines({"a": 2}))])], 1)
    # Given batch 0's snapshot expired (the job stayed down past the retention, then Spark replays it)
    table = load(env.settings)
    assert expire_snapshots(table, now=datetime.now(UTC) + timedelta(days=2), keep=1).snapshots == 1
    assert find_snapshot(load(env.settings).metadata, env.job(spark).query_id, 0) is None
    # When batch 0 runs again, Then nothing is appended twice
    env.job(spark).run([manifest], 0)
    assert sorted(r["a"] for r in read_rows(tmp_path / "output")) == ["1", "2"]


def test_a_compaction_that_commits_between_refresh_and_append_keeps_both(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from glue_processor import faults

    env, job = _after_two_batches(spark, tmp_path)
    # Given a compaction (another writer, as the Glue optimizer is) that commits while batch 2 is
    # between its refresh and its append
    real, compacted = faults.hit, []

    def hit(point: str) -> None:
        if point == "before-table-commit" and not compacted:
            compacted.append(compact(load(env.settings), target_bytes=128 * 1024 * 1024, include_open=True))
        real(point)

    monkeypatch.setattr(faults, "hit", hit)
    _batch(env, job, 2)
    # Then both commits are in the table: the compaction's, and the batch once, on top of it
    assert compacted and compacted[0].rewritten == 2
    table = load(env.settings)
    ops = [s.summary.operation.value for s in table.metadata.snapshots if s.summary]  # type: ignore[union-attr]
    assert "overwrite" in ops
    assert sum(1 for s in table.metadata.snapshots if s.summary and s.summary.get(BATCH_ID) == "2") == 1
    assert sorted(r["n"] for r in read_rows(tmp_path / "output")) == ["0", "1", "2"]


def test_make_query_reads_the_current_snapshot(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from glue_processor.local.query import main

    env = Env(tmp_path)
    job = env.job(spark)
    job.run([env.manifest("m0", [env.put("a.json", _lines({"a": 1}, {"a": 2}))])], 0)
    job.run([env.manifest("m1", [env.put("b.json", _lines({"a": 3}))])], 1)
    # A file of a killed attempt under the table is not part of it, so a query must not see it
    path = local_file(current_files(load(env.settings))[0])
    path.with_name("part-orphan.parquet").write_bytes(path.read_bytes())
    assert main(["--workdir", str(tmp_path), "--format", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # the default query: the table's partitions, as its metadata counts them (the orphan is not counted)
    spec = load(env.settings).spec().spec_id
    assert lines == [
        "table,partition,spec_id,rows,files,mb",
        f"events,ingest_day={datetime.now(UTC):%Y-%m-%d},{spec},3,2,0.0",
    ]
    assert main(["--workdir", str(tmp_path), "--sql", "SELECT sum(CAST(a AS INT)) AS total FROM ingest.events"]) == 0
    assert capsys.readouterr().out.splitlines()[:3] == ["total", "-----", "6"]
    assert pq.ParquetFile(path).metadata.num_rows >= 1
    # and the load history is a view too
    sql = "SELECT key, rows_written FROM load_history ORDER BY key"
    assert main(["--workdir", str(tmp_path), "--format", "csv", "--sql", sql]) == 0
    assert capsys.readouterr().out.splitlines() == ["key,rows_written", "a.json,2", "b.json,1"]


def test_the_table_metrics_follow_the_table(spark: Any, tmp_path: Path) -> None:
    from contracts import metrics as M
    from glue_processor.metrics.convert import table_datums

    env = Env(tmp_path)
    job = env.job(spark)
    for n in range(3):
        job.run([env.manifest(f"m{n}", [env.put(f"f{n}.json", _lines({"n": n}))])], n)
    # Then the sink reports what the table holds now, and the datums carry it
    assert job.sink.stats() == {"snapshots": 3, "data_files": 3}
    assert job.last_commit_ms > 0
    datums = table_datums(
        job.last_commit_ms, job.tables.stats(), dimensions={"JobName": "j", "QueryName": "q"}, when=datetime.now(UTC)
    )
    values = {d.name: d.value for d in datums}
    assert values[M.TABLE_SNAPSHOTS.name] == 3 and values[M.TABLE_DATA_FILES.name] == 3
    assert values[M.TABLE_COMMIT_DURATION.name] == job.last_commit_ms


def test_the_job_expires_old_snapshots_so_commits_stay_cheap(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from glue_processor.table import iceberg

    monkeypatch.setattr(iceberg, "EXPIRE_EVERY", 1)
    env = Env(tmp_path)
    job = env.job(spark)
    assert isinstance(job.sink, IcebergSink) and job.sink.snapshot_retention == timedelta(hours=6)
    job.sink.snapshot_retention = timedelta(0)  # every snapshot but the newest few is "old"
    for n in range(14):
        job.run([env.manifest(f"m{n}", [env.put(f"f{n}.json", _lines({"n": n}))])], n)
    table = load(env.settings)
    # Then the metadata keeps the table's minimum (10), not all 14, and every row is still there once
    assert len(table.metadata.snapshots) == 10
    assert sorted(int(r["n"]) for r in read_rows(tmp_path / "output")) == list(range(14))


def test_a_key_explosion_is_bounded_in_the_table_and_later_batches_stay_narrow(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path, max_columns="20")
    job = env.job(spark)
    # Given producers that use ids as keys: 3,000 distinct keys across two objects of one batch
    first = [{"id": str(n), **{f"user_{n}_{i}": i for i in range(30)}} for n in range(100)]
    half = len(first) // 2
    entries = [env.put("ids-1.json", _lines(*first[:half])), env.put("ids-2.json", _lines(*first[half:]))]
    record = job.run([env.manifest("m0", entries)], 0)
    # Then the table has 20 data columns (the first seen), and every other value is in _extra
    table = load(env.settings)
    data = [f.name for f in table.schema().fields if not f.name.startswith("_")]
    assert len(data) == 20 and "id" in data
    assert str(table.schema().find_field("_extra").field_type) == "map<string, string>"
    rows = table.scan().to_arrow().to_pylist()
    assert len(rows) == 100
    for row in rows:
        values = {k: row[k] for k in data if row[k] is not None}
        values.update(dict(row["_extra"] or []))
        n = int(values["id"])
        assert values == {"id": str(n), **{f"user_{n}_{i}": str(i) for i in range(30)}}
    # (3,100 values: 100 ids and 19 single-record keys are columns, the rest went to _extra)
    assert record.stats.extra_values == 3_100 - 100 - 19
    # And a later one-record batch writes a file 20 data columns wide, not 3,000
    job.run([env.manifest("m1", [env.put("small.json", _lines({"v": 1}))])], 1)
    widths = {len(pq.read_schema(f).names) for f in visible_parquet(tmp_path / "output")}
    assert widths == {20 + len(LINEAGE_COLUMNS) + 1}
    (small,) = [r for r in load(env.settings).scan().to_arrow().to_pylist() if r["_batch_id"] == 1]
    assert small["_extra"] == [("v", "1")]


def test_the_job_reaches_its_table_at_start_up(spark: Any, tmp_path: Path) -> None:
    # Given a job that has run no batch
    env = Env(tmp_path)
    job = env.job(spark)
    # When it starts (what run_query does before the first trigger)
    job.start()
    # Then its table exists, empty, before any batch: a wrong catalog would have failed here
    table = load(env.settings)
    assert table.metadata.current_snapshot() is None
    assert [f.name for f in table.schema().fields][:3] == ["_source_uri", "_source_etag", "_line"]
    # And a start-up that cannot reach its catalog fails then (here: its directory is a file)
    (tmp_path / "a-file").write_text("")
    broken = Env(tmp_path / "broken", catalog=f"sqlite:///{tmp_path}/a-file/catalog.db")
    with pytest.raises(OSError, match="a-file"):
        broken.job(spark).start()


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the tables the catalog reads (``load_table``), in order, from now on."""
    from pyiceberg.catalog.sql import SqlCatalog

    reads: list[str] = []
    real = SqlCatalog.load_table

    def load_table(self: SqlCatalog, identifier: Any) -> Any:
        reads.append(identifier[-1] if isinstance(identifier, tuple) else str(identifier).rsplit(".", 1)[-1])
        return real(self, identifier)

    monkeypatch.setattr(SqlCatalog, "load_table", load_table)
    return reads


def test_a_batch_commits_on_the_metadata_its_last_commit_left(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, job = _after_two_batches(spark, tmp_path)
    reads = _reads(monkeypatch)
    # When the next batch publishes to the table and the load history, nothing else having written
    _batch(env, job, 2)
    # Then each is read from the catalog once: by the catalog's own commit, which checks the head
    # the append was built on (no refresh before it: one Glue GetTable and one S3 GET fewer on AWS)
    assert sorted(reads) == ["events", "load_history"]
    assert sorted(r["n"] for r in read_rows(tmp_path / "output")) == ["0", "1", "2"]
    history = load(env.settings.model_copy(update={"table_name": "load_history"}))
    assert find_snapshot(history.metadata, job.query_id, 2, part="") is not None


def test_a_compaction_between_two_batches_is_under_the_next_append(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env, job = _after_two_batches(spark, tmp_path)
    # Given another writer's commit after this run's last one (the Glue optimizer's compaction)
    assert compact(load(env.settings), target_bytes=128 * 1024 * 1024, include_open=True).rewritten == 2
    head = load(env.settings).metadata.current_snapshot_id
    # When the next batch appends on the metadata this run left (a head no longer the table's)
    _batch(env, job, 2)
    # Then the catalog refused that head, and pyiceberg appended again on the compaction's: once
    table = load(env.settings)
    snapshot = find_snapshot(table.metadata, job.query_id, 2)
    assert snapshot is not None and snapshot.parent_snapshot_id == head
    assert sum(1 for s in table.metadata.snapshots if s.summary and s.summary.get(BATCH_ID) == "2") == 1
    assert sorted(r["n"] for r in read_rows(tmp_path / "output")) == ["0", "1", "2"]
    assert len(current_files(table)) == 2  # the compacted file and the batch's


def test_after_a_failed_publication_the_table_is_read_again(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from glue_processor import faults

    env, job = _after_two_batches(spark, tmp_path)
    job.sleep = lambda s: None
    real, failed = faults.hit, []

    def hit(point: str) -> None:
        if point == "before-table-commit" and not failed:
            failed.append(point)
            raise OSError("the catalog is out of reach")
        real(point)

    monkeypatch.setattr(faults, "hit", hit)
    reads = _reads(monkeypatch)
    # When a publication fails before its commit and is tried again
    _batch(env, job, 2)
    # Then the attempt after the failure read the table first (a refresh), then committed through
    # the catalog (its own read): the state an error left is never trusted
    assert failed and reads.count("events") == 2
    assert sorted(r["n"] for r in read_rows(tmp_path / "output")) == ["0", "1", "2"]


def test_a_batch_adding_a_column_after_another_writers_schema_change_commits_at_once(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.exceptions import CommitFailedException
    from pyiceberg.types import StringType

    env, job = _after_two_batches(spark, tmp_path)
    # Given another writer's column after this run's last commit (an ALTER TABLE, a second run)
    other = load(env.settings)
    with other.update_schema() as update:
        update.add_column("added_elsewhere", StringType())
    failed: list[str] = []
    real = SqlCatalog.commit_table

    def commit_table(self: SqlCatalog, *args: Any) -> Any:
        try:
            return real(self, *args)
        except CommitFailedException as exc:
            failed.append(str(exc))
            raise

    monkeypatch.setattr(SqlCatalog, "commit_table", commit_table)
    # When the next batch adds a column of its own
    _batch(env, job, 2, z="new")
    # Then it read the table first and committed at once (an append built on the old schema would
    # fail every retry pyiceberg makes: its schema requirement is not rebuilt), keeping both columns
    assert failed == []
    names = [f.name for f in load(env.settings).schema().fields]
    assert "added_elsewhere" in names and "z" in names
    assert sorted((r["n"], r.get("z")) for r in read_rows(tmp_path / "output")) == [
        ("0", None),
        ("1", None),
        ("2", "new"),
    ]
