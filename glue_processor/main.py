"""Entry point of the streaming job, on AWS Glue and locally: the same core code.

On Glue this file is the job's ``ScriptLocation``; the packages travel in ``--extra-py-files``.
Locally: ``python -m glue_processor.main --manifest_uri file:///... --output_uri ...``.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import logging
import sys
import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glue_processor.settings import JobSettings, ours_from_argv, settings_from_mapping

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from contracts.ledger import CommitRecord
    from glue_processor.batch import ManifestBatchJob
    from glue_processor.commit.publisher import Settlement

logger = logging.getLogger("glue_processor")
_frozen = threading.Event()  # set once this process's start-up objects are frozen


def freeze_start_up() -> None:
    """Once per process, before the first trigger: move every object alive now (the modules of
    PySpark, pyarrow, pyiceberg and the job, the session, the tables' metadata) out of Python's
    cyclic collector (``gc.freeze``). A full collection otherwise walks them all: ~85 ms on the
    driver every ninth batch or so (docs/performance.md). The cost: a cycle among them that becomes
    garbage later is never collected, so what the first generation set up at most is kept past its
    use; objects made later are collected as before. At exit they are handed back, so the
    interpreter's last collection sees them (an extension that counts its objects at exit, DuckDB's
    types, would report them as leaked)."""
    if not _frozen.is_set():
        gc.collect()
        gc.freeze()
        atexit.register(gc.unfreeze)
        _frozen.set()


def parse_settings(argv: Sequence[str]) -> JobSettings:
    """Our settings from a Glue or local argv (Glue's own arguments are left to Glue)."""
    return settings_from_mapping(ours_from_argv(argv))


@dataclass
class QueryRun:
    """What :func:`run_query` leaves its caller. A past generation's batch job is let go when the
    next one starts (it holds its tables, dedupe index and key state: a driver that rotates its
    checkpoint 24/7 must not hold every generation's); of each, only what is bounded is kept."""

    committed: deque[CommitRecord]  # the latest commit records (``records_kept``)
    progress: deque[dict[str, Any]]  # Spark's progress reports of the latest batches (``progress_kept``)
    generations: int = 0
    fenced: bool = False  # another run of the job committed a batch first
    interrupted: bool = False  # stopped by a signal between batches
    last: ManifestBatchJob | None = None  # the last generation's job

    def ended(self, job: ManifestBatchJob, *, fenced: bool = False, interrupted: bool = False) -> None:
        """A generation ended (its job put its records in ``committed``): let its query go (the
        job's callbacks hold it, and the query holds the job through the JVM: a cycle neither
        collector sees)."""
        job.on_rotate = job.on_replan = None
        self.generations += 1
        self.fenced = self.fenced or fenced or job.fenced
        self.interrupted = self.interrupted or interrupted
        self.last = job


def run_query(
    spark: SparkSession,
    settings: JobSettings,
    *,
    on_batch: Callable[[CommitRecord, Sequence[Settlement]], None] | None = None,
    on_replay: Callable[[CommitRecord, Sequence[Settlement]], None] | None = None,
    early_stop: threading.Event | None = None,
    records_kept: int = 0,
    progress_kept: int = 0,
) -> QueryRun:
    """Run the query, generation after generation, until it ends or is stopped (SIGTERM/SIGINT
    stop it between batches). ``on_batch``: told each batch this run commits and how each table's
    share settled, once published (the local runner's progress line and summary); ``on_replay``: told
    each batch an earlier run committed that this run finished publishing (kept in ``committed``
    too). ``early_stop``:
    set by a signal that came before the query could take it (the local runner's Ctrl-C while Spark
    starts): the query stops at once. ``records_kept``, ``progress_kept``: how many of the latest
    commit records and Spark progress reports the run keeps for its caller (the job on Glue keeps
    none)."""

    from glue_processor.batch import ManifestBatchJob
    from glue_processor.generations import rotate_after_batches, start_generation
    from glue_processor.hadoop_fs import HadoopFS
    from glue_processor.intake import Intake
    from glue_processor.metrics.setup import job_metrics
    from glue_processor.stream import start_query, stop_after_batch, stop_gracefully, stop_on_signal

    fs = HadoopFS(spark)
    run = QueryRun(committed=deque(maxlen=records_kept), progress=deque(maxlen=progress_kept))
    intake = Intake(settings)
    asked = early_stop  # a stop asked for before the next query took its handlers
    while True:
        # the previous generation's job: run.last lets go of it here; the locals and the signal
        # handler hold it until the next query replaces them, the JVM (the query's callbacks) until
        # it next collects
        owed = run.last.tables.history if run.last is not None else None  # its history appends kept
        run.last = None
        generation = settings.model_copy(update={"checkpoint_uri": start_generation(fs, settings)})
        metrics = job_metrics(spark, generation)
        batch_job = ManifestBatchJob(
            spark,
            generation,
            metrics=metrics,
            rotate_after=rotate_after_batches(settings),
            committed=run.committed,
        )
        if owed is not None and batch_job.tables.history is not None:
            batch_job.tables.history.take_over(owed)  # a new generation is a new job, not a restart
        batch_job.on_batch = on_batch
        batch_job.on_replay = on_replay
        batch_job.intake = intake if settings.trigger == "processing-time" else None
        metrics.attach(spark, generation, on_idle=batch_job.idle)
        stopped: threading.Event | None = None
        try:
            batch_job.start()  # before the first trigger: its batch then does only its own work
            freeze_start_up()
            per_trigger = intake.first(settings.manifest_uri)
            while True:  # a query per count of manifests per trigger (glue_processor.intake)
                query = start_query(spark, generation, batch_job, manifests_per_trigger=per_trigger)
                # processing-time: stop when the trigger is idle; available-now runs batches back to back, so
                # stop soon (an interrupted batch re-runs in the next generation, its objects deduplicated)
                wait_s = 2.0 if settings.trigger == "available-now" else 600.0
                batch_job.on_rotate = lambda q=query, w=wait_s: threading.Thread(
                    target=stop_gracefully, args=(q,), kwargs={"timeout_seconds": w}, daemon=True
                ).start()
                batch_job.on_replan = lambda batch_id, q=query: threading.Thread(
                    target=stop_after_batch, args=(q, batch_id), daemon=True
                ).start()
                # a signal between two queries (a replan's restart, a new generation) reached the
                # previous handlers: this query stops at once
                stopped = stop_on_signal(query, early=asked)
                asked = stopped
                try:
                    query.awaitTermination()
                except Exception:
                    if not batch_job.fenced:
                        raise
                    # Another run of the job committed a batch first: that run carries on, this one ends.
                    logger.warning("another run of this job owns the checkpoint; this run ends without publishing")
                    run.ended(batch_job, fenced=True)
                    return run
                finally:
                    if progress_kept:
                        with contextlib.suppress(Exception):  # a report, never the reason a run fails
                            run.progress.extend(dict(p) for p in query.recentProgress)
                if stopped.is_set() or batch_job.rotate_requested or not batch_job.replan_to:
                    break
                # the same checkpoint, tables and state: only the file source's count changes
                per_trigger, batch_job.replan_to = intake.start(batch_job.replan_to), None
        finally:
            if stopped is None or stopped.is_set() or not batch_job.rotate_requested:
                batch_job.stop_owing()  # no next generation takes its history appends over
            metrics.close(spark)
        run.ended(batch_job, interrupted=stopped.is_set())
        if stopped.is_set() or not batch_job.rotate_requested:
            return run
        logger.info("checkpoint generation full; continuing in a new one", extra={"after": generation.checkpoint_uri})


def run(argv: Sequence[str], *, script: str = "main.py") -> int:
    """Run the job on ``argv`` (the arguments after the script's name)."""
    settings = parse_settings(argv)
    try:
        from awsglue.context import GlueContext
        from awsglue.job import Job
        from awsglue.utils import getResolvedOptions
    except ImportError:
        # Not on Glue: the local runner's session (finds a JDK). Imported only here, so the job's
        # zip, which leaves glue_processor/local/ out, never needs it on Glue.
        from glue_processor.local.session import local_session

        run_query(local_session(), settings)
        return 0

    from pyspark.context import SparkContext

    from glue_processor.session import apply_job_conf

    # getResolvedOptions parses args[1:]: it expects sys.argv whole, the script's name first.
    args = getResolvedOptions([script, *argv], ["JOB_NAME"])
    glue_context = GlueContext(SparkContext.getOrCreate())
    spark = glue_context.spark_session
    apply_job_conf(spark)
    job = Job(glue_context)
    job.init(args["JOB_NAME"], args)
    run_query(spark, settings)
    job.commit()
    return 0


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    sys.exit(run(sys.argv[1:], script=sys.argv[0]))


if __name__ == "__main__":
    main()
