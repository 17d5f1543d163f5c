"""``make compact``'s orphan-file deletion: the whole table location, never a batch waiting for its append.

AWS Glue Developer Guide, "Deleting orphan files": the optimizer deletes the files under its location
(the table's by default) that the table's metadata does not track and that are older than the
retention; batches write under ``<table>/ingest/`` before their append, so locally the ledger says
which of those wait (``glue_processor/commit/ledger.py``: a commit record, and no published or
abandoned marker for the table).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from glue_processor.table.catalog import TABLE_PROPERTIES, open_catalog
from glue_processor.table.compact import delete_orphans, referenced
from glue_processor.table.read import local_file

QUERY = "0123456789abcdef"
OLD = time.time() - 2 * 86400


def _file(path: Path, *, old: bool = True) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"PAR1")
    if old:
        os.utime(path, (OLD, OLD))
    return path


def test_orphans_anywhere_under_the_table_go_but_a_batch_waiting_for_its_append_keeps_its_files(
    tmp_path: Path,
) -> None:
    output = tmp_path / "output"
    catalog = open_catalog(f"sqlite:///{output}/_catalog/catalog.db")
    catalog.create_namespace("ingest")
    schema = pa.schema([("n", pa.string())])
    table = catalog.create_table(
        ("ingest", "events"), schema=schema, location=(output / "events").as_uri(), properties=TABLE_PROPERTIES
    )
    for n in range(2):
        table.append(pa.table({"n": [str(n)]}))
    root = local_file(table.location())
    ingest, commits = root / "ingest" / QUERY, output / "_commits" / QUERY
    # Given old files nothing references: a killed compaction's under data/, a killed commit's
    # manifest under metadata/, a killed attempt of a published batch, of an abandoned share, and of a
    # batch that never reached its commit record
    gone = [
        _file(root / "data" / "compacted-x.parquet"),
        _file(root / "metadata" / "killed-m0.avro"),
        _file(ingest / "000000000001" / "attempt-a" / "part-0.parquet"),
        _file(ingest / "000000000002" / "attempt-a" / "part-0.parquet"),
        _file(ingest / "000000000003" / "attempt-a" / "part-0.parquet"),
    ]
    _file(commits / "000000000001.json")
    _file(commits / "000000000001.events.published")
    _file(commits / "000000000002.json")
    _file(commits / "000000000002.events.abandoned")
    # And the files of a batch committed in the ledger and not appended yet (its share was set aside,
    # or the job went down), a young orphan (a compaction may be writing it), and the ledger itself
    waiting = _file(ingest / "000000000004" / "attempt-b" / "part-0.parquet")
    _file(commits / "000000000004.json")
    young = _file(root / "data" / "compacted-y.parquet", old=False)
    bookkeeping = [p for p in output.rglob("*") if p.is_file() and root not in p.parents]
    # When orphan-file deletion runs on the table with a day's retention
    deleted = delete_orphans(table, older_than=timedelta(days=1), output_uri=output.as_uri())
    # Then the old orphans are gone wherever they were under the table; the waiting batch's files,
    # the young one, the ledger, the catalog and every file the table references are kept
    assert deleted == len(gone) and not any(p.exists() for p in gone)
    assert waiting.exists() and young.exists() and all(p.exists() for p in bookkeeping)
    assert all(local_file(uri).exists() for uri in referenced(table))
    assert sorted(table.scan().to_arrow().column("n").to_pylist()) == ["0", "1"]
    # And once the batch is published, its files are the table's or an orphan like any other
    _file(commits / "000000000004.events.published")
    assert delete_orphans(table, older_than=timedelta(days=1), output_uri=output.as_uri()) == 1
    assert not waiting.exists()


@pytest.mark.spark
def test_a_late_share_whose_files_orphan_deletion_took_is_refused_not_appended(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from glue_processor.commit.publication import PublishRefused
    from glue_processor.table import iceberg
    from glue_processor.table.read import load
    from tests.glue_processor.test_batch import Env

    env = Env(tmp_path)
    job = env.job(spark)

    # Given a batch committed in the ledger and not appended (the job went down after its commit record)
    def down(self: Any, record: Any, share: Any, written_files: Any = None) -> None:
        raise SystemExit

    monkeypatch.setattr(iceberg.IcebergSink, "publish", down)
    with pytest.raises(SystemExit):
        job.run([env.manifest("m0", [env.put("a.json", b'{"a": 1}\n')])], 0)
    monkeypatch.undo()
    # And, past OrphanFileRetentionDays, its file deleted by the orphan-file optimizer (whole table location)
    record = job.committer().load(0)
    assert record is not None
    share = record.tables[0]
    local_file(share.data_files[0].final).unlink()
    monkeypatch.setattr(iceberg, "LATE", timedelta(0))  # the record is that late
    # When its share is published, Then the table refuses it (it is abandoned and its objects
    # quarantined after its tries) rather than naming a file that is gone in a snapshot
    assert isinstance(job.sink, iceberg.IcebergSink)
    with pytest.raises(PublishRefused, match="1 of the share's 1 files are gone"):
        job.sink.publish(record, share)
    assert load(env.settings).current_snapshot() is None


def test_compaction_after_a_partition_change_packs_the_current_spec_and_leaves_the_earlier_as_they_are(
    tmp_path: Path,
) -> None:
    from pyiceberg.transforms import IdentityTransform

    from glue_processor.table.compact import compact

    # Given small files of kind=a with two colours, then the spec evolved (as the job does) to colour
    catalog = open_catalog(f"sqlite:///{tmp_path}/catalog.db")
    catalog.create_namespace("ingest")
    schema = pa.schema([("kind", pa.string()), ("color", pa.string())])
    table = catalog.create_table(
        ("ingest", "events"), schema=schema, location=(tmp_path / "events").as_uri(), properties=TABLE_PROPERTIES
    )
    with table.update_spec() as spec:
        spec.add_field("kind", IdentityTransform(), "kind")
    for _ in range(3):
        table.append(pa.table({"kind": ["a", "a"], "color": ["red", "blue"]}))
    with table.transaction() as tx, tx.update_spec() as spec:
        spec.remove_field("kind")
        spec.add_field("color", IdentityTransform(), "color")
    table.refresh()
    for _ in range(2):
        table.append(pa.table({"kind": ["b"], "color": ["red"]}))
    # When compacted (the earlier spec's files cannot be rewritten under the current one: pyiceberg
    # writes a commit's added files under the current spec, and their rows span two colours)
    report = compact(table, target_bytes=128 << 20, include_open=True)
    # Then the current spec's two small files are one, the earlier spec's three are as they were, and
    # every row is still read
    files = table.inspect.files().to_pylist()
    assert (report.rewritten, report.written) == (2, 1)
    earlier = next(i for i, s in table.specs().items() if [f.name for f in s.fields] == ["kind"])
    assert sorted(f["spec_id"] for f in files) == [earlier] * 3 + [table.spec().spec_id]
    assert table.scan().to_arrow().num_rows == 8
