"""A committed batch made visible, table by table, by the policy of
:mod:`glue_processor.commit.publication`: each share published on its own (in parallel when a batch
touches several tables), failed attempts counted (``PublishFailures``, per table too; refusals of a
share's content also across restarts), a share refused too often abandoned (its objects quarantined
with the cause), a share that keeps failing set aside (:mod:`glue_processor.commit.deferred`) so
that the other tables and the next batches go on. Then the batch's load history, once."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from contracts import metrics as M
from contracts.ledger import CommitRecord, SourceRecord, TableShare
from contracts.metrics import Datum, datum
from glue_processor.commit.deferred import Deferred, SetAside
from glue_processor.commit.failures import Failures
from glue_processor.commit.ledger import BatchCommitter
from glue_processor.commit.publication import Publication, Settled
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.plan.manifests import Rejection
from glue_processor.table.sink import Tables
from glue_processor.write.stage import rejection_lines

if TYPE_CHECKING:
    from glue_processor.metrics.setup import JobMetrics

logger = logging.getLogger(__name__)

# Shares of one batch published at once (each an Iceberg commit to its own table).
PARALLEL_TABLES = 8
LOADED = ("ingested", "empty")


@dataclass(frozen=True)
class Settlement:
    """How one share of a batch ended: its snapshot, how it settled, how long it took."""

    table: str
    snapshot: int | None
    settled: Settled
    commit_ms: float = 0.0


class Publisher:
    def __init__(
        self,
        fs: HadoopFS,
        tables: Tables,
        *,
        quarantine_uri: str,
        max_refusals: int,
        hold_s: float | None,
        deferred: Deferred | None = None,
        metrics: JobMetrics | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.fs, self.tables = fs, tables
        self.quarantine_uri, self.max_refusals, self.hold_s = quarantine_uri, max_refusals, hold_s
        self.deferred, self.metrics, self.sleep = deferred, metrics, sleep

    def publish(
        self,
        record: CommitRecord,
        committer: BatchCommitter,
        footers: Mapping[str, bytes] | None = None,
        *,
        fresh: bool,
    ) -> list[Settlement]:
        """Publish every share of ``record`` (``fresh``: just committed, so none was published
        before), append its load history, put its quarantine files in place; how each share settled."""
        failures = Failures(self.fs, committer.output_uri, committer.query_id)
        shares = [s for s in record.tables if s.refused is None]

        def one(share: TableShare) -> Settlement:
            if not fresh and committer.share_abandoned(record, share):
                return Settlement(share.table, None, "abandoned")
            started = time.monotonic()
            hold = self.hold_s if self.deferred is not None and self.deferred.room else None
            snapshot, settled = self._publication(record, share, committer, failures, footers, hold=hold)()
            if settled == "deferred" and self.deferred is not None:
                committer.set_aside(record, share)
                self.deferred.add(record.query_id, record.batch_id, share.table)
            return Settlement(share.table, snapshot, settled, (time.monotonic() - started) * 1000)

        if len(shares) <= 1:
            settlements = [one(s) for s in shares]
        else:
            with ThreadPoolExecutor(max_workers=min(PARALLEL_TABLES, len(shares))) as pool:
                settlements = list(pool.map(one, shares))
        set_aside = {s.table for s in settlements if s.settled == "deferred"}
        if not fresh:  # a share set aside before, published now: its rows are appended on their own
            set_aside |= {s.table for s in shares if s.table not in set_aside and committer.is_set_aside(record, s)}
        if self.tables.history is not None:
            snapshots = {self.tables.routes.name(s.table): s.snapshot for s in settlements}
            names = {self.tables.routes.name(t) for t in set_aside}
            self.tables.history.publish(record, snapshots, set_aside=names)
            for s in settlements:
                if s.settled == "published" and s.table in set_aside:
                    self.tables.history.publish(record, snapshots, part=self.tables.routes.name(s.table))
        committer.settle(record)
        return settlements

    def retry_deferred(self, committer_of: Callable[[str], BatchCommitter]) -> None:
        """Try each share set aside that is due, once; publish its history rows when it goes in."""
        if self.deferred is None:
            return
        for item in self.deferred.due():
            self._retry(item, committer_of(item.query_id))

    def _retry(self, item: SetAside, committer: BatchCommitter) -> None:
        assert self.deferred is not None
        record = committer.load(item.batch_id)
        share = record.share(item.table) if record is not None else None
        if record is None or share is None or committer.share_abandoned(record, share):
            logger.warning("a share set aside has no record any more; forgotten", extra={"table": item.table})
            self.deferred.remove(item)
            return
        failures = Failures(self.fs, committer.output_uri, committer.query_id)
        snapshot, settled = self._publication(record, share, committer, failures, None, hold=None, attempts=1)()
        if settled == "deferred":
            self.deferred.failed(item)
            return
        self.deferred.remove(item)
        if settled == "published" and self.tables.history is not None:
            name = self.tables.routes.name(share.table)
            self.tables.history.publish(record, {name: snapshot}, part=name)
        logger.info(
            "a share set aside is settled", extra={"table": item.table, "batch_id": item.batch_id, "how": settled}
        )

    def _publication(
        self,
        record: CommitRecord,
        share: TableShare,
        committer: BatchCommitter,
        failures: Failures,
        footers: Mapping[str, bytes] | None,
        *,
        hold: float | None,
        attempts: int | None = None,
    ) -> Publication:
        return Publication(
            publish=lambda: committer.publish_share(record, share, footers),
            failed=lambda exc, content: self._failed(record, share, failures, exc, content=content),
            abandon=lambda exc: self._abandon(record, share, committer, exc),
            max_refusals=self.max_refusals,
            sleep=self.sleep,
            hold_s=hold,
            attempts=attempts,
        )

    def _failed(
        self, record: CommitRecord, share: TableShare, failures: Failures, exc: BaseException, *, content: bool
    ) -> int:
        """Count a failed publication; a refusal of the share's content is also counted in the
        batch's failures file: the refusals so far."""
        table = self.tables.routes.name(share.table)
        logger.error(
            "publication failed",
            extra={
                "batch_id": record.batch_id,
                "table": table,
                "refused": content,
                "error": f"{type(exc).__name__}: {exc}"[:2000],
            },
        )
        self._emit([*self._both(M.PUBLISH_FAILURES, 1, table)])
        if not content:
            return 0
        key = f"refusals.{share.table}" if share.table else "refusals"
        count = int(failures.get(record.batch_id).get(key, 0)) + 1
        failures.record(record.batch_id, count, exc, key=key)
        return count

    def _abandon(self, record: CommitRecord, share: TableShare, committer: BatchCommitter, exc: BaseException) -> None:
        """A share its table refuses for its own content: its objects quarantined with the cause (a
        requeue loads them again), its files removed, a marker saying it is abandoned."""
        table = self.tables.routes.name(share.table)
        reason = f"table {table} refused the batch {self.max_refusals} times: {type(exc).__name__}: {exc}"[:2000]
        objects = loaded_sources(record, share)
        rejections = [Rejection("file", f"s3://{s.bucket}/{s.key}", reason, s.manifest_uri) for s in objects] or [
            Rejection("manifest", uri, reason, uri) for uri in record.manifests
        ]
        stem = f"{record.query_id[:8]}-{record.batch_id:012d}"
        suffix = f"-{share.table}" if share.table else ""
        target = f"{self.quarantine_uri}/{record.partition}/quarantine-{stem}-{record.attempt}{suffix}-abandoned.json"
        self.fs.write_bytes(target, rejection_lines(rejections, record.batch_id))
        committer.abandon(record, share, reason)
        self._emit(self._both(M.REFUSED_OBJECTS, len(objects), table, record.committed_at))

    def _both(self, metric: M.MetricDef, value: float, table: str, when: datetime | None = None) -> list[Datum]:
        """The metric for the job, and for its table."""
        if self.metrics is None:
            return []
        dims = self.metrics.dimensions
        when = when or datetime.now(UTC)
        return [datum(metric, value, dims, when), datum(metric, value, {**dims, M.TABLE_DIMENSION: table}, when)]

    def _emit(self, datums: list[Datum]) -> None:
        if self.metrics is not None and datums:
            self.metrics.publisher.emit(datums)


def loaded_sources(record: CommitRecord, share: TableShare) -> list[SourceRecord]:
    """The objects a share holds rows of (a version 1 record's sources name no table)."""
    if not share.table:
        return [s for s in record.sources if s.status in LOADED and s.table in (None, "")]
    return [s for s in record.sources if s.status in LOADED and s.table == share.table]
