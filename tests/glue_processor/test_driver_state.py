"""A driver that runs 24/7 keeps no state per past generation: each checkpoint generation's batch
job (its tables, dedupe index and key state) and its metrics listener are let go when the next
generation starts, and no batch's commit record stays on the driver unless the caller asks."""

from __future__ import annotations

import gc
import time
import weakref
from pathlib import Path
from typing import Any

import pytest

from tests.glue_processor.test_generations import a_generation_a_manifest, run_until

pytestmark = pytest.mark.spark


def _collected(spark: Any, refs: list[weakref.ref[Any]], *, within_s: float = 60.0) -> list[weakref.ref[Any]]:
    """The refs still alive after both collectors ran until ``within_s``: an object Python passed to
    the JVM is let go only once the JVM collected its proxy and told Python (py4j's callbacks)."""
    deadline = time.monotonic() + within_s
    alive = refs
    while alive and time.monotonic() < deadline:
        spark.sparkContext._jvm.System.gc()
        time.sleep(0.5)
        gc.collect()
        alive = [r for r in alive if r() is not None]
    return alive


def test_past_generations_jobs_and_listeners_are_let_go(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import glue_processor.batch
    import glue_processor.metrics.listener

    jobs: list[weakref.ref[Any]] = []
    listeners: list[weakref.ref[Any]] = []
    for cls, refs in (
        (glue_processor.batch.ManifestBatchJob, jobs),
        (glue_processor.metrics.listener.MetricsListener, listeners),
    ):
        init = cls.__init__

        def tracked(self: Any, *args: Any, _init: Any = init, _refs: list[Any] = refs, **kwargs: Any) -> None:
            _init(self, *args, **kwargs)
            _refs.append(weakref.ref(self))

        monkeypatch.setattr(cls, "__init__", tracked)
    # Given six manifests of an object each, a trigger of one, a checkpoint generation of one
    settings = a_generation_a_manifest(tmp_path, 6, trigger_interval_seconds="2")
    # When the job runs them, a trigger every two seconds (a generation stops when its trigger is idle)
    run, batches = run_until(spark, settings, batches=6)
    # Then every object is in the table, in a generation a batch (now and then two: a trigger may start
    # before the stop)
    assert run.generations >= 4 and len(batches) == 6
    table = spark.read.option("recursiveFileLookup", "true").option("pathGlobFilter", "*.parquet")
    ids = table.parquet(f"{settings.output_uri}/events").select("id")
    assert ids.count() == ids.distinct().count() == 6 * 50
    # and only the last generation's job is held: every other one, and every closed listener, is let go
    # (but the first listener, when this process froze it with the rest of its start-up: in a cycle
    # that glue_processor.main.freeze_start_up keeps, once a process)
    assert len(jobs) == run.generations and len(listeners) == run.generations
    assert [jobs.index(r) for r in _collected(spark, jobs[:-1])] == []
    assert [listeners.index(r) for r in _collected(spark, listeners[1:])] == []
    assert jobs[-1]() is run.last
    # and no commit record or progress report was kept (nobody asked for them)
    assert not run.committed and not run.progress
