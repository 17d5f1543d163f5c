"""The write stage of a batch: its parts into files of about the target size, and the driver's own
quarantine records.

Full parts that already have the batch's final columns are kept as they are. Rewrites (CPU) are
Spark tasks; byte concatenations (I/O only) run on the driver when there are few, which saves
scheduling a Spark job, and as Spark tasks when there are many, so the driver's network is not the
limit. A batch that touches many partitions has a merge per partition: the merges are packed into at
most one Spark task per core (by bytes), never one task each, so a partition costs its merge's own
work (a few ms) rather than a task's scheduling (~40 ms here).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from glue_processor.hadoop_fs import HadoopFS
from glue_processor.plan.manifests import Rejection
from glue_processor.plan.sizing import plan_groups
from glue_processor.plan.tasks import SparkMap
from glue_processor.read.outcome import Outcome
from glue_processor.read.parts import Staged
from glue_processor.shared.declared import DeclaredSchema
from glue_processor.shared.objects import store_for
from glue_processor.write.merge import MergeSpec, concatenable, merge_parts, plan_merge
from glue_processor.write.overflow import overflow
from glue_processor.write.shared import SharedReader, contiguous_groups
from glue_processor.write.uploads import BackgroundUploads

if TYPE_CHECKING:
    from glue_processor.shared.partitioning import PartitionPlan
    from glue_processor.table.datafiles import StatsPlan

# A batch writing at most this many files by concatenation does it on the driver.
DRIVER_CONCATS = 4
# ... as long as each re-encodes at most this much of the rows of shared files.
DRIVER_SHARED_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Destination:
    """One table's share of a batch, and where and how its files are written."""

    outcome: Outcome
    out_dir: str
    prefix: str
    target_bytes: int
    declared: DeclaredSchema | None = None
    stats: StatsPlan | None = None  # the table's: each merge works out its file's statistics
    partitions: PartitionPlan | None = None  # the table's partitions from the record, if any
    partition_limit: int | None = None  # the most partitions the share writes (write.overflow)


def write_files(
    destinations: Sequence[Destination],
    *,
    keep_parts: bool,
    spark_map: SparkMap,
    cores: int = 1,
) -> None:
    """Each destination's parts -> its data files, with its share's final columns. The merges of
    every table go into one Spark job (at most a task per core), so a batch of many tables costs
    what its bytes cost. A share over more partitions than its limit moves the rows of the smallest
    into the null partition (:mod:`glue_processor.write.overflow`)."""
    for d in destinations:
        if d.partitions is not None and d.partition_limit is not None:
            d.outcome.data_files = overflow(
                d.outcome.data_files, d.partition_limit, d.partitions.null_label, run_bytes=d.target_bytes // 4
            )
    plans = [
        plan_merge(
            d.outcome.data_files,
            d.outcome.final_keys,
            target_bytes=d.target_bytes,
            out_dir=d.out_dir,
            prefix=d.prefix,
            keep_parts=keep_parts,
            declared=d.declared,
            stats=d.stats,
            partitions=d.partitions,
        )
        for d in destinations
    ]
    merges = [(i, m) for i, plan in enumerate(plans) for m in plan.merges]
    on_driver = [x for x in merges if _driver_merge(x[1])] if len(merges) <= DRIVER_CONCATS else []
    tasks = [x for x in merges if x not in on_driver]
    written: list[list[Staged]] = [list(plan.keep) for plan in plans]
    with ThreadPoolExecutor(max_workers=DRIVER_CONCATS) as pool:
        for (i, _), staged in zip(on_driver, pool.map(lambda x: merge_parts(x[1]), on_driver), strict=True):
            written[i].append(staged)
    sizes = [sum(p.bytes for p in m.parts) for _, m in tasks]
    # merges reading shared files run in label order, a contiguous run per task: a task then decodes
    # only its share of each shared file's row groups
    shared = any(p.shared is not None for _, m in tasks for p in m.parts)
    groups = [[tasks[j] for j in g] for g in (contiguous_groups if shared else plan_groups)(sizes, cores)]
    results = spark_map(merge_all, [[m for _, m in group] for group in groups])
    for group, staged_group in zip(groups, results, strict=True):
        for (i, _), staged in zip(group, staged_group, strict=True):
            written[i].append(staged)
    shared_files = {p.uri for d in destinations for p in d.outcome.data_files if p.shared is not None}
    with ThreadPoolExecutor(max_workers=DRIVER_CONCATS) as pool:  # every merge has read them
        list(pool.map(lambda uri: store_for(uri).delete(uri), sorted(shared_files)))
    for d, files in zip(destinations, written, strict=True):
        d.outcome.data_files = files
        d.outcome.extra_values += sum(f.folded for f in files)
        d.outcome.overflow_records += sum(f.demoted for f in files)


def _driver_merge(spec: MergeSpec) -> bool:
    """A merge cheap enough for the driver: a copy of bytes, and at most a little re-encoding."""
    own = tuple(p for p in spec.parts if p.shared is None)
    shared = sum(p.bytes for p in spec.parts if p.shared is not None)
    return shared <= DRIVER_SHARED_BYTES and concatenable(dataclasses.replace(spec, parts=own))


def merge_all(specs: list[MergeSpec]) -> list[Staged]:
    """One Spark task's share of the merges, one after the other (shared files read once), each
    file uploaded while the next is made; returns once every file is in place."""
    reader = SharedReader(store_for)
    with BackgroundUploads(store_for) as uploads:
        try:
            return [merge_parts(spec, uploads.store, shared=reader) for spec in specs]
        finally:
            reader.close()


def write_rejections(fs: HadoopFS, outcome: Outcome, target: str, batch_id: int) -> None:
    """Quarantine records made on the driver (bad manifests, whole files), staged with the batch."""
    if not outcome.rejections:
        return
    body = rejection_lines(outcome.rejections, batch_id)
    uri = f"{target}/rejections.json"
    fs.write_bytes(uri, body)
    outcome.quarantine_files.append(Staged(uri, len(body)))


def rejection_lines(rejections: list[Rejection], batch_id: int) -> bytes:
    return "".join(json.dumps(rejection_record(r, batch_id), ensure_ascii=False) + "\n" for r in rejections).encode()


def rejection_record(r: Rejection, batch_id: int) -> dict[str, Any]:
    record = {"kind": r.kind, "source_uri": r.source_uri, "reason": r.reason, "raw": r.raw}
    if r.entry is not None:  # which version of the object (two of one key can be in a batch)
        record |= {"etag": r.entry.etag, "version_id": r.entry.version_id}
    return {k: v for k, v in record.items() if v is not None} | {"manifest_uri": r.manifest_uri, "batch_id": batch_id}
