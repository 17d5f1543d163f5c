"""Publication cannot wedge the stream: a catalog that refuses is waited out, a batch it refuses for
its own content is poison, and a schema change it would refuse fails before the commit record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from pyiceberg.catalog.sql import SqlCatalog

from glue_processor.commit.publication import PublishRefused, refused
from glue_processor.metrics.setup import job_metrics
from glue_processor.metrics.sinks import JsonlSink
from tests.glue_processor.test_batch import Env
from tests.helpers import read_rows

pytestmark = pytest.mark.spark


def refusal(code: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": f"{code} (injected)"}}, "UpdateTable")


class Refusing:
    """The catalog's commits to the data table refuse while ``errors`` has any left (one per
    attempt); the load history's commits pass."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, errors: list[BaseException]) -> None:
        self.errors = errors
        self.calls = 0
        real = SqlCatalog.commit_table

        def commit_table(catalog: Any, table: Any, requirements: Any, updates: Any) -> Any:
            if table.name()[-1] == "load_history":
                return real(catalog, table, requirements, updates)
            self.calls += 1
            if self.errors:
                raise self.errors.pop(0)
            return real(catalog, table, requirements, updates)

        monkeypatch.setattr(SqlCatalog, "commit_table", commit_table)


def job_with_metrics(env: Env, spark: Any, tmp_path: Path) -> Any:
    metrics = job_metrics(spark, env.settings, sinks=[JsonlSink(tmp_path / "metrics.jsonl")])
    job = env.job(spark)
    job.metrics = metrics
    job.waits = []
    job.sleep = job.waits.append
    job.sink.open()  # the table exists before the catalog starts refusing
    return job


def refusing_job(
    env: Env, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, errors: list[BaseException]
) -> tuple[Any, Refusing]:
    """The job, with metrics, over a catalog whose data-table commits raise ``errors`` first."""
    job = job_with_metrics(env, spark, tmp_path)
    return job, Refusing(monkeypatch, errors)


def emitted(job: Any, tmp_path: Path, name: str) -> float:
    job.metrics.publisher.flush()
    lines = (tmp_path / "metrics.jsonl").read_text().splitlines() if (tmp_path / "metrics.jsonl").exists() else []
    # the job's series (a metric of a table is also published with the Table dimension)
    return sum(d["value"] for d in map(json.loads, lines) if d["name"] == name and "Table" not in d["dimensions"])


def test_a_catalog_that_refuses_for_a_while_is_waited_out_and_every_record_lands(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = Env(tmp_path)
    # Given a catalog that denies the job's commits five times (a policy an operator then fixes)
    job, catalog = refusing_job(env, spark, tmp_path, monkeypatch, [refusal("AccessDeniedException") for _ in range(5)])
    manifest = env.manifest("m1", [env.put("in/x.json", b'{"a":1}\n{"a":2}\n')])
    # When the batch runs
    job.run([manifest], 0)
    # Then it kept every record and published them once the cause was gone
    assert sorted(r["a"] for r in read_rows(tmp_path / "output")) == ["1", "2"]
    assert catalog.calls == 6
    # And each refusal was counted (the alarm's metric), waited out with growing back-off, never poison
    assert emitted(job, tmp_path, "PublishFailures") == 5
    assert len(job.waits) == 5 and all(0 <= w <= 300 for w in job.waits)
    assert not (tmp_path / "output" / "_failures").exists()
    assert not list((tmp_path / "quarantine").rglob("*abandoned*"))


def test_a_batch_the_catalog_refuses_for_its_content_is_poison_and_the_stream_moves_on(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = Env(tmp_path)
    # Given a catalog that refuses the batch's request itself, every time
    errors: list[BaseException] = [refusal("InvalidInputException") for _ in range(100)]
    job, catalog = refusing_job(env, spark, tmp_path, monkeypatch, errors)
    manifest = env.manifest("m1", [env.put("in/x.json", b'{"a":1}\n{"a":2}\n')])
    # When the batch runs
    job.run([manifest], 0)
    # Then after max_batch_attempts refusals the table's share is abandoned: its object quarantined with the cause
    assert catalog.calls == env.settings.max_batch_attempts
    (record,) = [r for r in env.quarantine() if r["kind"] == "file"]
    assert record["source_uri"] == "s3://landing/in/x.json" and "InvalidInputException" in record["reason"]
    assert read_rows(tmp_path / "output") == []
    assert not list((tmp_path / "output" / "events").rglob("*.parquet"))  # its files are gone
    assert emitted(job, tmp_path, "PublishFailures") == 3 and emitted(job, tmp_path, "RefusedObjects") == 1
    # And a replay of that batch publishes nothing, while the next batch (the catalog healthy again) lands
    catalog.errors.clear()
    env.job(spark).run([manifest], 0)
    assert read_rows(tmp_path / "output") == []
    again = env.manifest("m2", [env.put("in/y.json", b'{"a":3}\n')])
    env.job(spark).run([again], 1)
    assert sorted(r["a"] for r in read_rows(tmp_path / "output")) == ["3"]
    # And the abandoned batch's object is not remembered as loaded: a requeue loads it
    env.job(spark).run([env.manifest("m3", [env.put("in/x.json", b'{"a":1}\n{"a":2}\n')])], 2)
    assert sorted(r["a"] for r in read_rows(tmp_path / "output")) == ["1", "2", "3"]


def test_a_schema_change_the_catalog_would_refuse_is_quarantined_before_the_commit_record(
    spark: Any, tmp_path: Path
) -> None:
    env = Env(tmp_path)
    job = env.job(spark)
    # Given a known key no catalog accepts as a column name (as an old commit record could carry)
    job._resumed = True
    job.known_keys.add("bad\nname")
    manifest = env.manifest("m1", [env.put("in/x.json", b'{"bad\\nname":1}\n')])
    # When the batch runs
    record = job.run([manifest], 0)
    # Then nothing of the table's share is committed: the record says why, its object is quarantined whole
    (share,) = record.tables
    assert share.data_files == () and "column names the catalog refuses" in (share.refused or "")
    assert [(s.key, s.status) for s in record.sources] == [("in/x.json", "rejected")]
    (quarantined,) = [r for r in env.quarantine() if r["kind"] == "file"]
    assert quarantined["source_uri"] == "s3://landing/in/x.json" and "would refuse" in quarantined["reason"]
    assert read_rows(tmp_path / "output") == []
    assert not list((tmp_path / "output" / "events").rglob("*.parquet"))  # its files are removed
    # And the batch itself did not fail: the stream goes on
    assert not (tmp_path / "output" / "_failures").exists()


def test_what_is_refused_and_what_is_waited_out() -> None:
    assert refused(refusal("InvalidInputException")) and refused(PublishRefused("x"))
    assert not refused(refusal("AccessDeniedException")) and not refused(refusal("ThrottlingException"))
    assert not refused(ConnectionError("reset")) and not refused(TimeoutError())
    # an error a library raises on the share's content is refused too, unless I/O is in its chain
    assert refused(ValueError("Cannot create partition with a name that exists in schema: ingest_day"))
    assert refused(OverflowError("date value out of range")) and refused(KeyError("_extra.key_value.key"))
    wrapped = ValueError("could not read the metadata")
    wrapped.__cause__ = ConnectionResetError("reset")
    assert not refused(wrapped)


def test_an_unexpected_error_on_the_share_s_content_is_poison_not_a_wedge(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a catalog whose commit fails with a ValueError no check foresaw, every time
    env = Env(tmp_path)
    job, catalog = refusing_job(
        env, spark, tmp_path, monkeypatch, [ValueError("a spec (injected)") for _ in range(100)]
    )
    # When the batch runs, Then it is refused max_batch_attempts times and abandoned, not retried for ever
    job.run([env.manifest("m1", [env.put("in/x.json", b'{"a":1}\n')])], 0)
    assert catalog.calls == env.settings.max_batch_attempts
    (record,) = [r for r in env.quarantine() if r["kind"] == "file"]
    assert "ValueError" in record["reason"]
    # And the next batch lands
    catalog.errors.clear()
    env.job(spark).run([env.manifest("m2", [env.put("in/y.json", b'{"a":3}\n')])], 1)
    assert [r["a"] for r in read_rows(tmp_path / "output")] == ["3"]
