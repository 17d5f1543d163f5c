"""The driver's file operations through Hadoop's FileSystem API (s3:// on Glue, file:// locally),
so the same code runs on both. (The tasks, which have no JVM, and the driver's listing of the
manifests use :mod:`glue_processor.shared.objects`.)
"""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from contracts.exceptions import StorageError
from glue_processor.shared.objects import FileInfo, LocalStore


class HadoopFS:
    """A thin, typed wrapper over ``org.apache.hadoop.fs.FileSystem``."""

    def __init__(self, spark: SparkSession) -> None:
        self._jvm: Any = spark.sparkContext._jvm
        self._conf: Any = spark.sparkContext._jsc.hadoopConfiguration()
        # py4j resolves a class name one package at a time, a round trip each: `org.apache.hadoop.fs.Path`
        # is five before the constructor's. Resolved once; the file systems kept per scheme and
        # authority (Hadoop caches them too, behind a round trip). An `exists` is 2 round trips, was 8.
        self._Path: Any = None
        self._systems: dict[str, Any] = {}  # scheme://authority -> its FileSystem

    def _path(self, uri: str) -> Any:
        if self._Path is None:
            self._Path = self._jvm.org.apache.hadoop.fs.Path
        return self._Path(uri)

    def _fs(self, path: Any, uri: str) -> Any:
        parts = urlsplit(uri)
        root = f"{parts.scheme}://{parts.netloc}"  # one per scheme and bucket: a few
        if root not in self._systems:
            self._systems[root] = path.getFileSystem(self._conf)
        return self._systems[root]

    def exists(self, uri: str) -> bool:
        path = self._path(uri)
        return bool(self._fs(path, uri).exists(path))

    def list(self, uri: str) -> list[FileInfo]:
        """Direct children of a directory; [] when it does not exist."""
        path = self._path(uri)
        fs = self._fs(path, uri)
        if not fs.exists(path):
            return []
        return [self._info(s) for s in fs.listStatus(path)]

    def read_bytes(self, uri: str) -> bytes:
        path = self._path(uri)
        stream = self._fs(path, uri).open(path)
        try:
            data = self._jvm.org.apache.commons.io.IOUtils.toByteArray(stream)
        finally:
            stream.close()
        return bytes(data)

    def write_bytes(self, uri: str, body: bytes) -> None:
        """Write atomically: readers see the old object, or the whole new one.

        On S3 a PUT is atomic already. On a local or HDFS file system we write a hidden
        temporary file next to the target and rename it into place.
        """
        if uri.startswith("file:"):
            # from Python: Hadoop's local file system (``RawLocalFileSystem``, the local session's)
            # sets a new file's permissions through a ``chmod`` process it forks (no native Hadoop
            # library here): 5-8 ms a file against 0.2 ms, once or more a batch (a published marker)
            with LocalStore().writer(uri) as staged:
                staged.write_bytes(body)
            return
        path = self._path(uri)
        fs = self._fs(path, uri)
        atomic_put = uri.split("://", 1)[0] in {"s3", "s3a", "s3n"}
        # a temporary name of its own: two writers of one file never share it (the last rename wins)
        tmp = f"{path.getParent().toString()}/.tmp-{uuid.uuid4().hex[:12]}-{path.getName()}"
        target = path if atomic_put else self._path(tmp)
        out = fs.create(target, True)
        try:
            out.write(bytearray(body))
        finally:
            out.close()
        if not atomic_put and not fs.rename(target, path):
            # rename(2) replaces atomically; Hadoop refuses only where the target exists.
            fs.delete(path, False)
            if not fs.rename(target, path):
                raise StorageError(f"rename {target} -> {uri} failed")

    def move(self, src: str, dst: str) -> None:
        """Move one file, creating the target's parent directory."""
        s, d = self._path(src), self._path(dst)
        fs = self._fs(s, src)
        fs.mkdirs(d.getParent())
        if not fs.rename(s, d):
            raise StorageError(f"move {src} -> {dst} failed")

    def delete(self, uri: str, *, recursive: bool = True) -> None:
        path = self._path(uri)
        self._fs(path, uri).delete(path, recursive)

    @staticmethod
    def _info(status: Any) -> FileInfo:
        path = status.getPath()
        return FileInfo(
            uri=str(path.toString()),
            name=str(path.getName()),
            size=int(status.getLen()),
            is_dir=bool(status.isDirectory()),
            modified_ms=int(status.getModificationTime()),
        )
