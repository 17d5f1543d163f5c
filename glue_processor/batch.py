"""One micro-batch: manifests -> parse tasks by input -> write tasks by output -> one commit.

Parse tasks are planned from the batch's input so that every core has work (see
:func:`glue_processor.plan.sizing.parse_unit_count`); each stages Parquet parts. The write stage
(:mod:`glue_processor.write.merge`) turns the parts into files of about the target size. The commit
protocol (:mod:`glue_processor.commit.ledger`) publishes the batch exactly once.
"""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql import DataFrame, SparkSession

from contracts.exceptions import FencedOut
from contracts.ledger import BatchStats, CommitRecord, PublishedFile, SourceRecord
from contracts.metrics import PUBLISH_FAILURES, QUARANTINED_MANIFESTS, datum
from glue_processor import faults
from glue_processor.commit.ledger import BatchCommitter
from glue_processor.commit.publication import Publication
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.metrics.convert import record_datums, table_datums
from glue_processor.plan.dedupe import DedupeIndex, load_snapshot, save_snapshot
from glue_processor.plan.manifests import BatchPlan, Rejection, SourceFile, latency_seconds, plan_batch, poison_plan
from glue_processor.plan.ranges import number_ranges, object_outcomes
from glue_processor.plan.sizing import LearnedRatio, Piece, parse_unit_count, plan_groups, plan_pieces
from glue_processor.read.extra import admit
from glue_processor.read.ndjson import LINEAGE_COLUMNS, nameable
from glue_processor.read.task import FileOutcome, FileTask, Staged, TaskSpec, run_task
from glue_processor.read.text import MIB, Limits
from glue_processor.settings import JobSettings
from glue_processor.table.declared import DeclaredSchema, parse_schema
from glue_processor.table.partitioning import parse_partition_by
from glue_processor.table.sink import sink_for
from glue_processor.write.merge import concatenable, merge_parts, plan_merge

if TYPE_CHECKING:
    from glue_processor.metrics.setup import JobMetrics

# A parse task stages parts of 1/PART_FRACTION of the target file size.
PART_FRACTION = 8
logger = logging.getLogger(__name__)
GZIP_EXPANSION_PRIOR = 5.0
COMMITTED_KEPT = 1000
# A batch writing at most this many files by concatenation does it on the driver.
DRIVER_CONCATS = 4
# The dedupe index is saved every this many batches; a restart replays at most that many records.
DEDUPE_SNAPSHOT_BATCHES = 60


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
        self.last_snapshot_id: int | None = None
        self.last_commit_ms = 0.0
        self.metrics = metrics
        # Decompressed bytes per gzip byte, to size the tasks of a batch before reading it.
        self.gzip_expansion = LearnedRatio(GZIP_EXPANSION_PRIOR)
        # Every JSON key seen so far, and so the columns of a batch (the schema only grows). The
        # tasks decode known keys with one struct per key set; only new keys take the slow path.
        self.known_keys: set[str] = set()
        if self.declared is not None:
            self.known_keys.update(self.declared.keys)
        if self.partitions is not None:  # a partition's source is a column from the start, bound or not
            self.known_keys.update(f.key for f in self.partitions.fields if f.key not in LINEAGE_COLUMNS)
        self._query_id = query_id
        # The latest commit records only (for the local runner's summary): a 24/7 driver must not
        # grow with its history.
        self.committed: deque[CommitRecord] = deque(maxlen=COMMITTED_KEPT)
        self.progress: list[dict[str, Any]] = []
        self.rotate_after = rotate_after
        self.rotate_requested = False
        self.on_rotate: Any = None
        # Object versions ingested within the dedupe window, compactly (see glue_processor/plan/dedupe.py).
        self.ingested = DedupeIndex()
        self._batches_since_snapshot = 0
        self._resumed = False
        self.fenced = False  # set when another run committed a batch first: this run stops
        self.sleep: Any = None  # how publication waits between attempts (None: time.sleep; tests: no wait)

    # -- streaming entry point -------------------------------------------------------------
    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        rows = batch_df.select("manifest_uri", "value").collect()
        self.run([(r.manifest_uri, r.value) for r in rows], batch_id)

    @property
    def query_id(self) -> str:
        """The streaming query's id, persisted in the checkpoint: stable across restarts."""
        if self._query_id is None:
            meta = json.loads(self.fs.read_bytes(f"{self.settings.checkpoint_uri}/metadata"))
            self._query_id = str(meta["id"])
        return self._query_id

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
            if committer.abandoned(batch_id):
                logger.warning("batch was abandoned (its manifests are quarantined)", extra={"batch_id": batch_id})
                return existing
            logger.info("batch already committed; finishing publication", extra={"batch_id": batch_id})
            if self._publish(existing, committer):
                self._report(existing)
            return existing
        failures = self._failures(batch_id)
        if failures["count"] >= self.settings.max_batch_attempts:
            reason = f"poison: the batch failed {failures['count']} times; last error: {failures['error']}"
            logger.error("quarantining poison manifests", extra={"batch_id": batch_id, "manifests": len(manifests)})
            return self._run(poison_plan(manifests, reason), batch_id, committer)
        try:
            return self._run(plan_batch(manifests, self.settings, ingested=self.ingested), batch_id, committer)
        except FencedOut:
            # another run committed this batch: not a failure of the batch, and this run must stop
            self.fenced = True
            logger.error("fenced out by another run; stopping without publishing", extra={"batch_id": batch_id})
            raise
        except Exception as exc:
            self._record_failure(batch_id, failures["count"] + 1, exc)
            raise

    def _run(self, plan: BatchPlan, batch_id: int, committer: BatchCommitter) -> CommitRecord:
        started = time.monotonic()
        attempt = uuid.uuid4().hex[:12]
        committed_at = datetime.now(UTC)
        partition = self.sink.partition(committed_at)
        stem = f"{self.query_id[:8]}-{batch_id:012d}"
        data_dir = committer.staging_uri(self.settings.output_uri, batch_id, attempt)
        quarantine_dir = committer.staging_uri(self.settings.quarantine_uri, batch_id, attempt)

        outcome = _Outcome(plan)
        stages = _Stages()
        if plan.files:
            with stages("read_parse_write"):
                self._load(
                    plan.files,
                    outcome,
                    staging=(data_dir, quarantine_dir),
                    batch_id=batch_id,
                    committed_at=committed_at,
                )
            faults.hit("after-read")
            with stages("write"):
                if self.sink.in_place:  # final files, written where the table keeps them
                    out_dir = self.sink.output_dir(
                        committed_at, query_id=self.query_id, batch_id=batch_id, attempt=attempt
                    )
                    self._write(outcome, out_dir=out_dir, prefix=f"part-{stem}-{attempt}")
                else:
                    self._write(outcome, out_dir=data_dir)
        with stages("write_quarantine"):
            self._write_rejections(outcome, quarantine_dir, batch_id)
        faults.hit("after-stage")

        if self.sink.in_place:
            data_files = [PublishedFile(staged=f.uri, final=f.uri, bytes=f.bytes) for f in outcome.data_files]
        else:
            data_files = _name_outputs(
                outcome.data_files,
                self.sink.output_dir(committed_at, query_id=self.query_id, batch_id=batch_id, attempt=attempt),
                stem=f"part-{stem}",
                suffix=".parquet",
                attempt=attempt,
            )
        quarantine_files = _name_outputs(
            outcome.quarantine_files,
            f"{self.settings.quarantine_uri}/{partition}",
            stem=f"quarantine-{stem}",
            suffix=".json",
            attempt=attempt,
        )
        output_bytes = sum(f.bytes for f in data_files)
        self.gzip_expansion.observe(output_bytes=outcome.gzip_text_bytes, input_bytes=outcome.gzip_bytes)
        latencies = latency_seconds((s.event_time for s in outcome.sources if s.status == "ingested"), committed_at)
        record = CommitRecord(
            query_id=self.query_id,
            batch_id=batch_id,
            attempt=attempt,
            committed_at=committed_at,
            partition=partition,
            manifests=tuple(plan.manifests),
            data_files=tuple(data_files),
            quarantine_files=tuple(quarantine_files),
            sources=tuple(outcome.sources),
            keys=tuple(sorted(self.known_keys)),
            stats=BatchStats(
                manifests=len(plan.manifests),
                bad_manifests=plan.bad_manifests,
                files=len(plan.files),
                missing_files=outcome.count("missing"),
                unreadable_files=outcome.count("unreadable"),
                input_bytes=plan.input_bytes,
                text_bytes=outcome.text_bytes,
                records_in=outcome.records_out + outcome.bad_records,
                records_out=outcome.records_out,
                bad_records=outcome.bad_records,
                rescued_values=outcome.rescued,
                extra_values=outcome.extra_values,
                null_partition_records=outcome.null_partitions,
                output_files=len(data_files),
                output_bytes=output_bytes,
                columns=len(outcome.final_keys),
                duration_s=round(time.monotonic() - started, 3),
                stage_s=stages.seconds,
                max_latency_s=latencies[-1] if latencies else None,
                p95_latency_s=_percentile(latencies, 0.95),
            ),
        )
        footers = {f.uri: f.footer for f in outcome.data_files if f.footer}
        # a schema change the table would refuse fails the batch here, before its commit record
        self.sink.check(record, footers)
        commit_started = time.monotonic()
        committer.commit(record)
        published = self._publish(record, committer, footers)
        self.last_commit_ms = (time.monotonic() - commit_started) * 1000
        faults.hit("after-batch")
        self.committed.append(record)
        if not published:
            return record
        self._remember(record)
        self._batches_since_snapshot += 1
        if self._batches_since_snapshot >= DEDUPE_SNAPSHOT_BATCHES:
            self._batches_since_snapshot = 0
            save_snapshot(self.settings.output_uri, self.ingested, self.known_keys, at=record.committed_at)
        self._report(record)
        if self.rotate_after is not None and batch_id + 1 >= self.rotate_after and not self.rotate_requested:
            self.rotate_requested = True
            if self.on_rotate is not None:
                self.on_rotate()
        logger.info("batch done", extra={"batch_id": batch_id, **record.stats.model_dump()})
        return record

    def start(self) -> None:
        """Before the stream starts: open the table, so a wrong catalog or table stops the job at
        start-up and the first batch does only its own work. (What the recent batches learnt is
        read by the first batch: it needs the query's id, which the checkpoint has only then.)"""
        self.sink.open()

    def resume(self) -> None:
        """After a restart: learn from the recent batches (keys, dedupe index, backlog). The dedupe
        index comes from its latest snapshot plus the commit records written after it, so a
        restart reads a bounded number of records whatever the history's length."""
        since = datetime.now(UTC) - timedelta(hours=self.settings.dedupe_window_hours)
        snapshot = load_snapshot(self.settings.output_uri)
        if snapshot is not None:
            self.ingested, known, taken_at = snapshot
            self.known_keys = {k for k in known if nameable(k)}
            self.ingested.expire(since)
            since = max(since, taken_at + timedelta(microseconds=1))
        # every generation's records: an object ingested before a checkpoint rotation is still known
        records = self.committer().recent_records_all(since=since)
        for record in records:
            self._remember(record)
        if not records:
            return
        last = records[-1]
        # a key that cannot name a column (recorded before names were checked) is not one any more
        self.known_keys.update(k for k in last.keys if nameable(k))
        if self.metrics is not None:
            self.metrics.probe.mark_processed(last.manifests)

    def _remember(self, record: CommitRecord) -> None:
        """Index the object versions a batch ingested, for the dedupe window."""
        loaded = [(s.bucket, s.key, s.etag) for s in record.sources if s.status in ("ingested", "empty")]
        self.ingested.add_batch(record.batch_id, record.committed_at, loaded)
        self.ingested.expire(datetime.now(UTC) - timedelta(hours=self.settings.dedupe_window_hours))

    def _publish(
        self, record: CommitRecord, committer: BatchCommitter, footers: Mapping[str, bytes] | None = None
    ) -> bool:
        """Publish a committed batch (see :mod:`glue_processor.commit.publication`): True once it is,
        False when it was abandoned as poison."""
        snapshot, published = Publication(
            publish=lambda: committer.publish(record, footers),
            failed=lambda exc, content: self._publish_failed(record, exc, content=content),
            abandon=lambda exc: self._abandon(record, committer, exc),
            max_refusals=self.settings.max_batch_attempts,
            sleep=self.sleep,
        )()
        if published:
            self.last_snapshot_id = snapshot
        return published

    def _publish_failed(self, record: CommitRecord, exc: BaseException, *, content: bool) -> int:
        """Count a failed publication (PublishFailures); a refusal of the batch's content is also
        counted in its failures file (across restarts): the refusals so far."""
        logger.error(
            "publication failed",
            extra={"batch_id": record.batch_id, "refused": content, "error": f"{type(exc).__name__}: {exc}"[:2000]},
        )
        if self.metrics is not None:
            self.metrics.publisher.emit([datum(PUBLISH_FAILURES, 1, self.metrics.dimensions)])
        if not content:
            return 0
        count = int(self._failures(record.batch_id).get("refusals", 0)) + 1
        self._record_failure(record.batch_id, count, exc, key="refusals")
        return count

    def _abandon(self, record: CommitRecord, committer: BatchCommitter, exc: BaseException) -> None:
        """A batch the table refuses for its own content: its manifests quarantined with the cause
        (a requeue loads their objects again), its files removed, its record marked abandoned."""
        reason = (f"the table refused the batch {self.settings.max_batch_attempts} times: {type(exc).__name__}: {exc}")[
            :2000
        ]
        lines = (
            json.dumps(_rejection_record(Rejection("manifest", uri, reason, uri), record.batch_id)) + "\n"
            for uri in record.manifests
        )
        stem = f"{self.query_id[:8]}-{record.batch_id:012d}"
        target = f"{self.settings.quarantine_uri}/{record.partition}/quarantine-{stem}-{record.attempt}-abandoned.json"
        self.fs.write_bytes(target, "".join(lines).encode())
        committer.abandon(record, reason)
        if self.metrics is not None:
            self.metrics.publisher.emit(
                [datum(QUARANTINED_MANIFESTS, len(record.manifests), self.metrics.dimensions, record.committed_at)]
            )

    def _failures_uri(self, batch_id: int) -> str:
        return f"{self.settings.output_uri}/_failures/{self.query_id}/{batch_id:012d}.json"

    def _failures(self, batch_id: int) -> dict[str, Any]:
        uri = self._failures_uri(batch_id)
        if not self.fs.exists(uri):
            return {"count": 0, "error": None}
        return dict(json.loads(self.fs.read_bytes(uri)))

    def _record_failure(self, batch_id: int, count: int, exc: BaseException, *, key: str = "count") -> None:
        try:
            body = {
                "count": 0,
                **self._failures(batch_id),
                key: count,
                "error": f"{type(exc).__name__}: {str(exc)[:2000]}",
            }
            self.fs.write_bytes(self._failures_uri(batch_id), json.dumps(body).encode())
            logger.error("batch failed", extra={"batch_id": batch_id, "attempt": count, "error": body["error"]})
        except Exception:
            logger.exception("could not record the batch failure", extra={"batch_id": batch_id})

    def _report(self, record: CommitRecord) -> None:
        """Publish the batch's metrics; a metrics problem never fails the batch."""
        if self.metrics is None:
            return
        try:
            self.metrics.records_by_batch[record.batch_id] = record.stats.records_in
            self.metrics.publisher.emit(record_datums(record, dimensions=self.metrics.dimensions))
            self.metrics.publisher.emit(
                table_datums(
                    self.last_commit_ms, self.sink.stats(), dimensions=self.metrics.dimensions, when=record.committed_at
                )
            )
            self.metrics.emit_backlog(self.metrics.probe.mark_processed(record.manifests))
        except Exception:
            logger.exception("batch metrics failed", extra={"batch_id": record.batch_id})

    # -- steps -----------------------------------------------------------------------------
    def _load(
        self,
        files: list[SourceFile],
        outcome: _Outcome,
        *,
        staging: tuple[str, str],
        batch_id: int,
        committed_at: datetime,
    ) -> None:
        """Read, parse and stage every object of the batch, in parse tasks planned by input: as many
        as keep every core busy (and no task reads more than its cap), whatever the output size;
        a large plain object is read in byte ranges by several tasks."""
        cores = self.spark.sparkContext.defaultParallelism
        estimates = [f.entry.size * (self.gzip_expansion.value if _gzipped(f) else 1.0) for f in files]
        # a gzip object is one stream; one over max_object_mb is read whole, so the cap still applies
        cap = self.settings.max_object_mb * MIB
        pieces = plan_pieces(estimates, [not _gzipped(f) and f.entry.size <= cap for f in files], cores=cores)
        items, unread = number_ranges([_file_task(files[p.item], p) for p in pieces], self._spark_map)
        estimate = {(p.item, p.start): p.estimate for p in pieces}
        weights = [estimate[i.item, i.start] for i in items]
        target = self.settings.target_file_bytes
        n = parse_unit_count(weights, cores=cores)
        known = tuple(sorted(self.known_keys))
        specs = [
            TaskSpec(
                index=i,
                files=tuple(items[j] for j in group),
                known=known,
                data_dir=f"{staging[0]}/parts",
                quarantine_dir=staging[1],
                batch_id=batch_id,
                ingest_time=committed_at,
                # parts of an eighth of the target, one row group each: the write stage packs them
                # into files of about the target whatever each task wrote (whole-target parts left
                # ~0.6-target tails; quarter-target parts came out at 0.28 of it, and files of 3 or 4
                # of them at 0.84 or 1.12)
                target_bytes=max(1, target // PART_FRACTION),
                row_group_bytes=max(1, target // PART_FRACTION),
                row_groups_per_file=1,
                limits=Limits(
                    max_line_bytes=self.settings.max_line_mb * MIB, max_object_bytes=self.settings.max_object_mb * MIB
                ),
                declared=self.declared,
                partitions=self.partitions,
                max_columns=self.settings.max_columns,
            )
            for i, group in enumerate(plan_groups(weights, n))
        ]
        results = sorted(self._spark_map(run_task, specs), key=lambda r: r.index)
        found_by_object, lost = object_outcomes([*unread, *(found for r in results for found in r.files)])
        # the batch's columns: the known keys, then new keys in object order while the bound has room
        # (tasks admit new keys in parallel; a part with keys past the cut is folded when written)
        keys = sorted(self.known_keys)
        seen = set(keys)
        for result in results:
            outcome.rescued += result.rescued
            outcome.extra_values += result.extra_values
            outcome.null_partitions += result.null_partitions
            outcome.data_files.extend(result.data)
            outcome.quarantine_files.extend(result.quarantine)
        for found in found_by_object:
            source = files[found.item]
            if found.status in ("missing", "unreadable"):
                outcome.file_problem(source, found.status, found.reason or found.status)
            elif found.status == "superseded":
                outcome.add(source, "superseded", reason=found.reason)
            else:
                admit(keys, seen, found.new_keys, self.settings.max_columns)
                outcome.read(source, found)
        for part in lost:  # a range that could not be read, of an object whose other ranges loaded
            source = files[part.item]
            outcome.rejections.append(Rejection("file", source.source_uri, part.reason or "", source.manifest_uri))
        self.known_keys = seen
        outcome.final_keys = tuple(sorted(keys))

    def _write(self, outcome: _Outcome, *, out_dir: str, prefix: str = "merged") -> None:
        """Parts -> files of about the target size with the batch's final columns; full parts that
        already have those columns are kept as they are. Rewrites (CPU) are Spark tasks; byte
        concatenations (I/O only) run on the driver when there are few, which saves scheduling a
        Spark job, and as Spark tasks when there are many, so the driver's network is not the limit."""
        plan = plan_merge(
            outcome.data_files,
            outcome.final_keys,
            target_bytes=self.settings.target_file_bytes,
            out_dir=out_dir,
            prefix=prefix,
            keep_parts=not self.sink.in_place,  # a part is staged: only a sink that moves files may keep it
            declared=self.declared,
        )
        on_driver = [m for m in plan.merges if concatenable(m)] if len(plan.merges) <= DRIVER_CONCATS else []
        tasks = [m for m in plan.merges if m not in on_driver]
        with ThreadPoolExecutor(max_workers=DRIVER_CONCATS) as pool:
            local = list(pool.map(merge_parts, on_driver))
        outcome.data_files = [*plan.keep, *local, *self._spark_map(merge_parts, tasks)]
        outcome.extra_values += sum(f.folded for f in outcome.data_files)

    def _spark_map(self, fn: Any, items: Sequence[Any]) -> list[Any]:
        """``fn`` over ``items``, one Spark task each (the tasks write; only small results return)."""
        if not items:
            return []
        return list(self.spark.sparkContext.parallelize(list(items), len(items)).map(fn).collect())

    def _write_rejections(self, outcome: _Outcome, target: str, batch_id: int) -> None:
        """Quarantine records made on the driver: bad manifests, and whole files."""
        if not outcome.rejections:
            return
        lines = (json.dumps(_rejection_record(r, batch_id), ensure_ascii=False) + "\n" for r in outcome.rejections)
        body = "".join(lines).encode()
        uri = f"{target}/rejections.json"
        self.fs.write_bytes(uri, body)
        outcome.quarantine_files.append(Staged(uri, len(body)))


class _Stages:
    """Wall time per step of a batch (recorded in the commit record, for profiling)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def __call__(self, name: str) -> Any:
        import contextlib

        @contextlib.contextmanager
        def timed() -> Any:
            t0 = time.monotonic()
            try:
                yield
            finally:
                self.seconds[name] = round(self.seconds.get(name, 0.0) + time.monotonic() - t0, 3)

        return timed()


class _Outcome:
    """What a batch found out about its sources, accumulated while it runs."""

    def __init__(self, plan: BatchPlan) -> None:
        self.rejections: list[Rejection] = list(plan.rejections)
        self.sources: list[SourceRecord] = []
        self.data_files: list[Staged] = []
        self.quarantine_files: list[Staged] = []
        self.final_keys: tuple[str, ...] = ()
        self.text_bytes = 0
        self.gzip_bytes = 0
        self.gzip_text_bytes = 0
        self.records_out = 0
        self.bad_records = 0
        self.rescued = 0
        self.extra_values = 0
        self.null_partitions = 0
        for rejection in plan.rejections:
            if rejection.entry is not None:
                self._record(rejection.entry, rejection.manifest_uri, "rejected", reason=rejection.reason)
        for dup, why in plan.duplicates:
            self._record(dup.entry, dup.manifest_uri, "duplicate", reason=why)

    def read(self, source: SourceFile, found: FileOutcome) -> None:
        """An object that was read and parsed (ingested, or empty)."""
        self.records_out += found.good
        self.bad_records += found.bad
        self.text_bytes += found.text_bytes
        if _gzipped(source):
            self.gzip_bytes += source.entry.size
            self.gzip_text_bytes += found.text_bytes
        self._record(source.entry, source.manifest_uri, found.status, records=found.good, bad=found.bad)

    def add(self, source: SourceFile, status: Any, *, reason: str | None = None) -> None:
        self._record(source.entry, source.manifest_uri, status, reason=reason)

    def file_problem(self, source: SourceFile, status: Any, reason: str) -> None:
        """A missing or unreadable object: quarantined whole."""
        self.rejections.append(Rejection("file", source.source_uri, reason, source.manifest_uri, entry=source.entry))
        self._record(source.entry, source.manifest_uri, status, reason=reason)

    def count(self, status: str) -> int:
        return sum(1 for s in self.sources if s.status == status)

    def _record(self, entry: Any, manifest_uri: str, status: Any, **extra: Any) -> None:
        self.sources.append(
            SourceRecord(
                bucket=entry.bucket,
                key=entry.key,
                etag=entry.etag,
                size=entry.size,
                event_time=entry.event_time,
                manifest_uri=manifest_uri,
                status=status,
                records=extra.get("records", 0),
                bad_records=extra.get("bad", 0),
                reason=extra.get("reason"),
                version_id=entry.version_id,
            )
        )


def load_declared(uri: str) -> DeclaredSchema:
    """The declared schema file (s3:// or file://); a bad file stops the job at start-up, naming it."""
    from glue_processor.read.objects import store_for

    return parse_schema(store_for(uri).read(uri).data, source=f"--schema {uri}")


def _gzipped(source: SourceFile) -> bool:
    return source.read_uri.lower().endswith(".gz")


def _file_task(source: SourceFile, piece: Piece) -> FileTask:
    return FileTask(
        read_uri=source.read_uri,
        source_uri=source.source_uri,
        etag=source.entry.etag,
        event_time=source.entry.event_time,
        manifest_uri=source.manifest_uri,
        version_id=source.entry.version_id,
        item=piece.item,
        start=piece.start,
        end=piece.end,
    )


def _name_outputs(staged: list[Staged], final_dir: str, *, stem: str, suffix: str, attempt: str) -> list[PublishedFile]:
    """Deterministic final names for the staged files of one attempt."""
    return [
        PublishedFile(staged=item.uri, final=f"{final_dir}/{stem}-{n:05d}-{attempt}{suffix}", bytes=item.bytes)
        for n, item in enumerate(sorted(staged, key=lambda i: i.uri))
    ]


def _rejection_record(r: Rejection, batch_id: int) -> dict[str, Any]:
    record = {"kind": r.kind, "source_uri": r.source_uri, "reason": r.reason, "raw": r.raw}
    return {k: v for k, v in record.items() if v is not None} | {"manifest_uri": r.manifest_uri, "batch_id": batch_id}


def _percentile(values: Iterable[float], q: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
