"""Checkpoint generations: bound the file source's bookkeeping however long the job runs.

Spark's file source keeps every processed file in its checkpoint log forever, so its size and the
restart time grow with the number of manifests (see README: bookkeeping at scale). With processed
manifests archived out of the listed prefix (``manifest_archive_uri``), a fresh checkpoint only
sees manifests still waiting. So after ``checkpoint_rotate_manifests`` manifests the job stops
between batches and continues in ``<checkpoint_uri>/gen-<n+1>``. A manifest of the last batch that
Spark had not archived yet is seen again by the new generation; the ledger's dedupe window (which
spans generations) records its objects as duplicates, so nothing is written twice.
"""

from __future__ import annotations

from glue_processor.hadoop_fs import HadoopFS
from glue_processor.settings import JobSettings

PREFIX = "gen-"


def generation_uri(base: str, n: int) -> str:
    return f"{base}/{PREFIX}{n:05d}"


def latest_generation(fs: HadoopFS, base: str) -> int:
    numbers = [int(i.name[len(PREFIX) :]) for i in fs.list(base) if i.is_dir and i.name.startswith(PREFIX)]
    return max(numbers, default=1)


def committed_batches(fs: HadoopFS, checkpoint: str) -> int:
    """Batches Spark committed in this checkpoint (its commit log is named by batch id)."""
    ids = [int(i.name) for i in fs.list(f"{checkpoint}/commits") if i.name.isdigit()]
    return max(ids) + 1 if ids else 0


def rotate_after_batches(settings: JobSettings) -> int | None:
    """Batches per generation, or None when rotation is off."""
    if not settings.checkpoint_rotate_manifests:
        return None
    return max(1, settings.checkpoint_rotate_manifests // settings.files_per_trigger)


def current_checkpoint(fs: HadoopFS, settings: JobSettings) -> str:
    """The checkpoint to run in now: the latest generation, or the next one if it is full."""
    n = latest_generation(fs, settings.checkpoint_uri)
    limit = rotate_after_batches(settings)
    if limit is not None and committed_batches(fs, generation_uri(settings.checkpoint_uri, n)) >= limit:
        n += 1
    return generation_uri(settings.checkpoint_uri, n)
