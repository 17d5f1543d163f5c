"""A batch's commit record: what it read, wrote and found, and the final names of its files."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from contracts.ledger import BatchStats, CommitRecord, PublishedFile
from glue_processor.plan.manifests import BatchPlan, latency_seconds
from glue_processor.read.outcome import Outcome
from glue_processor.read.task import Staged


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


def make_record(
    attempt: Attempt,
    plan: BatchPlan,
    outcome: Outcome,
    *,
    data_files: list[PublishedFile],
    quarantine_dir: str,
    keys: tuple[str, ...],
    duration_s: float,
    stage_s: dict[str, float],
) -> CommitRecord:
    """The batch's record: its files (``data_files``; quarantine files named under ``quarantine_dir``)
    and its figures."""
    quarantine_files = name_outputs(
        outcome.quarantine_files,
        quarantine_dir,
        stem=f"quarantine-{attempt.stem}",
        suffix=".json",
        attempt=attempt.attempt,
    )
    latencies = latency_seconds((s.event_time for s in outcome.sources if s.status == "ingested"), attempt.committed_at)
    return CommitRecord(
        query_id=attempt.query_id,
        batch_id=attempt.batch_id,
        attempt=attempt.attempt,
        committed_at=attempt.committed_at,
        partition=attempt.partition,
        manifests=tuple(plan.manifests),
        data_files=tuple(data_files),
        quarantine_files=tuple(quarantine_files),
        sources=tuple(outcome.sources),
        keys=keys,
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
            partitions=len({f.partition for f in outcome.data_files}),
            output_bytes=sum(f.bytes for f in data_files),
            columns=len(outcome.final_keys),
            duration_s=round(duration_s, 3),
            stage_s=stage_s,
            max_latency_s=latencies[-1] if latencies else None,
            p95_latency_s=percentile(latencies, 0.95),
        ),
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
