"""One micro-batch: manifests -> one parallel read -> Parquet, committed exactly once."""

from __future__ import annotations

import json
import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyspark import StorageLevel
from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from contracts.ledger import BatchStats, CommitRecord, PublishedFile, SourceRecord
from glue_processor import faults
from glue_processor import transforms as T
from glue_processor.commit import BatchCommitter
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.metrics.convert import record_datums
from glue_processor.planning import (
    BatchPlan,
    Rejection,
    SourceFile,
    escape_glob,
    latency_seconds,
    plan_batch,
    poison_plan,
)
from glue_processor.settings import JobSettings
from glue_processor.sizing import LearnedRatio, output_file_count

if TYPE_CHECKING:
    from glue_processor.metrics.setup import JobMetrics

logger = logging.getLogger(__name__)

FILE_TABLE_SCHEMA = StructType(
    [
        StructField("file_uri", StringType(), False),
        StructField("source_uri", StringType(), False),
        StructField("etag", StringType(), False),
        StructField("event_time", TimestampType(), False),
        StructField("manifest_uri", StringType(), False),
    ]
)
QUARANTINE_SCHEMA = StructType(
    [
        StructField("kind", StringType(), False),
        StructField("source_uri", StringType(), False),
        StructField("line", LongType(), True),
        StructField("reason", StringType(), False),
        StructField("raw", StringType(), True),
        StructField("manifest_uri", StringType(), False),
        StructField("batch_id", LongType(), False),
    ]
)


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
        self.metrics = metrics
        self.ratio = LearnedRatio(settings.parquet_bytes_per_input_byte)
        # Every JSON key seen so far, and so the columns of a batch (the schema only grows). Rows
        # whose keys are all known skip the map rebuild and the search for new keys.
        self.known_keys: set[str] = set()
        self._query_id = query_id
        self.committed: list[CommitRecord] = []
        self.progress: list[dict[str, Any]] = []
        self.rotate_after = rotate_after
        self.rotate_requested = False
        self.on_rotate: Any = None
        self.ingested: dict[tuple[str, str, str], int] = {}
        self._ingested_at: deque[tuple[datetime, list[tuple[str, str, str]]]] = deque()
        self._resumed = False

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
            logger.info("batch already committed; finishing publication", extra={"batch_id": batch_id})
            committer.publish(existing)
            self._report(existing)
            return existing
        failures = self._failures(batch_id)
        if failures["count"] >= self.settings.max_batch_attempts:
            reason = f"poison: the batch failed {failures['count']} times; last error: {failures['error']}"
            logger.error("quarantining poison manifests", extra={"batch_id": batch_id, "manifests": len(manifests)})
            return self._run(poison_plan(manifests, reason), batch_id, committer)
        try:
            return self._run(plan_batch(manifests, self.settings, ingested=self.ingested), batch_id, committer)
        except Exception as exc:
            self._record_failure(batch_id, failures["count"] + 1, exc)
            raise

    def _run(self, plan: BatchPlan, batch_id: int, committer: BatchCommitter) -> CommitRecord:
        started = time.monotonic()
        committer.discard_staging(batch_id)
        attempt = uuid.uuid4().hex[:12]
        committed_at = datetime.now(UTC)
        partition = f"dt={committed_at:%Y-%m-%d}"
        data_dir = committer.staging_uri(self.settings.output_uri, batch_id, attempt)
        quarantine_dir = committer.staging_uri(self.settings.quarantine_uri, batch_id, attempt)

        outcome = _Outcome(plan)
        stages = _Stages()
        parsed: DataFrame | None = None
        with stages("plan_read"):
            if plan.files:
                parsed = self._read(plan.files, outcome)
        try:
            if parsed is not None:
                with stages("parse_cache_stats"):
                    self._collect_stats(parsed, outcome)
                faults.hit("after-read")
                if outcome.records_out:
                    with stages("write_parquet"):
                        self._write_data(parsed, outcome, data_dir, batch_id, committed_at)
            with stages("write_quarantine"):
                self._write_quarantine(parsed if outcome.bad_records else None, outcome, quarantine_dir, batch_id)
        finally:
            if parsed is not None:
                parsed.unpersist()
        faults.hit("after-stage")

        stem = f"{self.query_id[:8]}-{batch_id:012d}"
        data_files = self._name_outputs(
            data_dir,
            f"{self.settings.output_uri}/{partition}",
            stem=f"part-{stem}",
            suffix=".parquet",
            attempt=attempt,
        )
        quarantine_files = self._name_outputs(
            quarantine_dir,
            f"{self.settings.quarantine_uri}/{partition}",
            stem=f"quarantine-{stem}",
            suffix=".json",
            attempt=attempt,
        )
        output_bytes = sum(f.bytes for f in data_files)
        self.ratio.observe(output_bytes=output_bytes, input_bytes=outcome.text_bytes)
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
                output_files=len(data_files),
                output_bytes=output_bytes,
                columns=outcome.columns,
                duration_s=round(time.monotonic() - started, 3),
                stage_s=stages.seconds,
                max_latency_s=latencies[-1] if latencies else None,
                p95_latency_s=_percentile(latencies, 0.95),
            ),
        )
        committer.commit(record)
        faults.hit("after-batch")
        self.committed.append(record)
        self._remember(record)
        self._report(record)
        if self.rotate_after is not None and batch_id + 1 >= self.rotate_after and not self.rotate_requested:
            self.rotate_requested = True
            if self.on_rotate is not None:
                self.on_rotate()
        logger.info("batch done", extra={"batch_id": batch_id, **record.stats.model_dump()})
        return record

    def resume(self) -> None:
        """After a restart: learn from the recent batches (size ratio, dedupe index, backlog)."""
        window = timedelta(hours=self.settings.dedupe_window_hours)
        # every generation's records: an object ingested before a checkpoint rotation is still known
        records = self.committer().recent_records_all(since=datetime.now(UTC) - window)
        for record in records:
            self._remember(record)
        if not records:
            return
        last = records[-1]
        self.known_keys.update(last.keys)
        self.ratio.observe(output_bytes=last.stats.output_bytes, input_bytes=last.stats.text_bytes)
        if self.metrics is not None:
            self.metrics.probe.mark_processed(last.manifests)

    def _remember(self, record: CommitRecord) -> None:
        """Index the object versions a batch ingested, for the dedupe window."""
        for source in record.sources:
            if source.status in ("ingested", "empty"):
                self.ingested[(source.bucket, source.key, source.etag)] = record.batch_id
        horizon = datetime.now(UTC) - timedelta(hours=self.settings.dedupe_window_hours)
        self._ingested_at.append((record.committed_at, [(s.bucket, s.key, s.etag) for s in record.sources]))
        while self._ingested_at and self._ingested_at[0][0] < horizon:
            for identity in self._ingested_at.popleft()[1]:
                self.ingested.pop(identity, None)

    def _failures_uri(self, batch_id: int) -> str:
        return f"{self.settings.output_uri}/_failures/{self.query_id}/{batch_id:012d}.json"

    def _failures(self, batch_id: int) -> dict[str, Any]:
        uri = self._failures_uri(batch_id)
        if not self.fs.exists(uri):
            return {"count": 0, "error": None}
        return dict(json.loads(self.fs.read_bytes(uri)))

    def _record_failure(self, batch_id: int, count: int, exc: BaseException) -> None:
        try:
            body = {"count": count, "error": f"{type(exc).__name__}: {str(exc)[:2000]}"}
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
            self.metrics.emit_backlog(self.metrics.probe.mark_processed(record.manifests))
        except Exception:
            logger.exception("batch metrics failed", extra={"batch_id": record.batch_id})

    # -- steps -----------------------------------------------------------------------------
    def _read(self, files: list[SourceFile], outcome: _Outcome) -> DataFrame | None:
        """Load every file of the batch in one parallel read; note the ones that are missing."""
        by_uri = {f.read_uri: f for f in files}
        readable = list(files)
        try:
            raw = self._load([escape_glob(f.read_uri) for f in readable])
        except AnalysisException as exc:
            if exc.getErrorClass() != "PATH_NOT_FOUND":
                raise
            # A listed object is gone. Find all missing ones at once, then read the rest.
            stats = self.fs.stat_many(list(by_uri))
            for uri, info in stats.items():
                if info is None:
                    outcome.missing(by_uri[uri], "object not found (deleted or never written)")
            readable = [f for f in files if stats[f.read_uri] is not None]
            if not readable:
                return None
            raw = self._load([escape_glob(f.read_uri) for f in readable])
        outcome.reading = {self.fs.spark_uri(f.read_uri): f for f in readable}
        table = self.spark.createDataFrame(
            [
                (uri, f.source_uri, f.entry.etag, f.entry.event_time, f.manifest_uri)
                for uri, f in outcome.reading.items()
            ],
            FILE_TABLE_SCHEMA,
        )
        files_df = raw.select(
            F.input_file_name().alias("file_uri"),
            F.col("_metadata.file_modification_time").cast("double").alias("file_mtime"),
            "value",
        )
        parsed = T.parse_fields(T.split_lines(files_df), sorted(self.known_keys)).join(F.broadcast(table), "file_uri")
        return parsed.persist(StorageLevel.MEMORY_AND_DISK)

    def _load(self, uris: list[str]) -> DataFrame:
        return (
            self.spark.read.format("text")
            .option("wholetext", True)
            .option("ignoreCorruptFiles", True)
            .option("ignoreMissingFiles", True)
            .load(uris)
        )

    def _collect_stats(self, parsed: DataFrame, outcome: _Outcome) -> None:
        rows = {r.file_uri: r for r in T.file_stats(parsed, sorted(self.known_keys)).collect()}
        keys = set(self.known_keys)
        silent = [uri for uri in outcome.reading if uri not in rows]
        infos = self.fs.stat_many([outcome.reading[u].read_uri for u in silent])
        for uri, source in outcome.reading.items():
            row: Row | None = rows.get(uri)
            if row is None:
                info = infos.get(source.read_uri)
                if info is None:
                    outcome.missing(source, "object not found when read (deleted after listing)")
                elif info.size == 0:
                    outcome.add(source, "empty")
                else:
                    outcome.unreadable(source, "object could not be read or decompressed (corrupt or truncated)")
                continue
            if row.file_mtime is not None and _overwritten(row.file_mtime, source.entry.event_time):
                # A newer version replaced the object after this event; that version's own event
                # brings it. Loading it here under this event's eTag would ingest it twice.
                outcome.superseded(source, uri, "object overwritten after its event (a newer eTag)")
                continue
            keys.update(row.new_keys)
            outcome.text_bytes += int(row.text_bytes or 0)
            outcome.add(source, "ingested" if row.good else "empty", records=row.good, bad=row.bad)
        self.known_keys = keys
        outcome.columns_map = T.column_names(keys)
        outcome.columns = len(outcome.columns_map)

    def _write_data(
        self, parsed: DataFrame, outcome: _Outcome, target: str, batch_id: int, committed_at: datetime
    ) -> None:
        out = T.project_output(
            _without(parsed, outcome.excluded),
            outcome.columns_map,
            batch_id=batch_id,
            ingest_time_iso=committed_at.isoformat(),
        )
        n = output_file_count(outcome.text_bytes, ratio=self.ratio.value, target_bytes=self.settings.target_file_bytes)
        out = out.coalesce(n) if n <= out.rdd.getNumPartitions() else out.repartition(n)
        out.write.mode("overwrite").option("compression", "snappy").parquet(target)

    def _write_quarantine(self, parsed: DataFrame | None, outcome: _Outcome, target: str, batch_id: int) -> None:
        driver_rows = [_rejection_row(r, batch_id) for r in outcome.rejections]
        frames: list[DataFrame] = []
        if driver_rows:
            frames.append(self.spark.createDataFrame(driver_rows, QUARANTINE_SCHEMA))
        if parsed is not None:
            frames.append(T.rejected_lines(_without(parsed, outcome.excluded), batch_id=batch_id))
        if not frames:
            return
        combined = frames[0]
        for frame in frames[1:]:
            combined = combined.unionByName(frame)
        combined.coalesce(1).write.mode("overwrite").json(target)

    def _name_outputs(
        self, staged_dir: str, final_dir: str, *, stem: str, suffix: str, attempt: str
    ) -> list[PublishedFile]:
        """Deterministic final names for the staged files of one attempt."""
        staged = sorted(
            (i for i in self.fs.list(staged_dir) if i.name.endswith(suffix) and not i.name.startswith(("_", "."))),
            key=lambda i: i.name,
        )
        return [
            PublishedFile(staged=i.uri, final=f"{final_dir}/{stem}-{n:05d}-{attempt}{suffix}", bytes=i.size)
            for n, i in enumerate(staged)
        ]


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
        self.reading: dict[str, SourceFile] = {}
        self.text_bytes = 0
        self.records_out = 0
        self.bad_records = 0
        self.columns = 0
        self.columns_map: list[tuple[str, str]] = []
        self.excluded: list[str] = []
        for rejection in plan.rejections:
            if rejection.entry is not None:
                self._record(rejection.entry, rejection.manifest_uri, "rejected", reason=rejection.reason)
        for dup, why in plan.duplicates:
            self._record(dup.entry, dup.manifest_uri, "duplicate", reason=why)

    def add(self, source: SourceFile, status: Any, *, records: int = 0, bad: int = 0) -> None:
        self.records_out += records
        self.bad_records += bad
        self._record(source.entry, source.manifest_uri, status, records=records, bad=bad)

    def superseded(self, source: SourceFile, file_uri: str, reason: str) -> None:
        self.excluded.append(file_uri)
        self._record(source.entry, source.manifest_uri, "superseded", reason=reason)

    def missing(self, source: SourceFile, reason: str) -> None:
        self._file_problem(source, "missing", reason)

    def unreadable(self, source: SourceFile, reason: str) -> None:
        self._file_problem(source, "unreadable", reason)

    def count(self, status: str) -> int:
        return sum(1 for s in self.sources if s.status == status)

    def _file_problem(self, source: SourceFile, status: Any, reason: str) -> None:
        self.rejections.append(Rejection("file", source.source_uri, reason, source.manifest_uri, entry=source.entry))
        self._record(source.entry, source.manifest_uri, status, reason=reason)

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
            )
        )


def _without(parsed: DataFrame, file_uris: list[str]) -> DataFrame:
    return parsed.where(~F.col("file_uri").isin(file_uris)) if file_uris else parsed


def _overwritten(modified_epoch_s: float, event_time: datetime, *, tolerance_s: float = 2.0) -> bool:
    """True when the object was last modified after the event that listed it (clock slack allowed)."""
    return modified_epoch_s - event_time.timestamp() > tolerance_s


def _rejection_row(r: Rejection, batch_id: int) -> tuple[Any, ...]:
    return (r.kind, r.source_uri, None, r.reason, r.raw, r.manifest_uri, batch_id)


def _percentile(values: Iterable[float], q: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
