"""A committed batch's metrics, published; a metrics problem never fails the batch."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from contracts.ledger import CommitRecord
from glue_processor.metrics.convert import record_datums, table_datums

if TYPE_CHECKING:
    from glue_processor.metrics.setup import JobMetrics

logger = logging.getLogger(__name__)


def report(
    metrics: JobMetrics | None,
    record: CommitRecord,
    *,
    commit_ms: float,
    table: dict[str, int],
    max_partitions: int | None = None,
) -> None:
    """The batch's figures, its commit's duration and the table's size after it, and the backlog."""
    if metrics is None:
        return
    try:
        metrics.records_by_batch[record.batch_id] = record.stats.records_in
        metrics.publisher.emit(record_datums(record, dimensions=metrics.dimensions, max_partitions=max_partitions))
        metrics.publisher.emit(table_datums(commit_ms, table, dimensions=metrics.dimensions, when=record.committed_at))
        metrics.emit_backlog(metrics.probe.mark_processed(record.manifests))
    except Exception:
        logger.exception("batch metrics failed", extra={"batch_id": record.batch_id})
