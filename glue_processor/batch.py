"""One micro-batch, down its stages once: plan -> read -> write -> commit -> report.

- plan (:mod:`glue_processor.plan`): the manifests' objects, deduplicated, checked and routed to
  their tables (:func:`~glue_processor.plan.manifests.plan_batch`); each table's share cut into parse
  tasks, all of them keeping every core busy (:func:`~glue_processor.plan.tasks.plan_tasks`);
- read (:mod:`glue_processor.read`): the tasks of every table, in one Spark job, read, parse and
  stage Parquet parts (:func:`~glue_processor.read.task.run_task`); their results folded into one
  :class:`~glue_processor.read.outcome.Outcome` per table;
- write (:mod:`glue_processor.write`): parts into files of about each table's target size, the
  merges of every table in one Spark job (:func:`~glue_processor.write.stage.write_files`);
- commit (:mod:`glue_processor.commit`): each share's schema change checked (a share its table would
  refuse is quarantined, the others go on), the record written exclusively (the fence), then each
  table's share published through its sink, exactly once, retried, set aside if it keeps failing
  (:class:`~glue_processor.commit.publisher.Publisher`), and the load history appended;
- report (:mod:`glue_processor.metrics.report`).

What the job remembers between batches (each table's keys, the dedupe index) is :class:`Memory`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession

from contracts.exceptions import FencedOut, RowsLost
from contracts.ledger import CommitRecord, Stage
from contracts.manifest import Manifest
from glue_processor import faults, workers
from glue_processor.commit import after_load
from glue_processor.commit.deferred import Deferred, SetAside
from glue_processor.commit.failures import Failures
from glue_processor.commit.ledger import BatchCommitter
from glue_processor.commit.owed import Debt, replay_owed
from glue_processor.commit.publication import PublishRefused
from glue_processor.commit.publisher import Publisher
from glue_processor.commit.record import Attempt, ShareResult, in_place, make_record, name_outputs
from glue_processor.generations import previous_query_id
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.metrics.convert import history_datums
from glue_processor.metrics.report import report
from glue_processor.metrics.timing import Step, Stopwatch
from glue_processor.mirror import Mirror, ShareRemovals
from glue_processor.plan.manifests import BatchPlan, SourceFile, plan_batch, poison_plan
from glue_processor.plan.memory import Memory
from glue_processor.plan.mirror import Replacement
from glue_processor.plan.routes import TableConfig, load_routes
from glue_processor.plan.tasks import Where, plan_tasks
from glue_processor.read.outcome import Outcome, gather
from glue_processor.read.task import TaskResult, run_task
from glue_processor.settings import JobSettings
from glue_processor.shared.rules import misnamed
from glue_processor.shared.spec import FileOutcome, TaskSpec
from glue_processor.table.datafiles import WrittenFile
from glue_processor.table.footer import metadata_of
from glue_processor.table.sink import Sink, Tables
from glue_processor.write.stage import Destination, write_files, write_rejections

if TYPE_CHECKING:
    from glue_processor.intake import Intake
    from glue_processor.metrics.setup import JobMetrics

logger = logging.getLogger(__name__)
# Commit records read at once after a restart, for the keys of the shares set aside.
HOLD_READS = 16


@dataclass
class Share:
    """One table's share of a batch while it runs."""

    config: TableConfig
    sink: Sink
    files: list[SourceFile]
    outcome: Outcome
    out_dir: str
    specs: list[TaskSpec] = field(default_factory=list)
    unread: list[FileOutcome] = field(default_factory=list)
    refused: str | None = None


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
        committed: deque[CommitRecord] | None = None,
    ) -> None:
        self.spark = spark
        self.settings = settings
        self.fs = HadoopFS(spark)
        # The tables and how objects find theirs (--routes, or the one table of --table_name):
        # read and checked once, so a bad routing file or schema stops the job at start-up.
        self.routes = load_routes(settings)
        # where a committed share's files become visible: each table's sink, and the load history
        self.tables = Tables(settings, self.fs, self.routes)
        self.memory = Memory(settings, self.routes)
        # the tables that mirror their buckets: each key's state (docs/mirror.md)
        self.mirror = Mirror(settings, self.routes)
        self._s3: Any = None  # the landing bucket's client, for after_load (made on first use)
        # shares whose publication kept failing, tried again every batch, so one table never holds the
        # others. New ones are set aside with several tables only (one table's batches would only
        # pile up behind it and land out of order), and none when --max_deferred_publications is 0;
        # those set aside before (another routing, another setting) are always tried and reported.
        self.deferred = Deferred(self.fs, settings.output_uri, limit=settings.max_deferred_publications)
        self.set_aside_new = settings.max_deferred_publications > 0 and len(self.routes.tables) > 1
        self.metrics = metrics
        self.last_snapshot_id: int | None = None
        self.last_commit_ms = 0.0
        self._query_id = query_id
        # Where each commit record goes, for a caller that asks (the run's, glue_processor.main: the
        # local runner's summary, the benches); none kept otherwise, as on Glue, where a record of a
        # batch of ~1,700 objects is ~2.9 MB of Python objects and a 24/7 driver must not grow with
        # its history.
        self.committed: deque[CommitRecord] = deque(maxlen=0) if committed is None else committed
        self.rotate_after = rotate_after
        self.rotate_requested = False
        self.on_rotate: Any = None  # stops the query between batches (a generation's rotation)
        # the query's manifests per trigger (glue_processor.intake); replan_to: the count it asks for
        self.intake: Intake | None = None
        self.replan_to: int | None = None
        self.on_replan: Any = None  # told the batch that asked for a new count: stops the query after it
        # told each batch this run commits and how its shares settled, once published (local progress)
        self.on_batch: Any = None
        # told a batch an earlier run committed and this run only finished publishing (a restart
        # after a kill between the batch's commit record and Spark's commit): the local summary
        # counts it, as the run that ended never could
        self.on_replay: Any = None
        self._resumed = False
        self._unheld: list[SetAside] = []  # shares set aside whose keys are not held yet (see _hold_pending)
        self.fenced = False  # set when another run committed a batch first: this run stops
        self.sleep: Any = None  # how publication waits between attempts (None: time.sleep; tests: no wait)
        self.steps = Stopwatch()  # the latest batch's driver steps, timed (bench/stream.py reports them)
        self._said: set[tuple[str, str]] = set()  # (table, column) a misnamed rule was said of

    # -- the stream's side ------------------------------------------------------------------
    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        self.steps = Stopwatch()
        with self.steps(Step.TOTAL):
            with self.steps(Step.COLLECT):
                # the stream's own columns (glue_processor/stream.py): a select on top would cost the
                # batch its analysis and planning again, ~20 ms of each trigger
                rows = batch_df.collect()
            self.run([(r.manifest_uri, r.value) for r in rows], batch_id)

    def start(self) -> None:
        """Before the stream starts: open the tables, so a wrong catalog or table stops the job at
        start-up and the first batch does only its own work. (What the recent batches learnt is
        read by the first batch: it needs the query's id, which the checkpoint has only then.)"""
        self.tables.open()

    def resume(self) -> None:
        """After a restart: learn from the recent batches (keys, dedupe index, backlog), and hold the
        keys of the shares still set aside."""
        try:
            aside = self.deferred.items()
        except Exception:  # S3 refused the read: what those shares taught is learnt, as a batch would
            logger.exception("the shares set aside could not be listed; their keys are learnt, not held")
            aside = None
        last = self.memory.resume(self.committer(), set_aside=None if aside is None else {i.ident for i in aside})
        self._unheld = list(aside or [])
        self._hold_pending()
        if last is not None and self.metrics is not None:
            self.metrics.probe.mark_processed(last.manifests)

    def _replay_history(self, batch_id: int) -> None:
        """After a restart: the load history's rows the last run still owed (its recent batches, and
        the previous generation's, that the history lacks; :mod:`glue_processor.commit.owed`)."""
        history = self.tables.history
        if history is None:
            return
        try:
            previous = previous_query_id(self.fs, self.settings.checkpoint_uri)
        except Exception:  # the history only: its own checks go on without it
            logger.exception("the previous generation's query id could not be read")
            previous = None
        debts = [Debt(self.committer(previous))] if previous and previous != self.query_id else []
        replay_owed([*debts, Debt(self.committer(), before=batch_id)], history, self.routes)

    def _hold_pending(self) -> None:
        """Hold the keys of the shares set aside that the replay did not hold (set aside before the
        dedupe snapshot), read from their records: at most the list's bound of them, in parallel.
        A record that could not be read is tried again before each batch, and said loudly: until
        then a later share may take a case variant of one of its keys."""
        if not self._unheld:
            return
        try:
            listed = {i.ident for i in self.deferred.items()}
        except Exception:  # S3 refused the list: tried again before the next batch
            logger.exception("the shares set aside could not be listed; their keys are held later")
            return
        todo = [
            i for i in self._unheld if i.ident in listed and not self.memory.holds(i.table, (i.query_id, i.batch_id))
        ]

        def keys_of(item: SetAside) -> tuple[str, ...]:
            record = self.committer(item.query_id).load(item.batch_id)
            share = record.share(item.table) if record is not None else None
            return share.keys if share is not None else ()

        failed: list[SetAside] = []
        with ThreadPoolExecutor(max_workers=HOLD_READS) as pool:
            futures = [(item, pool.submit(keys_of, item)) for item in todo]
            for item, future in futures:
                try:
                    keys = future.result()
                except Exception:  # this record only: tried again before the next batch
                    logger.exception("a share set aside could not be read", extra={"batch_id": item.batch_id})
                    failed.append(item)
                    continue
                self.memory.hold(item.table, (item.query_id, item.batch_id), keys)
        if failed:
            logger.error(
                "keys of shares set aside not held yet: a later share may take a case variant of one",
                extra={"shares": [list(i.ident) for i in failed[:20]], "count": len(failed)},
            )
        self._unheld = failed

    @property
    def query_id(self) -> str:
        """The streaming query's id, persisted in the checkpoint: stable across restarts."""
        if self._query_id is None:
            meta = json.loads(self.fs.read_bytes(f"{self.settings.checkpoint_uri}/metadata"))
            self._query_id = str(meta["id"])
        return self._query_id

    @property
    def sink(self) -> Sink:
        """The sink of the job's own table (--table_name)."""
        return self.tables.sink(self.routes.legacy)

    @property
    def known_keys(self) -> set[str]:
        return self.memory.known_keys

    def _misnamed_rules(self, share: Share) -> None:
        """Say, once a job, a rule that reads another case of one of the table's keys (it breaks for
        every row: glue_processor/shared/rules.py, ``misnamed``)."""
        if share.config.rules is None:
            return
        for column, key in misnamed(share.config.rules, share.outcome.final_keys):
            if not _said_once(self._said, share.config.name, column):
                logger.error(
                    "a rule reads a column no record has; the records have another case of it (names are "
                    "case-sensitive): every row breaks the rule",
                    extra={"table": share.config.name, "column": column, "key": key},
                )

    @property
    def gzip_expansion(self) -> Any:
        return self.memory.gzip_expansion

    def committer(self, query_id: str | None = None) -> BatchCommitter:
        return BatchCommitter(
            self.fs,
            output_uri=self.settings.output_uri,
            quarantine_uri=self.settings.quarantine_uri,
            query_id=query_id or self.query_id,
            tables=self.tables,
        )

    # -- one batch ---------------------------------------------------------------------------
    def run(self, manifests: Sequence[tuple[str, str]], batch_id: int) -> CommitRecord:
        """Process one batch; a repeat of a committed batch id only finishes its publication.

        A batch that raises is counted; after ``max_batch_attempts`` failures its manifests are
        quarantined with the last error and the stream moves on (poison manifests).
        """
        with self.steps(Step.PREPARE):
            if not self._resumed:
                self._resumed = True
                self.resume()
                self._replay_history(batch_id)
            self.publisher().retry_deferred(self.committer)
            self._hold_pending()
            committer = self.committer()
            existing = committer.load(batch_id)
        if existing is not None:
            return self._finish(existing, committer)
        with self.steps(Step.PREPARE):
            failures = Failures(self.fs, self.settings.output_uri, self.query_id)
            failed = failures.get(batch_id)
        if failed["count"] >= self.settings.max_batch_attempts:
            reason = f"poison: the batch failed {failed['count']} times; last error: {failed['error']}"
            logger.error("quarantining poison manifests", extra={"batch_id": batch_id, "manifests": len(manifests)})
            return self._run(poison_plan(manifests, reason), batch_id, committer)
        try:
            with self.steps(Step.PLAN):
                window = self.mirror.window(self.memory.ingested)
                plan = plan_batch(manifests, self.settings, ingested=window, route=self.routes.table_of)
                replacing = self.mirror.plan(plan, self.tables, spark_map=self._spark_map)
            return self._run(plan, batch_id, committer, replacing=replacing)
        except FencedOut:
            # another run committed this batch: not a failure of the batch, and this run must stop
            self.fenced = True
            logger.error("fenced out by another run; stopping without publishing", extra={"batch_id": batch_id})
            raise
        except Exception as exc:
            failures.record(batch_id, failed["count"] + 1, exc)
            raise

    def _run(
        self,
        plan: BatchPlan,
        batch_id: int,
        committer: BatchCommitter,
        *,
        replacing: Mapping[str, list[Replacement]] | None = None,
    ) -> CommitRecord:
        started = time.monotonic()
        now = datetime.now(UTC)
        attempt = Attempt(self.query_id, batch_id, uuid.uuid4().hex[:12], now, self.tables.first.partition(now))
        staging = committer.staging_uri(self.settings.output_uri, batch_id, attempt.attempt)
        quarantine_staging = committer.staging_uri(self.settings.quarantine_uri, batch_id, attempt.attempt)
        driver = Outcome(plan)
        by_table = plan.by_table()
        for name in replacing or {}:  # a table whose share only retracts rows still commits
            by_table.setdefault(name, [])
        shares = [self._share(name, files, attempt) for name, files in by_table.items()]
        stages = Stopwatch()
        if shares:
            with stages(Stage.READ_PARSE_WRITE):  # plan the tasks, read
                self._read(shares, Where(f"{staging}/parts", quarantine_staging, batch_id, now))
            faults.hit("after-read")
            with stages(Stage.WRITE):
                in_place_sink = self.tables.first.in_place
                write_files(
                    [
                        Destination(
                            s.outcome,
                            # in place: final files, written where the table keeps them; else staged, then moved
                            out_dir=s.out_dir if in_place_sink else f"{staging}/{s.config.name}",
                            prefix=f"part-{attempt.stem}-{attempt.attempt}" if in_place_sink else "merged",
                            target_bytes=s.config.target_file_bytes,
                            declared=s.config.declared,
                            stats=s.sink.stats_plan(s.outcome.final_keys, s.config.declared),
                            partitions=s.config.partitions,
                            partition_limit=self.settings.partition_limit_per_batch,
                        )
                        for s in shares
                    ],
                    keep_parts=not in_place_sink,  # a part is staged: only a sink that moves files may keep it
                    spark_map=self._spark_map,
                    cores=self.spark.sparkContext.defaultParallelism,
                )
        for s in shares:
            check_rows(s)
            self._misnamed_rules(s)
        removed = {}
        if replacing:  # the files holding the rows of the versions replaced, without them
            with stages(Stage.REWRITE):
                removed = self.mirror.rewrite(
                    self.tables,
                    shares,
                    replacing,
                    name_of=lambda s, n: f"{s.out_dir}/rewrite-{attempt.stem}-{attempt.attempt}-{n:05d}.parquet",
                    spark_map=self._spark_map,
                    cores=self.spark.sparkContext.defaultParallelism,
                )
        results = [self._result(s, attempt, removed.get(s.config.name)) for s in shares]
        # a schema change a table would refuse: that share is quarantined here, before the record
        written = {f.uri: WrittenFile(f.footer, f.stats) for s in shares for f in s.outcome.data_files if f.footer}
        for r in removed.values():
            written.update(r.written)
        self._check(shares, results, driver, written)
        with stages(Stage.WRITE_QUARANTINE):
            for s in shares:
                driver.rejections.extend(s.outcome.rejections)
            write_rejections(self.fs, driver, quarantine_staging, batch_id)
        if plan.carried:  # what this batch leaves to a later one: a manifest of its own, before the commit
            self.fs.write_bytes(*carry_manifest(self.settings.manifest_uri, plan.carried, attempt))
        faults.hit("after-stage")
        for s in shares:
            self.memory.gzip_expansion.observe(output_bytes=s.outcome.gzip_text_bytes, input_bytes=s.outcome.gzip_bytes)
        record = make_record(
            attempt,
            plan,
            driver,
            results,
            quarantine_dir=f"{self.settings.quarantine_uri}/{attempt.partition}",
            duration_s=time.monotonic() - started,
            # and the task seconds the tables' rules took, within read_parse_write (its share of the parse)
            stage_s={**stages.seconds, **_rules_seconds(shares)},
        )
        committing = time.monotonic()
        with self.steps(Step.COMMIT_RECORD):
            committer.commit(record)
        self.committed.append(record)
        return self._finish(record, committer, written, since=committing)

    def _share(self, table: str, files: list[SourceFile], attempt: Attempt) -> Share:
        sink = self.tables.sink(table)
        out_dir = sink.output_dir(
            attempt.committed_at, query_id=attempt.query_id, batch_id=attempt.batch_id, attempt=attempt.attempt
        )
        return Share(self.tables.config(table), sink, files, Outcome(table=table), out_dir)

    def _read(self, shares: list[Share], where: Where) -> None:
        """Plan every table's parse tasks, run them all in one Spark job, and fold each table's
        results into its outcome."""
        cores = self.spark.sparkContext.defaultParallelism
        total = sum(f.entry.size for s in shares for f in s.files) or 1
        specs: list[TaskSpec] = []
        for s in shares:
            share_bytes = sum(f.entry.size for f in s.files)
            planned, s.unread = plan_tasks(
                s.files,
                dataclasses.replace(where, parts_dir=f"{where.parts_dir}/{s.config.name}"),
                settings=self.settings,
                config=s.config,
                known=tuple(sorted(self.memory.keys_of(s.config.name))),
                held=tuple(sorted(self.memory.held_keys(s.config.name))),
                gzip_expansion=self.memory.gzip_expansion.value,
                # each table's tasks in proportion to its bytes: the job's tasks still fill every core once
                cores=max(1, round(cores * share_bytes / total)),
                spark_map=self._spark_map,
            )
            s.specs = [dataclasses.replace(spec, index=len(specs) + n) for n, spec in enumerate(planned)]
            specs.extend(s.specs)
        results: list[TaskResult] = self._spark_map(run_task, specs)
        by_index = {r.index: r for r in results}
        for s in shares:
            gather(
                s.outcome,
                s.files,
                [by_index[spec.index] for spec in s.specs],
                s.unread,
                known=self.memory.keys_of(s.config.name),
                max_columns=s.config.max_columns,
                held=self.memory.held_keys(s.config.name),
            )

    def _result(self, share: Share, attempt: Attempt, removed: ShareRemovals | None = None) -> ShareResult:
        data_files = (
            in_place(share.outcome.data_files)
            if share.sink.in_place
            else name_outputs(
                share.outcome.data_files,
                share.out_dir,
                stem=f"part-{attempt.stem}",
                suffix=".parquet",
                attempt=attempt.attempt,
            )
        )
        if removed is None:
            return ShareResult(share.config.name, share.outcome, data_files)
        return ShareResult(
            share.config.name, share.outcome, data_files, replaced=removed.replaced, rewrites=removed.rewrites
        )

    def _check(
        self, shares: list[Share], results: list[ShareResult], driver: Outcome, written: dict[str, WrittenFile]
    ) -> None:
        """Each share's schema change as its table would take it; a share it would refuse is
        quarantined (its objects whole, with the reason) and its files removed: nothing of it is
        committed, and the other tables go on."""
        for share, result in zip(shares, results, strict=True):
            try:
                share.sink.check(result.share(), written)
            except PublishRefused as exc:
                reason = f"table {share.config.name} would refuse the batch's schema change: {exc}"[:2000]
                logger.error("table share refused", extra={"table": share.config.name, "reason": reason})
                if share.sink.in_place:
                    for f in result.data_files:
                        with contextlib.suppress(Exception):
                            self.fs.delete(f.final)
                driver.refuse(share.outcome, share.files, reason)
                share.refused = result.refused = reason
                result.data_files = []
            except Exception as exc:  # noqa: BLE001 - the table cannot be reached now: publication will retry
                logger.warning(
                    "could not check the share's schema change (its table is out of reach); publication retries it",
                    extra={"table": share.config.name, "error": f"{type(exc).__name__}: {exc}"[:500]},
                )

    def _finish(
        self,
        record: CommitRecord,
        committer: BatchCommitter,
        written: dict[str, WrittenFile] | None = None,
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
        publishing = time.monotonic() if since is None else since
        with self.steps(Step.PUBLISH):
            settlements = self.publisher().publish(record, committer, written, fresh=fresh)
        self.last_commit_ms = (time.monotonic() - publishing) * 1000
        faults.hit("after-batch")
        snapshots = [s.snapshot for s in settlements if s.snapshot is not None]
        self.last_snapshot_id = snapshots[-1] if snapshots else None
        abandoned = {s.table for s in settlements if s.settled == "abandoned"}
        if fresh:
            self.memory.published(record, abandoned=abandoned)
        with self.steps(Step.REPORT):
            report(
                self.metrics,
                record,
                commit_ms=self.last_commit_ms,
                settlements=settlements,
                tables=self.tables.stats(),
                table_of=self.routes.name,
                deferred=self._deferred_count(),
                history_behind=self.tables.history.behind if self.tables.history is not None else 0,
                history_dropped=self.tables.history.take_dropped() if self.tables.history is not None else 0,
                max_partitions=self.settings.max_partitions_per_batch,
            )
        if record.stats.partitions > self.settings.max_partitions_per_batch:
            logger.warning(
                "batch wrote more partitions than --max_partitions_per_batch (all written, exactly once; each costs "
                "a file, a merge and a manifest entry)",
                extra={"batch_id": record.batch_id, "partitions": record.stats.partitions},
            )
        for share in record.tables:
            if share.stats.overflow_records:
                logger.warning(
                    "table share touched more partitions than --partition_limit_per_batch: the rows of its smallest "
                    "partitions went to the null partition, their partition values in _extra",
                    extra={
                        "batch_id": record.batch_id,
                        "table": self.routes.name(share.table),
                        "limit": self.settings.partition_limit_per_batch,
                        "rows_moved": share.stats.overflow_records,
                    },
                )
        if fresh:
            self._maybe_rotate(record.batch_id)
            self._maybe_replan(record.batch_id)
            logger.info("batch done", extra={"batch_id": record.batch_id, **record.stats.model_dump()})
            if self.on_batch is not None:
                self.on_batch(record, settlements)
        elif self.on_replay is not None:
            self.committed.append(record)
            self.on_replay(record, settlements)
        return record

    def idle(self) -> None:
        """A trigger found no data: try again the oldest append the load history is owed (no batch
        comes to do it), and say what it owes after (``LoadHistoryBehind`` goes on while it owes)."""
        history = self.tables.history
        if history is None or not history.retry_idle(every_s=self.settings.trigger_interval_seconds):
            return
        if self.metrics is not None:
            self.metrics.publisher.emit(
                history_datums(history.behind, history.take_dropped(), dimensions=self.metrics.dimensions)
            )

    def stop_owing(self) -> None:
        """The job stops (no next generation takes them over): the appends the load history is still
        owed are dropped, each logged, and counted in ``LoadHistoryDropped``."""
        history = self.tables.history
        if history is None or not history.behind:
            return
        history.abandon()
        if self.metrics is not None:
            self.metrics.publisher.emit(history_datums(0, history.take_dropped(), dimensions=self.metrics.dimensions))

    def _deferred_count(self) -> int:
        try:
            return len(self.deferred)
        except Exception:  # noqa: BLE001 - a metric: the list is read again next batch
            logger.warning("could not read the list of shares set aside")
            return 0

    def publisher(self) -> Publisher:
        return Publisher(
            self.fs,
            self.tables,
            quarantine_uri=self.settings.quarantine_uri,
            max_refusals=self.settings.max_batch_attempts,
            hold_s=self.settings.publish_hold_seconds,
            deferred=self.deferred,
            set_aside_new=self.set_aside_new,
            metrics=self.metrics,
            sleep=self.sleep,
            memory=self.memory,
            published=self._published,
        )

    def _published(self, record: CommitRecord, table: str, snapshot: int | None) -> None:
        """A share is in its table: its keys' states, then what after_load does to what it loaded."""
        self.mirror.remember(self.tables, record, table, snapshot)
        config = self.tables.config(table)
        share = record.share(table)
        if config.after_load == "keep" or share is None:
            return
        failed = after_load.apply(
            record.loaded_by(share),
            self.settings.source_uri_of,
            mode=config.after_load,
            archive_prefix=self.settings.archive_prefix,
            s3=self._landing_s3(),
        )
        # still where they were: a later deletion of them is the user's (a retraction, if asked)
        self.mirror.unarchive(table, failed)

    def _landing_s3(self) -> Any:
        if not self.settings.source_uri_template.startswith("s3://"):
            return None
        if self._s3 is None:
            import boto3

            self._s3 = boto3.client("s3")
        return self._s3

    def _maybe_rotate(self, batch_id: int) -> None:
        if self.rotate_after is not None and batch_id + 1 >= self.rotate_after and not self.rotate_requested:
            self.rotate_requested = True
            if self.on_rotate is not None:
                self.on_rotate()

    def _maybe_replan(self, batch_id: int) -> None:
        """Ask for the query to start again when the manifests waiting ask for another count."""
        if self.intake is None or self.metrics is None or self.rotate_requested or self.replan_to:
            return
        self.replan_to = self.intake.replan(self.metrics.probe.last)
        if self.replan_to and self.on_replan is not None:
            self.on_replan(batch_id)

    def _spark_map(self, fn: Any, items: Sequence[Any]) -> list[Any]:
        """``fn`` over ``items``, one Spark task each (the tasks write; only small results return)."""
        if not items:
            return []
        return list(self.spark.sparkContext.parallelize(list(items), len(items)).map(workers.task(fn)).collect())


def carry_manifest(manifest_uri: str, carried: Sequence[SourceFile], attempt: Attempt) -> tuple[str, bytes]:
    """(uri, bytes) of the manifest listing what a batch carries over. Named for the batch and its
    content, never a name the stream has seen (a carried set can equal another manifest's entries),
    so it is listed once, and a retry carrying the same writes the same. A retry that carries less
    leaves an earlier one listing objects it loaded: the key index makes them duplicates then. The
    data bytes end its name (contracts.layout.manifest_data_bytes)."""
    manifest = Manifest.of({f.entry.identity: f.entry for f in carried}.values())
    stamp = manifest.earliest_event_time.strftime("%Y%m%dT%H%M%SZ")
    batch = f"{attempt.query_id[:8]}-{attempt.batch_id}"
    name = f"{stamp}-carried-{batch}-{manifest.manifest_id[:16]}-{manifest.total_bytes}b.json"
    return f"{manifest_uri.rstrip('/')}/{name}", manifest.to_json()


def _said_once(said: set[tuple[str, str]], table: str, column: str) -> bool:
    """Whether (table, column) was said already; remembered from now on."""
    if (table, column) in said:
        return True
    said.add((table, column))
    return False


def check_rows(share: Share) -> None:
    """The rows in a share's data files (their footers say) are the rows its tasks parsed: any
    difference fails the batch before its commit record (retried, then its manifests quarantined),
    never a silent loss. Files without a footer in hand (staged, then moved) are not counted; a file
    whose task worked out its statistics is counted by them (read from the same footer there)."""
    files = share.outcome.data_files
    if not all(f.footer for f in files):
        return
    written = sum(f.stats.values["record_count"] if f.stats else metadata_of(f.footer).num_rows for f in files)
    if written != share.outcome.records_out:
        raise RowsLost(
            f"table {share.config.name}: the batch's data files hold {written} rows, its tasks parsed "
            f"{share.outcome.records_out}; nothing is committed"
        )


def _rules_seconds(shares: Sequence[Any]) -> dict[str, float]:
    seconds = sum(s.outcome.rules_s for s in shares)
    return {Stage.RULES: round(seconds, 4)} if seconds else {}
