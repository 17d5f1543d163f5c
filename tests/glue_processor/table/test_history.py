"""The load history (issue 26, item 3): one row per object version a batch accepted, appended with
the batch, exactly once, through a replay after a crash between the data and the history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from glue_processor.metrics.setup import job_metrics
from glue_processor.metrics.sinks import JsonlSink
from glue_processor.table.catalog import open_catalog
from glue_processor.table.iceberg import IcebergSink
from tests.glue_processor.test_batch import BUCKET, Env


def _lines(*records: dict[str, Any]) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def history(env: Env) -> list[dict[str, Any]]:
    table = open_catalog(env.settings.catalog_uri).load_table((env.settings.database, "load_history"))
    return sorted(table.scan().to_arrow().to_pylist(), key=lambda r: (r["batch_id"], r["key"]))


def test_every_object_version_of_a_batch_is_a_row_of_the_load_history_once(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    # Given a batch of a good object and one with a malformed line, and a batch naming a missing object
    good = env.put("in/a.json", _lines({"a": 1}, {"a": 2}))
    mixed = env.put("in/b.json", b'{"b": 1}\nnot json\n')
    first = job.run([env.manifest("m0", [good, mixed])], 0)
    first_snapshot = job.last_snapshot_id
    missing = env.put("in/gone.json", _lines({"c": 1}))
    env.buckets.path_of(BUCKET, "in/gone.json").unlink()
    second = job.run([env.manifest("m1", [missing])], 1)
    # Then the load history holds one row per object version, with its outcome and the data snapshot
    rows = history(env)
    got = [(r["batch_id"], r["key"], r["status"], r["rows_written"], r["lines_quarantined"]) for r in rows]
    assert got == [
        (0, "in/a.json", "ingested", 2, 0),
        (0, "in/b.json", "ingested", 1, 1),
        (1, "in/gone.json", "missing", 0, 0),
    ]
    assert {r["table_name"] for r in rows} == {"ingest.events"}
    assert first_snapshot is not None and [r["snapshot_id"] for r in rows[:2]] == [first_snapshot] * 2
    assert rows[2]["snapshot_id"] is None  # the batch wrote no data file
    assert rows[0]["commit_time"] == first.committed_at and rows[2]["commit_time"] == second.committed_at
    assert rows[2]["reason"]
    # And publishing the batches again (a replay) appends nothing
    job.publisher().publish(first, job.committer(), fresh=False)
    job.publisher().publish(second, job.committer(), fresh=False)
    assert len(history(env)) == 3


def test_a_crash_between_the_data_and_the_history_is_finished_by_the_replay(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    assert isinstance(job.sink, IcebergSink)
    # Given a batch whose data was appended, but whose history was not (the run died in between)
    history_writer, job.tables.history = job.tables.history, None
    record = job.run([env.manifest("m0", [env.put("in/a.json", _lines({"a": 1}))])], 0)
    data_snapshot = job.last_snapshot_id
    job.tables.history = history_writer
    # When the publication is replayed
    (settled,) = job.publisher().publish(record, job.committer(), fresh=False)
    assert (settled.snapshot, settled.settled) == (data_snapshot, "published")
    # Then the history has the batch once, naming the data's snapshot
    rows = history(env)
    assert [(r["key"], r["snapshot_id"]) for r in rows] == [("in/a.json", data_snapshot)]
    job.publisher().publish(record, job.committer(), fresh=False)
    assert len(history(env)) == 1


def test_a_failing_history_never_holds_up_the_data(spark: Any, tmp_path: Path, caplog: Any) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    assert job.tables.history is not None

    def broken() -> Any:
        raise OSError("the history table's location is not writable")

    # Given a load history that cannot be written
    job.tables.history._table = broken
    # When a batch runs
    job.run([env.manifest("m0", [env.put("in/a.json", _lines({"a": 1}, {"a": 2}))])], 0)
    # Then its data is in the table, and the log says which batch the history misses
    rows = open_catalog(env.settings.catalog_uri).load_table((env.settings.database, "events")).scan().to_arrow()
    assert rows.num_rows == 2
    assert any("load history" in r.message and getattr(r, "batch_id", None) == 0 for r in caplog.records)
    assert job.tables.history.behind == 1


def test_a_history_that_comes_back_is_given_the_batches_it_missed(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    job.metrics = job_metrics(spark, env.settings, sinks=[JsonlSink(tmp_path / "metrics.jsonl")])
    history_writer = job.tables.history
    assert history_writer is not None
    working, calls = history_writer._table, []

    def broken() -> Any:
        calls.append(1)
        raise OSError("the catalog refuses the history table")

    # Given a load history down for two batches
    history_writer._table = broken
    job.run([env.manifest("m0", [env.put("in/a.json", _lines({"a": 1}))])], 0)
    job.run([env.manifest("m1", [env.put("in/b.json", _lines({"b": 1}))])], 1)
    # Then the second batch tried the history once, not once per batch it owes (the first read it
    # twice: what a restart owes it, glue_processor.commit.owed, then its own append)
    assert len(calls) == 3 and history_writer.behind == 2
    # When it comes back and the next batch runs
    history_writer._table = working
    job.run([env.manifest("m2", [env.put("in/c.json", _lines({"c": 1}))])], 2)
    # Then the history has every batch once, and owes nothing
    assert [(r["batch_id"], r["key"]) for r in history(env)] == [(0, "in/a.json"), (1, "in/b.json"), (2, "in/c.json")]
    assert history_writer.behind == 0
    # And the metric said what it owed after each batch
    job.metrics.publisher.flush()
    owed = [
        d["value"]
        for d in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())
        if d["name"] == "LoadHistoryBehind"
    ]
    assert owed == [1, 2, 0]


def test_a_history_down_too_long_is_owed_a_bounded_list(monkeypatch: Any, spark: Any, tmp_path: Path) -> None:
    import glue_processor.table.history as module

    env = Env(tmp_path)
    job = env.job(spark)
    job.metrics = job_metrics(spark, env.settings, sinks=[JsonlSink(tmp_path / "metrics.jsonl")])
    history_writer = job.tables.history
    assert history_writer is not None
    working = history_writer._table

    def broken() -> Any:
        raise OSError("down")

    # Given a bound of 2 appends kept, and a history down for 3 batches
    monkeypatch.setattr(module, "BEHIND", 2)
    history_writer._table = broken
    for n in range(3):
        job.run([env.manifest(f"m{n}", [env.put(f"in/{n}.json", _lines({"n": n}))])], n)
    # Then 2 are kept and the oldest is dropped (in the ledger only)
    assert (len(history_writer._behind), history_writer.lost, history_writer.behind) == (2, 1, 2)
    # When it comes back: the kept ones are appended, the dropped one is not, and nothing is owed
    history_writer._table = working
    job.run([env.manifest("m3", [env.put("in/3.json", _lines({"n": 3}))])], 3)
    assert [r["batch_id"] for r in history(env)] == [1, 2, 3]
    assert history_writer.behind == 0
    # And the drop was counted in the report of the batch that made it, and in no other: the alarm
    # on it fires for each loss, and clears once the history works again
    job.metrics.publisher.flush()
    values = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [d["value"] for d in values if d["name"] == "LoadHistoryDropped"] == [0, 0, 1, 0]
    assert [d["value"] for d in values if d["name"] == "LoadHistoryBehind"] == [1, 2, 2, 0]


def test_a_replayed_batch_is_owed_once(spark: Any, tmp_path: Path) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    history_writer = job.tables.history
    assert history_writer is not None

    def broken() -> Any:
        raise OSError("down")

    # Given a batch the history missed
    history_writer._table = broken
    record = job.run([env.manifest("m0", [env.put("in/a.json", _lines({"a": 1}))])], 0)
    assert history_writer.behind == 1
    # When its publication is replayed while the history is still down
    job.publisher().publish(record, job.committer(), fresh=False)
    # Then it is owed once: one place of the 32, one append later
    assert history_writer.behind == 1


def test_reconcile_reads_the_load_history_and_agrees_with_the_ledger(spark: Any, tmp_path: Path) -> None:
    from glue_processor.local.comparison import LandedObject, reconcile
    from glue_processor.local.reconcile import history_loads, loads_of, local_records

    env = Env(tmp_path)
    job = env.job(spark)
    # Given a loaded object, a missing one, and one that landed but was never notified
    good = env.put("in/a.json", _lines({"a": 1}))
    gone = env.put("in/gone.json", _lines({"c": 1}))
    env.buckets.path_of(BUCKET, "in/gone.json").unlink()
    job.run([env.manifest("m0", [good, gone])], 0)
    lost = env.put("in/lost.json", _lines({"d": 1}))
    landed = [LandedObject(BUCKET, e.key, e.etag, e.size) for e in (good, gone, lost)]
    # When reconcile reads the load history (one scan) instead of the ledger (a read per batch)
    table = open_catalog(env.settings.catalog_uri).load_table((env.settings.database, "load_history"))
    from_history = reconcile(landed, history_loads(table))
    from_ledger = reconcile(landed, loads_of(local_records(tmp_path)))
    # Then both say the same, and the history also says which table each object went to
    assert [o.key for o in from_history.never_ingested] == ["in/gone.json", "in/lost.json"]
    assert from_history.failed == {f"s3://{BUCKET}/in/gone.json": from_history.failed[f"s3://{BUCKET}/in/gone.json"]}
    assert from_history.failed[f"s3://{BUCKET}/in/gone.json"].startswith("missing: ")
    assert from_history.never_ingested == from_ledger.never_ingested and from_history.failed == from_ledger.failed
    assert from_history.tables == {"ingest.events": 1} and from_ledger.tables == {}
