"""A new checkpoint generation never reads a manifest the previous one processed."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import pytest

from bench.batch import local_job
from glue_processor.generations import generation_uri, start_generation
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.local.layout import local_uri
from glue_processor.settings import JobSettings, settings_from_mapping
from tests.glue_processor.test_intake import _manifests

pytestmark = pytest.mark.spark


def a_generation_a_manifest(root: Path, manifests: int, **extra: str) -> JobSettings:
    """A job's settings on ``manifests`` manifests of an object each under ``root``, taken one a
    trigger, in a checkpoint generation each."""
    _manifests(root, manifests)
    size = str((root / "objects" / "bkt" / "o000.ndjson").stat().st_size)
    return settings_from_mapping(
        local_job(
            root,
            objects=root / "objects",
            max_bytes_per_trigger=size,
            max_manifest_bytes=size,
            checkpoint_rotate_manifests="1",
            manifest_archive_uri=(root / "archive").as_uri(),
            **extra,
        )
    )


def run_until(spark: Any, settings: JobSettings, *, batches: int) -> tuple[Any, list[int]]:
    """``run_query`` on a processing-time trigger, stopped once ``batches`` batches are in (a
    generation stops only when its trigger is idle): the run, and the batches' ids."""
    from glue_processor.main import run_query

    ids: list[int] = []
    returned = threading.Event()

    def stopper() -> None:  # once every manifest is in, stop whichever generation runs
        while not returned.wait(0.5):
            if len(ids) >= batches:
                for query in spark.streams.active:
                    query.stop()

    threading.Thread(target=stopper, daemon=True).start()
    try:
        return run_query(spark, settings, on_batch=lambda record, _: ids.append(record.batch_id)), ids
    finally:
        returned.set()


def test_a_processed_manifest_left_behind_is_archived_before_the_next_generation(spark: Any, tmp_path: Path) -> None:
    root = tmp_path / "work dir ü"
    manifests, archive = root / "manifests", root / "archive"
    manifests.mkdir(parents=True)
    settings = settings_from_mapping(
        {
            "manifest_uri": local_uri(manifests),
            "manifest_archive_uri": local_uri(archive),
            "output_uri": local_uri(root / "out"),
            "quarantine_uri": local_uri(root / "q"),
            "checkpoint_uri": local_uri(root / "cp"),
            "checkpoint_rotate_manifests": "2",
            "max_files_per_trigger": "1",
        }
    )
    # Given a full first generation (2 batches) whose file source processed m1 and m2, and whose
    # archiving left m2 behind (best effort); m4 was planned for a batch 2 it never committed; m3 is new
    gen1 = Path(generation_uri(settings.checkpoint_uri, 1).removeprefix("file://"))
    (gen1 / "commits").mkdir(parents=True)
    for batch in ("0", "1"):
        (gen1 / "commits" / batch).write_text("v1\n{}\n")
    (gen1 / "sources" / "0").mkdir(parents=True)
    for n in (1, 2, 4):
        # Spark logs the path percent-encoded
        batch = min(n - 1, 2)
        entry = {"path": (manifests / f"m{n}.json").as_uri(), "timestamp": 0, "batchId": batch}
        (gen1 / "sources" / "0" / str(batch)).write_text("v1\n" + json.dumps(entry) + "\n")
    for n in (2, 3, 4):
        (manifests / f"m{n}.json").write_text("{}")
    # When the job starts the next generation
    checkpoint = start_generation(HadoopFS(spark), settings)
    # Then it runs in generation 2, and the left-behind m2 was archived first; m3 and m4 still wait
    assert checkpoint.endswith("gen-00002")
    assert sorted(p.name for p in manifests.iterdir()) == ["m3.json", "m4.json"]
    assert sorted(p.name for p in archive.iterdir()) == ["m2.json"]


def test_processed_paths_reads_the_checkpoint_real_spark_writes(spark: Any, tmp_path: Path) -> None:
    """The file source's checkpoint log is Spark's internal format: pin it to the Spark Glue runs.
    A real streaming query (this environment's Spark, which must be a Glue version's) writes the
    log, compacted every 2 batches, and processed_paths must read back every file it processed."""
    import pyspark

    from infra.runtime import glue_runtimes

    assert pyspark.__version__ in {r.spark for r in glue_runtimes().values()}, pyspark.__version__
    manifests, checkpoint = tmp_path / "in dir ü", tmp_path / "checkpoint"
    manifests.mkdir()
    for n in range(5):
        (manifests / f"m{n}.json").write_text('{"a": 1}\n')
    spark.conf.set("spark.sql.streaming.fileSource.log.compactInterval", "2")
    try:
        query = (
            spark.readStream.schema("a INT")
            .option("maxFilesPerTrigger", 1)
            .json(local_uri(manifests))
            .writeStream.foreachBatch(lambda df, batch_id: None)
            .option("checkpointLocation", local_uri(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
    finally:
        spark.conf.unset("spark.sql.streaming.fileSource.log.compactInterval")
    log = checkpoint / "sources" / "0"
    assert any(p.name.endswith(".compact") for p in log.iterdir()), sorted(p.name for p in log.iterdir())
    # the local checkpoint is written through Hadoop's FileSystem, not its FileContext, whose checksum
    # layer leaves a .crc beside each file and forks `chmod` and `readlink` for each (local/session.py)
    assert not [p.name for p in checkpoint.rglob("*.crc")]
    assert all(p.read_text().startswith("v1\n") for p in log.iterdir() if not p.name.startswith("."))
    from glue_processor.generations import _key, processed_paths

    got = {_key(p) for p in processed_paths(HadoopFS(spark), local_uri(checkpoint))}
    assert got == {_key(local_uri(manifests / f"m{n}.json")) for n in range(5)}


def test_a_signal_while_the_next_generation_sets_up_stops_that_generation(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGTERM that comes between two generations reaches the previous query's handler; the next
    generation's query is stopped by it (between batches) instead of running on until the job is
    killed."""
    import os
    import signal

    import glue_processor.generations
    from glue_processor.main import run_query

    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    start = glue_processor.generations.start_generation
    calls: list[int] = []

    def start_and_signal(fs: Any, settings: Any) -> str:
        calls.append(1)
        if len(calls) == 2:  # the second generation sets up: the first one's handler takes it
            os.kill(os.getpid(), signal.SIGTERM)
        return start(fs, settings)

    monkeypatch.setattr(glue_processor.generations, "start_generation", start_and_signal)
    # Given four manifests and a checkpoint generation of one manifest
    settings = a_generation_a_manifest(tmp_path, 4, trigger="available-now")
    try:
        # When a SIGTERM comes while the second generation sets up
        run = run_query(spark, settings)
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
    # Then the second generation's query stops, and the run says it was stopped (without the
    # signal carried over, it ran to its end and the run ended as if never stopped)
    assert len(calls) == 2 and run.generations == 2
    assert run.interrupted


def test_history_appends_kept_in_one_generation_are_made_in_the_next(
    monkeypatch: pytest.MonkeyPatch, spark: Any, tmp_path: Path
) -> None:
    import glue_processor.generations
    from glue_processor.table.catalog import open_catalog
    from glue_processor.table.history import LoadHistory

    # Given three manifests, a checkpoint generation a manifest, and a load history that refuses every
    # append of the first generation (a new generation is a new batch job in the same process)
    settings = a_generation_a_manifest(tmp_path, 4, trigger_interval_seconds="2")
    append, start, generations, failed = LoadHistory._append, glue_processor.generations.start_generation, [], []

    def flaky(self: LoadHistory, record: Any, *args: Any, **kwargs: Any) -> None:
        if len(generations) == 1:
            failed.append(record.batch_id)
            raise OSError("the catalog refuses the history table")
        append(self, record, *args, **kwargs)

    def counted(*args: Any, **kwargs: Any) -> str:
        generations.append(1)
        return start(*args, **kwargs)

    monkeypatch.setattr(LoadHistory, "_append", flaky)
    monkeypatch.setattr(glue_processor.generations, "start_generation", counted)
    # When the job runs them, a trigger every two seconds, the history back from the second generation on
    run, _ = run_until(spark, settings, batches=4)
    # Then a later generation made the appends the first one kept: every object is in the history once
    assert run.generations >= 2 and failed
    history = open_catalog(settings.catalog_uri).load_table((settings.database, "load_history"))
    keys = sorted(history.scan().to_arrow().column("key").to_pylist())
    assert keys == ["o000.ndjson", "o001.ndjson", "o002.ndjson", "o003.ndjson"]
