"""The write side of a batch: parts staged by the parse tasks become files of about the target size.

The parse tasks are planned by input, so that every core of the cluster has work whatever the
batch's output size; each stages Parquet *parts* of at most the target size. This module plans
and writes the batch's output files from those parts, one Spark task per output file:

- a part of about the target size whose columns are already the batch's final ones is kept as
  it is (no rewrite);
- every other part (small ones, or ones written before another task found a new key) is packed
  with others into outputs of about the target size and rewritten once, row group by row group,
  with the batch's final columns.

Sizes are exact here (the parts exist), so the output sizes do not depend on an estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from glue_processor.ndjson import LINEAGE_COLUMNS, STRING, column_names
from glue_processor.objects import ObjectStore, store_for
from glue_processor.sizing import plan_groups
from glue_processor.tasks import _PARQUET_OPTIONS, Staged, _output_table

# A part within this fraction of the target is a file of its own already.
FULL = 0.85


@dataclass(frozen=True)
class MergeSpec:
    index: int
    parts: tuple[Staged, ...]
    keys: tuple[str, ...]
    uri: str


@dataclass(frozen=True)
class MergePlan:
    keep: tuple[Staged, ...]  # parts that are output files as they are
    merges: tuple[MergeSpec, ...]  # groups of parts, each rewritten into one file


def plan_merge(parts: Sequence[Staged], keys: tuple[str, ...], *, target_bytes: int, out_dir: str) -> MergePlan:
    """Keep full parts with the final columns; pack the rest into about ``total / target`` files."""
    keep = [p for p in parts if p.bytes >= FULL * target_bytes and set(p.keys) == set(keys)]
    kept = {p.uri for p in keep}
    rest = [p for p in parts if p.uri not in kept]
    total = sum(p.bytes for p in rest)
    groups = plan_groups([p.bytes for p in rest], max(1, round(total / target_bytes))) if rest else []
    merges = tuple(
        MergeSpec(i, tuple(rest[j] for j in group), keys, f"{out_dir}/merged-{i:05d}.parquet")
        for i, group in enumerate(groups)
    )
    return MergePlan(tuple(keep), merges)


def merge_parts(spec: MergeSpec, stores: Callable[[str], ObjectStore] = store_for) -> Staged:
    """Rewrite a group of parts as one Parquet file with the final columns, one row group at a
    time (memory: one part's bytes and one row group), then delete the parts."""
    out = stores(spec.uri)
    final_names = column_names(spec.keys)
    with out.writer(spec.uri) as path:
        writer: pq.ParquetWriter | None = None
        try:
            for part in spec.parts:
                source = pq.ParquetFile(pa.BufferReader(stores(part.uri).read(part.uri).data))
                names = dict(column_names(part.keys))
                for group in range(source.num_row_groups):
                    table = source.read_row_group(group)
                    data = {
                        key: table.column(names[key]).cast(STRING) if key in names else pa.nulls(len(table), STRING)
                        for key, _ in final_names
                    }
                    conformed = _output_table(data, spec.keys, {c: table.column(c) for c in LINEAGE_COLUMNS})
                    if writer is None:
                        writer = pq.ParquetWriter(path, conformed.schema, **_PARQUET_OPTIONS)
                    writer.write_table(conformed, row_group_size=max(1, len(conformed)))
        finally:
            if writer is not None:
                writer.close()
        size = path.stat().st_size
    for part in spec.parts:
        stores(part.uri).delete(part.uri)
    return Staged(spec.uri, size, spec.keys)
