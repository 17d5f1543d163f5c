"""Many small partitions in one file: how a batch over hundreds of partitions costs what its bytes cost.

A table partitioned from the record needs one file per partition, and each parse task has rows of
every partition. Writing a part file per partition per task costs a Parquet writer, a footer and a
file for each (~1 ms here, whatever the rows), then a merge per partition that opens every task's
part: 1,000 partitions on 2 tasks were 2,000 part files. Instead, a parse task keeps its rows as they
come (bounded), and at a *spill* sorts them by partition once (:func:`sort_spill`):

- a partition with at least ``OWN_BYTES`` of rows in the spill (or the only one) is written to a part
  of its own, as before: its bytes are copied into the partition's file by the write stage, never
  re-encoded;
- the rows of all the other (small) partitions, sorted by partition, are appended to the task's one
  *shared file*, in row groups of about ``SHARED_ROW_GROUP_BYTES``; each partition's rows there are a
  range of rows, which the task reports like a part (:class:`glue_processor.read.parts.SharedRows`).

The parse tasks write that layout and the write stage reads it (:mod:`glue_processor.write.shared`),
so it lives below both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

# A partition with at least this weight of rows in a spill is written to a part of its own (its bytes
# are then copied, not re-encoded, into its file); smaller ones share the task's file. At this size
# a part's own writer and footer (~1 ms) cost about what re-encoding its rows once more would.
OWN_BYTES = 256 * 1024
# Row groups of the shared file: small enough that a merge task reads little beyond its partitions.
SHARED_ROW_GROUP_BYTES = 4 * 1024 * 1024


@dataclass(frozen=True)
class Spill:
    """A spill's rows sorted by partition: the shared partitions first, then those written on their
    own; each partition's rows are ``(label, first row, rows)`` of ``table``."""

    table: pa.Table
    shared: list[tuple[str, int, int]]
    own: list[tuple[str, int, int]]

    @property
    def shared_rows(self) -> int:
        return sum(n for _, _, n in self.shared)


def sort_spill(
    tables: Sequence[pa.Table], labels: Sequence[pa.DictionaryArray], *, weight: int, own_bytes: int = OWN_BYTES
) -> Spill:
    """The rows of ``tables`` (each row's partition in ``labels``) sorted by partition with one take:
    partitions under ``own_bytes`` (by their share of ``weight``) first, in label order, then the
    others in label order. Linear in the rows, whatever the number of partitions."""
    names: dict[str, int] = {}
    codes = []
    for label in labels:
        local = np.array([names.setdefault(n, len(names)) for n in label.dictionary.to_pylist()], dtype=np.int64)
        codes.append(local[label.indices.to_numpy(zero_copy_only=False)] if len(local) else np.zeros(0, np.int64))
    code = np.concatenate(codes) if codes else np.zeros(0, np.int64)
    table = pa.concat_tables(tables, promote_options="default") if len(tables) != 1 else tables[0]
    counts = np.bincount(code, minlength=len(names))
    rows = max(1, len(code))
    of = list(names)
    # a spill of one partition has nothing to share its file with: it is written on its own
    own = [len(of) == 1 or int(counts[i]) * weight >= own_bytes * rows for i in range(len(of))]
    ranked = sorted((i for i in range(len(of)) if counts[i]), key=lambda i: (own[i], of[i]))
    if len(ranked) > 1:
        rank = np.empty(len(of), dtype=np.int64)
        rank[ranked] = np.arange(len(ranked))
        table = table.take(pa.array(np.argsort(rank[code], kind="stable")))
    shared: list[tuple[str, int, int]] = []
    owned: list[tuple[str, int, int]] = []
    start = 0
    for i in ranked:
        (owned if own[i] else shared).append((of[i], start, int(counts[i])))
        start += int(counts[i])
    return Spill(table, shared, owned)
