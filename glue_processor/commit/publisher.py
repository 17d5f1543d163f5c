"""A committed batch made visible, by the policy of :mod:`glue_processor.commit.publication`:
failed attempts counted (``PublishFailures``; refusals of the batch's content also across restarts),
a batch refused too often abandoned (its manifests quarantined with the cause)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from contracts.ledger import CommitRecord
from contracts.metrics import PUBLISH_FAILURES, QUARANTINED_MANIFESTS, datum
from glue_processor.commit.failures import Failures
from glue_processor.commit.ledger import BatchCommitter
from glue_processor.commit.publication import Publication
from glue_processor.hadoop_fs import HadoopFS
from glue_processor.plan.manifests import Rejection
from glue_processor.write.stage import rejection_lines

if TYPE_CHECKING:
    from glue_processor.metrics.setup import JobMetrics

logger = logging.getLogger(__name__)


class Publisher:
    def __init__(
        self,
        fs: HadoopFS,
        failures: Failures,
        *,
        quarantine_uri: str,
        max_refusals: int,
        metrics: JobMetrics | None = None,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.fs, self.failures = fs, failures
        self.quarantine_uri, self.max_refusals = quarantine_uri, max_refusals
        self.metrics, self.sleep = metrics, sleep

    def publish(
        self, record: CommitRecord, committer: BatchCommitter, footers: Mapping[str, bytes] | None = None
    ) -> tuple[int | None, bool]:
        """(the snapshot id or None, True once published; False when abandoned as poison)."""
        return Publication(
            publish=lambda: committer.publish(record, footers),
            failed=lambda exc, content: self._failed(record, exc, content=content),
            abandon=lambda exc: self._abandon(record, committer, exc),
            max_refusals=self.max_refusals,
            sleep=self.sleep,
        )()

    def _failed(self, record: CommitRecord, exc: BaseException, *, content: bool) -> int:
        """Count a failed publication; a refusal of the batch's content is also counted in its
        failures file: the refusals so far."""
        logger.error(
            "publication failed",
            extra={"batch_id": record.batch_id, "refused": content, "error": f"{type(exc).__name__}: {exc}"[:2000]},
        )
        if self.metrics is not None:
            self.metrics.publisher.emit([datum(PUBLISH_FAILURES, 1, self.metrics.dimensions)])
        if not content:
            return 0
        count = int(self.failures.get(record.batch_id).get("refusals", 0)) + 1
        self.failures.record(record.batch_id, count, exc, key="refusals")
        return count

    def _abandon(self, record: CommitRecord, committer: BatchCommitter, exc: BaseException) -> None:
        """A batch the table refuses for its own content: its manifests quarantined with the cause
        (a requeue loads their objects again), its files removed, its record marked abandoned."""
        reason = f"the table refused the batch {self.max_refusals} times: {type(exc).__name__}: {exc}"[:2000]
        rejections = [Rejection("manifest", uri, reason, uri) for uri in record.manifests]
        stem = f"{record.query_id[:8]}-{record.batch_id:012d}"
        target = f"{self.quarantine_uri}/{record.partition}/quarantine-{stem}-{record.attempt}-abandoned.json"
        self.fs.write_bytes(target, rejection_lines(rejections, record.batch_id))
        committer.abandon(record, reason)
        if self.metrics is not None:
            self.metrics.publisher.emit(
                [datum(QUARANTINED_MANIFESTS, len(record.manifests), self.metrics.dimensions, record.committed_at)]
            )
