"""Sizing a batch's tasks: parse tasks by input (every core busy), groups of about equal size."""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass


class LearnedRatio:
    """An exponentially weighted estimate of a ratio of bytes (here: gzip text bytes per gzip byte)."""

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
    non-empty bin, in input order within a bin (a parse task's objects, or a written file's parts).
    """
    bins: list[tuple[float, int]] = [(0.0, b) for b in range(max(1, min(groups, len(sizes))))]
    members: list[list[int]] = [[] for _ in bins]
    heapq.heapify(bins)
    for index in sorted(range(len(sizes)), key=lambda i: -sizes[i]):
        total, b = heapq.heappop(bins)
        members[b].append(index)
        heapq.heappush(bins, (total + sizes[index], b))
    return [sorted(m) for m in members if m]


# A parse task's input is capped, so a retried task redoes little and memory stays bounded.
MAX_UNIT_BYTES = 256 * 1024 * 1024
# Tasks per core: enough that a slow object does not leave the other cores idle at the end.
UNITS_PER_CORE = 2
# ... but past one task per core, a task has at least this much to read: each costs 35-60 ms of
# scheduling and Python-worker round trip (an empty 4-task job takes 0.2 s on local[2], a 2-task
# one 0.13 s), about a tenth of the time a task of 64 MB takes to parse.
MIN_SPLIT_BYTES = 64 * 1024 * 1024


# A byte range of a split object is at least this long (its task's fixed cost stays small).
MIN_RANGE_BYTES = 8 * 1024 * 1024


def parse_unit_count(sizes: Sequence[float], *, cores: int, max_unit_bytes: int | None = None) -> int:
    """How many parse tasks a batch runs: by input, never by output. Every core gets work (one
    task each, ``UNITS_PER_CORE`` when each would still read ``MIN_SPLIT_BYTES``), no task reads
    more than ``max_unit_bytes``, and the count is a multiple of the cores, so every core gets the
    same number of tasks of about the same size (90 tasks on 80 cores would take as long as 160);
    but a task is at least one piece (an object or a range of one: :func:`plan_pieces`), so there
    are never more tasks than pieces."""
    if not sizes:
        return 0
    return max(1, min(len(sizes), _units_wanted(sum(sizes), cores, max_unit_bytes)))


def _units_wanted(total: float, cores: int, max_unit_bytes: int | None) -> int:
    cores = max(1, cores)
    per_core = UNITS_PER_CORE if total / (UNITS_PER_CORE * cores) >= MIN_SPLIT_BYTES else 1
    return cores * max(per_core, math.ceil(total / ((max_unit_bytes or MAX_UNIT_BYTES) * cores)))


@dataclass(frozen=True)
class Piece:
    """What one parse task reads of an object: the lines that start in bytes [start, end), ``end``
    None for the end of the object (all of it, or its last range: read to the end whatever the
    size its event gave)."""

    item: int  # the object's index
    estimate: float  # text bytes, about
    start: int = 0
    end: int | None = None


def plan_pieces(
    sizes: Sequence[float], splittable: Sequence[bool], *, cores: int, max_unit_bytes: int | None = None
) -> list[Piece]:
    """The batch's objects as pieces for the parse tasks: an object whole, or, when it is plain
    text (not gzip) and at least two units long, in byte ranges of about a unit, so a batch of a
    few huge objects also spreads over every core. A unit is the batch's input over the tasks
    that keep every core busy (:func:`parse_unit_count`), at least ``MIN_RANGE_BYTES`` and at most
    ``max_unit_bytes``. Sizes of splittable objects are their exact byte sizes."""
    total = sum(sizes)
    cap = max_unit_bytes or MAX_UNIT_BYTES
    unit = min(cap, max(MIN_RANGE_BYTES, total / _units_wanted(total, cores, cap)))
    pieces: list[Piece] = []
    for i, (size, split) in enumerate(zip(sizes, splittable, strict=True)):
        n = int(size // unit) if split else 1
        if n < 2:
            pieces.append(Piece(i, size))
            continue
        bounds = [k * int(size) // n for k in range(n)]
        pieces.extend(Piece(i, b - a, a, b) for a, b in itertools.pairwise(bounds))
        pieces.append(Piece(i, size - bounds[-1], bounds[-1]))
    return pieces
