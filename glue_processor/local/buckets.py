"""Local directories standing in for S3 buckets: ``<root>/<bucket>/<key>``."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from contracts.exceptions import StorageError


class LocalBuckets:
    """Implements the manifest builder's ``ObjectWriter`` protocol on a directory tree."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def path_of(self, bucket: str, key: str) -> Path:
        target = (self.root / bucket / key).resolve()
        if not target.is_relative_to((self.root / bucket).resolve()):
            raise StorageError(f"key escapes its bucket: {bucket}/{key}")
        return target

    def uri_template(self) -> str:
        """The job's ``source_uri_template`` for these buckets."""
        return "file://" + str(self.root.resolve()) + "/{bucket}/{key}"

    def put(self, bucket: str, key: str, body: bytes, *, content_type: str) -> None:
        """Write atomically: a hidden temporary file renamed into place.

        Spark's file source skips names starting with '.', so a half-written manifest is
        never picked up.
        """
        target = self.path_of(bucket, key)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=target.parent)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(body)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, target)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise StorageError(f"local put {bucket}/{key} failed: {exc}") from exc
