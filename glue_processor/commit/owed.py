"""What a stopped job still owed the load history, appended again when it restarts.

The load history keeps a failed append in memory and tries it again (:class:`LoadHistory`); a job
that stops drops what it still owes (each logged, counted in ``LoadHistoryDropped``). The restart's
first batch appends those rows again from the ledger (:func:`replay_owed`). It looks at the batches
of this query and of the previous checkpoint generation's that were committed in the last
:data:`WINDOW`, before the batch the restart runs, and appends each one whose rows the history has
no snapshot of. The settlement markers beside each record say which shares were set aside, which
were abandoned, and the snapshot each was published in. The batch is appended as it would have been
at its own time.

The cost is bounded: at most :data:`BEHIND` records of each query are looked at, one listing each,
and a record is read only when the history lacks its batch, so a restart that owes nothing reads no
record. The append is LoadHistory's own guarded one, so a batch's rows go in at most once, whoever
appends them first. One that fails again is kept and retried as any other.

This only works inside the window. The history keeps every snapshot of its last ``DENSE`` (20
minutes; expiry thins the older ones), so within it a batch with no snapshot of its own has no rows
in. Past it, a thinned snapshot would look missing and the batch's rows would go in twice. Older
debts stay dropped, and the ledger has their rows (``make backfill FROM=ledger``, ``make reconcile
FROM=ledger``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from contracts.layout import is_commit_record
from contracts.ledger import CommitRecord
from glue_processor.commit.ledger import BatchCommitter
from glue_processor.plan.routes import Routes
from glue_processor.table.history import BEHIND, LoadHistory
from glue_processor.table.iceberg import DENSE

logger = logging.getLogger(__name__)

# how far back a restart looks: the history's dense window, less a margin for the clocks (a record's
# time is S3's, a snapshot's the driver's)
WINDOW = DENSE - timedelta(minutes=5)


@dataclass(frozen=True)
class Debt:
    """A committed batch of one query, and the batch ids of that query from which on the stream
    itself replays (they are not owed: their own replay appends their rows)."""

    committer: BatchCommitter
    before: int | None = None  # None: every batch (a generation that ended)


def replay_owed(
    debts: Sequence[Debt], history: LoadHistory, routes: Routes, *, now: datetime | None = None
) -> list[tuple[str, int]]:
    """Append the history's rows of each recent batch of ``debts`` it lacks; the (query, batch)
    appended, or kept to be tried again when the history refuses them (the first refusal stops the
    tries: the rest join the kept appends untried). Best effort: a failure is logged, the stream
    goes on."""
    done: list[tuple[str, int]] = []
    cutoff_ms = int(((now or datetime.now(UTC)) - WINDOW).timestamp() * 1000)
    for debt in debts:
        try:
            done.extend(_replay(debt, history, routes, cutoff_ms))
        except Exception:  # the history only: never a reason to stop the stream
            logger.exception(
                "could not check what the load history was owed at the restart; the ledger has the rows",
                extra={"query_id": debt.committer.query_id},
            )
    if done:
        logger.warning(
            "appended at the restart the load history's rows the last run still owed (or kept them, to be "
            "tried again, while it refuses appends: LoadHistoryBehind)",
            extra={"batches": [list(b) for b in done[:50]], "count": len(done), "kept": history.behind},
        )
    return done


def owed_batches(debt: Debt, appended: set[int], cutoff_ms: int) -> list[int]:
    """The batches of ``debt`` committed since ``cutoff_ms`` (epoch ms of the record's write), the
    newest :data:`BEHIND` at most, whose rows the history has not (``appended``), oldest first."""
    committer = debt.committer
    listing = committer.fs.list(committer.commits_dir())
    names = {i.name for i in listing}
    recent = sorted(
        int(i.name.removesuffix(".json"))
        for i in listing
        if is_commit_record(i.name) and i.name.removesuffix(".json").isdigit() and i.modified_ms >= cutoff_ms
    )
    if debt.before is not None:
        recent = [b for b in recent if b < debt.before]
    return [b for b in recent[-BEHIND:] if b not in appended and f"{b:012d}.abandoned" not in names]


def _replay(debt: Debt, history: LoadHistory, routes: Routes, cutoff_ms: int) -> list[tuple[str, int]]:
    committer = debt.committer
    batches = owed_batches(debt, history.appended(committer.query_id), cutoff_ms)
    out = []
    failing = False
    for batch in batches:
        record = committer.load(batch)
        # the record's own time too: a copy of the ledger (a restore, a sync) makes every record look
        # new to the listing
        if record is None or record.committed_at.timestamp() * 1000 < cutoff_ms or not _settled(committer, record):
            continue
        abandoned = {
            share.table: committer.abandon_reason(record, share)
            for share in record.tables
            if committer.share_abandoned(record, share)
        }
        snapshots = {routes.name(share.table): committer.published(record, share)[1] for share in record.tables}
        set_aside = {routes.name(share.table) for share in record.tables if committer.is_set_aside(record, share)}
        # a history that refuses the first is not tried once per batch owed: the rest are kept untried
        if not history.publish(record.without(abandoned), snapshots, set_aside=set_aside, try_now=not failing):
            failing = True
        out.append((record.query_id, record.batch_id))
    return out


def _settled(committer: BatchCommitter, record: CommitRecord) -> bool:
    """Every share of the batch is published, set aside or abandoned (a batch committed and not
    settled is the stream's to replay: its own publication appends its rows)."""
    for share in record.tables:
        if share.refused is not None:  # refused at its commit: never published, its objects quarantined
            continue
        if not (
            committer.published(record, share)[0]
            or committer.is_set_aside(record, share)
            or committer.share_abandoned(record, share)
        ):
            logger.warning(
                "a recent batch is committed and not published; not appended to the load history at the restart",
                extra={"query_id": record.query_id, "batch_id": record.batch_id, "table": share.table},
            )
            return False
    return True
