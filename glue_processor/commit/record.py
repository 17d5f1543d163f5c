"""A batch's commit record: what it read, wrote and found, and the final names of its files."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from contracts.ledger import BatchStats, CommitRecord, PublishedFile, Replaced, Rewrite, TableShare
from glue_processor.plan.manifests import BatchPlan, latency_seconds
from glue_processor.read.outcome import Outcome
from glue_processor.read.parts import Staged


@dataclass(frozen=True)
class Attempt:
    """One attempt at a batch: its ids, when it commits, and the stem of its files' names."""

    query_id: str
    batch_id: int
    attempt: str
    committed_at: datetime
    partition: str  # the label of the partition a batch committed then writes (its quarantine's too)

    @property
    def stem(self) -> str:
        return f"{self.query_id[:8]}-{self.batch_id:012d}"


@dataclass
class ShareResult:
    """One table's share of a batch, as the record lists it."""

    table: str
    outcome: Outcome
    data_files: list[PublishedFile]
    refused: str | None = None
    # versions whose rows go with the share, and the files rewritten without them (docs/mirror.md)
    replaced: tuple[Replaced, ...] = ()
    rewrites: tuple[Rewrite, ...] = ()

    def share(self, input_bytes: int = 0) -> TableShare:
        stats = share_stats(self.outcome, self.data_files, input_bytes)
        removed = {
            "rows_removed": sum(r.rows_removed for r in self.rewrites),
            "rewrite_bytes": sum(r.old_bytes for r in self.rewrites if r.rows_removed),
        }
        return TableShare(
            table=self.table,
            data_files=tuple(self.data_files),
            keys=self.outcome.final_keys,
            stats=stats.model_copy(update=removed),
            refused=self.refused,
            replaced=self.replaced,
            rewrites=self.rewrites,
        )


def make_record(
    attempt: Attempt,
    plan: BatchPlan,
    driver: Outcome,
    shares: list[ShareResult],
    *,
    quarantine_dir: str,
    duration_s: float,
    stage_s: dict[str, float],
) -> CommitRecord:
    """The batch's record: each table's share (its files, columns and figures), every object's
    outcome, the quarantine files (named under ``quarantine_dir``) and the batch's figures."""
    outcomes = [driver, *(s.outcome for s in shares)]
    quarantine_files = name_outputs(
        [f for o in outcomes for f in o.quarantine_files],
        quarantine_dir,
        stem=f"quarantine-{attempt.stem}",
        suffix=".json",
        attempt=attempt.attempt,
    )
    sources = [src for o in outcomes for src in o.sources]
    latencies = latency_seconds((s.event_time for s in sources if s.status == "ingested"), attempt.committed_at)
    tables = tuple(s.share(plan.input_bytes_of(s.table)) for s in shares)
    total = sum_stats([t.stats for t in tables])
    return CommitRecord(
        query_id=attempt.query_id,
        batch_id=attempt.batch_id,
        attempt=attempt.attempt,
        committed_at=attempt.committed_at,
        partition=attempt.partition,
        manifests=tuple(plan.manifests),
        tables=tables,
        quarantine_files=tuple(quarantine_files),
        sources=tuple(sources),
        stats=total.model_copy(
            update={
                "manifests": len(plan.manifests),
                "bad_manifests": plan.bad_manifests,
                "files": len(plan.files),
                "input_bytes": plan.input_bytes,
                "missing_files": sum(1 for s in sources if s.status == "missing"),
                "unreadable_files": sum(1 for s in sources if s.status == "unreadable"),
                "partial_files": sum(len(o.partial) for o in outcomes),
                "duration_s": round(duration_s, 3),
                "stage_s": stage_s,
                "max_latency_s": latencies[-1] if latencies else None,
                "p95_latency_s": percentile(latencies, 0.95),
            }
        ),
    )


def share_stats(outcome: Outcome, data_files: list[PublishedFile], input_bytes: int) -> BatchStats:
    """One share's figures."""
    return BatchStats(
        files=sum(1 for s in outcome.sources if s.status != "duplicate"),
        missing_files=outcome.count("missing"),
        unreadable_files=outcome.count("unreadable"),
        partial_files=len(outcome.partial),
        input_bytes=input_bytes,
        text_bytes=outcome.text_bytes,
        records_in=outcome.records_out + outcome.bad_records + outcome.dropped,
        records_out=outcome.records_out,
        bad_records=outcome.bad_records,
        rescued_values=outcome.rescued,
        extra_values=outcome.extra_values,
        null_partition_records=outcome.null_partitions,
        overflow_records=outcome.overflow_records,
        dropped_records=outcome.dropped,
        rule_violations=dict(sorted(outcome.violations.items())),
        object_violations=outcome.object_violations,
        output_files=len(data_files),
        output_bytes=sum(f.bytes for f in data_files),
        partitions=len({f.partition for f in outcome.data_files}),
        columns=len(outcome.final_keys),
    )


SUMMED = (
    "text_bytes",
    "records_in",
    "records_out",
    "bad_records",
    "rescued_values",
    "extra_values",
    "null_partition_records",
    "overflow_records",
    "dropped_records",
    "output_files",
    "output_bytes",
    "partitions",
    "rows_removed",
    "rewrite_bytes",
)


def sum_stats(stats: list[BatchStats]) -> BatchStats:
    """The batch's figures from its shares' (columns: the widest table's)."""
    return BatchStats(
        **{name: sum(getattr(s, name) for s in stats) for name in SUMMED},
        columns=max((s.columns for s in stats), default=0),
    )


def name_outputs(staged: list[Staged], final_dir: str, *, stem: str, suffix: str, attempt: str) -> list[PublishedFile]:
    """Deterministic final names for the staged files of one attempt."""
    return [
        PublishedFile(staged=item.uri, final=f"{final_dir}/{stem}-{n:05d}-{attempt}{suffix}", bytes=item.bytes)
        for n, item in enumerate(sorted(staged, key=lambda i: i.uri))
    ]


def in_place(staged: list[Staged]) -> list[PublishedFile]:
    """Files written where the table keeps them: their final names are the ones they have."""
    return [PublishedFile(staged=f.uri, final=f.uri, bytes=f.bytes) for f in staged]


def percentile(values: Iterable[float], q: float) -> float | None:
    ordered = sorted(values)
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
