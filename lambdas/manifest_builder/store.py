"""Where manifests are written: a small protocol with an S3 adapter.

The local runner provides a directory-backed implementation of the same protocol
(:mod:`glue_processor.local.buckets`), so the builder's logic is the same code on AWS and locally.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from contracts.exceptions import StorageError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


class ObjectWriter(Protocol):
    """Writes one object atomically (readers see the whole object or nothing)."""

    def put(self, bucket: str, key: str, body: bytes, *, content_type: str) -> None: ...


class S3ObjectWriter:
    """:class:`ObjectWriter` over an injected boto3 S3 client (S3 PUTs are atomic)."""

    def __init__(self, client: S3Client) -> None:
        self._client = client

    def put(self, bucket: str, key: str, body: bytes, *, content_type: str) -> None:
        try:
            self._client.put_object(Bucket=bucket, Key=key, Body=body, ContentType=content_type)
        except (ClientError, BotoCoreError) as exc:
            raise StorageError(f"put s3://{bucket}/{key} failed: {exc}") from exc
