"""Backfill from an S3 Inventory report (issue 26, item 2): reading CSV and Parquet reports, the
selection, skipping what the ledger holds, the rate bound, S3 (moto) and a local run end to end."""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import json
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from contracts.layout import manifest_data_bytes
from contracts.manifest import Manifest
from glue_processor.local.backfill import (
    BackfillReport,
    InventoryError,
    InventoryObject,
    Selection,
    aws_loads,
    emit,
    local_backfill,
    plan_backfill,
    read_inventory,
    s3_backfill,
    write_local_inventory,
)
from glue_processor.local.comparison import Load
from glue_processor.local.reconcile import HISTORY_COLUMNS, history_filter, history_loads, loads_of
from tests.helpers import read_rows
from tests.local.test_end_to_end import run_local, write_tree
from tests.test_reconcile import record

T0 = datetime(2026, 11, 1, tzinfo=UTC)
SCHEMA = "Bucket, Key, VersionId, IsLatest, IsDeleteMarker, Size, LastModifiedDate, ETag, StorageClass"


def csv_report(rows: list[list[str]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    return gzip.compress(out.getvalue().encode())


def manifest_json(fmt: str, keys: list[str], schema: str = SCHEMA) -> dict[str, Any]:
    return {
        "sourceBucket": "land",
        "destinationBucket": "arn:aws:s3:::inv",
        "fileFormat": fmt,
        "fileSchema": schema,
        "files": [{"key": k, "size": 1} for k in keys],
    }


def test_a_csv_report_is_read_as_s3_writes_it() -> None:
    body = csv_report(
        [
            [
                "land",
                "incoming/a%20b%2Bc.json",
                "",
                "true",
                "false",
                "10",
                "2026-11-01T10:00:00.000Z",
                "e1",
                "STANDARD",
            ],
            ["land", "incoming/old.json", "v1", "false", "false", "5", "2026-11-01T09:00:00.000Z", "e0", "STANDARD"],
            ["land", "incoming/gone.json", "v2", "true", "true", "0", "2026-11-01T11:00:00.000Z", "", "STANDARD"],
        ]
    )
    rows = list(read_inventory(manifest_json("CSV", ["d/1.csv.gz"]), lambda b, k: body))
    # Then the keys are decoded (CSV inventory keys are URL-encoded), and each field is typed
    assert rows[0] == InventoryObject("land", "incoming/a b+c.json", 10, "e1", T0 + timedelta(hours=10))
    assert (rows[1].version_id, rows[1].is_latest) == ("v1", False)
    assert rows[2].is_delete_marker
    # And the selection takes the latest versions that are not delete markers, under the prefix, since a time
    picked = [r.key for r in rows if Selection(prefix="incoming/").admits(r)]
    assert picked == ["incoming/a b+c.json"]
    assert not Selection(since=T0 + timedelta(hours=11)).admits(rows[0])
    assert not Selection(prefix="other/").admits(rows[0])


def test_a_parquet_report_is_read_by_its_column_names() -> None:
    table = pa.table(
        {
            "bucket": ["land"],
            "key": ["incoming/x.ndjson"],
            "version_id": [None],
            "is_latest": [True],
            "is_delete_marker": [False],
            "size": pa.array([7], pa.int64()),
            "last_modified_date": pa.array([T0], pa.timestamp("ms", tz="UTC")),
            "e_tag": ["abc"],
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink)
    rows = list(read_inventory(manifest_json("Parquet", ["d/1.parquet"], schema=""), lambda b, k: sink.getvalue()))
    assert rows == [InventoryObject("land", "incoming/x.ndjson", 7, "abc", T0)]


def test_a_bad_report_says_what_and_where() -> None:
    with pytest.raises(InventoryError, match="fileFormat 'JSON'"):
        list(read_inventory(manifest_json("JSON", ["d/1"]), lambda b, k: b""))
    body = csv_report([["land", "k.json", "", "true"]])
    with pytest.raises(InventoryError, match=r"s3://inv/d/1.csv.gz line 1: 4 fields, the schema names 9"):
        list(read_inventory(manifest_json("CSV", ["d/1.csv.gz"]), lambda b, k: body))


def test_what_the_ledger_holds_is_skipped_and_manifests_are_bounded() -> None:
    objects = [InventoryObject("land", f"incoming/{i}.json", 100, f"e{i}", T0) for i in range(5)]
    ledger = [record(0, ("land", "incoming/0.json", "e0", "ingested"), ("land", "incoming/1.json", "e1", "ingested"))]
    report = BackfillReport()
    manifests = list(
        plan_backfill(
            objects, lambda _keys: loads_of(ledger), Selection(), max_bytes=250, max_files=1000, report=report
        )
    )
    assert (report.listed, report.selected, report.already_ingested) == (5, 5, 2)
    assert [sorted(e.key for e in m.entries) for m in manifests] == [
        ["incoming/2.json", "incoming/3.json"],
        ["incoming/4.json"],
    ]
    assert all(e.event_time == T0 for m in manifests for e in m.entries)


def test_only_the_loads_of_selected_objects_are_kept_whatever_the_history() -> None:
    # A year of history at the design load is 1.75 billion loads: plan_backfill used to hand them all
    # to reconcile, which indexes every one. Given 200,000 loads of other objects and one of ours
    objects = [InventoryObject("land", f"new/{i}.json", 100, f"n{i}", T0) for i in range(3)]
    others = (Load("land", f"old/{i}.json", f"o{i}", "ingested", None, i) for i in range(200_000))
    ours = [Load("land", "new/0.json", "n0", "ingested", None, 7)]
    tracemalloc.start()
    report = BackfillReport()
    asked: list[set[str]] = []

    def loads(keys: Any) -> Any:
        asked.append(set(keys))
        return itertools.chain(others, ours)

    manifests = list(plan_backfill(objects, loads, Selection(), max_bytes=10**9, max_files=1000, report=report))
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # Then ours is skipped, the rest emitted, and memory held the selection, not the history
    assert report.already_ingested == 1
    assert sorted(e.key for m in manifests for e in m.entries) == ["new/1.json", "new/2.json"]
    assert peak < 5_000_000, peak  # each load indexed would be ~60 MB
    assert asked == [{"new/0.json", "new/1.json", "new/2.json"}]  # the keys a history read filters on


def test_a_selection_larger_than_a_chunk_is_planned_a_chunk_at_a_time() -> None:
    # Given 60,000 objects of a bucket backfilled whole (no SINCE, no PREFIX), 1 in 10 ingested
    n = 60_000
    objects = (InventoryObject("land", f"k/{i:06d}.json", 100, f"e{i}", T0) for i in range(n))
    done = [Load("land", f"k/{i:06d}.json", f"e{i}", "ingested", None, 1) for i in range(0, n, 10)]
    asked: list[int] = []

    def loads(keys: Any) -> Any:
        asked.append(len(keys))
        return iter(done)

    def plan(chunk: int) -> tuple[list[Any], BackfillReport, int]:
        report = BackfillReport()
        tracemalloc.start()
        out = [
            sorted(e.key for e in m.entries)
            for m in plan_backfill(
                objects_again(), loads, Selection(), max_bytes=10**9, max_files=1000, report=report, chunk=chunk
            )
        ]
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return out, report, peak

    def objects_again() -> Any:
        return (InventoryObject("land", f"k/{i:06d}.json", 100, f"e{i}", T0) for i in range(n))

    del objects
    whole, whole_report, whole_peak = plan(n)
    asked.clear()
    chunked, report, peak = plan(12_000)
    # When it is planned 12,000 at a time: five reads of the loads, each on its chunk's keys
    assert asked == [12_000] * 5
    # Then the same objects are emitted, each once, the ingested skipped, in the same order
    emitted = [k for m in chunked for k in m]
    assert emitted == [k for m in whole for k in m] and len(emitted) == len(set(emitted)) == n - n // 10
    assert (report.listed, report.selected, report.already_ingested) == (n, n, n // 10)
    assert vars(report) == vars(whole_report)
    # And memory held a chunk, not the selection (the planner's peak grows with what it holds)
    assert peak < whole_peak / 2, (peak, whole_peak)


def history_table(catalog_uri: str, database: str, location: Path) -> Any:
    """The job's load history table, created in ``catalog_uri`` as the job creates it."""
    from glue_processor.table import history
    from glue_processor.table.catalog import open_catalog

    return history.ensure_dated_table(
        open_catalog(catalog_uri), database, "load_history", history.SCHEMA, location=location.as_uri()
    )


def history_batch(when: datetime, batch_id: int, objects: list[tuple[str, str]]) -> pa.Table:
    """A batch's rows of the load history: each (key, etag) ingested from bucket "land" at ``when``."""
    from glue_processor.table import history

    blank = {f.name: None for f in history.SCHEMA}
    common = {"bucket": "land", "status": "ingested", "batch_id": batch_id, "commit_time": when}
    rows = [blank | common | {"key": k, "etag": e, "commit_date": when.date()} for k, e in objects]
    return pa.Table.from_pylist(rows, schema=history.SCHEMA)


def test_the_load_history_is_read_from_since_s_day_on(tmp_path: Path) -> None:
    table = history_table(f"sqlite:///{tmp_path / 'catalog.db'}", "ingest", tmp_path / "load_history")
    # Given a load history of three days, one batch a day
    for day in range(3):
        table.append(history_batch(datetime(2026, 11, 1 + day, 23, 30, tzinfo=UTC), day, [(f"d{day}.json", f"e{day}")]))
    # When backfill reads it from SINCE=2026-11-02T12:00 (an object modified then is committed no earlier)
    since = datetime(2026, 11, 2, 12, tzinfo=UTC)
    loads = list(history_loads(table, since=since))
    # Then only the rows of that day on are read, and the days before are not planned at all
    assert sorted(x.key for x in loads) == ["d1.json", "d2.json"]
    assert sorted(x.key for x in history_loads(table)) == ["d0.json", "d1.json", "d2.json"]
    assert len(list(table.scan(row_filter=history_filter(since)).plan_files())) == 2
    # And with the keys a backfill selected, only their rows
    assert sorted(x.key for x in history_loads(table, keys={"d0.json", "d2.json", "other.json"})) == [
        "d0.json",
        "d2.json",
    ]


def test_the_load_history_is_read_one_data_file_at_a_time(tmp_path: Path) -> None:
    # pyiceberg 0.12's batch reader reads every file of the scan at once: a year of history is
    # ~245 GB of those columns. Given a history of 8 files of 20,000 rows
    table = history_table(f"sqlite:///{tmp_path / 'catalog.db'}", "ingest", tmp_path / "load_history")
    when = datetime(2026, 11, 1, tzinfo=UTC)
    for n in range(8):
        table.append(history_batch(when, n, [(f"k{n}-{i:06d}-" + "x" * 60, f"{i:032x}") for i in range(20_000)]))
    size = table.scan(selected_fields=HISTORY_COLUMNS).to_arrow().nbytes
    # When the first row is read, and a little later
    before = pa.total_allocated_bytes()
    loads = history_loads(table)
    next(loads)
    time.sleep(1)
    held = pa.total_allocated_bytes() - before
    # Then about one file's columns are held, not the table's
    assert held < size / 3, (held, size)
    assert sum(1 for _ in loads) == 8 * 20_000 - 1


def test_on_aws_the_load_history_comes_from_the_glue_catalog(aws: None, tmp_path: Path) -> None:
    # make backfill DATABASE=<Database>: the stack's load history, through the Glue Data Catalog
    # (moto's; the table's files on this disk), read the way the backfill ships
    boto3.client("glue").create_database(DatabaseInput={"Name": "ndjson_ingest"})
    table = history_table("glue", "ndjson_ingest", tmp_path / "h")
    table.append(history_batch(datetime(2026, 11, 3, tzinfo=UTC), 4, [("a.json", "e")]))
    s3 = boto3.client("s3")
    loads = aws_loads(s3, database="ndjson_ingest", history_table="load_history", output=None, since=T0)
    assert [(x.key, x.etag, x.status, x.batch_id) for x in loads({"a.json"})] == [("a.json", "e", "ingested", 4)]
    assert list(loads({"b.json"})) == []


def test_emission_never_runs_ahead_of_the_rate() -> None:
    manifests = [Manifest.of([InventoryObject_entry(i, 100_000_000)]) for i in range(3)]
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    put: dict[str, bytes] = {}
    report = BackfillReport()
    emit(manifests, put.__setitem__, prefix="m/", rate_mb_s=100, report=report, clock=lambda: now[0], sleep=sleep)
    # Then 300 MB at 100 MB/s: the second manifest waits 1 s, the third 2 s from the start
    assert slept == [1.0, 1.0]
    assert (report.manifests, report.emitted_bytes) == (3, 300_000_000)
    assert sorted(manifest_data_bytes(k) for k in put) == [100_000_000] * 3


def InventoryObject_entry(i: int, size: int) -> Any:
    from contracts.manifest import ManifestEntry

    return ManifestEntry(bucket="land", key=f"k{i}.json", size=size, etag=f"e{i}", event_time=T0)


def test_backfill_from_a_report_in_s3_writes_manifests_the_job_takes(aws: None) -> None:
    s3 = boto3.client("s3", region_name="us-east-1")
    for b in ("land", "inv", "manifests", "out"):
        s3.create_bucket(Bucket=b)
    body = csv_report(
        [
            ["land", f"incoming/{i}.json", "", "true", "false", "10", "2026-11-01T10:00:00.000Z", f"e{i}", "S"]
            for i in range(3)
        ]
    )
    s3.put_object(Bucket="inv", Key="r/data/1.csv.gz", Body=body)
    s3.put_object(Bucket="inv", Key="r/manifest.json", Body=json.dumps(manifest_json("CSV", ["r/data/1.csv.gz"])))
    ledger = record(0, ("land", "incoming/0.json", "e0", "ingested"))
    s3.put_object(Bucket="out", Key="data/_commits/q/00000.json", Body=ledger.model_dump_json())
    calls: list[tuple[str, str]] = []
    s3.meta.events.register(
        "before-call.s3", lambda model, params, **_: calls.append((model.name, params.get("Bucket", "")))
    )
    loads = aws_loads(s3, database=None, history_table="load_history", output="s3://out/data", since=None)
    report = s3_backfill(s3, "s3://inv/r/manifest.json", "s3://manifests/manifests/", loads, Selection(), rate_mb_s=0)
    assert (report.selected, report.already_ingested, report.emitted_objects, report.manifests) == (3, 1, 2, 1)
    (key,) = [o["Key"] for o in s3.list_objects_v2(Bucket="manifests")["Contents"]]
    manifest = Manifest.from_json(s3.get_object(Bucket="manifests", Key=key)["Body"].read())
    assert sorted(e.key for e in manifest.entries) == ["incoming/1.json", "incoming/2.json"]
    assert key.startswith("manifests/") and manifest_data_bytes(key) == 20
    # README: backfilled "from the bucket's S3 Inventory report, never by listing": no call at all
    # reaches the landing bucket (a LIST of 499 TB a month of objects is what the report saves)
    assert calls and not [c for c in calls if c[1] == "land"], calls


@pytest.mark.spark
def test_a_local_backfill_loads_what_was_never_notified_once(tmp_path: Path) -> None:
    data, work = tmp_path / "data", tmp_path / "work"
    write_tree(data, {f"live/{i}.json": [{"n": i, "j": j} for j in range(5)] for i in range(3)})
    assert run_local("--data", str(data), "--workdir", str(work)).returncode == 0
    # Given objects that landed without an event (written straight into the landing folder's source)
    write_tree(data, {f"old/{i}.json": [{"n": 10 + i, "j": j} for j in range(5)] for i in range(2)})
    # When the folder's inventory is written and backfilled
    inventory = write_local_inventory(work)
    report = local_backfill(work, inventory, Selection(), rate_mb_s=0)
    assert (report.selected, report.already_ingested, report.emitted_objects) == (5, 3, 2)
    # And the job runs again
    second = run_local("--data", str(data), "--workdir", str(work))
    assert second.returncode == 0, second.stderr[-2000:]
    assert "fed 0 new files" in second.stdout  # the backfilled objects are not fed again as new
    # Then every record of the five objects is in the table once
    rows = read_rows(work / "output")
    assert sorted((int(r["n"]), int(r["j"])) for r in rows) == sorted(
        (n, j) for n in (0, 1, 2, 10, 11) for j in range(5)
    )
    # And a second backfill finds nothing left to load
    again = local_backfill(work, write_local_inventory(work), Selection(), rate_mb_s=0)
    assert (again.already_ingested, again.emitted_objects) == (5, 0)


def test_a_wrong_database_or_a_refusal_is_one_line(aws: None, capsys: pytest.CaptureFixture[str]) -> None:
    # make backfill DATABASE=<a typo>, or a bucket the caller cannot read: one line naming the
    # make variable and the fix, exit code 2, no traceback
    from glue_processor.local.backfill import main

    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="inv")
    s3.put_object(Bucket="inv", Key="r/manifest.json", Body=json.dumps(manifest_json("CSV", [])))
    args = ["--inventory", "s3://inv/r/manifest.json", "--manifests", "s3://manifests/manifests/"]
    assert main([*args, "--database", "ndjson_ingst"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: DATABASE=ndjson_ingst: no load history load_history there") and "OUTPUT=" in err
    assert "Traceback" not in err
    assert main([*args, "--output", "s3://no-such-bucket/data"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: AWS refused the backfill: ") and "NoSuchBucket" in err, err
    assert main(["--inventory", "s3://inv/r/manifest.json"]) == 2
    assert "MANIFESTS and DATABASE (or OUTPUT)" in capsys.readouterr().err
    # and both sources of what loaded: which one to trust is the user's to say, not ours to pick
    assert main([*args, "--database", "ndjson_ingest", "--output", "s3://out/data"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: give DATABASE (the load history says what loaded) or OUTPUT") and "not both" in err
