"""One micro-batch, down its stages once: plan -> read -> write -> commit -> report.

- plan (:mod:`glue_processor.plan`): the manifests' objects, deduplicated and checked
  (:func:`~glue_processor.plan.manifests.plan_batch`), cut into parse tasks that keep every core busy
  (:func:`~glue_processor.plan.tasks.plan_tasks`);
- read (:mod:`glue_processor.read`): the tasks, on Spark, read, parse and stage Parquet parts
  (:func:`~glue_processor.read.task.run_task`); their results folded into one
  :class:`~glue_processor.read.outcome.Outcome`;
- write (:mod:`glue_processor.write`): parts into files of about the target size
  (:func:`~glue_processor.write.stage.write_files`);
- commit (:mod:`glue_processor.commit`): the record, written exclusively (the fence), then the
  files published through the table's sink, exactly once, retried until the cause passes
  (:class:`~glue_processor.commit.publisher.Publisher`);
- report (:mod:`glue_processor.metrics.report`).

What the job remembers between batches (known keys, the dedupe index) is :class:`Memory`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession

from contracts.exceptions import FencedOut
from contracts.ledger import CommitRecord
from glue_processor import faults
from glue_processor.commit.failures import Failures
from glue_processor.commit.ledger import BatchCommitter
from glue_processor.commit.publisher import Publisher
from glue_processor.commit.record import Attempt, in_place, make_record, name_outputs
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.metrics.report import report
from glue_processor.plan.manifests import BatchPlan, plan_batch, poison_plan
from glue_processor.plan.memory import Memory
from glue_processor.plan.tasks import Where, plan_tasks
from glue_processor.read.outcome import Outcome, gather
from glue_processor.read.task import run_task
from glue_processor.settings import JobSettings
from glue_processor.table.declared import DeclaredSchema, parse_schema
from glue_processor.table.partitioning import parse_partition_by
from glue_processor.table.sink import sink_for
from glue_processor.write.stage import write_files, write_rejections

if TYPE_CHECKING:
    from glue_processor.metrics.setup import JobMetrics

logger = logging.getLogger(__name__)
COMMITTED_KEPT = 1000


class ManifestBatchJob:
    """The ``foreachBatch`` function, with the state it keeps between batches."""

    def __init__(
        self,
        spark: SparkSession,
        settings: JobSettings,
        *,
        query_id: str | None = None,
        metrics: JobMetrics | None = None,
        rotate_after: int | None = None,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.fs = HadoopFS(spark)
        # Declared column types (--schema): read once; its columns exist from the first batch on.
        self.declared = load_declared(settings.schema_uri) if settings.schema_uri else None
        # Partitions from the record (Iceberg): the tasks split rows by partition before writing.
        self.partitions = (
            parse_partition_by(settings.partition_by, self.declared) if settings.table_format == "iceberg" else None
        )
        # where a committed batch's files become visible: the Iceberg table, or dt= directories
        self.sink = sink_for(settings, self.fs, self.declared, self.partitions)
        self.memory = Memory(settings, self.declared, self.partitions)
        self.metrics = metrics
        self.last_snapshot_id: int | None = None
        self.last_commit_ms = 0.0
        self._query_id = query_id
        # The latest commit records only (for the local runner's summary): a 24/7 driver must not
        # grow with its history.
        self.committed: deque[CommitRecord] = deque(maxlen=COMMITTED_KEPT)
        self.progress: list[dict[str, Any]] = []
        self.rotate_after = rotate_after
        self.rotate_requested = False
        self.on_rotate: Any = None
        self._resumed = False
        self.fenced = False  # set when another run committed a batch first: this run stops
        self.sleep: Any = None  # how publication waits between attempts (None: time.sleep; tests: no wait)

    # -- the stream's side ------------------------------------------------------------------
    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        rows = batch_df.select("manifest_uri", "value").collect()
        self.run([(r.manifest_uri, r.value) for r in rows], batch_id)

    def start(self) -> None:
        """Before the stream starts: open the table, so a wrong catalog or table stops the job at
        start-up and the first batch does only its own work. (What the recent batches learnt is
        read by the first batch: it needs the query's id, which the checkpoint has only then.)"""
        self.sink.open()

    def resume(self) -> None:
        """After a restart: learn from the recent batches (keys, dedupe index, backlog)."""
        last = self.memory.resume(self.committer())
        if last is not None and self.metrics is not None:
            self.metrics.probe.mark_processed(last.manifests)

    @property
    def query_id(self) -> str:
        """The streaming query's id, persisted in the checkpoint: stable across restarts."""
        if self._query_id is None:
            meta = json.loads(self.fs.read_bytes(f"{self.settings.checkpoint_uri}/metadata"))
            self._query_id = str(meta["id"])
        return self._query_id

    @property
    def known_keys(self) -> set[str]:
        return self.memory.known_keys

    @property
    def gzip_expansion(self) -> Any:
        return self.memory.gzip_expansion

    def committer(self) -> BatchCommitter:
        return BatchCommitter(
            self.fs,
            output_uri=self.settings.output_uri,
            quarantine_uri=self.settings.quarantine_uri,
            query_id=self.query_id,
            sink=self.sink,
        )

    # -- one batch ---------------------------------------------------------------------------
    def run(self, manifests: Sequence[tuple[str, str]], batch_id: int) -> CommitRecord:
        """Process one batch; a repeat of a committed batch id only finishes its publication.

        A batch that raises is counted; after ``max_batch_attempts`` failures its manifests are
        quarantined with the last error and the stream moves on (poison manifests).
        """
        if not self._resumed:
            self._resumed = True
            self.resume()
        committer = self.committer()
        existing = committer.load(batch_id)
        if existing is not None:
            return self._finish(existing, committer)
        failures = Failures(self.fs, self.settings.output_uri, self.query_id)
        failed = failures.get(batch_id)
        if failed["count"] >= self.settings.max_batch_attempts:
            reason = f"poison: the batch failed {failed['count']} times; last error: {failed['error']}"
            logger.error("quarantining poison manifests", extra={"batch_id": batch_id, "manifests": len(manifests)})
            return self._run(poison_plan(manifests, reason), batch_id, committer)
        try:
            return self._run(plan_batch(manifests, self.settings, ingested=self.memory.ingested), batch_id, committer)
        except FencedOut:
            # another run committed this batch: not a failure of the batch, and this run must stop
            self.fenced = True
            logger.error("fenced out by another run; stopping without publishing", extra={"batch_id": batch_id})
            raise
        except Exception as exc:
            failures.record(batch_id, failed["count"] + 1, exc)
            raise

    def _run(self, plan: BatchPlan, batch_id: int, committer: BatchCommitter) -> CommitRecord:
        started = time.monotonic()
        now = datetime.now(UTC)
        attempt = Attempt(self.query_id, batch_id, uuid.uuid4().hex[:12], now, self.sink.partition(now))
        staging = committer.staging_uri(self.settings.output_uri, batch_id, attempt.attempt)
        quarantine_staging = committer.staging_uri(self.settings.quarantine_uri, batch_id, attempt.attempt)
        final_dir = self.sink.output_dir(now, query_id=self.query_id, batch_id=batch_id, attempt=attempt.attempt)
        outcome = Outcome(plan)
        stages = Stages()
        if plan.files:
            with stages("read_parse_write"):  # plan the tasks, read
                self._read(plan, outcome, Where(f"{staging}/parts", quarantine_staging, batch_id, now))
            faults.hit("after-read")
            with stages("write"):
                write_files(
                    outcome,
                    # in place: final files, written where the table keeps them; else staged, then moved
                    out_dir=final_dir if self.sink.in_place else staging,
                    prefix=f"part-{attempt.stem}-{attempt.attempt}" if self.sink.in_place else "merged",
                    target_bytes=self.settings.target_file_bytes,
                    keep_parts=not self.sink.in_place,  # a part is staged: only a sink that moves files may keep it
                    declared=self.declared,
                    spark_map=self._spark_map,
                    cores=self.spark.sparkContext.defaultParallelism,
                )
        with stages("write_quarantine"):
            write_rejections(self.fs, outcome, quarantine_staging, batch_id)
        faults.hit("after-stage")
        data_files = (
            in_place(outcome.data_files)
            if self.sink.in_place
            else name_outputs(
                outcome.data_files, final_dir, stem=f"part-{attempt.stem}", suffix=".parquet", attempt=attempt.attempt
            )
        )
        self.memory.gzip_expansion.observe(output_bytes=outcome.gzip_text_bytes, input_bytes=outcome.gzip_bytes)
        record = make_record(
            attempt,
            plan,
            outcome,
            data_files=data_files,
            quarantine_dir=f"{self.settings.quarantine_uri}/{attempt.partition}",
            keys=tuple(sorted(self.memory.known_keys)),
            duration_s=time.monotonic() - started,
            stage_s=stages.seconds,
        )
        footers = {f.uri: f.footer for f in outcome.data_files if f.footer}
        # a schema change the table would refuse fails the batch here, before its commit record
        self.sink.check(record, footers)
        committing = time.monotonic()
        committer.commit(record)
        self.committed.append(record)
        return self._finish(record, committer, footers, since=committing)

    def _read(self, plan: BatchPlan, outcome: Outcome, where: Where) -> None:
        """Plan the parse tasks and run them; fold their results into ``outcome``."""
        specs, unread = plan_tasks(
            plan.files,
            where,
            settings=self.settings,
            known=tuple(sorted(self.memory.known_keys)),
            declared=self.declared,
            partitions=self.partitions,
            gzip_expansion=self.memory.gzip_expansion.value,
            cores=self.spark.sparkContext.defaultParallelism,
            spark_map=self._spark_map,
        )
        results = self._spark_map(run_task, specs)
        self.memory.known_keys = gather(
            outcome, plan.files, results, unread, known=self.memory.known_keys, max_columns=self.settings.max_columns
        )

    def _finish(
        self,
        record: CommitRecord,
        committer: BatchCommitter,
        footers: dict[str, bytes] | None = None,
        *,
        since: float | None = None,
    ) -> CommitRecord:
        """Publish a committed batch, then remember and report it; ``since``: when its commit record
        was being written (None: a replay, which only finishes the publication)."""
        fresh = since is not None
        if committer.abandoned(record.batch_id):
            logger.warning("batch was abandoned (its manifests are quarantined)", extra={"batch_id": record.batch_id})
            return record
        if not fresh:
            logger.info("batch already committed; finishing publication", extra={"batch_id": record.batch_id})
        publisher = Publisher(
            self.fs,
            Failures(self.fs, self.settings.output_uri, self.query_id),
            quarantine_uri=self.settings.quarantine_uri,
            max_refusals=self.settings.max_batch_attempts,
            metrics=self.metrics,
            sleep=self.sleep,
        )
        publishing = time.monotonic() if since is None else since
        snapshot, published = publisher.publish(record, committer, footers)
        self.last_commit_ms = (time.monotonic() - publishing) * 1000
        faults.hit("after-batch")
        if not published:
            return record
        self.last_snapshot_id = snapshot
        if fresh:
            self.memory.published(record)
        report(
            self.metrics,
            record,
            commit_ms=self.last_commit_ms,
            table=self.sink.stats(),
            max_partitions=self.settings.max_partitions_per_batch,
        )
        if record.stats.partitions > self.settings.max_partitions_per_batch:
            logger.warning(
                "batch wrote more partitions than --max_partitions_per_batch (all written, exactly once; each costs "
                "a file, a merge and a manifest entry)",
                extra={"batch_id": record.batch_id, "partitions": record.stats.partitions},
            )
        if fresh:
            self._maybe_rotate(record.batch_id)
            logger.info("batch done", extra={"batch_id": record.batch_id, **record.stats.model_dump()})
        return record

    def _maybe_rotate(self, batch_id: int) -> None:
        if self.rotate_after is not None and batch_id + 1 >= self.rotate_after and not self.rotate_requested:
            self.rotate_requested = True
            if self.on_rotate is not None:
                self.on_rotate()

    def _spark_map(self, fn: Any, items: Sequence[Any]) -> list[Any]:
        """``fn`` over ``items``, one Spark task each (the tasks write; only small results return)."""
        if not items:
            return []
        return list(self.spark.sparkContext.parallelize(list(items), len(items)).map(fn).collect())


class Stages:
    """Wall time per stage of a batch (recorded in the commit record, for profiling)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - t0, 3)


def load_declared(uri: str) -> DeclaredSchema:
    """The declared schema file (s3:// or file://); a bad file stops the job at start-up, naming it."""
    from glue_processor.read.objects import store_for

    return parse_schema(store_for(uri).read(uri).data, source=f"--schema {uri}")
