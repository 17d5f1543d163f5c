"""Checkpoint generations: bound the file source's bookkeeping however long the job runs.

Spark's file source keeps every processed file in its checkpoint log forever, so its size and the
restart time grow with the number of manifests (see README: bookkeeping at scale). With processed
manifests archived out of the listed prefix (``manifest_archive_uri``), a fresh checkpoint only
sees manifests still waiting. So after ``checkpoint_rotate_manifests`` manifests the job stops
between batches and continues in ``<checkpoint_uri>/gen-<n+1>``. Archiving is Spark's, and best
effort: a processed manifest can be left in the listed prefix. Before a new generation starts, the
manifests the previous one processed (its file source log) that are still listed are archived
(:func:`sweep_processed`), so a new generation never reads one again, however long it was left
behind; the ledger's dedupe window stays as a second guard.
"""

from __future__ import annotations

import json
import logging
from urllib.parse import unquote

from glue_processor.hadoop_fs import HadoopFS
from glue_processor.settings import JobSettings

PREFIX = "gen-"
logger = logging.getLogger(__name__)


def generation_uri(base: str, n: int) -> str:
    return f"{base}/{PREFIX}{n:05d}"


def latest_generation(fs: HadoopFS, base: str) -> int:
    numbers = [int(i.name[len(PREFIX) :]) for i in fs.list(base) if i.is_dir and i.name.startswith(PREFIX)]
    return max(numbers, default=1)


def previous_query_id(fs: HadoopFS, checkpoint: str) -> str | None:
    """The streaming query id of the generation before ``checkpoint`` (``<base>/gen-<n>``); None for
    the first generation, a checkpoint outside generations, or one that never started."""
    base, _, tail = checkpoint.rstrip("/").rpartition("/")
    if not tail.startswith(PREFIX) or not tail[len(PREFIX) :].isdigit() or int(tail[len(PREFIX) :]) < 2:
        return None
    metadata = f"{generation_uri(base, int(tail[len(PREFIX) :]) - 1)}/metadata"
    if not fs.exists(metadata):
        return None
    return str(json.loads(fs.read_bytes(metadata))["id"])


def committed_batches(fs: HadoopFS, checkpoint: str) -> int:
    """Batches Spark committed in this checkpoint (its commit log is named by batch id)."""
    ids = [int(i.name) for i in fs.list(f"{checkpoint}/commits") if i.name.isdigit()]
    return max(ids) + 1 if ids else 0


def rotate_after_batches(settings: JobSettings) -> int | None:
    """Batches per generation, or None when rotation is off. A trigger takes at most
    ``max_files_per_trigger`` manifests (its count follows the manifests' bytes, see
    ``glue_processor.intake``), so this many batches hold at most ``checkpoint_rotate_manifests``."""
    if not settings.checkpoint_rotate_manifests:
        return None
    return max(1, settings.checkpoint_rotate_manifests // settings.max_files_per_trigger)


def current_checkpoint(fs: HadoopFS, settings: JobSettings) -> str:
    """The checkpoint to run in now: the latest generation, or the next one if it is full."""
    n = latest_generation(fs, settings.checkpoint_uri)
    limit = rotate_after_batches(settings)
    if limit is not None and committed_batches(fs, generation_uri(settings.checkpoint_uri, n)) >= limit:
        n += 1
    return generation_uri(settings.checkpoint_uri, n)


def processed_paths(fs: HadoopFS, checkpoint: str) -> set[str]:
    """The files of the batches a checkpoint committed: the paths in its file source log
    (``sources/0``: a ``v1`` line, then one JSON object with ``path`` and ``batchId`` per file, in
    delta and ``.compact`` files) whose batch is in its commit log. A batch planned but never
    committed (the run stopped first) is not processed: its manifests must be read again."""
    log = f"{checkpoint}/sources/0"
    if not fs.exists(log):
        return set()
    committed = committed_batches(fs, checkpoint)
    paths: set[str] = set()
    for info in fs.list(log):
        if info.is_dir or info.name.startswith((".", "_")):
            continue
        for line in fs.read_bytes(info.uri).decode("utf-8").splitlines()[1:]:
            if line.strip():
                entry = json.loads(line)
                if int(entry.get("batchId", committed)) < committed:
                    paths.add(str(entry["path"]))
    return paths


def _key(uri: str) -> str:
    """A path as both spellings agree on: Spark logs ``file:/x`` or percent-encoded URIs, a listing
    gives ``file:/x`` unencoded."""
    return unquote(uri.split(":", 1)[-1]).lstrip("/")


def sweep_processed(fs: HadoopFS, previous_checkpoint: str, settings: JobSettings) -> int:
    """Archive the manifests ``previous_checkpoint`` processed that are still listed; returns how many."""
    if not settings.manifest_archive_uri:
        return 0
    done = {_key(p) for p in processed_paths(fs, previous_checkpoint)}
    moved = 0
    for info in fs.list(settings.manifest_uri):
        if info.is_dir or _key(info.uri) not in done:
            continue
        fs.move(info.uri, f"{settings.manifest_archive_uri.rstrip('/')}/{info.name}")
        moved += 1
    if moved:
        logger.warning(
            "archived manifests the previous generation processed but left behind",
            extra={"count": moved, "previous": previous_checkpoint},
        )
    return moved


def start_generation(fs: HadoopFS, settings: JobSettings) -> str:
    """The checkpoint to run in now; a new generation first sweeps what the previous one processed."""
    checkpoint = current_checkpoint(fs, settings)
    n = int(checkpoint.rsplit(PREFIX, 1)[-1])
    if n > 1 and not fs.exists(f"{checkpoint}/metadata"):
        sweep_processed(fs, generation_uri(settings.checkpoint_uri, n - 1), settings)
    return checkpoint
