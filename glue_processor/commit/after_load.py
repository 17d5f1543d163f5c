"""``after_load``: a landing object moved under ``--archive_prefix`` (archive) or deleted (delete)
once the commit that loaded it is published, never before (as Auto Loader's ``cleanSource`` does;
docs/mirror.md).

Only an object loaded whole is touched: one quarantined whole, read in part, missing or refused stays
where it is, for ``make reconcile REQUEUE=1`` to send again. The version loaded is the one removed:
by its version id on a versioned bucket (a newer version uploaded meanwhile stays current), else
only while the object's eTag is still the one loaded. A move or delete here is not a retraction:
the key index marks the key archived first, so the deletion event it causes keeps the rows.

Idempotent: a replay of the batch finds the object gone (nothing to do) or archived already.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from contracts.ledger import SourceRecord

logger = logging.getLogger(__name__)


def whole(source: SourceRecord) -> bool:
    """An object the batch loaded whole (ingested or empty, nothing of it left out)."""
    return source.status in ("ingested", "empty") and source.reason is None


def archived_key(archive_prefix: str, key: str) -> str:
    return f"{archive_prefix}{key}"


def apply(sources: Sequence[SourceRecord], read_uri: Any, *, mode: str, archive_prefix: str, s3: Any = None) -> int:
    """Archive or delete each source loaded whole (``read_uri(bucket, key)``: where it is read);
    the number handled. A failure is logged and left: the object stays, nothing is lost."""
    done = 0
    for source in sources:
        if not whole(source) or source.key.startswith(archive_prefix):
            continue
        uri = read_uri(source.bucket, source.key)
        try:
            if uri.startswith("file://"):
                done += _local(Path(uri.removeprefix("file://")), source, mode=mode, archive_prefix=archive_prefix)
            else:
                done += _s3(s3, source, mode=mode, archive_prefix=archive_prefix)
        except Exception as exc:  # noqa: BLE001 - the object stays where it is: nothing is lost
            logger.warning(
                "after_load left an object where it is",
                extra={"key": source.key, "mode": mode, "error": f"{type(exc).__name__}: {exc}"[:500]},
            )
    return done


def _local(path: Path, source: SourceRecord, *, mode: str, archive_prefix: str) -> int:
    if not path.is_file() or _md5(path) != source.etag:  # gone, or a newer version: not the one loaded
        return 0
    if mode == "archive":
        root = Path(str(path)[: -len(source.key)]) if str(path).endswith(source.key) else path.parent
        target = root / archived_key(archive_prefix, source.key)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
    else:
        path.unlink(missing_ok=True)
    return 1


def _md5(path: Path) -> str:
    digest = hashlib.md5()  # noqa: S324 - an S3 eTag
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _s3(s3: Any, source: SourceRecord, *, mode: str, archive_prefix: str) -> int:
    from botocore.exceptions import ClientError

    bucket, key, version = source.bucket, source.key, source.version_id
    if version is None:
        try:
            head = s3.head_object(Bucket=bucket, Key=key)
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return 0
            raise
        if head["ETag"].strip('"') != source.etag:  # overwritten since: the newer version stays
            return 0
    if mode == "archive":
        copy_source = {"Bucket": bucket, "Key": key, **({"VersionId": version} if version else {})}
        s3.copy(copy_source, bucket, archived_key(archive_prefix, key))  # multipart past 5 GB
    s3.delete_object(Bucket=bucket, Key=key, **({"VersionId": version} if version else {}))
    return 1
