"""The most partitions a table's share of a batch writes (``--partition_limit_per_batch``).

Every partition a batch touches costs it a file, a merge, its statistics and a manifest entry, and
the driver holds each file's entry until the commit (~8 KB: 200,000 partitions took 1.7 GB and 173 s
here, most of it in the write stage). A partition source of unbounded cardinality (an identity
partition on an id, a crafted ``ts`` spread over centuries) would otherwise make every batch that
slow and that large, and the table millions of files. Past the limit, rows join the null
partition: their partition values move to ``_extra`` under their keys and the columns are NULL there
(:meth:`glue_processor.shared.partitioning.PartitionPlan.demote`), as for an identity value too long
to be a partition. Two steps choose which:

- a parse task keeps apart the rows of the first ``limit`` partitions it meets (the largest first
  within a chunk) and moves any other's at once (``read.parts.ParquetParts._within_limit``), so what
  it reports, and the driver holds, is bounded whatever its input;
- of the partitions the tasks kept, the batch keeps the ``limit`` largest (by bytes; ties by label)
  and the write stage moves the others' rows (:func:`overflow`, here).

Nothing is lost, every row is written once, and the batch counts the rows moved
(``PartitionOverflowRecords``, which alarms). Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from glue_processor.read.parts import SharedRows, Staged


def overflow(parts: Sequence[Staged], limit: int, null_label: str, *, run_bytes: int = 2**62) -> list[Staged]:
    """``parts``, with those of every partition past the ``limit`` largest relabelled ``null_label``
    and marked ``overflow`` (after the others). The null
    partition, when the parts have it or overflow makes it, is one of the ``limit``. Moved ranges
    adjacent in a shared file become one, of at most ``run_bytes`` (the null partition's merge reads
    a range per run of moved partitions, not one per partition per task: 200,000 moved partitions
    took 13 s as ranges; and its files are still packed to the target from runs that size)."""
    if limit < 1:
        raise ValueError(f"a partition limit of {limit}: at least 1")
    weights: dict[str, int] = {}
    for p in parts:
        weights[p.partition] = weights.get(p.partition, 0) + p.bytes
    if len(weights) <= limit:
        return list(parts)
    others = sorted((label for label in weights if label != null_label), key=lambda label: (-weights[label], label))
    kept = {*others[: limit - 1], null_label}
    out = [p for p in parts if p.partition in kept]
    out += [
        dataclasses.replace(p, partition=null_label, overflow=True)
        for p in coalesced([p for p in parts if p.partition not in kept], run_bytes)
    ]
    return out


def coalesced(parts: Sequence[Staged], run_bytes: int = 2**62) -> list[Staged]:
    """``parts``, with ranges of a shared file that follow one another (same columns) made one, of
    at most ``run_bytes`` unless a range alone is more (the first one's partition stands for the
    run): files of their own as they are."""
    out = [p for p in parts if p.shared is None]
    runs: list[tuple[Staged, SharedRows, int, int]] = []  # a run's first part, its rows and bytes
    ranges = sorted(
        ((p, p.shared) for p in parts if p.shared is not None), key=lambda r: (r[0].uri, r[0].keys, r[1].first)
    )
    for part, shared in ranges:
        if runs:
            first, first_rows, rows, size = runs[-1]
            follows = (first.uri, first.keys) == (part.uri, part.keys) and first_rows.first + rows == shared.first
            if follows and size + part.bytes <= run_bytes:
                runs[-1] = (first, first_rows, rows + shared.rows, size + part.bytes)
                continue
        runs.append((part, shared, shared.rows, part.bytes))
    for first, first_rows, rows, size in runs:
        joined = dataclasses.replace(first_rows, rows=rows)
        out.append(first if rows == first_rows.rows else dataclasses.replace(first, bytes=size, shared=joined))
    return out
