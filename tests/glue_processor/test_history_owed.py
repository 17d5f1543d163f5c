"""What the load history is owed between batches: an idle stream retries it, a stop says what it drops."""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from glue_processor.table.catalog import open_catalog
from glue_processor.table.history import LoadHistory
from tests.glue_processor.test_generations import a_generation_a_manifest
from tests.glue_processor.test_intake import _manifests

pytestmark = pytest.mark.spark


def _metric(path: Path, name: str) -> list[float]:
    return [d["value"] for d in map(json.loads, path.read_text().splitlines()) if d["name"] == name]


def _history_keys(settings: Any) -> list[str]:
    table = open_catalog(settings.catalog_uri).load_table((settings.database, "load_history"))
    return sorted(table.scan().to_arrow().column("key").to_pylist())


def _run(spark: Any, settings: Any, *, until: Any, timeout_s: float = 90) -> tuple[Any, list[int]]:
    """``run_query`` stopped once ``until()`` holds (or after ``timeout_s``), Spark reporting an idle
    trigger every 500 ms (its default: every 10 s)."""
    from glue_processor.main import run_query

    ids: list[int] = []
    returned = threading.Event()

    def stopper() -> None:
        waited = 0.0
        while not returned.wait(0.5):
            waited += 0.5
            if (ids and until()) or waited > timeout_s:
                for query in spark.streams.active:
                    query.stop()

    spark.conf.set("spark.sql.streaming.noDataProgressEventInterval", "500")
    threading.Thread(target=stopper, daemon=True).start()
    try:
        return run_query(spark, settings, on_batch=lambda record, _: ids.append(record.batch_id)), ids
    finally:
        returned.set()
        spark.conf.unset("spark.sql.streaming.noDataProgressEventInterval")


def test_an_idle_stream_gives_the_history_the_batch_it_missed(
    monkeypatch: pytest.MonkeyPatch, spark: Any, tmp_path: Path
) -> None:
    # Given one manifest, and a load history that refuses the first two appends
    metrics = tmp_path / "metrics.jsonl"
    settings = a_generation_a_manifest(
        tmp_path, 1, trigger_interval_seconds="1", metrics_sinks="jsonl", metrics_jsonl_path=str(metrics)
    )
    append, attempts = LoadHistory._append, []

    def flaky(self: LoadHistory, *args: Any, **kwargs: Any) -> None:
        attempts.append(1)
        if len(attempts) <= 2:
            raise OSError("the catalog refuses the history table")
        append(self, *args, **kwargs)

    monkeypatch.setattr(LoadHistory, "_append", flaky)
    # When the job runs its one batch, then no data comes
    _, ids = _run(spark, settings, until=lambda: len(attempts) >= 3)
    # Then the idle triggers retried the append, no batch did: the history has the object once
    assert ids == [0] and len(attempts) == 3
    assert _history_keys(settings) == ["o000.ndjson"]
    # And the metric said it was owed after the batch and the failed retry, and not after the good one
    assert _metric(metrics, "LoadHistoryBehind") == [1, 1, 0]
    assert set(_metric(metrics, "LoadHistoryDropped")) == {0}


def test_a_job_that_stops_owing_the_history_says_which_batch_it_drops(
    monkeypatch: pytest.MonkeyPatch, spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a load history that refuses every append
    metrics = tmp_path / "metrics.jsonl"
    settings = a_generation_a_manifest(
        tmp_path, 1, trigger_interval_seconds="1", metrics_sinks="jsonl", metrics_jsonl_path=str(metrics)
    )
    attempts: list[int] = []

    def refused(self: LoadHistory, *args: Any, **kwargs: Any) -> None:
        attempts.append(1)
        raise OSError("the catalog refuses the history table")

    monkeypatch.setattr(LoadHistory, "_append", refused)
    caplog.set_level(logging.ERROR, logger="glue_processor.table.history")
    # When the job runs a batch, retries it on an idle trigger, and is stopped
    run, ids = _run(spark, settings, until=lambda: len(attempts) >= 2)
    # Then the log names the batch it no longer retries, and the metric counts it, once
    assert ids == [0]
    dropped = [r for r in caplog.records if r.getMessage().startswith("the load history misses a batch")]
    assert [(r.batch_id, r.why) for r in dropped] == [(0, "the job stopped")]  # type: ignore[attr-defined]
    assert sum(_metric(metrics, "LoadHistoryDropped")) == 1
    assert run.last is not None and run.last.tables.history.behind == 0


def _refusing(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The load history refuses every append from now on (until ``monkeypatch.undo()``)."""
    attempts: list[int] = []

    def refused(self: LoadHistory, *args: Any, **kwargs: Any) -> None:
        attempts.append(1)
        raise OSError("the catalog refuses the history table")

    monkeypatch.setattr(LoadHistory, "_append", refused)
    return attempts


@pytest.mark.parametrize("rotate", ["1", "0"], ids=["next-generation", "same-generation"])
def test_a_restart_appends_what_the_stopped_job_still_owed_the_history(
    monkeypatch: pytest.MonkeyPatch, spark: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture, rotate: str
) -> None:
    # Given a job that stopped owing the history its one batch (the append refused, then dropped)
    metrics = tmp_path / "metrics.jsonl"
    settings = a_generation_a_manifest(
        tmp_path, 1, trigger_interval_seconds="1", metrics_sinks="jsonl", metrics_jsonl_path=str(metrics)
    ).model_copy(update={"checkpoint_rotate_manifests": int(rotate)})
    attempts = _refusing(monkeypatch)
    _, ids = _run(spark, settings, until=lambda: len(attempts) >= 2)
    assert ids == [0] and sum(_metric(metrics, "LoadHistoryDropped")) == 1
    # When it restarts, the history works again, and a second object comes (in the next checkpoint
    # generation, a new query, or in the same one)
    monkeypatch.undo()
    _manifests(tmp_path, 1, start=1)
    caplog.set_level(logging.WARNING, logger="glue_processor.commit.owed")
    _, ids = _run(spark, settings, until=lambda: True)
    # Then the restart appended the first run's batch from the ledger: each object once
    assert ids == [0 if rotate == "1" else 1]
    assert _history_keys(settings) == ["o000.ndjson", "o001.ndjson"]
    said = [r for r in caplog.records if r.getMessage().startswith("appended at the restart")]
    assert [r.count for r in said] == [1]  # type: ignore[attr-defined]


def test_a_restart_appends_only_inside_the_window_the_history_can_vouch_for(
    monkeypatch: pytest.MonkeyPatch, spark: Any, tmp_path: Path
) -> None:
    from glue_processor.commit.owed import WINDOW, Debt, replay_owed

    # Given a stopped job that owes the history its batch
    settings = a_generation_a_manifest(tmp_path, 1, trigger_interval_seconds="1").model_copy(
        update={"checkpoint_rotate_manifests": 0}
    )
    attempts = _refusing(monkeypatch)
    run, _ = _run(spark, settings, until=lambda: len(attempts) >= 2)
    monkeypatch.undo()
    job = run.last
    debt = [Debt(job.committer())]
    # When the restart comes later than the window (the history may have thinned the batch's
    # snapshot away, so its absence proves nothing)
    late = datetime.now(UTC) + WINDOW + timedelta(minutes=1)
    # Then nothing is appended
    assert replay_owed(debt, job.tables.history, job.routes, now=late) == []
    assert _history_keys(settings) == []
    # And inside it the batch is appended, once, however often the restart checks
    assert replay_owed(debt, job.tables.history, job.routes) == [(job.query_id, 0)]
    assert replay_owed(debt, job.tables.history, job.routes) == []
    assert _history_keys(settings) == ["o000.ndjson"]


def test_a_restart_whose_history_still_refuses_tries_it_once_and_keeps_every_batch(
    monkeypatch: pytest.MonkeyPatch, spark: Any, tmp_path: Path
) -> None:
    from glue_processor.commit.owed import Debt, replay_owed

    # Given a stopped job that owes the history two batches
    settings = a_generation_a_manifest(tmp_path, 2, trigger_interval_seconds="1").model_copy(
        update={"checkpoint_rotate_manifests": 0}
    )
    attempts = _refusing(monkeypatch)
    run, ids = _run(spark, settings, until=lambda: len(attempts) >= 3)
    assert ids == [0, 1]
    job = run.last
    assert job.tables.history.behind == 0  # dropped at the stop
    # When the restart finds the history still refusing appends
    attempts.clear()
    owed = replay_owed([Debt(job.committer())], job.tables.history, job.routes)
    # Then it tried once, not once per batch, and keeps both to try again
    assert owed == [(job.query_id, 0), (job.query_id, 1)]
    assert len(attempts) == 1 and job.tables.history.behind == 2
