"""Does intake keep up? Manifest arrivals replayed against the job's trigger policy.

A discrete-time model (one-second steps) of the path from S3 to a micro-batch:

- files land at a steady rate (the seed: 200,000 an hour of ~3.5 MB);
- the SQS event source runs up to ``concurrency`` manifest Lambdas; each collects messages until its
  batch is full (``batch_size``) or its batching window ends, then writes manifests bounded by
  ``max_manifest_bytes`` and ``max_manifest_files`` (the Lambda's packing);
- the job starts a micro-batch every ``trigger_s`` (at once when the previous one overran), takes
  up to the policy's manifests per trigger (``JobSettings.files_per_trigger``: the byte budget
  through the manifests' bound, capped by ``max_files_per_trigger``) and needs ``bytes /
  throughput`` plus a fixed overhead for it.

It answers one question: with a cluster that could keep up, does the trigger policy let it?
``python -m bench.intake`` prints the backlog over an hour for the stack's defaults and for the
seed's ``maxFilesPerTrigger=1``.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections import deque
from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class Arrivals:
    files_per_hour: float = 200_000
    file_bytes: int = round(3.5 * MIB)


@dataclass(frozen=True)
class LambdaBatching:
    batch_size: int = 1000
    window_s: int = 20
    concurrency: int = 5
    max_manifest_bytes: int = 1024 * MIB
    max_manifest_files: int = 1000


@dataclass(frozen=True)
class TriggerPolicy:
    trigger_s: int = 30
    files_per_trigger: int = 16
    throughput_bytes_s: float = 400 * MIB  # what the cluster processes; sized above arrival
    fixed_s: float = 1.0


@dataclass(frozen=True)
class Outcome:
    seconds: int
    manifests_written: int
    manifests_processed: int
    max_backlog_manifests: int
    final_backlog_manifests: int
    max_backlog_age_s: float
    batches: int


def pack(files: int, file_bytes: int, lam: LambdaBatching) -> int:
    """Manifests the Lambda writes for one invocation's files (bounded by bytes and count)."""
    if files <= 0:
        return 0
    per_manifest = max(1, min(lam.max_manifest_files, lam.max_manifest_bytes // max(1, file_bytes)))
    return math.ceil(files / per_manifest)


def simulate(arrivals: Arrivals, lam: LambdaBatching, policy: TriggerPolicy, *, seconds: int = 3600) -> Outcome:
    rate = arrivals.files_per_hour / 3600
    per_poller = rate / lam.concurrency
    # a poller's invocation ends when its batch is full or its window is over
    cycle = max(1, min(lam.window_s, math.ceil(lam.batch_size / per_poller) if per_poller else lam.window_s))
    files_per_invocation = min(lam.batch_size, round(per_poller * cycle))
    manifest_bytes = min(lam.max_manifest_bytes, lam.max_manifest_files * arrivals.file_bytes)
    backlog: deque[tuple[int, int]] = deque()  # (written at, bytes)
    written = processed = batches = 0
    max_backlog = 0
    max_age = 0.0
    busy_until = 0.0
    next_trigger = 0.0
    for t in range(seconds):
        if t % cycle == 0 and t > 0:
            for _ in range(lam.concurrency):
                n = pack(files_per_invocation, arrivals.file_bytes, lam)
                files_left = files_per_invocation * arrivals.file_bytes
                for _ in range(n):
                    size = min(manifest_bytes, files_left)
                    files_left -= size
                    backlog.append((t, size))
                written += n
        max_backlog = max(max_backlog, len(backlog))
        if backlog:
            max_age = max(max_age, t - backlog[0][0])
        if t >= next_trigger and t >= busy_until:
            take = [backlog.popleft() for _ in range(min(policy.files_per_trigger, len(backlog)))]
            if take:
                batches += 1
                processed += len(take)
                duration = policy.fixed_s + sum(b for _, b in take) / policy.throughput_bytes_s
                busy_until = t + duration
            # processing-time trigger: the next one is due an interval later, or at once after an overrun
            next_trigger = max(t + policy.trigger_s, busy_until) if take else t + policy.trigger_s
    return Outcome(seconds, written, processed, max_backlog, len(backlog), max_age, batches)


def main(argv: list[str] | None = None) -> int:
    from glue_processor.settings import JobSettings

    p = argparse.ArgumentParser(prog="intake", description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--files-per-hour", type=float, default=200_000)
    p.add_argument("--file-mb", type=float, default=3.5)
    args = p.parse_args(argv)
    arrivals = Arrivals(args.files_per_hour, round(args.file_mb * MIB))
    defaults = JobSettings.model_validate(
        {
            "manifest_uri": "s3://m/x",
            "output_uri": "s3://o/d",
            "quarantine_uri": "s3://o/q",
            "checkpoint_uri": "s3://a/c",
        }
    )
    lam = LambdaBatching()
    for label, files in (("stack defaults", defaults.files_per_trigger), ("maxFilesPerTrigger=1", 1)):
        out = simulate(arrivals, lam, TriggerPolicy(files_per_trigger=files))
        print(
            f"{label:22} manifests/trigger {files:3}: written {out.manifests_written}, processed "
            f"{out.manifests_processed}, backlog max {out.max_backlog_manifests} end {out.final_backlog_manifests}, "
            f"oldest {out.max_backlog_age_s:.0f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
