"""Object I/O for the batch's Spark tasks: ``s3://`` through boto3, ``file://`` on a local disk.

The driver talks to storage through Hadoop (:mod:`glue_processor.hadoop_fs`); tasks run in
Python workers, which have no JVM handle, so they read and write objects here. URIs are used
as the job spells them (``s3://bucket/key`` with the key as is, ``file://`` + path), never
percent-decoded: a key such as ``a%20b +.json`` names itself.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from contracts.exceptions import StorageError

S3_SCHEMES = ("s3", "s3a", "s3n")


class ObjectMissing(StorageError):
    """The object does not exist (deleted, or never written)."""


@dataclass(frozen=True)
class ObjectBody:
    data: bytes
    modified_epoch_s: float


class ObjectStore(Protocol):
    def read(self, uri: str) -> ObjectBody: ...

    def writer(self, uri: str) -> contextlib.AbstractContextManager[Path]:
        """A local path to write; on a clean exit it becomes the object ``uri`` as a whole."""
        ...

    def delete(self, uri: str) -> None: ...


class LocalStore:
    """``file://`` URIs (also ``file:/``, Hadoop's spelling)."""

    def read(self, uri: str) -> ObjectBody:
        path = local_path(uri)
        try:
            with path.open("rb") as f:
                return ObjectBody(f.read(), os.fstat(f.fileno()).st_mtime)
        except FileNotFoundError as exc:
            raise ObjectMissing(f"{uri}: object not found") from exc

    @contextlib.contextmanager
    def writer(self, uri: str) -> Iterator[Path]:
        path = local_path(uri)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".tmp-{path.name}")
        try:
            yield tmp
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)

    def delete(self, uri: str) -> None:
        local_path(uri).unlink(missing_ok=True)


class S3Store:
    """``s3://`` URIs through an injected boto3 S3 client."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def read(self, uri: str) -> ObjectBody:
        bucket, key = split_s3(uri)
        try:
            response = self.client.get_object(Bucket=bucket, Key=key)
        except self.client.exceptions.NoSuchKey as exc:
            raise ObjectMissing(f"{uri}: object not found") from exc
        return ObjectBody(response["Body"].read(), response["LastModified"].timestamp())

    @contextlib.contextmanager
    def writer(self, uri: str) -> Iterator[Path]:
        bucket, key = split_s3(uri)
        fd, name = tempfile.mkstemp(prefix="ingest-", suffix=Path(key).suffix)
        os.close(fd)
        tmp = Path(name)
        try:
            yield tmp
            self.client.upload_file(str(tmp), bucket, key)  # multipart above 8 MB, all or nothing
        finally:
            tmp.unlink(missing_ok=True)

    def delete(self, uri: str) -> None:
        bucket, key = split_s3(uri)
        self.client.delete_object(Bucket=bucket, Key=key)


def local_path(uri: str) -> Path:
    if not uri.startswith("file:"):
        raise StorageError(f"not a file:// URI: {uri}")
    rest = uri[len("file:") :]
    return Path(rest[2:] if rest.startswith("//") else rest)


def split_s3(uri: str) -> tuple[str, str]:
    scheme, _, rest = uri.partition("://")
    bucket, _, key = rest.partition("/")
    if scheme not in S3_SCHEMES or not bucket or not key:
        raise StorageError(f"not an s3://bucket/key URI: {uri}")
    return bucket, key


def store_for(uri: str, *, s3_client: Any = None) -> ObjectStore:
    """The store that serves ``uri``'s scheme (one cached boto3 client per worker process)."""
    scheme = uri.split(":", 1)[0]
    if scheme == "file":
        return LocalStore()
    if scheme in S3_SCHEMES:
        return S3Store(s3_client if s3_client is not None else _default_s3_client())
    raise StorageError(f"unsupported URI scheme {scheme!r} in {uri} (expected s3:// or file://)")


@functools.cache
def _default_s3_client() -> Any:
    import boto3
    from botocore.config import Config

    return boto3.client("s3", config=Config(retries={"mode": "adaptive", "max_attempts": 10}))
