"""Running the job's real batch path on a directory of NDJSON files (for bench and sizing)."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


def local_job(root: Path, *, objects: Path | None = None, **arguments: str) -> dict[str, str]:
    """A job's arguments on local directories under ``root``; objects under ``objects/<bucket>/``
    (default ``root``)."""
    return {
        "manifest_uri": (root / "manifests").as_uri(),
        "output_uri": (root / "data").as_uri(),
        "quarantine_uri": (root / "quarantine").as_uri(),
        "checkpoint_uri": (root / "checkpoint").as_uri(),
        "source_uri_template": f"{(objects or root).as_uri()}/{{bucket}}/{{key}}",
        "metrics_sinks": "",
        **arguments,
    }


def entries_of(files: list[Path]) -> list[Any]:
    """Manifest entries of the files; their directory name stands for the bucket."""
    from contracts.manifest import ManifestEntry

    now = datetime.now(UTC)
    return [
        ManifestEntry(
            bucket=p.parent.name,
            key=p.name,
            size=p.stat().st_size,
            etag=hashlib.md5(p.name.encode()).hexdigest(),
            event_time=now,
        )
        for p in files
    ]


def manifest_of(files: list[Path]) -> tuple[str, str]:
    """A (uri, text) manifest listing the files; their directory name stands for the bucket."""
    from contracts.manifest import Manifest

    return ("file:///bench/manifest.json", Manifest.of(entries_of(files)).to_json().decode())


def batch_job(
    spark: Any,
    files: list[Path],
    out: Path,
    query_id: str,
    previous: Any = None,
    *,
    max_columns: int | None = None,
    settings: dict[str, str] | None = None,
) -> Any:
    """A started ManifestBatchJob writing under ``out`` (as the job is when its stream starts: table
    open, recent batches read); ``previous`` passes on what a warm job learnt."""
    from glue_processor.batch import ManifestBatchJob
    from glue_processor.settings import settings_from_mapping

    job_settings = settings_from_mapping(
        local_job(
            out,
            objects=files[0].parent.parent,
            **({"max_columns": str(max_columns)} if max_columns else {}),
            **(settings or {}),
        )
    )
    job = ManifestBatchJob(spark, job_settings, query_id=query_id)
    if previous is not None:
        # a 24/7 job carries what it learnt: the keys (and the gzip expansion it sizes tasks by)
        job.memory.gzip_expansion = previous.memory.gzip_expansion
        job.memory.known_keys = set(previous.memory.known_keys)
    job.start()
    return job
