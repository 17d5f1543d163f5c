"""``after_load``: a landing object moved under ``--archive_prefix`` (archive) or deleted (delete)
once the commit that loaded it is published, never before (as Auto Loader's ``cleanSource`` does;
docs/mirror.md).

Only an object loaded whole is touched: one quarantined whole, read in part, missing or refused stays
where it is, for ``make reconcile REQUEUE=1`` to send again. The version loaded is the one removed:
by its version id on a versioned bucket (a newer version uploaded meanwhile stays current), else
only while the object's eTag is still the one loaded: a copy with ``CopySourceIfMatch`` and a
conditional delete with ``If-Match`` (S3 User Guide, "How to perform conditional deletes": general
purpose buckets take it since 2025-09; ``s3:GetObject`` is needed with it), so no upload in between
is ever removed. Calls run on a thread pool (they are I/O): ~1,700 objects a batch at the seed's
load are 2-3 calls each, ~3,400-5,100 calls, a few seconds on :data:`THREADS` threads.

A move or delete here is not a retraction: the key index marks the key archived first, so the
deletion event it causes keeps the rows; a move that failed (denied, throttled) is unmarked again.

Idempotent: a replay of the batch finds the object gone (nothing to do) or archived already.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from contracts.ledger import SourceRecord

logger = logging.getLogger(__name__)
THREADS = 32
MOVED, LEFT, FAILED = "moved", "left", "failed"  # left: gone already, or a newer version is there


def whole(source: SourceRecord) -> bool:
    """An object the batch loaded whole (ingested or empty, nothing of it left out)."""
    return source.status in ("ingested", "empty") and source.reason is None


def archived_key(archive_prefix: str, key: str) -> str:
    return f"{archive_prefix}{key}"


def apply(
    sources: Sequence[SourceRecord], read_uri: Any, *, mode: str, archive_prefix: str, s3: Any = None
) -> list[SourceRecord]:
    """Archive or delete each source loaded whole (``read_uri(bucket, key)``: where it is read).
    Returns the sources that failed (denied, throttled: the object is still there, unchanged), for
    the key index to unmark; a failure is logged, the object stays, nothing is lost."""
    todo = [s for s in sources if whole(s) and not s.key.startswith(archive_prefix)]

    def one(source: SourceRecord) -> str:
        uri = read_uri(source.bucket, source.key)
        try:
            if uri.startswith("file://"):
                return _local(Path(uri.removeprefix("file://")), source, mode=mode, archive_prefix=archive_prefix)
            return _s3(s3, source, mode=mode, archive_prefix=archive_prefix)
        except Exception as exc:  # noqa: BLE001 - the object stays where it is: nothing is lost
            logger.warning(
                "after_load left an object where it is",
                extra={"key": source.key, "mode": mode, "error": f"{type(exc).__name__}: {exc}"[:500]},
            )
            return FAILED

    if not todo:
        return []
    with ThreadPoolExecutor(max_workers=min(THREADS, len(todo))) as pool:
        outcomes = list(pool.map(one, todo))
    return [s for s, outcome in zip(todo, outcomes, strict=True) if outcome == FAILED]


def _local(path: Path, source: SourceRecord, *, mode: str, archive_prefix: str) -> str:
    if not path.is_file() or _md5(path) != source.etag:  # gone, or a newer version: not the one loaded
        return LEFT
    if mode == "archive":
        root = Path(str(path)[: -len(source.key)]) if str(path).endswith(source.key) else path.parent
        target = root / archived_key(archive_prefix, source.key)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
    else:
        path.unlink(missing_ok=True)
    return MOVED


def _md5(path: Path) -> str:
    digest = hashlib.md5()  # noqa: S324 - an S3 eTag
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _s3(s3: Any, source: SourceRecord, *, mode: str, archive_prefix: str) -> str:
    from botocore.exceptions import ClientError

    bucket, key, version = source.bucket, source.key, source.version_id
    # a version by its id; else only while the object is still the bytes loaded
    pinned = {"VersionId": version} if version else {}
    try:
        if mode == "archive":
            copy_source = {"Bucket": bucket, "Key": key, **pinned}
            extra = {} if version else {"CopySourceIfMatch": f'"{source.etag}"'}
            s3.copy(copy_source, bucket, archived_key(archive_prefix, key), ExtraArgs=extra)  # multipart past 5 GB
        s3.delete_object(Bucket=bucket, Key=key, **(pinned or {"IfMatch": f'"{source.etag}"'}))
    except ClientError as exc:
        code = exc.response.get("Error", {}).get("Code")
        status = str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))
        if code in ("404", "NoSuchKey", "NoSuchVersion", "NotFound", "PreconditionFailed", "412") or status in (
            "404",
            "412",
        ):
            return LEFT  # gone already (moved by an earlier attempt, or deleted), or a newer version is there
        raise
    return MOVED
