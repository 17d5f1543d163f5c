"""The job's snapshot expiry deletes what it expires, and reads only what it expires.

Iceberg spec ("Manifests", ``status``: 0 existing, 1 added, 2 deleted; "Snapshots"): a manifest
entry DELETED by a snapshot's commit names a file no later snapshot of that line holds; Java
Iceberg's ``IncrementalFileCleanup`` deletes those entries' files once the snapshot that wrote them
expires, and its full reachability diff (``ReachableFileCleanup``) when the history is not one line.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pytest
from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.io import FileIO, InputFile, OutputFile
from pyiceberg.table import Table

from glue_processor.shared.objects import NotDeleted, S3Store
from glue_processor.table.catalog import TABLE_PROPERTIES, open_catalog
from glue_processor.table.compact import compact, referenced
from glue_processor.table.expiry import delete_files, expire_snapshots, main_line
from glue_processor.table.iceberg import expire_now_and_then
from glue_processor.table.read import current_files, load, local_file

TARGET = 128 * 1024 * 1024
LATER = timedelta(seconds=5)  # a "now" past every snapshot of the test


class CountingIO(FileIO):
    """The table's FileIO, counting the manifest lists and the manifests opened for reading."""

    def __init__(self, inner: FileIO) -> None:
        super().__init__(inner.properties)
        self.inner = inner
        self.lists: list[str] = []
        self.manifests: list[str] = []

    def new_input(self, location: str) -> InputFile:
        name = location.rsplit("/", 1)[-1]
        if name.startswith("snap-") and name.endswith(".avro"):
            self.lists.append(location)
        elif name.endswith(".avro"):
            self.manifests.append(location)
        return self.inner.new_input(location)

    def new_output(self, location: str) -> OutputFile:
        return self.inner.new_output(location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        self.inner.delete(location)


def _catalog(tmp_path: Path) -> Catalog:
    catalog = open_catalog(f"sqlite:///{tmp_path}/catalog.db")
    catalog.create_namespace("ingest")
    return catalog


def _table(catalog: Catalog, tmp_path: Path, name: str = "t", *, merge: bool = False) -> Table:
    """The job's table properties; its manifests not merged unless ``merge`` (a merged append leaves
    the manifest it first wrote unreferenced, for orphan-file deletion: not expiry's to delete)."""
    schema = pa.schema([("n", pa.string())])
    location = (tmp_path / name).as_uri()
    properties = {**TABLE_PROPERTIES, "commit.manifest-merge.enabled": str(merge).lower()}
    return catalog.create_table(("ingest", name), schema=schema, location=location, properties=properties)


def _history(table: Table, appends: int, *, compact_every: int = 0) -> None:
    """``appends`` one-row appends; a compaction of every file after each ``compact_every`` of them."""
    for n in range(appends):
        table.append(pa.table({"n": [str(n)]}))
        if compact_every and (n + 1) % compact_every == 0:
            compact(table, target_bytes=TARGET, include_open=True)
            table.refresh()


def _on_disk(table: Table) -> set[str]:
    root = local_file(table.location())
    return {"file://" + str(p) for p in root.rglob("*") if p.is_file()}


def _counting(table: Table) -> tuple[Table, CountingIO]:
    io = CountingIO(table.io)
    return Table(table.name(), table.metadata, table.metadata_location, io, table.catalog), io


def test_expiry_deletes_the_files_compaction_replaced_and_every_row_stays(tmp_path: Path) -> None:
    table = _table(_catalog(tmp_path), tmp_path)
    # Given four appends, a compaction that replaced their four files by one, and an append after it
    _history(table, 4, compact_every=4)
    replaced = [f for f in _on_disk(table) if "/data/" in f and "compacted-" not in f]
    table.append(pa.table({"n": ["4"]}))
    assert len(replaced) == 4 and all(local_file(f).exists() for f in replaced)
    # When every snapshot but the newest expires
    done = expire_snapshots(table, max_age=timedelta(0), keep=1, now=datetime.now(UTC) + LATER)
    # Then the replaced files are gone, and so is every manifest and manifest list only they held:
    # what is left on disk is exactly what the table references
    assert done.snapshots == 5 and done.incremental
    assert not any(local_file(f).exists() for f in replaced)
    assert _on_disk(table) == referenced(table)
    assert sorted(table.scan().to_arrow().column("n").to_pylist()) == ["0", "1", "2", "3", "4"]


def test_what_the_table_still_holds_is_never_deleted(tmp_path: Path) -> None:
    table = _table(_catalog(tmp_path), tmp_path)
    # Given appends and a compaction, the compaction being among the kept snapshots
    _history(table, 6, compact_every=3)
    table.append(pa.table({"n": ["6"]}))
    table.append(pa.table({"n": ["7"]}))
    # When the snapshots before the last compaction expire (the compaction's deletions are kept)
    snapshots = table.metadata.snapshots
    last_compaction = max(i for i, s in enumerate(snapshots) if s.summary and s.summary.operation.value == "overwrite")
    done = expire_snapshots(
        table, max_age=timedelta(0), keep=len(snapshots) - last_compaction, now=datetime.now(UTC) + LATER
    )
    # Then every kept snapshot still reads whole (its manifests and files are all there)
    assert done.snapshots == last_compaction
    for snapshot in table.metadata.snapshots:
        assert all(local_file(f).exists() for f in referenced_by(table, snapshot.snapshot_id))
    assert sorted(table.scan().to_arrow().column("n").to_pylist()) == [str(n) for n in range(8)]


def referenced_by(table: Table, snapshot_id: int) -> set[str]:
    snapshot = table.metadata.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    out = {snapshot.manifest_list}
    for manifest in snapshot.manifests(table.io):
        out.add(manifest.manifest_path)
        out |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io)}
    return out


def test_expiry_reads_the_manifests_of_the_snapshots_it_expires_only(tmp_path: Path) -> None:
    table = _table(_catalog(tmp_path), tmp_path)
    # Given a table of 150 snapshots: appends, compacted every 30 (a compaction is an overwrite
    # snapshot whose manifests record the replaced files as DELETED)
    _history(table, 125, compact_every=30)
    snapshots = table.metadata.snapshots
    assert len(snapshots) == 129
    expired = snapshots[:40]
    with_deletions = {
        m.manifest_path
        for s in expired
        for m in s.manifests(table.io)
        if m.added_snapshot_id == s.snapshot_id and (m.deleted_files_count or 0) > 0
    }
    # When the oldest 40 expire (one compaction among them), reading through a counting FileIO
    counted, io = _counting(table)
    done = expire_snapshots(counted, max_age=timedelta(0), keep=len(snapshots) - 40, now=datetime.now(UTC) + LATER)
    # Then it read the manifest lists of the 40 and of the oldest kept one, and of the manifests only
    # the one the expired compaction added with its deletions: nothing of the 89 kept snapshots'
    assert done.snapshots == 40 and done.incremental
    assert sorted(io.lists) == sorted([s.manifest_list for s in expired] + [snapshots[40].manifest_list])
    assert set(io.manifests) == with_deletions and len(io.manifests) == 1
    assert (done.manifest_lists_read, done.manifests_read) == (41, 1)
    # (the reachability diff this replaces read every manifest list and every manifest of the table, twice)
    assert _on_disk(table) == referenced(load_again(table))


def load_again(table: Table) -> Table:
    table.refresh()
    return table


def test_with_a_tag_the_expiry_diffs_what_is_reachable_and_keeps_what_the_tag_holds(tmp_path: Path) -> None:
    table = _table(_catalog(tmp_path), tmp_path)
    # Given a tag on the second snapshot (another ref: the history is not one line any more), then a
    # compaction that replaced the files the tag reads, and an append
    _history(table, 2)
    tagged = table.metadata.snapshots[1]
    table.manage_snapshots().create_tag(tagged.snapshot_id, "audit").commit()
    compact(table, target_bytes=TARGET, include_open=True)
    table.refresh()
    table.append(pa.table({"n": ["2"]}))
    assert main_line(table.metadata) is None
    # When every snapshot but the newest and the tagged one expires
    done = expire_snapshots(table, max_age=timedelta(0), keep=1, now=datetime.now(UTC) + LATER)
    # Then the tag still reads its rows (its files were kept), and nothing else is left over
    assert not done.incremental and done.snapshots == 2
    assert sorted(table.scan(snapshot_id=tagged.snapshot_id).to_arrow().column("n").to_pylist()) == ["0", "1"]
    assert _on_disk(table) == referenced(table)


def test_a_failed_commit_deletes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    table = _table(_catalog(tmp_path), tmp_path)
    _history(table, 3, compact_every=3)
    table.append(pa.table({"n": ["3"]}))
    before = _on_disk(table)

    # Given an expiry whose commit loses to another writer
    def conflict(self: ExpireSnapshots) -> None:
        raise CommitFailedException("the table changed")

    monkeypatch.setattr(ExpireSnapshots, "commit", conflict)
    # When the job's round runs, Then it is logged and left to the next round, and no file is gone
    expire_now_and_then(table, 0, timedelta(0))
    assert _on_disk(table) == before
    assert len(table.metadata.snapshots) == 5


def test_s3_deletes_go_1000_keys_a_request_and_say_what_they_could_not(aws: None) -> None:
    # S3 API Reference, DeleteObjects: "up to 1,000 keys" per request; quiet mode returns the errors only
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="out")
    uris = [f"s3://out/data/t/ingest/{n:05d}.parquet" for n in range(2500)]
    for uri in uris[:2400]:  # the last 100 do not exist: deleted all the same
        s3.put_object(Bucket="out", Key=uri.removeprefix("s3://out/"), Body=b"x")
    calls: list[int] = []
    s3.meta.events.register(
        "before-call.s3.DeleteObjects", lambda params, **_: calls.append(params["body"].count(b"<Key>"))
    )
    # When they are deleted through the job's store
    assert delete_files(uris, lambda uri: S3Store(s3)) == 0
    # Then three requests took them (1000, 1000, 500), and none is left
    assert calls == [1000, 1000, 500]
    assert s3.list_objects_v2(Bucket="out").get("KeyCount") == 0
    # And keys S3 refuses are named, the others deleted
    s3.put_object(Bucket="out", Key="data/t/a.parquet", Body=b"x")
    with pytest.raises(NotDeleted) as refused:
        S3Store(s3).delete_many(["s3://out/data/t/a.parquet", "s3://missing-bucket/k"])
    assert refused.value.failed == ["s3://missing-bucket/k (NoSuchBucket)"]
    assert s3.list_objects_v2(Bucket="out").get("KeyCount") == 0


def _lines(n: int) -> bytes:
    return (json.dumps({"n": n}) + "\n").encode()


@pytest.mark.spark
def test_the_job_deletes_what_compaction_replaced_in_its_table_and_its_load_history(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from glue_processor.table import iceberg
    from tests.glue_processor.test_batch import Env
    from tests.helpers import read_rows

    monkeypatch.setattr(iceberg, "EXPIRE_EVERY", 1)
    env = Env(tmp_path)
    job = env.job(spark)
    # Given three batches (a small file each in the table and in the load history), then each table
    # compacted (as the Glue compaction optimizer does), keeping one snapshot when expiring
    for n in range(3):
        job.run([env.manifest(f"m{n}", [env.put(f"f{n}.json", _lines(n))])], n)
    catalog = open_catalog(env.settings.catalog_uri)
    replaced: dict[str, list[str]] = {}
    for name in ("events", "load_history"):
        table = catalog.load_table(("ingest", name))
        with table.transaction() as tx:
            tx.set_properties({"history.expire.min-snapshots-to-keep": "1"})
        replaced[name] = current_files(table)
        assert compact(table, target_bytes=TARGET, include_open=True).rewritten == 3
    # When the next batch is published, with a retention every earlier snapshot is past
    assert job.tables.history is not None and isinstance(job.sink, iceberg.IcebergSink)
    job.sink.snapshot_retention = job.tables.history.snapshot_retention = timedelta(0)
    job.run([env.manifest("m3", [env.put("f3.json", _lines(3))])], 3)
    # Then the files compaction replaced are gone from both tables, and nothing unreferenced is left
    for name, files in replaced.items():
        table = load(env.settings, name)
        assert len(table.metadata.snapshots) == 1, name
        assert not any(local_file(f).exists() for f in files), name
        assert _on_disk(table) == referenced(table), name
    # And every row is still read once, in the table and in the load history
    assert sorted(int(r["n"]) for r in read_rows(tmp_path / "output")) == [0, 1, 2, 3]
    history = load(env.settings, "load_history").scan().to_arrow()
    assert sorted(history.column("key").to_pylist()) == ["f0.json", "f1.json", "f2.json", "f3.json"]


def test_a_table_fed_on_batch_ids_never_a_multiple_of_the_period_is_still_expired() -> None:
    # Given a routed table fed every 120 batches from batch 17 (17 + 120k is never a multiple of 60,
    # so the batch-id rule never expired it, and its snapshots and replaced files grew for ever)
    from glue_processor.table.iceberg import EXPIRE_EVERY, ExpiryCadence

    cadence = ExpiryCadence()
    due = [n for n in range(3 * EXPIRE_EVERY) if cadence.due("ingest.orders")]
    # Then it is due at its first commit after the job starts, then every EXPIRE_EVERY commits to it
    assert due == [0, EXPIRE_EVERY, 2 * EXPIRE_EVERY]
    # and each table counts its own commits
    assert cadence.due("ingest.clicks")


def test_a_ref_made_while_expiry_commits_keeps_every_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyiceberg.table.update.snapshot import ExpireSnapshots

    table = _table(_catalog(tmp_path), tmp_path)
    _history(table, 6, compact_every=3)
    before = _on_disk(table)
    kept = table.metadata.snapshots[-1].snapshot_id
    commit = ExpireSnapshots.commit

    # Given another writer that tags a snapshot just as the expiry's commit lands (the plan assumed
    # main was the only ref: its files might be what the tag reads)
    def commit_then_tag(self: ExpireSnapshots) -> None:
        commit(self)
        other = table.catalog.load_table(table.name())
        other.manage_snapshots().create_tag(kept, "audit").commit()

    monkeypatch.setattr(ExpireSnapshots, "commit", commit_then_tag)
    done = expire_snapshots(table, max_age=timedelta(0), keep=2, now=datetime.now(UTC) + LATER)
    # Then the snapshots are expired but no file is deleted: orphan deletion takes what nothing holds
    assert done.snapshots > 0 and done.deleted == 0
    assert before <= _on_disk(table)  # (only new metadata.json files beside)
