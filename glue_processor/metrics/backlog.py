"""Backlog: manifests written but not yet processed, and the age of the oldest one.

Spark's file source takes manifests oldest first (by modification time), so every manifest older
than the newest processed one is done; the rest are waiting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from contracts.layout import MANIFEST_SUFFIX, manifest_data_bytes
from glue_processor.metrics.convert import Backlog
from glue_processor.shared.objects import FileInfo, store_for

logger = logging.getLogger(__name__)


def manifest_name(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1]


def waiting(listing: Iterable[FileInfo], processed: set[str], watermark_ms: int | None) -> list[FileInfo]:
    """The manifests not yet processed, given the processed names and the newest processed mtime."""
    return [
        i
        for i in listing
        if i.name.endswith(MANIFEST_SUFFIX)
        and not i.name.startswith(("_", "."))
        and i.name not in processed
        and (watermark_ms is None or i.modified_ms >= watermark_ms)
    ]


def measure(waiting_now: list[FileInfo], now_ms: int) -> Backlog:
    oldest = min((i.modified_ms for i in waiting_now), default=now_ms)
    in_order = sorted(waiting_now, key=lambda i: (i.modified_ms, i.name))  # as the file source takes them
    return Backlog(
        manifests=len(waiting_now),
        bytes=sum(i.size for i in waiting_now),
        oldest_age_s=max(0.0, (now_ms - oldest) / 1000),
        data_bytes=data_bytes(i.name for i in waiting_now),
        sizes=tuple(b for b in (manifest_data_bytes(i.name) for i in in_order) if b is not None),
    )


def data_bytes(names: Iterable[str]) -> int | None:
    """The data bytes the manifests reference, from their names. A name from before the bytes were
    in it counts as the mean of the others (an upgrade's few minutes); None when no name says."""
    known, unknown = [], 0
    for name in names:
        size = manifest_data_bytes(name)
        if size is None:
            unknown += 1
        else:
            known.append(size)
    if not known:
        return None if unknown else 0
    return sum(known) + unknown * sum(known) // len(known)


def list_dir(uri: str) -> list[FileInfo]:
    """The manifests' directory, listed from Python (boto3 on S3): each batch lists what waits, and
    after an outage thousands wait; Hadoop's listing through py4j costs six round trips an entry."""
    return store_for(uri).list_dir(uri)


class BacklogProbe:
    """Tracks what was processed and measures the backlog on demand or periodically."""

    def __init__(self, manifest_uri: str, *, lister: Callable[[str], list[FileInfo]] = list_dir) -> None:
        self.list = lister
        self.manifest_uri = manifest_uri
        self.processed: set[str] = set()
        self.watermark_ms: int | None = None
        self.last: Backlog | None = None  # the latest measurement (the intake's replan reads it)
        self._lock = threading.Lock()

    def mark_processed(self, manifest_uris: Iterable[str]) -> Backlog:
        """Record a committed batch's manifests; return the backlog seen in the same listing."""
        names = {manifest_name(u) for u in manifest_uris}
        files = self.list(self.manifest_uri)
        listing = {i.name: i for i in files}
        with self._lock:
            self.processed |= names
            times = [listing[n].modified_ms for n in names if n in listing]
            if times:
                self.watermark_ms = max(self.watermark_ms or 0, *times)
            # names older than the watermark are implied processed; keep the set small
            self.processed = {
                n for n in self.processed if n in listing and listing[n].modified_ms >= (self.watermark_ms or 0)
            }
            self.last = measure(waiting(files, self.processed, self.watermark_ms), int(time.time() * 1000))
            return self.last

    def measure(self) -> Backlog:
        listing = self.list(self.manifest_uri)
        with self._lock:
            self.last = measure(waiting(listing, self.processed, self.watermark_ms), int(time.time() * 1000))
            return self.last

    def run_every(self, seconds: float, emit: Callable[[Backlog], None], stop: threading.Event) -> threading.Thread:
        def loop() -> None:
            while not stop.wait(seconds):
                try:
                    emit(self.measure())
                except Exception:  # a probe failure must not take the job down
                    logger.exception("backlog probe failed", extra={"manifest_uri": self.manifest_uri})

        thread = threading.Thread(target=loop, name="backlog-probe", daemon=True)
        thread.start()
        return thread
