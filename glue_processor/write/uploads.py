"""A write task's uploads, in the background: the task works on its next file while the last ones
travel.

A batch over many partitions has a file per partition, and a write task makes its share of them one
after the other. On S3 each is a PUT whose latency (tens of ms) does not depend on its size, while
making a partition's file of a few KB costs about a millisecond of CPU: uploaded one by one, a
task's files would cost their round trips, not their bytes. Here a task hands each finished file to
a few threads and goes on; at most ``PUTS_IN_FLIGHT`` files and ``BYTES_IN_FLIGHT`` bytes wait at a
time (local disk, never memory), and the task returns only once every file is in place, so the
driver never commits a file that is not there. A failed upload fails the task as a synchronous one
would. Local files (``file://``) are renamed in place at once: nothing to wait for.

What the task deletes through it (a merge's parts, once merged) is deleted only after every file is in
place: a merge task whose upload fails leaves its parts for Spark's retry of the task, which would
otherwise find them gone and fail the batch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from types import TracebackType
from typing import Any, cast

from glue_processor.shared.objects import NotDeleted, ObjectStore

logger = logging.getLogger(__name__)

PUTS_IN_FLIGHT = 8
BYTES_IN_FLIGHT = 512 * 1024 * 1024


class BackgroundUploads:
    """The uploads of one write task; ``store`` is what its merges write through."""

    def __init__(
        self,
        stores: Callable[[str], ObjectStore],
        *,
        in_flight: int = PUTS_IN_FLIGHT,
        bytes_in_flight: int = BYTES_IN_FLIGHT,
    ) -> None:
        self._stores = stores
        self.in_flight, self.bytes_in_flight = max(1, in_flight), bytes_in_flight
        self._pool: ThreadPoolExecutor | None = None
        self._pending: deque[tuple[Future[None], int]] = deque()
        self._bytes = 0
        self._deletes: list[tuple[ObjectStore, str]] = []  # deleted once every file is in place
        self._dir = tempfile.TemporaryDirectory(prefix="uploads-")

    def store(self, uri: str) -> ObjectStore:
        real = self._stores(uri)
        if uri.startswith("file:"):
            return real
        return cast(ObjectStore, _Deferred(real, self))

    @contextlib.contextmanager
    def writer(self, real: ObjectStore, uri: str) -> Iterator[Path]:
        fd, name = tempfile.mkstemp(prefix="put-", suffix=Path(uri).suffix, dir=self._dir.name)
        os.close(fd)
        path = Path(name)
        try:
            yield path
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        self._submit(real, uri, path)

    def _submit(self, real: ObjectStore, uri: str, path: Path) -> None:
        size = path.stat().st_size
        while self._pending and (len(self._pending) >= self.in_flight or self._bytes + size > self.bytes_in_flight):
            self._wait_oldest()
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.in_flight, thread_name_prefix="upload")
        self._pending.append((self._pool.submit(_upload, real, uri, path), size))
        self._bytes += size

    def _wait_oldest(self) -> None:
        future, size = self._pending.popleft()
        self._bytes -= size
        future.result()  # an upload that failed fails the task here

    def delete_later(self, real: ObjectStore, uri: str) -> None:
        self._deletes.append((real, uri))

    def finish(self) -> None:
        """Wait until every file is in place (raises the first upload that failed), then delete what
        the task deleted: one request per 1,000 objects of a kind of store and client (``store_for``
        makes a store per call, over one client). A delete that fails is logged, not raised: the files
        are in place, and what was not deleted is in the batch's staging directory, removed when the
        batch settles."""
        while self._pending:
            self._wait_oldest()
        by_store: dict[tuple[type, int], tuple[ObjectStore, list[str]]] = {}
        for real, uri in self._deletes:
            key = (type(real), id(getattr(real, "client", real)))
            by_store.setdefault(key, (real, []))[1].append(uri)
        self._deletes.clear()
        for real, uris in by_store.values():
            try:
                real.delete_many(uris)
            except NotDeleted as exc:
                logger.warning("merged parts left for the batch's clean-up", extra={"error": f"{exc}"[:500]})

    def __enter__(self) -> BackgroundUploads:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if kind is None:
                self.finish()
        finally:
            if self._pool is not None:  # after a failure: the queued ones are dropped, running ones end
                self._pool.shutdown(wait=True, cancel_futures=True)
            self._pending.clear()
            self._deletes.clear()  # after a failure: what the task merged stays for its retry
            self._dir.cleanup()


def _upload(real: ObjectStore, uri: str, path: Path) -> None:
    try:
        real.upload(uri, path)
    finally:
        path.unlink(missing_ok=True)


class _Deferred:
    """A store whose ``writer`` hands the finished file to the task's uploads and whose ``delete`` waits
    for them; the rest is the store's."""

    def __init__(self, real: ObjectStore, uploads: BackgroundUploads) -> None:
        self._real, self._uploads = real, uploads

    def writer(self, uri: str) -> contextlib.AbstractContextManager[Path]:
        return self._uploads.writer(self._real, uri)

    def delete(self, uri: str) -> None:
        self._uploads.delete_later(self._real, uri)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)
