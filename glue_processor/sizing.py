"""How many Parquet files a batch writes: derived from its input bytes, not guessed."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence


def output_file_count(input_bytes: int, *, ratio: float, target_bytes: int) -> int:
    """Files of about ``target_bytes``: estimated Parquet bytes / target, rounded, at least 1.

    ``ratio`` is Parquet bytes per NDJSON byte, learnt from the batches already written.
    Rounding (not ceiling) keeps every file within about +-1/(2n) of the target.
    """
    estimated = input_bytes * ratio
    return max(1, round(estimated / target_bytes)) if math.isfinite(estimated) else 1


class LearnedRatio:
    """An exponentially weighted estimate of Parquet bytes per NDJSON byte."""

    def __init__(self, initial: float, *, weight: float = 0.5) -> None:
        self.value = initial
        self.weight = weight
        self.observations = 0

    def observe(self, *, output_bytes: int, input_bytes: int) -> None:
        # Tiny batches are dominated by Parquet's fixed footer cost; they would skew the estimate.
        if input_bytes < 1024 * 1024 or output_bytes <= 0:
            return
        observed = output_bytes / input_bytes
        # The configured value is only a prior: the first measurement replaces it.
        self.value = observed if not self.observations else (1 - self.weight) * self.value + self.weight * observed
        self.observations += 1


def plan_groups(sizes: Sequence[float], groups: int) -> list[list[int]]:
    """Split items (by estimated size) into ``groups`` bins of about equal total size.

    Largest first, each into the lightest bin so far (LPT); returns the item indexes of each
    non-empty bin, in input order within a bin. Each bin becomes one task and about one file.
    """
    bins: list[tuple[float, int]] = [(0.0, b) for b in range(max(1, min(groups, len(sizes))))]
    members: list[list[int]] = [[] for _ in bins]
    heapq.heapify(bins)
    for index in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        total, b = heapq.heappop(bins)
        members[b].append(index)
        heapq.heappush(bins, (total + sizes[index], b))
    return [sorted(m) for m in members if m]
