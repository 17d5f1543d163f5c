"""The query's manifests per trigger follow the manifests' data bytes, as the job runs it."""

from __future__ import annotations

import hashlib
import os
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bench.batch import local_job
from contracts.layout import manifest_key
from contracts.manifest import Manifest, ManifestEntry
from glue_processor.intake import Intake
from glue_processor.settings import settings_from_mapping

pytestmark = pytest.mark.spark


def _manifests(root: Path, n: int, *, start: int = 0) -> list[Path]:
    """``n`` manifests of one small object each, named as the Lambda names them (data bytes last),
    written a second apart (the file source takes them oldest first)."""
    (root / "manifests").mkdir(parents=True, exist_ok=True)
    (root / "objects" / "bkt").mkdir(parents=True, exist_ok=True)
    written = []
    for i in range(start, start + n):
        obj = root / "objects" / "bkt" / f"o{i:03d}.ndjson"
        obj.write_text("".join(f'{{"id": "{i * 100 + j:06d}", "v": "x"}}\n' for j in range(50)))
        entry = ManifestEntry(
            bucket="bkt",
            key=obj.name,
            size=obj.stat().st_size,
            etag=hashlib.md5(obj.name.encode()).hexdigest(),
            event_time=datetime.now(UTC),
        )
        manifest = Manifest.of([entry])
        path = root / "manifests" / manifest_key("", manifest)
        path.write_bytes(manifest.to_json())
        os.utime(path, (1_700_000_000 + i, 1_700_000_000 + i))
        written.append(path)
    return written


def _settings(root: Path, **extra: str) -> Any:
    # a budget of ten objects' bytes: counted at the most a manifest may reference, one per trigger
    size = (root / "objects" / "bkt" / "o000.ndjson").stat().st_size
    return settings_from_mapping(
        local_job(
            root,
            objects=root / "objects",
            max_bytes_per_trigger=str(10 * size),
            max_manifest_bytes=str(10 * size),
            **extra,
        )
    )


def test_a_query_starts_with_the_count_the_waiting_manifests_bytes_ask_for(spark: Any, tmp_path: Path) -> None:
    _manifests(tmp_path, 14)
    settings = _settings(tmp_path)
    assert settings.files_per_trigger == 1  # what the job took before: one manifest a trigger
    assert Intake(settings).first(settings.manifest_uri) == 10


def test_the_running_query_takes_a_new_count_between_batches(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started on an empty prefix (one full manifest a trigger), the job sees small manifests wait,
    starts its query again with the count their bytes ask for, and takes them at once; every object
    once in the table."""
    import glue_processor.intake
    from glue_processor.main import run_query

    monkeypatch.setattr(glue_processor.intake, "REPLAN_MIN_S", 0.0)
    _manifests(tmp_path, 1)
    for p in (tmp_path / "manifests").iterdir():
        p.unlink()  # an empty prefix at the start; the object stays for the budget's size
    settings = _settings(tmp_path, trigger="processing-time", trigger_interval_seconds="1")
    batches: list[int] = []
    done = threading.Event()

    def on_batch(record: Any, _settlements: Any) -> None:
        batches.append(len(record.manifests))
        if len(batches) == 1:
            _manifests(tmp_path, 11, start=1)  # arrive while the first batch runs: 11 wait after it
        if sum(batches) >= 12:
            done.set()

    def stopper() -> None:
        done.wait(180)
        for q in spark.streams.active:
            q.stop()

    _manifests(tmp_path, 1)  # the first batch's one manifest, after the query's count was planned
    threading.Thread(target=stopper, daemon=True).start()
    run = run_query(spark, settings, on_batch=on_batch)
    assert done.is_set(), batches
    assert batches[0] == 1 and sum(batches) == 12
    # the batch after the first sees 10 wait and asks for a count of 10; the query stops right after
    # it (a batch Spark planned meanwhile is replayed with the old count), then takes the rest at once
    big = next(i for i, n in enumerate(batches) if n > 1)
    assert big <= 3 and batches[big] >= 9, batches
    assert run.generations == 1  # one generation: the same job, state and tables across the restart
    table = spark.read.option("recursiveFileLookup", "true").option("pathGlobFilter", "*.parquet")
    ids = table.parquet(f"{settings.output_uri}/events").select("id")
    assert ids.count() == ids.distinct().count() == 12 * 50
