"""S3 layout conventions: where manifests, output, commits and quarantine records live.

Everything that names a path by convention does so here, so the Lambda, the job, the
infrastructure and the tests agree.
"""

from __future__ import annotations

import re

from contracts.manifest import Manifest

MANIFEST_SUFFIX = ".json"
# <stamp>-<hash>-<data bytes>b.json: the data bytes in the name let a listing alone say exactly how
# much data the waiting manifests reference (the backlog probe makes no GET per manifest)
_DATA_BYTES = re.compile(r"-(\d{1,20})b\.json$")
# Directories whose names start with "_" or "." are skipped by Spark, Athena, Trino and Hive.
COMMITS_DIR = "_commits"
# The stack's Glue database (template parameter DatabaseName's default), as Athena names it: the
# local query views answer to it too, so the README's SQL runs locally as printed.
ATHENA_DATABASE = "ndjson_ingest"
STAGING_DIR = "_staging"


def is_commit_record(name: str) -> bool:
    """A commit record's file name: ``<batch id>.json``. Hidden names (``.tmp-…`` left by a write
    killed before its rename on a local file system) are not records."""
    return name.endswith(".json") and not name.startswith((".", "_"))


def manifest_key(prefix: str, manifest: Manifest) -> str:
    """The manifest's object key: a pure function of its content (earliest event time + hash).

    The time stamp keeps listings roughly chronological for people; the hash makes the name
    unique and deterministic, so a retried invocation overwrites instead of duplicating; the data
    bytes the manifest references (its ``total_bytes``) end the name (:func:`manifest_data_bytes`).
    """
    stamp = manifest.earliest_event_time.strftime("%Y%m%dT%H%M%SZ")
    return f"{normalise_prefix(prefix)}{stamp}-{manifest.manifest_id[:32]}-{manifest.total_bytes}b{MANIFEST_SUFFIX}"


def manifest_data_bytes(name: str) -> int | None:
    """The data bytes a manifest references, read from its name (None: a name from before they were
    in it, or not a manifest's)."""
    match = _DATA_BYTES.search(name)
    return int(match.group(1)) if match else None


def normalise_prefix(prefix: str) -> str:
    """'' stays ''; anything else ends with exactly one '/' and has no leading '/'."""
    stripped = prefix.strip("/")
    return f"{stripped}/" if stripped else ""


def source_uri(bucket: str, key: str) -> str:
    """The logical URI of an object, used in lineage columns and quarantine records."""
    return f"s3://{bucket}/{key}"
