"""A committed batch's metrics, published; a metrics problem never fails the batch."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from contracts import metrics as M
from contracts.ledger import CommitRecord
from contracts.metrics import datum
from glue_processor.metrics.convert import record_datums, share_datums, table_datums

if TYPE_CHECKING:
    from glue_processor.commit.publisher import Settlement
    from glue_processor.metrics.setup import JobMetrics

logger = logging.getLogger(__name__)


def report(
    metrics: JobMetrics | None,
    record: CommitRecord,
    *,
    commit_ms: float,
    settlements: Sequence[Settlement] = (),
    tables: Mapping[str, dict[str, int]] | None = None,
    table_of: Callable[[str], str] = lambda t: t,
    deferred: int = 0,
    history_behind: int = 0,
    history_dropped: int = 0,
    max_partitions: int | None = None,
) -> None:
    """The batch's figures and each table's, its commit's duration and the tables' size after it,
    the shares set aside, and the backlog."""
    if metrics is None:
        return
    try:
        metrics.records_by_batch[record.batch_id] = record.stats.records_in
        dims = metrics.dimensions
        metrics.publisher.emit(
            record_datums(
                record,
                dimensions=dims,
                max_partitions=max_partitions,
                deferred=deferred,
                history_behind=history_behind,
                history_dropped=history_dropped,
            )
        )
        metrics.publisher.emit(
            share_datums(record, {s.table: s.commit_ms for s in settlements}, dimensions=dims, table_of=table_of)
        )
        metrics.publisher.emit(table_datums(commit_ms, tables or {}, dimensions=dims, when=record.committed_at))
        surge = metrics.rule_baseline.surge(record)
        metrics.publisher.emit([datum(M.RULE_VIOLATION_SURGE, surge, dims, record.committed_at)])
        metrics.emit_backlog(metrics.probe.mark_processed(record.manifests))
    except Exception:
        logger.exception("batch metrics failed", extra={"batch_id": record.batch_id})
