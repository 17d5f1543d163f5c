"""A committed batch made visible, table by table, by the policy of
:mod:`glue_processor.commit.publication`: each share published on its own (in parallel when a batch
touches several tables), failed attempts counted (``PublishFailures``, per table too; refusals of a
share's content also across restarts), a share refused too often abandoned (its objects quarantined
with the cause, forgotten by the dedupe index, ``rejected`` in the load history), a share that keeps
failing set aside (:mod:`glue_processor.commit.deferred`) so that the other tables and the next
batches go on. Then the batch's load history, once.

The publication threads only publish and count: what the batch remembers (markers, the list of
shares set aside, the load history, the dedupe index) is written by the calling thread once they
are done, one writer at a time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from contracts import metrics as M
from contracts.ledger import CommitRecord, TableShare
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
    from glue_processor.table.datafiles import WrittenFile

logger = logging.getLogger(__name__)

# Shares of one batch published at once (each an Iceberg commit to its own table).
PARALLEL_TABLES = 8
# Shares set aside tried per table per batch once its oldest went in (the rest wait a batch more).
RETRIES_PER_TABLE = 20


@dataclass(frozen=True)
class Settlement:
    """How one share of a batch ended: its snapshot, how it settled, how long it took (and why it
    was abandoned)."""

    table: str
    snapshot: int | None
    settled: Settled
    commit_ms: float = 0.0
    reason: str | None = None


class Remembers(Protocol):
    """What the job remembers of the shares it settles (:class:`glue_processor.plan.memory.Memory`)."""

    def forget(self, record: CommitRecord, share: TableShare) -> None: ...
    def learn(self, table: str, keys: Collection[str]) -> None: ...
    def hold(self, table: str, share: tuple[str, int], keys: Collection[str]) -> None: ...
    def release(self, table: str, share: tuple[str, int]) -> None: ...


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
        set_aside_new: bool = True,
        metrics: JobMetrics | None = None,
        sleep: Callable[[float], None] | None = None,
        memory: Remembers | None = None,
        published: Callable[[CommitRecord, str, int | None], None] | None = None,
    ) -> None:
        self.fs, self.tables = fs, tables
        self.quarantine_uri, self.max_refusals, self.hold_s = quarantine_uri, max_refusals, hold_s
        self.deferred, self.set_aside_new, self.metrics, self.sleep = deferred, set_aside_new, metrics, sleep
        # the dedupe index forgets an abandoned share's objects (a requeue must load them); a table
        # learns a share's keys once the share is published (never those of one abandoned), and holds
        # those of a share set aside until it settles
        self.memory = memory
        # told of each share published (the key index of a mirroring table: glue_processor/mirror.py)
        self.published = published

    def publish(
        self,
        record: CommitRecord,
        committer: BatchCommitter,
        written_files: Mapping[str, WrittenFile] | None = None,
        *,
        fresh: bool,
    ) -> list[Settlement]:
        """Publish every share of ``record`` (``fresh``: just committed, so none was published
        before), append its load history, put its quarantine files in place; how each share settled."""
        failures = Failures(self.fs, committer.output_uri, committer.query_id)
        shares = [s for s in record.tables if s.refused is None]
        # a table with a share set aside already is failing: its new share is set aside at its first
        # failure, rather than holding every batch for the whole hold again (a circuit breaker)
        failing = self.deferred.tables() if self.deferred is not None and self.set_aside_new else set()
        room = self.deferred is not None and self.set_aside_new and self.deferred.room

        def one(share: TableShare) -> Settlement:
            if not fresh and committer.share_abandoned(record, share):
                return Settlement(share.table, None, "abandoned", reason=committer.abandon_reason(record, share))
            started = time.monotonic()
            hold = self._hold(share, room=room, failing=failing)
            reasons: list[str] = []
            publication = self._publication(
                record, share, committer, failures, written_files, hold=hold, reasons=reasons
            )
            snapshot, settled = publication()
            elapsed = (time.monotonic() - started) * 1000
            return Settlement(share.table, snapshot, settled, elapsed, reasons[-1] if reasons else None)

        if len(shares) <= 1:
            settlements = [one(s) for s in shares]
        else:
            with ThreadPoolExecutor(max_workers=min(PARALLEL_TABLES, len(shares))) as pool:
                settlements = list(pool.map(one, shares))
        # from here on, one thread: markers, the list set aside, the dedupe index, the history
        for s in settlements:
            if s.settled == "deferred" and self.deferred is not None:
                share = record.share(s.table)
                assert share is not None
                committer.set_aside(record, share)
                self.deferred.add(record.query_id, record.batch_id, s.table)
                if self.memory is not None:
                    self.memory.hold(share.table, (record.query_id, record.batch_id), share.keys)
        abandoned = {s.table: s.reason or "abandoned" for s in settlements if s.settled == "abandoned"}
        for table in abandoned:
            self._forget(record, table)
        for s in settlements:
            if s.settled == "published":
                self._learn(record, s.table)
                if self.published is not None:
                    self.published(record, s.table, s.snapshot)
            if s.settled != "deferred":  # a share a restart held until its replay settled it
                self._release(s.table, record.query_id, record.batch_id)
        set_aside = {s.table for s in settlements if s.settled == "deferred"}
        if not fresh:  # a share set aside before: its rows are appended with its own publication
            set_aside |= {s.table for s in shares if s.table not in set_aside and committer.is_set_aside(record, s)}
        history = self.tables.history
        if history is not None:
            shown = record.without(abandoned)  # an abandoned share's objects are rejected, not loaded
            snapshots = {self.tables.routes.name(s.table): s.snapshot for s in settlements}
            history.publish(shown, snapshots, set_aside={self.tables.routes.name(t) for t in set_aside})
            for s in settlements:
                if s.settled == "published" and s.table in set_aside:
                    history.publish(shown, snapshots, part=self.tables.routes.name(s.table))
        if self.tables.quarantine is not None and record.quarantine_files:
            self.tables.quarantine.publish(record)  # before settle() moves the files: read where staged
        committer.settle(record)
        return settlements

    def _hold(self, share: TableShare, *, room: bool, failing: set[str]) -> float | None:
        """How long a share's failures are waited out before it is set aside (None: for ever)."""
        if self.deferred is None or not room or not self.tables.sink(share.table).in_place:
            # nothing to set aside into, or a sink whose files are staged (the batch's clean-up
            # would remove them): the stream waits, as with one table
            return None
        if self.tables.config(share.table).mirrors:
            # a table that mirrors its bucket plans each batch against its key index, written when a
            # share is published: a later batch planned past a share set aside would take that
            # share's keys as new (docs/mirror.md). Its stream waits, as with one table.
            return None
        return 0.0 if share.table in failing else self.hold_s

    def retry_deferred(self, committer_of: Callable[[str], BatchCommitter]) -> None:
        """Try the shares set aside that are due: per table the oldest first, the rest of that table
        only once it went in (at most :data:`RETRIES_PER_TABLE` a batch). Best effort: a problem
        here is logged, and the shares are tried again next batch."""
        if self.deferred is None:
            return
        try:
            stopped: set[str] = set()
            tried: dict[str, int] = {}
            for item in self.deferred.due():
                if item.table in stopped or tried.get(item.table, 0) >= RETRIES_PER_TABLE:
                    continue
                tried[item.table] = tried.get(item.table, 0) + 1
                if not self._retry(item, committer_of(item.query_id)):
                    stopped.add(item.table)  # its table still fails: its other shares wait
        except Exception:
            logger.exception("retrying the shares set aside failed; they are tried again next batch")

    def _retry(self, item: SetAside, committer: BatchCommitter) -> bool:
        """One try of a share set aside; True when it settled (published or abandoned)."""
        assert self.deferred is not None
        record = committer.load(item.batch_id)
        share = record.share(item.table) if record is not None else None
        if record is None or share is None:
            logger.error("a share set aside has no record any more; forgotten", extra={"table": item.table})
            self.deferred.remove(item)
            self._release(item.table, item.query_id, item.batch_id)
            return True
        failures = Failures(self.fs, committer.output_uri, committer.query_id)
        why: str | None = None
        snapshot: int | None = None
        settled: Settled
        if committer.share_abandoned(record, share):
            settled, why = "abandoned", committer.abandon_reason(record, share)
        else:
            reasons: list[str] = []
            publication = self._publication(record, share, committer, failures, None, hold=None, reasons=reasons)
            publication.attempts = 1
            snapshot, settled = publication()
            why = reasons[-1] if reasons else None
        if settled == "deferred":
            self.deferred.failed(item)
            return False
        name = self.tables.routes.name(share.table)
        shown = record
        if settled == "abandoned":
            self._forget(record, share.table)
            shown = record.without({share.table: why or "abandoned"})
        else:
            self._learn(record, share.table)
            if self.published is not None:
                self.published(record, share.table, snapshot)
        # its rows join the history before the share leaves the list: a failure keeps it there
        if self.tables.history is not None and not self.tables.history.publish(
            shown, {name: snapshot}, part=name, keep=False
        ):
            self.deferred.failed(item)
            return False
        self.deferred.remove(item)
        self._release(item.table, item.query_id, item.batch_id)
        logger.info("a share set aside is settled", extra={"table": name, "batch_id": item.batch_id, "how": settled})
        return True

    def _learn(self, record: CommitRecord, table: str) -> None:
        share = record.share(table)
        if share is not None and self.memory is not None:
            self.memory.learn(share.table, share.keys)

    def _release(self, table: str, query_id: str, batch_id: int) -> None:
        if self.memory is not None:
            self.memory.release(table, (query_id, batch_id))

    def _forget(self, record: CommitRecord, table: str) -> None:
        share = record.share(table)
        if share is not None and self.memory is not None:
            self.memory.forget(record, share)

    def _publication(
        self,
        record: CommitRecord,
        share: TableShare,
        committer: BatchCommitter,
        failures: Failures,
        written_files: Mapping[str, WrittenFile] | None,
        *,
        hold: float | None,
        reasons: list[str],
    ) -> Publication:
        return Publication(
            publish=lambda: committer.publish_share(record, share, written_files),
            failed=lambda exc, content: self._failed(record, share, failures, exc, content=content),
            abandon=lambda exc: reasons.append(self._abandon(record, share, committer, exc)),
            max_refusals=self.max_refusals,
            sleep=self.sleep,
            hold_s=hold,
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
        self._emit(self._both(M.PUBLISH_FAILURES, 1, table))
        if not content:
            return 0
        key = f"refusals.{share.table}" if share.table else "refusals"
        count = int(failures.get(record.batch_id).get(key, 0)) + 1
        failures.record(record.batch_id, count, exc, key=key)
        return count

    def _abandon(self, record: CommitRecord, share: TableShare, committer: BatchCommitter, exc: BaseException) -> str:
        """A share its table refuses for its own content: its objects quarantined with the cause (a
        requeue loads them again), its files removed, a marker saying it is abandoned; the reason."""
        table = self.tables.routes.name(share.table)
        reason = f"table {table} refused the batch {self.max_refusals} times: {type(exc).__name__}: {exc}"[:2000]
        objects = record.loaded_by(share)
        rejections = [Rejection("file", f"s3://{s.bucket}/{s.key}", reason, s.manifest_uri) for s in objects] or [
            Rejection("manifest", uri, reason, uri) for uri in record.manifests
        ]
        stem = f"{record.query_id[:8]}-{record.batch_id:012d}"
        suffix = f"-{share.table}" if share.table else ""
        target = f"{self.quarantine_uri}/{record.partition}/quarantine-{stem}-{record.attempt}{suffix}-abandoned.json"
        self.fs.write_bytes(target, rejection_lines(rejections, record.batch_id))
        committer.abandon(record, share, reason)
        self._emit(self._both(M.REFUSED_OBJECTS, len(objects), table, record.committed_at))
        return reason

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
